"""Sub-targets: a target whose submodules carry series of their own (`[[submodule]]` in
target.toml, the series under series_dir, e.g. patches/lucebox/submodules/llama.cpp/).

Every verb treats the target as the superproject plus each submodule, each in its own checkout
(`<source>/<path>`, an initialised submodule) with its own base and series:
- `applied_each` applies all of them in private repositories and reports per sub-target; the
  probe and image code call it (with `variant_patches`, carried bases, a work tree) instead of
  applying the submodule series themselves, and `link_submodules` puts the applied submodule trees
  at their paths inside the applied superproject tree.
- `apply` switches every checkout with one switch group (engine/checkout.switch_group): all of
  them or none, rolled back together on a failure or a signal, restored together after a SIGKILL.
- `matrix` follows each submodule through the superproject's history: the commit a submodule is
  at in each superproject commit is its gitlink there.
A sub-target with an empty series (Block-Sparse-Attention today) is listed and skipped.
"""

from __future__ import annotations

import contextlib
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from lucepatch import git, report
from lucepatch.engine import layout
from lucepatch.engine.absorption import judge_conflicts
from lucepatch.engine.apply import SeriesResult, WorkArea, apply_series
from lucepatch.engine.core import CONFLICT
from lucepatch.engine.layout import Place
from lucepatch.errors import EnvironmentMissing, UsageError
from lucepatch.target import Target, sub_target
from lucepatch.target_sections import Submodule


@dataclass
class SubTarget:
    label: str  # "lucebox" for the superproject, else the submodule's name
    path: str  # "." for the superproject, else its path inside the superproject
    target: Target
    submodule: Submodule | None = None

    @property
    def is_superproject(self) -> bool:
        return self.submodule is None

    def source(self, superproject: Path) -> Path:
        """The checkout of this sub-target (an initialised submodule inside the user's checkout)."""
        if self.is_superproject:
            return Path(superproject)
        src = Path(superproject) / self.path
        if not (src / ".git").exists():
            raise EnvironmentMissing(f"submodule {self.path} of {superproject} is not initialised: run "
                                     f"git -C {superproject} submodule update --init {self.path}")
        return src

    def to_json(self) -> dict:
        return {"name": self.label, "path": self.path, "target": self.target.name, "base": self.target.base}


def sub_targets(target: Target) -> list[SubTarget]:
    """The superproject first, then every [[submodule]] in target.toml order."""
    out = [SubTarget(target.name, ".", target)]
    for sub in target.submodules:
        out.append(SubTarget(sub.label, sub.path, sub_target(target, sub), sub))
    return out


def with_patches(sts: list[SubTarget]) -> list[SubTarget]:
    return [st for st in sts if st.target.series]


@dataclass
class Applied:
    sub: SubTarget
    source: Path  # the repository it applied in (the superproject's checkout for a folder)
    result: object  # engine.apply.SeriesResult (a folder's: its own outcomes in the superproject's result)
    work: object  # engine.apply.WorkArea (its repo holds the result)
    patches: list = field(default_factory=list)
    place: Place | None = None  # where the sub-target was (None: the superproject itself)

    @property
    def in_superproject(self) -> bool:
        """Applied inside the superproject's tree (a folder, or absent), not in a checkout of its own."""
        return self.place is not None and self.place.in_superproject

    def to_json(self) -> dict:
        return {**self.sub.to_json(), **self.result.to_json(), **({"place": self.place.to_json()} if self.place else {})}


def placed(target: Target, source: Path, at: str | None, *, bases: dict[str, str] | None = None) -> list[tuple]:
    """(SubTarget, Place) of every [[submodule]] in superproject commit `at`. With `at` None (the
    pinned base), a `layout = "submodule"` sub-target is at its declared base (or `bases[path]`),
    and a `layout = "folder"` one must be a folder of the base's tree (else one line: target.toml
    and the base disagree)."""
    out = []
    subs = sub_targets(target)[1:]
    if at is None:
        base = (bases or {}).get(".")
        for st in subs:
            if st.submodule.layout == layout.SUBMODULE:
                out.append((st, layout.Place(layout.SUBMODULE, st.path, st.path,
                                             (bases or {}).get(st.path) or st.target.base)))
                continue
            if base is None:
                base = git.resolve_commit(source, target.base, what=f"base commit {target.base} of {target.name}",
                                          upstream=target.upstream_urls)
            pl = layout.place(source, base, st.submodule)
            if pl.kind != layout.FOLDER:
                raise UsageError(f"{target.toml_path}: [[submodule]] {st.label} says layout = 'folder', but the base "
                                 f"{base[:12]} holds {pl.describe()}; set layout and base to what the base holds")
            out.append((st, pl))
        return out
    places = {}
    for st in subs:
        places[st.path] = layout.place(source, at, st.submodule)
        out.append((st, places[st.path]))
    return out


