"""Retirement by behaviour that can never drop a needed patch (issue 11; docs/design.md "Retirement").

At an upstream commit REF, patch P is **superseded** only when all of these hold:

  (a) add-one        on REF + Build-Only (+ the earlier patches P's text needs), every scenario
                     that reaches P behaves identically with and without P;
  (b) leave-one-out  the same on REF + the rest of the series (applicable at REF);
  (c) positive control  at the pinned base, P made a difference in (a) or (b) on some scenario —
                     a patch no scenario ever distinguishes is `untestable`, never retired;
  (d) coverage       every hunk of P is executed by some scenario (lucepatch.upstream.coverage) —
                     line by line: every line P added that compiled to code ran in some scenario
                     (a bounds check whose early return never ran has not been shown unneeded),
                     else `untestable: <file:line> reached by no scenario`;
  (e) joint check    once the candidates R are chosen, REF + (series − R) behaves like REF + series
                     on every scenario; a candidate that breaks that stays `still-needed`.

"Identically" (lucepatch.upstream.behaviour) = the same outcome class and the same check results
on all N >= 10 fixed runs per side, controls passing; anything mixed, invalid or skipped is
`inconclusive`. The scenarios that reach P are its `Reproducer:` trailers plus the measured
coverage map (the map adds scenarios, it never removes a declared one).

Statuses (with the coarse `needed` a rebase session shows, lucepatch.engine.needed):

  superseded           (a)–(e) hold                                          needed: superseded
  still-needed         P changes a scenario at REF (named, with both sides);   still-needed
                       or P does not apply at REF and REF without it still
                       shows a failure P fixed at the base
  no-longer-effective  identical at REF, but the common behaviour fails where  still-needed
                       P made it pass at the base (the bug is back; P no longer fixes it)
  regression           P makes a scenario fail at REF that passes without it   inconclusive
  conflict             P does not apply at REF and nothing shows it is needed  inconclusive
  untestable           Build-Only, (c) or (d) fails, or no scenario reaches P  untestable
  inconclusive         a comparison was mixed / invalid / skipped, a control   inconclusive
                       failed or a build could not be made (the reason names the build and the
                       evidence, never an unmeasured cause)

The report also lists the scenarios that still fail on REF + series: upstream bugs no patch covers.
Entry points: retire_report(...) -> dict (RETIRE_SCHEMA), format_retire_table(doc),
retire_exit_code(doc), behaviour_hook(...) (engine.upstreamed), judge(...) (engine.needed).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

from lucepatch import git, report
from lucepatch.engine.apply import WorkArea, apply_series
from lucepatch.errors import UsageError
from lucepatch.series import Patch
from lucepatch.target import Target
from lucepatch.upstream.behaviour import (B_FAIL, B_MIXED, B_PASS, B_SKIPPED, DIFFERENT, IDENTICAL,  # noqa: F401
                                          INCONCLUSIVE as C_INCONCLUSIVE, Behaviour, Comparison, Lab,
                                          describe_signature, measure_behaviour, resolve_driver)
from lucepatch.verify.driver import DriverChoice
from lucepatch.verify.reproducer import Reproducer, Scenario, list_reproducers, load_reproducer_dir

SCHEMA_VERSION = 2
KIND = "lucepatch-retire"
MIN_RUNS = 10

SUPERSEDED = "superseded"
STILL_NEEDED = "still-needed"
NO_LONGER_EFFECTIVE = "no-longer-effective"
REGRESSION = "regression"
CONFLICT = "conflict"
UNTESTABLE = "untestable"
INCONCLUSIVE = "inconclusive"
STATUSES = (SUPERSEDED, STILL_NEEDED, NO_LONGER_EFFECTIVE, REGRESSION, CONFLICT, UNTESTABLE, INCONCLUSIVE)
RETIRE = SUPERSEDED  # the old name of the status ("retire-candidate")
NEEDED = {SUPERSEDED: "superseded", STILL_NEEDED: "still-needed", NO_LONGER_EFFECTIVE: "still-needed",
          REGRESSION: "inconclusive", CONFLICT: "inconclusive", UNTESTABLE: "untestable", INCONCLUSIVE: "inconclusive"}

_BUILD = {"type": "object", "required": ["name", "ref", "patches", "built"],
          "properties": {"name": {"type": "string"}, "ref": {"type": "string"},
                         "patches": {"type": "array", "items": {"type": "string"}}, "built": {"type": "boolean"}}}
RETIRE_SCHEMA = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "required": ["schema_version", "kind", "target", "upstream", "driver", "simulated", "runs", "rule", "builds",
                 "patches", "superseded", "retire_candidates", "no_longer_effective", "still_failing", "summary"],
    "properties": {
        "schema_version": {"const": SCHEMA_VERSION},
        "kind": {"const": KIND},
        "target": {"type": "string"},
        "upstream": {"type": "object", "required": ["ref", "commit", "base"],
                     "properties": {"ref": {"type": "string"}, "commit": {"type": "string", "pattern": "^[0-9a-f]{40}$"},
                                    "base": {"type": "string", "pattern": "^[0-9a-f]{40}$"}}},
        "driver": {"type": "object", "required": ["kind"]},
        "simulated": {"type": "boolean"},
        "runs": {"type": "integer", "minimum": MIN_RUNS},
        "rule": {"type": "string"},
        "builds": {"type": "array", "items": _BUILD},
        "coverage": {"type": ["object", "null"]},
        "patches": {"type": "array", "items": {
            "type": "object",
            "required": ["name", "patch_id", "status", "needed", "reason", "applies", "scenarios", "judged"],
            "properties": {
                "name": {"type": "string"}, "patch_id": {"type": "string"}, "build_only": {"type": "boolean"},
                "status": {"enum": list(STATUSES)},
                "needed": {"enum": ["still-needed", "superseded", "untestable", "inconclusive"]},
                "reason": {"type": "string"}, "scenario": {"type": ["string", "null"]},
                "applies": {"type": "boolean"},
                "judged": {"type": "array", "items": {"type": "string", "pattern": "^[^:]+:[^:]+$"}},
                "unreached": {"type": "array", "items": {"type": "string"}},
                "scenarios": {"type": "array", "items": {"type": "object", "required": ["scenario"]}},
                "textual": {"oneOf": [{"type": "null"}, {"type": "object", "required": ["signal"]}]},
            }}},
        "superseded": {"type": "array", "items": {"type": "string"}},
        "retire_candidates": {"type": "array", "items": {"type": "string"}},
        "no_longer_effective": {"type": "array", "items": {"type": "string"}},
        "still_failing": {"type": "array", "items": {"type": "object", "required": ["scenario", "behaviour"]}},
        "summary": {"type": "object", "additionalProperties": {"type": "integer"}},
    },
}


# ---- inputs -----------------------------------------------------------------------------------


def reproducers_dir(target: Target, workspace=None) -> Path:
    if workspace is not None:
        return Path(workspace.reproducers_dir)
    return target.dir.resolve().parent.parent / "reproducers"  # patches/<target>/ sits beside reproducers/


def target_reproducers(target: Target, workspace=None) -> list[Reproducer]:
    d = reproducers_dir(target, workspace)
    if not d.is_dir():
        return []
    return [r for r in (load_reproducer_dir(p) for p in sorted(d.iterdir()) if (p / "reproducer.toml").is_file())
            if r.target == target.name]


def declared(target: Target, repros: dict[str, Reproducer]) -> tuple[dict[str, list[str]], dict[str, str]]:
    """patch -> the checked scenarios its Reproducer: trailers name; patch -> why its trailers are wrong."""
    out: dict[str, list[str]] = {}
    problems: dict[str, str] = {}
    for p in target.patches:
        keys: list[str] = []
        for name, scen in p.reproducers:
            r = repros.get(name)
            if r is None:
                problems[p.name] = f"Reproducer: {name} names no reproducer of {target.name}; fix the trailer"
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
                keys.append(f"{name}:{s.name}")
            else:
                keys += [f"{name}:{s.name}" for s in r.checked]
        out[p.name] = list(dict.fromkeys(keys))
    return out, problems


# ---- one context (REF or the base): the builds of add-one and leave-one-out ---------------------


@dataclass
class Context:
    """The builds of one upstream commit: bare (Build-Only), full (the applicable series), and per
    patch its add-one pair and leave-one-out pair."""
    commit: str
    label: str
    conflicts: list[str]
    full: object = None
    bare: object = None
    add_one: dict = field(default_factory=dict)  # patch -> (without, with)
    leave_one_out: dict = field(default_factory=dict)  # patch -> (without, with)
    notes: dict = field(default_factory=dict)  # patch -> how the pairs were chosen


class Judge:
    def __init__(self, target: Target, lab: Lab):
        self.t, self.lab = target, lab
        self.order = [p.name for p in target.patches]
        self.build_only = [p.name for p in target.patches if p.build_only]
        self._conflicts: dict[tuple, list[str]] = {}

    def conflicts(self, commit: str, names: list[str]) -> list[str]:
        """The patches among `names` (applied in order at `commit`) that do not apply."""
        key = (commit, tuple(names))
        if key not in self._conflicts:
            by = {p.name: p for p in self.t.patches}
            with WorkArea(self.lab.cache, f"retire-{self.t.name}") as work:
                res = apply_series(self.t, self.lab.source, [by[n] for n in names], work, base=commit, trailers=False,
                                   checkout=False)
            self._conflicts[key] = [o.patch.name for o in res.conflicts]
        return self._conflicts[key]

    def applicable(self, commit: str, names: list[str]) -> tuple[list[str], list[str]]:
        """(the largest prefix-closed set of `names` that applies together at `commit`, the rest):
        patches are left out until what remains applies without a conflict."""
        keep, out = list(names), []
        while True:
            bad = self.conflicts(commit, keep)
            if not bad:
                return keep, out
            out += bad
            keep = [n for n in keep if n not in bad]

    def ordered(self, names) -> list[str]:
        s = set(names)
        return [n for n in self.order if n in s]

    def context(self, commit: str) -> Context:
        label = commit[:12]
        applicable, bad = self.applicable(commit, self.ordered(self.order))
        cx = Context(commit, label, bad)
        cx.full = self.lab.build(f"{label}+series", commit, applicable)
        cx.bare = self.lab.build(f"{label}+build-only", commit, self.build_only)
        for p in self.t.patches:
            if p.build_only or p.name in bad:
                continue
            # add-one: P on the bare upstream; when its text needs earlier patches, those too
            deps: list[str] = []
            if self.conflicts(commit, self.ordered(self.build_only + [p.name])):
                files = set(p.files)
                earlier = [n for n in applicable[:applicable.index(p.name)] if n not in self.build_only]
                same = [n for n in earlier if files & set(_patch(self.t, n).files)]
                for cand in (same, earlier):
                    if not self.conflicts(commit, self.ordered(self.build_only + cand + [p.name])):
                        deps = cand
                        break
                else:
                    cx.notes[p.name] = "it applies at REF only with the whole series"
                    deps = None
            if deps is not None:
                base = self.ordered(self.build_only + deps)
                without = cx.bare if not deps else self.lab.build(f"{label}+build-only+{_short(deps)}", commit, base)
                with_ = self.lab.build(f"{label}+build-only+{_short([p.name] + deps)}", commit,
                                       self.ordered(base + [p.name]))
                cx.add_one[p.name] = (without, with_)
                if deps:
                    cx.notes[p.name] = f"add-one with the patches its text needs: {', '.join(deps)}"
            # leave-one-out: the rest of the series; later patches that need P's text leave with it
            rest = [n for n in applicable if n != p.name]
            rest, dependents = self.applicable(commit, rest)
            if dependents:
                without = self.lab.build(f"{label}+series-{_short([p.name] + dependents)}", commit, rest)
                with_ = self.lab.build(f"{label}+series-{_short(dependents)}", commit,
                                       [n for n in applicable if n not in dependents])
                cx.notes[p.name] = (cx.notes.get(p.name, "") + "; " if p.name in cx.notes else "") + \
                    f"leave-one-out without {', '.join(dependents)} (their text needs it)"
            else:
                without, with_ = self.lab.build(f"{label}+series-{_short([p.name])}", commit, rest), cx.full
            cx.leave_one_out[p.name] = (without, with_)
        return cx


def _patch(t: Target, name: str) -> Patch:
    return next(p for p in t.patches if p.name == name)


def _short(names: list[str]) -> str:
    return "+".join(n.removesuffix(".patch")[:40] for n in names)


# ---- the rule -----------------------------------------------------------------------------------


@dataclass
class Verdict:
    status: str
    reason: str
    scenario: str | None = None
    details: list = field(default_factory=list)


def _pairs(cx: Context, name: str) -> list[tuple[str, object, object]]:
    out = []
    if name in cx.add_one:
        out.append(("add-one", *cx.add_one[name]))
    if name in cx.leave_one_out:
        out.append(("leave-one-out", *cx.leave_one_out[name]))
    return out


def judge_patch(lab: Lab, p: Patch, scen: list[str], ref: Context, base: Context, unreached: list[str],
                blame) -> Verdict:
    details = []
    if not scen:
        return Verdict(UNTESTABLE, "no scenario reaches it: no Reproducer: trailer names one and the coverage map "
                                   "shows none executing its code")
    cmp_ref = [(kind, s, lab.compare(w, wi, s)) for kind, w, wi in _pairs(ref, p.name) for s in scen]
    cmp_base = cmp_ref if base is ref else [(kind, s, lab.compare(w, wi, s)) for kind, w, wi in _pairs(base, p.name)
                                            for s in scen]
    for kind, s, c in cmp_ref:
        details.append({"scenario": s, "at": "ref", "pair": kind, **c.to_json()})
    if base is not ref:
        for kind, s, c in cmp_base:
            details.append({"scenario": s, "at": "base", "pair": kind, **c.to_json()})
    diffs = [(kind, s, c) for kind, s, c in cmp_ref if c.kind == DIFFERENT]
    helps = [(k, s, c) for k, s, c in diffs if not (c.with_.state == B_FAIL and c.without.state == B_PASS)]
    if helps:
        kind, s, c = helps[0]
        return Verdict(STILL_NEEDED, f"{kind} at {ref.label}: {s}: {c.why}", s, details)
    if diffs:
        kind, s, c = diffs[0]
        return Verdict(REGRESSION, f"{kind} at {ref.label}: {s} passes without it and fails with it: {c.why}", s, details)
    unsure = [(kind, s, c) for kind, s, c in cmp_ref if c.kind != IDENTICAL]
    if unsure:
        kind, s, c = unsure[0]
        return Verdict(INCONCLUSIVE, f"{kind} at {ref.label}: {s}: {blame(c)}", s, details)
    positive = [(kind, s, c) for kind, s, c in cmp_base if c.kind == DIFFERENT]
    if not positive:
        why = "; ".join(f"{s}: {c.why}" for _, s, c in cmp_base if c.kind != IDENTICAL)[:300]
        return Verdict(UNTESTABLE, f"no scenario distinguishes it at the base {base.label} (positive control)"
                       + (f"; not measurable there: {why}" if why else ""), None, details)
    for kind, s, c in positive:
        now = next(cr for k2, s2, cr in cmp_ref if k2 == kind and s2 == s)
        if c.with_.passes and not now.with_.passes:
            return Verdict(NO_LONGER_EFFECTIVE, f"{s}: at the base it made {c.without.describe()} pass; at {ref.label} "
                                                f"{now.with_.describe()} with and without it", s, details)
    if unreached:
        return Verdict(UNTESTABLE, f"{', '.join(unreached[:3])}{' …' if len(unreached) > 3 else ''} (at {ref.label}"
                                   f"+series) reached by no scenario", None, details)
    kind, s, c = positive[0]
    return Verdict(SUPERSEDED, f"identical with and without it at {ref.label} on {', '.join(scen)} ({len(scen)} "
                               f"scenario(s), add-one and leave-one-out); at the base it made a difference on {s} "
                               f"({c.why})", s, details)


def judge_conflict(lab: Lab, p: Patch, scen: list[str], ref: Context, base: Context, blame) -> Verdict:
    """P does not apply at REF: needed if REF without it still fails a scenario P fixed at the base."""
    details = []
    fixed = []
    for kind, w, wi in _pairs(base, p.name):
        for s in scen:
            c = lab.compare(w, wi, s)
            details.append({"scenario": s, "at": "base", "pair": kind, **c.to_json()})
            if c.kind == DIFFERENT and c.with_.passes and s not in {x for x, _ in fixed}:
                fixed.append((s, c))
    broken = []
    for s, c in fixed:
        now = lab.on(ref.bare, s)
        ok, why = lab.controls_ok(ref.bare, s)
        details.append({"scenario": s, "at": "ref", "pair": "bare", "kind": now.state, "without": now.to_json()})
        if ok and now.state in (B_FAIL, B_MIXED):
            broken.append((s, c, now))
    if broken:  # every scenario it fixed at the base that REF still fails without it, named
        s, c, now = broken[0]
        more = "".join(f"; {s2}: {n2.describe()}" for s2, _, n2 in broken[1:4]) + \
            (f"; +{len(broken) - 4} more" if len(broken) > 4 else "")
        return Verdict(STILL_NEEDED, f"does not apply at {ref.label} (rebase it); without it, on {ref.bare.name}, "
                                     f"{s}: {now.describe()}{more} — scenario(s) it fixed at the base ({c.why})",
                       s, details)
    if not fixed:
        return Verdict(CONFLICT, f"does not apply at {ref.label}, and no scenario distinguished it at the base", None,
                       details)
    return Verdict(CONFLICT, f"does not apply at {ref.label}; without it {ref.bare.name} already behaves as it did with "
                             f"it at the base on {', '.join(s for s, _ in fixed)} — rebase it to judge add-one and "
                             "leave-one-out", fixed[0][0], details)


# ---- truthful blame ---------------------------------------------------------------------------


def make_blame(lab: Lab, base_commit: str, ref_commit: str):
    """An inconclusive comparison's reason: the build, the runs, where the control passes — never a guess."""
    def blame(c: Comparison) -> str:
        why = c.why
        if not why.startswith("control "):
            return why
        ctrl = why.split(" on ", 1)[0].removeprefix("control ")
        passing = sorted({b.name for b in lab.builds.values() if b.variant is not None
                          and (lab._id(b), ctrl) in lab.results and lab.results[(lab._id(b), ctrl)].passes})
        failing = sorted({b.name for b in lab.builds.values()
                          if (lab._id(b), ctrl) in lab.results and not lab.results[(lab._id(b), ctrl)].passes
                          and lab.results[(lab._id(b), ctrl)].state != B_SKIPPED})
        out = f"{why}; the control fails on {', '.join(failing)}"
        if passing:
            out += (f" and passes on {', '.join(passing[:3])}{' …' if len(passing) > 3 else ''}: the reproducer's "
                    "assumptions do not hold on the failing build(s)")
        if base_commit != ref_commit:
            out += (f"; first bad commit not known (lucepatch bisect --reproducer {ctrl.split(':')[0]} "
                    f"--scenario {ctrl.split(':')[1]} {base_commit[:12]}..{ref_commit[:12]} finds it)")
        return out
    return blame


