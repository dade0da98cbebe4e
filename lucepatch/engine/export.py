"""Export: patch files from the commits of a lucepatch branch, byte-stable (`lucepatch export`, the API).

A patch whose change (patch-id) and message/author are unchanged keeps its file's bytes exactly,
whatever format-patch would print today (index lines, offsets, diffstat): no churn. Changed or
new commits are written in `git format-patch --zero-commit --no-signature --full-index -N` form;
files of patches that left the branch are removed from the folder and the series.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from lucepatch import git
from lucepatch.engine import checkout as co
from lucepatch.engine.apply import WorkArea, clone_private, resolve_base
from lucepatch.engine.commits import format_commits, format_patch_slug
from lucepatch.errors import UsageError
from lucepatch.series import parse_patch
from lucepatch.target import Target


def same_patch(old, new) -> bool:
    return (old.patch_id == new.patch_id and old.subject == new.subject and old.body.rstrip() == new.body.rstrip()
            and old.author == new.author and old.date == new.date)


def plan_export(t, files) -> tuple[list[tuple[str, bytes, str]], list[str]]:
    """[(name, bytes, action)] in branch order, and the names that left the series."""
    by_pid = {}
    for p in t.patches:
        by_pid.setdefault(p.patch_id, p)
    by_name = {p.name: p for p in t.patches}
    plan, used = [], set()
    for f, trailer_pid, _commit in files:
        new = parse_patch(f, f.name)
        old = by_pid.get(new.patch_id) or (by_pid.get(trailer_pid) if trailer_pid else None)
        if old is not None and old.name not in used:
            name = old.name
            if same_patch(old, new):
                plan.append((name, old.raw, "unchanged"))
            else:
                plan.append((name, new.raw, "updated"))
        else:
            name = format_patch_slug(f.name)
            stem, n = name[:-6] if name.endswith(".patch") else name, 2
            while name in used or (name in by_name and name not in used and by_name[name].patch_id != new.patch_id):
                name = f"{stem}-{n}.patch"
                n += 1
            plan.append((name, new.raw, "added"))
        used.add(name)
    removed = [n for n in t.series if n not in used]
    return plan, removed


@dataclass
class ExportResult:
    branch: str
    head: str
    plan: list[tuple[str, bytes, str]] = field(default_factory=list)  # (name, bytes, action) in branch order
    removed: list[str] = field(default_factory=list)
    series_changed: bool = False

    @property
    def changed(self) -> list[str]:
        return [n for n, _, a in self.plan if a != "unchanged"] + self.removed


def export_series(t: Target, src: Path, cache: Path, *, branch: str | None = None, write: bool = True) -> ExportResult:
    """Write `t`'s patch files and series from base..branch of `src` (write=False: only compute)."""
    _ = t.patches
    co.open_checkout(src)
    branch = branch or t.branch_name
    head = git.try_resolve(src, branch)
    if head is None:
        raise UsageError(f"branch {branch} does not exist in {src}; run lucepatch apply first or pass --branch")
    base = resolve_base(src, t.base, t.name, upstream=t.upstream_urls)
    if git.run(src, "merge-base", "--is-ancestor", base, head, check=False).status != 0:
        raise UsageError(f"branch {branch} does not contain the base {base[:12]} of {t.name}; rebase it or fix target.toml")
    with WorkArea(cache, f"export-{t.name}") as work:
        clone_private(src, work.repo)
        files = format_commits(work.repo, base, head, work.path / "out")
        plan, removed = plan_export(t, files)
        res = ExportResult(branch, head, plan, removed, [n for n, _, _ in plan] != t.series)
        if write:
            for name, data, action in plan:
                if action != "unchanged":
                    tmp = t.dir / (name + ".lucepatch-tmp")
                    tmp.write_bytes(data)
                    tmp.replace(t.dir / name)
            if res.series_changed:
                series_path = t.dir / "series"
                tmp = series_path.with_name("series.lucepatch-tmp")
                tmp.write_text("".join(f"{n}\n" for n, _, _ in plan))
                tmp.replace(series_path)
            for n in removed:
                (t.dir / n).unlink(missing_ok=True)
    return res
