"""The upstream's own checks, run on the PR branch before anything is written.

Each check takes the PR tree (a private clone under the cache, HEAD = the PR branch) and the base
commit, and returns a CheckResult. Which checks run is data (lucepatch.upstream.conventions).

cpplint compares with the base: HAMi-core's baseline has many pre-existing cpplint errors, so a PR
is refused only for errors the series *adds* on lines it touches (per file and category/message, the
count at HEAD above the count at the base).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from lucepatch import git, trailers
from lucepatch.upstream.conventions import is_placeholder

CPP_EXT = (".c", ".h", ".cc", ".cpp", ".cxx", ".hpp", ".hh", ".cu", ".cuh")
CONVENTIONAL = re.compile(r"^(feat|fix|docs|style|refactor|perf|test|build|ci|chore|revert)(\([^)]+\))?!?: \S")
_CPPLINT_LINE = re.compile(r"^(?P<path>.+?):(?P<line>\d+):\s+(?P<msg>.*?)\s+\[(?P<cat>[^\]]+)\]\s+\[(?P<conf>\d)\]\s*$")
_EMAIL = re.compile(r"<([^>]+)>")


@dataclass
class CheckResult:
    name: str
    ok: bool
    summary: str
    findings: list[str] = field(default_factory=list)
    skipped: bool = False

    def to_json(self) -> dict:
        return {"name": self.name, "ok": self.ok, "skipped": self.skipped, "summary": self.summary,
                "findings": self.findings}


def _commits(repo: Path, base: str) -> list[dict]:
    out = git.run(repo, "log", "--reverse", "--format=%H%x00%ae%x00%s%x00%B%x01", f"{base}..HEAD").stdout
    commits = []
    for entry in out.split("\x01"):
        entry = entry.strip("\n")
        if not entry:
            continue
        sha, email, subject, body = entry.split("\x00", 3)
        commits.append({"sha": sha, "author_email": email, "subject": subject, "body": body})
    return commits


def check_dco(repo: Path, base: str, conv: dict) -> CheckResult:
    """Every commit has a Signed-off-by whose email is the commit author's (what the DCO app checks),
    read from the trailer block by git's rules (lucepatch/trailers.py): a sign-off quoted in the
    middle of a message is not one; lucepatch's placeholder identity signs nothing. The summary names
    who signed off, as it is."""
    bad, signers = [], []
    commits = _commits(repo, base)
    for c in commits:
        signoffs = signed_off_by(c["body"])
        emails = {m.lower() for s in signoffs for m in _EMAIL.findall(s)}
        fake = [s for s in signoffs if is_placeholder(s)] + ([c["author_email"]] if is_placeholder(c["author_email"]) else [])
        if fake:
            bad.append(f"{c['sha'][:12]} {c['subject']}: {fake[0]} is lucepatch's placeholder identity, not a person")
        elif not signoffs:
            bad.append(f"{c['sha'][:12]} {c['subject']}: no Signed-off-by")
        elif c["author_email"].lower() not in emails:
            bad.append(f"{c['sha'][:12]} {c['subject']}: no Signed-off-by from the author <{c['author_email']}>")
        else:
            signers += [s for s in signoffs if c["author_email"].lower() in s.lower()]
    if bad:
        return CheckResult("dco", False, f"{len(bad)} of {len(commits)} commit(s) fail DCO", bad)
    who = ", ".join(dict.fromkeys(signers))
    return CheckResult("dco", True, f"{len(commits)} commit(s), each signed off by its author ({who})")


def signed_off_by(message: str) -> list[str]:
    """The Signed-off-by values of a commit message's trailer block."""
    return trailers.values(trailers.parse(message), "Signed-off-by")


def check_conventional(repo: Path, base: str, conv: dict) -> CheckResult:
    """`type(scope): subject` on every commit, with the types the upstream allows (conv commit_types)."""
    commits = _commits(repo, base)
    types = conv.get("commit_types")
    pattern = re.compile(rf"^({'|'.join(map(re.escape, types))})(\([^)]+\))?!?: \S") if types else CONVENTIONAL
    bad = [f"{c['sha'][:12]} {c['subject']!r}" for c in commits if not pattern.match(c["subject"])]
    if bad:
        allowed = f" with a type of {', '.join(types)}" if types else ""
        return CheckResult("conventional-commits", False,
                           f"{len(bad)} subject(s) are not conventional commits (type(scope): subject{allowed})", bad)
    return CheckResult("conventional-commits", True, f"{len(commits)} conventional subject(s)")


