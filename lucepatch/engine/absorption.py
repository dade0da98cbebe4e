"""The one judge of "is this patch already upstream?" (issues 36 item 5, 39, 41): check, status,
matrix, rebase (dry run and session), retire and bisect --record all ask here, so they cannot
disagree.

Interface (everything a caller needs; the rest of the module is how):

    judge = UpstreamJudge(repo, base, ref, work_dir)   # one per (repository, base, REF)
    found = judge.code(patch, patch_file)              # Finding: what REF's *tree* says
    found = judge.three_way(patch, detail)             # the series engine's 3-way no-op at REF, as a Finding
    d = decide(found, judgement)                       # Decision: drop it or keep it, and why
    d.state, d.drop, d.reason                          # the word every verb prints, and the sentence
    d = at_ref(found, judgements, name, judge, f, p)   # check/status: decide with the saved retire report
                                                       # ({name: Judgement} or None: "by code alone" says so)

`repo` must hold REF's objects (a private clone sharing the checkout's objects is fine); nothing
is written but a private index under `work_dir`. `judgement` is the measured behaviour
(engine.needed.Judgement: the retire report's row for the patch at REF), or None when nothing was
measured.

**Code: judged on REF's tree, never on history alone.**
- `reverse-apply`: the patch reverse-applies exactly to REF's tree;
  `content-match`: REF's files hold every significant added run and lack the replaced text
  (whitespace and context may differ: engine.upstreamed.content_match);
  `3-way`: re-applied on REF (after the series' earlier patches) it changes nothing.
- `patch-id`: an upstream commit of base..REF has the patch's `git patch-id --stable`. It names
  the commit that took it, and counts only while REF's tree still has the change (reverse-apply or
  content-match). A later revert, or a later change of those lines, cancels it: the Finding says
  `not-upstream`, names the commit that took it and the one that reverted or changed it.
- `backport`: `Upstream-Status: Backport [sha]` with sha an ancestor of REF (upstream's own commit
  is in REF, whatever upstream did to those lines after it), unless a commit after sha reverts it
  (named).

**Behaviour measured decides against code** (`decide`):

    code says upstream  measured at REF                         state        drop
    ------------------  --------------------------------------  -----------  -----
    no                  anything                                not-upstream no
    yes                 still-needed                            kept         no    "kept: upstream has the lines
                                                                                       (...) but ..."
    yes                 superseded (code signal, the invariant) superseded   yes
    yes                 nothing measured / not-judged / other   absorbed     yes   "... code signal alone
                                                                                       (behaviour not measured)"

So `--drop-superseded` and a session's own drops never override a measured `still-needed`, and an
absorption by code alone says so (a person can reject it: `rebase --keep PATCH`, or the terminal's answer
before the walk: services.rebase.run(on_absorbed=)).

The words (docs/design.md "Verdicts", one name per state, every verb): `already-upstream` (REF's
tree has the change: check, status, matrix `U`, the session's `applies`), `not-upstream`,
`absorbed` / `superseded` / `kept` (what a rebase or retire does with it), `conflict` (does not
apply at REF, and REF's tree does not have it).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from pathlib import Path

from lucepatch import git, odb
from lucepatch.engine import needed
from lucepatch.engine.core import IndexEngine
from lucepatch.engine.upstreamed import CODE_SIGNALS, content_match, first_commit_with, tree_reader, upstream_patch_ids

ALREADY_UPSTREAM = "already-upstream"  # the tree state: REF has the change (engine.core's 3-way word too)
NOT_UPSTREAM = "not-upstream"
ABSORBED, SUPERSEDED, KEPT = "absorbed", "superseded", "kept"  # decisions
TREE_SIGNALS = ("reverse-apply", "content-match", "3-way")  # read on REF's tree
HISTORY_SIGNALS = ("patch-id", "backport")  # name the commit; count only as the rules above say
# Reports and judgements made under the rule carry {"invariant": INVARIANT}; one without it, or from an
# older rule, is read, never acted on. 1: a code signal besides behaviour (issue 26); 2: the code signal is
# read on REF's tree by this judge (a patch-id match whose lines upstream reverted or changed is none).
INVARIANT = 2
_BACKPORT = re.compile(r"^Backport \[([0-9a-f]{7,40})\]$")


@dataclass(frozen=True)
class Finding:
    """What REF's tree says about one patch. `state` is ALREADY_UPSTREAM or NOT_UPSTREAM."""
    state: str
    signal: str | None = None  # the code signal that decided (ALREADY_UPSTREAM), else None
    commit: str | None = None  # the upstream commit that brought it, when known
    detail: str = ""
    took: str | None = None  # an upstream commit that took the patch (patch-id / backport), even if undone
    undone_by: str | None = None  # the upstream commit after `took` that reverted or changed its lines
    undone_how: str | None = None  # "reverted" | "changed"

    @property
    def upstream(self) -> bool:
        return self.state == ALREADY_UPSTREAM

    def code_signal(self) -> dict | None:
        """{"signal", "commit", "detail"} (engine.retirement's code signal), None when not upstream."""
        if not self.upstream:
            return None
        return {"signal": self.signal, "commit": self.commit, "detail": self.detail}

    def to_json(self) -> dict:
        return {"state": self.state, "signal": self.signal, "commit": self.commit, "detail": self.detail,
                "took": self.took, "undone_by": self.undone_by, "undone_how": self.undone_how}