# ---- the report ---------------------------------------------------------------------------------


def retire_report(target: Target, source: Path | str, ref: str, cache: Path, driver: DriverChoice | str = "auto",
                  runs: int | None = None, *, workspace=None, jobs: int | None = None, coverage: bool = True) -> dict:
    """Every patch of `target` judged at upstream commit `ref` by the rule above.

    source: the upstream checkout (only read; builds happen in private clones under `cache`);
    driver: a DriverChoice or auto/real/fake; runs: fixed runs per build and scenario (>= 10, default 10).
    Raises UsageError (bad input), EnvironmentMissing (ref absent, no compiler or gcov)."""
    source = Path(source)
    git.open_repo(source)
    n = runs or MIN_RUNS
    if n < MIN_RUNS:
        raise UsageError(f"--runs {n}: retirement compares fixed runs, at least {MIN_RUNS} per build and scenario")
    commit = git.resolve_commit(source, ref, what="--retire", upstream=target.upstream)
    base = git.resolve_commit(source, target.base, what=f"base commit of {target.name}", upstream=target.upstream)
    cache = Path(cache)
    repros = {r.name: r for r in target_reproducers(target, workspace)}
    decl, problems = declared(target, repros)
    drv = resolve_driver(driver, cache)
    lab = Lab(target, source, cache, drv, list(repros.values()), n, jobs)
    judge = Judge(target, lab)
    report.progress(f"retire check of {target.name} at {ref} ({commit[:12]}), base {base[:12]}: "
                    f"{len(repros)} reproducer(s), {n} runs per build and scenario, driver {drv.chosen}")
    judged_patches = [p for p in target.patches if not p.build_only]
    if not repros or not judged_patches:
        return _doc(target, ref, commit, base, lab, n, [
            _row(p, UNTESTABLE, "Build-Only: part of every build, so behaviour cannot judge it (its build probes can)"
                 if p.build_only else "no reproducer of this target exists to judge it", True, [], [], None)
            for p in target.patches], [], None, {})
    ref_cx = judge.context(commit)
    base_cx = ref_cx if commit == base else judge.context(base)
    builds = [b for b in lab.builds.values()]
    lab.measure(builds)  # every scenario on every build, N runs each (each pair reads from here)
    cov = cov_base = None
    if coverage:
        applicable = [n_ for n_ in judge.order if n_ not in ref_cx.conflicts]  # what REF + series holds
        from lucepatch.upstream.coverage import coverage_map

        cov = coverage_map(lab, commit, applicable)
        if ref_cx.conflicts and commit != base:
            cov_base = coverage_map(lab, base, judge.order)
    blame = make_blame(lab, base, commit)
    textual = _textual(target, source, commit)
    rows, verdicts = [], {}
    for p in target.patches:
        applies = p.name not in ref_cx.conflicts
        if p.build_only:
            rows.append(_row(p, UNTESTABLE, "Build-Only: part of every build, so behaviour cannot judge it (its build "
                             "probes can)", applies, [], [], textual.get(p.name)))
            continue
        m = cov if applies else (cov_base or cov)
        reach = [s for s in (m.reaching(p.name) if m else []) if not _is_control(repros, s)]
        scen = list(dict.fromkeys(decl.get(p.name, []) + reach))
        if p.name in problems:
            v = Verdict(INCONCLUSIVE, problems[p.name])
        elif not applies:
            v = judge_conflict(lab, p, scen, ref_cx, base_cx, blame)
        else:
            unreached = cov.unreached(p.name) if cov else []
            v = judge_patch(lab, p, scen, ref_cx, base_cx, unreached, blame)
            if p.name in ref_cx.notes:
                v.reason += f" ({ref_cx.notes[p.name]})"
        verdicts[p.name] = v
        rows.append(_row(p, v.status, v.reason, applies, scen, v.details, textual.get(p.name), v.scenario,
                         cov.unreached(p.name) if cov and applies else []))
    _joint(lab, judge, ref_cx, rows, repros)
    if commit != base:
        _name_upstream_commits(target, source, base, commit, cache, drv, n, rows, repros)
    still = []
    for rname, r in repros.items():
        for s in r.checked:
            ob = lab.on(ref_cx.full, f"{rname}:{s.name}")
            if ob.state in (B_FAIL, B_MIXED):
                still.append({"scenario": f"{rname}:{s.name}", "behaviour": ob.describe(), "build": ref_cx.full.name,
                              "first_error": ob.first_error})
    return _doc(target, ref, commit, base, lab, n, rows, still, cov, {"ref": ref_cx.notes})


