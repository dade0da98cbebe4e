"""Retirement by behaviour: has upstream fixed (or outgrown) what a patch fixes?

For an upstream commit REF, every scenario a patch names (`Reproducer: name[:scenario]`) runs on
two builds made at REF:

  unpatched  upstream at REF + the Build-Only patches (the same baseline `verify` uses)
  patched    the whole series applied at REF (patches that conflict there are left out and
             reported; the rest are applied as `apply` would)

and each (patch, scenario) gets one status:

  retire-candidate     the unpatched build passes every run and its controls pass: upstream
                       fixed the behaviour, whatever the diff looks like (no patch-id needed)
  no-longer-effective  the unpatched build fails and so does the patched one: the patch no longer
                       fixes the behaviour at REF
  still-needed         the unpatched build fails, the patched one passes
  conflict             the unpatched build fails and the patch does not apply at REF (rebase it)
  inconclusive         a control failed, a run could not prove what it loaded, or a build failed
  skipped              the scenario cannot run on this machine (e.g. needs 2 GPUs)

A patch is a retire candidate only when every scenario it names is one. It is judged per
scenario, so when upstream fixes one of two behaviours exactly the patch owning that behaviour
retires. Textual signals (patch-id, reverse-apply, content-match) are reported alongside, never
required.

Entry points: `retire_report(...) -> dict` (schema RETIRE_SCHEMA), `format_retire_table(doc)`,
`retire_exit_code(doc)`, and `measure_behaviour(...)`, which `bisect` shares.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from pathlib import Path

from lucepatch import git, report
from lucepatch.builders.native import build_variant
from lucepatch.engine.apply import WorkArea, apply_series
from lucepatch.errors import CheckFailed, UsageError
from lucepatch.series import Patch
from lucepatch.target import Target
from lucepatch.verify.driver import DriverChoice, choose_driver
from lucepatch.verify.reproducer import Reproducer, Scenario, load_reproducer_dir
from lucepatch.verify.runner import FAILURES, INVALID, RunRecord
from lucepatch.verify.service import artifact_variant
from lucepatch.verify.session import Variant, derive_driver, run_matrix
from lucepatch.verify.verdict import tally

SCHEMA_VERSION = 1
KIND = "lucepatch-retire"

RETIRE = "retire-candidate"
NO_LONGER_EFFECTIVE = "no-longer-effective"
STILL_NEEDED = "still-needed"
CONFLICT = "conflict"
INCONCLUSIVE = "inconclusive"
SKIPPED_S = "skipped"
UNTESTED = "untested"
STATUSES = (RETIRE, NO_LONGER_EFFECTIVE, STILL_NEEDED, CONFLICT, INCONCLUSIVE, SKIPPED_S, UNTESTED)

# Behaviour of one scenario on one build.
B_PASS, B_FAIL, B_INVALID, B_SKIPPED, B_UNBUILT = "pass", "fail", "invalid", "skipped", "not-built"

_TALLY = {
    "type": "object",
    "required": ["runs", "pass", "failures", "invalid", "skipped"],
    "properties": {"runs": {"type": "integer"}, "pass": {"type": "integer"}, "failures": {"type": "integer"},
                   "invalid": {"type": "integer"}, "skipped": {"type": "integer"}},
}
_BEHAVIOUR = {
    "type": "object",
    "required": ["behaviour", "control_ok"],
    "properties": {"behaviour": {"enum": [B_PASS, B_FAIL, B_INVALID, B_SKIPPED, B_UNBUILT]},
                   "control_ok": {"type": ["boolean", "null"]}, "tally": {"oneOf": [_TALLY, {"type": "null"}]}},
}
_VARIANT = {
    "type": "object",
    "required": ["built", "patches"],
    "properties": {"built": {"type": "boolean"}, "commit": {"type": ["string", "null"]},
                   "tree": {"type": ["string", "null"]}, "patches": {"type": "array", "items": {"type": "string"}},
                   "artifact_sha256": {"type": ["string", "null"]}, "error": {"type": "string"}},
}
# JSON schema of retire_report()'s document (tests validate against it).
RETIRE_SCHEMA = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "required": ["schema_version", "kind", "target", "upstream", "driver", "simulated", "runs", "variants",
                 "patches", "retire_candidates", "no_longer_effective", "summary"],
    "properties": {
        "schema_version": {"const": SCHEMA_VERSION},
        "kind": {"const": KIND},
        "target": {"type": "string"},
        "upstream": {"type": "object", "required": ["ref", "commit", "base"],
                     "properties": {"url": {"type": "string"}, "ref": {"type": "string"},
                                    "commit": {"type": "string", "pattern": "^[0-9a-f]{40}$"},
                                    "base": {"type": "string"}}},
        "driver": {"type": "object", "required": ["kind"]},
        "simulated": {"type": "boolean"},
        "runs": {"type": "integer", "minimum": 1},
        "variants": {"type": "object", "required": ["unpatched", "patched"],
                     "properties": {"unpatched": _VARIANT, "patched": _VARIANT}},
        "patches": {"type": "array", "items": {
            "type": "object",
            "required": ["name", "patch_id", "status", "reason", "applies", "textual", "scenarios"],
            "properties": {
                "name": {"type": "string"}, "patch_id": {"type": "string"}, "build_only": {"type": "boolean"},
                "status": {"enum": list(STATUSES)}, "reason": {"type": "string"}, "applies": {"type": "boolean"},
                "textual": {"oneOf": [{"type": "null"},
                                      {"type": "object", "required": ["signal"],
                                       "properties": {"signal": {"type": "string"},
                                                      "commit": {"type": ["string", "null"]}}}]},
                "scenarios": {"type": "array", "items": {
                    "type": "object",
                    "required": ["scenario", "status", "reason", "unpatched", "patched"],
                    "properties": {"scenario": {"type": "string", "pattern": "^[^:]+:[^:]+$"},
                                   "status": {"enum": list(STATUSES)}, "reason": {"type": "string"},
                                   "unpatched": _BEHAVIOUR, "patched": _BEHAVIOUR}}},
            }}},
        "retire_candidates": {"type": "array", "items": {"type": "string"}},
        "no_longer_effective": {"type": "array", "items": {"type": "string"}},
        "summary": {"type": "object", "additionalProperties": {"type": "integer"}},
    },
}


# ---- measuring a behaviour -------------------------------------------------------------------


@dataclass
class Behaviour:
    """What one scenario did on one build, with the health of its reproducer's controls."""
    behaviour: str  # pass | fail | invalid | skipped | not-built
    control_ok: bool | None
    tally: dict | None = None
    why: str = ""

    def to_json(self) -> dict:
        out = {"behaviour": self.behaviour, "control_ok": self.control_ok, "tally": self.tally}
        if self.why:
            out["why"] = self.why
        return out


