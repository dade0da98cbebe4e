"""`lucepatch rebase TARGET --onto REF`: a resumable session (services/rebase.py, engine/session.py);
`--status`, `--continue`, `--skip PATCH`, `--abort` act on it; the workspace is written once;
`--dry-run` reports without one."""

from __future__ import annotations

import sys

import click

from lucepatch import api, report
from lucepatch.commands._common import cache, fetch_option, json_option, refuse_unused, source_option, workspace
from lucepatch.errors import UsageError


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
@click.option("--keep", "keep", multiple=True, metavar="PATCH",
              help="Carry PATCH even where upstream's code has it (reject an absorption by code alone): it is applied, "
                   "or the session stops for a human where re-applied it changes nothing. On a terminal the session "
                   "asks about each absorption by code alone before it walks.")
@click.option("--dry-run", is_flag=True, help="Walk the whole series and report; no session, nothing written.")
@click.option("--no-verify", is_flag=True,
              help="Accept 3-way merges and hand resolutions without building them and running their Reproducer: "
                   "scenarios (the session's journal records that they were not checked).")
@fetch_option
@json_option
@click.pass_context
def command(ctx, target, source, onto, show, cont, skip, abort, line, backport, build_only, no_interactive,
            no_behaviour, drop_superseded, keep, dry_run, no_verify, fetch, as_json):
    """Carry TARGET's series from its base to --onto REF, stopping for a human on conflicts."""
    modes = [m for m, on in zip(("--onto", "--status", "--continue", "--skip", "--abort"), (onto, show, cont, skip, abort)) if on]
    if len(modes) != 1:
        raise UsageError("rebase needs exactly one of --onto REF, --status, --continue, --skip PATCH, --abort"
                         + (f" (got {', '.join(modes)})" if modes else ""))
    refuse_unused(ctx, "rebase")  # e.g. --line, --backport, --build-only, --dry-run start a session: --onto only
    ws, c = workspace(ctx), cache(ctx)
    if show:
        return _emit(as_json, api.rebase_status(ws, c, target))
    if not onto:
        sess = api.rebase_open(ws, c, target)
    else:
        t, src = api.rebase_prepare(ws, target, source, dry_run=dry_run)
        opts = api.RebaseOptions(drop_superseded, no_behaviour, line, tuple(backport), tuple(build_only),
                                 verify=not no_verify, keep=tuple(keep))
        sess = api.rebase_start(c, t, src, onto, opts, dry_run=dry_run, fetch=fetch)
        if isinstance(sess, api.RebaseOutcome):  # a dry run: reported, nothing kept
            return _emit(as_json, sess)
    interactive = not no_interactive and sys.stdin.isatty() and not as_json
    return _emit(as_json, api.rebase_run(sess, resumed=not onto, abort=abort, skip=skip, cont=cont,
                                         on_conflict=api.rebase_ask if interactive else None,
                                         on_absorbed=api.rebase_ask_absorbed if interactive and onto else None))


def _emit(as_json: bool, out) -> int:
    doc = out.doc
    if out.range_diff:
        report.result(out.range_diff.rstrip(), as_json=as_json)
    if as_json:
        report.emit_json("rebase", doc or {"session": None})
    if doc:
        report.table(*api.rebase_table(doc), as_json=as_json)
        for w in doc.get("warnings") or []:
            report.progress(f"warning: {w}")
    report.progress(out.line)
    return out.code