def _is_control(repros, key: str) -> bool:
    r = repros.get(key.split(":", 1)[0])
    return bool(r) and any(s.control and s.name == key.split(":", 1)[1] for s in r.scenarios)


def _joint(lab: Lab, judge: Judge, cx: Context, rows: list[dict], repros: dict) -> None:
    """(e): REF + (series − R) must behave like REF + series on every scenario; greedily keep R so."""
    cands = [r["name"] for r in rows if r["status"] == SUPERSEDED]
    if not cands:
        return
    scen = [f"{n}:{s.name}" for n, r in repros.items() for s in r.checked]
    applicable = [n for n in judge.order if n not in cx.conflicts]

    def same(removed: list[str]) -> Comparison | None:
        b = cx.full if not removed else lab.build(f"{cx.label}+series-{_short(removed)}", cx.commit,
                                                  [n for n in applicable if n not in removed])
        for s in scen:
            c = lab.compare(b, cx.full, s)
            if c.kind != IDENTICAL:
                return c
        return None

    bad = same(cands)
    keep: list[str] = []
    if bad is None:
        keep = cands
    else:
        for c in cands:
            if same(keep + [c]) is None:
                keep.append(c)
    for r in rows:
        if r["name"] in cands and r["name"] not in keep:
            c = same(keep + [r["name"]])
            r.update(status=STILL_NEEDED, needed=NEEDED[STILL_NEEDED], scenario=c.scenario if c else None,
                     reason=f"joint check at {cx.label}: removing it with {', '.join(keep) or 'nothing else'} changes "
                            f"{c.scenario if c else '?'} ({c.why if c else 'unmeasured'}) although alone it changes "
                            "nothing there")
        elif r["name"] in keep:
            r["reason"] += f"; joint check: {cx.label}+series without {', '.join(keep)} behaves as the whole series " \
                           f"on all {len(scen)} scenario(s)"


