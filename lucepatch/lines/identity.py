"""What a libvgpu.so is: upstream HAMi-core at a line, a build of a line of the series, a vendor's
fork of a line, or unknown — and what it needs of the loader (`node --lib`).

How it is decided, from the bytes alone (pyelftools; nothing is loaded or run):
- foreign names: exported symbols no upstream HAMi-core commit ever defined (data/hami_core_names.toml,
  scanned from the sources of its first-parent history) and no line of the series adds
  (data/line_builds.toml). Any: a fork (the names grouped by what they are for, data/fork_groups.toml).
- the hook set: the families of the exported cu*/nvml* hooks against the hook set of each stretch
  of upstream history, with the shared-region version: the commits an upstream library can be.
- the line's own names: the few names a line's patches add; with the base's hook set, a build of
  that line.
Against the line's own build (data/line_builds.toml): the hooks it exports under other CUDA
entry-point versions (cuda.h 13.0 renames cuMemAdvise to cuMemAdvise_v2), the names the line's
build lacks, the environment variables it reads that the line's build does not.
Loader needs (lucepatch.native.elf): GLIBC_PRIVATE references, the newest GLIBC version, NEEDED; where
it cannot run (data/glibc.toml) and whether this machine's libc.so.6 can bind it.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from lucepatch.lines.fit import Line, fit_node, load_lines
from lucepatch.lines.history import History, family, is_hook, load_history
from lucepatch.native import elf
from lucepatch.native.libfacts import LibFacts, read_lib

UPSTREAM, LINE_BUILD, FORK, UNKNOWN = "upstream", "line-build", "fork", "unknown"


# ----------------------------------------------------------------------------------- data
@dataclass
class LineBuild:
    """What a line's own (patched) build exports and reads (data/line_builds.toml)."""
    target: str
    base: str
    exports: set[str]
    adds: set[str]
    env: set[str]
    newest_glibc: str | None
    cuda: str
    baseline_only: set[str] = field(default_factory=set)
    patched_only: set[str] = field(default_factory=set)  # the adds, and upstream names its backports bring

    def base_names(self, exports: set[str]) -> set[str]:
        """What `exports` would be without this line's patches: its base's names."""
        return (exports - self.patched_only) | self.baseline_only


def _data(name: str) -> dict:
    with resources.files("lucepatch").joinpath("data", name).open("rb") as f:
        return tomllib.load(f)


def line_builds(data: dict | None = None) -> dict[str, LineBuild]:
    data = _data("line_builds.toml") if data is None else data
    return {t: LineBuild(t, r["base"], set(r["exports"]), set(r.get("adds", [])), set(r.get("env", [])),
                         r.get("newest_glibc"), str(r.get("cuda", "")), set(r.get("baseline_only", [])),
                         set(r.get("patched_only", [])))
            for t, r in (data.get("line") or {}).items()}


@dataclass
class GroupRule:
    group: str
    vendor: bool
    patterns: list[re.Pattern]
    names: set[str]
    why: str

    def holds(self, name: str) -> bool:
        return name in self.names or any(p.fullmatch(name) for p in self.patterns)


def group_rules(kind: str, data: dict | None = None) -> list[GroupRule]:
    """The `symbols` or `env` groups of data/fork_groups.toml, in order."""
    data = _data("fork_groups.toml") if data is None else data
    return [GroupRule(g["group"], bool(g.get("vendor")), [re.compile(p) for p in g.get("patterns", [])],
                      set(g.get("names", [])), g.get("why", "")) for g in data.get(kind, [])]


@dataclass
class Group:
    group: str
    vendor: bool
    names: list[str]
    why: str = ""

    def to_json(self) -> dict:
        return {"group": self.group, "vendor": self.vendor, "names": self.names, "why": self.why}

    @classmethod
    def from_json(cls, d: dict) -> "Group":
        return cls(d["group"], bool(d.get("vendor")), list(d.get("names", [])), d.get("why", ""))


