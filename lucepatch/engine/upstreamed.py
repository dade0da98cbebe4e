"""The signals that say upstream has a patch's change, each named in the output. Which of them
counts, and how they meet measured behaviour, is the one judge's (lucepatch.engine.absorption):
every verb asks it, never these functions on their own.

- ``patch-id``: an upstream commit in base..REF has the same `git patch-id --stable` (exact change,
  any context/offsets). Names that commit; counts only while REF's tree still has the change.
- ``reverse-apply``: the patch reverse-applies exactly to REF's tree (upstream has the change, maybe
  split over commits or squashed with others).
- ``content-match``: a hand-rewritten variant (different context, whitespace or line breaks): every
  significant added run of the patch is found, whitespace-insensitively and in order, in REF's
  version of the file, every pure deletion is gone, created files exist and deleted ones do not.
  A near-miss (any added line that differs beyond whitespace) is *not* a match. Runs made only of
  trivial lines (braces, `return 0;`, blank) are not evidence on their own; a patch with no
  significant run never matches this way.
- ``behaviour``: hooks registered by the verify side (`register_behaviour_hook`); a hook answers
  True/False/None (unknown) for (target, patch, ref). Behaviour alone never says a patch is upstream
  (the invariant, lucepatch.engine.retirement): a hook's True counts only with the code signal it
  names through ``hook.code_signal(patch, ref)``.

The first three, `backport` (an `Upstream-Status: Backport [sha]` whose sha REF contains) and the
3-way no-op of the series engine are *code signals* (CODE_SIGNALS).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from lucepatch import git, odb, report
from lucepatch.errors import LucepatchError
from lucepatch.series import Patch

SIGNALS = ("patch-id", "reverse-apply", "content-match", "behaviour")
CODE_SIGNALS = ("patch-id", "backport", "reverse-apply", "content-match", "3-way")  # evidence that upstream has the code

_behaviour_hooks: list[Callable] = []


def register_behaviour_hook(fn: Callable) -> None:
    """fn(target, patch, source: Path, ref: str) -> True (fixed upstream) / False / None (unknown)."""
    if fn not in _behaviour_hooks:
        _behaviour_hooks.append(fn)


def unregister_behaviour_hook(fn: Callable) -> None:
    if fn in _behaviour_hooks:
        _behaviour_hooks.remove(fn)


@dataclass
class Upstreamed:
    signal: str
    commit: str | None = None  # the upstream commit that brought it, when known
    detail: str = ""

    def to_json(self) -> dict:
        return {"signal": self.signal, "commit": self.commit, "detail": self.detail}


def upstream_patch_ids(repo: Path, base: str, ref: str, *, prefix: str = "") -> dict[str, str]:
    """patch-id -> oldest upstream commit in base..ref with it (lucepatch's own commits excluded).
    `prefix`: the commits' paths as seen under that folder (a submodule's history, for patches
    re-rooted into the superproject: engine/layout.py)."""
    if base == ref:
        return {}
    moved = (f"--src-prefix=a/{prefix.strip('/')}/", f"--dst-prefix=b/{prefix.strip('/')}/") if prefix.strip("/") else ()
    log = git.run(repo, "log", "-p", "--no-merges", "--no-color", "--full-index", "--reverse", *moved,
                  "--invert-grep", "--grep=^Lucepatch-Series: ", "--format=commit %H", f"{base}..{ref}",
                  env={"GIT_OPTIONAL_LOCKS": "0"}).stdout
    if not log.strip():
        return {}
    out = git.run(repo, "patch-id", "--stable", stdin=log.encode("utf-8", "surrogateescape")).stdout
    ids: dict[str, str] = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] not in ids:
            ids[parts[0]] = parts[1]
    return ids


_TRIVIAL = re.compile(r"^[{}();,\s]*$|^(return\s*\w*;|break;|continue;|else|#endif.*|\*/|/\*|//)$")


def _norm(s: str) -> str:
    return re.sub(r"\s+", "", s)


def _significant(lines: list[str]) -> bool:
    return any(len(_norm(l)) >= 6 and not _TRIVIAL.match(l.strip()) for l in lines)


def _file_blocks(diff: str):
    for block in re.split(r"^(?=diff --git )", diff, flags=re.M):
        if not block.startswith("diff --git "):
            continue
        yield block


def _block_paths(block: str) -> tuple[str | None, str | None]:
    old = new = None
    for line in block.split("\n"):
        if line.startswith("--- "):
            p = line[4:].split("\t")[0]
            old = None if p == "/dev/null" else p[2:] if p[:2] == "a/" else p
        elif line.startswith("+++ "):
            p = line[4:].split("\t")[0]
            new = None if p == "/dev/null" else p[2:] if p[:2] == "b/" else p
            break
    if old is None and new is None:
        m = re.match(r"diff --git a/(\S+) b/(\S+)", block)
        if m:
            old, new = m.group(1), m.group(2)
    return old, new


def _runs(block: str) -> list[tuple[list[str], list[str], str, str]]:
    """(removed, added, context-before, context-after) change runs of one file's hunks."""
    runs = []
    rem: list[str] = []
    add: list[str] = []
    before = ""
    in_hunk = False
    for line in block.split("\n"):
        if line.startswith("@@"):
            if rem or add:
                runs.append((rem, add, before, ""))
            rem, add, before, in_hunk = [], [], "", True
            continue
        if not in_hunk:
            continue
        tag, text = line[:1], line[1:]
        if tag == "-":
            rem.append(text)
        elif tag == "+":
            add.append(text)
        elif tag == " " or line == "":
            if rem or add:
                runs.append((rem, add, before, text))
                rem, add = [], []
            before = text
        elif tag == "\\":
            continue
    if rem or add:
        runs.append((rem, add, before, ""))
    return runs


