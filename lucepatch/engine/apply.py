"""Apply a series in a private working copy: exact first, then 3-way, every patch reported.

The working copy is a `git clone --shared` under the cache, so the user's checkout (work tree,
index, refs, reflog, worktree list) is only read until the very end, when `apply` fetches the
finished branch and switches to it. A conflicting patch is skipped and the later ones are still
tried (`after-conflict`), which `git am` alone cannot do.
"""

from __future__ import annotations

import os
import re
import shutil
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from lucepatch import git
from lucepatch.engine.safety import check_patch_paths
from lucepatch.errors import UsageError
from lucepatch.series import Patch
from lucepatch.target import Target

# Outcomes per patch (JSON values; DESIGN.md "Apply").
APPLIED = "applied"  # clean, exact context
APPLIED_3WAY = "applied-3way"  # needed the 3-way merge
ALREADY_UPSTREAM = "already-upstream"  # the 3-way merge produced no change: the base has it
CONFLICT = "conflict"


@dataclass
class PatchOutcome:
    patch: Patch
    status: str
    commit: str | None = None
    detail: str = ""
    after_conflict: bool = False  # tried after an earlier patch conflicted

    def to_json(self) -> dict:
        return {
            "name": self.patch.name,
            "subject": self.patch.subject,
            "patch_id": self.patch.patch_id,
            "status": self.status,
            "commit": self.commit,
            "after_conflict": self.after_conflict,
            "detail": self.detail,
        }


@dataclass
class SeriesResult:
    base: str
    head: str
    tree: str
    outcomes: list[PatchOutcome] = field(default_factory=list)
    workdir: Path | None = None

    @property
    def conflicts(self) -> list[PatchOutcome]:
        return [o for o in self.outcomes if o.status == CONFLICT]

    def to_json(self) -> dict:
        return {
            "base": self.base,
            "head": self.head,
            "tree": self.tree,
            "patches": [o.to_json() for o in self.outcomes],
            "conflicts": len(self.conflicts),
        }


def series_trailers(target: Target, patch: Patch) -> list[str]:
    return [f"Lucepatch-Series: {target.name}@{target.version}", f"Patch-Id: {patch.patch_id}"]


def with_trailers(patch: Patch, extra: list[str]) -> bytes:
    """The patch's mbox text with extra trailers appended to its trailer block."""
    text = patch.raw.decode("utf-8", errors="surrogateescape")
    m = re.search(r"^---\n|^diff --git ", text, re.M)
    head, tail = text[: m.start()], text[m.start():]
    head = head.rstrip("\n")
    last_para = head.split("\n\n")[-1]
    sep = "\n" if patch.trailers and last_para.strip().split("\n")[-1] == f"{patch.trailers[-1][0]}: {patch.trailers[-1][1]}" else "\n\n"
    head = head + sep + "\n".join(extra) + "\n"
    if not tail.startswith("---"):
        head += "---\n"
    return (head + tail).encode("utf-8", errors="surrogateescape")