def _state(records: list[RunRecord]) -> tuple[str, dict]:
    t = tally(records).to_json()
    if not records:
        return B_INVALID, t
    if t["skipped"] == t["runs"]:
        return B_SKIPPED, t
    if t["invalid"] or t["skipped"]:
        return B_INVALID, t
    return (B_FAIL if t["failures"] else B_PASS), t


def measure_behaviour(repro: Reproducer, scenarios: list[str], variants: list[Variant], runs: int,
                      driver: DriverChoice, cache: Path) -> tuple[dict[tuple[str, str], Behaviour], list[RunRecord]]:
    """Run `scenarios` (names, controls always added) of `repro` on every variant.

    Returns {(variant name, scenario name): Behaviour} and the raw run records. A scenario
    "fails" when any run fails (crash, wrong result, timeout, hook error in the log) and
    "passes" only when every run passes; controls must pass on the same variant for either to
    count (otherwise control_ok is False and the caller treats the result as inconclusive).
    """
    checked = [s for s in scenarios if not repro.scenario(s).control]
    records = run_matrix([repro], variants, runs, driver, cache, checked or None)
    out: dict[tuple[str, str], Behaviour] = {}
    for v in variants:
        ctrl_ok = True
        for c in repro.controls:
            st, _ = _state([r for r in records if r.variant == v.name and r.scenario == f"{repro.name}:{c.name}"])
            if st not in (B_PASS, B_SKIPPED):
                ctrl_ok = False
        for s in checked:
            recs = [r for r in records if r.variant == v.name and r.scenario == f"{repro.name}:{s}"]
            st, t = _state(recs)
            why = next((r.first_error or r.reason for r in recs if r.outcome in FAILURES or r.outcome == INVALID), "")
            out[(v.name, s)] = Behaviour(st, ctrl_ok, {k: t[k] for k in ("runs", "pass", "failures", "invalid", "skipped",
                                                                          "failure_rate", "outcomes")}, why[:200])
    return out, records


