"""Retirement by behaviour that can never drop a needed patch (issues 11 and 26; docs/design.md "Retirement").

At an upstream commit REF, behaviour calls patch P a **retire-candidate** when all of these hold:

  (a) add-one        on REF + Build-Only (+ the earlier patches P's text needs), every scenario
                     that reaches P behaves identically with and without P;
  (b) leave-one-out  the same on REF + the rest of the series (applicable at REF);
  (c) positive control  at the pinned base, P made a difference in (a) or (b) on some scenario —
                     a patch no scenario ever distinguishes is `untestable`, never retired;
  (d) coverage       every hunk of P is executed by some scenario (lucepatch.upstream.coverage) —
                     line by line: every line P added that compiled to code ran in some scenario
                     (a bounds check whose early return never ran has not been shown unneeded),
                     else `untestable: <file:line> reached by no scenario`;
  (s) input sweep    every judged scenario that declares parameter sweep points ([params] `points`)
                     behaves identically with and without P at each point too (a point where P makes
                     the difference keeps it `still-needed`: upstream fixed only part of the inputs);
  (e) joint check    once the candidates R are chosen, REF + (series − R) behaves like REF + series
                     on every scenario; a candidate that breaks that stays `still-needed`, the
                     failure attributed by the coverage map to the patch whose hunks the failing
                     scenario executed.

It is **superseded** only with a *code signal* that REF contains the change besides (patch-id,
reverse-apply, content match, or the patch re-applied 3-way on REF changing nothing:
lucepatch.engine.retirement, the one judgement every writer asks). Behaviour alone proves "these
inputs behave alike", not "upstream fixed it": a candidate comes with what a reviewer reads (its
hunks, REF's version of those functions, the runs: lucepatch.upstream.review) and is never dropped,
recorded or shown as already upstream.

"Identically" (lucepatch.upstream.behaviour) = the same outcome class and the same check results
on all N >= 10 fixed runs per side, controls passing; anything mixed, invalid or skipped is
`inconclusive`. The scenarios that reach P are its `Reproducer:` trailers plus the measured
coverage map (the map adds scenarios, it never removes a declared one).

Statuses (with the coarse `needed` a rebase session shows, lucepatch.engine.needed):

  superseded           (a)–(e) hold and a code signal says REF has the change  needed: superseded
  retire-candidate     (a)–(e) hold, no code signal: needs review             retire-candidate
  still-needed         P changes a scenario (or a sweep point) at REF (named,  still-needed
                       with both sides); or P does not apply at REF and REF +
                       the rest of the series still fails a scenario P fixed at the base
  no-longer-effective  identical at REF, but the common behaviour fails where  still-needed
                       P made it pass at the base (the bug is back; P no longer fixes it)
  regression           P makes a scenario fail at REF that passes without it   inconclusive
  conflict             P does not apply at REF and nothing shows it is needed  inconclusive
  untestable           Build-Only, (c) or (d) fails, or no scenario reaches P  untestable
  inconclusive         a comparison was mixed / invalid / skipped, a control   inconclusive
                       failed or a build could not be made (the reason names the build and the
                       evidence, never an unmeasured cause)
  not-judged           its scenarios belong to reproducers this run did not    not-judged
                       select (--reproducer)

The report also lists the scenarios that still fail on REF + series: upstream bugs no patch covers.
Reports carry {"invariant": retirement.INVARIANT}; one without it (made when behaviour alone could
say superseded) is read as at most a retire-candidate.
Entry points: retire_report(...) -> dict (RETIRE_SCHEMA), behaviour_hook(...) (engine.upstreamed),
judge(...) (engine.needed). The report itself — its statuses, document, table, review lines, exit
code, and where it is kept — is upstream/retire_report.py (the names are exported here too).

Long: the rule is one argument — the two contexts' builds (add-one, leave-one-out), the per-patch
judgement, truthful blame, the joint check and the input sweep read the same Lab and Judge and
decide together; the report they write is upstream/retire_report.py.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from lucepatch import git, report
from lucepatch.engine import needed, retirement
from lucepatch.engine.apply import WorkArea, apply_series
from lucepatch.errors import UsageError
from lucepatch.series import Patch
from lucepatch.target import Target
from lucepatch.upstream import review
from lucepatch.upstream.retire_report import (CONFLICT, INCONCLUSIVE, KIND, MIN_RUNS, NEEDED, NO_LONGER_EFFECTIVE,  # noqa: F401
                                              NOT_JUDGED, REGRESSION, RETIRE_CANDIDATE, RETIRE_SCHEMA, SCHEMA_VERSION,
                                              SHOWN, STATUSES, STILL_NEEDED, SUPERSEDED, UNTESTABLE, WORSE_UPSTREAM,
                                              _doc, _row,
                                              _upstream_has, content_key, format_retire_table, load_saved,
                                              report_hook, reproducers_dir, retire_exit_code, review_lines,
                                              save_report, target_reproducers)
from lucepatch.upstream.behaviour import (B_FAIL, B_MIXED, B_PASS, B_SKIPPED, DIFFERENT, IDENTICAL,  # noqa: F401
                                          NOT_RUN, INCONCLUSIVE as C_INCONCLUSIVE, Behaviour, Comparison, Lab,
                                          describe_signature, made_worse, measure_behaviour, resolve_driver)
from lucepatch.upstream.bisect import FOUND, bisect_behaviour
from lucepatch.upstream.coverage import coverage_map
from lucepatch.verify.driver import DriverChoice
from lucepatch.verify.reproducer import Reproducer, Scenario, list_reproducers
from lucepatch.workspace import resolve_cache

# ---- inputs -----------------------------------------------------------------------------------


def select_reproducers(repros: list[Reproducer], names: list[str] | None, target: Target) -> list[Reproducer]:
    """The reproducers a retire run judges with: all of the target's, or those `names` gives."""
    if not names:
        return repros
    by = {r.name: r for r in repros}
    bad = [n for n in names if n not in by]
    if bad:
        raise UsageError(f"--reproducer {', '.join(bad)}: not a reproducer of {target.name}; it has "
                         f"{', '.join(by) or 'none'}")
    return [by[n] for n in dict.fromkeys(names)]