def applied_each(target: Target, source: Path, cache: Path, stack: contextlib.ExitStack, *,
                 patches_for: Callable[[Target], list] | None = None, bases: dict[str, str] | None = None,
                 label: str = "apply", checkout: bool = False, write_objects: bool = True,
                 fetch: bool | None = None, skip_empty: bool = True, at: str | None = None,
                 measured=None) -> list[Applied]:
    """Apply the superproject's and every submodule's series in private repositories (kept for
    the lifetime of `stack`). `patches_for(target)` picks the patches (default: the whole series;
    probes pass `lambda t: t.variant_patches(variant)`); `bases` maps a sub-target's path ("." for
    the superproject) to a base other than its pinned one (carried trees); `at`: the superproject
    commit to apply on, where each sub-target is found as that commit holds it (`placed`).
    A sub-target in a submodule applies in its checkout at the gitlink's commit; one that is a
    folder (or absent) applies in the superproject, re-rooted under its path, after the
    superproject's own patches (its outcomes reported as its own). `measured(target, commit)`: the
    saved retire report there (engine.status.compute_status's), for the one judge of what does not
    apply. Nothing is written in the user's checkouts."""
    pick = patches_for or (lambda t: t.patches)
    spots = placed(target, source, at, bases=bases)
    own = pick(target)
    inside, alternates = [], []
    for st, pl in spots:
        if pl.in_superproject and st.target.series:
            mine = pick(st.target)
            inside.append((st, pl, mine, [layout.reroot(p, "", pl.path) for p in mine]))
            co = layout.checkout_of(source, st.submodule, pl)
            if co is not None:  # its objects: preimages for 3-way merges of the re-rooted patches
                alternates.append(layout.objects_of(co))
    work = stack.enter_context(WorkArea(cache, f"{label}-{target.name}"))
    base = at or (bases or {}).get(".")
    res = apply_series(target, source, own + [p for *_, moved in inside for p in moved], work, base=base,
                       checkout=checkout, write_objects=write_objects, fetch=fetch, alternates=alternates,
                       base_label="--onto" if at else None)
    _judge(res, source, target, work, measured)
    whole = list(res.outcomes)
    res.outcomes = whole[:len(own)]
    out = [Applied(SubTarget(target.name, ".", target), source, res, work, own)]
    k = len(own)
    by_path = {}
    for st, pl, mine, _moved in inside:
        part = SeriesResult(base=res.base, head=res.head, tree=res.tree, outcomes=whole[k:k + len(mine)],
                            workdir=res.workdir, method={}, place=pl)
        if pl.kind == layout.ABSENT:  # say why its files are missing
            for o in part.outcomes:
                if o.status == CONFLICT:
                    o.detail = f"{pl.declared} is not in {res.base[:12]} (no folder, no submodule there); {o.detail}"
        k += len(mine)
        by_path[st.path] = Applied(st, source, part, work, mine, pl)
    for st, pl in spots:
        if st.path in by_path:
            out.append(by_path[st.path])
            continue
        if pl.in_superproject or (skip_empty and not st.target.series):
            continue
        src = layout.checkout_of(source, st.submodule, pl)
        if src is None:
            st.source(source)  # the one line saying how to initialise it
        patches = pick(st.target)
        swork = stack.enter_context(WorkArea(cache, f"{label}-{st.target.name}"))
        sres = apply_series(st.target, src, patches, swork, base=pl.commit, checkout=checkout,
                            write_objects=write_objects, fetch=fetch)
        _judge(sres, src, st.target, swork, measured)
        sres.place = pl
        out.append(Applied(st, src, sres, swork, patches, pl))
    return out


