#!/usr/bin/env python3
"""Mutation testing of the retirement rule and the verdicts (issue 26): do the tests notice when the
decision code is wrong?

A small AST mutator. Over the decision functions of lucepatch/upstream/retire.py (the rule) and
retire_report.py (its report: exit code, table, kept reports), lucepatch/upstream/behaviour.py,
lucepatch/verify/verdict.py and lucepatch/engine/absorption.py (the one judge of "already upstream":
a revert ignored, or the code signal winning over a measured still-needed, must be noticed) it makes
one mutant per change:

  compare   flip a comparison (== !=, < >=, > <=, in / not in, is / is not)
  boolop    and <-> or
  drop      drop a condition: an `if`/`elif`/`while`/conditional expression's test becomes True and
            False in turn; each operand of an and/or test is dropped in turn
  not       remove a `not`
  bool      swap True and False
  return    return None instead of the value

and runs the tests that judge that file (FILES below: fast ones, seconds per mutant) against each
mutant in a private copy of the repository. A mutant the tests fail on (or time out on) is killed;
one they pass on survived. The kill rate is printed — killed / (run − the equivalent survivors) — with
every survivor: either the mutant is equivalent (tools/mutants-equivalent.txt says why, by its id)
or a test is missing.

Orchestration (building, running, the coverage build, bisecting: retire_report, Judge, Lab.build/
measure, measure_behaviour, ...) is out of scope here: the fixture tests exercise it and take minutes
per run (SKIP below names what is left out and why).

    python3 tools/mutate.py                      # every mutant, a table, the kill rate
    python3 tools/mutate.py --sample 40 --seed 26 --budget 600 --min-kill-rate 0.9   # CI's bounded run
    python3 tools/mutate.py --list               # the mutants, without running anything
    python3 tools/mutate.py --only 3f2a9c1b      # one mutant, its diff and the tests' output

Exit: 0; 1 when the kill rate is below --min-kill-rate or a mutant named by --must-kill survives;
2 when the tests fail without any mutant (nothing can be measured).
"""

from __future__ import annotations

import argparse
import ast
import copy
import hashlib
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FAST = ["tests/test_retire_logic.py"]
# file -> the tests that judge it (each runs in seconds)
FILES = {
    "lucepatch/upstream/retire.py": FAST,
    "lucepatch/upstream/retire_report.py": FAST,
    "lucepatch/upstream/behaviour.py": FAST + ["tests/test_retire_rule.py::test_identically_means_same_class_and_checks_on_every_run_controls_passing",
                                               "tests/test_retire_rule.py::test_an_invalid_or_skipped_run_makes_it_inconclusive"],
    "lucepatch/verify/verdict.py": ["tests/test_verdict.py"] + FAST,
    # the judge on small git histories built once (seconds), and its decision table
    "lucepatch/engine/absorption.py": ["tests/test_absorption.py::test_the_judge_reads_each_history_on_refs_tree",
                                       "tests/test_absorption.py::test_decide_lets_measured_behaviour_keep_a_patch_and_says_when_code_alone_decided",
                                       "tests/test_absorption.py::test_decide_never_absorbs_what_the_tree_lacks",
                                       "tests/test_absorption.py::test_decide_says_what_kept_it_without_a_scenario_and_reads_no_finding_as_not_upstream",
                                       "tests/test_absorption.py::test_reversed_diff_gives_the_patch_id_of_a_revert"],
}
# functions left out: they build, run or bisect (minutes per test run); the fixture tests cover them
SKIP = {
    "lucepatch/upstream/retire.py": {"retire_report", "not_built_doc", "_Clock", "Judge.bare", "Judge.moved", "Judge._apply",
                                     "Judge.__init__", "Judge.conflicts", "Judge.applicable",
                                     "Judge.ordered", "Judge.context", "_name_upstream_commits", "behaviour_hook",
                                     "behaviour_hook.row_of", "behaviour_hook.behaviour_fixed_upstream",
                                     "behaviour_hook.code_signal", "_register", "_short", "_patch", "_is_control"},
    "lucepatch/upstream/retire_report.py": {"reproducers_dir", "target_reproducers", "_doc", "_row"},
    "lucepatch/upstream/behaviour.py": {"Lab.__init__", "Lab.build", "Lab.measure", "Lab.measure_plan", "Lab.measure_point",
                                        "Lab._on_build",
                                        "Lab.driver_doc", "Build.key", "Build.to_json", "measure_behaviour",
                                        "resolve_driver", "Behaviour.to_json"},
    "lucepatch/verify/verdict.py": {"split_not_applicable"},
    # the verbs' adapters (check's conflicts, the matrix's cells) are covered by the CLI tests of
    # tests/test_absorption.py (tens of seconds); identity and reporting helpers decide nothing
    "lucepatch/engine/absorption.py": {"judge_conflicts", "judge_cells", "_reverted_by", "UpstreamJudge.__init__",
                                       "UpstreamJudge.ids", "UpstreamJudge._reader", "UpstreamJudge._touched",
                                       "UpstreamJudge.three_way", "Finding.to_json", "Finding.code_signal"},
}
EQUIVALENT_FILE = ROOT / "tools" / "mutants-equivalent.txt"

