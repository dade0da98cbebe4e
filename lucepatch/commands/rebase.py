"""`lucepatch rebase TARGET --onto REF`: a resumable session (engine/session.py); `--status`, `--continue`,
`--skip PATCH`, `--abort` act on it; the workspace is written once; `--dry-run` reports without one."""

from __future__ import annotations

import sys

import click

from lucepatch import report
from lucepatch.commands._common import cache, json_option, require_source, source_option, workspace
from lucepatch.engine import checkout as co, session as S
from lucepatch.engine.apply import pause_at
from lucepatch.engine.subtargets import for_rebase
from lucepatch.errors import EXIT_CHECK_FAILED, UsageError
from lucepatch.target import list_targets, load_target
from lucepatch.upstream import retire  # noqa: F401  (registers the `needed` judge: engine/needed.py)


@click.command("rebase")
@click.argument("target", required=False)
@source_option
@click.option("--onto", default=None, help="Upstream ref to carry the series to (starts a session).")
@click.option("--status", "show", is_flag=True, help="Show the open session.")
@click.option("--continue", "cont", is_flag=True, help="Resume after resolving the stopped patch (or an interruption).")
@click.option("--skip", "skip", default=None, metavar="PATCH", help="Drop PATCH (the stopped one or a later one).")
@click.option("--abort", is_flag=True, help="Throw the session away; the workspace was never written.")
@click.option("--line", default=None, help="Write the result as a new line of the series: patches/<family>-<LINE>.")
@click.option("--backport", multiple=True, metavar="REV", help="Carry upstream commit REV first (Upstream-Status: Backport).")
@click.option("--build-only", multiple=True, metavar="REV", help="Mark the --backport of REV Build-Only: yes.")
@click.option("--no-interactive", is_flag=True, help="Never prompt: stop at the first patch that needs a human (exit 1).")
@click.option("--no-behaviour", is_flag=True, help="Do not judge `needed` by behaviour (every patch not-judged).")
@click.option("--drop-superseded", is_flag=True,
              help="Move patches judged superseded (behaviour and a code signal that upstream has the code, by a "
                   "verify --retire report under that rule) to absorbed/; a retire-candidate is never moved.")
@click.option("--dry-run", is_flag=True, help="Walk the whole series and report; no session, nothing written.")
@click.option("--fetch", is_flag=True, help="Allow a `git fetch` when the base commit is not in the checkout.")
@json_option
@click.pass_context
def command(ctx, target, source, onto, show, cont, skip, abort, line, backport, build_only, no_interactive,
            no_behaviour, drop_superseded, dry_run, fetch, as_json):
    """Carry TARGET's series from its base to --onto REF, stopping for a human on conflicts."""
    modes = [m for m, on in zip(("--onto", "--status", "--continue", "--skip", "--abort"), (onto, show, cont, skip, abort)) if on]
    if len(modes) != 1:
        raise UsageError("rebase needs exactly one of --onto REF, --status, --continue, --skip PATCH, --abort"
                         + (f" (got {', '.join(modes)})" if modes else ""))
    if not onto and (line or backport or build_only):
        raise UsageError("--line, --backport and --build-only start a session: use them with --onto REF")
    ws, c = workspace(ctx), cache(ctx)
    if not onto:  # the session's target may be a line it is creating: no target folder yet
        name = target or load_target(ws, None).name
        store = S.Store(c, ws.patches_dir / name, name)
        if show:
            st = store.read() if store.exists() else None
            return _emit(as_json, st and S.summary(st, store), S.describe(st, store) if st else
                         f"no rebase session of {name} is open")
        sess = S.Session.open(c, store, known=list_targets(ws))
    else:
        t = load_target(ws, target)
        ws.require_writable("rebase") if not dry_run else None
        if not t.patches:
            raise UsageError(f"series {t.dir / 'series'} lists no patches; nothing to rebase")
        src = require_source(source, t.name, family=t.family)
        co.open_checkout(src)
        subs = for_rebase(t, src, c, onto, dry_run=dry_run, fetch=fetch, as_json=as_json)  # [[submodule]]s
        opts = S.Options(drop_superseded, no_behaviour, line, tuple(backport), tuple(build_only))
        if dry_run:
            doc = {**S.dry_run(c, t, src, onto, opts, fetch=fetch), **({"submodules": subs} if subs else {})}
            n = len(doc["conflicts"]) + sum(d["conflicts"] for d in subs)
            _emit(as_json, doc, f"dry run: {n} conflict(s); nothing written")
            return EXIT_CHECK_FAILED if n else 0
        sess = S.Session.start(c, t, src, onto, opts, fetch=fetch)
    try:
        if abort:
            return _aborted(sess, as_json)
        if not onto:
            sess.recover_interrupted()
            if skip and not sess.skip(skip):
                return _stopped(sess, as_json)
            if cont and sess.st.phase == S.CONFLICT_PHASE:
                sess.resolve()
        return _drive(sess, as_json, interactive=not no_interactive and sys.stdin.isatty() and not as_json)
    finally:
        sess.close()


def _drive(sess: S.Session, as_json: bool, *, interactive: bool) -> int:
    phase = sess.st.phase
    if phase == S.WALKING:
        phase = S.run_until_stop(sess, S.ask_human if interactive else None)
    if phase == "abort":
        return _aborted(sess, as_json)
    if phase in ("quit", S.CONFLICT_PHASE):
        return _stopped(sess, as_json)
    plan = sess.plan()
    pause_at(len(sess.st.patches))
    sess.write(plan)
    doc = S.summary(sess.st, None, plan, written=True)
    if plan["range_diff"]:
        report.result(plan["range_diff"].rstrip(), as_json=as_json)
    return _emit(as_json, doc, f"{sess.st.target_dir} now on {sess.st.onto[:12]} ({sess.st.direction}), version "
                               f"{plan['new_version']} ({plan['bump']})")


def _aborted(sess: S.Session, as_json: bool) -> int:
    sess.store.remove()  # sess.st is kept in memory for the report
    return _emit(as_json, {**S.summary(sess.st, None), "phase": "aborted"},
                 f"rebase session of {sess.st.target} aborted; the workspace and the checkout were never written")


def _stopped(sess: S.Session, as_json: bool) -> int:
    return _emit(as_json, S.summary(sess.st, sess.store), S.describe(sess.st, sess.store)) or EXIT_CHECK_FAILED


def _emit(as_json: bool, doc: dict | None, line: str) -> int:
    if as_json:
        report.emit_json("rebase", doc or {"session": None})
    if doc:
        report.table(S.title(doc), S.TABLE_COLUMNS, S.table_rows(doc), as_json=as_json)
        for w in doc.get("warnings") or []:
            report.progress(f"warning: {w}")
    report.progress(line)
    return 0
