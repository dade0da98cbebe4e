"""rebase: the rules a rebase session (engine/session.py) applies — to what it starts from (a new
line of the series, `--backport` commits carried first) and to a finished walk (the target folder
it writes, the version bump, the attribution of absorbed patches).

Version bump: MAJOR when the base changes, MINOR when a patch leaves the series (absorbed,
skipped, dropped) or its change (patch-id) differs, PATCH when only its text changes (index
lines, context, offsets of the fresh re-export). Attribution: an absorbed patch names the
oldest first-parent commit of base..onto where its signal first holds.
"""

from __future__ import annotations

import dataclasses
import os
import re
import tomllib
from pathlib import Path

import tomlkit

from lucepatch import git, trailers
from lucepatch.engine import absorption, needed as needed_mod, retirement, session_subs, stale, upstreamed
from lucepatch.engine.commits import FORMAT_PATCH_ARGS, PURE_ENV
from lucepatch.engine.core import ALREADY_UPSTREAM, IndexEngine
from lucepatch.engine.session_store import ABSORBED, CARRIED, DROPPED, PENDING, RESOLVED, SKIPPED, STOPPED, PatchState
from lucepatch.errors import UsageError
from lucepatch.lines.fit import compat_data
from lucepatch.series import Patch, read_series
from lucepatch.target import Target, line_name, update_target_toml

_GIT_ENV = {**PURE_ENV, "GIT_OPTIONAL_LOCKS": "0"}


def _g(repo: Path, *args, check=True):
    return git.run(repo, *args, check=check, env=_GIT_ENV)


def bump_version(version: str, kind: str | None) -> str:
    major, minor, patch = (int(x) for x in version.split("."))
    if kind == "major":
        return f"{major + 1}.0.0"
    if kind == "minor":
        return f"{major}.{minor + 1}.0"
    if kind == "patch":
        return f"{major}.{minor}.{patch + 1}"
    return version


def attribute(repo: Path, base: str, onto: str, work: Path, patch: Patch, f: Path, signal: str) -> str | None:
    """The oldest commit of base..onto where the signal first holds (None when none does)."""
    eng = IndexEngine(repo, Path(work) / "attr.index")
    if signal in ("reverse-apply", "3-way"):
        def has(c):
            eng.reset(c)
            return eng.check_reverse(f) if signal == "reverse-apply" else eng.apply(f)[0] == ALREADY_UPSTREAM
    else:
        def has(c):
            return upstreamed.content_match(patch, upstreamed.tree_reader(repo, c))
    return upstreamed.first_commit_with(repo, base, onto, has)


# ---- the one judge in a session (engine/absorption.py): what leaves the series, and what it records


def judge_at_start(ps: PatchState, found, j, opts, onto: str, attribute_with) -> None:
    """At the start of a session: the code judge's `found` at the new base and the measured
    judgement `j` decide whether `ps` leaves the series (absorbed), and a person's keep (Options.keep) overrides
    a drop; --drop-superseded drops only a superseded judgement under the invariant. What decided is
    recorded in `ps.absorption` and said in `ps.detail`. `attribute_with(signal)`: the oldest upstream
    commit where a tree signal holds."""
    ps.needed = j.to_json()
    ps.absorption = found.to_json()
    if found.upstream:
        if not found.commit:  # the commit where REF's tree signal first holds: named whatever is decided
            found = dataclasses.replace(found, commit=attribute_with(found.signal))
        d = absorption.decide(found, j)
        ps.signal, ps.absorption = found.signal, {**found.to_json(), "decision": d.state, "reason": d.reason}
        if ps.name in opts.keep:  # a person rejects the absorption: carried (or stopped for a human)
            ps.detail = f"kept by a person (--keep); the code judge said: {d.reason}"
            ps.absorption.update(decision=absorption.KEPT, reason=ps.detail)
        elif d.drop:
            ps.action, ps.applies, ps.detail = ABSORBED, absorption.ALREADY_UPSTREAM, d.reason
            ps.upstream_commit = found.commit or onto
        else:  # behaviour measured at REF still needs it: carried; the disagreement is said
            ps.detail = d.reason
    elif found.took:  # taken upstream and undone there: said, and carried
        ps.detail = found.detail
    # --drop-superseded: only a judgement under the invariant with a code signal (never behaviour alone)
    if ps.action == PENDING and opts.drop_superseded and ps.name not in opts.keep and retirement.may_drop(j):
        ps.action, ps.signal = DROPPED, "superseded"
        ps.upstream_commit = (j.code_signal or {}).get("commit") or onto
        ps.detail = f"judged superseded ({j.reason}); code signal {j.code_signal['signal']}; --drop-superseded"


