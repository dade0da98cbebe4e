"""Bisect upstream by behaviour: the first commit of A..B where a reproducer's verdict flips.

The predicate at a commit C is the scenario(s) on the *unpatched* upstream at C (+ the Build-Only
patches, exactly `verify`'s baseline), built in a private clone under the cache; the user's
checkout is only read (rev-list, merge-base). It is `git bisect run` done here:

  good/bad      every run of the scenario(s) passes / some run fails, controls passing
  skip          the build fails, a control fails, or a run cannot prove what it loaded
                (like `git bisect skip`: the search steps around it)

The walk is over `git rev-list --first-parent A..B`, so a flip inside a merged branch is named by
its merge commit. A and B are measured first; the same behaviour at both ends is "no flip"
(nothing to find). The answer is the first commit whose behaviour equals B's: "fixed" when A
fails and B passes, "broke" when A passes and B fails. When skipped commits hide where the flip is,
the result is "inconclusive" with the candidate commits.

`record_applied_upstream` writes the finding into a patch's trailers (`Applied-Upstream: <commit>`
plus `Applied-Upstream-Signal: behaviour ... + code <signal>`), leaving its diff, hence its patch id,
unchanged — only when upstream at that commit contains the patch's *code* (a patch-id, reverse-apply,
content or 3-way match: lucepatch.engine.retirement). A behaviour flip alone proves that the
bisected scenario behaves differently there, not that upstream fixed what the patch fixes; it is
refused with what to review.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

from lucepatch import git, report, trailers
from lucepatch.engine import layout, retirement
from lucepatch.errors import CheckFailed, UsageError
from lucepatch import series
from lucepatch.series import Patch
from lucepatch.target import Target
from lucepatch.upstream.behaviour import B_FAIL, B_PASS, measure_behaviour, resolve_driver
from lucepatch.verify.driver import DriverChoice
from lucepatch.verify.reproducer import Reproducer
from lucepatch.verify.service import VariantSpec, build_variants
from lucepatch.verify.session import Variant, derive_driver

SCHEMA_VERSION = 1
KIND = "lucepatch-bisect"

GOOD_PASS, BAD_FAIL, SKIP = "pass", "fail", "skip"
FOUND, NO_FLIP, INCONCLUSIVE = "found", "no-flip", "inconclusive"
SIGNAL = "behaviour"

BISECT_SCHEMA = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "required": ["schema_version", "kind", "target", "reproducer", "scenarios", "range", "driver", "runs",
                 "result", "direction", "first", "candidates", "probes"],
    "properties": {
        "schema_version": {"const": SCHEMA_VERSION},
        "kind": {"const": KIND},
        "target": {"type": "string"},
        "reproducer": {"type": "string"},
        "scenarios": {"type": "array", "items": {"type": "string"}, "minItems": 1},
        "range": {"type": "object", "required": ["spec", "old", "new", "commits"]},
        "driver": {"type": "object"},
        "runs": {"type": "integer", "minimum": 1},
        "result": {"enum": [FOUND, NO_FLIP, INCONCLUSIVE]},
        "direction": {"enum": ["fixed", "broke", None]},
        "first": {"oneOf": [{"type": "null"},
                            {"type": "object", "required": ["commit", "subject"],
                             "properties": {"commit": {"type": "string", "pattern": "^[0-9a-f]{40}$"}}}]},
        "candidates": {"type": "array", "items": {"type": "string"}},
        "probes": {"type": "array", "items": {"type": "object", "required": ["commit", "state"],
                                              "properties": {"state": {"enum": [GOOD_PASS, BAD_FAIL, SKIP]}}}},
        "reason": {"type": "string"},
        "recorded": {"type": ["object", "null"]},
    },
}


@dataclass
class Probe:
    commit: str
    index: int  # position in [A] + rev-list A..B (0 = A)
    state: str  # pass | fail | skip
    why: str = ""
    scenarios: dict = field(default_factory=dict)

    def to_json(self) -> dict:
        return {"commit": self.commit, "index": self.index, "state": self.state, "why": self.why,
                "scenarios": self.scenarios}


# ---- input ------------------------------------------------------------------------------------


def parse_range(source: Path, spec: str) -> tuple[str, str, list[str]]:
    """A..B -> (A sha, B sha, first-parent commits of A..B oldest first). UsageError when bad."""
    parts = spec.strip().split("..")
    if len(parts) != 2 or not all(parts) or any(c.isspace() for c in spec.strip()):
        raise UsageError(f"range {spec!r} is not A..B (two commits joined by '..', e.g. v2.6.0..main)")
    ends = []
    for ref in parts:
        if ref.startswith("-"):
            raise UsageError(f"range {spec}: {ref!r} is not a commit name")
        sha = git.try_resolve(source, ref)
        if sha is None:
            raise UsageError(f"range {spec}: {ref} is not a commit in {source}; fetch it or fix the name")
        ends.append(sha)
    old, new = ends
    if old == new:
        raise UsageError(f"range {spec} is empty ({old[:12]} both ends); give an older A and a newer B")
    if git.run(source, "merge-base", "--is-ancestor", old, new, check=False).status != 0:
        raise UsageError(f"range {spec}: {parts[0]} is not an ancestor of {parts[1]}; swap them or pick a common base")
    commits = git.run(source, "rev-list", "--first-parent", "--reverse", f"{old}..{new}",
                      env={"GIT_OPTIONAL_LOCKS": "0"}).stdout.split()
    if not commits or commits[-1] != new:
        raise UsageError(f"range {spec}: {parts[1]} is not on the first-parent line above {parts[0]}")
    return old, new, commits


def pick_scenarios(repro: Reproducer, scenario: str | None) -> list[str]:
    if scenario:
        s = repro.scenario(scenario)
        if s.control:
            raise UsageError(f"{repro.name}:{scenario} is a control; bisect a behaviour scenario "
                             f"({', '.join(x.name for x in repro.checked)})")
        return [s.name]
    names = [s.name for s in repro.checked]
    if not names:
        raise UsageError(f"reproducer {repro.name} has no scenario besides its controls")
    return names


def _subject(source: Path, commit: str) -> str:
    return git.subject(source, commit)


# ---- the search -------------------------------------------------------------------------------


def _probe(target: Target, source: Path, repro: Reproducer, scenarios: list[str], commit: str, index: int,
           runs: int, drv: DriverChoice, cache: Path, records: list) -> Probe:
    try:
        [built] = build_variants(target, source, cache, repro.artifact, specs=[VariantSpec(
            f"{commit[:12]}+build-only", tuple(p.name for p in target.build_only_patches), commit)])
    except CheckFailed as exc:
        return Probe(commit, index, SKIP, f"does not build: {exc}")
    upstream = Variant("upstream", built.lib, {"commit": commit})
    beh, recs = measure_behaviour(repro, scenarios, [upstream], runs, drv, cache)
    records += recs
    per = {s: beh[("upstream", s)] for s in scenarios}
    doc = {s: b_.to_json() for s, b_ in per.items()}
    if any(not x.control_ok for x in per.values()):
        return Probe(commit, index, SKIP, "a control failed", doc)
    bad = [s for s, x in per.items() if x.behaviour not in (B_PASS, B_FAIL)]
    if bad:
        return Probe(commit, index, SKIP, f"{', '.join(bad)}: {per[bad[0]].behaviour} ({per[bad[0]].why})", doc)
    failing = [s for s, x in per.items() if x.behaviour == B_FAIL]
    if failing:
        x = per[failing[0]]
        return Probe(commit, index, BAD_FAIL, f"{', '.join(failing)} fails {x.tally['failures']}/{x.tally['runs']}"
                     + (f": {x.why}" if x.why else ""), doc)
    return Probe(commit, index, GOOD_PASS, f"passes {runs}/{runs}", doc)


def bisect_behaviour(target: Target, source: Path | str, range_spec: str, repro: Reproducer, cache: Path,
                     driver: DriverChoice | str = "auto", runs: int | None = None,
                     scenario: str | None = None) -> dict:
    """Find the first commit of A..B (first parent) where the scenario's behaviour on unpatched
    upstream (+ Build-Only patches) flips. Returns the JSON document (schema BISECT_SCHEMA)."""
    source = Path(source)
    git.open_repo(source)
    if repro.target != target.name:
        raise UsageError(f"reproducer {repro.name} targets {repro.target}, not {target.name}")
    scenarios = pick_scenarios(repro, scenario)
    old, new, commits = parse_range(source, range_spec)
    seq = [old] + commits
    cache = Path(cache)
    drv = resolve_driver(driver, cache)
    n = runs or repro.default_runs
    records: list = []
    probes: dict[int, Probe] = {}

    def at(i: int) -> Probe:
        if i not in probes:
            report.progress(f"bisect: probing {seq[i][:12]} ({i}/{len(seq) - 1}) {_subject(source, seq[i])[:60]}")
            probes[i] = _probe(target, source, repro, scenarios, seq[i], i, n, drv, cache, records)
            report.progress(f"bisect: {seq[i][:12]} -> {probes[i].state}: {probes[i].why}")
        return probes[i]

    report.progress(f"bisect {repro.name}:{'+'.join(scenarios)} over {range_spec} "
                    f"({len(commits)} first-parent commit(s)), {n} run(s) per probe, driver {drv.chosen}")
    a, b = at(0), at(len(seq) - 1)
    result, direction, first, candidates, reason = INCONCLUSIVE, None, None, [], ""
    if SKIP in (a.state, b.state):
        end = a if a.state == SKIP else b
        reason = f"cannot judge the range end {end.commit[:12]}: {end.why}"
    elif a.state == b.state:
        result = NO_FLIP
        reason = (f"no flip: the behaviour {'passes' if a.state == GOOD_PASS else 'fails'} at both "
                  f"{old[:12]} and {new[:12]}") + _scenario_hint(repro, scenarios, a, b)
    else:
        direction = "fixed" if a.state == BAD_FAIL else "broke"
        lo, hi = 0, len(seq) - 1  # state(lo) == a.state, state(hi) == b.state
        skipped: set[int] = set()
        while hi - lo > 1:
            inner = [i for i in range(lo + 1, hi) if i not in skipped]
            if not inner:
                break
            mid = (lo + hi) // 2
            i = min(inner, key=lambda k: (abs(k - mid), k))
            p = at(i)
            if p.state == SKIP:
                skipped.add(i)
            elif p.state == a.state:
                lo = i
            else:
                hi = i
        if hi - lo == 1:
            result = FOUND
            first = {"commit": seq[hi], "subject": _subject(source, seq[hi])}
            reason = (f"{seq[hi][:12]} is the first commit where {repro.name}:{'+'.join(scenarios)} "
                      f"{'passes' if direction == 'fixed' else 'fails'} ({direction})")
        else:
            candidates = seq[lo + 1: hi + 1]
            reason = (f"the flip ({direction}) is in one of {len(candidates)} commits; "
                      f"{len(candidates) - 1} of them could not be judged (skipped)")
    ddoc = derive_driver(records, drv) if records else {"kind": drv.chosen, "requested": drv.requested}
    return {
        "schema_version": SCHEMA_VERSION,
        "kind": KIND,
        "target": target.name,
        "upstream": {"url": target.upstream},
        "reproducer": repro.name,
        "reproducer_hash": repro.hash,
        "scenarios": [f"{repro.name}:{s}" for s in scenarios],
        "range": {"spec": range_spec, "old": old, "new": new, "commits": len(commits)},
        "driver": ddoc,
        "simulated": ddoc.get("kind") == "fake",
        "runs": n,
        "result": result,
        "direction": direction,
        "first": first,
        "candidates": candidates,
        "reason": reason,
        "probes": [probes[i].to_json() for i in sorted(probes)],
        "recorded": None,
    }


def _scenario_hint(repro: Reproducer, scenarios: list[str], a: Probe, b: Probe) -> str:
    """Several scenarios combined (the default) can hide a flip: one fixed between the ends while
    another fails at both. Name the scenarios that did flip and how to bisect each alone."""
    if len(scenarios) < 2:
        return ""
    def state(p: Probe, s: str) -> str | None:
        beh = (p.scenarios.get(s) or {}).get("behaviour")
        return beh if beh in (B_PASS, B_FAIL) else None
    flipped = [s for s in scenarios if state(a, s) and state(b, s) and state(a, s) != state(b, s)]
    if not flipped:
        return (f"; {len(scenarios)} scenarios were combined (the behaviour passes only when all pass): "
                f"bisect one with --scenario ({', '.join(scenarios)})")
    said = ", ".join(f"{s} {'fails' if state(a, s) == B_FAIL else 'passes'} at {a.commit[:7]} and "
                     f"{'fails' if state(b, s) == B_FAIL else 'passes'} at {b.commit[:7]}" for s in flipped)
    return (f"; {len(scenarios)} scenarios were combined (the behaviour passes only when all pass), but {said}: "
            f"bisect it alone with --scenario {flipped[0]}")


def bisect_exit_code(doc: dict) -> int:
    return 0 if doc["result"] == FOUND else 1


# ---- recording --------------------------------------------------------------------------------


def set_trailers(raw: bytes, values: list[tuple[str, str]]) -> bytes:
    """Set (replace or append) trailers in a format-patch file's message; the diff is untouched."""
    return trailers.edit_patch(raw, set_=values)