class WorkArea:
    """A private clone under <cache>/work/, removed on exit, reclaimed if a run was killed."""

    def __init__(self, cache: Path, label: str):
        self.root = cache / "work"
        self.root.mkdir(parents=True, exist_ok=True)
        reclaim_orphans(self.root)
        self.path = self.root / f"{label}-{uuid.uuid4().hex[:10]}"
        self.path.mkdir()
        (self.path / "owner.pid").write_text(str(os.getpid()))
        self.repo = self.path / "tree"

    def close(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def reclaim_orphans(root: Path) -> list[Path]:
    """Remove work areas whose owning lucepatch process is gone (killed by SIGKILL, power loss)."""
    removed = []
    for d in root.iterdir() if root.is_dir() else []:
        pidfile = d / "owner.pid"
        try:
            pid = int(pidfile.read_text().strip())
        except (OSError, ValueError):
            pid = -1
        if pid <= 0 or not _pid_alive(pid):
            shutil.rmtree(d, ignore_errors=True)
            removed.append(d)
    return removed


def _am_chunks(output: str) -> list[str]:
    parts = re.split(r"^Applying: ", output, flags=re.M)
    return parts[1:]


def apply_series(target: Target, source: Path, patches: list[Patch], work: WorkArea,
                 base: str | None = None, *, trailers: bool = True, am_args: tuple[str, ...] = (),
                 am_env: dict | None = None) -> SeriesResult:
    """Clone `source` at `base` into the work area and apply `patches` in order."""
    base_sha = git.resolve_commit(source, base or target.base, what=f"base commit of {target.name}",
                                  remedy="fetch it into the checkout (git fetch origin; or git fetch --unshallow) "
                                         "or pass --fetch")
    git.clone_shared(source, work.repo, base_sha)
    result = SeriesResult(base=base_sha, head=base_sha, tree=git.tree_of(work.repo), workdir=work.repo)
    if not patches:
        return result
    for p in patches:
        check_patch_paths(p, work.repo)
    mbox_dir = work.path / "mbox"
    mbox_dir.mkdir()
    files = []
    for i, p in enumerate(patches, 1):
        f = mbox_dir / f"{i:04d}.patch"
        f.write_bytes(with_trailers(p, series_trailers(target, p)) if trailers else p.raw)
        files.append(str(f))

    # One `git am` for the whole series (fast path); on a conflict, record it, `--skip`, go on.
    chunks: list[str] = []
    conflicted: dict[int, str] = {}
    res = git.run(work.repo, "am", "--3way", "--keep-cr", "--no-gpg-sign", *am_args, *files, check=False, env=am_env)
    chunks += _am_chunks(res.stdout + res.stderr)
    guard = 0
    while res.status != 0:
        guard += 1
        if guard > len(patches) + 1:
            raise RuntimeError("git am did not make progress")
        nxt = work.repo / ".git" / "rebase-apply" / "next"
        if not nxt.exists():
            raise UsageError(f"git am could not start on {target.name}: {(res.stderr or res.stdout).strip().splitlines()[-1:]}")
        idx = int(nxt.read_text().strip()) - 1
        unmerged = git.run(work.repo, "diff", "--name-only", "--diff-filter=U", check=False).stdout.split()
        err = [l for l in (res.stdout + res.stderr).splitlines() if l.startswith(("error:", "CONFLICT"))]
        conflicted[idx] = "; ".join(err[:3]) or ("unmerged: " + ", ".join(unmerged))
        res = git.run(work.repo, "am", "--skip", check=False, env=am_env)
        chunks += _am_chunks(res.stdout + res.stderr)

    # Map commits back to patches through the Patch-Id trailer we added.
    log = git.run(work.repo, "log", "--reverse", "--format=%H%x00%B%x01", f"{base_sha}..HEAD").stdout
    commit_of: dict[str, str] = {}
    for entry in log.split("\x01"):
        if "\x00" not in entry:
            continue
        sha, body = entry.strip("\n").split("\x00", 1)
        m = re.search(r"^Patch-Id: ([0-9a-f]{40})$", body, re.M)
        if m:
            commit_of[m.group(1)] = sha
    if not trailers:
        # Without our trailers, commits map to the patches that produced a commit, in order.
        shas = [e.strip("\n").split("\x00", 1)[0] for e in log.split("\x01") if "\x00" in e]
        producing = [p for i, p in enumerate(patches) if i not in conflicted
                     and "No changes" not in (chunks[i] if i < len(chunks) else "")]
        commit_of = {p.patch_id: sha for p, sha in zip(producing, shas)}
    seen_conflict = False
    for i, p in enumerate(patches):
        chunk = chunks[i] if i < len(chunks) else ""
        if i in conflicted:
            outcome = PatchOutcome(p, CONFLICT, detail=conflicted[i])
        elif p.patch_id in commit_of:
            status = APPLIED_3WAY if "Falling back to patching base and 3-way merge" in chunk else APPLIED
            outcome = PatchOutcome(p, status, commit=commit_of[p.patch_id])
        elif "No changes" in chunk or "already applied" in chunk:
            outcome = PatchOutcome(p, ALREADY_UPSTREAM, detail="3-way merge produced no change: the base already has it")
        else:
            outcome = PatchOutcome(p, CONFLICT, detail="git am produced no commit for this patch")
        outcome.after_conflict = seen_conflict
        seen_conflict = seen_conflict or outcome.status == CONFLICT
        result.outcomes.append(outcome)
    result.head = git.head(work.repo)
    result.tree = git.tree_of(work.repo)
    return result