def judge_note(ps: PatchState, *more: str) -> str:
    """What the judge said at the start that a later step must not lose ("kept: ...", "upstream
    took it in X but reverted it in Y"), joined with `more` by "; "."""
    a = ps.absorption or {}
    said = a.get("reason") if a.get("decision") == absorption.KEPT else a.get("detail") if a.get("took") else ""
    return "; ".join(x for x in (said, *more) if x)


def code_alone(st) -> list[PatchState]:
    """The patches the session absorbed on a code signal alone (nothing measured) that no person has
    confirmed yet: what an interactive session asks about before it walks."""
    return [ps for ps in st.patches if ps.action == ABSORBED and (ps.absorption or {}).get("decision") ==
            absorption.ABSORBED and not ps.absorption.get("confirmed")]


def confirm_absorption(st, i: int) -> None:
    """A person confirms the absorption of patch `i` (by code alone): recorded, the patch still leaves."""
    ps = st.patches[i]
    ps.absorption = {**(ps.absorption or {}), "confirmed": True}
    ps.detail += "; confirmed by a person"


def reject_absorption(st, i: int) -> None:
    """A person rejects the absorption of patch `i`: it is carried (or stops for a human where,
    re-applied, it changes nothing). Only before the walk has passed it: later patches were applied
    without it."""
    ps = st.patches[i]
    if ps.action != ABSORBED:
        raise UsageError(f"{ps.name} is {ps.action} in this session, not absorbed: there is no absorption to reject")
    later = next((q for q in st.patches[i + 1:] if q.action in (CARRIED, RESOLVED, STOPPED, SKIPPED)), None)
    if later is not None:
        raise UsageError(f"the session has walked past {ps.name} ({later.name} is {later.action}): "
                         f"lucepatch rebase {st.target} --abort, then start again with --keep {ps.slug_hint}")
    said = (ps.absorption or {}).get("reason", "")
    ps.action, ps.applies, ps.upstream_commit, ps.signal = PENDING, None, None, None
    ps.detail = f"kept by a person; the code judge said: {said}"
    ps.absorption = {**(ps.absorption or {}), "decision": absorption.KEPT, "reason": ps.detail}
    st.options["keep"] = [*st.options.get("keep", ()), ps.name]


def drops_3way(ps: PatchState, detail: str, keep) -> bool:
    """A 3-way no-op on the session's head: may the patch go (the one judge, with what behaviour
    measured and what a person said)? Records the decision in `ps` either way."""
    found = absorption.Finding(absorption.ALREADY_UPSTREAM, "3-way", None, detail or "3-way merge produced no change")
    d = absorption.decide(found, needed_mod.Judgement.from_json(ps.needed))
    ps.absorption = {**found.to_json(), "decision": d.state, "reason": d.reason}
    if ps.name in keep:
        ps.absorption["decision"] = absorption.KEPT
        ps.detail = (f"kept by a person (--keep), but re-applied on the new base it changes nothing ({d.reason}): "
                     f"change the work tree so the patch does what it must, or --skip {ps.slug_hint}")
        return False
    if not d.drop:
        ps.detail = (f"{d.reason}; re-applied on the new base it changes nothing: make its change take effect in "
                     f"the work tree, or --skip {ps.slug_hint}")
        return False
    ps.detail = d.reason
    return True


def skipped(ps: PatchState, onto: str) -> None:
    """`--skip`: a person's decision. It is recorded as applied upstream only where the one judge
    found the patch's code at the new base; otherwise it goes to dropped/, said to be unverified."""
    ps.action, ps.conflict_files = SKIPPED, []
    if (ps.absorption or {}).get("state") == absorption.ALREADY_UPSTREAM:
        ps.signal = ps.absorption.get("signal")
        ps.upstream_commit = ps.upstream_commit or ps.absorption.get("commit") or onto
        ps.detail = f"skipped by a person (rebase --skip); the code judge found it upstream ({ps.signal})"
    else:
        ps.signal, ps.upstream_commit = "skipped", None
        ps.detail = ("skipped by a person (rebase --skip); lucepatch found no code signal that upstream has it: "
                     "recorded in dropped/, not as applied upstream")