def resolve_driver(driver: DriverChoice | str, cache: Path) -> DriverChoice:
    return driver if isinstance(driver, DriverChoice) else choose_driver(driver, cache)


def reproducers_dir(target: Target, workspace=None) -> Path:
    if workspace is not None:
        return Path(workspace.reproducers_dir)
    # patches/<target>/ lives in the workspace, next to reproducers/
    return target.dir.resolve().parent.parent / "reproducers"


def load_repro(rdir: Path, name: str) -> Reproducer:
    d = rdir / name
    if not (d / "reproducer.toml").is_file():
        raise UsageError(f"unknown reproducer {name!r} (no {d}/reproducer.toml); fix the patch's Reproducer: trailer")
    return load_reproducer_dir(d)


def patch_scenarios(target: Target, rdir: Path) -> tuple[dict[str, list[tuple[Reproducer, Scenario]]], dict[str, str]]:
    """patch name -> [(reproducer, scenario)] from its Reproducer: trailers (no scenario = every
    checked scenario of that reproducer); plus patch name -> why it cannot be judged."""
    out: dict[str, list[tuple[Reproducer, Scenario]]] = {}
    problems: dict[str, str] = {}
    cache: dict[str, Reproducer] = {}
    for p in target.patches:
        pairs = []
        if p.build_only:  # in both builds: behaviour cannot say whether upstream still needs it
            out[p.name] = []
            continue
        for name, scen in p.reproducers:
            try:
                r = cache.get(name) or load_repro(rdir, name)
            except UsageError as exc:
                problems[p.name] = str(exc)
                continue
            cache[name] = r
            if r.target != target.name:
                problems[p.name] = f"reproducer {name} targets {r.target}, not {target.name}"
                continue
            if scen:
                try:
                    s = r.scenario(scen)
                except UsageError as exc:
                    problems[p.name] = str(exc)
                    continue
                if s.control:
                    problems[p.name] = f"{name}:{scen} is a control scenario; a patch names the behaviour it fixes"
                    continue
                pairs.append((r, s))
            else:
                pairs.extend((r, s) for s in r.checked)
        seen, uniq = set(), []
        for r, s in pairs:
            if (r.name, s.name) not in seen:
                seen.add((r.name, s.name))
                uniq.append((r, s))
        out[p.name] = uniq
    return out, problems


# ---- the builds at REF -------------------------------------------------------------------------


@dataclass
class Builds:
    unpatched: object | None  # BuildResult (None only when nothing needed building)
    patched: object | None  # BuildResult, None when it could not be built
    conflicts: list[str] = field(default_factory=list)
    patched_error: str = ""


def _subset_target(target: Target, patches: list[Patch]) -> Target:
    t = copy.copy(target)
    t.__dict__["patches"] = list(patches)  # cached_property: the copy carries the subset only
    return t


def build_at(target: Target, source: Path, ref: str, cache: Path) -> Builds:
    """Unpatched (Build-Only patches) and patched (series minus what conflicts) builds at `ref`."""
    unpatched = build_variant(target, source, "baseline", cache, base=ref)
    with WorkArea(cache, f"retire-{target.name}") as work:
        res = apply_series(target, source, target.patches, work, base=ref, trailers=False, checkout=False)
        conflicts = [o.patch.name for o in res.conflicts]
    t = target if not conflicts else _subset_target(target, [p for p in target.patches if p.name not in conflicts])
    try:
        patched = build_variant(t, source, "patched", cache, base=ref)
        err = ""
    except CheckFailed as exc:
        patched, err = None, str(exc)
    return Builds(unpatched, patched, conflicts, err)


