"""Rebase sessions: carry a series to another base, stopping for a human when a patch conflicts.

A session walks the series in order on a private clone under `<cache>/rebase/`. Each patch gets
`applies` (exact / 3-way / absorbed + signal / conflict, from the series engine) and `needed`
(engine/needed.py). A conflict stops the walk with git's conflict markers in the session's own
work tree; `--continue` commits what the human resolved there, `--skip NAME` drops a patch,
`--abort` throws the session away. The workspace is written once, when every patch is decided,
by engine/transaction.py (one atomic folder swap under a lock); until then neither the workspace
nor the user's checkout (`--source`, only ever read through `git clone --shared`) is touched.

What is on disk (the state, its store and lock, the session as a document) is
engine/session_store.py; this module drives the session. Every state change is written atomically after the step it records, and every step can be
redone from the recorded `head` (commit ids are deterministic), so a session killed at any point
resumes with `--continue`. Phases: walking -> conflict (a human) -> walking ... -> ready -> writing.

Long: one session's life over one State under one lock — start, prepare, walk, resolve, skip, plan,
write — whose invariant (the recorded head is the truth, every step redone from it) each step relies
on; split by step, that invariant would be spread over modules. What is not the life of a session is
elsewhere: the rules of a finished walk (engine/rebase.py), the state on disk (engine/session_store.py),
the sub-targets that move (engine/session_subs.py).
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Callable

from lucepatch import git, odb, report, trailers
from lucepatch.engine import absorption, needed as needed_mod
from lucepatch.engine import session_subs, stale, transaction
from lucepatch.engine.apply import (TreeState, WorkArea, apply_loop, clone_private, commit_message, patch_author, pause_at, resolve_base, series_trailers, with_trailers)
from lucepatch.engine.commits import PURE_ENV, format_commits
from lucepatch.engine.checkout import clear_private_locks
from lucepatch.engine.core import ALREADY_UPSTREAM, APPLIED, APPLIED_3WAY, CONFLICT, validate_diffs
from lucepatch.engine.safety import check_series_safety
from lucepatch.errors import CheckFailed, UsageError
from lucepatch.engine.rebase import (as_line, attribute, backports, build_target_dir, bump_version,
                                     confirm_absorption, drops_3way, reject_absorption,
                                     dropped_why, judge_at_start, judge_note, left_signal, serves_at,
                                     skipped)
from lucepatch.engine.session_store import (ABSORBED, BACK, CARRIED, CONFLICT_PHASE, DROPPED, FORWARD, KEPT,  # noqa: F401
                                            LEFT, NONE, PENDING, READY, RESOLVED, SCHEMA, SIDEWAYS, SKIPPED, STOPPED,
                                            TABLE_COLUMNS, WALKING, WRITING, PatchState, State, Store, _now, describe,
                                            notice, summary, table_rows, title)
from lucepatch.series import find_patch, parse_patch_bytes
from lucepatch.target import Target, line_name, load_target_dir

_MARKER = re.compile(rb"^(<{7}|>{7})( |$)|^={7}$", re.M)
_GIT_ENV = {**PURE_ENV, "GIT_OPTIONAL_LOCKS": "0"}


def _g(repo: Path, *args, check=True, stdin=None, env=None):
    return git.run(repo, *args, check=check, stdin=stdin, env={**_GIT_ENV, **(env or {})})


def direction_of(repo: Path, base: str, onto: str) -> str:
    if base == onto:
        return NONE
    anc = lambda a, b: _g(repo, "merge-base", "--is-ancestor", a, b, check=False).status == 0  # noqa: E731
    return FORWARD if anc(base, onto) else BACK if anc(onto, base) else SIDEWAYS


# -------------------------------------------------------------------------------- the session
@dataclass
class Options:
    drop_superseded: bool = False
    no_behaviour: bool = False
    line: str | None = None  # write the result as a new line of the family (patches/<family>-<line>)
    backports: tuple = ()  # upstream revisions to carry first, as `Upstream-Status: Backport [<commit>]`
    build_only: tuple = ()  # those of `backports` that only make the base build (Build-Only: yes)
    keep: tuple = ()  # patches whose absorption a person rejects: carried, or stopped for a human
    # who answers `needed` (engine/needed.py), handed in by the caller: the retirement rule sits floors
    # above the engine. None: every patch not-judged. Not part of the session's state on disk.
    judge: Callable | None = field(default=None, compare=False, repr=False)
    # build and run each 3-way-merged or hand-resolved patch's Reproducer: scenarios before moving
    # on (the checker services/rebase_check.py hands the session); False: --no-verify, journalled
    verify: bool = True


class Session:
    """One rebase session; every public method runs under the store's lock."""

    def __init__(self, store: Store, st: State, cache: Path):
        self.store, self.st, self.cache = store, st, cache
        self.t: Target = load_target_dir(store.dir / "original" / st.target)
        self._state: TreeState | None = None
        self._patches = None

    @property
    def patches(self) -> list:
        """The patches the session walks: the superproject's series, then the re-rooted series of
        every sub-target whose place moves (engine/session_subs.py)."""
        if self._patches is None:
            self._patches = session_subs.patches(self.t, self.st.subs) if self.st.subs else self.t.patches
        return self._patches

    # ---- opening
    @classmethod
    def open(cls, cache: Path, store: Store, *, known: list[str] = ()) -> "Session":
        name = store.key.rsplit("-", 1)[0]
        store.lock(name)
        try:
            if not store.exists():
                what = "" if name in known else f" (and {name} is not a target of the workspace: {', '.join(known)})"
                raise UsageError(f"no rebase session of {name} is open (in cache {cache}){what}; start one with "
                                 f"lucepatch rebase TARGET --onto REF")
            return cls(store, store.read(), cache)
        except BaseException:  # any interruption (signals too): undo, then re-raise
            store.unlock()
            raise

    @classmethod
    def start(cls, cache: Path, t: Target, source: Path, onto_ref: str, opts: Options, *, fetch: bool = False,
              where: Path | None = None) -> "Session":
        """Create the session (atomically: it exists complete or not at all). `where` = a throwaway
        folder for --dry-run, outside the store."""
        name = line_name(t.family, opts.line) if opts.line else t.name
        target_dir = t.dir.parent / name
        # a person's keeps, by name or slug, checked before anything is made (one line for a bad name)
        opts = replace(opts, keep=tuple(find_patch(t.patches, k, where=f"{t.name}'s series", flag="--keep").name
                                        for k in opts.keep))
        if opts.line and target_dir.exists():
            raise UsageError(f"line {opts.line} of {t.family} exists already ({target_dir}); rebase that target instead")
        store = Store(cache, target_dir, name)
        if where is None:
            store.lock(name)
            if store.exists():
                msg = describe(store.read(), store)
                store.unlock()
                raise UsageError(f"{msg}; one session per target at a time")
        try:
            base = resolve_base(source, t.base, t.name, fetch=fetch, upstream=t.upstream_urls)
            onto = git.resolve_commit(source, onto_ref, what="--onto", upstream=t.upstream_urls)
            check_series_safety(t.patches, source, base)
            check_series_safety(t.patches, source, onto)
            subs = session_subs.moving(t, source, onto) if t.submodules else []
            tmp = where or store.root / f".{store.key}.starting-{os.getpid()}"
            shutil.rmtree(tmp, ignore_errors=True)
            tmp.mkdir(parents=True)
            orig = tmp / "original" / name
            shutil.copytree(t.dir, orig, symlinks=True)
            clone_private(source, tmp / "worktree", session_subs.alternates(subs))
            flats: dict = {}
            flat_base = session_subs.flat(tmp / "worktree", base, subs, "base", flats)
            flat_onto = session_subs.flat(tmp / "worktree", onto, subs, "onto", flats)
            odb.write_objects(tmp / "worktree", flats)
            if opts.line:
                as_line(orig, t, opts.line)
            made = backports(tmp / "worktree", source, orig, opts, t.upstream) if opts.backports or opts.build_only else {}
            tt = load_target_dir(orig)
            check_series_safety(tt.patches, source, onto)
            walked = session_subs.patches(tt, subs) if subs else tt.patches
            if subs:  # the moving sub-targets' patches, where the walk puts them
                check_series_safety(walked[len(tt.patches):], tmp / "worktree", flat_onto)
            st = State(target=name, target_dir=str(target_dir.resolve()), source=str(Path(source).resolve()), base=base,
                       onto=onto, onto_ref=onto_ref, direction=direction_of(tmp / "worktree", base, onto),
                       old_version=t.version, old_head=flat_base, head=flat_onto,
                       snapshot={} if opts.line else transaction.snapshot(t.dir),
                       patches=[PatchState(p.name, p.patch_id, hashlib.sha256(p.raw).hexdigest(), backport=made.get(p.name))
                                for p in walked],
                       options={k: v for k, v in asdict(opts).items() if k != "judge"}, started=_now(), pid=os.getpid(),
                       new_line=opts.line, subs=subs, flat_base=flat_base if subs else None,
                       flat_onto=flat_onto if subs else None)
            sess = cls.__new__(cls)
            sess.store, sess.st, sess.cache, sess._state, sess._patches = store, st, cache, None, None
            sess.t = tt
            # the judge keys its saved report by the target's content and the workspace's reproducers:
            # the staged copy (tt) has no reproducers/ beside it
            sess._reproducers = t.dir.resolve().parent.parent / "reproducers"
            sess._root = tmp
            sess._prepare(source, opts)
            store.write(st, tmp)
            if where is None:
                os.rename(tmp, store.dir)
                sess.t = load_target_dir(store.dir / "original" / name)  # the copy moved with the session
                sess._patches = None
            sess._root = store.dir if where is None else tmp
            return sess
        except BaseException:  # any interruption (signals too): undo, then re-raise
            if where is None:
                shutil.rmtree(store.root / f".{store.key}.starting-{os.getpid()}", ignore_errors=True)
                store.unlock()
            raise

    @property
    def root(self) -> Path:
        return getattr(self, "_root", self.store.dir)

    @property
    def repo(self) -> Path:
        return self.root / "worktree"

    def patch_file(self, i: int) -> Path:
        return self.root / "diffs" / f"{i + 1:04d}.diff"

    def close(self) -> None:
        self.store.unlock()

    # ---- start: old chain (blobs + range-diff), absorbed detection, needed
    def _prepare(self, source: Path, opts: Options) -> None:
        st, repo, patches = self.st, self.repo, self.patches
        (self.root / "diffs").mkdir(exist_ok=True)
        files = []
        for i, p in enumerate(patches):
            self.patch_file(i).write_bytes(p.diff)
            files.append(self.patch_file(i))
        validate_diffs(repo, [(f, str(p.path)) for f, p in zip(files, patches)])
        # The old series on the old base: its blobs let 3-way merges of later patches work even
        # when an earlier one is dropped, and its head is the left side of the range-diff. A moving
        # sub-target's patches go where the base holds it (a moved submodule: another path).
        old_patches, old_files = patches, files
        if st.subs:
            old_patches = session_subs.patches(self.t, st.subs, "base")
            old_files = []
            for i, (p, q) in enumerate(zip(patches, old_patches)):
                if p.diff == q.diff:
                    old_files.append(files[i])
                else:
                    f = self.root / "diffs" / f"old-{i + 1:04d}.diff"
                    f.write_bytes(q.diff)
                    old_files.append(f)
        old = TreeState(repo, self.root / "old.index", st.old_base)
        carried = [(p, f) for p, f, ps in zip(old_patches, old_files, st.patches) if not ps.backport]
        outcomes, st.old_head = apply_loop(old, self.t, [p for p, _ in carried], [f for _, f in carried], st.old_base)
        old.flush()
        bad = [o.patch.name for o in outcomes if o.status == CONFLICT]
        if bad:
            st.warnings.append(f"on its own base {st.base[:12]} the series does not apply cleanly ({', '.join(bad)}); "
                               "3-way merges of later patches may lack preimages")
        judged = needed_mod.judge(self.t, source, st.onto, self.t.patches, by=opts.judge, no_behaviour=opts.no_behaviour,
                                  cache=self.cache, reproducers=getattr(self, "_reproducers", None))
        for p in patches[len(self.t.patches):]:  # the judge reads the superproject's series only
            judged[p.name] = needed_mod.Judgement(needed_mod.NOT_JUDGED, "a sub-target's patch: the behaviour judge "
                                                  "runs the superproject's reproducers only")
        # the one judge (engine/absorption.py) on the tree the walk starts from (a moving sub-target flattened)
        judge = absorption.UpstreamJudge(repo, st.base, st.onto, self.root / "judge", tree=st.walk_base,
                                         extra_ids=session_subs.patch_ids(repo, st.subs))
        for ps, p, f in zip(st.patches, patches, files):
            judge_at_start(ps, judge.code(p, f), judged[ps.name], opts, st.onto,
                           lambda sig: attribute(repo, st.base, st.onto, self.root, p, f, sig))

    # ---- the walk
    @property
    def state(self) -> TreeState:
        """The series' tree at the recorded head, as the one apply loop carries it (kept between
        patches in this process; rebuilt from `head` after a human's commit or a restart)."""
        if self._state is None:
            self._state = TreeState(self.repo, self.root / "engine.index", self.st.head)
        return self._state

    def save(self) -> None:
        self.st.pid = os.getpid()
        self.store.write(self.st, self.root)

    def walk(self, *, stop_at_conflict: bool = True) -> str:
        """Decide every pending patch in order; returns the phase reached (conflict or ready)."""
        st = self.st
        st.phase, st.current = WALKING, None
        for i, ps in enumerate(st.patches):
            if ps.action != PENDING:
                continue
            pause_at(i)
            p = self.patches[i]
            outcomes, head = apply_loop(self.state, self.t, [p], [self.patch_file(i)], st.head)
            self.state.flush()  # the head saved below must be readable after a kill
            o = outcomes[0]
            if o.status in (APPLIED, APPLIED_3WAY):
                ps.action, ps.applies, ps.commit = CARRIED, "exact" if o.status == APPLIED else "3-way", head
                ps.detail = judge_note(ps, o.detail)  # what the judge said at the start (kept, undone upstream)
                prev, st.head = st.head, head
                if o.status == APPLIED_3WAY and stop_at_conflict and not self._accept(i, prev):
                    return st.phase  # what git merged without markers broke the patch's scenarios: a human looks
            elif o.status == ALREADY_UPSTREAM and drops_3way(ps, o.detail, st.options.get("keep", ())):
                commit = attribute(self.repo, st.base, st.onto, self.root, p, self.patch_file(i), "3-way") or st.onto
                ps.action, ps.applies, ps.signal, ps.upstream_commit = ABSORBED, absorption.ALREADY_UPSTREAM, "3-way", commit
            elif o.status == ALREADY_UPSTREAM:  # REF's tree has it, but behaviour (or a person) keeps it: a human decides
                ps.applies = absorption.ALREADY_UPSTREAM
                if not stop_at_conflict:
                    ps.action = STOPPED
                    continue
                self._materialize(i)
                return st.phase
            else:
                ps.applies, ps.detail = "conflict", judge_note(ps, o.detail)
                if not stop_at_conflict:  # a dry run: the files git named, as a session would list them
                    ps.action, ps.conflict_files = STOPPED, conflicted_paths(o.detail)
                    continue
                self._materialize(i)
                return st.phase
            self.save()
        st.phase = READY
        self.save()
        return st.phase

    def _materialize(self, i: int) -> None:
        """Put the conflict in the work tree the way git does (markers, unmerged index entries)."""
        st, wt = self.st, self.repo
        _g(wt, "checkout", "-q", "-f", "--detach", st.head)
        _g(wt, "reset", "-q", "--hard", st.head)
        _g(wt, "clean", "-fdq")
        res = _g(wt, "apply", "--3way", str(self.patch_file(i)), check=False)
        if res.status != 0 and not self._unmerged():
            # no 3-way base for some file: apply what fits, the rest as .rej files (like git am)
            _g(wt, "reset", "-q", "--hard", st.head)
            _g(wt, "apply", "--reject", str(self.patch_file(i)), check=False)
        ps = st.patches[i]
        unmerged, rejects = self._unmerged(), self._rejects()
        ps.action, ps.conflict_files = STOPPED, unmerged + rejects
        if unmerged or rejects or ps.applies != absorption.ALREADY_UPSTREAM:
            ps.detail = judge_note(ps, "3-way merge left conflict markers" if unmerged else "",
                                   "hunks with no 3-way base are in .rej files" if rejects else "")
        st.phase, st.current = CONFLICT_PHASE, i
        self.save()

    def _unmerged(self) -> list[str]:
        out = _g(self.repo, "diff", "--name-only", "--diff-filter=U", "-z").stdout
        return sorted(set(x for x in out.split("\0") if x))

    def _rejects(self) -> list[str]:
        out = _g(self.repo, "ls-files", "--others", "--exclude-standard", "-z").stdout
        return sorted(x for x in out.split("\0") if x.endswith(".rej"))

    def unresolved(self) -> list[str]:
        """Files of the work tree that still hold conflict markers or are .rej files."""
        wt = self.repo
        changed = _g(wt, "diff", "--name-only", "-z", self.st.head).stdout.split("\0")
        others = _g(wt, "ls-files", "--others", "--exclude-standard", "-z").stdout.split("\0")
        bad = set(self._rejects())
        for rel in set(changed + others + self.st.patches[self.st.current].conflict_files) - {""}:
            f = wt / rel
            if f.is_file() and not f.is_symlink() and _MARKER.search(f.read_bytes()):
                bad.add(rel)
        return sorted(bad)

    def resolve(self) -> None:
        """--continue after a human resolved the stopped patch: commit the work tree."""
        st, wt = self.st, self.repo
        i = st.current
        ps, p = st.patches[i], self.patches[i]
        bad = self.unresolved()
        if bad:
            raise CheckFailed(f"unresolved conflicts in {', '.join(bad)} (in {wt}): resolve them and run "
                              f"lucepatch rebase {st.target} --continue again, or --skip {ps.slug_hint}")
        _g(wt, "add", "-u")
        paths = [x for x in p.files if (wt / x).exists() or (wt / x).is_symlink()]
        if paths:
            _g(wt, "add", "--", *paths)
        left = self._unmerged()
        if left:
            raise CheckFailed(f"{', '.join(left)} still unmerged in {wt}: git add (or git rm) them, then --continue")
        tree = odb.write_tree(wt, env=_GIT_ENV)
        if tree == git.tree_of(wt, st.head):
            raise CheckFailed(f"nothing to commit for {ps.name}: the work tree equals the base plus the patches before "
                              f"it; if the patch is no longer needed, lucepatch rebase {st.target} --skip {ps.slug_hint}")
        msg = commit_message(p, series_trailers(self.t, p))
        who = {"GIT_AUTHOR_NAME": "lucepatch", "GIT_AUTHOR_EMAIL": "lucepatch@localhost", **patch_author(p)}
        commit = odb.commit_tree(wt, tree, st.head, msg, env={**_GIT_ENV, **who})
        ps.action, ps.commit, ps.conflict_files = RESOLVED, commit, []
        ps.detail = "resolved by hand in the session work tree"
        prev = st.head
        st.head, st.phase, st.current = commit, WALKING, None
        self._state = None
        if not self._accept(i, prev):
            raise CheckFailed(f"{ps.name}: {ps.verify.get('detail', 'the check failed')} — fix the resolution in {wt} "
                              f"and run lucepatch rebase {st.target} --continue again, or --skip {ps.slug_hint}")
        self.save()

    # ---- what the session accepts (issue 36): a 3-way merge or a hand resolution is built and its
    # scenarios run before the walk moves on
    checker: Callable | None = None  # (session, index) -> the journal entry {"state", "detail", ...}

    def _accept(self, i: int, prev: str) -> bool:
        """Check patch i just carried onto `prev` (3-way or by hand); False: rejected, the session is
        stopped at it with the merged or resolved content in the work tree for a human."""
        st, ps = self.st, self.st.patches[i]
        if not st.options.get("verify", True):
            ps.verify = {"state": "skipped", "detail": "not built or run: --no-verify (check it before a PR: "
                                                        f"lucepatch verify --all --target {st.target})"}
        elif self.checker is None:
            ps.verify = {"state": "not-run", "detail": "no checker was handed to this session"}
        else:
            ps.verify = self.checker(self, i)
        ps.detail = (ps.detail + "; " if ps.detail else "") + f"{ps.verify['state']}: {ps.verify['detail']}"[:400]
        if ps.verify["state"] != "rejected":
            return True
        # back to the patch before it; its content in the work tree (unstaged), as a human resolves it
        rejected = ps.commit
        st.head, self._state = prev, None
        _g(self.repo, "checkout", "-q", "-f", "--detach", rejected)
        _g(self.repo, "reset", "-q", prev)
        ps.action, ps.commit = STOPPED, None
        ps.conflict_files = [x for x in self.patches[i].files if (self.repo / x).exists()]
        st.phase, st.current = CONFLICT_PHASE, i
        self.save()
        return False

    def reject(self, name: str) -> None:
        """A person rejects an absorption (the terminal's answer before the walk)."""
        p = find_patch(self.patches, name, where=f"the rebase session of {self.st.target}")
        reject_absorption(self.st, self.patches.index(p))
        self.save()

    def confirm(self, name: str) -> None:
        p = find_patch(self.patches, name, where=f"the rebase session of {self.st.target}")
        confirm_absorption(self.st, self.patches.index(p))
        self.save()

    def skip(self, name: str) -> bool:
        """--skip NAME; True when the walk should go on (the stopped patch was skipped)."""
        st = self.st
        p = find_patch(self.patches, name, where=f"the rebase session of {st.target}", flag="--skip")
        i = self.patches.index(p)
        ps = st.patches[i]
        if ps.action not in (PENDING, STOPPED):
            raise UsageError(f"--skip {name}: {ps.name} is already {ps.action} in this session; --abort and start again "
                             "to change that")
        if st.phase == CONFLICT_PHASE and st.current == i:
            _g(self.repo, "reset", "-q", "--hard", st.head)
            _g(self.repo, "clean", "-fdq")
            st.phase, st.current = WALKING, None
        skipped(ps, st.onto)
        self.save()
        return st.phase != CONFLICT_PHASE

    def recover_interrupted(self) -> None:
        """Before resuming: the recorded head is the truth, whatever a killed step left behind —
        including the locks a killed git left in the session's private repository."""
        self._state = None
        self._patches = None
        clear_private_locks(self.root)
        if self.st.phase == WRITING:
            transaction.recover(Path(self.st.target_dir).parent)

    # ---- completion
    def plan(self) -> dict:
        """What the workspace will hold: {"files", "absorbed", "series", "bump", ...}."""
        st, t = self.st, self.t
        fresh = {}
        if st.head != st.walk_base:
            for fpath, _pid, commit in format_commits(self.repo, st.walk_base, st.head, self.root / "export"):
                fresh[commit] = fpath.read_bytes()
        files, absorbed, dropped, kinds, rows = {}, {}, {}, set(), []
        if st.base != st.onto:
            kinds.add("major")
        for ps, p in zip(st.patches, self.patches):
            row = ps.to_json()
            mine = session_subs.own(t, p.name) if st.subs else None  # a moving sub-target's, as its files hold it
            if ps.action in KEPT:
                if mine is None:
                    new = trailers.replace_diff(p.raw, fresh[ps.commit])
                else:
                    new = trailers.replace_diff(mine.raw, session_subs.own_export(
                        self.repo, ps.commit, session_subs.at_onto(st.subs, p.name), self.root / "export-own"))
                was = mine or p
                newp = parse_patch_bytes(new, was.path, was.name)
                row["new_patch_id"] = newp.patch_id
                if ps.backport or newp.patch_id != was.patch_id:  # a patch added (backport) or changed
                    kinds.add("minor")
                elif new != was.raw:
                    kinds.add("patch")
                files[p.name] = new
            elif ps.action == SKIPPED and not (ps.absorption or {}).get("state") == absorption.ALREADY_UPSTREAM:
                # a person's decision, not upstream's: no Applied-Upstream (the one judge found no code signal)
                dropped[p.name] = with_trailers(mine or p, [f"Dropped-At: {st.onto}",
                                                            f"Dropped-Why: {dropped_why(ps, st.onto)}"])
                kinds.add("minor")
            elif ps.action in LEFT:
                absorbed[p.name] = with_trailers(mine or p, [f"Applied-Upstream: {ps.upstream_commit or st.onto}",
                                                             f"Applied-Upstream-Signal: {left_signal(ps)}"])
                kinds.add("minor")
            rows.append(row)
        if st.subs:  # a sub-target that moves changes what the series is applied to
            kinds.add("major")
        bump = next((k for k in ("major", "minor", "patch") if k in kinds), "none")
        new_version = bump_version(st.old_version, bump if bump != "none" else None)
        if st.new_line:
            bump, new_version = "new line", "1.0.0"
        range_diff = ""
        if st.old_head != st.old_base or st.head != st.walk_base:
            range_diff = _g(self.repo, "range-diff", "--no-color", f"{st.old_base}..{st.old_head}",
                            f"{st.walk_base}..{st.head}", check=False).stdout
        # what the move takes along (engine/rebase.py after_move): messages citing what it changed,
        # the scenarios upstream fixed (regression guards now), [serves] for the new base
        review, guards, serves, said = {}, {}, None, ""
        if st.base != st.onto:
            own = len(self.t.patches)
            kept = [(parse_patch_bytes(files[p.name], p.path, p.name), ps.action == RESOLVED or ps.applies == "3-way")
                    for n, (ps, p) in enumerate(zip(st.patches, self.patches)) if n < own and p.name in files]
            review = stale.review_entries(stale.Move(self.repo, st.base, st.onto), kept)
            guards = {k: v for ps in st.patches if ps.action in KEPT
                      for k, v in (ps.verify.get("fixed_upstream") or {}).items()}
            serves, said = serves_at(t, st.target, st.onto)
        for row in rows:
            row["stale"] = (review.get(row["name"]) or {}).get("statements", [])
        notes = [f"{len(review)} patch message(s) cite what the move changed ({', '.join(review)}): edit them "
                 f"(review.toml lists each sentence); lucepatch pr refuses them until then"] if review else []
        notes += [said] if said else []
        notes += [f"regression guard(s) from what upstream fixed: {', '.join(guards)}"] if guards else []
        return {"files": files, "absorbed": absorbed, "dropped": dropped, "bump": bump, "new_version": new_version,
                "range_diff": range_diff, "rows": rows, "review": review, "guards": guards, "serves": serves,
                "notes": notes}

    def write(self, plan: dict) -> None:
        """The one workspace write: swap in the new target folder, then drop the session."""
        st = self.st
        target_dir = Path(st.target_dir)
        if st.phase == WRITING and st.result_snapshot is not None and target_dir.is_dir() and \
                transaction.snapshot(target_dir) == st.result_snapshot:
            self.store.remove()  # killed after the swap: the workspace already holds the result
            return
        st.phase = WRITING
        self.save()

        def on_staged(snap):
            st.result_snapshot = snap
            self.save()
            pause_at("write")

        build = lambda d: build_target_dir(d, self.t, st, plan)  # noqa: E731
        try:
            if st.new_line:
                transaction.create_dir(target_dir, build, source=self.t.dir, cache=self.cache, before_swap=on_staged)
            else:
                transaction.replace_dir(target_dir, build, expect=st.snapshot, cache=self.cache, before_swap=on_staged)
        except BaseException:  # any interruption (signals too): undo, then re-raise
            if st.result_snapshot is not None and transaction.snapshot(target_dir) == st.result_snapshot:
                self.store.remove()  # interrupted after the swap: the write is complete
            else:
                st.phase, st.result_snapshot = READY, None
                self.save()
            raise
        self.store.remove()


