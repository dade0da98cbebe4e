"""The one judgement of whether a patch may leave its series: upstream must contain its *code*.

The invariant (issue 26; docs/design.md "Retirement"): nothing becomes `superseded` or
`already-upstream`, no `Applied-Upstream:` trailer is written and no patch is dropped without a
**code signal** that upstream contains the change:

  patch-id       an upstream commit in base..REF has the patch's `git patch-id --stable`
  reverse-apply  the patch reverse-applies exactly to REF's tree
  content-match  every significant changed run of the patch is in REF (whitespace/context may differ)
  3-way          the patch re-applied on REF (3-way, after the series' earlier patches) changes nothing

Behaviour is evidence, not a signal: scenarios behaving alike with and without a patch prove that
*these inputs* behave alike, not that upstream fixed the bug (an upstream may fix only the part of
the input space the scenarios use, mask the symptom, or move the bug). Retirement by behaviour
(lucepatch.upstream.retire) therefore yields at most `retire-candidate (needs review)`, and an input
sweep over the scenarios' declared parameters adds evidence to a candidate, never a code signal.

Every writer asks here: the retire report's statuses (`decide`), `status --behaviour` and the
upstreamed detector (`accepts`), a rebase session's `--drop-superseded` (`may_drop`) and
`bisect --record` (`code_signal_at`).
"""

from __future__ import annotations

from pathlib import Path

from lucepatch import git
from lucepatch.engine.apply import WorkArea, open_state
from lucepatch.engine.core import ALREADY_UPSTREAM
from lucepatch.engine.upstreamed import CODE_SIGNALS, content_match, tree_reader, upstream_patch_ids

SUPERSEDED = "superseded"
RETIRE_CANDIDATE = "retire-candidate"
# Reports and judgements made under this rule carry {"invariant": INVARIANT}; one without it (made
# before the rule, when behaviour alone could say superseded) is read, never acted on.
INVARIANT = 1


def is_code_signal(sig) -> bool:
    """A code signal: {"signal": one of CODE_SIGNALS, ...} (or an object with .signal)."""
    name = sig.get("signal") if isinstance(sig, dict) else getattr(sig, "signal", None)
    return name in CODE_SIGNALS


def decide(behaviour: str, code) -> str:
    """The status a patch gets from what behaviour found and the code signal (None when there is
    none): `superseded` needs both; behaviour alone is at most a `retire-candidate`."""
    if behaviour in (SUPERSEDED, RETIRE_CANDIDATE):
        return SUPERSEDED if is_code_signal(code) else RETIRE_CANDIDATE
    return behaviour


def accepts(status: str, code, invariant) -> bool:
    """May a recorded `status` (a retire report row, a rebase judgement) count as "upstream has it"?
    Only `superseded` with a code signal, from a report made under this rule."""
    return status == SUPERSEDED and is_code_signal(code) and invariant == INVARIANT


def may_drop(judgement) -> bool:
    """A rebase session's --drop-superseded: the judgement (engine.needed.Judgement) is `superseded`,
    names its code signal and comes from a report made under the invariant."""
    return accepts(judgement.needed, judgement.code_signal, judgement.invariant)


def code_signals(target, source: Path, base: str, ref: str, cache: Path) -> dict[str, dict | None]:
    """{patch name: the code signal that REF contains it, or None} for every patch of `target`.

    The textual signals first (patch-id over base..REF, reverse-apply, content-match), then each
    patch re-applied on REF in series order with a 3-way merge (a patch that does not apply is
    left out and the next one tried): a result identical to the tree before is the `3-way` signal."""
    source = Path(source)
    out: dict[str, dict | None] = {}
    ids = upstream_patch_ids(source, base, ref) if base != ref else {}
    with WorkArea(Path(cache), f"code-{target.name}") as work:
        state, files = open_state(source, target.patches, work, ref)
        read = tree_reader(work.repo, ref)
        for p, f in zip(target.patches, files):
            sig = None
            if p.patch_id in ids:
                sig = {"signal": "patch-id", "commit": ids[p.patch_id],
                       "detail": f"upstream commit {ids[p.patch_id][:12]} has patch-id {p.patch_id[:12]}"}
            elif state.check_reverse(f):
                sig = {"signal": "reverse-apply", "commit": None,
                       "detail": f"the patch reverse-applies exactly to {ref[:12]}"}
            elif content_match(p, read):
                sig = {"signal": "content-match", "commit": None,
                       "detail": f"every changed run is present in {ref[:12]} (whitespace/context differ)"}
            # applied cumulatively (a conflict leaves the index as it was and the next patch is tried)
            status, _ = state.apply(p, f)
            if sig is None and status == ALREADY_UPSTREAM:
                sig = {"signal": "3-way", "commit": None,
                       "detail": f"re-applied on {ref[:12]} (3-way, after the series' earlier patches) it changes "
                                 "nothing"}
            out[p.name] = sig
    return out


def code_signal_at(target, source: Path, patch, commit: str, cache: Path) -> dict | None:
    """The code signal that upstream `commit` contains `patch` (the series' earlier patches applied
    first for the 3-way signal), or None: what `bisect --record` needs before it writes
    Applied-Upstream: <commit>."""
    base = git.try_resolve(Path(source), target.base) or target.base
    return code_signals(target, source, base, commit, cache).get(patch.name)


__all__ = ["CODE_SIGNALS", "INVARIANT", "SUPERSEDED", "RETIRE_CANDIDATE", "is_code_signal", "decide", "accepts",
           "may_drop", "code_signals", "code_signal_at"]