_FLIP = {ast.Eq: ast.NotEq, ast.NotEq: ast.Eq, ast.Lt: ast.GtE, ast.GtE: ast.Lt, ast.Gt: ast.LtE, ast.LtE: ast.Gt,
         ast.In: ast.NotIn, ast.NotIn: ast.In, ast.Is: ast.IsNot, ast.IsNot: ast.Is}


@dataclass
class Mutant:
    id: str
    file: str
    function: str
    line: int
    op: str
    before: str
    after: str
    result: str = ""  # killed | survived | timeout | not-run
    seconds: float = 0.0
    why: str = ""  # a survivor's reason, from mutants-equivalent.txt


# ---- making mutants ---------------------------------------------------------------------------


def _qualnames(tree: ast.Module) -> dict[int, str]:
    """id(node) -> the qualified name of the function it is in ("" outside any function)."""
    out: dict[int, str] = {}

    def walk(node, prefix: str, fn: str):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                q = f"{prefix}{child.name}"
                out[id(child)] = fn
                walk(child, q + ".", q)
            elif isinstance(child, ast.ClassDef):
                out[id(child)] = fn
                walk(child, f"{prefix}{child.name}.", fn)
            else:
                out[id(child)] = fn
                walk(child, prefix, fn)

    walk(tree, "", "")
    return out


def _changes(node: ast.AST):
    """(op, a function returning the mutated copy of node) for every mutation of this node."""
    if isinstance(node, ast.Compare) and len(node.ops) == 1 and type(node.ops[0]) in _FLIP:
        def flip(n):
            n.ops = [_FLIP[type(n.ops[0])]()]
            return n
        yield "compare", flip
    if isinstance(node, ast.BoolOp):
        def swap(n):
            n.op = ast.Or() if isinstance(n.op, ast.And) else ast.And()
            return n
        yield "boolop", swap
    if isinstance(node, (ast.If, ast.While, ast.IfExp)):
        for const in (True, False):
            def fix(n, const=const):
                n.test = ast.Constant(const)
                return n
            yield "drop", fix
        if isinstance(node.test, ast.BoolOp) and len(node.test.values) > 1:
            for i in range(len(node.test.values)):
                def drop_one(n, i=i):
                    vals = [v for j, v in enumerate(n.test.values) if j != i]
                    n.test = vals[0] if len(vals) == 1 else ast.BoolOp(op=n.test.op, values=vals)
                    return n
                yield "drop", drop_one
    if isinstance(node, ast.comprehension):
        for i in range(len(node.ifs)):
            def drop_if(n, i=i):
                n.ifs = [f for j, f in enumerate(n.ifs) if j != i]
                return n
            yield "drop", drop_if
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        yield "not", lambda n: n.operand
    if isinstance(node, ast.Constant) and isinstance(node.value, bool):
        yield "bool", lambda n: ast.Constant(not n.value)
    if isinstance(node, ast.Return) and node.value is not None and not (
            isinstance(node.value, ast.Constant) and node.value.value is None):
        def none(n):
            n.value = ast.Constant(None)
            return n
        yield "return", none


def _show(node: ast.AST) -> str:
    if isinstance(node, (ast.If, ast.While)):
        return f"{'if' if isinstance(node, ast.If) else 'while'} {ast.unparse(node.test)}:"
    if isinstance(node, ast.comprehension):
        return " ".join(f"if {ast.unparse(f)}" for f in node.ifs)
    return ast.unparse(node).splitlines()[0][:120]


