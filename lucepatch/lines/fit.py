"""Which series line serves a node, from what its library says and what the user knows.

The lines are data: every ``[series.<target>]`` table of lucepatch/data/compatible_hami.toml is
one line of the HAMi-core series (``base``: the upstream commit it is carried on; ``shrreg``: that
base's shared-region MAJOR.MINOR; ``compatible``: the HAMi releases whose library a build of the
line may replace), ``<target>`` naming its folder under patches/. The ``[[release]]`` table maps
HAMi releases to the HAMi-core commit each vendors and that commit's region version.

Why the region version decides: libraries of different region versions refuse each other's
region file, so a replacement must keep the node's version; within one version, the line's
``compatible`` list says which releases its fixes were carried for.
"""

from __future__ import annotations

import tomllib
from dataclasses import asdict, dataclass, field
from importlib import resources

from lucepatch.native.libfacts import LibFacts

DEFAULT_UPSTREAM = "https://github.com/Project-HAMi/HAMi-core"
CHECKOUT = "~/src/HAMi-core"


@dataclass
class Line:
    target: str
    base: str
    shrreg: str | None
    compatible: list[str]
    in_workspace: bool = False
    version: str | None = None
    upstream: str = DEFAULT_UPSTREAM
    profile: str = "default"
    profile_detail: str = ""

    def describe(self) -> str:
        ver = f" {self.version}" if self.version else ""
        serves = ", ".join(self.compatible) or "no HAMi release listed"
        where = "" if self.in_workspace else " (not in this workspace)"
        return f"{self.target}{ver} (base {self.base[:7]}, shared region {self.shrreg}; serves HAMi {serves}){where}"

    def to_json(self) -> dict:
        return asdict(self)


@dataclass
class Fit:
    line: Line | None
    why: str
    releases: list[str] = field(default_factory=list)  # the node's HAMi release(s), given or inferred
    releases_from: str = ""  # "--hami-version", "embedded commit" or ""
    candidates: list[Line] = field(default_factory=list)
    base_of: Line | None = None  # the library is this line's upstream base, unpatched
    commands: list[str] = field(default_factory=list)

    def to_json(self) -> dict:
        return {"line": self.line.to_json() if self.line else None, "why": self.why, "releases": self.releases,
                "releases_from": self.releases_from, "candidates": [c.target for c in self.candidates],
                "base_of": self.base_of.target if self.base_of else None, "commands": self.commands}


def compat_data() -> dict:
    with resources.files("lucepatch").joinpath("data", "compatible_hami.toml").open("rb") as f:
        return tomllib.load(f)


def norm_release(v: str) -> str:
    v = str(v).strip()
    return v if v.startswith("v") else "v" + v


def load_lines(data: dict | None = None, ws=None) -> list[Line]:
    """The lines in ``data`` (default: the packaged compatible_hami.toml), completed from the
    workspace's target.toml where the line's folder exists (version, upstream, build profile)."""
    data = compat_data() if data is None else data
    lines = []
    for target, ser in (data.get("series") or {}).items():
        line = Line(target=target, base=str(ser.get("base", "")), shrreg=ser.get("shrreg"),
                    compatible=[norm_release(v) for v in ser.get("compatible", [])])
        if ws is not None and (ws.patches_dir / target / "target.toml").is_file():
            from lucepatch.target import load_target_dir  # lazy: target.toml's reader, 16 ms

            t = load_target_dir(ws.patches_dir / target)
            line.in_workspace, line.version, line.upstream = True, t.version, t.upstream or DEFAULT_UPSTREAM
            if t.profiles:
                line.profile = next(iter(t.profiles))
                line.profile_detail = " ".join(t.profiles[line.profile].cmake_args or [])
            else:
                line.profile_detail = " ".join(t.build.configure_args if t.build else [])
        lines.append(line)
    return lines


def releases_of_commit(commit: str, data: dict | None = None) -> list[str]:
    """HAMi releases vendoring HAMi-core ``commit`` (a prefix of at least 7 hex digits)."""
    data = compat_data() if data is None else data
    commit = commit.lower()
    if len(commit) < 7:
        return []
    return [r["hami"] for r in data.get("release", []) if str(r.get("hami_core", "")).startswith(commit)]


def vendor_rows(releases, data: dict | None = None) -> list[dict]:
    """The [[vendor]] rows whose HAMi tag is one of `releases` (e.g. v2.6.8 -> beclab/hami v2.6.8)."""
    data = compat_data() if data is None else data
    tags = {norm_release(r) for r in releases}
    return [v for v in data.get("vendor", []) if norm_release(str(v.get("hami", "")).rsplit(" ", 1)[-1]) in tags]


def release_shrreg(release: str, data: dict | None = None) -> str | None:
    data = compat_data() if data is None else data
    for r in data.get("release", []):
        if norm_release(r["hami"]) == norm_release(release):
            return r.get("shrreg")
    return None


