"""lucepatch's commits and the patch files they come from and go back to: the trailers lucepatch
writes into a commit (`Lucepatch-Series:`, `Patch-Id:`), the commits of a range that carry them
(`status`: which patches are applied), and commits formatted as patch files with those trailers
removed, byte-stable whatever the user's git config (`export`, a rebase session's re-export,
quilt import's normalisation)."""

from __future__ import annotations

import os
import re
from pathlib import Path

from lucepatch import git, odb, trailers


def applied_patch_ids(repo: Path, base: str, head: str) -> dict[str, str]:
    """Patch-Id trailer -> commit, for lucepatch commits in base..head (already applied)."""
    if base == head:
        return {}
    log = git.run(repo, "log", "--format=%H%x00%B%x01", "--grep=^Lucepatch-Series: ", f"{base}..{head}",
                  env={"GIT_OPTIONAL_LOCKS": "0"}).stdout
    out = {}
    for entry in log.split("\x01"):
        if "\x00" not in entry:
            continue
        sha, body = entry.strip("\n").split("\x00", 1)
        pid = patch_id_trailer(body)
        if pid:
            out.setdefault(pid, sha)
    return out


def patch_id_trailer(message: str) -> str | None:
    """The Patch-Id trailer lucepatch wrote into a commit message (trailer block, git's rules), if any."""
    pid = next(iter(trailers.values(trailers.parse(message), "Patch-Id")), None)
    return pid if pid is not None and re.fullmatch(r"[0-9a-f]{40}", pid) else None


# ---- commits -> patch files ---------------------------------------------------------------------
OUR_TRAILER_KEYS = ("Lucepatch-Series", "Patch-Id")
# format-patch must not depend on the user's git config (format.*, diff.noprefix, ...)
PURE_ENV = {"GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1", "GIT_OPTIONAL_LOCKS": "0"}
FORMAT_PATCH_ARGS = ("format-patch", "--zero-commit", "--no-signature", "--full-index", "-N", "--no-numbered")


def strip_our_trailers(msg: str) -> tuple[str, str | None]:
    return trailers.edit(msg, remove=OUR_TRAILER_KEYS), patch_id_trailer(msg)


def upstream_merge(repo: Path, base: str, head: str) -> tuple[str, str, str] | None:
    """The first merge on base..head's first-parent chain that merges the upstream's mainline into the
    branch — its second parent on a remote's default branch (refs/remotes/*/HEAD), its first parent
    not — as (merge, its second parent, subject); None when there is none. Its first-parent diff
    would be upstream's own changes, not the branch's (issue 35: HAMi-core PR heads)."""
    mainline = [r for r in git.run(repo, "for-each-ref", "--format=%(refname)", "refs/remotes/*/HEAD").stdout.split()]
    if not mainline:
        return None

    def on_mainline(c: str) -> bool:
        return any(git.run(repo, "merge-base", "--is-ancestor", c, r, check=False).status == 0 for r in mainline)

    for line in git.run(repo, "rev-list", "--first-parent", "--reverse", "--parents", f"{base}..{head}").stdout.splitlines():
        c, *parents = line.split()
        if len(parents) > 1 and on_mainline(parents[1]) and not on_mainline(parents[0]):
            return c, parents[1], git.run(repo, "log", "-1", "--format=%s", c).stdout.strip()
    return None


def format_commits(repo: Path, base: str, head: str, out_dir: Path) -> list[tuple[Path, str | None, str]]:
    """Format base..head (our trailers removed) as patch files: [(file, Patch-Id trailer, commit)]. A
    range with merges is linearised by first parent: each patch is one step of the chain (a merge: what
    it brought in), so no patch undoes another side's lines for the next to put back (issue 35)."""
    commits = git.run(repo, "rev-list", "--reverse", "--first-parent", f"{base}..{head}").stdout.split()
    prev = base
    pid_of: list[tuple[str | None, str]] = []
    for c in commits:
        meta = git.run(repo, "log", "-1", "--format=%an%x00%ae%x00%ad%x00%T%x00%B", "--date=raw", c).stdout
        an, ae, ad, tree, msg = meta.split("\x00", 4)
        clean, pid = strip_our_trailers(msg)
        prev = odb.commit_tree(repo, tree, prev, clean,
                               env={"GIT_AUTHOR_NAME": an, "GIT_AUTHOR_EMAIL": ae, "GIT_AUTHOR_DATE": "@" + ad, **PURE_ENV})
        pid_of.append((pid, c))
    out_dir.mkdir(parents=True, exist_ok=True)
    if not commits:
        return []
    names = git.run(repo, *FORMAT_PATCH_ARGS, "-o", str(out_dir), f"{base}..{prev}", env=PURE_ENV).stdout.split()
    return [(Path(n), pid, c) for n, (pid, c) in zip(names, pid_of)]


def format_patch_slug(file_name: str) -> str:
    """`0003-fix-foo.patch` -> `fix-foo.patch`."""
    m = re.match(r"^\d{4}-(.*)$", file_name)
    return m.group(1) if m else file_name
