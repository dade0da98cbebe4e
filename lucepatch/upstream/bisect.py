"""Bisect upstream by behaviour: the first commit of A..B where a reproducer's verdict flips.

The predicate at a commit C is the scenario(s) on the *unpatched* upstream at C (+ the Build-Only
patches, exactly `verify`'s baseline), built in a private clone under the cache; the user's
checkout is only read (rev-list, merge-base). It is `git bisect run` done here:

  good/bad      every run of the scenario(s) passes / some run fails, controls passing
  skip          the build fails, a control fails, or a run cannot prove what it loaded
                (like `git bisect skip`: the search steps around it)

  flaky         some runs of one probe pass and some fail: not a clean state, stepped around like
                a skip, and named (an end that is flaky makes the result inconclusive)

The walk is over `git rev-list --first-parent A..B`, so a flip inside a merged branch is named by
its merge commit. A and B are measured first. **A fix, once made, is not assumed to stay made**
(issue 41): upstream may take a fix, revert it and land another later. After the binary search
pins a flip, the commits that touch the files of the flips found (and of the patch `--record`
names) are probed too (at most MAX_SUSPECTS), and every pair of neighbours that disagree is
searched down to adjacent commits: the result lists **every transition found** (fixed, broke,
fixed ...) and how many commits were probed. The answer (`first`) is the *last* transition — the
one that still holds at B —: "fixed" when A fails and B passes, "broke" when A passes and B
fails; the same state at both ends is "no flip", with any flip-and-back found in between listed.
When skipped commits hide where a flip is, the result is "inconclusive" with the candidate commits.
With `ref` (REF, a descendant of B; default B) the state is checked at REF too: if it is broken
again there, the commit that broke it again is named and `--record` refuses.

`record_applied_upstream` writes the finding into a patch's trailers (`Applied-Upstream: <commit>`
plus `Applied-Upstream-Signal: behaviour ... + code <signal>`), leaving its diff, hence its patch id,
unchanged — only when the one judge (lucepatch.engine.absorption) says upstream has it: the found
commit's tree *and* REF's tree hold the patch's code, the state holds at both ends and at REF, and
no measured judgement at REF (the retire report) still needs the patch. A behaviour flip alone
proves that the bisected scenario behaves differently there, not that upstream fixed what the patch
fixes; it is refused with what to review.

Long: the search (Search, the probes, the state at REF) and the record read one document and one
set of probes — the transitions the record refuses on are the ones the search found — so they stay
one module; the probe's build and runs are verify's (service.build_variants, behaviour.measure_behaviour).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

from lucepatch import git, report, trailers
from lucepatch.engine import absorption, layout, needed, retirement
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

GOOD_PASS, BAD_FAIL, SKIP, FLAKY = "pass", "fail", "skip", "flaky"
CLEAN = (GOOD_PASS, BAD_FAIL)
MAX_SUSPECTS = 16  # probes spent checking that a flip stays made (commits touching the flips' files)
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
                                              "properties": {"state": {"enum": [GOOD_PASS, BAD_FAIL, SKIP, FLAKY]}}}},
        "transitions": {"type": "array", "items": {
            "type": "object", "required": ["commit", "subject", "direction", "index"],
            "properties": {"commit": {"type": "string", "pattern": "^[0-9a-f]{40}$"},
                           "direction": {"enum": ["fixed", "broke"]}}}},
        "at_ref": {"type": ["object", "null"]},
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
    flaky = [s for s, x in per.items() if x.behaviour == B_FAIL and 0 < x.tally["failures"] < x.tally["runs"]]
    if flaky:
        x = per[flaky[0]]
        return Probe(commit, index, FLAKY, f"{', '.join(flaky)} flaky: fails {x.tally['failures']}/{x.tally['runs']}"
                     + (f" ({x.why})" if x.why else ""), doc)
    failing = [s for s, x in per.items() if x.behaviour == B_FAIL]
    if failing:
        x = per[failing[0]]
        return Probe(commit, index, BAD_FAIL, f"{', '.join(failing)} fails {x.tally['failures']}/{x.tally['runs']}"
                     + (f": {x.why}" if x.why else ""), doc)
    return Probe(commit, index, GOOD_PASS, f"passes {runs}/{runs}", doc)


@dataclass
class Search:
    """Where a behaviour flips over positions 0..n-1 (0 = A, n-1 = B), by probing as few as it can
    without assuming that a flip, once made, stays made. `at(i)` probes position i (cached by the
    caller); `suspects(transitions)` names the positions worth probing to check that the state holds
    (commits touching the files of the flips found, or of the patch); at most `limit` of them."""
    n: int
    at: object  # Callable[[int], Probe]
    suspects: object  # Callable[[list[int]], list[int]]
    limit: int = MAX_SUSPECTS
    known: dict = field(default_factory=dict)  # position -> clean state
    tried: set = field(default_factory=set)  # every probed position (skips and flaky ones too)
    unprobed: int = 0  # suspects left out by `limit`

    def probe(self, i: int) -> str:
        self.tried.add(i)
        state = self.at(i).state
        if state in CLEAN:
            self.known[i] = state
        return state

    def pairs(self) -> list[tuple[int, int]]:
        ks = sorted(self.known)
        return [(lo, hi) for lo, hi in zip(ks, ks[1:]) if self.known[lo] != self.known[hi]]

    def refine(self) -> None:
        """Search every pair of disagreeing neighbours down to adjacent positions (skips stepped
        around; a pair whose inner positions are all unclean stays a span of candidates)."""
        while True:
            for lo, hi in self.pairs():
                inner = [i for i in range(lo + 1, hi) if i not in self.tried]
                if inner:
                    mid = (lo + hi) // 2
                    self.probe(min(inner, key=lambda k: (abs(k - mid), k)))
                    break
            else:
                return

    def run(self) -> list[tuple[int, int]]:
        """The disagreeing neighbours after the search: adjacent (a transition) or spans of
        positions that could not be judged."""
        self.refine()
        budget, seen = self.limit, set()
        while True:
            new = [i for i in self.suspects([hi for _, hi in self.pairs()]) if i not in self.tried and i not in seen]
            if not new:
                break
            seen.update(new)
            take, left = new[:budget], new[budget:]
            self.unprobed += len(left)
            budget -= len(take)
            for i in take:
                self.probe(i)
            self.refine()
            if budget <= 0:
                break
        return self.pairs()


def _touching(source: Path, seq: list[str], files: set[str]) -> list[int]:
    """Positions in `seq` (after A) whose first-parent commit changes one of `files`."""
    if not files or len(seq) < 2:
        return []
    hits = set(git.run(source, "rev-list", "--first-parent", f"{seq[0]}..{seq[-1]}", "--", *sorted(files),
                       env={"GIT_OPTIONAL_LOCKS": "0"}).stdout.split())
    return [i for i, c in enumerate(seq) if i and c in hits]


def _files_of(source: Path, commit: str) -> set[str]:
    return set(git.run(source, "diff-tree", "--name-only", "-r", f"{commit}^1", commit,  # a merge: its first parent
                       env={"GIT_OPTIONAL_LOCKS": "0"}).stdout.split())


def bisect_behaviour(target: Target, source: Path | str, range_spec: str, repro: Reproducer, cache: Path,
                     driver: DriverChoice | str = "auto", runs: int | None = None,
                     scenario: str | None = None, *, ref: str | None = None, patch: Patch | None = None) -> dict:
    """Find where the scenario's behaviour on unpatched upstream (+ Build-Only patches) flips over
    A..B (first parent): every transition found, the last one as `first`, and the state at REF
    (`ref`, a descendant of B; default B). `patch`: its files are probed too (the commits that
    could have taken and reverted it). Returns the JSON document (schema BISECT_SCHEMA)."""
    source = Path(source)
    git.open_repo(source)
    if repro.target != target.name:
        raise UsageError(f"reproducer {repro.name} targets {repro.target}, not {target.name}")
    scenarios = pick_scenarios(repro, scenario)
    old, new, commits = parse_range(source, range_spec)
    ref_sha = git.resolve_commit(source, ref, what="REF") if ref else new
    if ref_sha != new and git.run(source, "merge-base", "--is-ancestor", new, ref_sha, check=False).status != 0:
        raise UsageError(f"REF {ref} does not descend from the end of the range {new[:12]}; bisect up to REF instead")
    seq = [old] + commits
    cache = Path(cache)
    drv = resolve_driver(driver, cache)
    n = runs or repro.default_runs
    records: list = []
    probes: dict[str, Probe] = {}

    def probe_commit(c: str, i: int) -> Probe:
        if c not in probes:
            report.progress(f"bisect: probing {c[:12]} ({i}/{len(seq) - 1}) {_subject(source, c)[:60]}")
            probes[c] = _probe(target, source, repro, scenarios, c, i, n, drv, cache, records)
            report.progress(f"bisect: {c[:12]} -> {probes[c].state}: {probes[c].why}")
        return probes[c]

    patch_files = set(patch.files) if patch is not None else set()

    def suspects(trans: list[int]) -> list[int]:
        files = set(patch_files)
        for i in trans:
            files |= _files_of(source, seq[i])
        return _touching(source, seq, files)

    report.progress(f"bisect {repro.name}:{'+'.join(scenarios)} over {range_spec} "
                    f"({len(commits)} first-parent commit(s)), {n} run(s) per probe, driver {drv.chosen}")
    a, b = probe_commit(seq[0], 0), probe_commit(seq[-1], len(seq) - 1)
    result, direction, first, candidates, reason, transitions = INCONCLUSIVE, None, None, [], "", []
    search = Search(len(seq), lambda i: probe_commit(seq[i], i), suspects)
    if a.state not in CLEAN or b.state not in CLEAN:
        end = a if a.state not in CLEAN else b
        reason = f"cannot judge the range end {end.commit[:12]}: {end.why}"
    else:
        search.tried |= {0, len(seq) - 1}
        search.known.update({0: a.state, len(seq) - 1: b.state})
        pairs = search.run()
        spans = [(lo, hi) for lo, hi in pairs if hi - lo > 1]  # every commit between them skipped or flaky
        transitions = [{"commit": seq[hi], "subject": _subject(source, seq[hi]), "index": hi,
                        "direction": "fixed" if search.known[hi] == GOOD_PASS else "broke"}
                       for lo, hi in pairs if (lo, hi) not in spans]
        walk = "; ".join(f"{t['direction']} at {t['commit'][:12]}" for t in transitions)
        shaky = [pr.commit[:12] for pr in probes.values() if pr.state == FLAKY]
        probed = f"{len(search.tried)} of {len(seq)} commits probed" + (
            f"; flaky at {', '.join(shaky)} (stepped around)" if shaky else "") + (
            f"; {search.unprobed} more commit(s) touching the same files not probed (limit {MAX_SUSPECTS})"
            if search.unprobed else "")
        if spans:
            lo, hi = spans[-1]
            candidates = seq[lo + 1: hi + 1]
            direction = "fixed" if search.known[hi] == GOOD_PASS else "broke"
            reason = (f"a flip ({direction}) is in one of {len(candidates)} commits that could not be judged "
                      f"(skipped or flaky){'; found: ' + walk if walk else ''} ({probed})")
        elif a.state == b.state:
            result = NO_FLIP
            reason = (f"no flip: the behaviour {'passes' if a.state == GOOD_PASS else 'fails'} at both "
                      f"{old[:12]} and {new[:12]}") + (
                f", but it flipped in between and back: {walk}" if transitions else "") + \
                f" ({probed})" + _scenario_hint(repro, scenarios, a, b)
        else:
            result, last = FOUND, transitions[-1]
            direction = last["direction"]
            first = {"commit": last["commit"], "subject": last["subject"]}
            reason = (f"{last['commit'][:12]} is the {'last' if len(transitions) > 1 else 'first'} commit where "
                      f"{repro.name}:{'+'.join(scenarios)} {'passes' if direction == 'fixed' else 'fails'} "
                      f"({direction})")
            if len(transitions) > 1:
                reason += f"; not monotone, {len(transitions)} transitions: {walk}"
            reason += f" ({probed})"
    at_ref = None
    if result == FOUND and ref_sha != new:
        at_ref = _state_at_ref(source, new, ref_sha, b, probe_commit, len(seq))
        if at_ref["state"] != b.state:
            again = "broken" if at_ref["state"] == BAD_FAIL else "fixed"  # a revert of a break fixes it again
            reason += f"; at REF {ref_sha[:12]} it {'passes' if at_ref['state'] == GOOD_PASS else 'fails'} again" + (
                f" ({again} again by {at_ref['broken_again_by']['commit'][:12]} "
                f"{at_ref['broken_again_by']['subject'][:60]})" if at_ref.get("broken_again_by") else "")
    elif ref_sha == new:
        at_ref = {"commit": new, "state": b.state}
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
        "transitions": transitions,
        "candidates": candidates,
        "reason": reason,
        "at_ref": at_ref,
        "probes": [p.to_json() for p in sorted(probes.values(), key=lambda p: p.index)],
        "recorded": None,
    }


def _state_at_ref(source: Path, new: str, ref: str, b: Probe, probe_commit, offset: int) -> dict:
    """The state at REF beyond the range; when it differs from B's, the first commit of B..REF
    (first parent) where it does (a binary search: the commit that broke it again)."""
    line = git.run(source, "rev-list", "--first-parent", "--reverse", f"{new}..{ref}",
                   env={"GIT_OPTIONAL_LOCKS": "0"}).stdout.split()
    at = probe_commit(ref, offset + len(line) - 1)
    out = {"commit": ref, "state": at.state, "why": at.why}
    if at.state == b.state or at.state not in CLEAN or not line or line[-1] != ref:
        return out
    lo, hi = -1, len(line) - 1  # state(lo) == b's (lo = -1 is B itself), state(hi) == REF's
    while hi - lo > 1:
        mid = (lo + hi) // 2
        st = probe_commit(line[mid], offset + mid).state
        if st == b.state:
            lo = mid
        elif st == at.state:
            hi = mid
        else:  # unclean: give up narrowing, name the span
            break
    if hi - lo == 1:
        out["broken_again_by"] = {"commit": line[hi], "subject": _subject(source, line[hi])}
    return out


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


def record_applied_upstream(patch: Patch, doc: dict, *, target: Target, source: Path, cache: Path,
                            judge=None) -> dict:
    """Write `Applied-Upstream: <commit>` and `Applied-Upstream-Signal: behaviour (...) + code
    <signal>` into the patch file, only when the one judge (engine.absorption) says upstream has it:
    the state found holds at REF (`doc["at_ref"]`), the found commit's tree and REF's tree both hold
    the patch's code, and no measured judgement at REF (the retire report, engine.needed) still
    needs it (`judge`: engine.needed's judge, the retire report's answer; None: nothing measured but
    this bisect, and the trailer says so). Else CheckFailed, nothing written. The patch id must not
    change (else the file is restored and UsageError raised)."""
    nothing = f"nothing recorded in {patch.name}"
    if doc["result"] != FOUND or doc["direction"] != "fixed":
        raise CheckFailed(f"{nothing}: the bisect found no commit that fixed the behaviour ({doc.get('reason', '')})")
    at_ref = doc.get("at_ref") or {}
    if at_ref.get("state") != GOOD_PASS:
        again = at_ref.get("broken_again_by")
        raise CheckFailed(f"{nothing}: {'+'.join(doc['scenarios'])} is broken again at REF {at_ref.get('commit', '?')[:12]}"
                          + (f", by {again['commit'][:12]} ({again['subject'][:60]})" if again else "")
                          + f": upstream does not hold the fix there ({doc.get('reason') or 'no state at REF recorded'})")
    commit, ref = doc["first"]["commit"], at_ref["commit"]
    found = _code_at(target, source, patch, commit, cache)
    if not found.upstream:
        raise CheckFailed(
            f"{nothing}: {'+'.join(doc['scenarios'])} behaves fixed from {commit[:12]} on, but {commit[:12]} has none "
            f"of the patch's code in its tree (no patch-id the tree still has, backport, reverse-apply, content or 3-way "
            f"match{'; ' + found.detail if found.detail else ''}): behaviour alone makes it a retire-candidate at "
            f"most — review its hunks against {commit[:12]}'s code (lucepatch verify --retire {commit[:12]} --target "
            f"{target.name} lists what to read)")
    at = found if ref == commit else _code_at(target, source, patch, ref, cache)
    if not at.upstream:
        raise CheckFailed(f"{nothing}: {commit[:12]} has the patch's code ({found.signal}), but REF {ref[:12]}'s tree "
                          f"does not{': ' + at.detail if at.detail else ''}")
    j = needed.judge(target, source, ref, [patch], by=judge, cache=cache)[patch.name]
    d = absorption.decide(at, j)
    if not d.drop:
        raise CheckFailed(f"{nothing}: {d.reason}")
    walk = len(doc.get("transitions") or [])
    signal = (f"{SIGNAL} (bisect {'+'.join(doc['scenarios'])} over {doc['range']['spec']}"
              + (f", the last of {walk} transitions" if walk > 1 else "") + f") + code {at.signal}"
              + ("" if d.state == absorption.SUPERSEDED else " (no retire report at REF: code and this bisect only)"))
    after = series.rewrite_patch_file(
        patch, set_trailers(patch.raw, [("Applied-Upstream", commit), ("Applied-Upstream-Signal", signal)]),
        check={"Applied-Upstream": commit})
    return {"patch": patch.name, "file": str(patch.path), "applied_upstream": commit, "signal": SIGNAL,
            "code_signal": at.code_signal(), "decision": d.state, "reason": d.reason,
            "trailers": {"Applied-Upstream": commit, "Applied-Upstream-Signal": signal}, "patch_id": after.patch_id}


def _code_at(target: Target, source: Path, patch: Patch, commit: str, cache: Path):
    """What the one judge says of `patch` at `commit`, as the retire report records it (the code
    signal, for a sub-target's patch wherever `commit` holds it: _code_signal), with why not where
    it says no for a superproject patch (taken upstream and undone since)."""
    sig = _code_signal(target, source, patch, commit, cache)
    if retirement.is_code_signal(sig):
        return absorption.Finding(absorption.ALREADY_UPSTREAM, sig["signal"], sig.get("commit"), sig.get("detail", ""))
    if not any(p.path == patch.path for p in target.patches):
        return absorption.Finding(absorption.NOT_UPSTREAM)
    base = git.try_resolve(Path(source), target.base) or target.base
    why = retirement.findings(target, source, base, commit, cache)[patch.name]
    return absorption.Finding(absorption.NOT_UPSTREAM, detail=why.detail if why.took and not why.upstream else "")


__all__ = ["bisect_behaviour", "bisect_exit_code", "record_applied_upstream", "find_patch", "parse_range",
           "set_trailers", "BISECT_SCHEMA"]