def _name_upstream_commits(target, source, base, commit, cache, drv, n, rows, repros) -> None:
    """For each superseded patch: bisect base..REF on the scenario it made the difference on, on
    unpatched upstream, to name the commit for its Applied-Upstream: trailer."""
    from lucepatch.upstream.bisect import FOUND, bisect_behaviour

    for r in rows:
        if r["status"] != SUPERSEDED or not r.get("scenario"):
            continue
        rname, sname = r["scenario"].split(":", 1)
        spec = f"{base}..{commit}"
        try:
            doc = bisect_behaviour(target, source, spec, repros[rname], cache, drv, n, sname)
        except UsageError as exc:  # REF not on the base's first-parent line, ...
            r["applied_upstream"] = {"commit": None, "why": str(exc)}
            continue
        if doc["result"] == FOUND and doc["direction"] == "fixed":
            c = doc["first"]["commit"]
            r["applied_upstream"] = {
                "commit": c, "subject": doc["first"]["subject"], "signal": f"behaviour (bisect {r['scenario']} over "
                f"{base[:12]}..{commit[:12]})", "record": f"lucepatch bisect {base[:12]}..{commit[:12]} --reproducer "
                f"{rname} --scenario {sname} --record {r['name']}"}
            r["reason"] += f"; upstream fixed it in {c[:12]} ({doc['first']['subject'][:60]})"
        else:
            r["applied_upstream"] = {"commit": None, "why": doc["reason"]}


