#!/usr/bin/env python3
"""CI skip policy for lucepatch.

Reads a pytest log (a file argument, or stdin / ``-``), prints every skipped
test listed in pytest's "short test summary info" section, and -- in strict
mode -- exits 1 when a skip reason does not start with an allowed prefix.

Only environment-shaped skips are acceptable in CI: the machine has no GPU,
no cluster, no upstream checkout.  Anything else (a missing Python module, a
missing tool, ``no-docker:``, an unconditional ``@pytest.mark.skip``) means
the CI machine or the test is broken and must fail the build.

Strict mode is on when the environment has ``CI=true`` (case-insensitive),
unless forced with ``--strict`` / ``--report-only``.

``--with-upstream`` says the run had every upstream CI can have (.ci/run clones
../shared/upstream/hami-core.bundle and sets LUCEPATCH_SRC_HAMI_CORE): a ``no-upstream:`` skip is then
allowed only when its reason names an upstream CI cannot have (``ABSENT_IN_CI``, each with why), so a
HAMi-core test that skips for want of its checkout fails CI.

``--allow PREFIX`` replaces the allowed prefixes (repeatable); ``--expect PREFIX`` fails unless at
least one skip reason starts with PREFIX -- the newcomer stage (.ci/newcomer) allows ``no-docker:`` and
``no-tool:`` and expects ``no-docker:``, proving Docker really was out of reach for that run.
The policy itself is documented in docs/design.md ("Tests and the CI skip policy").

Exit status: 0 ok, 1 disallowed skips (strict), 2 usage / unreadable log.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from dataclasses import dataclass

ALLOWED_PREFIXES: tuple[str, ...] = ("no-gpu:", "no-cluster:", "no-upstream:")
UPSTREAM_PREFIX = "no-upstream:"

# The upstreams CI cannot have, by the name a skip reason gives them. Everything else a no-upstream:
# skip could want (HAMi-core's history, its PR heads, the v2.5 base) is in ../shared/upstream/ .
ABSENT_IN_CI: dict[str, str] = {
    "LUCEPATCH_SRC_LUCEBOX": "lucebox-hub 8305b6c with its submodules (llama.cpp, ...) is not in ../shared/upstream/ "
                             "and CI has no network to GitHub",
    "LUCEPATCH_GGML_DIR": "a ggml build needs Lucebox's llama.cpp submodule (above) and a build of it",
    "LUCEPATCH_FORK_LIB": "beclab/HAMi v2.5.4's prebuilt lib/nvidia/libvgpu.so is a vendor binary: never committed, "
                          "not in ../shared/upstream/",
}

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_SUMMARY_HEADER = re.compile(r"^=+ short test summary info =+\s*$")
_SECTION_RULE = re.compile(r"^=+( .* =+)?\s*$")
# folded (default):   SKIPPED [2] tests/test_x.py:12: no-gpu: reason
# folded, no lineno:  SKIPPED [1] tests/test_x.py: reason
_FOLDED_LINENO = re.compile(r"^SKIPPED \[(\d+)\] (.+?):(\d+): ?(.*)$")
_FOLDED = re.compile(r"^SKIPPED \[(\d+)\] (.+?): ?(.*)$")
# unfolded (--no-fold-skipped):  SKIPPED tests/test_x.py::test_a - reason
_UNFOLDED = re.compile(r"^SKIPPED (\S+)(?: - (.*))?$")
_STATS_SKIPPED = re.compile(r"\b(\d+) skipped\b")
# "==== 1 failed, 3 passed, 2 skipped in 0.12s ====" (no "=" rule with -q)
_STATS_LINE = re.compile(r"^=*\s*(?:(?:\d+ [a-z ]+?,\s)*\d+ [a-z ]+?|no tests ran) in \d+(?:\.\d+)?s\b")


@dataclass(frozen=True)
class Skip:
    count: int
    location: str
    reason: str
    line: str

    def allowed(self, prefixes: tuple[str, ...], with_upstream: bool = False) -> bool:
        if not self.reason.startswith(prefixes):
            return False
        if with_upstream and self.reason.startswith(UPSTREAM_PREFIX):
            return any(name in self.reason for name in ABSENT_IN_CI)
        return True


def _reason(text: str | None) -> str:
    text = text or ""
    if text.startswith("Skipped: "):  # pytest strips this in the folded format only
        text = text[len("Skipped: "):]
    return text


def parse_skips(text: str) -> tuple[list[Skip], int | None]:
    """Return (skips from the last short-summary section, 'N skipped' from the stats line)."""
    lines = [_ANSI.sub("", ln).rstrip("\r\n") for ln in text.splitlines()]
    start = None
    for i, ln in enumerate(lines):
        if _SUMMARY_HEADER.match(ln):
            start = i + 1
    skips: list[Skip] = []
    if start is not None:
        for ln in lines[start:]:
            if _SECTION_RULE.match(ln):
                break
            if not ln.startswith("SKIPPED"):
                continue
            m = _FOLDED_LINENO.match(ln)
            if m:
                skips.append(Skip(int(m[1]), f"{m[2]}:{m[3]}", _reason(m[4]), ln))
                continue
            m = _FOLDED.match(ln)
            if m:
                skips.append(Skip(int(m[1]), m[2], _reason(m[3]), ln))
                continue
            m = _UNFOLDED.match(ln)
            if m:
                skips.append(Skip(1, m[1], _reason(m[2]), ln))
                continue
            skips.append(Skip(1, "?", "", ln))  # unparseable: reason "" is disallowed
    stats = None
    for ln in reversed(lines):
        if _STATS_LINE.match(ln):
            m = _STATS_SKIPPED.search(ln)
            stats = int(m[1]) if m else 0
            break
    return skips, stats


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("log", nargs="?", default="-", help="pytest log file (default: stdin)")
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--strict", dest="strict", action="store_true", default=None,
                      help="fail on disallowed skips (default when CI=true)")
    mode.add_argument("--report-only", dest="strict", action="store_false",
                      help="only list skips, never fail")
    ap.add_argument("--allow", action="append", metavar="PREFIX",
                    help=f"allowed reason prefix (repeatable; default: {' '.join(ALLOWED_PREFIXES)})")
    ap.add_argument("--with-upstream", action="store_true",
                    help="the run had every upstream CI can have: a no-upstream: skip must name one of "
                         + ", ".join(ABSENT_IN_CI))
    ap.add_argument("--expect", action="append", default=[], metavar="PREFIX",
                    help="fail unless at least one skip reason starts with PREFIX (repeatable)")
    args = ap.parse_args(argv)

    strict = args.strict
    if strict is None:
        strict = os.environ.get("CI", "").strip().lower() == "true"
    prefixes = tuple(args.allow) if args.allow else ALLOWED_PREFIXES

    try:
        if args.log == "-":
            text = sys.stdin.read()
        else:
            with open(args.log, encoding="utf-8", errors="replace") as fh:
                text = fh.read()
    except OSError as exc:
        print(f"skip_policy: cannot read {args.log}: {exc}", file=sys.stderr)
        return 2

    skips, stats = parse_skips(text)
    listed = sum(s.count for s in skips)
    wu = args.with_upstream
    bad = [s for s in skips if not s.allowed(prefixes, wu)]

    print(f"skip_policy: {listed} skipped test(s) listed"
          f" (allowed prefixes: {' '.join(prefixes)}; strict={'yes' if strict else 'no'})")
    if wu:
        print(f"skip_policy: with the upstreams CI has, {UPSTREAM_PREFIX} only for what CI cannot have:")
        for name, why in ABSENT_IN_CI.items():
            print(f"  {name}: {why}")
    for s in skips:
        tag = "ok " if s.allowed(prefixes, wu) else "BAD"
        print(f"  [{tag}] {s.line}")

    failed = False
    if stats is not None and stats > listed:
        print(f"skip_policy: pytest reported {stats} skipped but only {listed} are listed in the"
              " short test summary (was -ra / -rs dropped?)")
        failed = True
    for want in args.expect:
        if not any(s.reason.startswith(want) for s in skips):
            print(f"skip_policy: expected at least one skip reason starting with {want!r}, found none"
                  " (the run's premise did not hold)")
            failed = True
    if bad:
        print(f"skip_policy: {len(bad)} skip reason(s) not starting with an allowed prefix"
              + (f" (or a {UPSTREAM_PREFIX} skip of an upstream CI has)" if wu else "") + ":")
        for s in bad:
            print(f"  - {s.location}: {s.reason or '<no reason>'} (x{s.count})")
        failed = True

    if failed and strict:
        print("skip_policy: FAIL (strict mode: CI=true or --strict)")
        return 1
    if failed:
        print("skip_policy: (not strict: reporting only)")
    else:
        print("skip_policy: OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