def declared(target: Target, repros: dict[str, Reproducer], known: set[str] = frozenset()
             ) -> tuple[dict[str, list[str]], dict[str, str], dict[str, list[str]]]:
    """patch -> the checked scenarios its Reproducer: trailers name; patch -> why its trailers are
    wrong; patch -> the reproducers it names that exist (`known`) but this run did not select."""
    out: dict[str, list[str]] = {}
    problems: dict[str, str] = {}
    unselected: dict[str, list[str]] = {}
    for p in target.patches:
        keys: list[str] = []
        for name, scen in p.reproducers:
            r = repros.get(name)
            if r is None and name in known:
                unselected.setdefault(p.name, []).append(name)
                continue
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
    return out, problems, {k: list(dict.fromkeys(v)) for k, v in unselected.items()}


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
        """The patches among `names` (applied in order at `commit`) that do not apply. Build-Only
        patches are never among them: every build carries them, where they do not apply by the ways
        builders/build_only.py lists (declared flags, 3-way, a line's resolution) — see `moved`."""
        return [n for n in self._apply(commit, names) if n not in self.build_only]

    def moved(self, commit: str) -> list[str]:
        """The Build-Only patches that do not apply at `commit` (the builds carry them another way)."""
        return [n for n in self._apply(commit, self.build_only) if n in self.build_only] if self.build_only else []

    def _apply(self, commit: str, names: list[str]) -> list[str]:
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

    def bare(self, commit: str):
        """Upstream at `commit` as it builds here: + Build-Only (carried as builders/build_only.py says)."""
        return self.lab.build(f"{commit[:12]}+build-only", commit, self.build_only)

    def ordered(self, names) -> list[str]:
        s = set(names)
        return [n for n in self.order if n in s]

    def context(self, commit: str, only: set[str] | None = None) -> Context:
        """The builds at `commit`: the series, Build-Only, and the pairs of the patches in `only`
        (default: every patch; a patch no scenario reaches needs none)."""
        label = commit[:12]
        applicable, bad = self.applicable(commit, self.ordered(self.order))
        cx = Context(commit, label, bad)
        cx.bare = self.bare(commit)
        cx.full = self.lab.build(f"{label}+series", commit, applicable)
        for p in self.t.patches:
            if p.build_only or p.name in bad or (only is not None and p.name not in only):
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


def measurement_plan(ref: Context, base: Context, scen_of: dict[str, list[str]], repros: dict) -> list[tuple]:
    """[(build, the scenarios the rule compares on it)]: REF + series every checked scenario (the
    scenarios still failing there, the joint check), each patch's pairs at REF and at the base its
    own scenarios, REF + Build-Only and REF + series (and the base + Build-Only) those of the patches
    that do not apply at REF (judge_conflict). Anything else a comparison asks for is measured then
    (Lab.on)."""
    plan: dict[int, tuple] = {}  # id(build) -> (build, keys): a Build is a dataclass, not hashable

    def want(b, keys):
        if b is not None:
            plan.setdefault(id(b), (b, set()))[1].update(keys)

    want(ref.full, [f"{n}:{s.name}" for n, r in repros.items() for s in r.checked])
    for name, keys in scen_of.items():
        for cx in (ref, base):
            for _, w, wi in _pairs(cx, name):
                want(w, keys)
                want(wi, keys)
        if name in ref.conflicts:
            want(ref.bare, keys)
            want(ref.full, keys)
            if base is not ref:  # "made worse" reads upstream + Build-Only at both commits
                want(base.bare, keys)
    return list(plan.values())


def _comparisons(lab: Lab, p: Patch, scen: list[str], ref: Context, base: Context):
    """(at REF, at the base, their details): every pair of P compared on every scenario of `scen`."""
    cmp_ref = [(kind, s, lab.compare(w, wi, s)) for kind, w, wi in _pairs(ref, p.name) for s in scen]
    cmp_base = cmp_ref if base is ref else [(kind, s, lab.compare(w, wi, s)) for kind, w, wi in _pairs(base, p.name)
                                            for s in scen]
    details = [{"scenario": s, "at": "ref", "pair": kind, **c.to_json()} for kind, s, c in cmp_ref]
    if base is not ref:
        details += [{"scenario": s, "at": "base", "pair": kind, **c.to_json()} for kind, s, c in cmp_base]
    return cmp_ref, cmp_base, details


