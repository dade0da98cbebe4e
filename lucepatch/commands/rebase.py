"""`lucepatch rebase TARGET --onto REF`: a resumable session (engine/session.py); `--status`, `--continue`,
`--skip PATCH`, `--abort` act on it; the workspace is written once; `--dry-run` reports without one."""

from __future__ import annotations

import sys

import click

from lucepatch import report
from lucepatch.commands._common import cache, json_option, require_source, source_option, workspace
from lucepatch.engine import checkout as co
from lucepatch.engine import session as S
from lucepatch.engine.apply import pause_at
from lucepatch.errors import EXIT_CHECK_FAILED, UsageError
from lucepatch.target import load_target


@click.command("rebase")
@click.argument("target", required=False)
@source_option
@click.option("--onto", default=None, help="Upstream ref to carry the series to (starts a session).")
@click.option("--status", "show", is_flag=True, help="Show the open session.")
@click.option("--continue", "cont", is_flag=True, help="Resume after resolving the stopped patch (or an interruption).")
@click.option("--skip", "skip", default=None, metavar="PATCH", help="Drop PATCH (the stopped one or a later one).")
@click.option("--abort", is_flag=True, help="Throw the session away; the workspace was never written.")
@click.option("--no-interactive", is_flag=True, help="Never prompt: stop at the first patch that needs a human (exit 1).")
@click.option("--no-behaviour", is_flag=True, help="Do not judge `needed` by behaviour (every patch not-judged).")
@click.option("--drop-superseded", is_flag=True, help="Move patches judged superseded to absorbed/.")
@click.option("--dry-run", is_flag=True, help="Walk the whole series and report; no session, nothing written.")
@click.option("--fetch", is_flag=True, help="Allow a `git fetch` when the base commit is not in the checkout.")
@json_option
@click.pass_context
def command(ctx, target, source, onto, show, cont, skip, abort, no_interactive, no_behaviour, drop_superseded,
            dry_run, fetch, as_json):
    """Carry TARGET's series from its base to --onto REF, stopping for a human on conflicts."""
    modes = [m for m, on in (("--onto", onto), ("--status", show), ("--continue", cont), ("--skip", skip),
                             ("--abort", abort)) if on]
    if len(modes) != 1:
        raise UsageError("rebase needs exactly one of --onto REF, --status, --continue, --skip PATCH, --abort"
                         + (f" (got {', '.join(modes)})" if modes else ""))
    ws = workspace(ctx)
    t = load_target(ws, target)
    c = cache(ctx)
    if show:
        store = S.Store(c, t.dir, t.name)
        st = store.read() if store.exists() else None
        return _emit(as_json, st and S.summary(st, store), S.describe(st, store) if st else
                     f"no rebase session of {t.name} is open")
    if onto:
        ws.require_writable("rebase") if not dry_run else None
        if not t.patches:
            raise UsageError(f"series {t.dir / 'series'} lists no patches; nothing to rebase")
        src = require_source(source, t.name)
        co.open_checkout(src)
        opts = S.Options(drop_superseded=drop_superseded, no_behaviour=no_behaviour)
        if dry_run:
            doc = S.dry_run(c, t, src, onto, opts, fetch=fetch)
            _emit(as_json, doc, f"dry run: {len(doc['conflicts'])} conflict(s); nothing written")
            return EXIT_CHECK_FAILED if doc["conflicts"] else 0
    sess = S.Session.start(c, t, src, onto, opts, fetch=fetch) if onto else S.Session.open(c, t)
    try:
        if abort:
            st = sess.st
            sess.store.remove()
            return _emit(as_json, {**S.summary(st, None), "phase": "aborted"},
                         f"rebase session of {t.name} aborted; {t.dir} and the checkout were never written")
        if not onto:
            sess.recover_interrupted()
            if skip and not sess.skip(skip):
                return _stopped(sess, as_json)
            if cont and sess.st.phase == S.CONFLICT_PHASE:
                sess.resolve()
        return _drive(sess, t, as_json, interactive=not no_interactive and sys.stdin.isatty() and not as_json)
    finally:
        sess.close()


def _drive(sess: S.Session, t, as_json: bool, *, interactive: bool) -> int:
    phase = sess.st.phase
    if phase == S.WALKING:
        phase = S.run_until_stop(sess, _prompt if interactive else None)
    if phase == "abort":
        st = sess.st
        sess.store.remove()
        return _emit(as_json, {**S.summary(st, None), "phase": "aborted"}, f"rebase session of {t.name} aborted")
    if phase in ("quit", S.CONFLICT_PHASE):
        return _stopped(sess, as_json)
    plan = sess.plan()
    pause_at(len(sess.st.patches))
    sess.write(plan)
    doc = S.summary(sess.st, None, plan, written=True)
    if plan["range_diff"] and not as_json:
        report.err.print(plan["range_diff"].rstrip(), markup=False, highlight=False)
    _emit(as_json, doc, f"{t.dir} now on {sess.st.onto[:12]} ({sess.st.direction}), version {plan['new_version']} "
                        f"({plan['bump']})")
    return 0


def _stopped(sess: S.Session, as_json: bool) -> int:
    return _emit(as_json, S.summary(sess.st, sess.store), S.describe(sess.st, sess.store)) or EXIT_CHECK_FAILED


def _prompt(sess: S.Session) -> str:
    report.table(f"rebase {sess.st.target}: stopped", S.TABLE_COLUMNS, S.table_rows(S.summary(sess.st, sess.store)))
    report.err.print(S.describe(sess.st, sess.store), markup=False)
    return click.prompt("continue, skip, abort or quit (keep the session)", err=True,
                        type=click.Choice(["continue", "skip", "abort", "quit"]), default="continue")


def _emit(as_json: bool, doc: dict | None, line: str) -> int:
    if as_json:
        report.emit_json("rebase", doc or {"session": None})
    if doc:
        report.table(S.title(doc), S.TABLE_COLUMNS, S.table_rows(doc))
        for w in doc.get("warnings") or []:
            report.err.print(f"warning: {w}", markup=False)
    report.err.print(f"lucepatch: {line}", markup=False, highlight=False)
    return 0