@dataclass(frozen=True)
class Decision:
    """What a verb does with a patch. state: ABSORBED, SUPERSEDED, KEPT or NOT_UPSTREAM."""
    state: str
    drop: bool
    reason: str
    measured: bool = False  # whether behaviour at REF was measured and counted


def backport_commit(patch) -> str | None:
    """The commit of an `Upstream-Status: Backport [<sha>]` header (None: none, or a PR URL)."""
    m = _BACKPORT.match((patch.trailer("Upstream-Status") or "").strip())
    return m.group(1) if m else None


def reversed_diff(diff: bytes) -> bytes:
    """The inverse of a diff's hunks (what `git revert` of it records), for its patch-id: in each
    block of changed lines the +/- swap and the removed lines come first, as git writes them
    (patch-id ignores line numbers and keeps the file names)."""
    out: list[bytes] = []
    rem: list[bytes] = []
    add: list[bytes] = []
    in_hunk = False

    def flush():
        out.extend(rem + add)
        rem.clear()
        add.clear()

    for line in diff.split(b"\n"):
        if in_hunk and line[:1] == b"+":
            rem.append(b"-" + line[1:])
            continue
        if in_hunk and line[:1] == b"-":
            add.append(b"+" + line[1:])
            continue
        flush()
        if line.startswith(b"diff --git "):
            in_hunk = False
        elif line.startswith(b"@@"):
            in_hunk = True
        out.append(line)
    flush()
    return b"\n".join(out)


