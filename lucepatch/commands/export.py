"""`lucepatch export TARGET --source P`: patch files from the lucepatch branch, byte-stable.

A patch whose change (patch-id) and message/author are unchanged keeps its file's bytes exactly,
whatever format-patch would print today (index lines, offsets, diffstat): no churn. Changed or
new commits are written in `git format-patch --zero-commit --no-signature --full-index -N` form;
files of patches that left the branch are removed from the folder and the series.
"""

from __future__ import annotations

import click

from lucepatch import git, report
from lucepatch.commands._common import cache, json_option, require_source, source_option, workspace
from lucepatch.engine import checkout as co
from lucepatch.engine.apply import WorkArea, clone_private, format_commits, format_patch_slug, resolve_base
from lucepatch.errors import EXIT_CHECK_FAILED, UsageError
from lucepatch.series import parse_patch
from lucepatch.target import load_target


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


@click.command("export")
@click.argument("target", required=False)
@source_option
@click.option("--branch", default=None, help="Branch to export (default lucepatch/<target>/<version>).")
@click.option("--check", "check_only", is_flag=True, help="Write nothing; exit 1 if export would change a file.")
@json_option
@click.pass_context
def command(ctx, target, source, branch, check_only, as_json):
    """Write TARGET's patch files from the commits of its lucepatch branch (base..branch)."""
    ws = workspace(ctx)
    t = load_target(ws, target)
    _ = t.patches
    if not check_only:
        ws.require_writable("export")
    src = require_source(source, t.name)
    co.open_checkout(src)
    branch = branch or t.branch_name
    head = git.try_resolve(src, branch)
    if head is None:
        raise UsageError(f"branch {branch} does not exist in {src}; run lucepatch apply first or pass --branch")
    base = resolve_base(src, t.base, t.name)
    if git.run(src, "merge-base", "--is-ancestor", base, head, check=False).status != 0:
        raise UsageError(f"branch {branch} does not contain the base {base[:12]} of {t.name}; rebase it or fix target.toml")
    with WorkArea(cache(ctx), f"export-{t.name}") as work:
        clone_private(src, work.repo)
        files = format_commits(work.repo, base, head, work.path / "out")
        plan, removed = plan_export(t, files)
        changed = [n for n, _, a in plan if a != "unchanged"] + removed
        new_series = "".join(f"{n}\n" for n, _, _ in plan)
        series_path = t.dir / "series"
        old_names = t.series
        series_changed = [n for n, _, _ in plan] != old_names
        if not check_only:
            for name, data, action in plan:
                if action != "unchanged":
                    tmp = t.dir / (name + ".lucepatch-tmp")
                    tmp.write_bytes(data)
                    tmp.replace(t.dir / name)
            if series_changed:
                tmp = series_path.with_name("series.lucepatch-tmp")
                tmp.write_text(new_series)
                tmp.replace(series_path)
            for n in removed:
                (t.dir / n).unlink(missing_ok=True)
    if as_json:
        report.emit_json("export", {"workspace": ws.to_json(), "target": t.name, "branch": branch, "head": head,
                                     "check": check_only, "series_changed": series_changed,
                                     "patches": [{"name": n, "action": a} for n, _, a in plan], "removed": removed})
    report.table(f"export {t.name} from {branch} ({head[:12]}) into {t.dir}", ["#", "patch", "action"],
                 [[i, n, a] for i, (n, _, a) in enumerate(plan, 1)] + [["-", n, "removed"] for n in removed])
    if check_only and (changed or series_changed):
        report.progress(f"export would change {len(changed) or 'the series'}; run lucepatch export")
        return EXIT_CHECK_FAILED
    return 0