def dropped_why(ps: PatchState, onto: str) -> str:
    """The `Dropped-Why:` of a patch a person skipped that the judge did not find upstream."""
    return judge_note(ps, "rebase --skip by a person", f"lucepatch found no code signal that {onto[:12]} has it "
                                                       "(not verified)")


def left_signal(ps: PatchState) -> str:
    """The Applied-Upstream-Signal of a patch leaving the series: the code signal and who decided."""
    if ps.action == DROPPED:
        return (f"superseded ({'simulated driver' if ps.needed.get('simulated') else ps.needed.get('driver') or 'judge'})"
                f", code signal {(ps.needed.get('code_signal') or {}).get('signal')}")
    a = ps.absorption or {}
    if ps.action == SKIPPED:
        return f"{a.get('signal')} (rebase --skip by a person)"
    if a.get("decision") == absorption.SUPERSEDED:
        return f"{ps.signal} + behaviour superseded ({'simulated driver' if ps.needed.get('simulated') else 'real driver'})"
    measured = (ps.needed or {}).get("needed")
    return f"{ps.signal} (code signal alone; behaviour " + \
        ("not measured)" if measured in (None, needed_mod.NOT_JUDGED) else f"{measured})")


def as_line(orig: Path, t: Target, line: str) -> None:
    """Turn the session's copy of `t` into line `line` of its family (name, line_of, line, 1.0.0)."""
    update_target_toml(orig / "target.toml", remove=("line", "line_of"), after="name",
                       name=line_name(t.family, line), line_of=t.family, line=line, version="1.0.0")


def _identity(source: Path) -> str:
    name, mail = os.environ.get("GIT_COMMITTER_NAME"), os.environ.get("GIT_COMMITTER_EMAIL")
    if not (name and mail):
        ident = git.config_identity(source)
        if ident is None:
            raise UsageError("--backport signs each backport off: set git config user.name and user.email "
                             "(or GIT_COMMITTER_NAME/GIT_COMMITTER_EMAIL)")
        name, mail = ident
    return f"{name} <{mail}>"


def backports(repo: Path, source: Path, orig: Path, opts, upstream: str | None = None) -> dict[str, str]:
    """Patch files for `--backport REV...` (format-patch of each upstream commit, marked
    `Upstream-Status: Backport [<commit>]`, signed off by the backporter), first in the series."""
    shas = {rev: git.resolve_commit(source, rev, what="--backport", upstream=upstream)
            for rev in dict.fromkeys(opts.backports)}
    build_only = set()
    for rev in opts.build_only:
        sha = git.try_resolve(source, rev)
        if sha not in shas.values():
            raise UsageError(f"--build-only {rev} is not one of the --backport commits")
        build_only.add(sha)
    signoff = ("Signed-off-by", _identity(source))
    series = (orig / "series").read_text()
    names, made = [], {}
    existing = set(read_series(orig / "series"))
    for rev, sha in shas.items():
        if len(_g(repo, "rev-list", "--parents", "-n1", sha).stdout.split()) > 2:
            raise UsageError(f"--backport {rev} is a merge; name the commits it brings instead")
        raw = _g(repo, *FORMAT_PATCH_ARGS, "--stdout", "-1", sha).stdout.encode("utf-8", "surrogateescape")
        have = trailers.patch_trailers(raw)
        extra = [("Upstream-Status", f"Backport [{sha}]")] + ([("Build-Only", "yes")] if sha in build_only else [])
        add = [] if any(k.lower() == "signed-off-by" and v == signoff[1] for k, v in have) else [signoff]
        raw = trailers.edit_patch(raw, set_=extra, add=add)
        subject = _g(repo, "log", "-1", "--format=%s", sha).stdout.strip()
        slug = re.sub(r"[^a-z0-9]+", "-", subject.lower()).strip("-")[:60].rstrip("-") or sha[:12]
        name, n = f"backport-{slug}.patch", 2
        while name in existing or name in names:
            name, n = f"backport-{slug}-{n}.patch", n + 1
        (orig / name).write_bytes(raw)
        names.append(name)
        made[name] = sha
    (orig / "series").write_text("".join(f"{n}\n" for n in names) + series)
    return made