class UpstreamJudge:
    """The code side of the one judge, for one (repository, base, REF). See the module doc."""

    def __init__(self, repo: Path, base: str, ref: str, work_dir: Path, *, tree: str | None = None,
                 extra_ids: dict[str, str] | None = None):
        """`tree`: the commit whose tree is REF's as the patches see it (a rebase with a moving
        sub-target flattens it into the superproject; default REF); `extra_ids`: more patch-id ->
        commit of upstream histories the patches live in (a submodule's own, re-rooted)."""
        self.repo, self.base, self.ref, self.tree = Path(repo), base, ref, tree or ref
        Path(work_dir).mkdir(parents=True, exist_ok=True)
        self._eng = IndexEngine(self.repo, Path(work_dir) / "judge.index")
        self._at: str | None = None
        self._ids: dict[str, str] | None = None
        self._extra = dict(extra_ids or {})
        self._readers: dict[str, object] = {}

    # ---- what REF (or any commit) holds
    @property
    def ids(self) -> dict[str, str]:
        """patch-id -> oldest upstream commit of base..REF with it (lucepatch's own commits excluded)."""
        if self._ids is None:
            own = upstream_patch_ids(self.repo, self.base, self.ref) if self.base != self.ref else {}
            self._ids = {**self._extra, **own}
        return self._ids

    def _reader(self, commit: str):
        if commit not in self._readers:
            self._readers[commit] = tree_reader(self.repo, commit)
        return self._readers[commit]

    def tree_has(self, patch, patch_file: Path, commit: str | None = None) -> str | None:
        """The tree signal saying `commit`'s tree (default REF's: `tree`) has the patch's change, or None."""
        commit = commit or self.tree
        if self._at != commit:
            self._eng.reset(commit)
            self._at = commit
        if self._eng.check_reverse(patch_file):
            return "reverse-apply"
        if content_match(patch, self._reader(commit)):
            return "content-match"
        return None

    def first_having(self, patch, patch_file: Path) -> str | None:
        """The oldest first-parent commit of base..REF whose tree has the change (what a tree signal
        names as upstream's commit, as a rebase attributes it), None when none has."""
        return first_commit_with(self.repo, self.base, self.ref,
                                 lambda c: self.tree_has(patch, patch_file, c) is not None)

    def _is_ancestor(self, a: str, b: str) -> bool:
        return git.run(self.repo, "merge-base", "--is-ancestor", a, b, check=False,
                       env={"GIT_OPTIONAL_LOCKS": "0"}).status == 0

    def _undone(self, patch, patch_file: Path, took: str) -> tuple[str | None, str | None]:
        """(the commit after `took` whose tree lost the change, "reverted" / "changed"): the last
        such transition on the first-parent line of took..REF among commits touching its files."""
        commits = git.run(self.repo, "rev-list", "--first-parent", "--reverse", f"{took}..{self.ref}", "--",
                          *patch.files, env={"GIT_OPTIONAL_LOCKS": "0"}).stdout.split()
        had, by = True, None
        for c in commits:
            has = self.tree_has(patch, patch_file, c) is not None
            if had and not has:
                by = c
            had = has
        if by is None:
            return None, None
        rev = git.patch_id(reversed_diff(patch.diff))
        by_id = git.run(self.repo, "patch-id", "--stable", stdin=git.run(
            self.repo, "show", "--no-color", "--full-index", "--format=commit %H", by,
            env={"GIT_OPTIONAL_LOCKS": "0"}).stdout.encode("utf-8", "surrogateescape")).stdout.split()
        return by, "reverted" if rev and by_id[:1] == [rev] else "changed"

    def _touched(self, commit: str, patch) -> str:
        """The patch's files that `commit` changed (against its first parent), for the person reading."""
        changed = set(git.run(self.repo, "diff-tree", "--name-only", "-r", f"{commit}^1", commit,
                              env={"GIT_OPTIONAL_LOCKS": "0"}).stdout.split())  # a merge: against its first parent
        return ", ".join(f for f in patch.files if f in changed) or "its files"

    def _revert_after(self, patch, sha: str) -> str | None:
        """An upstream commit of sha..REF that reverts `patch` (its inverse patch-id), or None."""
        rev = git.patch_id(reversed_diff(patch.diff))
        c = upstream_patch_ids(self.repo, sha, self.ref).get(rev) if rev else None
        return c

    # ---- the judgement
    def code(self, patch, patch_file: Path) -> Finding:
        """What REF's tree says about `patch` (its diff in `patch_file`), by the rules of the module doc."""
        ref7 = self.ref[:12]
        sha = backport_commit(patch)
        if sha:
            full = git.try_resolve(self.repo, sha)
            if full and self._is_ancestor(full, self.ref):
                undo = self._revert_after(patch, full)
                if undo is None:
                    return Finding(ALREADY_UPSTREAM, "backport", full,
                                   f"Upstream-Status: Backport [{sha}] names {full[:12]}, an ancestor of {ref7}",
                                   took=full)
                return Finding(NOT_UPSTREAM, None, None,
                               f"Upstream-Status: Backport [{sha}] is in {ref7}, but upstream reverted it in "
                               f"{undo[:12]} ({git.subject(self.repo, undo)[:60]})", took=full, undone_by=undo,
                               undone_how="reverted")
        took = self.ids.get(patch.patch_id)
        tree = self.tree_has(patch, patch_file)
        if took and tree:
            return Finding(ALREADY_UPSTREAM, "patch-id", took,
                           f"upstream commit {took[:12]} has patch-id {patch.patch_id[:12]} and {ref7}'s tree still "
                           f"has the change ({tree})", took=took)
        if tree:
            return Finding(ALREADY_UPSTREAM, tree, None,
                           f"the patch reverse-applies exactly to {ref7}" if tree == "reverse-apply" else
                           f"every changed run is present in {ref7} (whitespace/context differ)")
        if took:
            by, how = self._undone(patch, patch_file, took)
            what = (f"{how} its lines in {by[:12]} ({git.subject(self.repo, by)[:60]}; {self._touched(by, patch)})"
                    if by else "its lines are not in REF's tree")
            return Finding(NOT_UPSTREAM, None, None,
                           f"upstream took it in {took[:12]} (patch-id) but {what}: {ref7}'s tree does not have it",
                           took=took, undone_by=by, undone_how=how)
        return Finding(NOT_UPSTREAM)

    def three_way(self, patch, detail: str = "") -> Finding:
        """The series engine's 3-way no-op at REF (the series' earlier patches applied first)."""
        return Finding(ALREADY_UPSTREAM, "3-way", None,
                       detail or f"re-applied on {self.ref[:12]} (3-way, after the series' earlier patches) it changes "
                                 "nothing")


