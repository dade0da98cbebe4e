"""The house's structure, read from the code (ast; nothing of lucepatch is imported here).

docs/design.md "Layers" declares the floors in its ```layers block: a module may import modules
on its own floor and the floors below. This file fails on
  - any import cycle inside lucepatch/ (module-level, function-level, TYPE_CHECKING and
    importlib-by-name imports alike: a cycle hidden in a function is still a cycle),
  - any import running up a floor that ALLOWED_UP does not list — and on any ALLOWED_UP entry that
    no longer runs up (the ratchet: the list may only shrink; delete the entry),
  - any module no floor places,
  - a folder that is not one floor: the ```layers block names only folders right under lucepatch/ and
    the modules at its top (a room inside a folder would put part of the folder on another floor),
  - any import cycle between folders (a folder, or a module at the top, is one unit: issue 35), and any
    folder-level import running up a floor beyond ALLOWED_UP_FOLDERS (a ratchet like ALLOWED_UP),
  - any import inside a function that does not say why it is there: `# lazy: <what>, <N> ms` (the
    start-up cost it saves, measured by tools/import_cost.py) or `# optional: <extra>` (a package
    only an optional extra installs).
The checks run on a small package written here first, so each can be seen to fail.
"""

from __future__ import annotations

import ast
import importlib.util
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DESIGN = ROOT / "docs" / "design.md"

# Imports that run up a floor, each with what would take it down. Empty since issue 31 (the last
# three went: the status join into lucepatch/services/, the retire schema into data/, verify's
# cluster branch into a backend the caller hands in). Shrink only: an entry whose import is gone
# fails the test until its line is deleted; a new upward import fails unless listed here.
ALLOWED_UP: dict[tuple[str, str], str] = {}
# The same at folder level (issue 35: "no upward arrow beyond a shrinking allow-list"). Empty since the
# folders became floors; shrink only.
ALLOWED_UP_FOLDERS: dict[tuple[str, str], str] = {}


LAZY_NOTE = re.compile(r"#.*\b(lazy: [^#]*\b\d+ ms\b|optional: \S)")


@dataclass(frozen=True)
class Edge:
    src: str
    dst: str
    kind: str  # module | function | type-checking | by-name
    where: str  # file:line