def _needed_at_ref(cmp_ref, cmp_base, ref: Context, base: Context, details) -> Verdict | None:
    """still-needed (or worse-upstream) when P changes a scenario at REF for the better; else None."""
    diffs = [(kind, s, c) for kind, s, c in cmp_ref if c.kind == DIFFERENT]
    helps = [(k, s, c) for k, s, c in diffs if not (c.with_.state == B_FAIL and c.without.state == B_PASS)]
    if not helps:
        return None
    kind, s, c = helps[0]
    was = next((cb for k2, s2, cb in cmp_base if k2 == kind and s2 == s), None) if base is not ref else None
    if was is not None and made_worse(was.without, c.without):
        return Verdict(WORSE_UPSTREAM, f"{kind} at {ref.label}: {s}: {c.why}; upstream made it worse: without it, "
                                       f"{was.without.build}: {was.without.describe()} at the base, "
                                       f"{c.without.build}: {c.without.describe()} at {ref.label}", s, details)
    return Verdict(STILL_NEEDED, f"{kind} at {ref.label}: {s}: {c.why}", s, details)


def first_tier(scen: list[str], declared: list[str]) -> list[str]:
    """The scenarios compared first: P's own (its Reproducer: trailers) when the map adds others."""
    tier = [s for s in scen if s in set(declared)]
    return tier if 0 < len(tier) < len(scen) else []


def needed_by_declared(lab: Lab, p: Patch, scen: list[str], ref: Context, base: Context,
                       declared: list[str]) -> Verdict | None:
    """A patch its own scenarios show still needed at REF is judged on them alone (issue 36: the map
    adds every scenario that executes P's code — 60 of 113 for a patch in HAMi-core's init path —,
    and any one P changes for the better at REF decides `still-needed`); None: compare them all."""
    tier = first_tier(scen, declared)
    if not tier:
        return None
    cmp_ref, cmp_base, details = _comparisons(lab, p, tier, ref, base)
    return _needed_at_ref(cmp_ref, cmp_base, ref, base, details)


def judge_patch(lab: Lab, p: Patch, scen: list[str], ref: Context, base: Context, unreached: list[str],
                blame, declared: list[str] = ()) -> Verdict:
    """P's verdict at REF; `declared`: its own scenarios, compared first (needed_by_declared)."""
    if not scen:
        return Verdict(UNTESTABLE, "no scenario reaches it: no Reproducer: trailer names one and the coverage map "
                                   "shows none executing its code")
    early = needed_by_declared(lab, p, scen, ref, base, list(declared))
    if early is not None:
        return early
    cmp_ref, cmp_base, details = _comparisons(lab, p, scen, ref, base)
    needed_now = _needed_at_ref(cmp_ref, cmp_base, ref, base, details)
    if needed_now is not None:
        return needed_now
    diffs = [(kind, s, c) for kind, s, c in cmp_ref if c.kind == DIFFERENT]
    if diffs:
        kind, s, c = diffs[0]
        return Verdict(REGRESSION, f"{kind} at {ref.label}: {s} passes without it and fails with it: {c.why}", s, details)
    # a scenario not run on either build is no evidence either way: not counted, and said (issue 41)
    unsure = [(kind, s, c) for kind, s, c in cmp_ref if c.kind != IDENTICAL and not c.not_run]
    if unsure:
        kind, s, c = unsure[0]
        return Verdict(INCONCLUSIVE, f"{kind} at {ref.label}: {s}: {blame(c)}", s, details)
    ran = [s for s in scen if any(s2 == s and not c.not_run for _, s2, c in cmp_ref)]
    not_run = [s for s in scen if s not in ran]
    if not ran:
        _, s, c = cmp_ref[0]
        return Verdict(INCONCLUSIVE, f"at {ref.label} every scenario that reaches it was {NOT_RUN}: "
                                     f"{', '.join(not_run)} ({c.why})", s, details)
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
    skipped = f"; {NOT_RUN}, not counted: {', '.join(not_run)}" if not_run else ""
    # behaviour alone: at most a candidate (only a code signal makes it superseded, retirement.decide)
    return Verdict(RETIRE_CANDIDATE, f"identical with and without it at {ref.label} on {', '.join(ran)} ({len(ran)} "
                                     f"scenario(s), add-one and leave-one-out); at the base it made a difference on "
                                     f"{s} ({c.why}){skipped}", s, details)


