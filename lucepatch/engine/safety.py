"""Refuse patches that would write outside the repository before git ever sees them."""

from __future__ import annotations

from pathlib import Path, PurePosixPath

from lucepatch.errors import UsageError
from lucepatch.series import Patch


def check_patch_paths(patch: Patch, repo_dir: Path) -> None:
    root = repo_dir.resolve()
    for raw in patch.files:
        p = PurePosixPath(raw)
        if p.is_absolute():
            raise UsageError(f"patch {patch.path} writes the absolute path {raw}; patches must stay inside the repository")
        if ".." in p.parts:
            raise UsageError(f"patch {patch.path} writes {raw}, which escapes the repository through '..'")
        if p.parts and p.parts[0] == ".git" or ".git" in p.parts:
            raise UsageError(f"patch {patch.path} writes {raw} inside .git; patches may not touch git metadata")
        # Through a symlink already in the tree: resolve each existing parent.
        cur = root
        for part in p.parts[:-1]:
            cur = cur / part
            if cur.is_symlink() and not cur.resolve().is_relative_to(root):
                raise UsageError(f"patch {patch.path} writes {raw} through the symlink {cur.relative_to(root)} that leaves the repository")
    text = patch.diff.decode("utf-8", errors="replace")
    if "\nnew file mode 160000" in text or "\nindex " in text and " 160000\n" in text:
        raise UsageError(f"patch {patch.path} changes a gitlink (submodule pointer); carry submodule changes as a submodule series")