def build_target_dir(d: Path, t: Target, st, plan: dict) -> None:
    """Edit the staged copy `d` of the target folder into the rebased series. A moving sub-target's
    patches (`<sub-target>/<file>`, engine/session_subs.py) go back into its series_dir in its own
    coordinates, and its [[submodule]] table says where --onto holds it. absorbed/: what upstream
    has (Applied-Upstream); dropped/: a person's skip the one judge did not find upstream."""
    left: dict[Path, set[str]] = {}  # series folder (relative) -> names that leave it
    for folder in ("absorbed", "dropped"):
        for name, data in plan.get(folder, {}).items():
            rel, data = session_subs.in_own_coordinates(t, st.subs, name, data, t.dir / name)
            (d / rel.parent / folder).mkdir(parents=True, exist_ok=True)
            (d / rel.parent / folder / rel.name).write_bytes(data)
            (d / rel).unlink(missing_ok=True)
            left.setdefault(rel.parent, set()).add(rel.name)
    for name, data in plan["files"].items():  # backports are new files
        rel, data = session_subs.in_own_coordinates(t, st.subs, name, data, t.dir / name)
        if not (d / rel).is_file() or (d / rel).read_bytes() != data:
            (d / rel).write_bytes(data)
    # each series file loses what left it, comments and quilt options kept; the superproject's is the
    # session's (backports first), written whatever left
    for folder in dict.fromkeys([Path("."), *left]):
        lines = (t.dir / folder / "series").read_text().splitlines(keepends=True)
        keep = [ln for ln in lines if (ln.split("#", 1)[0].split() or [None])[0] not in left.get(folder, set())]
        if (d / folder / "series").read_text() != "".join(keep):
            (d / folder / "series").write_text("".join(keep))
    update_target_toml(d / "target.toml", base=st.onto, version=plan["new_version"])
    session_subs.write_tables(d / "target.toml", st.subs)
    after_move(d, plan, st)


# ---- what a moved base takes along (issue 36): [serves], [regression_guard], review.toml ----------


def serves_at(t: Target, name: str, onto: str) -> tuple[dict | None, str]:
    """What `name`'s [serves] says once the series is on `onto`: None (unchanged: it has none, or it
    already matches), or the table the packaged compatible_hami.toml gives `name` on that base ({}
    when it maps no release there: the releases it named were for the old base); and the line that
    says so. So `lint` and the package's compatible_hami.toml agree after any session."""
    if not t.serves:
        return None, ""
    row = (compat_data().get("series") or {}).get(name) or {}
    rb = str(row.get("base") or "")
    if rb and (onto.startswith(rb[:7]) or rb.startswith(onto[:7])):
        want = {k: v for k, v in (("hami", list(row.get("compatible") or [])), ("shrreg", row.get("shrreg"))) if v}
        if want == {k: v for k, v in t.serves.items() if v}:
            return None, ""
        return want, f"[serves] of {name} set from lucepatch/data/compatible_hami.toml for {onto[:12]}"
    was = ", ".join(t.serves.get("hami") or []) or "none"
    return {}, (f"[serves] removed from {name}: its HAMi releases ({was}) were those of {t.base[:12]}, and "
                f"lucepatch/data/compatible_hami.toml maps no release to {onto[:12]} (keep a line on "
                f"{t.base[:12]} for them: lucepatch rebase --line)")


def after_move(d: Path, plan: dict, st) -> None:
    """Into the staged target folder `d`: the [serves] the new base takes, the regression guards the
    session measured (scenarios upstream fixed between the bases), review.toml (messages that cite
    what the move changed)."""
    serves = plan.get("serves")
    if serves is not None:
        if serves:
            update_target_toml(d / "target.toml", remove=("serves",), serves=serves)
        else:
            update_target_toml(d / "target.toml", remove=("serves",))
    guards = plan.get("guards") or {}
    if guards:
        table = tomlkit.table()
        for k, v in sorted({**_existing_guards(d), **guards}.items()):
            table.add(k, v)
        update_target_toml(d / "target.toml", remove=("regression_guard",), regression_guard=table)
    stale.write_review(d, plan.get("review") or {}, f"Written by the rebase onto {st.onto[:12]}.")


def _existing_guards(d: Path) -> dict:
    return dict(tomllib.loads((d / "target.toml").read_text()).get("regression_guard", {}))