def find_patch(target: Target, name: str) -> Patch:
    """A patch of the target's series, or of a sub-target's as `<sub-target>/<file>` (its own file)."""
    label, _, file = name.partition("/") if "/" in name else (None, "", name)
    if label is None:
        return series.find_patch(target.patches, name, where=f"{target.name}'s series", flag="--record")
    sub = next((st for st in target.sub_targets() if st.name == f"{target.name}.{label}"), None)
    if sub is None:
        raise UsageError(f"--record {name}: {target.name} has no sub-target {label} "
                         f"({', '.join(s.label for s in target.submodules) or 'none'})")
    return series.find_patch(sub.patches, file, where=f"sub-target {label}'s series", flag="--record")


def _code_signal(target: Target, source: Path, patch: Patch, commit: str, cache: Path) -> dict | None:
    """The code signal at upstream `commit`, for a patch of the superproject or of a sub-target wherever
    `commit` holds it (engine/layout.py): a folder's patches re-rooted into the superproject, a submodule's
    in its checkout at the gitlink."""
    owner = next(((sub, st) for sub, st in zip(target.submodules, target.sub_targets())
                  if any(p.path == patch.path for p in st.patches)), None)
    if owner is None:
        return retirement.code_signal_at(target, source, patch, commit, cache)
    sub, st = owner
    pl = layout.place(Path(source), commit, sub)
    if pl.kind == layout.SUBMODULE:
        checkout = layout.checkout_of(Path(source), sub, pl)
        if checkout is None:
            raise UsageError(f"submodule {pl.path} is not initialised in {source}: git -C {source} submodule update "
                             f"--init {sub.path}")
        return retirement.code_signals(st, checkout, git.try_resolve(checkout, st.base) or st.base, pl.commit,
                                       cache).get(patch.name)
    view = SimpleNamespace(name=f"{st.name}-rerooted", patches=[layout.reroot(p, "", pl.path) for p in st.patches])
    base = git.try_resolve(Path(source), target.base) or target.base
    return retirement.code_signals(view, source, base, commit, cache).get(patch.name)