def grouped(names, rules: list[GroupRule], *, other: str = "other", other_vendor: bool = False) -> list[Group]:
    out: dict[str, Group] = {}
    for n in sorted(names):
        rule = next((r for r in rules if r.holds(n)), None)
        key = rule.group if rule else other
        if key not in out:
            out[key] = Group(key, rule.vendor if rule else other_vendor, [], rule.why if rule else "")
        out[key].names.append(n)
    order = [r.group for r in rules] + [other]
    return sorted(out.values(), key=lambda g: order.index(g.group) if g.group in order else len(order))


# ----------------------------------------------------------------------------------- the identity
@dataclass
class Identity:
    path: str
    sha256: str
    size: int
    kind: str  # upstream | line-build | fork | unknown
    line: str | None  # the series line it belongs to (its region's), or None
    summary: str
    shrreg: str | None
    commits: list[str]  # upstream spans its HAMi-core part can be (first..last of first-parent history)
    decided_by: list[str]
    foreign: list[Group]  # exported names upstream never had, grouped
    renamed: list[list[str]]  # [its name, the line build's name]: one hook, another CUDA entry-point version
    lacks: list[str]  # the line build's exports it does not have (renames aside)
    env_extra: list[Group]  # environment variables it reads that the line's build does not, grouped
    env_lacks: list[str]
    loader: elf.LoaderNeeds
    cannot_run: list[str]  # where it cannot run (data/glibc.toml)
    here: list[str]  # what this machine's libc.so.6 does not provide that stops the load (empty: it loads here)
    here_glibc: str | None
    exports: list[str]
    env: list[str]
    facts: LibFacts | None = None
    compared_with: str = ""  # the line build it was compared with
    here_lazy: list[str] = field(default_factory=list)  # lazily bound references this libc lacks (elf.lazy_notes)

    @property
    def is_vendor(self) -> bool:
        return self.kind == FORK

    @property
    def drop_in_possible(self) -> bool:
        """Only an upstream library or a line's own build can be replaced by a line's build."""
        return self.kind in (UPSTREAM, LINE_BUILD)

    def to_json(self, *, with_names: bool = True) -> dict:
        d = {"path": self.path, "sha256": self.sha256, "size": self.size, "kind": self.kind, "line": self.line,
             "summary": self.summary, "shrreg": self.shrreg, "commits": self.commits, "decided_by": self.decided_by,
             "foreign": [g.to_json() for g in self.foreign], "renamed": self.renamed, "lacks": self.lacks,
             "env_extra": [g.to_json() for g in self.env_extra], "env_lacks": self.env_lacks,
             "loader": self.loader.to_json(), "cannot_run": self.cannot_run, "here": self.here, "here_lazy": self.here_lazy,
             "here_glibc": self.here_glibc, "compared_with": self.compared_with}
        if self.facts is not None:
            d["facts"] = self.facts.to_json()
        if with_names:
            d["exports"], d["env"] = self.exports, self.env
        return d

    @classmethod
    def from_json(cls, d: dict) -> "Identity":
        return cls(path=d.get("path", ""), sha256=d.get("sha256", ""), size=int(d.get("size") or 0), kind=d["kind"],
                   line=d.get("line"), summary=d.get("summary", ""), shrreg=d.get("shrreg"),
                   commits=list(d.get("commits", [])), decided_by=list(d.get("decided_by", [])),
                   foreign=[Group.from_json(g) for g in d.get("foreign", [])], renamed=[list(p) for p in d.get("renamed", [])],
                   lacks=list(d.get("lacks", [])), env_extra=[Group.from_json(g) for g in d.get("env_extra", [])],
                   env_lacks=list(d.get("env_lacks", [])), loader=elf.LoaderNeeds.from_json(d.get("loader") or {}),
                   cannot_run=list(d.get("cannot_run", [])), here=list(d.get("here", [])), here_glibc=d.get("here_glibc"),
                   here_lazy=list(d.get("here_lazy", [])),
                   exports=list(d.get("exports", [])), env=list(d.get("env", [])), compared_with=d.get("compared_with", ""),
                   facts=LibFacts(**d["facts"]) if d.get("facts") else None)


def _spans(states) -> list[str]:
    return [s.span() for s in states]