def mutants_of(rel: str) -> list[tuple[Mutant, object]]:
    """Every mutant of the file (in source order), each with a function making its mutated module
    (made only when the mutant runs: a copy of the module per mutant is the slow part)."""
    src = (ROOT / rel).read_text()
    tree = ast.parse(src)
    names = _qualnames(tree)
    skip = SKIP.get(rel, set())
    walk = list(ast.walk(tree))
    pos = {id(n): i for i, n in enumerate(walk)}
    nodes = [n for n in walk if names.get(id(n))]
    nodes.sort(key=lambda n: (_line(n), getattr(n, "col_offset", 0)))
    out, seen = [], {}
    for node in nodes:
        fn = names[id(node)]
        if fn in skip or fn.split(".")[0] in skip:
            continue
        if isinstance(node, ast.Constant) and isinstance(node.value, bool) and _is_default_or_kw(tree, node):
            continue
        for op, change in _changes(node):
            before, after = _show(node), _show(change(copy.deepcopy(node)))
            if before == after:
                continue
            key = (rel, fn, op, before, after)
            seen[key] = seen.get(key, 0) + 1
            mid = hashlib.sha1(repr((*key, seen[key])).encode()).hexdigest()[:8]
            at = pos[id(node)]
            out.append((Mutant(mid, rel, fn, _line(node), op, before, after),
                        lambda i=at, change=change: _apply(tree, i, change)))
    return out


def _line(node: ast.AST) -> int:
    return getattr(node, "lineno", None) or getattr(getattr(node, "target", None), "lineno", 0)


def _apply(tree: ast.Module, pos: int, change) -> ast.Module:
    """A copy of `tree` with its pos-th node (in ast.walk order) changed."""
    mutated = copy.deepcopy(tree)
    walk = list(ast.walk(mutated))
    twin = walk[pos]
    new = change(twin)
    if new is not twin:  # replace it in its parent
        for parent in walk:
            for field, value in ast.iter_fields(parent):
                if value is twin:
                    setattr(parent, field, new)
                elif isinstance(value, list) and any(v is twin for v in value):
                    setattr(parent, field, [new if v is twin else v for v in value])
    ast.fix_missing_locations(mutated)
    return mutated


def _is_default_or_kw(tree: ast.Module, node: ast.Constant) -> bool:
    """A bool that is a parameter default or a keyword argument's value (a flag passed along): its
    swap changes an API default, judged by the callers' tests, not by these."""
    for n in ast.walk(tree):
        if isinstance(n, ast.arguments) and any(d is node for d in n.defaults + n.kw_defaults):
            return True
    return False


# ---- running them -------------------------------------------------------------------------------


def _copy_repo(dest: Path) -> None:
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT, capture_output=True,
                           check=True).stdout.decode().split("\0")
    for f in files:
        if not f or f.startswith((".upstream/",)):
            continue
        src = ROOT / f
        if not src.is_file():
            continue
        (dest / f).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dest / f)


def _pytest(where: Path, tests: list[str], timeout: float) -> tuple[int | None, str]:
    env = {**os.environ, "PYTHONPATH": str(where), "PYTHONDONTWRITEBYTECODE": "1"}
    env.pop("CI", None)  # the skip policy is CI's business, not a mutant's
    try:
        r = subprocess.run([sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *tests], cwd=where,
                           env=env, capture_output=True, text=True, timeout=timeout)
        return r.returncode, r.stdout[-3000:] + r.stderr[-2000:]
    except subprocess.TimeoutExpired:
        return None, "timed out"


def run(selected: list[tuple[Mutant, object]], jobs: int, budget: float, timeout: float,
        show: bool = False) -> list[Mutant]:
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="lucepatch-mutate-") as tmp:
        copies = []
        for j in range(jobs):
            d = Path(tmp) / f"copy{j}"
            _copy_repo(d)
            copies.append(d)
        tests = sorted({t for m, _ in selected for t in FILES[m.file]})
        rc, out = _pytest(copies[0], tests, timeout * 3)
        if rc != 0:
            print(out, file=sys.stderr)
            raise SystemExit(f"mutate: the tests fail without any mutant ({' '.join(tests)}): nothing to measure")
        free = list(copies)

        def one(item):
            m, make = item
            if time.monotonic() - start > budget:
                m.result = "not-run"
                return m
            d = free.pop()
            try:
                path = d / m.file
                original = path.read_text()
                path.write_text(ast.unparse(make()) + "\n")
                t0 = time.monotonic()
                rc, out = _pytest(d, FILES[m.file], timeout)
                m.seconds = round(time.monotonic() - t0, 1)
                m.result = "timeout" if rc is None else "killed" if rc != 0 else "survived"
                path.write_text(original)
                if show:
                    print(out)
            finally:
                free.append(d)
            return m

        with ThreadPoolExecutor(max_workers=jobs) as pool:
            for m in pool.map(one, selected):
                if m.result != "not-run":
                    print(f"  {m.id} {m.result:8} {m.file.split('/')[-1]}:{m.line} {m.function} [{m.op}] "
                          f"{m.before[:60]!r} -> {m.after[:60]!r}", flush=True)
    return [m for m, _ in selected]


