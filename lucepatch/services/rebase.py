"""`rebase` as a service: start, resume, drive and end a rebase session (engine/session.py). The
command and a program (lucepatch.api.rebase) both run a session through `start` and `run`, so a
program gets exactly what the CLI does; the command only adds option parsing, the terminal's prompt
and printing. A session's `needed` is answered by the retirement rule (upstream/retire.judge: the
report `verify --retire REF` saved), handed to the session here."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

from lucepatch.engine import session as S
from lucepatch.engine.apply import pause_at
from lucepatch.engine.rebase import code_alone
from lucepatch.engine.checkout import open_checkout
from lucepatch.engine.subtargets import for_rebase
from lucepatch.engine.session import Options, Session, ask_absorbed, ask_human
from lucepatch.errors import EXIT_CHECK_FAILED, UsageError
from lucepatch.target import Target, list_targets, load_target
from lucepatch.services import rebase_check
from lucepatch.upstream import retire
from lucepatch.workspace import Workspace, resolve_source

__all__ = ["rebase", "start", "run", "prepare", "open_session", "session_status", "table", "ask_human", "ask_absorbed",
           "Options", "Outcome", "Session"]


@dataclass
class Outcome:
    """Where a rebase step left the session: the `rebase --json` document (None: no session), the
    line that says so, the exit code, and the range-diff of a written series."""
    doc: dict | None
    line: str
    code: int = 0
    range_diff: str = ""
    warnings: list[str] = field(default_factory=list)


def table(doc: dict) -> tuple[str, list[str], list[list]]:
    """(title, columns, rows) of the table `rebase` prints for a document."""
    return S.title(doc), S.TABLE_COLUMNS, S.table_rows(doc)


def _store(ws: Workspace, cache: Path, name: str | None) -> tuple[S.Store, str]:
    # the session's target may be a line it is creating: no target folder yet
    name = name or load_target(ws, None).name
    return S.Store(cache, ws.patches_dir / name, name), name


def session_status(ws: Workspace, cache: Path, name: str | None) -> Outcome:
    """`rebase --status`: the open session of the target, or a line saying there is none."""
    store, name = _store(ws, cache, name)
    st = store.read() if store.exists() else None
    if st is None:
        return Outcome(None, f"no rebase session of {name} is open")
    return Outcome(S.summary(st, store), S.describe(st, store))


def open_session(ws: Workspace, cache: Path, name: str | None) -> Session:
    """The open session of the target, locked (`--continue`, `--skip`, `--abort`), with the checker
    of what it accepts (services/rebase_check.py; the session's options say whether it runs)."""
    store, _ = _store(ws, cache, name)
    sess = Session.open(cache, store, known=list_targets(ws))
    sess.checker = rebase_check.make_checker(ws.reproducers_dir)
    return sess


def prepare(ws: Workspace, name: str | None, source: str | None, *, dry_run: bool = False) -> tuple[Target, Path]:
    """What `rebase --onto` checks before a session starts: the target, a writable workspace (not
    for a dry run), a series, its checkout."""
    t = load_target(ws, name)
    if not dry_run:
        ws.require_writable("rebase")
    if not t.patches:
        raise UsageError(f"series {t.dir / 'series'} lists no patches; nothing to rebase")
    src = resolve_source(source, t.name, family=t.family)
    open_checkout(src)
    return t, src


def start(cache: Path, t: Target, src: Path, onto: str, opts: Options, *, dry_run: bool = False,
          fetch: bool = False) -> Session | Outcome:
    """`rebase --onto REF`: a new session, locked (or, with `dry_run`, the whole walk's Outcome,
    nothing kept). [[submodule]]s whose place moves in `onto` are carried in the same session
    (their rows `<name>/<patch>`); each sub-target is reported in `submodules` (a dry run).
    `needed` is the retirement rule's unless `opts.judge` names another judge."""
    if opts.judge is None:  # looked up now, not at import: the rule is the module's `judge` as it stands
        opts = dataclasses.replace(opts, judge=retire.judge)
    subs = for_rebase(t, src, onto)
    if dry_run:
        doc = {**S.dry_run(cache, t, src, onto, opts, fetch=fetch), **({"submodules": subs} if subs else {})}
        for d in subs:  # a carried sub-target's rows, as the session walked them
            rows = [r for r in doc["patches"] if r["name"].startswith(d["name"] + "/")]
            d["patches"] = [{"name": r["name"].split("/", 1)[1], "status": r["applies"], "action": r["action"],
                             "signal": r["signal"], "detail": r["detail"]} for r in rows]
            d["conflicts"] = sum(r["applies"] == "conflict" for r in rows)
        n = len(doc["conflicts"])
        # a patch a session would stop at without a textual conflict: kept (by behaviour or a person) where,
        # re-applied, it changes nothing
        other = sum(r["action"] == "would stop" and r["applies"] != "conflict" for r in doc["patches"])
        more = f", {other} other stop(s) for a human" if other else ""
        return Outcome(doc, f"dry run: {n} conflict(s){more}; nothing written", EXIT_CHECK_FAILED if n or other else 0)
    sess = Session.start(cache, t, src, onto, opts, fetch=fetch)
    sess.checker = rebase_check.make_checker(retire.reproducers_dir(t))
    return sess


def rebase(t: Target, src: Path, cache: Path, onto: str, *, dry_run: bool = False, fetch: bool = False,
           **options) -> dict:
    """Carry the series to `onto` without a human: `dry_run` walks it all in a throwaway area;
    otherwise a rebase session walks until a conflict — which leaves the session open for
    `lucepatch rebase --status/--continue/--skip/--abort` — or to the end, and writes the workspace
    once. `options`: those of `Options` (drop_superseded, no_behaviour, line, backports, build_only,
    judge). Returns the document `lucepatch rebase --json` prints (rows, conflicts, new version).
    With [[submodule]]s: refused (UsageError) when `onto` moves one; `dry_run` reports each
    sub-target at its pin there (`submodules`)."""
    started = start(cache, t, src, onto, Options(**options), dry_run=dry_run, fetch=fetch)
    out = started if isinstance(started, Outcome) else run(started)
    return out.doc


def run(sess: Session, *, resumed: bool = False, abort: bool = False, skip: str | None = None,
        cont: bool = False, on_conflict=None, on_absorbed=None) -> Outcome:
    """One step of a session, then the walk until it stops or is written; the session is closed
    (unlocked) at the end, whatever happens. `on_conflict(sess)` answers continue / skip / abort /
    quit at a conflict (the terminal's prompt); None stops there. `on_absorbed(sess, patch state)`
    answers drop / keep for each patch absorbed on a code signal alone, before the walk (the
    terminal's prompt: S.ask_absorbed); None leaves them absorbed, as their rows say."""
    try:
        if abort:
            return _aborted(sess)
        if resumed:
            sess.recover_interrupted()
            if skip and not sess.skip(skip):
                return _stopped(sess)
            if cont and sess.st.phase == S.CONFLICT_PHASE:
                sess.resolve()
        if on_absorbed is not None and sess.st.phase == S.WALKING:
            for ps in code_alone(sess.st):  # a person confirms or rejects what code alone would drop
                (sess.reject if on_absorbed(sess, ps) == "keep" else sess.confirm)(ps.name)
        return _drive(sess, on_conflict)
    finally:
        sess.close()


def _drive(sess: Session, on_conflict) -> Outcome:
    phase = sess.st.phase
    if phase == S.WALKING:
        phase = S.run_until_stop(sess, on_conflict)
    if phase == "abort":
        return _aborted(sess)
    if phase in ("quit", S.CONFLICT_PHASE):
        return _stopped(sess)
    plan = sess.plan()
    pause_at(len(sess.st.patches))
    sess.write(plan)
    st = sess.st
    return Outcome(S.summary(st, None, plan, written=True),
                   f"{st.target_dir} now on {st.onto[:12]} ({st.direction}), version {plan['new_version']} "
                   f"({plan['bump']})", 0, plan["range_diff"])


def _aborted(sess: Session) -> Outcome:
    sess.store.remove()  # sess.st is kept in memory for the report
    return Outcome({**S.summary(sess.st, None), "phase": "aborted"},
                   f"rebase session of {sess.st.target} aborted; the workspace and the checkout were never written")


def _stopped(sess: Session) -> Outcome:
    return Outcome(S.summary(sess.st, sess.store), S.describe(sess.st, sess.store), EXIT_CHECK_FAILED)