# ---- reading the code ---------------------------------------------------------------------------
def module_name(pkg_dir: Path, path: Path) -> str:
    parts = list(path.relative_to(pkg_dir.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def read_package(pkg_dir: Path) -> tuple[set[str], list[Edge], list[tuple[str, ast.stmt, list[str]]]]:
    """(modules, import edges between them, function-level import statements with their source lines)."""
    files = sorted(pkg_dir.rglob("*.py"))
    mods = {module_name(pkg_dir, f) for f in files}
    edges: list[Edge] = []
    inner: list[tuple[str, ast.stmt, list[str]]] = []
    for f in files:
        name = module_name(pkg_dir, f)
        pkg = name if f.name == "__init__.py" else name.rpartition(".")[0]
        src = f.read_text(encoding="utf-8")
        lines = src.splitlines()
        tree = ast.parse(src, str(f))
        where = f"{f.relative_to(pkg_dir.parent)}"

        def resolve(target: str) -> str | None:
            while target and target not in mods:
                target = target.rpartition(".")[0]
            return target if target and target != name else None

        def visit(node: ast.AST, kind: str) -> None:
            for child in ast.iter_child_nodes(node):
                k = kind
                if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                    k = "function"
                elif isinstance(child, ast.If) and _is_type_checking(child.test) and kind == "module":
                    for sub in child.body:
                        visit_stmt(sub, "type-checking")
                    for sub in child.orelse:
                        visit_stmt(sub, kind)
                    continue
                visit_stmt(child, k)

        def visit_stmt(node: ast.AST, kind: str) -> None:
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = pkg.split(".")
                    up = up[: len(up) - (node.level - 1)] if node.level > 1 else up
                    base = ".".join(up + ([base] if base else []))
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base for a in node.names]
            elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in mods:
                edges.append(Edge(name, node.value, "by-name", f"{where}:{node.lineno}")) if node.value != name else None
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                if kind == "function":
                    above = lines[node.lineno - 2] if node.lineno > 1 else ""
                    own = lines[node.lineno - 1: node.end_lineno]
                    inner.append((where, node, own + ([above] if above.strip().startswith("#") else [])))
                for t in targets:
                    dst = resolve(t)
                    if dst:
                        edges.append(Edge(name, dst, kind, f"{where}:{node.lineno}"))
            visit(node, kind)

        visit(tree, "module")
    # a package's __init__ importing its own submodules is how a package exports; not a cycle
    edges = [e for e in edges if not e.dst.startswith(e.src + ".")]
    return mods, edges, inner


def cycles(mods: set[str], edges: list[Edge]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for e in edges:
        graph[e.src].add(e.dst)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


# ---- the declared floors ------------------------------------------------------------------------
def read_floors(text: str) -> list[tuple[int, str, list[str]]]:
    """docs/design.md's ```layers block: `<floor> <name> <room> <room> ...` per line (# comments)."""
    m = re.search(r"^```layers\n(.*?)^```", text, re.M | re.S)
    if not m:
        raise AssertionError("docs/design.md has no ```layers block")
    floors = []
    for line in m.group(1).splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            n, name, *rooms = line.split()
            floors.append((int(n), name, rooms))
    return floors


class Floors:
    def __init__(self, floors: list[tuple[int, str, list[str]]], top: str):
        self.top = top
        self.rooms = {room: (n, name) for n, name, rooms in floors for room in rooms}

    def room_of(self, module: str) -> str | None:
        """The longest room that is `module` or a package above it (the top package only itself)."""
        best = None
        for room in self.rooms:
            if module == room or (room != self.top and module.startswith(room + ".")):
                if best is None or len(room) > len(best):
                    best = room
        return best

    def floor(self, module: str) -> int:
        return self.rooms[self.room_of(module)][0]


def upward(edges: list[Edge], floors: Floors) -> dict[tuple[str, str], list[Edge]]:
    out: dict[tuple[str, str], list[Edge]] = {}
    for e in edges:
        if floors.floor(e.dst) > floors.floor(e.src):
            out.setdefault((e.src, e.dst), []).append(e)
    return out


def unit_of(module: str) -> str:
    """A module's folder-level unit: the folder right under the top package, or a module at its top."""
    parts = module.split(".")
    return ".".join(parts[:2]) if len(parts) > 1 else module


def folder_edges(edges: list[Edge], top: str) -> list[Edge]:
    """Imports between units (the top package's own __init__ is the ground every unit stands on)."""
    return [Edge(unit_of(e.src), unit_of(e.dst), e.kind, e.where) for e in edges
            if unit_of(e.src) != unit_of(e.dst) and top not in (unit_of(e.src), unit_of(e.dst))]


def rooms_inside_folders(floors: Floors, top: str) -> list[str]:
    """Rooms deeper than one level under the top package: each would put part of a folder on its own floor."""
    return sorted(r for r in floors.rooms if r != top and r.count(".") > 1)


def read_command_rule(text: str) -> tuple[set[str], set[int]]:
    """docs/design.md's ```commands block: the rooms commands may import (`floor:N` = every room of floor N)."""
    m = re.search(r"^```commands\n(.*?)^```", text, re.M | re.S)
    if not m:
        raise AssertionError("docs/design.md has no ```commands block")
    words = " ".join(line.split("#", 1)[0] for line in m.group(1).splitlines()).split()
    return ({w for w in words if not w.startswith("floor:")}, {int(w[6:]) for w in words if w.startswith("floor:")})


def command_imports_outside(edges: list[Edge], floors: Floors, rooms: set[str], allowed_floors: set[int],
                            commands: str) -> list[Edge]:
    """Imports from the commands package to anything but the allowed rooms and floors."""
    def ok(dst: str) -> bool:
        return any(dst == r or dst.startswith(r + ".") for r in rooms) or floors.floor(dst) in allowed_floors
    # the string "lucepatch" (the program's name in a message or a JSON key) names the package, not an import
    return [e for e in edges if (e.src == commands or e.src.startswith(commands + ".")) and not ok(e.dst)
            and not (e.kind == "by-name" and "." not in e.dst)]


def unexplained_inner(inner) -> list[str]:
    bad = []
    for where, node, lines in inner:
        if not any(LAZY_NOTE.search(line) for line in lines):
            bad.append(f"{where}:{node.lineno}: {lines[0].strip()}")
    return bad


# ---- the checks on a package written to fail them -------------------------------------------------
def _toy(tmp_path: Path) -> Path:
    pkg = tmp_path / "toy"
    files = {
        "__init__.py": "",
        "base.py": "import os\n",
        "low.py": "from toy import base\n\ndef f():\n    from toy import high  # lazy: high, 1 ms\n",  # up, a cycle
        "high.py": "from toy import low\nfrom typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from toy import base\n",
        "reg.py": "MODULES = ('toy.high',)\n",  # by name: up
        "lazy.py": ("def g():\n    import json  # lazy: json, 3 ms\n    import csv\n\n"
                    "def h():\n    # optional: the docs extra\n    import docutils\n"),
        "sub/__init__.py": "from toy.sub import a\n",
        "sub/a.py": "",
    }
    for name, text in files.items():
        (pkg / name).parent.mkdir(parents=True, exist_ok=True)
        (pkg / name).write_text(text)
    return pkg


def test_checks_fail_on_a_package_that_breaks_them(tmp_path):
    pkg = _toy(tmp_path)
    mods, edges, inner = read_package(pkg)
    assert {(e.src, e.dst, e.kind) for e in edges} >= {
        ("toy.low", "toy.high", "function"), ("toy.high", "toy.low", "module"),
        ("toy.high", "toy.base", "type-checking"), ("toy.reg", "toy.high", "by-name")}
    assert cycles(mods, edges) == [["toy.high", "toy.low"]]  # sub/__init__ -> sub.a is no cycle
    floors = Floors(read_floors("```layers\n1 top toy.high toy.reg toy.lazy toy.sub\n0 base toy toy.base toy.low\n```\n"),
                    "toy")
    assert floors.room_of("toy.sub.a") == "toy.sub" and floors.room_of("toy.base") == "toy.base"
    assert sorted(upward(edges, floors)) == [("toy.low", "toy.high")]
    assert Floors(read_floors("```layers\n0 base toy\n```\n"), "toy").room_of("toy.low") is None  # the top: itself only
    assert unexplained_inner(inner) == ["toy/lazy.py:3: import csv"]  # a note on the line above is another's
    # folder level: toy.sub is a unit; a room inside it is a folder split over floors; a folder cycle
    assert unit_of("toy.sub.a") == "toy.sub" and unit_of("toy.low") == "toy.low"
    assert rooms_inside_folders(Floors(read_floors("```layers\n1 t toy.sub.a\n0 b toy toy.sub\n```\n"), "toy"), "toy") \
        == ["toy.sub.a"]
    fe = folder_edges(edges + [Edge("toy.sub.a", "toy.low", "module", "x"), Edge("toy.low", "toy.sub", "module", "y")], "toy")
    assert cycles({unit_of(m) for m in mods}, fe) == [["toy.high", "toy.low", "toy.sub"]]
    rooms, allowed = read_command_rule("```commands\ntoy.base floor:1  # a comment\n```\n")
    assert (rooms, allowed) == ({"toy.base"}, {1})
    # as if toy.low were the commands package: it imports toy.high (floor 1: allowed) and toy.base (named)
    assert command_imports_outside(edges, floors, rooms, allowed, "toy.low") == []
    assert [(e.src, e.dst) for e in command_imports_outside(edges, floors, set(), set(), "toy.low")] == [
        ("toy.low", "toy.base"), ("toy.low", "toy.high")]


# ---- lucepatch ----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def house():
    mods, edges, inner = read_package(ROOT / "lucepatch")
    floors = Floors(read_floors(DESIGN.read_text(encoding="utf-8")), "lucepatch")
    return mods, edges, inner, floors


def test_no_import_cycles(house):
    mods, edges, _inner, _floors = house
    found = cycles(mods, edges)
    lines = []
    for comp in found:
        inside = [f"{e.src} -> {e.dst} ({e.kind}, {e.where})" for e in edges if e.src in comp and e.dst in comp]
        lines.append("cycle: " + ", ".join(comp) + "\n    " + "\n    ".join(inside))
    assert not found, "import cycles (break them by moving what sits on the wrong side):\n" + "\n".join(lines)


def test_every_module_has_a_floor(house):
    mods, _edges, _inner, floors = house
    homeless = sorted(m for m in mods if floors.room_of(m) is None)
    assert not homeless, f"modules no floor of docs/design.md's ```layers block places: {homeless}"
    unused = sorted(r for r in floors.rooms if r not in mods)
    assert not unused, f"rooms in docs/design.md's ```layers block that are no module: {unused}"


def test_imports_go_down_the_floors_beyond_the_allow_list(house):
    _mods, edges, _inner, floors = house
    up = upward(edges, floors)
    new = {k: v for k, v in up.items() if k not in ALLOWED_UP}
    assert not new, ("imports running up a floor (docs/design.md \"Layers\"): import downward or move the code;\n"
                     + "\n".join(f"  {a} (floor {floors.floor(a)}) -> {b} (floor {floors.floor(b)}) at "
                                 + ", ".join(f"{e.where} ({e.kind})" for e in es) for (a, b), es in sorted(new.items())))


def test_folders_are_floors(house):
    """docs/design.md's map places whole folders: a folder of lucepatch/ stands on one floor."""
    _mods, _edges, _inner, floors = house
    inside = rooms_inside_folders(floors, "lucepatch")
    assert not inside, ("rooms inside a folder in docs/design.md's ```layers block (move the module to a folder "
                        f"of its floor, or to the top of lucepatch/ for floors 0-2): {inside}")


def test_no_folder_level_cycles(house):
    mods, edges, _inner, _floors = house
    fe = folder_edges(edges, "lucepatch")
    found = cycles({unit_of(m) for m in mods}, fe)
    assert not found, "folders importing each other round a loop:\n" + "\n".join(
        "  " + ", ".join(c) + ": " + "; ".join(sorted({f"{e.src} -> {e.dst} ({e.where})" for e in fe
                                                     if e.src in c and e.dst in c})) for c in found)


def test_folder_imports_go_down_beyond_the_allow_list(house):
    _mods, edges, _inner, floors = house
    up = upward(folder_edges(edges, "lucepatch"), floors)
    new = sorted(k for k in up if k not in ALLOWED_UP_FOLDERS)
    stale = sorted(k for k in ALLOWED_UP_FOLDERS if k not in up)
    assert not new, f"folders importing a folder of a higher floor: {new}"
    assert not stale, f"no longer upward: delete them from ALLOWED_UP_FOLDERS: {stale}"


def test_allow_list_only_shrinks(house):
    """The ratchet: an allowed upward import that is gone must leave ALLOWED_UP with it."""
    _mods, edges, _inner, floors = house
    up = upward(edges, floors)
    stale = sorted(k for k in ALLOWED_UP if k not in up)
    assert not stale, f"these no longer run up a floor: delete them from ALLOWED_UP in {Path(__file__).name}: {stale}"


def test_commands_import_only_the_api_and_the_services(house):
    """Commands parse, call lucepatch.api or a service (floor 10), and report (docs/design.md "Layers",
    the ```commands block): never the engine, verify, the cluster code or the model directly."""
    _mods, edges, _inner, floors = house
    rooms, allowed = read_command_rule(DESIGN.read_text(encoding="utf-8"))
    bad = command_imports_outside(edges, floors, rooms, allowed, "lucepatch.commands")
    assert not bad, ("commands importing below the service layer (call lucepatch.api or a module of floor "
                     f"{sorted(allowed)} instead, or move the code there):\n  "
                     + "\n  ".join(f"{e.src} -> {e.dst} at {e.where} ({e.kind})" for e in bad))


def _house_metrics():
    spec = importlib.util.spec_from_file_location("_house_metrics", ROOT / "tools" / "house_metrics.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_git_objects_are_written_only_by_the_object_layer():
    """One git object layer (lucepatch/odb.py, docs/design.md "Layers"): no other module compresses
    object bytes, writes a pack, a pack index or an index file, places object files in a store, or
    runs git's object-writing plumbing (tools/house_metrics.py reads it from the code)."""
    hm = _house_metrics()
    signals = {src: hm._writer_signals(ast.parse(src)) for src in (
        "zlib.compress(b)", "f.write(b'PACK' + x)", "idx = b'\\377tOc'", "d.glob('pack-*.idx')",
        "git.run(r, 'commit-tree', t)", "git.run(r, 'hash-object', '-w', '--stdin')", "git.run(r, 'hash-object', p)")}
    assert [bool(v) for v in signals.values()] == [True, True, True, True, True, True, False]  # hashing is no write
    writers = hm.measure(ROOT)["git_object_writers"]
    elsewhere = [w for w in writers if not w["function"].startswith("lucepatch/odb.py:")]
    assert not elsewhere, ("git objects written outside lucepatch/odb.py (call odb's functions instead):\n  "
                           + "\n  ".join(f"{w['function']} ({', '.join(w['how'])})" for w in elsewhere))
    assert writers, "the detector found no writer at all, not even odb.py's: it reads nothing"


def test_long_modules_say_why():
    """One module per concept (docs/design.md "Layers"): a module over 500 lines says at its top,
    in a `Long:` paragraph of its docstring, why it is one module and not several."""
    long = _house_metrics().measure(ROOT)["modules_over_500_lines"]
    silent = [f"{m['module']} ({m['lines']} lines)" for m in long if not m["reason"]]
    assert not silent, ("modules over 500 lines without a `Long: <why>` paragraph at the top of their docstring "
                        "(split them by concept, or say why not):\n  " + "\n  ".join(silent))


def test_function_level_imports_say_why(house):
    _mods, _edges, inner, _floors = house
    bad = unexplained_inner(inner)
    assert not bad, ("imports inside functions without `# lazy: <what>, <N> ms` (tools/import_cost.py measures it) "
                     "or `# optional: <extra>`; move them to module level (it creates no cycle: the cycle test reads "
                     "function-level imports too):\n  " + "\n  ".join(bad))


if __name__ == "__main__":  # the numbers for a closing note
    mods, edges, inner = read_package(ROOT / "lucepatch")
    fl = Floors(read_floors(DESIGN.read_text(encoding="utf-8")), "lucepatch")
    pairs = {(e.src, e.dst) for e in edges}
    print(f"modules {len(mods)}, import arrows {len(pairs)}, cycles {len(cycles(mods, edges))}, "
          f"upward {len(upward(edges, fl))}, function-level import statements {len(inner)}")
    for (a, b), es in sorted(upward(edges, fl).items()):
        print(f"  up: {a} -> {b} ({', '.join(e.kind for e in es)})")
    sys.exit(0)
