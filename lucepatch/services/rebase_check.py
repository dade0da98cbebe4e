"""What a rebase session checks before it accepts a patch git merged 3-way or a human resolved
(issue 36, item 4). At 52f33fc git merged free_raw_async without conflict markers into code that
never uncharges pool frees, and left a duplicate prototype in allocator.h; the session accepted both
and only a later `verify` showed it.

The check (engine/session.py calls it through `Session.checker`): build the session's commit as it
stands (the new base + the patches carried so far, this one included) and the same patches on the
old base, and run the patch's `Reproducer:` scenarios on both, RUNS fixed runs each, the
reproducers' controls with them:

  accepted    every scenario that passes on the old base with these patches passes on the new one;
  rejected    the session's commit does not build, a control fails on it where it passes at the old
              base, or a scenario passes at the old base and fails on it: the walk stops at the patch
              with its content in the work tree, for a human to fix and `--continue` (or `--skip`);
  unverified  no scenario passes at the old base with these patches alone (it needs later ones): no
              comparison to make, the walk goes on and says so;
  not-run     no `Reproducer:` trailer names a scenario of the workspace, or the target has no [build].

Beside it, the same scenarios on upstream + Build-Only at both commits say what the move itself did:
`fixed_upstream` (fails at the old base, passes at the new: it becomes a regression guard of the
rebased target, [regression_guard]) and `made_worse` (a crash or hang where the old base gave a wrong
value). All of it is the patch's journal entry (`verify` in the session state and in `rebase
--json`). Every build is a content-keyed cached build sharing compiled objects, so a session's checks
cost the builds of the patches it could not carry exactly, not the whole series each time.
"""

from __future__ import annotations

from pathlib import Path

from lucepatch.engine.session import Session
from lucepatch.engine.session_store import KEPT
from lucepatch.upstream.behaviour import B_FAIL, B_MIXED, Lab, made_worse
from lucepatch.upstream.retire_report import target_reproducers

RUNS = 5  # per build and scenario: a resolution that breaks a fix fails its scenario every run on the simulated driver


def make_checker(reproducers: Path, *, driver: str = "auto", runs: int = RUNS):
    """The checker a session is handed: reproducers from `reproducers` (the workspace's folder)."""
    def check(sess: Session, i: int) -> dict:
        return check_patch(sess, i, Path(reproducers), driver, runs)
    return check


def _bare_onto(sess: Session, names: list[str]):
    """(ref, patches) of upstream + Build-Only at the new base: the session's own commit of the
    Build-Only patches when they lead the series and were carried (its resolution), else the
    patches at the new base as the builders carry them (builders/build_only.py)."""
    st = sess.st
    lead = [ps for ps in st.patches[:len(names)]]
    if names and [ps.name for ps in lead] == names and all(ps.action in KEPT and ps.commit for ps in lead):
        return lead[-1].commit, []
    return st.onto, names


def check_patch(sess: Session, i: int, reproducers: Path, driver: str, runs: int) -> dict:
    st, t = sess.st, sess.t
    if i >= len(t.patches):
        return {"state": "not-run", "detail": "a sub-target's patch: the superproject's scenarios judge the series"}
    p = t.patches[i]
    if t.build is None:
        return {"state": "not-run", "detail": f"{t.name} has no [build]: nothing to build and run"}
    repros = {r.name: r for r in target_reproducers(t, directory=reproducers)}  # a line: its family's too
    keys: list[str] = []
    for name, scen in p.reproducers:
        r = repros.get(name)
        if r is None:
            continue
        keys += [f"{name}:{scen}"] if scen and any(s.name == scen and not s.control for s in r.scenarios) else \
            [] if scen else [f"{name}:{s.name}" for s in r.checked]
    keys = list(dict.fromkeys(keys))
    if not keys:
        return {"state": "not-run", "detail": "no Reproducer: trailer names a scenario of the workspace"}
    used = [repros[n] for n in dict.fromkeys(k.split(":", 1)[0] for k in keys)]
    lab = Lab(t, Path(sess.repo), Path(sess.cache), driver, used, runs)
    build_only = [x.name for x in t.patches if x.build_only]
    onto_ref, onto_bo = _bare_onto(sess, build_only)
    earlier = [x.name for x, ps in zip(t.patches[:i + 1], st.patches[:i + 1]) if not ps.backport]
    now_b = lab.build(f"{st.onto[:12]}+session-to-{i + 1}", st.head, [])
    was_b = lab.build(f"{st.base[:12]}+series-to-{i + 1}", st.base, earlier)
    bare0 = lab.build(f"{st.base[:12]}+build-only", st.base, build_only)
    bare1 = lab.build(f"{st.onto[:12]}+build-only", onto_ref, onto_bo)
    builds = {b.name: (b.key or f"not built: {b.error[:200]}") for b in (now_b, was_b, bare0, bare1)}
    out = {"driver": lab.driver.chosen, "runs": runs, "builds": builds, "scenarios": {}, "fixed_upstream": {},
           "made_worse": {}}
    if now_b.variant is None:
        return {**out, "state": "rejected", "detail": f"the session's commit does not build: {now_b.error[:300]}"}
    lab.measure_plan([(b, set(keys)) for b in (now_b, was_b, bare0, bare1) if b.variant is not None])
    broken, passed, unjudged = [], [], []
    for s in keys:
        now, was = lab.on(now_b, s), lab.on(was_b, s)
        ok_now, why_now = lab.controls_ok(now_b, s)
        ok_was, _ = lab.controls_ok(was_b, s)
        out["scenarios"][s] = {"base": was.describe(), "onto": now.describe()}
        if ok_was and not ok_now:
            broken.append(f"{why_now}, where it passes on {was_b.name}")
        elif ok_was and was.passes:
            (passed if now.passes else broken).append(s if now.passes else
                                                      f"{s}: {now.describe()} on {now_b.name} where {was_b.name} passes "
                                                      f"({was.describe()})")
        else:
            unjudged.append(f"{s} ({was_b.name}: {was.describe() if ok_was else 'its control fails'})")
        if bare0.variant is not None and bare1.variant is not None:
            b0, b1 = lab.on(bare0, s), lab.on(bare1, s)
            if lab.controls_ok(bare0, s)[0] and lab.controls_ok(bare1, s)[0]:
                if b0.state in (B_FAIL, B_MIXED) and b1.passes:
                    out["fixed_upstream"][s] = (f"upstream fixed it between {st.base[:12]} and {st.onto[:12]}: "
                                                f"{bare0.name} {b0.describe()}, {bare1.name} {b1.describe()} "
                                                f"({lab.driver.chosen} driver, rebase session)")
                elif made_worse(b0, b1):
                    out["made_worse"][s] = (f"upstream made it worse between {st.base[:12]} and {st.onto[:12]}: "
                                            f"{bare0.name} {b0.describe()}, {bare1.name} {b1.describe()}")
    how = f"{runs} runs each on the {lab.driver.chosen} driver"
    if broken:
        return {**out, "state": "rejected", "detail": "; ".join(broken)[:600] + f" ({how})"}
    if passed:
        more = f"; not compared: {', '.join(unjudged)}" if unjudged else ""
        return {**out, "state": "accepted", "detail": f"built {now_b.name}; {', '.join(passed)} pass as on "
                                                      f"{was_b.name} ({how}){more}"[:600]}
    return {**out, "state": "unverified", "detail": f"built {now_b.name}; no scenario passes on {was_b.name} with these "
                                                    f"patches alone to compare with: {', '.join(unjudged)}"[:600]}