def ask_absorbed(sess: Session, ps: PatchState) -> str:
    """Interactive mode: a patch absorbed by a code signal alone (nothing measured) — drop it or keep it?"""
    import click  # lazy: the library (lucepatch.api) never loads click (tests/test_api.py), 6 ms

    report.err.print(f"{ps.name}: {ps.detail}", markup=False)
    return click.prompt("drop it (upstream has it) or keep it (carry it)", err=True,
                        type=click.Choice(["drop", "keep"]), default="drop")


def ask_human(sess: Session) -> str:
    """Interactive mode (a terminal, no --no-interactive): what to do about the stopped patch."""
    import click  # lazy: the library (lucepatch.api) never loads click (tests/test_api.py), 6 ms

    report.table(f"rebase {sess.st.target}: stopped", TABLE_COLUMNS, table_rows(summary(sess.st, sess.store)))
    report.err.print(describe(sess.st, sess.store), markup=False)
    return click.prompt("continue, skip, abort or quit (keep the session)", err=True,
                        type=click.Choice(["continue", "skip", "abort", "quit"]), default="continue")


def run_until_stop(sess: Session, on_conflict: Callable[[Session], str] | None = None) -> str:
    """Walk; at a conflict ask `on_conflict` (interactive mode: continue/skip/abort/quit)."""
    while True:
        phase = sess.walk()
        if phase != CONFLICT_PHASE or on_conflict is None:
            return phase
        while True:
            choice = on_conflict(sess)
            if choice == "continue":
                try:
                    sess.resolve()
                    break
                except CheckFailed as exc:
                    report.progress(str(exc))
                    continue
            if choice == "skip":
                sess.skip(sess.st.patches[sess.st.current].name)
                break
            return choice  # abort / quit