def _row(p: Patch, status: str, reason: str, applies: bool, scen: list[str], details: list, textual,
         scenario: str | None = None, unreached: list[str] | None = None) -> dict:
    return {"name": p.name, "subject": p.subject, "patch_id": p.patch_id, "build_only": p.build_only,
            "status": status, "needed": NEEDED[status], "reason": reason, "scenario": scenario, "applies": applies,
            "judged": scen, "unreached": unreached or [], "scenarios": details, "textual": textual}


def _doc(target, ref, commit, base, lab: Lab, n, rows, still, cov, notes) -> dict:
    ddoc = lab.driver_doc()
    summary = {s: sum(1 for p in rows if p["status"] == s) for s in STATUSES}
    return {
        "schema_version": SCHEMA_VERSION, "kind": KIND, "target": target.name,
        "series": {"version": target.version, "series_hash": target.series_hash},
        "upstream": {"url": target.upstream, "ref": ref, "commit": commit, "base": base},
        "driver": ddoc, "simulated": ddoc.get("kind") == "fake", "runs": n,
        "rule": "add-one, leave-one-out, positive control at the base, coverage, joint check (docs/design.md)",
        "builds": [b.to_json() for b in lab.builds.values()],
        "coverage": cov.to_json() if cov else None,
        "patches": rows,
        "superseded": [p["name"] for p in rows if p["status"] == SUPERSEDED],
        "retire_candidates": [p["name"] for p in rows if p["status"] == SUPERSEDED],
        "no_longer_effective": [p["name"] for p in rows if p["status"] == NO_LONGER_EFFECTIVE],
        "still_failing": still,
        "notes": notes,
        "summary": {k: v for k, v in summary.items() if v},
    }


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