def _cpplint_cmd() -> list[str]:
    """cpplint (a dependency of lucepatch): its script, else the module of the running Python (a venv
    whose bin/ is not on PATH)."""
    exe = shutil.which("cpplint")
    return [exe] if exe else [sys.executable, "-m", "cpplint"]


def _cpplint(tree: Path, files: list[str], args: list[str]) -> dict[str, list[tuple[int, str]]]:
    """file -> [(line, 'category: message')] from cpplint run inside `tree` (its CPPLINT.cfg apply)."""
    out: dict[str, list[tuple[int, str]]] = {f: [] for f in files}
    present = [f for f in files if (tree / f).is_file()]
    if not present:
        return out
    r = subprocess.run([*_cpplint_cmd(), *args, *present], cwd=tree, capture_output=True, text=True)
    for line in (r.stderr + "\n" + r.stdout).splitlines():
        m = _CPPLINT_LINE.match(line.strip())
        if m and m.group("path") in out:
            out[m.group("path")].append((int(m.group("line")), f"{m.group('cat')}: {m.group('msg')}"))
    return out


def touched_lines(repo: Path, base: str, path: str) -> set[int]:
    diff = git.run(repo, "diff", "-U0", "--no-color", f"{base}..HEAD", "--", path).stdout
    lines: set[int] = set()
    for m in re.finditer(r"^@@ -\d+(?:,\d+)? \+(\d+)(?:,(\d+))? @@", diff, re.M):
        start, count = int(m.group(1)), int(m.group(2) if m.group(2) is not None else 1)
        lines.update(range(start, start + count))
    return lines


def check_cpplint(repo: Path, base: str, conv: dict) -> CheckResult:
    args = list(conv.get("cpplint_args") or [])
    changed = git.run(repo, "diff", "--name-only", "--diff-filter=AMR", f"{base}..HEAD").stdout.split()
    files = [f for f in changed if f.endswith(CPP_EXT)]
    if not files:
        return CheckResult("cpplint", True, "no C/C++ files touched", skipped=True)
    head_errs = _cpplint(repo, files, args)
    # The base's version of the same files, in a second private worktree of the PR clone.
    base_tree = repo.parent / "cpplint-base"
    git.run(repo, "worktree", "add", "--quiet", "--detach", str(base_tree), base)
    try:
        base_errs = _cpplint(base_tree, files, args)
    finally:
        git.run(repo, "worktree", "remove", "--force", str(base_tree), check=False)
        shutil.rmtree(base_tree, ignore_errors=True)
    findings = []
    total_head = 0
    for f in files:
        total_head += len(head_errs[f])
        delta = Counter(msg for _, msg in head_errs[f]) - Counter(msg for _, msg in base_errs[f])
        touched = touched_lines(repo, base, f)
        for line, msg in head_errs[f]:
            if line in touched and delta[msg] > 0:
                delta[msg] -= 1
                findings.append(f"{f}:{line}: {msg}")
    flags = " ".join(args)
    if findings:
        return CheckResult("cpplint", False, f"cpplint {flags}: {len(findings)} new error(s) on lines the series touches",
                           findings)
    return CheckResult("cpplint", True, f"cpplint {flags}: no new errors on touched lines in {len(files)} file(s) "
                                        f"({total_head} pre-existing in those files)")


def check_hook_consistency(repo: Path, base: str, conv: dict) -> CheckResult:
    script = conv.get("hook_check_script", "hack/check_cuda_hook_consistency.py")
    if not (repo / script).is_file():
        return CheckResult("hook-consistency", True, f"{script} not in this upstream tree", skipped=True)
    r = subprocess.run([sys.executable, script], cwd=repo, capture_output=True, text=True, timeout=300)
    lines = [l for l in (r.stdout + r.stderr).splitlines() if l.strip()]
    if r.returncode != 0:
        errs = [l for l in lines if "ERROR" in l] or lines[-5:]
        return CheckResult("hook-consistency", False, f"python3 {script} exited {r.returncode}", errs)
    return CheckResult("hook-consistency", True, f"python3 {script}: ok")


CHECKS = {
    "dco": check_dco,
    "cpplint": check_cpplint,
    "hook-consistency": check_hook_consistency,
    "conventional-commits": check_conventional,
}


def run_checks(names: list[str], repo: Path, base: str, conv: dict) -> list[CheckResult]:
    results = []
    for n in names:
        fn = CHECKS.get(n)
        if fn is None:
            results.append(CheckResult(n, False, f"unknown check {n!r}; known: {', '.join(CHECKS)}"))
            continue
        results.append(fn(repo, base, conv))
    return results