def record_applied_upstream(patch: Patch, doc: dict, *, target: Target, source: Path, cache: Path) -> dict:
    """Write `Applied-Upstream: <commit>` and `Applied-Upstream-Signal: behaviour (...) + code
    <signal>` into the patch file, once upstream at the found commit is shown to contain the patch's
    code (engine.retirement.code_signal_at; else CheckFailed, nothing written); the patch id must not
    change (else the file is restored and UsageError raised)."""
    if doc["result"] != FOUND or doc["direction"] != "fixed":
        raise CheckFailed(f"nothing recorded in {patch.name}: the bisect found no commit that fixed the behaviour "
                          f"({doc['reason']})")
    commit = doc["first"]["commit"]
    code = _code_signal(target, source, patch, commit, cache)
    if not retirement.is_code_signal(code):
        raise CheckFailed(
            f"nothing recorded in {patch.name}: {'+'.join(doc['scenarios'])} behaves fixed from {commit[:12]} on, but "
            f"{commit[:12]} has none of the patch's code (no patch-id, reverse-apply, content or 3-way match): "
            f"behaviour alone makes it a retire-candidate at most — review its hunks against {commit[:12]}'s code "
            f"(lucepatch verify --retire {commit[:12]} --target {target.name} lists what to read)")
    signal = f"{SIGNAL} (bisect {'+'.join(doc['scenarios'])} over {doc['range']['spec']}) + code {code['signal']}"
    after = series.rewrite_patch_file(
        patch, set_trailers(patch.raw, [("Applied-Upstream", commit), ("Applied-Upstream-Signal", signal)]),
        check={"Applied-Upstream": commit})
    return {"patch": patch.name, "file": str(patch.path), "applied_upstream": commit, "signal": SIGNAL,
            "code_signal": code,
            "trailers": {"Applied-Upstream": commit, "Applied-Upstream-Signal": signal}, "patch_id": after.patch_id}


__all__ = ["bisect_behaviour", "bisect_exit_code", "record_applied_upstream", "find_patch", "parse_range",
           "set_trailers", "BISECT_SCHEMA"]