def _equivalent() -> dict[str, str]:
    out = {}
    if EQUIVALENT_FILE.is_file():
        for line in EQUIVALENT_FILE.read_text().splitlines():
            if line.strip() and not line.startswith("#"):
                mid, _, why = line.partition(" ")
                out[mid] = why.strip()
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--file", action="append", choices=sorted(FILES), help="Only this file (repeatable).")
    ap.add_argument("--sample", type=int, default=None, help="Run this many mutants, drawn with --seed.")
    ap.add_argument("--seed", type=int, default=26)
    ap.add_argument("--budget", type=float, default=float("inf"), help="Stop starting mutants after this many seconds.")
    ap.add_argument("--timeout", type=float, default=120, help="Seconds one mutant's tests may take (then: killed).")
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--only", action="append", metavar="ID", help="Only these mutants (their tests' output shown).")
    ap.add_argument("--list", action="store_true", help="List the mutants; run nothing.")
    ap.add_argument("--min-kill-rate", type=float, default=None)
    ap.add_argument("--must-kill", action="append", default=[], metavar="ID",
                    help="Fail when this mutant survives (always part of a --sample run; an unknown id fails).")
    ap.add_argument("--json", metavar="FILE", help="Write every mutant and its result here.")
    a = ap.parse_args(argv)

    allm = [mt for rel in (a.file or list(FILES)) for mt in mutants_of(rel)]
    known = {m.id for m, _ in allm}
    unknown = [i for i in (a.only or []) + a.must_kill if i not in known]
    if unknown:  # the code they named changed: say so rather than pass without them
        print(f"mutate: ERROR: no mutant {', '.join(unknown)} (the code changed? --list shows the ids)", file=sys.stderr)
        return 1
    selected = [mt for mt in allm if not a.only or mt[0].id in a.only]
    if a.sample is not None and a.sample < len(selected):
        must = [mt for mt in selected if mt[0].id in a.must_kill]
        rest = [mt for mt in selected if mt[0].id not in a.must_kill]
        selected = must + random.Random(a.seed).sample(rest, max(0, a.sample - len(must)))
        selected.sort(key=lambda mt: (mt[0].file, mt[0].line))
    print(f"mutate: {len(allm)} mutants in {', '.join(a.file or FILES)}; running {len(selected)}"
          + (f" (sample, seed {a.seed})" if a.sample is not None else ""), flush=True)
    if a.list:
        for m, _ in selected:
            print(f"{m.id} {m.file}:{m.line} {m.function} [{m.op}] {m.before!r} -> {m.after!r}")
        return 0
    t0 = time.monotonic()
    done = run(selected, max(1, a.jobs), a.budget, a.timeout, show=bool(a.only))
    ran = [m for m in done if m.result != "not-run"]
    killed = [m for m in ran if m.result in ("killed", "timeout")]
    eq = _equivalent()
    survivors = [m for m in ran if m.result == "survived"]
    for m in survivors:
        m.why = eq.get(m.id, "")
    raw = len(killed) / len(ran) if ran else 0.0
    equivalent = [m for m in survivors if m.why]
    judged = len(ran) - len(equivalent)  # an equivalent mutant cannot be killed: not counted against the tests
    rate = len(killed) / judged if judged else 1.0
    print(f"\nmutate: {len(killed)}/{len(ran)} killed ({100 * raw:.1f} %), {len(survivors)} survived "
          f"({len(equivalent)} equivalent: kill rate {100 * rate:.1f} % of the {judged} that can be killed), "
          f"{len(done) - len(ran)} not run (budget); {time.monotonic() - t0:.0f} s")
    for m in survivors:
        print(f"  survived {m.id} {m.file}:{m.line} {m.function} [{m.op}] {m.before!r} -> {m.after!r}"
              f" — {m.why or 'NOT EXPLAINED: a test is missing, or add it to tools/mutants-equivalent.txt with why'}")
    if a.json:
        Path(a.json).write_text(json.dumps({"kill_rate": rate, "raw_kill_rate": raw, "ran": len(ran),
                                            "killed": len(killed), "equivalent": len(equivalent),
                                            "mutants": [asdict(m) for m in done]}, indent=1) + "\n")
    bad = [m for m in survivors if m.id in a.must_kill]
    for m in bad:
        print(f"mutate: ERROR: {m.id} must be killed and survived", file=sys.stderr)
    if a.min_kill_rate is not None and rate < a.min_kill_rate:
        print(f"mutate: ERROR: kill rate {rate:.3f} below {a.min_kill_rate}", file=sys.stderr)
        return 1
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