def _line_of_states(states, lines: list[Line]) -> Line | None:
    return next((l for l in lines for s in states if s.contains(l.base)), None)


def identify(path: str | Path, *, lines: list[Line] | None = None, hami_versions=(), hist: History | None = None,
             builds: dict[str, LineBuild] | None = None, libc: Path | None = None) -> Identity:
    """Classify the library at `path` (UsageError when it is not a readable ELF file)."""
    facts = read_lib(path)
    lines = load_lines() if lines is None else lines
    hist = load_history() if hist is None else hist
    builds = line_builds() if builds is None else builds
    exports = set(elf.defined_dynamic_symbols(path))
    envn = elf.env_names(path)
    loader = elf.loader_needs(path)
    libc_path = libc or elf.system_libc()
    here, here_glibc, here_lazy = [], None, []
    if libc_path is not None:
        lp = elf.libc_provides(libc_path)
        here, here_glibc, here_lazy = elf.unmet_needs(loader, lp), lp.glibc, elf.lazy_notes(loader, lp)
    ident = Identity(path=str(path), sha256=facts.sha256, size=facts.size, kind=UNKNOWN, line=None, summary="",
                     shrreg=facts.shrreg, commits=[], decided_by=[], foreign=[], renamed=[], lacks=[], env_extra=[],
                     env_lacks=[], loader=loader, cannot_run=elf.where_it_cannot_run(loader), here=here,
                     here_glibc=here_glibc, exports=sorted(exports), env=sorted(envn.all), facts=facts,
                     here_lazy=here_lazy)
    if not facts.is_hami_core:
        ident.summary = "not a HAMi-core libvgpu.so: it exports none of HAMi-core's driver hooks"
        ident.decided_by.append("no cuMemAlloc_v2 hook with HAMi-core's region accessors or NVML/cuGetProcAddress hooks")
        return ident

    region = facts.shrreg
    hooks = {family(n) for n in exports if is_hook(n)}
    states = hist.matching(hooks, region)
    line_adds = {n for b in builds.values() for n in b.adds}
    never = hist.never_upstream(exports)
    foreign = [n for n in never if n not in line_adds]
    ours = sorted(set(never) & line_adds)
    fit = fit_node(facts, lines, hami_versions=hami_versions)
    region_line = fit.line
    how_hooks = (f"exported hook set ({len(hooks)} cu*/nvml* families) = upstream HAMi-core {' or '.join(_spans(states))}"
                 if states else "exported hook set matches no stretch of upstream history")
    how_region = f"shared region {region} ({facts.shrreg_from})" if region else "shared-region version not in the library"

    if foreign:
        ident.kind = FORK
        ident.line = region_line.target if region_line else None
        rules = group_rules("symbols")
        ident.foreign = grouped(foreign, rules, other="other (not upstream HAMi-core)", other_vendor=True)
        groups = ", ".join(f"{g.group} {len(g.names)}" for g in ident.foreign)
        ident.summary = ("a fork of HAMi-core" + (f" (line {ident.line}'s region {region})" if ident.line else "")
                         + f": {len(foreign)} exported names upstream HAMi-core never had ({groups})")
        ident.decided_by += [f"{len(foreign)} of {len(exports)} exported names are defined by no upstream HAMi-core commit "
                             f"({hist.commits} first-parent commits to {hist.ref[:7]}) and added by no line of the series",
                             how_hooks, how_region]
        ident.commits = _spans(states)
    elif ours:
        own = [b for b in builds.values() if b.adds <= exports]

        def at_base(b: LineBuild):  # without the line's patches, is it upstream at the line's base?
            st = hist.state_of(b.base)
            base_hooks = {family(n) for n in b.base_names(exports) if is_hook(n)}
            return st if st is not None and st.hooks == base_hooks and (region is None or st.region == region) else None

        by_base = [(b, st) for b in own if (st := at_base(b)) is not None]
        closest = ""
        if len(by_base) > 1:
            # two lines whose patches bring the same names: a line that backports what a later base has
            # (v2.9 carries #218, which 52f33fc holds) looks like that base without its patches. The
            # line whose own build exports these names, or the fewest names off them, is the one.
            off = {b.target: len(exports ^ b.exports) for b, _ in by_base}
            best = min(off.values())
            if list(off.values()).count(best) == 1:
                by_base = [(b, st) for b, st in by_base if off[b.target] == best]
                closest = (f"of lines {', '.join(sorted(off))}, whose bases all fit, {by_base[0][0].target}'s own "
                           f"build is the closest ({best} exported names differ, "
                           + ", ".join(f"{t}: {n}" for t, n in sorted(off.items()) if n != best) + ")")
        pick = by_base[0][0] if len(by_base) == 1 else (own[0] if len(own) == 1 else None)
        if pick is None and region_line is not None:
            pick = builds.get(region_line.target)
        ident.kind = LINE_BUILD
        ident.line = pick.target if pick else (region_line.target if region_line else None)
        ident.commits = [by_base[0][1].span()] if len(by_base) == 1 else _spans(states)
        ident.summary = f"a build of line {ident.line} of the series (its patches' names: {', '.join(ours)})"
        ident.decided_by += [f"exports {len(ours)} names only the series' patches define: {', '.join(ours)}",
                             (f"without the line's patches its hook set is upstream HAMi-core {by_base[0][1].span()}, "
                              f"which holds {pick.target}'s base {pick.base[:7]}") if len(by_base) == 1 else how_hooks,
                             how_region] + ([closest] if closest else [])
    elif states:
        at = _line_of_states(states, lines)
        ident.kind = UPSTREAM
        ident.line = at.target if at else (region_line.target if region_line else None)
        ident.commits = _spans(states)
        base_note = f", which holds line {at.target}'s base {at.base[:7]}" if at else ""
        ident.summary = f"upstream HAMi-core at {' or '.join(ident.commits)}{base_note}"
        ident.decided_by += [f"every exported name is upstream HAMi-core's ({hist.commits} commits to {hist.ref[:7]})",
                             how_hooks, how_region]
        if facts.git_hash:
            ident.decided_by.append(f"embedded commit {facts.git_hash} (GIT_HASH_ stamp)")
    else:
        near = hist.nearest(hooks, region, 1)
        ident.kind = UNKNOWN
        ident.line = region_line.target if region_line else None
        if near:
            s, extra, missing = near[0]
            ident.summary = (f"HAMi-core-like, but its hook set matches no upstream commit (nearest {s.span()}: "
                             f"+{len(extra)} -{len(missing)} hooks)")
            ident.decided_by.append(f"hooks beyond {s.span()}: {', '.join(sorted(extra)[:8]) or 'none'}; "
                                    f"without: {', '.join(sorted(missing)[:8]) or 'none'}")
        else:
            ident.summary = "HAMi-core-like, but its hook set matches no upstream commit"
        ident.decided_by += [how_region]

    ref = builds.get(ident.line) if ident.line else None
    if ref is not None:
        compare_with_line(ident, exports, set(envn.all), ref)
    return ident


def compare_with_line(ident: Identity, exports: set[str], env: set[str], ref: LineBuild) -> None:
    """Fill the renames, the names the line's build lacks, and the environment comparison."""
    extra, lacks = exports - ref.exports, ref.exports - exports
    renamed = []
    for a in sorted(n for n in extra if is_hook(n)):
        b = sorted(n for n in lacks if is_hook(n) and family(n) == family(a))
        if b:
            renamed.append([a, b[0]])
    ident.renamed = renamed
    gone = {b for _, b in renamed}
    ident.lacks = sorted(lacks - gone)
    ident.env_extra = grouped(env - ref.env, group_rules("env"), other="other")
    ident.env_lacks = sorted(ref.env - env)
    ident.compared_with = f"line {ref.target}'s own build (CUDA {ref.cuda} headers)"


def upstream_extras(ident: Identity, ref: LineBuild) -> list[str]:
    """Upstream HAMi-core names it exports that the line's build does not (its HAMi-core is not the line's base)."""
    foreign = {n for g in ident.foreign for n in g.names}
    renamed = {a for a, _ in ident.renamed}
    return sorted(set(ident.exports) - ref.exports - foreign - renamed)
