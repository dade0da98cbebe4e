"""Build-Only patches at an upstream commit they were not written for (issue 36).

A Build-Only patch makes upstream build here at all (HAMi-core's `cmake_minimum_required(2.8.11)`,
which CMake >= 4 refuses). When upstream moves the lines it edits (52f33fc: 2.8.11 -> 2.8.12, which
CMake 4 still refuses), it no longer applies, and without a way round it nothing at that commit is
built: not REF as upstream ships it, not REF with the series. A build that meets a Build-Only patch
that does not apply exactly at its base tries, in this order, each only when the one before could
not be built (builders/native.py):

  1. as shipped  upstream as it ships, with the configure arguments target.toml declares in the
                 patch's place ([build.instead_of]: `-DCMAKE_POLICY_VERSION_MINIMUM=3.5` for a
                 `cmake_minimum_required` CMake 4 refuses; CMake 3.x ignores it), or none;
  2. 3-way       the patch merged 3-way (only when the merge left no conflict);
  3. resolution  the same patch as a line of the family based on that commit carries it (the rebase
                 session that made the line resolved it by hand and journalled it).

The build records which way it took for each such patch (`BuildResult.carried`, the variant's
provenance, the retirement report's builds); when none builds, the error names every way tried and
why it failed — the retirement report then says "not measured: REF does not build: ..." and nothing
behavioural (docs/design.md "Retirement").
"""

from __future__ import annotations

from dataclasses import dataclass, field
from lucepatch.engine.core import APPLIED, APPLIED_3WAY, CONFLICT
from lucepatch.errors import LucepatchError
from lucepatch.series import Patch
from lucepatch.target import Target, load_target_dir

AS_SHIPPED, THREE_WAY, RESOLUTION = "as shipped", "3-way", "resolution"


@dataclass(frozen=True)
class Way:
    """One way to build a list of patches whose Build-Only ones do not all apply exactly."""
    name: str  # as shipped | 3-way | resolution
    patches: tuple[Patch, ...]  # what is applied (a resolution's patch replaces the series' own)
    configure_args: tuple[str, ...] = ()  # after the target's own ([build.instead_of])
    how: dict = field(default_factory=dict)  # Build-Only patch name -> how this build carries it

    def describe(self) -> str:
        return "; ".join(f"{n}: {h}" for n, h in self.how.items())


class Moved(Exception):
    """Raised by a strict build (builders/native.py) before anything is built: some Build-Only patch
    does not apply exactly at `base`. Never leaves the builders (build_variant catches it)."""

    def __init__(self, base: str, outcomes: list):
        super().__init__(base)
        self.base = base
        self.outcomes = outcomes
        self.moved = [o for o in outcomes if o.patch.build_only and o.status != APPLIED]

    def describe(self) -> str:
        return "; ".join(_state(o, self.base) for o in self.moved)


def _state(o, base: str) -> str:
    if o.status == CONFLICT:
        files = _conflict_files(o.detail)
        return f"{o.patch.name} does not apply at {base[:12]}" + (f" (conflict in {', '.join(files)})" if files else "")
    return f"{o.patch.name} applies at {base[:12]} only 3-way"


def _conflict_files(detail: str) -> list[str]:
    out = []
    for part in detail.replace("\n", "; ").split("; "):
        part = part.strip()
        if part.startswith("U "):
            out.append(part[2:].strip())
    return list(dict.fromkeys(out))


def resolutions(target: Target, base: str) -> dict[str, tuple[Patch, str]]:
    """Build-Only patch name -> (its resolution, the line that carries it): the same patch in a
    line of `target`'s family whose base is `base` (a line a rebase session wrote onto it)."""
    out: dict[str, tuple[Patch, str]] = {}
    parent = target.dir.parent
    for d in sorted(parent.iterdir()) if parent.is_dir() else []:
        if d == target.dir or not (d / "target.toml").is_file():
            continue
        try:
            line = load_target_dir(d)
        except LucepatchError:
            continue  # a broken sibling folder carries nothing (lint names it)
        if line.family != target.family or not (line.base == base or (len(line.base) >= 7 and base.startswith(line.base))):
            continue
        for p in line.patches:
            if p.build_only and p.name not in out:
                out[p.name] = (p, line.name)
    return out


def ways(target: Target, moved: Moved, patches: list[Patch]) -> list[Way]:
    """The ways to try, in order, to build `patches` at `moved.base` (module docstring)."""
    cfg = target.build
    flags_of = dict(cfg.instead_of) if cfg is not None else {}
    names = {o.patch.name for o in moved.moved}
    status = {o.patch.name: o.status for o in moved.outcomes}
    out: list[Way] = []
    keep, args, how = [], [], {}
    for p in patches:
        if p.name not in names:
            keep.append(p)
            continue
        args += flags_of.get(p.name, [])
        how[p.name] = (f"{_state(_outcome(moved, p), moved.base)}: left out, upstream as it ships"
                       + (f" with {' '.join(flags_of[p.name])} (target.toml [build.instead_of])" if p.name in flags_of
                          else " (no [build.instead_of] for it)"))
    out.append(Way(AS_SHIPPED, tuple(keep), tuple(args), how))
    if all(status[n] == APPLIED_3WAY for n in names):
        out.append(Way(THREE_WAY, tuple(patches), (), {n: f"merged 3-way at {moved.base[:12]}" for n in names}))
    found = resolutions(target, moved.base)
    if names & set(found):
        keep, args, how = [], [], {}
        for p in patches:
            if p.name in names and p.name in found:
                res, line = found[p.name]
                keep.append(res)
                how[p.name] = (f"{_state(_outcome(moved, p), moved.base)}: the resolution line {line} carries on "
                               f"{moved.base[:12]} (patch id {res.patch_id[:12]})")
            elif p.name in names and p.name in flags_of:
                args += flags_of[p.name]
                how[p.name] = f"left out, {' '.join(flags_of[p.name])} instead (target.toml [build.instead_of])"
            else:
                keep.append(p)
        out.append(Way(RESOLUTION, tuple(keep), tuple(args), how))
    return out


def _outcome(moved: Moved, p: Patch):
    return next(o for o in moved.outcomes if o.patch.name == p.name)
