"""What each import inside a function saves at start-up: the numbers the `# lazy: ... N ms` comments cite.

    python3 tools/import_cost.py [--runs N] [--min-ms M] [PATH...]     (default: lucepatch/, 7 runs)

For every `import` statement inside a function under PATH (read with ast, nothing of lucepatch is
imported here), it measures, in fresh interpreters, the time `import B` takes in a process that has
already imported the module A holding the statement (so everything A loads at module level is
already loaded): the start-up cost a caller of A pays for nothing when B moves to A's module level
and the branch that needs B never runs. It prints one line per statement, the median of N runs,
and per module the cost of all its function-level imports together:

    lucepatch/commands/doctor.py:82  lucepatch.commands.doctor -> lucepatch.services.nodes  33 ms

With --min-ms M only statements costing at least M ms are printed. docs/design.md "Layers" states
the rule the numbers serve (tests/test_layers.py checks that every function-level import names one).
"""

from __future__ import annotations

import argparse
import ast
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
_PROBE = ("import importlib, sys, time\n"
          "importlib.import_module(sys.argv[1])\n"
          "t = time.perf_counter()\n"
          "for m in sys.argv[2:]: importlib.import_module(m)\n"
          "print(time.perf_counter() - t)\n")


def module_name(path: Path) -> str:
    parts = list(path.resolve().relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def function_imports(path: Path):
    """(line, imported module) for each import statement inside a function of `path`."""
    name = module_name(path)
    pkg = name if path.name == "__init__.py" else name.rpartition(".")[0]
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    seen, out = set(), []
    for fn in ast.walk(tree):
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for node in ast.walk(fn):
            if id(node) in seen or not isinstance(node, (ast.Import, ast.ImportFrom)):
                continue
            seen.add(id(node))
            if isinstance(node, ast.Import):
                out += [(node.lineno, a.name) for a in node.names]
                continue
            base = node.module or ""
            if node.level:
                up = pkg.split(".")
                up = up[: len(up) - (node.level - 1)] if node.level > 1 else up
                base = ".".join(up + ([base] if base else []))
            for a in node.names:  # `from pkg import submodule` imports the submodule
                sub = f"{base}.{a.name}"
                spec_path = ROOT / Path(*sub.split("."))
                out.append((node.lineno, sub if spec_path.with_suffix(".py").exists() or spec_path.is_dir() else base))
    return sorted(set(out))


def cost_ms(importer: str, imported: list[str], runs: int) -> float:
    times = []
    for _ in range(runs):
        r = subprocess.run([sys.executable, "-c", _PROBE, importer, *imported], capture_output=True, text=True,
                           cwd=ROOT, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
        if r.returncode != 0:
            raise SystemExit(f"cannot import {importer} then {imported}: {r.stderr.strip().splitlines()[-1:]}")
        times.append(float(r.stdout) * 1000)
    return statistics.median(times)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("paths", nargs="*", default=[str(ROOT / "lucepatch")])
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--min-ms", type=float, default=0.0)
    args = ap.parse_args()
    files = []
    for p in map(Path, args.paths):
        files += sorted(p.rglob("*.py")) if p.is_dir() else [p]
    for f in files:
        importer = module_name(f)
        found = function_imports(f)
        costs = {m: cost_ms(importer, [m], args.runs) for m in sorted({m for _, m in found})}
        for line, imported in found:
            if costs[imported] >= args.min_ms:
                print(f"{f.resolve().relative_to(ROOT)}:{line}  {importer} -> {imported}  {costs[imported]:.0f} ms",
                      flush=True)
        if len(costs) > 1:
            total = cost_ms(importer, sorted(costs), args.runs)
            if total >= args.min_ms:
                print(f"{f.resolve().relative_to(ROOT)}  {importer} -> all {len(costs)} of them  {total:.0f} ms",
                      flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
