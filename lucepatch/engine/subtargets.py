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

from lucepatch import git, odb, report
from lucepatch.engine.apply import WorkArea, apply_series
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
    source: Path
    result: object  # engine.apply.SeriesResult
    work: object  # engine.apply.WorkArea (its repo holds the result)
    patches: list = field(default_factory=list)

    def to_json(self) -> dict:
        return {**self.sub.to_json(), **self.result.to_json()}


def applied_each(target: Target, source: Path, cache: Path, stack: contextlib.ExitStack, *,
                 patches_for: Callable[[Target], list] | None = None, bases: dict[str, str] | None = None,
                 label: str = "apply", checkout: bool = False, write_objects: bool = True,
                 fetch: bool | None = None, skip_empty: bool = True) -> list[Applied]:
    """Apply the superproject's and every submodule's series in private repositories (kept for
    the lifetime of `stack`). `patches_for(target)` picks the patches (default: the whole series;
    probes pass `lambda t: t.variant_patches(variant)`); `bases` maps a sub-target's path ("." for
    the superproject) to a base other than its pinned one (carried trees). Nothing is written in
    the user's checkouts."""
    out = []
    for st in sub_targets(target):
        if skip_empty and not st.is_superproject and not st.target.series:
            continue
        src = st.source(source)
        patches = patches_for(st.target) if patches_for else st.target.patches
        work = stack.enter_context(WorkArea(cache, f"{label}-{st.target.name}"))
        res = apply_series(st.target, src, patches, work, base=(bases or {}).get(st.path), checkout=checkout,
                           write_objects=write_objects, fetch=fetch)
        out.append(Applied(st, src, res, work, patches))
    return out


def link_submodules(applied: list[Applied]) -> Path:
    """The superproject's applied work tree with each applied submodule tree linked at its path
    (what a build of the patched target reads). Needs `checkout=True`."""
    root = Path(applied[0].result.workdir)
    for a in applied[1:]:
        dest = root / a.sub.path
        if dest.is_symlink() or dest.is_file():
            dest.unlink()
        elif dest.is_dir():
            shutil.rmtree(dest)
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.symlink_to(a.result.workdir, target_is_directory=True)
    return root


def gitlinks(repo: Path, commits: list[str], path: str) -> list[str | None]:
    """The commit the submodule at `path` is at in each superproject commit (None: absent, or
    not a submodule there). One git process for the whole range: the tree holding `path` is read
    in each commit (`cat-file --batch`) and its entry for the name looked up; a gitlink is the entry
    of mode 160000. (`C:path` itself cannot be asked: a gitlink's commit is not in the
    superproject's objects, so it reads "missing" exactly as an absent path does, and a batch
    `rev-parse` refuses the whole batch at the first commit without the path.)"""
    if not commits:
        return []
    parent, _, name = path.strip("/").rpartition("/")
    specs = [f"{c}:{parent}" if parent else f"{c}^{{tree}}" for c in commits]
    want = name.encode("utf-8", "surrogateescape")
    oid_bytes = 32 if len(commits[0]) == 64 else 20
    links: list[str | None] = []
    for found in odb.read_specs(repo, specs):  # None: no such folder in that commit
        if found is None:
            links.append(None)
            continue
        kind, body = found
        links.append(_tree_gitlink(body, want, oid_bytes) if kind == "tree" else None)
    return links


def _tree_gitlink(tree: bytes, name: bytes, oid_len: int) -> str | None:
    """The commit id of `name` in a raw tree object when that entry is a gitlink (mode 160000)."""
    i = 0
    while i < len(tree):
        sp = tree.index(b" ", i)
        nul = tree.index(b"\0", sp)
        mode, entry = tree[i:sp], tree[sp + 1:nul]
        oid = tree[nul + 1:nul + 1 + oid_len]
        i = nul + 1 + oid_len
        if entry == name:
            return oid.hex() if mode == b"160000" else None
    return None


