"""The one patch-application core: a temporary index in a private repository.

Every verb that asks "does this patch go onto that tree, and how" (apply, check, status, rebase,
matrix, build, pr) goes through ``IndexEngine.apply``. It never touches a work tree:

1. exact: ``git apply --cached`` (context must match; offsets allowed, no fuzz), else
2. 3-way: ``git apply --cached --3way`` using the preimage blobs named by the patch's
   ``index`` lines (``--full-index`` patches), exactly what ``git am -3`` falls back to;
   a 3-way result identical to the tree before is ``already-upstream`` ("No changes");
3. otherwise ``conflict``; the index is restored and later patches are still tried.

Because only the index is involved, ``matrix`` can evaluate hundreds of upstream commits without
a checkout, and because ``apply`` uses the same function, both agree on every cell by construction
(tests/test_matrix.py checks it anyway).
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

from lucepatch import git, odb
from lucepatch.errors import UsageError

APPLIED = "applied"
APPLIED_3WAY = "applied-3way"
ALREADY_UPSTREAM = "already-upstream"
CONFLICT = "conflict"
STATUSES = (APPLIED, APPLIED_3WAY, ALREADY_UPSTREAM, CONFLICT)
PURE_CONFIG = {"GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}

_CORRUPT = re.compile(r"corrupt patch|patch with only garbage|No valid patches|unrecognized input|"
                      r"patch fragment without header|git diff header lacks|bad git-diff|"
                      r"cannot apply binary patch to '.*' without full index|"
                      r"recount: unexpected line|unable to find filename", re.I)


class IndexEngine:
    """Apply patch files, one at a time and cumulatively, to a private index of `repo`."""

    def __init__(self, repo: Path, index_file: Path, env: dict | None = None):
        self.repo = Path(repo)
        self.index = Path(index_file)
        # the user's global/system git config must not change what a patch does (apply.whitespace=fix,
        # apply.ignoreWhitespace): every verb and CI gets the same answer
        self.env = {"GIT_INDEX_FILE": str(self.index), "GIT_OPTIONAL_LOCKS": "0", **PURE_CONFIG, **(env or {})}
        self._tree: str | None = None  # tree of the index when known, None when it must be written

    def git(self, *args: str, check: bool = True, stdin: bytes | None = None, env: dict | None = None):
        return git.run(self.repo, *args, check=check, stdin=stdin, env={**self.env, **(env or {})})

    def _apply_git(self, name, *args: str):
        res = self.git("apply", "--cached", *args, check=False)
        if res.status < 0 or res.status > 128:
            # git itself crashed on this input (e.g. git 2.39 asserts in check_preimage on some
            # malformed new-file patches); it left its lock behind in our private index.
            Path(str(self.index) + ".lock").unlink(missing_ok=True)
            msg = (res.stderr.strip().splitlines() or ["no message"])[-1]
            raise UsageError(f"patch {name} makes git apply crash ({msg[:120]}); the patch is malformed, "
                             "regenerate it with git format-patch")
        return res

    def reset(self, treeish: str) -> None:
        self.git("read-tree", treeish)
        self._tree = None

    def write_tree(self) -> str:
        if self._tree is None:
            self._tree = odb.write_tree(self.repo, env=self.env)
        return self._tree

    def apply(self, patch_file: Path, *, name: str = "", strip: int = 1) -> tuple[str, str]:
        """(status, detail) of `patch_file` on the current index; the index holds the result."""
        pargs = () if strip == 1 else (f"-p{strip}",)
        res = self._apply_git(name or patch_file, *pargs, str(patch_file))
        if res.status == 0:
            self._tree = None
            return APPLIED, ""
        _raise_if_corrupt(res.stderr, name or patch_file)
        exact_err = _first_errors(res.stderr)
        before = self.write_tree()
        saved = self.index.with_name(self.index.name + ".save")
        shutil.copyfile(self.index, saved)
        res3 = self._apply_git(name or patch_file, "--3way", *pargs, str(patch_file))
        if res3.status == 0:
            self._tree = None
            if self.write_tree() == before:
                return ALREADY_UPSTREAM, "3-way merge produced no change: the tree already has it"
            return APPLIED_3WAY, "context differed; 3-way merge with the patch's preimage blobs"
        _raise_if_corrupt(res3.stderr, name or patch_file)
        os.replace(saved, self.index)
        self._tree = before
        detail = _first_errors(res3.stderr) or exact_err
        return CONFLICT, detail

    def check_reverse(self, patch_file: Path) -> bool:
        """Does the patch reverse-apply exactly to the current index (i.e. the tree already has it)?"""
        return self._apply_git(patch_file, "--check", "-R", str(patch_file)).status == 0


def _first_errors(stderr: str) -> str:
    lines = [l.strip() for l in stderr.splitlines()
             if l.startswith(("error:", "CONFLICT", "U ")) or "conflicts" in l]
    return "; ".join(dict.fromkeys(lines[:4]))


def _raise_if_corrupt(stderr: str, name) -> None:
    m = _CORRUPT.search(stderr)
    if m:
        line = next((l for l in stderr.splitlines() if _CORRUPT.search(l)), m.group(0))
        raise UsageError(f"patch {name} is not a valid git diff ({line.strip()[:160]}); regenerate it with git format-patch")


def validate_diffs(repo: Path, files: list[tuple[Path, str]]) -> None:
    """Parse every diff with git itself (`git apply --numstat`), naming the first bad file."""
    if not files:
        return
    res = git.run(repo, "apply", "--numstat", *[str(f) for f, _ in files], check=False)
    if res.status == 0:
        return
    for f, name in files:
        r = git.run(repo, "apply", "--numstat", str(f), check=False)
        if r.status != 0:
            msg = (r.stderr.strip().splitlines() or ["unreadable"])[0]
            raise UsageError(f"patch {name} is not a valid git diff ({msg[:160]}); regenerate it with git format-patch")