def judge_conflicts(outcomes: list, repo: Path, base: str, ref: str, work_dir: Path, measured=None) -> None:
    """`check`'s series outcomes at REF (engine.apply.PatchOutcome): a `conflict` the judge finds
    upstream (a backport REF contains, a change REF's tree has) becomes `already-upstream` with the
    signal and the commit, as a rebase would absorb it; every other outcome is left as it is.
    `measured()`: the saved retire report at REF as {patch name: Judgement} (None: there is none);
    with it the conflict is decided as a rebase decides it (at_ref): kept (still a conflict, the row
    says why) where behaviour measured at REF needs it, "by code alone" where nothing was measured."""
    bad = [o for o in outcomes if o.status == "conflict"]
    if not bad:
        return
    judge = UpstreamJudge(repo, base, ref, Path(work_dir))
    js = measured() if measured is not None else None
    for i, o in enumerate(bad):
        f = Path(work_dir) / f"{i:04d}.diff"
        f.write_bytes(o.patch.diff)
        found = judge.code(o.patch, f)
        d = at_ref(found, js, o.patch.name, judge, f, o.patch) if found.upstream and measured is not None else None
        if d is not None and d.state == KEPT:
            o.detail = f"{d.reason}; {o.detail}"
        elif found.upstream:
            o.status, o.signal, o.commit = ALREADY_UPSTREAM, found.signal, found.commit
            said = f"; {d.reason}" if d is not None else ""
            o.detail = f"{found.detail} ({found.signal}){said}; as a patch it does not apply: {o.detail}"
        elif found.took:
            o.detail = f"{found.detail}; {o.detail}"


def judge_cells(repo: Path, patches: list, files: list[Path], commits: list[str], cells: list[list[str]],
                work_dir: Path) -> dict:
    """`matrix`: the `conflict` cells (commit x patch) the one judge finds upstream become
    `already-upstream`, as `check --onto <commit>` says them (judge_conflicts). Returns
    {(commit, patch name): detail} of the cells it changed. The tree signals are read once per
    distinct content of the patch's files; a backport counts from its commit on (first-parent
    ancestry) unless reverted later."""
    changed: dict = {}
    judge = UpstreamJudge(repo, commits[0], commits[-1], Path(work_dir))
    for j, (p, f) in enumerate(zip(patches, files)):
        rows = [i for i, row in enumerate(cells) if row[j] == "conflict"]
        if not rows:
            continue
        sha = backport_commit(p)
        full = git.try_resolve(repo, sha) if sha else None
        blobs = odb.batch_check(repo, [f"{commits[i]}:{x}" for i in rows for x in p.files])
        n, seen = len(p.files), {}
        for k, i in enumerate(rows):
            c = commits[i]
            if full and judge._is_ancestor(full, c) and not _reverted_by(judge, p, full, c):
                sig, det = "backport", f"Upstream-Status: Backport [{sha}] names {full[:12]}, an ancestor of {c[:12]}"
            else:
                key = tuple(blobs[k * n:(k + 1) * n])
                if key not in seen:
                    seen[key] = judge.tree_has(p, f, c)
                sig, det = seen[key], f"the tree of {c[:12]} has the change"
            if sig:
                cells[i][j] = ALREADY_UPSTREAM
                changed[(c, p.name)] = f"{det} ({sig}); as a patch it does not apply"
    return changed


