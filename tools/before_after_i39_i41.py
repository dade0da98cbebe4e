#!/usr/bin/env python3
"""Issues 39 and 41, before and after: the commands a user runs, on small upstreams built on the fly.

    python3 tools/before_after_i39_i41.py --before /tmp/before --after . --out /tmp/ba [--case NAME ...]

Every upstream is tests/fixtures/twobugs (the C interposer the retirement and bisect tests build and
run on the simulated driver), grown with the history each case names (the fixture's own steps:
take-limit applies the series' limit patch byte for byte, revert-last reverts it, fix-limit lands
upstream's own different fix, inactive-limit puts the patch's line inside `#if 0`; take-modify is
one more commit here). Each checkout runs the same commands (`PYTHONPATH=<checkout> python3 -m
lucepatch ...`, from a folder outside both checkouts so the current directory cannot shadow
PYTHONPATH), each in its own fresh workspace and cache, against the same upstream. The upstream is
only read by the commands (a clone checked out at REF serves `status`).

Writes <out>/record.md (per case: the command, its exit code, wall seconds, and the output lines
that name the patch or the verdict) and <out>/logs/<case>/<checkout>/<n>.{out,err} (the whole
output). Machine paths are masked (<out> -> $OUT, the checkouts -> $BEFORE/$AFTER).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
FIX = HERE.parent / "tests" / "fixtures" / "twobugs" / "fixture.py"
_spec = importlib.util.spec_from_file_location("twobugs_fixture", FIX)
tb = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(tb)

LIMIT = "fix-limit-cumulative.patch"
MEMINFO = "fix-meminfo-limit.patch"
SRC = "src/twobugs.c"


@dataclass
class Case:
    name: str
    issue: str
    title: str
    history: list[str]
    commands: list[str]  # keys of COMMANDS
    extra: str | None = None  # a step this script adds after the history
    notes: list[str] = field(default_factory=list)


CASES = [
    Case("take-revert", "39", "upstream takes the patch byte for byte, then reverts it",
         ["take-limit", "revert-last", "docs"], ["retire", "dry", "status", "session"]),
    Case("take-revert-refix", "39", "takes it, reverts it, then lands a different fix",
         ["take-limit", "revert-last", "fix-limit"], ["retire", "dry", "status"]),
    Case("inactive", "39", "REF's tree has the patch's line, inside #if 0 (not active)",
         ["inactive-limit"], ["retire", "dry", "status"]),
    Case("take-modify", "39", "takes it, then changes the line it changed",
         ["take-limit"], ["retire", "dry", "status"], extra="modify"),
    Case("exact-take", "39", "takes it byte for byte and keeps it (must still be absorbed)",
         ["take-limit", "docs"], ["retire", "dry", "status"]),
    Case("bisect-take-revert-refix", "41", "bisect over take, revert, a different fix, with --record",
         ["one", "take-limit", "revert-last", "fix-limit", "five"], ["bisect"]),
    Case("bisect-broken-again", "41", "bisect over base..take while REF (after the revert) is broken again",
         ["one", "take-limit", "revert-last", "five"], ["bisect-range-take"]),
    Case("joint-not-run", "41", "retirement's joint check with a scenario that runs on neither build",
         ["fix-limit"], ["retire"], extra="skip-scenario"),
]


def mask(text: str, subs: dict[str, str]) -> str:
    for k, v in sorted(subs.items(), key=lambda kv: -len(kv[0])):
        text = text.replace(k, v)
    return text


def add_modify(repo: Path) -> str:
    """take-modify: upstream rewrites the line the (taken) patch changed; the behaviour stays fixed."""
    p = repo / SRC
    old = "    return limit != 0 && used + size > limit;\n"
    text = p.read_text()
    assert old in text, "take-limit did not land the patch's line"
    p.write_text(text.replace(old, "    return limit && used + size > limit; /* in use counts */\n"))
    tb.git(repo, "commit", "-q", "-am", "limit: shorter check")
    return tb.git(repo, "rev-parse", "HEAD").strip()


SKIP_SCENARIO = """
[[scenario]]
name = "two-gpus"
description = "the limit on a fourth device (needs four GPUs: the simulated driver has two; skipped on every build here)"
"""


def add_skip_scenario(ws: Path) -> None:
    """A scenario that runs on neither build: twobugs.c's two-gpus exits through lp_skip (reproducers/common/
    lp_report.h) on a machine of fewer than four GPUs (the simulated driver has two), as the shipped
    ggml-client:worker-thread is skipped on the simulated driver (it needs the real one)."""
    rdir = ws / "reproducers" / "twobugs"
    (rdir / "reproducer.toml").write_text((rdir / "reproducer.toml").read_text() + SKIP_SCENARIO)
    src = rdir / "twobugs.c"
    text = src.read_text()
    for old, repl in (
            ('strcmp(argv[1], "meminfo-limit"))) {', 'strcmp(argv[1], "meminfo-limit") && strcmp(argv[1], "two-gpus"))) {'),
            ('    if (!strcmp(argv[1], "control")) {',
             ('    if (!strcmp(argv[1], "two-gpus") && count < 4)\n'
              '        lp_skip("two-gpus", "needs four GPUs, the machine has fewer");\n'
              '    if (!strcmp(argv[1], "control")) {'))):
        assert old in text, old
        text = text.replace(old, repl, 1)
    src.write_text(text)


def commands(key: str, c: list[str], up: Path, co: Path, runs: int) -> list[list[str]]:
    ref, base = c[-1], c[0]
    if key == "retire":
        return [["verify", "--retire", ref, "--target", "twobugs", "--source", str(up), "--driver", "fake",
                 "--runs", str(max(runs, 10))]]  # retirement's floor: 10 fixed runs per build and scenario
    if key == "dry":
        return [["rebase", "twobugs", "--source", str(up), "--onto", ref, "--dry-run"]]
    if key == "status":
        return [["status", "twobugs", "--source", str(co)]]
    if key == "session":
        return [["rebase", "twobugs", "--source", str(up), "--onto", ref, "--no-interactive"]]
    if key == "bisect":
        return [["bisect", f"{base}..{ref}", "--source", str(up), "--driver", "fake", "--runs", str(runs),
                 "--reproducer", "twobugs", "--scenario", "cumulative-limit", "--record", LIMIT]]
    if key == "bisect-range-take":
        # the range ends at the take (c[2]); REF (c[-1]) lies after the revert. With --ref REF first
        # (the option after issue 41; before, it does not exist), then without, as `verify --retire` printed it
        cmd = ["bisect", f"{base}..{c[2]}", "--source", str(up), "--driver", "fake", "--runs", str(runs),
               "--reproducer", "twobugs", "--scenario", "cumulative-limit", "--record", LIMIT]
        return [[*cmd[:2], "--ref", ref, *cmd[2:]], cmd]
    raise KeyError(key)


def run_case(case: Case, checkouts: dict[str, Path], out: Path, runs: int, md: list[str]) -> None:
    root = out / "cases" / case.name
    if root.exists():
        shutil.rmtree(root)
    root.mkdir(parents=True)
    repo, c = tb.upstream(root, case.history)
    if case.extra == "modify":
        c.append(add_modify(repo))
    co = root / "at-ref"
    tb.git(root, "clone", "-q", "--no-local", str(repo), str(co))
    tb.git(co, "checkout", "-q", "--detach", c[-1])
    subs = {str(out): "$OUT", **{str(p): f"${lbl.upper()}" for lbl, p in checkouts.items()}}
    names = ["base"] + case.history + (["modify"] if case.extra == "modify" else [])
    md += [f"## {case.name} (issue {case.issue}): {case.title}", "",
           "Upstream history (first parent, oldest first): "
           + ", ".join(f"`{c[i][:12]}` {n}" for i, n in enumerate(names)) + f"; REF = `{c[-1][:12]}`.", ""]
    for label, checkout in checkouts.items():
        ws = tb.workspace(root, c[0], name=f"ws-{label}")
        if case.extra == "skip-scenario":
            add_skip_scenario(ws)
        cache = root / f"cache-{label}"
        md += [f"### {label} ({git_head(checkout)})", ""]
        n = 0
        for key in case.commands:
            for args in commands(key, c, repo, co, runs):
                n += 1
                argv = [sys.executable, "-m", "lucepatch", "--workspace", str(ws), "--cache-dir", str(cache), *args]
                env = {**os.environ, "PYTHONPATH": str(checkout), "COLUMNS": "1000", "NO_COLOR": "1",
                       "LUCEPATCH_CACHE": str(cache)}
                t0 = time.monotonic()
                r = subprocess.run(argv, cwd=root, env=env, capture_output=True, text=True, stdin=subprocess.DEVNULL,
                                   check=False)
                wall = time.monotonic() - t0
                logd = out / "logs" / case.name / label
                logd.mkdir(parents=True, exist_ok=True)
                (logd / f"{n}.out").write_text(mask(r.stdout, subs))
                (logd / f"{n}.err").write_text(mask(r.stderr, subs))
                shown = " ".join(["lucepatch", *(_short(a, c, subs) for a in args)])
                md += [f"`{shown}` → exit {r.returncode}, {wall:.1f} s", "", "```",
                       *relevant(mask(r.stdout + r.stderr, subs), key), "```", ""]
                if key.startswith("bisect"):
                    text = (ws / "patches" / "twobugs" / LIMIT).read_text()
                    trailers = [ln for ln in text.splitlines() if ln.startswith("Applied-Upstream")]
                    md += [f"`Applied-Upstream` trailers in {LIMIT} after it: {trailers or 'none'}", ""]
                print(f"[{case.name}/{label}] {shown}: rc {r.returncode}, {wall:.1f} s", file=sys.stderr, flush=True)
        if case.commands and "session" in case.commands:
            series = (ws / "patches" / "twobugs" / "series").read_text().split()
            absorbed = sorted(p.name for p in (ws / "patches" / "twobugs" / "absorbed").glob("*")) \
                if (ws / "patches" / "twobugs" / "absorbed").is_dir() else []
            md += [f"After the session: series = {series}; absorbed/ = {absorbed}", ""]


def _short(a: str, c: list[str], subs: dict[str, str]) -> str:
    a = mask(a, subs)
    for x in c:
        a = a.replace(x, x[:12])
    return a


KEEP = re.compile(r"fix-limit|fix-meminfo|fixed by|broke|broken again|transition|probed|refus|record|Applied|"
                  r"absorbed|superseded|still-needed|retire-candidate|not run on either|skipped on both|joint|"
                  r"kept|error|Error|range-diff|< -|flip|inconclusive|no flip|conflict", re.IGNORECASE)


# progress lines (a build started, objects reused, the probe table's rows again on stderr, the workspace line)
NOISE = re.compile(r"^lucepatch: (building|twobugs .*object cache|probing|built|workspace )|^lucepatch: bisect: \S+ -> ")


def relevant(text: str, key: str) -> list[str]:
    lines = [ln.rstrip() for ln in text.splitlines() if ln.strip()]
    # every table row (a bisect's passing probes name no patch, yet say where it looked), then the lines
    # that name a patch, a verdict or the answer
    keep = [ln for ln in lines if ("│" in ln or KEEP.search(ln)) and not NOISE.search(ln)]
    keep = keep or lines[-6:]
    out = []
    for ln in keep[:40]:
        out.append(ln if len(ln) <= 3000 else ln[:3000] + " … (cut here)")
    return out


def git_head(p: Path) -> str:
    r = subprocess.run(["git", "-C", str(p), "log", "-1", "--format=%h %s"], capture_output=True, text=True, check=True)
    dirty = subprocess.run(["git", "-C", str(p), "status", "--porcelain", "--untracked-files=no"],
                           capture_output=True, text=True, check=True).stdout.strip()
    return r.stdout.strip()[:70] + (" + uncommitted changes" if dirty else "")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", type=Path, required=True)
    ap.add_argument("--after", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--case", action="append", choices=[c.name for c in CASES])
    ap.add_argument("--runs", type=int, default=2, help="runs per bisect probe (retirement: at least 10)")
    a = ap.parse_args()
    out = a.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    checkouts = {"before": a.before.resolve(), "after": a.after.resolve()}
    md: list[str] = []
    for case in CASES:
        if a.case and case.name not in a.case:
            continue
        run_case(case, checkouts, out, a.runs, md)
        (out / "record.md").write_text("\n".join(md) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