def retire_exit_code(doc: dict) -> int:
    """0 when every patch is judged and none has stopped working; 1 when a patch is no longer
    effective, a regression or inconclusive (superseded patches alone are news, not failures)."""
    bad = {NO_LONGER_EFFECTIVE, INCONCLUSIVE, REGRESSION}
    return 1 if any(p["status"] in bad for p in doc["patches"]) else 0


def format_retire_table(doc: dict) -> tuple[str, list[str], list[list[str]]]:
    """(title, columns, rows) for report.table: one row per patch, then the still-failing scenarios."""
    up = doc["upstream"]
    title = (f"retire check of {doc['target']} at {up['ref']} ({up['commit'][:12]}, base {up['base'][:12]}) — driver "
             f"{doc['driver'].get('kind')}{' (simulated)' if doc.get('simulated') else ''}, {doc['runs']} runs per side")
    rows = []
    for p in doc["patches"]:
        sig = f" [textual: {p['textual']['signal']}]" if p.get("textual") else ""
        rows.append([p["name"], p["status"] + ("" if p["applies"] else " (does not apply)"), p.get("scenario") or "",
                     p["reason"] + sig])
    for s in doc.get("still_failing", []):
        rows.append(["(no patch)", "still failing", s["scenario"], f"{s['behaviour']} on {s['build']}"])
    return title, ["patch", "status", "decided by", "why"], rows


