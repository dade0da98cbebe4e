"""The one judgement of whether a patch may leave its series: upstream must contain its *code*.

The invariant (issue 26; docs/design.md "Retirement"): nothing becomes `superseded` or
`already-upstream`, no `Applied-Upstream:` trailer is written and no patch is dropped without a
**code signal** that REF contains the change, read on REF's tree by the one judge
(lucepatch.engine.absorption — its module doc has the rules and the words):

  patch-id       an upstream commit in base..REF has the patch's `git patch-id --stable`, and REF's
                 tree still has the change (a later revert or change of those lines cancels it)
  backport       `Upstream-Status: Backport [sha]` and sha is an ancestor of REF (not reverted since)
  reverse-apply  the patch reverse-applies exactly to REF's tree
  content-match  every significant changed run of the patch is in REF (whitespace/context may differ)
  3-way          the patch re-applied on REF (3-way, after the series' earlier patches) changes nothing

Behaviour is evidence, not a signal: scenarios behaving alike with and without a patch prove that
*these inputs* behave alike, not that upstream fixed the bug (an upstream may fix only the part of
the input space the scenarios use, mask the symptom, or move the bug). Retirement by behaviour
(lucepatch.upstream.retire) therefore yields at most `retire-candidate (needs review)`, and an input
sweep over the scenarios' declared parameters adds evidence to a candidate, never a code signal.
And behaviour measured decides *against* code: a patch whose code upstream has but which a scenario
still needs at REF is kept (absorption.decide).

Every writer asks here: the retire report's statuses (`decide`), `status --behaviour` and the
upstreamed detector (`accepts`), a rebase session's drops (`may_drop`, absorption.decide) and
`bisect --record` (`code_signal_at`).
"""

from __future__ import annotations

from pathlib import Path

from lucepatch import git
from lucepatch.engine.absorption import CODE_SIGNALS, INVARIANT, UpstreamJudge, accepts, is_code_signal
from lucepatch.engine.apply import WorkArea, open_state
from lucepatch.engine.core import ALREADY_UPSTREAM

SUPERSEDED = "superseded"
RETIRE_CANDIDATE = "retire-candidate"


def decide(behaviour: str, code) -> str:
    """The status a patch gets from what behaviour found and the code signal (None when there is
    none): `superseded` needs both; behaviour alone is at most a `retire-candidate`."""
    if behaviour in (SUPERSEDED, RETIRE_CANDIDATE):
        return SUPERSEDED if is_code_signal(code) else RETIRE_CANDIDATE
    return behaviour


def may_drop(judgement) -> bool:
    """A rebase session's --drop-superseded: the judgement (engine.needed.Judgement) is `superseded`,
    names its code signal and comes from a report made under the invariant."""
    return accepts(judgement.needed, judgement.code_signal, judgement.invariant)


def findings(target, source: Path, base: str, ref: str, cache: Path) -> dict:
    """{patch name: absorption.Finding} for every patch of `target` at `ref`.

    The judge's tree-read signals first (patch-id and backport counted only as absorption says,
    reverse-apply, content-match), then each patch re-applied on REF in series order with a 3-way
    merge (a patch that does not apply is left out and the next one tried): a result identical to
    the tree before is the `3-way` signal."""
    source = Path(source)
    out: dict = {}
    with WorkArea(Path(cache), f"code-{target.name}") as work:
        state, files = open_state(source, target.patches, work, ref)
        judge = UpstreamJudge(work.repo, base, ref, work.path / "judge")
        for p, f in zip(target.patches, files):
            found = judge.code(p, f)
            # applied cumulatively (a conflict leaves the index as it was and the next patch is tried)
            status, _ = state.apply(p, f)
            if not found.upstream and status == ALREADY_UPSTREAM:
                found = judge.three_way(p)
            out[p.name] = found
    return out


def code_signals(target, source: Path, base: str, ref: str, cache: Path) -> dict[str, dict | None]:
    """{patch name: the code signal that REF contains it, or None} for every patch of `target`
    (`findings`, as the retire report and bisect --record record them)."""
    return {name: f.code_signal() for name, f in findings(target, source, base, ref, cache).items()}


def code_signal_at(target, source: Path, patch, commit: str, cache: Path) -> dict | None:
    """The code signal that upstream `commit` contains `patch` (the series' earlier patches applied
    first for the 3-way signal), or None: what `bisect --record` needs before it writes
    Applied-Upstream: <commit>."""
    base = git.try_resolve(Path(source), target.base) or target.base
    return code_signals(target, source, base, commit, cache).get(patch.name)


__all__ = ["CODE_SIGNALS", "INVARIANT", "SUPERSEDED", "RETIRE_CANDIDATE", "is_code_signal", "decide", "accepts",
           "may_drop", "code_signals", "code_signal_at"]
