"""Crash fingerprints: which known upstream issue a crash log shows.

`match_fingerprint(signal, log, frames=...)` reduces a crash to facts (signal, HAMi-core
`file:line` log sites, the call path — from the preloaded reporter's backtrace of the run, or from
frames printed in the log — and the functions and CUDA hook on it) and matches them against
lucepatch/data/fingerprints.toml. Every clause a fingerprint states must hold; among matches the
most specific wins (call_path weighs 3; hooks, functions_all and text clauses 2; the others 1). A
tie between different issues is returned as ambiguous, never guessed; no match is None.

An `Illegal device id` crash whose log carries no call path matches only a `family` fingerprint:
the answer is then "one of these issues" (ambiguous), never a specific one, because the same log
line comes from every site of the bug family (cuMemCreate, cuMemAlloc, the async hooks).

`render_crash_log(run)` writes a run record of an evidence file (its interposer lines, first error,
signal and call path) as a text log this module reads back: how recorded crashes become corpus
files (tests/fixtures/crashlogs/).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tomllib
from functools import lru_cache
from pathlib import Path

DATA = Path(__file__).resolve().parent / "data" / "fingerprints.toml"

_HAMI_PREFIX = re.compile(
    r"\[HAMI-core\s+(?P<level>\w+)\s*\(\s*pid:(?P<pid>\d+)\s+thread=(?P<tid>\d+)\s+(?P<file>[\w./-]+):(?P<line>\d+)\s*\)\]:?\s*(?P<msg>.*)")
_HAMI_PREFIX_OLD = re.compile(
    r"\[HAMI-core\s+(?P<level>\w+)\((?P<pid>\d+):(?P<tid>\d+):(?P<file>[\w./-]+):(?P<line>\d+)\)\]:?\s*(?P<msg>.*)")
_FRAME_PY = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<fn>[A-Za-z_][\w:~]*)')
_FRAME_GDB = re.compile(r"(?:^|\s)(?:#\d+\s+)?(?:0x[0-9a-fA-F]+\s+in\s+)?(?P<fn>[A-Za-z_]\w*)\s*\((?P<args>[^)]*)\)\s+at\s+(?P<file>\S+?):(?P<line>\d+)")
_HOOK_NAME = re.compile(r"^(cu[A-Z]\w*|nvml[A-Z]\w*)$")
_LOG_HOOK = re.compile(r"\]:\s*(cu[A-Z]\w*|nvml[A-Z]\w*)[:(]")

_SIGNALS = [
    ("SIGSEGV", re.compile(r"SIGSEGV|Segmentation fault|Segfault encountered|signal 11\b|exit code 139|returncode -11\b")),
    ("SIGABRT", re.compile(r"SIGABRT|Aborted \(core dumped\)|signal 6\b|exit code 134")),
    ("SIGBUS", re.compile(r"SIGBUS|Bus error")),
    ("SIGFPE", re.compile(r"SIGFPE|Floating point exception")),
]
_WEIGHT = {"signal": 1, "message": 1, "hooks": 2, "functions_all": 2, "functions_any": 1, "text_any": 2,
           "call_path": 3}


@lru_cache(maxsize=4)
def load_fingerprints(path: str | None = None) -> dict:
    data = tomllib.loads(Path(path or DATA).read_text(encoding="utf-8"))
    data.setdefault("fingerprint", [])
    data.setdefault("sites", {})
    return data


def _normalise_signal(signal: str | int | None) -> str | None:
    if signal is None or signal == "":
        return None
    if isinstance(signal, int) or str(signal).lstrip("-").isdigit():
        n = abs(int(signal))
        return {11: "SIGSEGV", 6: "SIGABRT", 7: "SIGBUS", 8: "SIGFPE", 9: "SIGKILL"}.get(n, f"SIG{n}")
    s = str(signal).upper()
    return s if s.startswith("SIG") else "SIG" + s


def log_facts(log: str, signal: str | None = None, sites: dict | None = None, frames: list | None = None) -> dict:
    """What a crash says: signal, HAMi log sites, the call path (`path`, innermost first), the
    functions on it and the hooks. `frames` is a run's backtrace ([{"function", "lib"?, ...}], from
    the preloaded reporter); without it the path is read from frames printed in the log."""
    sites = sites if sites is not None else load_fingerprints()["sites"]
    sig = _normalise_signal(signal)
    if sig is None:
        for name, rx in _SIGNALS:
            if rx.search(log):
                sig = name
                break
    log_sites, functions, hooks, log_frames = [], [], [], []
    for line in log.splitlines():
        m = _HAMI_PREFIX.search(line) or _HAMI_PREFIX_OLD.search(line)
        if m:
            base = Path(m.group("file")).name
            site = f"{base}:{m.group('line')}"
            if m.group("level").upper().startswith(("ERR", "WARN")) and site not in log_sites:
                log_sites.append(site)
            fn = sites.get(base, {}).get(m.group("line"))
            if fn and m.group("level").upper().startswith("ERR"):
                functions.append(fn)
            h = _LOG_HOOK.search(line)
            if h:
                hooks.append(h.group(1))
        for rx in (_FRAME_PY, _FRAME_GDB):
            for f in rx.finditer(line):
                fn = f.group("fn").rstrip("()")
                log_frames.append({"function": fn, "file": Path(f.group("file")).name, "line": int(f.group("line"))})
    path_frames = [{"function": f.get("function", ""), "file": f.get("file", ""), "line": f.get("line")}
                   for f in frames] if frames else log_frames
    for f in path_frames:
        fn = f["function"]
        if fn:
            functions.append(fn)
            if _HOOK_NAME.match(fn):
                hooks.append(fn)
    dedup = lambda xs: list(dict.fromkeys(xs))  # noqa: E731
    return {"signal": sig, "sites": log_sites, "functions": dedup(functions), "hooks": dedup(hooks),
            "frames": path_frames, "path": [f["function"] for f in path_frames]}


def _on_path(want: list[str], path: list[str]) -> bool:
    """`want` appears as consecutive frames of `path` (frames without a name are skipped): each
    function was called directly by the next one."""
    named = [f for f in path if f and f != "??"]
    n = len(want)
    return any(named[i:i + n] == want for i in range(len(named) - n + 1))


def _clauses(fp: dict, facts: dict, log: str) -> tuple[bool, int, list[str]]:
    score, why = 0, []
    if "signal" in fp:
        if facts["signal"] != fp["signal"]:
            return False, 0, []
        score += _WEIGHT["signal"]
        why.append(fp["signal"])
    if "message" in fp:
        if not re.search(fp["message"], log):
            return False, 0, []
        score += _WEIGHT["message"]
        why.append(repr(fp["message"]))
    if "hooks" in fp:
        hit = [h for h in fp["hooks"] if h in facts["hooks"]]
        if not hit:
            return False, 0, []
        score += _WEIGHT["hooks"]
        why.append(f"hook {hit[0]}")
    if "functions_all" in fp:
        if not all(f in facts["functions"] for f in fp["functions_all"]):
            return False, 0, []
        score += _WEIGHT["functions_all"]
        why.append(" + ".join(fp["functions_all"]))
    if "functions_any" in fp:
        hit = [f for f in fp["functions_any"] if f in facts["functions"]]
        if not hit:
            return False, 0, []
        score += _WEIGHT["functions_any"]
        why.append(hit[0])
    if "text_any" in fp:
        if not any(re.search(rx, log) for rx in fp["text_any"]):
            return False, 0, []
        score += _WEIGHT["text_any"]
        why.append("text")
    if "call_path" in fp:
        if not _on_path(fp["call_path"], facts["path"]):
            return False, 0, []
        score += _WEIGHT["call_path"]
        why.append("path " + " <- ".join(fp["call_path"]))
    return True, score, why


def _url(issue: str) -> str:
    repo, _, num = issue.partition("#")
    return f"https://github.com/{repo}/issues/{num}"


def match_fingerprint(signal: str | None, log: str, *, frames: list | None = None, data: dict | None = None) -> dict | None:
    """The known upstream issue this crash matches, or None.

    Returns {"issue": "Project-HAMi/HAMi-core#187", "url", "title", "score", "why": [...],
    "facts": {...}, "related": [...], "fixed_by", "summary"}; when the best matches name different
    issues equally, or only a bug-family fingerprint holds, {"issue": None, "ambiguous": [issues],
    "summary": ...}.
    """
    data = data or load_fingerprints()
    log = log or ""
    facts = log_facts(log, signal, data["sites"], frames)
    hits = []
    for fp in data["fingerprint"]:
        ok, score, why = _clauses(fp, facts, log)
        if ok:
            hits.append((score, fp, why))
    if not hits:
        return None
    best = max(h[0] for h in hits)
    top = [h for h in hits if h[0] == best]
    issues = list(dict.fromkeys(h[1]["issue"] for h in top))
    if len(issues) > 1:
        return {"issue": None, "ambiguous": issues, "score": best, "facts": facts,
                "summary": "could be " + " or ".join(issues)}
    score, fp, why = top[0]
    if fp.get("family"):
        members = list(fp.get("members", []))
        return {"issue": None, "id": fp.get("id"), "ambiguous": members, "family": fp["family"], "score": score, "why": why,
                "facts": facts, "summary": f"{fp.get('title', fp['family'])}: could be " + " or ".join(members)
                + " (no call path in the log to tell which)"}
    return {"issue": fp["issue"], "id": fp.get("id"), "url": _url(fp["issue"]), "title": fp.get("title", ""), "score": score,
            "why": why, "facts": facts, "related": fp.get("related", []), "fixed_by": fp.get("fixed_by"),
            "summary": f"matches {fp['issue']}"}


# ---- recorded crashes as corpus logs ------------------------------------------------------------

def render_crash_log(run: dict) -> str:
    """One run record of an evidence file as a text crash log: the classified interposer lines, the
    first error, the signal and the call path in gdb's frame format (read back by log_facts)."""
    lines = [h["line"] for h in run.get("hami_log") or []]
    for line in [run.get("first_error", "")] + (run.get("log_tail") or "").splitlines():
        if line.strip() and not line.startswith("@@lucepatch") and line.strip() not in lines:
            lines.append(line.strip())
    sig = run.get("signal")
    lines.append(f"lucepatch: {run.get('scenario')} {run.get('variant')} run {run.get('index')}: "
                 f"{run.get('outcome')}" + (f" ({sig})" if sig else ""))
    if sig:
        lines.append(f"received signal {sig}")
    for i, f in enumerate(run.get("backtrace") or []):
        fn = f.get("function") or "??"
        where = f"{f.get('file') or '??'}:{f.get('line') or 0}"
        lines.append(f"#{i}  {fn} ({f.get('lib', '')}) at {where}")
    return "\n".join(lines) + "\n"


def _main(argv=None) -> int:
    """python3 -m lucepatch.fingerprints EVIDENCE SCENARIO [--variant V] [--index N]:
    print the first failing run of SCENARIO as a corpus log (tests/fixtures/crashlogs/)."""
    ap = argparse.ArgumentParser(description=_main.__doc__)
    ap.add_argument("evidence")
    ap.add_argument("scenario", help="reproducer:scenario")
    ap.add_argument("--variant", default="baseline")
    ap.add_argument("--index", type=int, default=None)
    args = ap.parse_args(argv)
    doc = json.loads(Path(args.evidence).read_text())
    runs = [r for r in doc.get("runs", []) if r.get("scenario") == args.scenario and r.get("variant") == args.variant
            and r.get("outcome") not in ("pass", "skipped", "invalid") and (args.index is None or r["index"] == args.index)]
    if not runs:
        print(f"no failing {args.variant} run of {args.scenario} in {args.evidence}", file=sys.stderr)
        return 1
    sys.stdout.write(render_crash_log(runs[0]))
    return 0


if __name__ == "__main__":
    raise SystemExit(_main())
