"""Is a patch still needed at a new base? The interface a rebase session asks it through.

A rebase session gives every patch two fields: `applies` (how its text goes onto the new base,
decided by the series engine) and `needed` (whether its *behaviour* is still required there,
decided by a judge that builds and runs reproducers — issue 11's retirement rule). The session
never computes `needed` itself; at session start it asks the judge its caller handed in
(`Options.judge`, engine/session.py) once:

    judge(target, source, ref, patches) -> {patch name: Judgement}

The session also hands the judge where to look (keywords): `cache` (the session's cache dir,
`--cache-dir` honoured) and `reproducers` (the workspace's reproducers folder: the session's
staged copy of the target has none). A judge may leave patches out of its answer (they read as
`not-judged`), must not write into `source`, and returns `Judgement.driver` = "fake" / "real" so
the report can say whether a simulated driver decided. With no judge handed in, and always with
`rebase --no-behaviour`, every patch is `not-judged`. A label never drops a patch by itself:
the session moves a `superseded` patch to absorbed/ only with `--drop-superseded`, and only when
the judgement names a code signal and was made under the invariant (engine/retirement.py); a
`retire-candidate` (behaviour alone) is never dropped.

The judge is handed in, never registered: the retirement rule (lucepatch.upstream.retire.judge)
sits floors above the engine (docs/design.md "Layers"), and the service that starts sessions
(lucepatch/services/rebase.py) passes it — no module changes another's state by being imported.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Sequence

if TYPE_CHECKING:  # pragma: no cover
    from lucepatch.series import Patch
    from lucepatch.target import Target

STILL_NEEDED = "still-needed"
SUPERSEDED = "superseded"
RETIRE_CANDIDATE = "retire-candidate"  # behaviour alone: needs a reviewer, never dropped
UNTESTABLE = "untestable"
INCONCLUSIVE = "inconclusive"
CONFLICT = "conflict"  # does not apply at REF and nothing measured says it is needed: rebase it to judge
NOT_JUDGED = "not-judged"
VERDICTS = (STILL_NEEDED, SUPERSEDED, RETIRE_CANDIDATE, UNTESTABLE, INCONCLUSIVE, CONFLICT, NOT_JUDGED)


@dataclass(frozen=True)
class Judgement:
    needed: str = NOT_JUDGED
    reason: str = ""
    scenario: str | None = None  # the reproducer:scenario that decided, when one did
    driver: str | None = None  # "fake" (simulated driver) / "real" / None (nothing ran)
    code_signal: dict | None = None  # that upstream contains the code (engine/retirement.py), when one was found
    invariant: int | None = None  # the rule the judgement was made under (retirement.INVARIANT; None: before it)
    measured: str = ""  # what the deciding scenario did at REF without and with the patch (runs counted), if measured

    def __post_init__(self):
        if self.needed not in VERDICTS:
            raise ValueError(f"needed must be one of {VERDICTS}, not {self.needed!r}")

    @property
    def simulated(self) -> bool | None:
        return None if self.driver is None else self.driver == "fake"

    def to_json(self) -> dict:
        return {**asdict(self), "simulated": self.simulated}

    @classmethod
    def from_json(cls, doc: dict | None) -> "Judgement":
        doc = doc or {}
        return cls(doc.get("needed", NOT_JUDGED), doc.get("reason", ""), doc.get("scenario"), doc.get("driver"),
                   doc.get("code_signal"), doc.get("invariant"), doc.get("measured", ""))


Judge = Callable[["Target", Path, str, Sequence["Patch"]], dict]


def not_judged(target, source, ref, patches, *, reason: str = "no behaviour judge was handed to the session") -> dict[str, Judgement]:
    return {p.name: Judgement(NOT_JUDGED, reason) for p in patches}


def judge(target, source: Path, ref: str, patches: Sequence, *, by: Judge | None = None, no_behaviour: bool = False,
          **where) -> dict[str, Judgement]:
    """{name: Judgement} for every patch, as `by` answers; `not-judged` where it does not (or with
    no judge). `where`: the keywords handed to the judge (cache, reproducers)."""
    if no_behaviour:
        return not_judged(target, source, ref, patches, reason="--no-behaviour")
    if by is None:
        return not_judged(target, source, ref, patches)
    answer = by(target, source, ref, patches, **where) or {}
    out = {}
    for p in patches:
        j = answer.get(p.name)
        out[p.name] = j if isinstance(j, Judgement) else Judgement(NOT_JUDGED, "the judge gave no answer for it")
    return out