def judge_conflict(lab: Lab, p: Patch, scen: list[str], ref: Context, base: Context, blame, cov=None) -> Verdict:
    """P does not apply at REF: needed if REF without it still fails a scenario P fixed at the base.

    Without it means both REF + Build-Only and REF + the rest of the series (P's leave-one-out at
    REF): a failure there only on the bare build is attributed, by the coverage map of REF + series,
    to the patches whose hunks the scenario executed — never to P, which REF + series lacks."""
    details = []
    fixed = []
    for kind, w, wi in _pairs(base, p.name):
        for s in scen:
            c = lab.compare(w, wi, s)
            details.append({"scenario": s, "at": "base", "pair": kind, **c.to_json()})
            if c.kind == DIFFERENT and c.with_.passes and s not in {x for x, _ in fixed}:
                fixed.append((s, c))
    broken, covered, passes, unmeasured = [], [], [], []
    for s, c in fixed:
        now = lab.on(ref.bare, s)
        ok, why = lab.controls_ok(ref.bare, s)
        details.append({"scenario": s, "at": "ref", "pair": "bare", "kind": now.state, "without": now.to_json()})
        if not ok or now.state not in (B_PASS, B_FAIL, B_MIXED):
            # REF without it was not measured on s (not built, invalid or skipped runs, a failing
            # control): nothing may be said of how REF behaves there
            unmeasured.append((s, why if not ok else f"{ref.bare.name}: {now.describe()}"))
            continue
        if now.passes:
            passes.append((s, now))
            continue
        rest = lab.on(ref.full, s)  # REF + the series without P (it does not apply there)
        ok_rest, _ = lab.controls_ok(ref.full, s)
        details.append({"scenario": s, "at": "ref", "pair": "series", "kind": rest.state, "without": rest.to_json()})
        if ok_rest and rest.passes:
            covered.append((s, now, _attribute(cov, s, [n for n in ref.full.patches if n != p.name])))
        else:
            broken.append((s, c, now))
    if broken:  # every scenario it fixed at the base that REF still fails without it, named
        # made worse: upstream + Build-Only at both commits, the same scenario (like with like)
        was = {s2: lab.on(base.bare, s2) for s2, _, _ in broken} if base.bare is not None and base is not ref else {}
        worse = [(s2, c2, n2) for s2, c2, n2 in broken if s2 in was and made_worse(was[s2], n2)]
        s, c, now = (worse or broken)[0]
        more = "".join(f"; {s2}: {n2.describe()}" for s2, _, n2 in broken[1:4]) + \
            (f"; +{len(broken) - 4} more" if len(broken) > 4 else "")
        if worse:  # a crash or hang where the base without it gave a wrong value: upstream made it worse
            more = "".join(f"; {s2}: {n2.describe()}" for s2, _, n2 in broken if s2 != s)[:400]
            return Verdict(WORSE_UPSTREAM, f"does not apply at {ref.label} (rebase it); upstream made {s} worse: "
                                           f"without it, {base.bare.name}: {was[s].describe()} at the base, "
                                           f"{ref.bare.name}: {now.describe()} at {ref.label}{more} — scenario(s) it "
                                           f"fixed at the base ({c.why})", s, details)
        return Verdict(STILL_NEEDED, f"does not apply at {ref.label} (rebase it); without it, on {ref.bare.name}, "
                                     f"{s}: {now.describe()}{more} — scenario(s) it fixed at the base ({c.why})",
                       s, details)
    if not fixed:
        return Verdict(CONFLICT, f"does not apply at {ref.label}, and no scenario distinguished it at the base", None,
                       details)
    if unmeasured:
        s, why = unmeasured[0]
        more = f" (+{len(unmeasured) - 1} more scenario(s) not measured there)" if len(unmeasured) > 1 else ""
        return Verdict(INCONCLUSIVE, f"does not apply at {ref.label}; not measured at {ref.label} without it: {s}: "
                                     f"{why}{more} — it fixed {s} at the base ({fixed[0][1].why})", s, details)
    # every scenario it fixed at the base was measured at REF without it: passing on REF + Build-Only,
    # or failing there but passing on REF + the rest of the series (blamed by coverage)
    why = "".join(f"; {s} fails on {ref.bare.name} ({now.describe()}) but passes on {ref.full.name} without it: "
                  f"{who}" for s, now, who in covered[:3])
    seen = "".join(f" ({ref.bare.name}: {now.describe()})" for _, now in passes[:1])
    return Verdict(CONFLICT, f"does not apply at {ref.label}; without it REF already behaves as it did with it at the "
                             f"base on {', '.join(s for s, _ in fixed)}{seen}{why} — rebase it to judge add-one and "
                             "leave-one-out", fixed[0][0], details)