def fit_node(facts: LibFacts | None, lines: list[Line], *, hami_versions=(), data: dict | None = None,
             identified: tuple[str, str] | None = None) -> Fit:
    """The line whose build is a drop-in for the node described by ``facts`` (its current
    library) and/or ``hami_versions`` (its HAMi release, e.g. the device-plugin image tag).
    ``identified``: (line, why) when the library's names place it at a line's upstream base or make it
    that line's build (lines/identity.py): with no release known, that line replaces it, even one that
    serves no HAMi release (the main line on an upstream commit no release vendors)."""
    data = compat_data() if data is None else data
    releases = [norm_release(v) for v in hami_versions]
    source = "--hami-version" if releases else ""
    base_of = None
    if facts is not None and facts.git_hash:
        base_of = next((l for l in lines if l.base.startswith(facts.git_hash.lower())), None)
        if not releases:
            releases = releases_of_commit(facts.git_hash, data)
            source = "embedded commit" if releases else ""
    region = facts.shrreg if facts is not None else None
    if region is None and releases:
        regions = {release_shrreg(r, data) for r in releases}
        region = regions.pop() if len(regions) == 1 else None
    # a line that serves no HAMi release (the main line on an upstream commit no release vendors) replaces
    # no node's library: it is never the answer for a node, however its region matches
    candidates = [l for l in lines if l.compatible and (region is None or l.shrreg == region)]
    fit = Fit(line=None, why="", releases=releases, releases_from=source, candidates=candidates, base_of=base_of)

    if facts is not None and not facts.is_hami_core:
        fit.why = f"{facts.path} is not a HAMi-core libvgpu.so (it lacks HAMi-core's driver hooks)"
        return fit
    if facts is not None and facts.shrreg is not None and releases:
        clash = [r for r in releases if release_shrreg(r, data) not in (None, "unknown", facts.shrreg)]
        if clash:
            fit.why = (f"the library has shared region {facts.shrreg} but HAMi {', '.join(clash)} ships region "
                       f"{release_shrreg(clash[0], data)}: this library is not that release's; check --hami-version")
            return fit
    if releases:
        serving = [l for l in candidates if all(r in l.compatible for r in releases)]
        if len(serving) == 1:
            fit.line = serving[0]
            fit.why = f"HAMi {', '.join(releases)} ({source}) is in {fit.line.target}'s compatible list" + (
                f", shared region {region}" if region else "")
        elif len(serving) > 1:
            fit.why = f"several lines serve HAMi {', '.join(releases)}: {', '.join(l.target for l in serving)}"
        else:
            known = ", ".join(f"{l.target} ({', '.join(l.compatible) or 'no HAMi release'})" for l in lines) or "none"
            fit.why = (f"no line serves HAMi {', '.join(releases)}" + (f" (shared region {region})" if region else "")
                       + f"; lines and the releases they serve: {known}")
            vendor = vendor_rows(releases, data)
            if vendor:
                fit.why = (f"HAMi {', '.join(releases)} is no upstream release: "
                           + "; ".join(f"{v['distribution']} {', '.join(v.get('versions', []))} ships {v['hami']} "
                                       f"({v['source']})" for v in vendor)
                           + ": the vendor's own library, which no line serves (read it: node --pod / --lib)")
        return fit
    own = next((l for l in lines if identified and l.target == identified[0] and (region is None or l.shrreg == region)),
               None)
    if own is not None:
        fit.line = own
        fit.why = (f"{identified[1]}: line {own.target} (base {own.base[:7]}, shared region {own.shrreg}); the HAMi "
                   "release is not in the library, pass --hami-version to check it against the line's compatible list")
        return fit
    if region is None:
        fit.why = ("neither the library's shared-region version nor the node's HAMi release is known: pass "
                   "--hami-version (the HAMi device-plugin image tag)")
        return fit
    if len(candidates) == 1:
        fit.line = candidates[0]
        fit.why = (f"shared region {region} is {fit.line.target}'s (base {fit.line.base[:7]}); the HAMi release is "
                   "not in the library, pass --hami-version to check it against the line's compatible list")
    elif candidates:
        fit.why = (f"lines {', '.join(l.target for l in candidates)} all use shared region {region}: pass "
                   "--hami-version to choose")
    else:
        serves = sorted({r["hami"] for r in data.get("release", []) if r.get("shrreg") == region})
        fit.why = (f"no line of the series uses shared region {region}" +
                   (f" (HAMi {serves[0]} to {serves[-1]})" if serves else "") +
                   f"; lines: {', '.join(l.describe() for l in lines) or 'none'}")
    return fit


def drop_in_commands(line: Line, *, installed: str | None = None, releases=(), image: str | None = None) -> list[str]:
    """The commands that build, prove and deploy ``line``'s replacement for the node's library."""
    ev = f"{line.target}.evidence.json"
    hv = "".join(f" --hami-version {r}" for r in releases) or " --hami-version <HAMi version>"
    inst = f" --installed {installed}" if installed else " --installed <copy of the node's libvgpu.so>"
    cmds = [f"git clone {line.upstream} {CHECKOUT}",
            f"lucepatch build {line.target} --source {CHECKOUT}",
            f"lucepatch verify --all --target {line.target} --source {CHECKOUT} --driver real --evidence {ev}",
            f"lucepatch deploy hami-core --lib <built libvgpu.so> --evidence {ev}{inst}{hv} --dry-run"]
    if image:
        cmds.append(f"lucepatch build hami-device-plugin --from {image} --lib <built libvgpu.so> --evidence {ev}")
    return cmds