def content_match(patch: Patch, read_file: Callable[[str], str | None]) -> bool:
    """True when REF already carries the patch's change, allowing whitespace/context/reflow drift."""
    diff = patch.diff.decode("utf-8", "replace")
    evidence = False
    for block in _file_blocks(diff):
        old, new = _block_paths(block)
        if "GIT binary patch" in block:
            return False
        if new is None:  # deletion: upstream must not have the file
            if old is not None and read_file(old) is not None:
                return False
            continue
        text = read_file(new)
        if text is None:
            return False
        hay = _norm(text)
        pos = 0
        for rem, add, ctx_b, ctx_a in _runs(block):
            if add:
                if not _significant(add):
                    continue
                needle = _norm("".join(add))
                idx = hay.find(needle, pos)
                if idx < 0:
                    return False
                if rem and _significant(rem) and _norm("".join(rem)) not in _norm("".join(add)):
                    # the replaced text must be gone from REF (else it is a different change)
                    if _norm("".join(rem)) in hay:
                        return False
                pos = idx + len(needle)
                evidence = True
            elif rem and _significant(rem):
                gone = _norm(ctx_b + "".join(rem) + ctx_a)
                if gone in hay:
                    return False
                evidence = True
    return evidence


def behaviour_says(patch: Patch, *, target, source: Path | None, ref: str) -> Upstreamed | None:
    """What the registered behaviour hooks say (`status --behaviour`): an Upstreamed with signal
    `behaviour` only when a hook's True comes with the code signal it names, else None."""
    for hook in _behaviour_hooks:
        try:
            verdict = hook(target, patch, source, ref)
            code = getattr(hook, "code_signal", lambda p, r: None)(patch, ref) if verdict else None
        except LucepatchError as exc:  # the check could not run (a build, a tool): no signal, and say so
            report.progress(f"note: the behavioural check of {patch.name} at {ref[:12]} could not run: {exc}")
            verdict = code = None
        # behaviour alone is never "upstream has it": only with the code signal the hook names
        if verdict and isinstance(code, dict) and code.get("signal") in CODE_SIGNALS:
            return Upstreamed("behaviour", code.get("commit"), getattr(hook, "detail", lambda p, r: None)(patch, ref)
                              or f"behavioural check {getattr(hook, '__name__', 'hook')} passes on {ref[:12]} "
                                 f"(code signal {code['signal']})")
    return None


def tree_reader(repo: Path, ref: str) -> Callable[[str], str | None]:
    cache: dict[str, str | None] = {}

    def read(path: str) -> str | None:
        if path not in cache:
            cache[path] = odb.read_file(repo, ref, path)
        return cache[path]

    return read


def first_commit_with(repo: Path, base: str, ref: str, has_it: Callable[[str], bool]) -> str | None:
    """Oldest first-parent commit in base..ref for which has_it(commit) holds (binary search)."""
    commits = git.run(repo, "rev-list", "--first-parent", "--reverse", f"{base}..{ref}").stdout.split()
    if not commits or not has_it(commits[-1]):
        return None
    lo, hi = 0, len(commits) - 1
    while lo < hi:
        mid = (lo + hi) // 2
        if has_it(commits[mid]):
            hi = mid
        else:
            lo = mid + 1
    return commits[lo]