def _attribute(cov, scenario: str, among: list[str]) -> str:
    """Who a behaviour of `scenario` is attributed to: the patches among `among` whose hunks its run
    executed in the coverage map (blame by coverage), or why the map cannot say."""
    if cov is None:
        return "no coverage map to attribute it"
    hit = cov.executed_by(scenario.split("@", 1)[0])
    if hit is None:
        return f"the coverage map has no complete run of {scenario} to attribute it"
    named = [n for n in among if n in hit]
    return (f"its runs executed the hunks of {', '.join(named)} (coverage map)" if named else
            f"its runs executed none of {', '.join(among) or 'the series'}' hunks (coverage map): upstream's code")


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
                  runs: int | None = None, *, workspace=None, jobs: int | None = None, coverage: bool = True,
                  reproducers: list[str] | None = None, sweep: bool = True) -> dict:
    """Every patch of `target` judged at upstream commit `ref` by the rule above.

    source: the upstream checkout (only read; builds happen in private clones under `cache`);
    driver: a DriverChoice or auto/real/fake; runs: fixed runs per build and scenario (>= 10, default 10);
    reproducers: judge with these reproducers only (default: every one of the target); a patch whose
    Reproducer: trailers name only others is `not-judged`; sweep: run the judged scenarios' declared
    parameter points on each candidate's pairs at REF.
    Raises UsageError (bad input), EnvironmentMissing (ref absent, no compiler or gcov)."""
    source = Path(source)
    git.open_repo(source)
    n = runs or MIN_RUNS
    if n < MIN_RUNS:
        raise UsageError(f"--runs {n}: retirement compares fixed runs, at least {MIN_RUNS} per build and scenario")
    commit = git.resolve_commit(source, ref, what="--retire", upstream=target.upstream_urls)
    base = git.resolve_commit(source, target.base, what=f"base commit of {target.name}", upstream=target.upstream_urls)
    cache = Path(cache)
    every = target_reproducers(target, workspace)
    repros = {r.name: r for r in select_reproducers(every, reproducers, target)}
    decl, problems, unselected = declared(target, repros, {r.name for r in every})
    drv = resolve_driver(driver, cache)
    lab = Lab(target, source, cache, drv, list(repros.values()), n, jobs)
    judge = Judge(target, lab)
    report.progress(f"retire check of {target.name} at {ref} ({commit[:12]}), base {base[:12]}: "
                    f"{len(repros)} reproducer(s), {n} runs per build and scenario, driver {drv.chosen}")
    code = retirement.code_signals(target, source, base, commit, cache)
    judged_patches = [p for p in target.patches if not p.build_only]
    if repros and judged_patches:
        # REF as it builds here (+ Build-Only, carried where it moved) comes first: when it cannot be
        # built, nothing at REF is measured and no verdict may say how REF behaves
        bare = judge.bare(commit)
        if bare.variant is None:
            return not_built_doc(target, ref, commit, base, lab, n, judge, bare, code)
    if not repros or not judged_patches:
        return _doc(target, ref, commit, base, lab, n, [
            _row(p, UNTESTABLE, "Build-Only: part of every build, so behaviour cannot judge it (its build probes can)"
                 if p.build_only else "no reproducer of this target exists to judge it", True, [], [], code[p.name])
            for p in target.patches], [], None, {})
    # what REF + series holds, and which scenarios reach each patch, before any pair is built: a
    # patch no selected scenario reaches needs no builds
    applicable, conflicting = judge.applicable(commit, judge.order)
    clock = _Clock()
    cov = cov_base = None
    if coverage:
        cov = coverage_map(lab, commit, applicable)
        if conflicting and commit != base:
            cov_base = coverage_map(lab, base, judge.order)
    scen_of: dict[str, list[str]] = {}
    for p in judged_patches:
        m = cov if p.name not in conflicting else (cov_base or cov)
        reach = [s for s in (m.reaching(p.name) if m else []) if not _is_control(repros, s)]
        scen_of[p.name] = list(dict.fromkeys(decl.get(p.name, []) + reach))
    clock.lap("coverage_s")
    wanted = {name for name, sc in scen_of.items() if sc and name not in problems}
    # the builds both contexts need, made two at a time first (the contexts then find them made)
    lab.planning = {}
    judge.context(commit, wanted)
    if commit != base:
        judge.context(base, wanted)
    planned, lab.planning = lab.planning, None
    lab.prebuild(planned, BUILD_WORKERS)
    ref_cx = judge.context(commit, wanted)
    base_cx = ref_cx if commit == base else judge.context(base, wanted)
    clock.lap("builds_s")
    # N runs of what each build is compared on: first each applying patch's own scenarios (any one it
    # changes for the better at REF decides still-needed), then all of those that did not decide
    applying = [p for p in judged_patches if p.name in wanted and p.name not in ref_cx.conflicts]
    first = {p.name: first_tier(scen_of[p.name], decl.get(p.name, [])) for p in applying}
    lab.measure_plan(measurement_plan(ref_cx, base_cx, {n: first.get(n) or sc for n, sc in scen_of.items()}, repros))
    rest = {p.name: scen_of[p.name] for p in applying if first[p.name] and needed_by_declared(
        lab, p, scen_of[p.name], ref_cx, base_cx, decl.get(p.name, [])) is None}
    if rest:
        lab.measure_plan(measurement_plan(ref_cx, base_cx, rest, {}))
    clock.lap("runs_s")
    blame = make_blame(lab, base, commit)
    rows, verdicts = [], {}
    for p in target.patches:
        applies = p.name not in ref_cx.conflicts
        if p.build_only:
            carried = (ref_cx.bare.variant.provenance.get("carried") or {}).get(p.name) if ref_cx.bare.variant else None
            applies = p.name not in judge.moved(commit)
            rows.append(_row(p, UNTESTABLE, "Build-Only: part of every build, so behaviour cannot judge it (its build "
                             "probes can)" + (f"; at {ref_cx.label}: {carried}" if carried else ""), applies, [], [],
                             code[p.name]))
            continue
        scen = scen_of[p.name]
        if p.name in problems:
            v = Verdict(INCONCLUSIVE, problems[p.name])
        elif not applies:
            v = judge_conflict(lab, p, scen, ref_cx, base_cx, blame, cov)
        else:
            unreached = cov.unreached(p.name) if cov else []
            v = judge_patch(lab, p, scen, ref_cx, base_cx, unreached, blame, decl.get(p.name, []))
            if p.name in ref_cx.notes:
                v.reason += f" ({ref_cx.notes[p.name]})"
        if len(repros) < len(every) and v.status in (RETIRE_CANDIDATE, UNTESTABLE, CONFLICT):
            # a run on some reproducers finds what is needed; what may go, or cannot be tested, it cannot say
            # (the others were not run, and the coverage map does not know what they reach)
            names = unselected.get(p.name) or sorted({r.name for r in every} - set(repros))
            v = Verdict(NOT_JUDGED, f"judged on {', '.join(repros)} only (--reproducer), not on "
                                    f"{', '.join(names[:6])}{' …' if len(names) > 6 else ''}"
                                    + (f"; on those: {v.status}: {v.reason}" if scen else
                                       "; no selected scenario reaches it"), v.scenario, v.details)
        verdicts[p.name] = v
        rows.append(_row(p, v.status, v.reason, applies, scen, v.details, code[p.name], v.scenario,
                         cov.unreached(p.name) if cov and applies else []))
    if sweep:
        _sweep(lab, ref_cx, rows, repros)
    _joint(lab, judge, ref_cx, rows, repros, cov)
    clock.lap("judging_s")
    for r in rows:
        _decide(r)
    if commit != base:
        _name_upstream_commits(target, source, base, commit, cache, drv, n, rows, repros)
    clock.lap("bisect_s")
    for r in rows:
        if r["status"] == RETIRE_CANDIDATE:
            r["review"] = review.material(source, commit, _patch(target, r["name"]), r["scenarios"], r.get("sweep"))
    still = []
    for rname, r in repros.items():
        for s in r.checked:
            ob = lab.on(ref_cx.full, f"{rname}:{s.name}")
            if ob.state in (B_FAIL, B_MIXED):
                still.append({"scenario": f"{rname}:{s.name}", "behaviour": ob.describe(), "build": ref_cx.full.name,
                              "first_error": ob.first_error})
    doc = _doc(target, ref, commit, base, lab, n, rows, still, cov, {"ref": ref_cx.notes},
               bare={"base": base_cx.bare, "ref": ref_cx.bare})
    clock.lap("report_s")
    doc["phases"] = clock.laps  # where the seconds went (bench/retire.py prints them)
    return doc