def conflicted_paths(detail: str) -> list[str]:
    """The files git apply names in its account of a conflict: `U path` (3-way markers), `patch
    failed: path:N`, `path: does not exist` / `patch does not apply` / `already exists`."""
    found = re.findall(r"(?:^|; |\n)U (\S+)", detail) + re.findall(r"patch failed: (\S+?):\d+", detail) + \
        re.findall(r"error: (\S+?): (?:does not exist|patch does not apply|already exists)", detail)
    return list(dict.fromkeys(found))


def dry_run(cache: Path, t: Target, source: Path, onto_ref: str, opts: Options, *, fetch: bool = False) -> dict:
    """Walk the whole series (a conflict does not stop it) in a throwaway area; nothing kept."""
    with WorkArea(cache, f"rebase-{t.name}") as work:
        sess = Session.start(cache, t, source, onto_ref, opts, fetch=fetch, where=work.path / "session")
        sess.walk(stop_at_conflict=False)
        stopped = any(p.action == STOPPED for p in sess.st.patches)
        doc = summary(sess.st, None, None if stopped else sess.plan())
        # a dry run stops nowhere: a conflicting patch is one a real session would stop at
        for r in doc["patches"]:
            if r["action"] == STOPPED:
                r["action"] = "would stop"
        return doc