# ---- the hooks: status --behaviour, rebase sessions' `needed` ---------------------------------


def behaviour_hook(cache: Path, driver: DriverChoice | str = "auto", runs: int | None = None, workspace=None):
    """For lucepatch.engine.upstreamed.register_behaviour_hook: True when the rule calls the patch
    superseded at `ref`, False when it is still needed, None otherwise. Builds and runs: opt-in."""
    memo: dict[tuple, dict] = {}

    def behaviour_fixed_upstream(target, patch, source, ref):
        if target is None or source is None:
            return None
        key = (target.name, str(source), ref)
        if key not in memo:
            memo[key] = retire_report(target, source, ref, cache, driver, runs, workspace=workspace)
        row = next((p for p in memo[key]["patches"] if p["name"] == patch.name), None)
        if row is None:
            return None
        return True if row["status"] == SUPERSEDED else False if row["needed"] == "still-needed" else None

    behaviour_fixed_upstream.reports = memo
    return behaviour_fixed_upstream


def report_hook(doc: dict):
    """A behaviour hook (engine.upstreamed) answering from one retire report: `status --behaviour`."""
    by = {p["name"]: p for p in doc["patches"]}

    def retirement_rule(target, patch, source, ref):
        row = by.get(patch.name)
        if row is None or ref != doc["upstream"]["commit"]:
            return None
        return True if row["status"] == SUPERSEDED else False if row["needed"] == "still-needed" else None

    retirement_rule.detail = lambda patch, ref: f"superseded at {ref[:12]}: {by[patch.name]['reason']}"[:300]
    return retirement_rule


