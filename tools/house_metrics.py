"""The house's numbers, read from the code (ast; nothing of lucepatch is imported): what a closing
note of a structure issue reports before and after.

    python3 tools/house_metrics.py [--list] [--json] [ROOT]      (ROOT: a checkout, default this one)

- floors and rooms: docs/design.md's ```layers block; import arrows between modules and the ones
  running up a floor (tests/test_layers.py's reading of the imports, the same rules);
- folders: a folder of lucepatch/ and a module at its top are one unit each; the import cycles between
  units (folder-level strongly connected components), and the rooms placed inside a folder on another
  floor than the folder's own (folders are floors: issue 35);
- README bytes (README.md, the newcomer's first read: goal at most 12 KB);
- modules over 500 lines (and whether their first lines say why they are that long: a line
  `Long: <reason>` in the module docstring);
- functions over 50 lines, functions with 8 or more parameters (self/cls not counted);
- the front door: the lucepatch modules the commands import besides lucepatch.api, report, errors
  and commands._common (one code path for the CLI and a program: issue 35), and the one-line
  forwarders of lucepatch/api.py and lucepatch/services/ — a top-level function whose whole body
  (after its docstring) is one call, each argument of which is one of its parameters, a constant, or
  a one-argument call on a parameter (`Path(p)`, `list(v)`): a wrapper that adds a name, not a use case;
- writers of git objects: the functions that make git's objects or files themselves or ask git
  to write an object from bytes they give it. A function counts when it
    * compresses object bytes (zlib.compress / compressobj), or
    * writes a pack, a pack index or an index file (the b"PACK", b"\\377tOc", b"DIRC" signatures), or
    * places object files into an object store (a glob of "pack-*" files), or
    * runs an object-writing git command: hash-object -w, commit-tree, mktree, write-tree,
      index-pack, unpack-objects, fast-import (a string argument equal to one of them).
  (A reader of the index format counts too: it holds the same format knowledge.)
  `git apply --cached`, `git commit`, `git am` also write objects; they are git's own steps, not
  an object layer of lucepatch's, and are not counted.
The modules holding writers are listed too: the issue's "objects are written in N places".
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent
OBJECT_COMMANDS = {"hash-object", "commit-tree", "mktree", "write-tree", "index-pack", "unpack-objects", "fast-import"}
SIGNATURES = {b"PACK", b"\377tOc", b"DIRC"}
LONG_MODULE, LONG_FUNCTION, MANY_PARAMS = 500, 50, 8


def _layers(root: Path):
    spec = importlib.util.spec_from_file_location("_house_layers", root / "tests" / "test_layers.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["_house_layers"] = mod
    spec.loader.exec_module(mod)
    return mod


def _writer_signals(fn: ast.AST) -> set[str]:
    out = set()
    for node in ast.walk(fn):
        if isinstance(node, ast.Call):
            f = node.func
            if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id == "zlib" \
                    and f.attr in ("compress", "compressobj"):
                out.add("zlib")
            if isinstance(f, ast.Attribute) and f.attr == "glob" and node.args and \
                    isinstance(node.args[0], ast.Constant) and str(node.args[0].value).startswith("pack-"):
                out.add("object files")
            words = [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
            for w in words:  # hash-object only writes with -w (without it, it only hashes)
                if w in OBJECT_COMMANDS and (w != "hash-object" or "-w" in words):
                    out.add(w)
        elif isinstance(node, ast.Constant) and isinstance(node.value, bytes):
            if any(node.value.startswith(s) for s in SIGNATURES):
                out.add(node.value[:4].decode("latin-1").encode("unicode_escape").decode())
    return out


def _functions(tree: ast.AST):
    """(qualified name, node) of every function, methods as Class.method, nested as outer.inner."""
    def walk(node, prefix):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                name = prefix + child.name
                yield name, child
                yield from walk(child, name + ".")
            elif isinstance(child, ast.ClassDef):
                yield from walk(child, prefix + child.name + ".")
            else:
                yield from walk(child, prefix)
    yield from walk(tree, "")


def is_forwarder(fn: ast.AST) -> bool:
    """A function whose whole body is one call passing its own parameters on (see the module's doc)."""
    a = fn.args
    params = {x.arg for x in a.posonlyargs + a.args + a.kwonlyargs} | {x.arg for x in (a.vararg, a.kwarg) if x}
    body = fn.body[1:] if ast.get_docstring(fn) is not None else fn.body
    if len(body) != 1 or not isinstance(body[0], (ast.Return, ast.Expr)) or not isinstance(body[0].value, ast.Call):
        return False
    call = body[0].value

    def passed(e) -> bool:
        e = e.value if isinstance(e, ast.Starred) else e
        if isinstance(e, ast.Call) and len(e.args) == 1 and not e.keywords:
            e = e.args[0]
        return isinstance(e, ast.Constant) or (isinstance(e, ast.Name) and e.id in params)

    args = list(call.args) + [k.value for k in call.keywords]
    return bool(params) and all(passed(x) for x in args)


FRONT_DOOR = ("lucepatch.api", "lucepatch.report", "lucepatch.errors", "lucepatch.commands._common")


def unit_of(module: str, top: str = "lucepatch") -> str:
    """A module's folder-level unit: the folder right under the package, or a module at its top."""
    parts = module.split(".")
    return ".".join(parts[:2]) if len(parts) > 1 else module


def folder_level(lay, mods: set[str], edges, floors_decl) -> dict:
    """Cycles between units (folders, top modules) and rooms that sit on another floor than the folder
    holding them (the nearest room above them that is a package). Uses only test_layers' reading and
    its Tarjan, which every checkout since issue 23 has, so a before/after compares like with like."""
    units = {unit_of(m) for m in mods}
    unit_edges = [lay.Edge(unit_of(e.src), unit_of(e.dst), e.kind, e.where) for e in edges
                  if unit_of(e.src) != unit_of(e.dst) and unit_of(e.src) != "lucepatch" and unit_of(e.dst) != "lucepatch"]
    floor_of = {room: n for n, _name, rooms in floors_decl for room in rooms}
    off = []
    for room, n in sorted(floor_of.items()):
        parents = [r for r in floor_of if r != "lucepatch" and room.startswith(r + ".")]
        if parents:
            parent = max(parents, key=len)
            if floor_of[parent] != n:
                off.append(f"{room} (floor {n}; its folder {parent}: floor {floor_of[parent]})")
    return {"folder_cycles": [sorted(c) for c in lay.cycles(units, unit_edges)], "rooms_off_their_folders_floor": off}


def measure(root: Path) -> dict:
    pkg = root / "lucepatch"
    lay = _layers(root)
    mods, edges, _inner = lay.read_package(pkg)
    floors_decl = lay.read_floors((root / "docs" / "design.md").read_text(encoding="utf-8"))
    floors = lay.Floors(floors_decl, "lucepatch")
    up = lay.upward(edges, floors)
    folders = folder_level(lay, mods, edges, floors_decl)
    readme = root / "README.md"
    long_modules, long_functions, many_params, writers = [], [], [], []
    forwarders, front_functions = [], 0
    past_front_door = sorted({e.dst for e in edges if e.src.startswith("lucepatch.commands")
                              and not e.dst.startswith("lucepatch.commands")
                              and e.dst not in FRONT_DOOR and "." in e.dst})
    for f in sorted(pkg.rglob("*.py")):
        rel = str(f.relative_to(root))
        src = f.read_text(encoding="utf-8")
        tree = ast.parse(src, rel)
        n = len(src.splitlines())
        if n > LONG_MODULE:
            doc = ast.get_docstring(tree) or ""
            long_modules.append({"module": rel, "lines": n, "reason": "Long:" in doc})
        if rel == "lucepatch/api.py" or rel.startswith("lucepatch/services/"):
            for fn in tree.body:
                if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    front_functions += 1
                    if is_forwarder(fn):
                        forwarders.append(f"{rel}:{fn.name}")
        for name, fn in _functions(tree):
            length = fn.end_lineno - fn.lineno + 1
            if length > LONG_FUNCTION:
                long_functions.append({"function": f"{rel}:{name}", "lines": length})
            a = fn.args
            params = [x.arg for x in a.posonlyargs + a.args + a.kwonlyargs if x.arg not in ("self", "cls")]
            params += [x.arg for x in (a.vararg, a.kwarg) if x is not None]
            if len(params) >= MANY_PARAMS:
                many_params.append({"function": f"{rel}:{name}", "params": len(params)})
            # a writer is the innermost function holding the signal (nested functions counted once)
            own = _writer_signals(fn) - set().union(*[_writer_signals(c) for c in ast.walk(fn)
                                                       if c is not fn and isinstance(c, (ast.FunctionDef, ast.AsyncFunctionDef))])
            if own:
                writers.append({"function": f"{rel}:{name}", "how": sorted(own)})
    return {
        "floors": len(floors_decl),
        "rooms": sum(len(r) for _, _, r in floors_decl),
        "modules": len(mods),
        "import_arrows": len({(e.src, e.dst) for e in edges}),
        "upward_imports": sorted(f"{a} -> {b}" for a, b in up),
        "cycles": len(lay.cycles(mods, edges)),
        "folder_cycles": folders["folder_cycles"],
        "rooms_off_their_folders_floor": folders["rooms_off_their_folders_floor"],
        "readme_bytes": readme.stat().st_size if readme.exists() else 0,
        "modules_over_500_lines": sorted(long_modules, key=lambda m: -m["lines"]),
        "functions_over_50_lines": sorted(long_functions, key=lambda m: -m["lines"]),
        "functions_with_8_or_more_params": sorted(many_params, key=lambda m: -m["params"]),
        "commands_import_past_the_api": past_front_door,
        "api_and_services_functions": front_functions,
        "forwarders": forwarders,
        "git_object_writers": writers,
        "git_object_writer_modules": sorted({w["function"].split(":")[0] for w in writers}),
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("root", nargs="?", default=str(HERE))
    ap.add_argument("--list", action="store_true", help="name every long module, long function and writer")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    m = measure(Path(a.root).resolve())
    if a.json:
        print(json.dumps(m, indent=1))
        return 0
    print(f"floors {m['floors']} ({m['rooms']} rooms), modules {m['modules']}, import arrows {m['import_arrows']}, "
          f"cycles {m['cycles']}, upward imports {len(m['upward_imports'])}")
    fc = m["folder_cycles"]
    print(f"folder-level cycles {len(fc)}" + (f" ({', '.join(str(len(c)) + ' units: ' + ' '.join(u.split('.')[-1] for u in c) for c in fc)})" if fc else "")
          + f", rooms on another floor than their folder {len(m['rooms_off_their_folders_floor'])}, README {m['readme_bytes']} bytes")
    lm = m["modules_over_500_lines"]
    print(f"modules over 500 lines: {len(lm)} ({sum(1 for x in lm if x['reason'])} with a reason at the top)")
    print(f"functions over 50 lines: {len(m['functions_over_50_lines'])}; with 8+ parameters: "
          f"{len(m['functions_with_8_or_more_params'])} (max {max([x['params'] for x in m['functions_with_8_or_more_params']] or [0])})")
    print(f"front door: commands import {len(m['commands_import_past_the_api'])} lucepatch modules besides the api; "
          f"one-line forwarders {len(m['forwarders'])} of {m['api_and_services_functions']} functions in api.py and services/")
    print(f"writers of git objects: {len(m['git_object_writers'])} functions in {len(m['git_object_writer_modules'])} "
          f"modules ({', '.join(m['git_object_writer_modules'])})")
    if a.list:
        for u in m["upward_imports"]:
            print(f"  up: {u}")
        for r in m["rooms_off_their_folders_floor"]:
            print(f"  off its folder's floor: {r}")
        for x in lm:
            print(f"  long module: {x['module']} {x['lines']}{' (reason given)' if x['reason'] else ''}")
        for x in m["functions_over_50_lines"]:
            print(f"  long function: {x['function']} {x['lines']}")
        for x in m["commands_import_past_the_api"]:
            print(f"  commands import: {x}")
        for x in m["forwarders"]:
            print(f"  forwarder: {x}")
        for x in m["git_object_writers"]:
            print(f"  writer: {x['function']} ({', '.join(x['how'])})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