class _Clock:
    """Seconds per phase of a retire run (coverage maps, builds, planned runs, judging, bisect)."""

    def __init__(self):
        self.t, self.laps = time.monotonic(), {}

    def lap(self, name: str) -> None:
        now = time.monotonic()
        self.laps[name] = round(now - self.t, 1)
        self.t = now


NOT_MEASURED_REF = "not measured: REF does not build: "
BUILD_WORKERS = 2  # builds made at once: each is mostly a single-threaded configure and link


def not_built_doc(target, ref, commit, base, lab, n, judge, bare, code) -> dict:
    """The report when REF (+ Build-Only, carried where it moved) cannot be built here: every
    patch inconclusive with exactly why, nothing behavioural (nothing at REF ran)."""
    bad = set(judge.conflicts(commit, judge.order)) | set(judge.moved(commit))
    why = NOT_MEASURED_REF + bare.error
    rows = [_row(p, INCONCLUSIVE, why, p.name not in bad, [], [], code[p.name]) for p in target.patches]
    report.progress(f"{bare.name} does not build: nothing at {commit[:12]} was measured")
    return _doc(target, ref, commit, base, lab, n, rows, [], None, {"ref": {"not_built": bare.error}})


def _decide(row: dict) -> None:
    """The one judgement (engine.retirement): superseded needs behaviour *and* a code signal."""
    status = retirement.decide(row["status"], row.get("code_signal"))
    sig = row.get("code_signal")
    if status == SUPERSEDED:
        row["reason"] = f"code: {sig['detail']} ({sig['signal']}); behaviour: {row['reason']}"
    elif status == RETIRE_CANDIDATE:
        row["reason"] = ("behaviour alone — no code signal (no patch-id, reverse-apply, content or 3-way match at REF): "
                         "needs review of its hunks against REF's code; " + row["reason"])
    elif sig and status in (STILL_NEEDED, WORSE_UPSTREAM, NO_LONGER_EFFECTIVE, REGRESSION):
        # measured behaviour decides against code (engine/absorption.decide): the patch stays, said in its word
        at = f" {sig['commit'][:12]}" if sig.get("commit") else ""
        row["reason"] = f"kept: upstream has the lines ({sig['signal']}{at}) but behaviour at REF still needs it: " \
                        f"{row['reason']}"
    row.update(status=status, needed=NEEDED[status])


def _is_control(repros, key: str) -> bool:
    r = repros.get(key.split(":", 1)[0])
    return bool(r) and any(s.control and s.name == key.split(":", 1)[1] for s in r.scenarios)


def _joint(lab: Lab, judge: Judge, cx: Context, rows: list[dict], repros: dict, cov=None) -> None:
    """(e): REF + (series − R) must behave like REF + series on every scenario; greedily keep R so.

    When removing a set changes a scenario, the failure is attributed by coverage: the candidates
    whose hunks that scenario executed (on REF + series) are the last tried, so they are the ones
    kept in the series, and each kept one's reason says what the map showed."""
    cands = [r["name"] for r in rows if r["status"] == RETIRE_CANDIDATE]
    if not cands:
        return
    scen = [f"{n}:{s.name}" for n, r in repros.items() for s in r.checked]
    applicable = [n for n in judge.order if n not in cx.conflicts]

    not_run: set[str] = set()  # scenarios no build of a pair ran: no evidence either way, never counted

    def same(removed: list[str]) -> Comparison | None:  # `removed` is never empty
        b = lab.build(f"{cx.label}+series-{_short(removed)}", cx.commit, [n for n in applicable if n not in removed])
        lab.measure_plan([(b, set(scen)), (cx.full, set(scen))])  # one batch, not one per scenario
        for s in scen:
            c = lab.compare(b, cx.full, s)
            if c.not_run:
                not_run.add(s)
            elif c.kind != IDENTICAL:
                return c
        return None

    bad = same(cands)
    keep: list[str] = []
    rejected: dict[str, tuple[list[str], Comparison]] = {}  # candidate -> (removed with, what changed)
    if bad is None:
        keep = cands
    else:
        hit = (cov.executed_by(bad.scenario) if cov is not None else None) or []
        # blame by coverage: the patches the failing scenario's code path ran are tried last
        for c in [c for c in cands if c not in hit] + [c for c in cands if c in hit]:
            changed = same(keep + [c])
            if changed is None:
                keep.append(c)
            else:
                rejected[c] = (list(keep), changed)
    for r in rows:
        if r["name"] in rejected:
            with_, c = rejected[r["name"]]
            r.update(status=STILL_NEEDED, needed=NEEDED[STILL_NEEDED], scenario=c.scenario,
                     reason=f"joint check at {cx.label}: removing it with {', '.join(with_) or 'nothing else'} changes "
                            f"{c.scenario} ({c.why}) although alone it changes nothing there; "
                            f"{_attribute(cov, c.scenario, [r['name']])}")
        elif r["name"] in keep:
            ran = len(scen) - len(not_run)
            r["reason"] += f"; joint check: {cx.label}+series without {', '.join(keep)} behaves as the whole series " \
                           f"on all {ran} scenario(s) that ran" + \
                           (f" ({len(not_run)} {NOT_RUN}, not counted: {', '.join(sorted(not_run)[:4])}"
                            f"{' …' if len(not_run) > 4 else ''})" if not_run else "")