def report_key(target: Target, commit: str, repros: list[Reproducer]) -> str:
    doc = {"target": target.name, "commit": commit, "series": target.series_hash,
           "reproducers": sorted((r.name, r.hash) for r in repros)}
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:24]


def save_report(doc: dict, target: Target, cache: Path, workspace=None) -> Path:
    """Keep the report where a rebase session's judge finds it (same target, commit, series, reproducers)."""
    path = Path(cache) / "retire" / f"{report_key(target, doc['upstream']['commit'], target_reproducers(target, workspace))}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(doc, indent=2) + "\n")
    tmp.replace(path)
    return path


def load_saved(target: Target, commit: str, cache: Path, workspace=None) -> dict | None:
    """The report save_report kept for this target, commit, series and reproducers, if any."""
    path = Path(cache) / "retire" / f"{report_key(target, commit, target_reproducers(target, workspace))}.json"
    return json.loads(path.read_text()) if path.is_file() else None


def judge(target: Target, source: Path, ref: str, patches, *, cache: Path | None = None) -> dict:
    """lucepatch.engine.needed's judge: the rule's answer from the report `verify --retire REF` saved
    for this target, commit, series and reproducers; without one, every patch not-judged with the
    command that judges it (a rebase session never builds and runs by itself)."""
    from lucepatch.engine import needed
    from lucepatch.workspace import resolve_cache

    cache = Path(cache or resolve_cache(None))
    commit = git.try_resolve(Path(source), ref) or ref
    doc = load_saved(target, commit, cache)
    if doc is None:
        why = f"not judged yet: lucepatch verify --retire {ref} --target {target.name} judges it (builds and runs)"
        return {p.name: needed.Judgement(needed.NOT_JUDGED, why) for p in patches}
    kind = doc.get("driver", {}).get("kind")
    out = {}
    for row in doc["patches"]:
        out[row["name"]] = needed.Judgement(row["needed"], f"{row['status']}: {row['reason']}"[:400], row.get("scenario"),
                                            "fake" if kind == "fake" else "real" if kind == "real" else None)
    return out


def _register() -> None:
    from lucepatch.engine import needed

    needed.register_judge(judge)


_register()

__all__ = ["retire_report", "retire_exit_code", "format_retire_table", "behaviour_hook", "judge", "save_report",
           "measure_behaviour", "Behaviour", "RETIRE_SCHEMA", "STATUSES", "SUPERSEDED", "STILL_NEEDED", "UNTESTABLE",
           "INCONCLUSIVE", "CONFLICT", "NO_LONGER_EFFECTIVE", "REGRESSION", "Scenario", "list_reproducers"]