def _variant_json(b, error: str = "", conflicts: list[str] | None = None) -> dict:
    if b is None:
        return {"built": False, "commit": None, "tree": None, "patches": [], "artifact_sha256": None, "error": error}
    out = {"built": True, "commit": b.commit, "tree": b.tree, "patches": list(b.patches),
           "artifact_sha256": next(iter(b.sha256.values()), None), "cached": b.cached}
    if conflicts is not None:
        out["left_out"] = list(conflicts)
    return out


def _textual(target: Target, source: Path, ref: str) -> dict[str, dict | None]:
    """The textual signals (patch-id, content-match) per patch, for information only."""
    from lucepatch.engine.upstreamed import content_match, tree_reader, upstream_patch_ids

    out: dict[str, dict | None] = {p.name: None for p in target.patches}
    try:
        base = git.try_resolve(source, target.base)
        ids = upstream_patch_ids(source, base, ref) if base else {}
        read = tree_reader(source, ref)
        for p in target.patches:
            if p.patch_id in ids:
                out[p.name] = {"signal": "patch-id", "commit": ids[p.patch_id]}
            elif content_match(p, read):
                out[p.name] = {"signal": "content-match", "commit": None}
    except Exception as exc:  # information only: never fail the behavioural report for it
        report.progress(f"textual upstream signals unavailable: {exc}")
    return out


# ---- the report -------------------------------------------------------------------------------


def classify(unpatched: Behaviour, patched: Behaviour, applies: bool) -> tuple[str, str]:
    u, p = unpatched, patched
    if u.behaviour == B_UNBUILT:
        return INCONCLUSIVE, "the unpatched build failed"
    if u.behaviour == B_SKIPPED:
        return SKIPPED_S, "cannot run on this machine"
    if not u.control_ok:
        return INCONCLUSIVE, "a control failed on the unpatched build: the environment, not upstream, is broken"
    if u.behaviour == B_INVALID:
        return INCONCLUSIVE, f"unpatched runs could not prove what they loaded ({u.why})"
    n = (u.tally or {}).get("runs", 0)
    if u.behaviour == B_PASS:
        why = f"upstream fixed the behaviour: passes {n}/{n} runs unpatched"
        if p.behaviour == B_FAIL:
            why += "; the patched build now FAILS it (the patch breaks upstream's fix)"
        elif not applies:
            why += "; the patch no longer applies"
        return RETIRE, why
    # unpatched fails
    fails = f"unpatched fails {u.tally['failures']}/{n}"
    if not applies:
        return CONFLICT, f"{fails} and the patch does not apply here: rebase it"
    if p.behaviour == B_UNBUILT:
        return INCONCLUSIVE, f"{fails}; the patched build failed"
    if p.behaviour == B_SKIPPED or not p.control_ok or p.behaviour == B_INVALID:
        return INCONCLUSIVE, f"{fails}; the patched runs are not valid ({p.why or 'a control failed'})"
    pn = p.tally["runs"]
    if p.behaviour == B_FAIL:
        return NO_LONGER_EFFECTIVE, f"{fails}, patched fails {p.tally['failures']}/{pn}: the patch no longer fixes it"
    return STILL_NEEDED, f"{fails}, patched passes {pn}/{pn}"