def check_all(target: Target, source: Path, cache: Path, *, onto: str | None = None, fetch: bool = False):
    """`check`: the superproject's SeriesResult with each submodule's in `.subs`. With `onto`, a
    submodule is checked at the commit the superproject's `onto` pins it to (its gitlink there)."""
    bases = {}
    if onto:  # named by its flag, not as "base commit", and fetched in this checkout from the upstream
        onto = git.resolve_commit(source, onto, what="--onto", upstream=target.upstream)
    if onto and target.submodules:
        sha = onto
        for st in sub_targets(target)[1:]:
            link = gitlinks(source, [sha], st.path)[0]
            if link is None:
                raise UsageError(f"--onto {sha[:12]} has no submodule at {st.path}")
            bases[st.path] = link
    bases["."] = onto
    with contextlib.ExitStack() as stack:
        applied = applied_each(target, source, cache, stack, bases=bases, label="check", write_objects=False,
                               fetch=fetch)
    res = applied[0].result
    res.subs = [(a.sub, a.result) for a in applied[1:]]
    return res


def for_rebase(target: Target, source: Path, cache: Path, onto_ref: str, *, dry_run: bool = False,
               fetch: bool | None = False, as_json: bool = False) -> list[dict]:
    """`rebase --onto REF` of a target with [[submodule]]s: where REF pins each submodule.

    A rebase session carries the superproject's series; a submodule's series stays valid only
    while REF pins the submodule where target.toml's base says (then nothing in it moves). A REF
    that moves or removes a submodule is refused in one line before a session starts (carrying
    a submodule's series in the same session is not supported yet); with `dry_run` it is reported
    instead: each sub-target's series applied at its pin in REF (a submodule's commit must be in
    its checkout: `git -C <source>/<path> fetch`). Each sub-target is reported (a moved one's
    table on stdout, none under --json; the others as progress)."""
    if not target.submodules:
        return []
    onto = git.resolve_commit(source, onto_ref, what="--onto", upstream=target.upstream)
    out, bases = [], {}
    for st in sub_targets(target)[1:]:
        src = st.source(source)
        link = gitlinks(source, [onto], st.path)[0]
        base = git.try_resolve(src, st.target.base) or st.target.base
        out.append({**st.to_json(), "base": base, "onto": link, "moved": link != base, "patches": [],
                    "conflicts": 0})
        if link:
            bases[st.path] = link
    moved = [d for d in out if d["moved"]]
    if moved and not dry_run:
        what = "; ".join(f"moves submodule {d['path']} from {d['base'][:12]} to {d['onto'][:12]}" if d["onto"] else
                         f"has no submodule at {d['path']}" for d in moved)
        raise UsageError(f"rebase {target.name} --onto {onto_ref}: {onto[:12]} {what}; a rebase session carries the "
                         f"superproject's series only, not a [[submodule]]'s (not supported yet): `lucepatch rebase "
                         f"{target.name} --onto {onto_ref} --dry-run` reports each sub-target at its pin there")
    if dry_run:
        with contextlib.ExitStack() as stack:
            for d, st in zip(out, sub_targets(target)[1:]):
                if not d["onto"] or not st.target.series:
                    continue
                work = stack.enter_context(_work_area(cache, f"rebase-{st.target.name}"))

                res = apply_series(st.target, st.source(source), st.target.patches, work, base=d["onto"],
                                   checkout=False, write_objects=False, fetch=fetch)
                d["patches"] = [{"name": o.patch.name, "status": o.status, "detail": o.detail} for o in res.outcomes]
                d["conflicts"] = len(res.conflicts)
    print_rebase(out, as_json=as_json)
    return out


def _work_area(cache: Path, label: str):
    return WorkArea(cache, label)


def print_rebase(subs: list[dict], *, as_json: bool = False) -> None:
    """The sub-targets of a rebase, for people."""
    for d in subs:
        at = (d["onto"] or "-")[:12]
        if not d["moved"]:
            report.progress(f"submodule {d['path']} ({d['name']}) stays at {at}: its series is unchanged")
        elif not d["onto"]:
            report.progress(f"submodule {d['path']} ({d['name']}) is not in --onto; a session would refuse")
        else:
            report.table(f"  submodule {d['path']} ({d['name']}) moves {d['base'][:12]} -> {at} (a session would "
                         "refuse: not supported yet)", ["#", "patch", "status", "detail"],
                         [[i, p["name"], p["status"], p["detail"]] for i, p in enumerate(d["patches"], 1)],
                         as_json=as_json)