def _judge(res, source: Path, target: Target, work, measured=None) -> None:
    """What does not apply but the tree already has (a backport it contains, ...): the one judge,
    as a rebase asks it, so apply, check, matrix and rebase agree (engine/absorption.py); with
    `measured`, decided with the retire report saved at the commit applied on, as a rebase decides."""
    pinned = git.try_resolve(source, target.base) or res.base
    judge_conflicts(res.outcomes, work.repo, pinned, res.base, work.path / "judge",
                    (lambda: measured(target, res.base)) if measured is not None else None)


def link_submodules(applied: list[Applied]) -> Path:
    """The superproject's applied work tree with each applied submodule tree linked at its path
    (what a build of the patched target reads). Needs `checkout=True`. A folder sub-target is in
    the superproject's tree already."""
    root = Path(applied[0].result.workdir)
    for a in applied[1:]:
        if a.in_superproject:
            continue
        dest = root / (a.place.path if a.place else a.sub.path)
        if dest.is_symlink() or dest.is_file():
            dest.unlink()
        elif dest.is_dir():
            shutil.rmtree(dest)
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.symlink_to(a.result.workdir, target_is_directory=True)
    return root


def gitlinks(repo: Path, commits: list[str], path: str) -> list[str | None]:
    """The commit the submodule at `path` is at in each superproject commit (None: absent, or
    not a submodule there); one git process for the whole range (layout.entries)."""
    return [e[1] if e and e[0] == "160000" else None for e in layout.entries(repo, commits, path)]


def check_all(target: Target, source: Path, cache: Path, *, onto: str | None = None, fetch: bool = False,
              measured=None):
    """`check`: the superproject's SeriesResult with each sub-target's in `.subs`. With `onto`, each
    sub-target is checked where `onto` holds it: a submodule at the commit its gitlink names
    there, a folder (vendored) or an absent one in the superproject, re-rooted (`applied_each`).
    `measured`: applied_each's (the saved retire reports, for the one judge)."""
    if onto:  # named by its flag, not as "base commit", and fetched in this checkout from the upstream
        onto = git.resolve_commit(source, onto, what="--onto", upstream=target.upstream_urls)
    with contextlib.ExitStack() as stack:
        applied = applied_each(target, source, cache, stack, label="check", write_objects=False, fetch=fetch,
                               at=onto, measured=measured)
    res = applied[0].result
    res.subs = [(a.sub, a.result) for a in applied[1:]]
    return res


def for_rebase(target: Target, source: Path, onto_ref: str) -> list[dict]:
    """`rebase --onto REF` of a target with [[submodule]]s: where REF holds each sub-target.

    A sub-target whose place is the same at the pinned base and in REF stays out of the session
    (its series and base unchanged). One whose place moves — its gitlink, its path, a submodule
    vendored into a folder or back, or gone — is carried in the same session as the
    superproject's series (engine/session_subs.py); its rows are the session's `<name>/<patch>`
    rows. Reported per sub-target (progress lines; the JSON document has them all)."""
    if not target.submodules:
        return []
    onto = git.resolve_commit(source, onto_ref, what="--onto", upstream=target.upstream_urls)
    was = {st.path: pl for st, pl in placed(target, source, None)}
    out = []
    for st, pl in placed(target, source, onto):
        before = was[st.path]
        moved = (before.kind, before.path, before.commit) != (pl.kind, pl.path, pl.commit)
        out.append({**st.to_json(), "base": before.commit or target.base, "onto": pl.commit, "moved": moved,
                    "carried": moved and bool(st.target.series), "place_base": before.to_json(),
                    "place_onto": pl.to_json(), "patches": [], "conflicts": 0})
    print_rebase(out)
    return out


def print_rebase(subs: list[dict]) -> None:
    """The sub-targets of a rebase, for people (progress lines; the session's table has the patches)."""
    for d in subs:
        now = Place(d["place_onto"]["layout"], d["place_onto"]["at"], d["place_onto"]["declared"], d["onto"])
        if not d["moved"]:
            report.progress(f"submodule {d['path']} ({d['name']}) stays at {(d['onto'] or '-')[:12]}: its series is "
                            "unchanged")
        elif d["carried"]:
            report.progress(f"sub-target {d['name']} ({d['path']}) moves: {now.describe()} in --onto; its series is "
                            f"carried in this session (rows {d['name']}/<patch>)")
        else:
            report.progress(f"sub-target {d['name']} ({d['path']}) moves to {now.describe()}; it has no series")