def _patch_status(scen: list[dict], patch: Patch) -> tuple[str, str]:
    if patch.build_only:
        return UNTESTED, "Build-Only: part of both builds, so behaviour cannot retire it (its probes can)"
    if not scen:
        return UNTESTED, "names no reproducer scenario (add a Reproducer: trailer)"
    st = [s["status"] for s in scen]
    judged = [s for s in st if s != SKIPPED_S]
    if not judged:
        return SKIPPED_S, "every scenario it names cannot run on this machine"

    def why(status: str) -> str:
        return "; ".join(f"{s['scenario']}: {s['reason']}" for s in scen if s["status"] == status)

    for status in (NO_LONGER_EFFECTIVE, INCONCLUSIVE, CONFLICT):
        if status in judged:
            return status, why(status)
    if all(s == RETIRE for s in judged):
        return RETIRE, why(RETIRE)
    fixed = [s["scenario"] for s in scen if s["status"] == RETIRE]
    return STILL_NEEDED, why(STILL_NEEDED) + (f" (upstream already fixes {', '.join(fixed)})" if fixed else "")


def retire_report(target: Target, source: Path | str, ref: str, cache: Path, driver: DriverChoice | str = "auto",
                  runs: int | None = None, *, workspace=None) -> dict:
    """Per patch and per scenario it names: retire-candidate / no-longer-effective / still-needed
    (and conflict / inconclusive / skipped / untested) at upstream commit `ref`.

    target: the loaded Target; source: the upstream checkout (only read: builds happen in private
    clones under `cache`); driver: a DriverChoice or "auto" | "real" | "fake"; runs: runs per
    build and scenario (default: the largest default_runs of the reproducers involved);
    workspace: the Workspace (default: the folder holding target.dir's patches/).
    Raises UsageError (bad reproducer data), EnvironmentMissing (ref absent, no compiler),
    CheckFailed (the unpatched build fails: upstream at ref does not build with the Build-Only patches).
    """
    source = Path(source)
    git.open_repo(source)
    commit = git.resolve_commit(source, ref, what="upstream ref",
                                remedy="fetch it into the checkout (git fetch origin) and pass a commit that exists")
    cache = Path(cache)
    rdir = reproducers_dir(target, workspace)
    by_patch, problems = patch_scenarios(target, rdir)
    drv = resolve_driver(driver, cache)
    needed = {(r.name, s.name): r for pairs in by_patch.values() for r, s in pairs}
    n = runs or max([r.default_runs for r in needed.values()] or [1])
    report.progress(f"retire check of {target.name} at {ref} ({commit[:12]}): building unpatched and patched")
    if not needed:  # nothing to run: no builds either
        report.progress(f"no patch of {target.name} names a reproducer scenario; nothing to judge by behaviour")
        builds = Builds(None, None, [], "no scenario to run")
    else:
        builds = build_at(target, source, commit, cache)

    results: dict[tuple[str, str], tuple[Behaviour, Behaviour]] = {}
    all_records: list[RunRecord] = []
    by_repro: dict[str, list[str]] = {}
    for (rname, sname) in needed:
        by_repro.setdefault(rname, []).append(sname)
    for rname, snames in by_repro.items():
        repro = needed[(rname, snames[0])]
        variants = []
        for label, b in (("unpatched", builds.unpatched), ("patched", builds.patched)):
            if b is None:
                continue
            variants.append(artifact_variant(label, b, repro.artifact, target, {"commit": b.commit}))
        beh, recs = measure_behaviour(repro, snames, variants, n, drv, cache)
        all_records += recs
        unbuilt = Behaviour(B_UNBUILT, None, None, builds.patched_error)
        for s in snames:
            results[(rname, s)] = (beh[("unpatched", s)], beh.get(("patched", s), unbuilt))

    textual = _textual(target, source, commit)
    patches = []
    for p in target.patches:
        applies = p.name not in builds.conflicts
        scen = []
        for r, s in by_patch.get(p.name, []):
            u, pb = results[(r.name, s.name)]
            status, why = classify(u, pb, applies)
            scen.append({"scenario": f"{r.name}:{s.name}", "status": status, "reason": why,
                         "unpatched": u.to_json(), "patched": pb.to_json()})
        if p.name in problems:
            status, why = INCONCLUSIVE, problems[p.name]
        else:
            status, why = _patch_status(scen, p)
        patches.append({"name": p.name, "subject": p.subject, "patch_id": p.patch_id, "build_only": p.build_only,
                        "status": status, "reason": why, "applies": applies, "textual": textual.get(p.name),
                        "scenarios": scen})

    ddoc = derive_driver(all_records, drv) if all_records else {"kind": drv.chosen, "requested": drv.requested}
    summary = {s: sum(1 for p in patches if p["status"] == s) for s in STATUSES}
    return {
        "schema_version": SCHEMA_VERSION,
        "kind": KIND,
        "target": target.name,
        "series": {"version": target.version, "series_hash": target.series_hash},
        "upstream": {"url": target.upstream, "ref": ref, "commit": commit, "base": target.base},
        "driver": ddoc,
        "simulated": ddoc.get("kind") == "fake",
        "runs": n,
        "variants": {"unpatched": _variant_json(builds.unpatched, builds.patched_error if not needed else ""),
                     "patched": _variant_json(builds.patched, builds.patched_error, builds.conflicts)},
        "patches": patches,
        "retire_candidates": [p["name"] for p in patches if p["status"] == RETIRE],
        "no_longer_effective": [p["name"] for p in patches if p["status"] == NO_LONGER_EFFECTIVE],
        "summary": {k: v for k, v in summary.items() if v},
    }


