"""rebase: carry a series from its base to a new upstream ref.

Per patch: absorbed upstream (signal + commit, from engine/upstreamed.py; or the 3-way merge
finding nothing to do), carried exactly (bytes kept), carried with a 3-way merge (text refreshed
from the new commit), or conflict. Version bump: MAJOR when the base changes, MINOR when a patch
is added/removed/absorbed or its change (patch-id) differs, PATCH when only its text changes.
`git range-diff` of the old vs the new series is part of the result.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from lucepatch import git
from lucepatch.engine import upstreamed
from lucepatch.engine.apply import (CONFLICT, WorkArea, apply_loop, clone_private, format_commits, prepare_patch_files,
                                    resolve_base, with_trailers)
from lucepatch.engine.core import ALREADY_UPSTREAM, APPLIED, IndexEngine, validate_diffs
from lucepatch.engine.safety import check_series_safety
from lucepatch.series import parse_patch
from lucepatch.target import Target


@dataclass
class RebaseRow:
    name: str
    action: str  # carried | refreshed | absorbed | conflict
    status: str  # engine status on REF (or the detection signal)
    signal: str | None = None
    commit: str | None = None
    detail: str = ""
    new_patch_id: str | None = None

    def to_json(self):
        return self.__dict__.copy()


@dataclass
class RebasePlan:
    base: str
    onto: str
    old_version: str
    new_version: str
    bump: str
    rows: list[RebaseRow] = field(default_factory=list)
    files: dict = field(default_factory=dict)  # name -> new bytes (carried/refreshed)
    absorbed: dict = field(default_factory=dict)  # name -> bytes for absorbed/
    range_diff: str = ""
    old_head: str = ""
    new_head: str = ""

    @property
    def conflicts(self):
        return [r for r in self.rows if r.action == "conflict"]

    def to_json(self):
        return {"base": self.base, "onto": self.onto, "old_version": self.old_version,
                "new_version": self.new_version, "bump": self.bump, "patches": [r.to_json() for r in self.rows],
                "conflicts": len(self.conflicts), "range_diff": self.range_diff,
                "old_head": self.old_head, "new_head": self.new_head}


def bump_version(version: str, kind: str | None) -> str:
    major, minor, patch = (int(x) for x in version.split("."))
    if kind == "major":
        return f"{major + 1}.0.0"
    if kind == "minor":
        return f"{major}.{minor + 1}.0"
    if kind == "patch":
        return f"{major}.{minor}.{patch + 1}"
    return version


def _attribute(repo: Path, base: str, onto: str, work: WorkArea, patch, f: Path, signal: str) -> str | None:
    """The oldest commit of base..onto where the signal first holds."""
    eng = IndexEngine(repo, work.path / "attr-index")
    if signal in ("reverse-apply", "3-way"):
        def has(c):
            eng.reset(c)
            return eng.check_reverse(f) if signal == "reverse-apply" else eng.apply(f)[0] == ALREADY_UPSTREAM
    else:
        def has(c):
            return upstreamed.content_match(patch, upstreamed.tree_reader(repo, c))
    return upstreamed.first_commit_with(repo, base, onto, has)


def plan_rebase(t: Target, source: Path, onto_ref: str, work: WorkArea, *, fetch: bool = False) -> RebasePlan:
    base = resolve_base(source, t.base, t.name, fetch=fetch)
    onto = git.resolve_commit(source, onto_ref, what=f"--onto {onto_ref}",
                              remedy="fetch it into the checkout (git fetch origin) or pass an existing ref")
    patches = t.patches
    check_series_safety(patches, source, base)
    check_series_safety(patches, source, onto)
    clone_private(source, work.repo)
    repo = work.repo
    files = prepare_patch_files(patches, work)
    validate_diffs(repo, [(f, str(p.path)) for f, p in zip(files, patches)])
    # the old series on the old base (for range-diff)
    eng_old = IndexEngine(repo, work.path / "index-old")
    eng_old.reset(base)
    _old, old_head = apply_loop(eng_old, t, patches, files, base)
    # absorbed upstream?
    up_ids = upstreamed.upstream_patch_ids(repo, base, onto)
    eng = IndexEngine(repo, work.path / "index-new")
    eng.reset(onto)
    reader = upstreamed.tree_reader(repo, onto)
    hits = {}
    for p, f in zip(patches, files):
        hit = upstreamed.detect(p, f, repo=repo, ref=onto, upstream_ids=up_ids, reverse_check=eng.check_reverse,
                                read_file=reader, target=t, source=source)
        if hit:
            hits[p.name] = hit
    carry = [(p, f) for p, f in zip(patches, files) if p.name not in hits]
    outcomes, new_head = apply_loop(eng, t, [p for p, _ in carry], [f for _, f in carry], onto)
    by_name = {o.patch.name: o for o in outcomes}
    plan = RebasePlan(base=base, onto=onto, old_version=t.version, new_version=t.version, bump="none",
                      old_head=old_head, new_head=new_head)
    regenerated = {}
    if any(o.status not in (APPLIED, CONFLICT, ALREADY_UPSTREAM) for o in outcomes):
        fmt = format_commits(repo, onto, new_head, work.path / "rebased")
        for fpath, pid, commit in fmt:
            o = next((o for o in outcomes if o.commit == commit), None)
            if o is not None:
                regenerated[o.patch.name] = fpath.read_bytes()
    kinds = set()
    if base != onto:
        kinds.add("major")
    for p, f in zip(patches, files):
        if p.name in hits:
            h = hits[p.name]
            commit = h.commit or _attribute(repo, base, onto, work, p, f, h.signal) or onto
            plan.rows.append(RebaseRow(p.name, "absorbed", "already-upstream", h.signal, commit, h.detail))
            plan.absorbed[p.name] = with_trailers(p, [f"Applied-Upstream: {commit}", f"Applied-Upstream-Signal: {h.signal}"])
            kinds.add("minor")
            continue
        o = by_name[p.name]
        if o.status == CONFLICT:
            plan.rows.append(RebaseRow(p.name, "conflict", o.status, detail=o.detail))
        elif o.status == ALREADY_UPSTREAM:
            commit = _attribute(repo, base, onto, work, p, f, "3-way") or onto
            plan.rows.append(RebaseRow(p.name, "absorbed", o.status, "3-way", commit, o.detail))
            plan.absorbed[p.name] = with_trailers(p, [f"Applied-Upstream: {commit}", "Applied-Upstream-Signal: 3-way"])
            kinds.add("minor")
        elif o.status == APPLIED:
            plan.rows.append(RebaseRow(p.name, "carried", o.status, commit=o.commit, new_patch_id=p.patch_id))
            plan.files[p.name] = p.raw
        else:
            data = regenerated[p.name]
            tmp = work.path / "rebased" / ("x-" + p.name)
            tmp.write_bytes(data)
            newp = parse_patch(tmp, p.name)
            same = newp.patch_id == p.patch_id
            plan.rows.append(RebaseRow(p.name, "refreshed", o.status, commit=o.commit, new_patch_id=newp.patch_id,
                                       detail="same change, new context" if same else "the 3-way merge changed the diff"))
            plan.files[p.name] = data
            kinds.add("patch" if same else "minor")
    plan.bump = next((k for k in ("major", "minor", "patch") if k in kinds), "none")
    plan.new_version = bump_version(t.version, plan.bump if plan.bump != "none" else None)
    if old_head != base or new_head != onto:
        rd = git.run(repo, "range-diff", "--no-color", f"{base}..{old_head}", f"{onto}..{new_head}", check=False,
                     env={"GIT_CONFIG_GLOBAL": "/dev/null"})
        plan.range_diff = rd.stdout
    return plan


def write_plan(t: Target, plan: RebasePlan) -> None:
    """Write the rebased series into the workspace (only called with zero conflicts)."""
    absorbed_dir = t.dir / "absorbed"
    for name, data in plan.absorbed.items():
        absorbed_dir.mkdir(exist_ok=True)
        tmp = absorbed_dir / (name + ".lucepatch-tmp")
        tmp.write_bytes(data)
        tmp.replace(absorbed_dir / name)
        (t.dir / name).unlink(missing_ok=True)
    for name, data in plan.files.items():
        if (t.dir / name).read_bytes() != data:
            tmp = t.dir / (name + ".lucepatch-tmp")
            tmp.write_bytes(data)
            tmp.replace(t.dir / name)
    names = [r.name for r in plan.rows if r.action in ("carried", "refreshed")]
    series = t.dir / "series"
    if names != t.series:
        tmp = series.with_name("series.lucepatch-tmp")
        tmp.write_text("".join(f"{n}\n" for n in names))
        tmp.replace(series)
    toml = t.toml_path.read_text(encoding="utf-8")
    toml = re.sub(r'^(base\s*=\s*)"[^"]*"', lambda m: f'{m.group(1)}"{plan.onto}"', toml, count=1, flags=re.M)
    toml = re.sub(r'^(version\s*=\s*)"[^"]*"', lambda m: f'{m.group(1)}"{plan.new_version}"', toml, count=1, flags=re.M)
    tmp = t.toml_path.with_name("target.toml.lucepatch-tmp")
    tmp.write_text(toml, encoding="utf-8")
    tmp.replace(t.toml_path)