def _reverted_by(judge: UpstreamJudge, patch, sha: str, commit: str) -> bool:
    rev = git.patch_id(reversed_diff(patch.diff))
    return bool(rev) and rev in upstream_patch_ids(judge.repo, sha, commit)


# ---- code against measured behaviour ------------------------------------------------------------


def is_code_signal(sig) -> bool:
    """A code signal: {"signal": one of CODE_SIGNALS, ...} (or an object with .signal)."""
    name = sig.get("signal") if isinstance(sig, dict) else getattr(sig, "signal", None)
    return name in CODE_SIGNALS


def accepts(status: str, code, invariant) -> bool:
    """May a recorded `status` (a retire report row, a rebase judgement) count as "upstream has it"?
    Only `superseded` with a code signal, from a report made under this rule."""
    return status == SUPERSEDED and is_code_signal(code) and invariant == INVARIANT


def decide(found: Finding | None, judgement=None) -> Decision:
    """Drop or keep a patch the code judge found upstream, given what behaviour measured at REF
    (engine.needed.Judgement or None). The table in the module doc."""
    if found is None or not found.upstream:
        return Decision(NOT_UPSTREAM, False, found.detail if found else "")
    sig = f"{found.signal} {found.commit[:12]}" if found.commit else found.signal
    j = judgement
    if j is not None and j.needed == needed.STILL_NEEDED:
        said = j.measured or j.reason
        scen = f"{j.scenario} still fails at REF without the patch" if j.scenario else "behaviour at REF needs it"
        by = {"fake": ", simulated driver", "real": ", real driver"}.get(j.driver or "", "")
        return Decision(KEPT, False, f"kept: upstream has the lines ({sig}) but {scen} ({said}{by})", True)
    if j is not None and accepts(j.needed, j.code_signal, j.invariant):
        return Decision(SUPERSEDED, True, f"superseded: upstream has the change ({sig}) and behaviour at REF agrees "
                                          f"({j.reason[:200]})", True)
    if j is None or j.needed == needed.NOT_JUDGED:
        why = f" ({j.reason[:160]})" if j is not None and j.reason else ""
        return Decision(ABSORBED, True, f"absorbed by code signal alone ({sig}); behaviour not measured{why}")
    return Decision(ABSORBED, True, f"absorbed by code signal alone ({sig}); behaviour at REF did not decide: "
                                    f"{j.needed} ({j.reason[:160]})")


NO_REPORT = "no retire report at REF: behaviour not measured"


def at_ref(found: Finding, judgements: dict | None, name: str, judge: UpstreamJudge | None = None,
           patch_file: Path | None = None, patch=None) -> Decision:
    """`decide` for the verbs that say REF's tree state and drop nothing (check, status): `judgements`
    is the saved retire report at REF read as {patch name: engine.needed.Judgement}
    (upstream.retire.judgements), None when there is none. KEPT: the verb reports the patch as not
    upstream, with the reason ("kept: ..."), naming the commit whose tree has it as a rebase does
    (with `judge`, `patch`, `patch_file`); otherwise it is already-upstream, and where code alone
    decided the reason says what was not consulted."""
    j = judgements.get(name) if judgements is not None else None
    d = decide(found, j)
    if d.state == KEPT and not found.commit and judge is not None:
        d = decide(replace(found, commit=judge.first_having(patch, patch_file)), j)
    if d.state != ABSORBED:
        return d
    if judgements is None:
        why = NO_REPORT
    elif j is None or j.needed == needed.NOT_JUDGED:
        why = "the retire report at REF did not judge it: behaviour not measured"
    else:
        why = f"behaviour at REF did not decide: {j.needed}"
    return Decision(ABSORBED, True, f"by code alone ({why})")


__all__ = ["UpstreamJudge", "Finding", "Decision", "decide", "at_ref", "NO_REPORT", "judge_conflicts", "judge_cells", "accepts",
           "is_code_signal", "INVARIANT", "CODE_SIGNALS", "backport_commit", "reversed_diff", "ALREADY_UPSTREAM",
           "NOT_UPSTREAM", "ABSORBED", "SUPERSEDED", "KEPT", "TREE_SIGNALS", "HISTORY_SIGNALS"]