def _sweep(lab: Lab, cx: Context, rows: list[dict], repros: dict) -> None:
    """(s): each candidate's judged scenarios at their declared sweep points (one parameter at a
    time, the others at their defaults), on its pairs at REF. A point where the patch makes the
    difference keeps it still-needed (upstream fixed part of the inputs); a point that regresses or
    cannot be judged is named; points that behave alike are evidence for the reviewer, never a code
    signal."""
    for r in rows:
        if r["status"] != RETIRE_CANDIDATE:
            continue
        pairs = _pairs(cx, r["name"])
        out = []
        for key in r["judged"]:
            rname, sname = key.split(":", 1)
            s = repros[rname].scenario(sname)
            for pname, param in s.params.items():
                for point in param.points:
                    if point == param.default:
                        continue  # that is the scenario as judged already
                    at = lab.measure_point([b for _, w, wi in pairs for b in (w, wi)], key, pname, point)
                    for kind, w, wi in pairs:
                        c = lab.compare(w, wi, at)
                        out.append({"scenario": at, "at": "ref", "pair": kind, **c.to_json()})
        r["sweep"] = out
        helps = [d for d in out if d["kind"] == DIFFERENT and not (d["with"]["state"] == B_FAIL and
                                                                  d["without"]["state"] == B_PASS)]
        regress = [d for d in out if d["kind"] == DIFFERENT and d not in helps]
        unsure = [d for d in out if d["kind"] == C_INCONCLUSIVE]
        if helps:
            d = helps[0]
            r.update(status=STILL_NEEDED, needed=NEEDED[STILL_NEEDED], scenario=d["scenario"],
                     reason=f"input sweep, {d['pair']} at {cx.label}: {d['scenario']}: {d['why']} — upstream behaves "
                            f"alike only on part of the inputs ({r['reason']})")
        elif regress:
            d = regress[0]
            r.update(status=REGRESSION, needed=NEEDED[REGRESSION], scenario=d["scenario"],
                     reason=f"input sweep, {d['pair']} at {cx.label}: {d['scenario']} passes without it and fails "
                            f"with it: {d['why']}")
        elif unsure:
            r["reason"] += (f"; input sweep: {len(out) - len(unsure)} of {len(out)} comparison(s) identical, "
                            f"{unsure[0]['scenario']} not judged ({unsure[0]['why'][:120]})")
        elif out:
            r["reason"] += f"; input sweep: identical at {len({d['scenario'] for d in out})} more point(s)"


def _name_upstream_commits(target, source, base, commit, cache, drv, n, rows, repros) -> None:
    """For each superseded patch and candidate: bisect base..REF on the scenario it made the
    difference on, on unpatched upstream, to name the commit where the behaviour changed — for a
    superseded patch the commit of its Applied-Upstream: trailer (bisect --record checks the code
    signal there again), for a candidate what its reviewer reads first."""
    for r in rows:
        if r["status"] not in (SUPERSEDED, RETIRE_CANDIDATE) or not r.get("scenario"):
            continue
        rname, sname = r["scenario"].split(":", 1)
        spec = f"{base}..{commit}"
        try:
            doc = bisect_behaviour(target, source, spec, repros[rname], cache, drv, n, sname,
                                   patch=_patch(target, r["name"]))
        except UsageError as exc:  # REF not on the base's first-parent line, ...
            r["applied_upstream"] = {"commit": None, "why": str(exc)}
            continue
        if doc["result"] == FOUND and doc["direction"] == "fixed":
            c = doc["first"]["commit"]
            # the probes are the runs the sentence below stands on (retire_report.check_reasons)
            r["applied_upstream"] = {
                "commit": c, "subject": doc["first"]["subject"], "signal": f"behaviour (bisect {r['scenario']} over "
                f"{base[:12]}..{commit[:12]})", "probes": doc["probes"]}
            if r["status"] == SUPERSEDED:
                r["applied_upstream"]["record"] = (f"lucepatch bisect {base[:12]}..{commit[:12]} --reproducer {rname} "
                                                   f"--scenario {sname} --record {r['name']}")
                r["reason"] += f"; upstream fixed it in {c[:12]} ({doc['first']['subject'][:60]})"
            else:
                r["reason"] += f"; the behaviour changed upstream in {c[:12]} ({doc['first']['subject'][:60]}): read it"
        else:
            r["applied_upstream"] = {"commit": None, "why": doc["reason"], "probes": doc["probes"]}