def retire_exit_code(doc: dict) -> int:
    """0 when every patch is judged and none has stopped working; 1 when a patch is no longer
    effective or a verdict is inconclusive (retire candidates alone are news, not failures)."""
    bad = {NO_LONGER_EFFECTIVE, INCONCLUSIVE}
    return 1 if any(p["status"] in bad for p in doc["patches"]) else 0


def format_retire_table(doc: dict) -> tuple[str, list[str], list[list[str]]]:
    """(title, columns, rows) for report.table: one row per (patch, scenario)."""
    up = doc["upstream"]
    title = (f"retire check of {doc['target']} at {up['ref']} ({up['commit'][:12]}) — driver "
             f"{doc['driver'].get('kind')}{' (simulated)' if doc.get('simulated') else ''}, {doc['runs']} run(s)")
    cols = ["patch", "scenario", "unpatched", "patched", "status", "why"]
    rows = []

    def cell(b: dict) -> str:
        t = b.get("tally")
        if not t:
            return b["behaviour"]
        if b["behaviour"] == B_PASS:
            return f"pass {t['pass']}/{t['runs']}"
        if b["behaviour"] == B_FAIL:
            return f"fail {t['failures']}/{t['runs']}"
        return f"{b['behaviour']} ({t['invalid']} invalid, {t['skipped']} skipped of {t['runs']})"

    for p in doc["patches"]:
        if not p["scenarios"]:
            rows.append([p["name"], "", "", "", p["status"], p["reason"]])
            continue
        for i, s in enumerate(p["scenarios"]):
            last = i == len(p["scenarios"]) - 1
            status = s["status"] + (f" → patch: {p['status']}" if last and len(p["scenarios"]) > 1 else "")
            sig = ""
            if last and p.get("textual"):
                sig = f" [textual: {p['textual']['signal']}]"
            rows.append([p["name"] if i == 0 else "", s["scenario"], cell(s["unpatched"]), cell(s["patched"]),
                         status, s["reason"] + sig])
    return title, cols, rows


def behaviour_hook(cache: Path, driver: DriverChoice | str = "auto", runs: int | None = None, workspace=None):
    """A hook for lucepatch.engine.upstreamed.register_behaviour_hook: True when every scenario the
    patch names passes on the unpatched upstream at `ref` (controls passing), False when one fails,
    None when the patch names none or the result is not valid. Builds and runs: opt-in only."""
    memo: dict[tuple, dict] = {}

    def behaviour_fixed_upstream(target, patch, source, ref):
        if target is None or source is None or not patch.reproducers:
            return None
        key = (target.name, str(source), ref)
        if key not in memo:
            memo[key] = retire_report(target, source, ref, cache, driver, runs, workspace=workspace)
        for p in memo[key]["patches"]:
            if p["name"] == patch.name:
                return True if p["status"] == RETIRE else (None if p["status"] in (INCONCLUSIVE, SKIPPED_S, UNTESTED) else False)
        return None

    return behaviour_fixed_upstream