# ---- the hooks: status --behaviour, rebase sessions' `needed` ---------------------------------


def behaviour_hook(cache: Path, driver: DriverChoice | str = "auto", runs: int | None = None, workspace=None):
    """For lucepatch.engine.upstreamed.register_behaviour_hook: True when the rule calls the patch
    superseded at `ref` (behaviour and a code signal), False when it is still needed, None otherwise
    (a retire-candidate too). Builds and runs: opt-in."""
    memo: dict[tuple, dict] = {}

    def row_of(target, patch, source, ref):
        key = (target.name, str(source), ref)
        if key not in memo:
            memo[key] = retire_report(target, source, ref, cache, driver, runs, workspace=workspace)
        return memo[key], next((p for p in memo[key]["patches"] if p["name"] == patch.name), None)

    def behaviour_fixed_upstream(target, patch, source, ref):
        if target is None or source is None:
            return None
        doc, row = row_of(target, patch, source, ref)
        if row is None:
            return None
        return True if _upstream_has(doc, row) else False if row["needed"] == "still-needed" else None

    def code_signal(patch, ref):
        for doc in memo.values():
            row = next((p for p in doc["patches"] if p["name"] == patch.name), None)
            if doc["upstream"]["commit"] == ref and row is not None and _upstream_has(doc, row):
                return row["code_signal"]
        return None

    behaviour_fixed_upstream.reports = memo
    behaviour_fixed_upstream.code_signal = code_signal
    return behaviour_fixed_upstream


def judge(target: Target, source: Path, ref: str, patches, *, cache: Path | None = None,
          reproducers: Path | None = None) -> dict:
    """lucepatch.engine.needed's judge: the rule's answer from the report `verify --retire REF` saved
    for this target's content, commit and (unchanged) reproducers; without one, every patch
    not-judged with the command that judges it (a rebase session never builds and runs by itself).
    A row the invariant does not accept as superseded (a report made before it) reads as a
    retire-candidate."""
    cache = Path(cache or resolve_cache(None))
    commit = git.try_resolve(Path(source), ref) or ref
    doc = load_saved(target, commit, cache, reproducers=reproducers)
    if doc is None:
        why = f"not judged yet: lucepatch verify --retire {ref} --target {target.name} judges it (builds and runs)"
        return {p.name: needed.Judgement(needed.NOT_JUDGED, why) for p in patches}
    return judgements(doc)


def judgements(doc: dict) -> dict:
    """{patch name: engine.needed.Judgement} of a saved retire report: what `judge` answers a rebase
    session and what `status`/`check` hand the one judge (engine/absorption.decide) at REF."""
    kind = doc.get("driver", {}).get("kind")
    drv = "fake" if kind == "fake" else "real" if kind == "real" else None
    out = {}
    for row in doc["patches"]:
        verdict, reason = row["needed"], f"{row['status']}: {row['reason']}"
        if verdict == needed.SUPERSEDED and not _upstream_has(doc, row):
            verdict = needed.RETIRE_CANDIDATE
            reason = "behaviour alone (a report without the code-signal rule): needs review; " + reason
        out[row["name"]] = needed.Judgement(verdict, reason[:400], row.get("scenario"), drv, row.get("code_signal"),
                                            doc.get("invariant"), _measured(row))
    return out


def _measured(row: dict) -> str:
    """What the deciding scenario did at REF without the patch (and with it), runs counted, from the
    row's comparisons: what a rebase prints when it keeps a patch code alone would drop."""
    for d in row.get("scenarios") or []:
        if d.get("scenario") == row.get("scenario") and d.get("at") == "ref" and d.get("without"):
            w, wi = d["without"], d.get("with")
            return f"{w.get('summary')} on {w.get('build')}" + (f"; {wi.get('summary')} on {wi.get('build')}"
                                                               if wi else "")
    return ""


def coverage_map_at(target, source, ref: str, cache: Path, driver="auto", *, workspace=None,
                    reproducers: list[str] | None = None):
    """`verify --coverage-map`: (the map of the series applied at `ref`, the patches left out
    because they do not apply there); reproducers: map these only (default every reproducer of the
    target). Here, not in coverage.py: it needs the Judge above."""
    commit = git.resolve_commit(Path(source), ref, what=f"upstream commit of {target.name}",
                                upstream=target.upstream_urls)
    repros = select_reproducers(target_reproducers(target, workspace), reproducers, target)
    lab = Lab(target, source, cache, driver, repros, 1)
    judge = Judge(target, lab)
    keep, bad = judge.applicable(commit, judge.order)
    return coverage_map(lab, commit, keep), bad


__all__ = ["retire_report", "retire_exit_code", "format_retire_table", "review_lines", "report_hook", "content_key",
           "behaviour_hook", "judge", "judgements", "save_report", "load_saved", "reproducers_dir", "target_reproducers", "measure_behaviour", "Behaviour", "RETIRE_SCHEMA", "STATUSES", "SUPERSEDED", "RETIRE_CANDIDATE",
           "STILL_NEEDED", "UNTESTABLE", "INCONCLUSIVE", "CONFLICT", "NO_LONGER_EFFECTIVE", "REGRESSION", "NOT_JUDGED",
           "Scenario", "list_reproducers"]
