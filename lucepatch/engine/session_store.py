"""What a rebase session is on disk (engine/session.py drives it): its state — phase, bases, per patch
`applies`, `needed`, action and commit — written atomically after every step, the store that holds
it with its lock (one session per workspace target and cache), the line other verbs print about an
open session, and the session as a document (`rebase --json`, its table).

On disk, per (cache, workspace target folder):
    <cache>/rebase/<target>-<key>.lock    flock held by the process running a step (pid inside)
    <cache>/rebase/<target>-<key>/
        state.json      phase, base/onto/direction, per patch: applies, needed, action, commit
        original/<t>/   the target folder as it was at start (the session reads only this)
        worktree/       the private clone; its work tree holds the conflict being resolved
        engine.index    the series engine's private index (machine steps never touch worktree/)
"""

from __future__ import annotations

import datetime as _dt
import fcntl
import hashlib
import json
import os
import re
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path

from lucepatch.engine import needed as needed_mod
from lucepatch.engine.checkout import pid_alive
from lucepatch.errors import UsageError
from lucepatch.target import Target

SCHEMA = 1
FORWARD, BACK, SIDEWAYS, NONE = "forward", "back", "sideways", "none"
# per-patch actions
PENDING, STOPPED, CARRIED, RESOLVED, ABSORBED, SKIPPED, DROPPED = (
    "pending", "stopped", "carried", "resolved", "absorbed", "skipped", "dropped")
KEPT = (CARRIED, RESOLVED)
LEFT = (ABSORBED, SKIPPED, DROPPED)
WALKING, CONFLICT_PHASE, READY, WRITING = "walking", "conflict", "ready", "writing"


@dataclass
class PatchState:
    name: str
    patch_id: str
    sha256: str
    action: str = PENDING
    applies: str | None = None  # exact | 3-way | already-upstream | conflict
    signal: str | None = None  # why absorbed: patch-id, backport, reverse-apply, content-match, 3-way, ...
    upstream_commit: str | None = None
    needed: dict = field(default_factory=lambda: needed_mod.Judgement().to_json())
    commit: str | None = None  # its commit on the new base
    detail: str = ""
    conflict_files: list[str] = field(default_factory=list)
    backport: str | None = None  # the upstream commit, for patches the session made with --backport
    # what the session checked before accepting a 3-way merge or a hand resolution (issue 36): state
    # accepted | rejected | not-run | skipped (--no-verify), the builds, the scenarios and their runs
    verify: dict = field(default_factory=dict)
    absorption: dict | None = None  # the one judge's finding at the new base and its decision (engine/absorption.py)

    @property
    def slug_hint(self) -> str:
        return self.name[:-6] if self.name.endswith(".patch") else self.name

    def to_json(self) -> dict:
        return asdict(self)


@dataclass
class State:
    target: str
    target_dir: str
    source: str
    base: str
    onto: str
    onto_ref: str
    direction: str
    old_version: str
    old_head: str
    head: str
    snapshot: dict
    patches: list[PatchState]
    options: dict = field(default_factory=dict)
    phase: str = WALKING
    current: int | None = None
    pid: int | None = None
    started: str = ""
    updated: str = ""
    result_snapshot: dict | None = None
    warnings: list[str] = field(default_factory=list)
    new_line: str | None = None  # --line NAME: the result is a new target folder of the family
    # sub-targets whose place moves between base and onto (engine/session_subs.py), walked in the
    # flattened trees: flat_base/flat_onto are those trees' commits (None: no sub-target moves)
    subs: list = field(default_factory=list)
    flat_base: str | None = None
    flat_onto: str | None = None

    @property
    def old_base(self) -> str:
        """Where the old series' chain starts (the base, flattened when a sub-target moves)."""
        return self.flat_base or self.base

    @property
    def walk_base(self) -> str:
        """Where the walk starts (onto, flattened when a sub-target moves)."""
        return self.flat_onto or self.onto

    def to_json(self) -> dict:
        d = asdict(self)
        d["patches"] = [p.to_json() for p in self.patches]
        return {"schema_version": SCHEMA, "kind": "lucepatch-rebase-session", **d}

    @classmethod
    def from_json(cls, doc: dict) -> "State":
        if doc.get("kind") != "lucepatch-rebase-session" or doc.get("schema_version") != SCHEMA:
            raise UsageError("the rebase session state is from another lucepatch version; --abort it")
        doc = {k: v for k, v in doc.items() if k not in ("schema_version", "kind")}
        doc["patches"] = [PatchState(**p) for p in doc["patches"]]
        return cls(**doc)


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat()


# ---------------------------------------------------------------------------------- the store
class Store:
    """Where the session of one workspace target lives in one cache, and its lock."""

    def __init__(self, cache: Path, target_dir: Path, name: str):
        self.root = Path(cache) / "rebase"
        key = hashlib.sha256(str(Path(target_dir).resolve()).encode()).hexdigest()[:12]
        self.key = f"{name}-{key}"
        self.dir = self.root / self.key
        self.lock_path = self.root / f"{self.key}.lock"
        self._fd: int | None = None

    @property
    def state_path(self) -> Path:
        return self.dir / "state.json"

    @property
    def worktree(self) -> Path:
        return self.dir / "worktree"

    def exists(self) -> bool:
        return self.state_path.is_file()

    def holder(self) -> int | None:
        """pid of a live process holding the lock, else None."""
        try:
            pid = int(self.lock_path.read_text().strip() or 0)
        except (OSError, ValueError):
            return None
        if not pid_alive(int(pid or 0)) or pid == os.getpid():
            return None
        try:
            fd = os.open(self.lock_path, os.O_RDWR)
        except OSError:
            return None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            fcntl.flock(fd, fcntl.LOCK_UN)
            return None
        except BlockingIOError:
            return pid
        finally:
            os.close(fd)

    def lock(self, what: str) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            pid = self.lock_path.read_text().strip() or "?"
            raise UsageError(f"another lucepatch process (pid {pid}) is running a step of the rebase session of "
                             f"{what}; wait for it to finish (or stop it) and run again")
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())
        self._fd = fd
        self.clean_leftovers()

    def unlock(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def clean_leftovers(self) -> None:
        """Remove half-started and half-aborted sessions whose process is gone."""
        for p in self.root.iterdir() if self.root.is_dir() else []:
            m = re.match(r"^\.(.+)\.(starting|aborted)-(\d+)$", p.name)
            if m and m.group(1) == self.key and not pid_alive(int(m.group(3))):
                shutil.rmtree(p, ignore_errors=True)

    def read(self) -> State:
        try:
            return State.from_json(json.loads(self.state_path.read_text()))
        except (OSError, ValueError, TypeError, KeyError) as exc:
            raise UsageError(f"the rebase session state {self.state_path} is unreadable ({exc}); --abort it")

    def write(self, st: State, where: Path | None = None) -> None:
        st.updated = _now()
        path = (where or self.dir) / "state.json"
        tmp = path.with_name(f".state.{os.getpid()}.tmp")
        with open(tmp, "w") as f:
            json.dump(st.to_json(), f, indent=1, sort_keys=True)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)

    def remove(self) -> None:
        if not self.dir.exists():
            return
        gone = self.root / f".{self.key}.aborted-{os.getpid()}"
        os.rename(self.dir, gone)  # atomic: the session is either whole or gone
        shutil.rmtree(gone, ignore_errors=True)


def describe(st: State, store: Store) -> str:
    """One line: where the session is and what to run next."""
    t = st.target
    done = sum(p.action not in (PENDING, STOPPED) for p in st.patches)
    where = f"{done}/{len(st.patches)} patches decided, {st.direction} onto {st.onto[:12]}"
    holder = store.holder()
    if holder:
        return f"a rebase session of {t} is running in pid {holder} ({where})"
    if st.phase == CONFLICT_PHASE and st.current is not None:
        p = st.patches[st.current]
        return (f"a rebase session of {t} is stopped at patch {st.current + 1} {p.name} for a human ({where}): "
                f"resolve it in {store.worktree}, then lucepatch rebase {t} --continue (or --skip {p.slug_hint}, "
                f"or --abort)")
    how = "completing" if st.phase in (READY, WRITING) else "walking the series"
    return (f"a rebase session of {t} was interrupted while {how} ({where}; pid {st.pid or '?'} is gone): "
            f"lucepatch rebase {t} --continue to resume, or --abort")


def notice(cache: Path, t: Target) -> str | None:
    """The line other verbs print when the target has an open session (None when it has none)."""
    store = Store(cache, t.dir, t.name)
    if not store.exists():
        return None
    try:
        return describe(store.read(), store)
    except UsageError as exc:
        return str(exc)


# ---------------------------------------------------------------------------- the document
def summary(st: State, store: Store | None, plan: dict | None = None, *, written: bool = False) -> dict:
    """The JSON document of `rebase` (and the rows of its table)."""
    rows = plan["rows"] if plan else [p.to_json() for p in st.patches]
    doc = {"target": st.target, "base": st.base, "onto": st.onto, "onto_ref": st.onto_ref, "direction": st.direction,
           "phase": "written" if written else st.phase, "old_version": st.old_version,
           "new_version": plan["new_version"] if plan else None, "bump": plan["bump"] if plan else None,
           "written": written, "patches": rows, "warnings": st.warnings + (plan.get("notes", []) if plan else []),
           "conflicts": [r["name"] for r in rows if r["applies"] == "conflict" and r["action"] == STOPPED],
           "range_diff": plan["range_diff"] if plan else ""}
    if store is not None and not written:
        doc["session"] = {"path": str(store.dir), "worktree": str(store.worktree), "state": str(store.state_path),
                          "current": st.patches[st.current].name if st.current is not None else None}
    return doc


def table_rows(doc: dict) -> list[list]:
    out = []
    for i, r in enumerate(doc["patches"], 1):
        n = r["needed"]
        by = {True: " (simulated driver)", False: " (real driver)"}.get(n.get("simulated"), "")
        why = r["signal"] + (f" {r['upstream_commit'][:12]}" if r.get("upstream_commit") else "") if r["signal"] else ""
        # the conflicting files in a column of their own: whole (a path is what the user opens next)
        out.append([i, r["name"], r["applies"] or "-", why, n["needed"] + by, r["action"], r["detail"],
                    ", ".join(r["conflict_files"])])
    return out


TABLE_COLUMNS = ["#", "patch", "applies", "signal", "needed", "action", "detail", "conflicts"]


def title(doc: dict) -> str:
    bump = f" -> {doc['new_version']} ({doc['bump']})" if doc.get("new_version") else ""
    return (f"rebase {doc['target']} {doc['old_version']}{bump}: {doc['direction']} from {doc['base'][:12]} onto "
            f"{doc['onto'][:12]} ({doc['onto_ref']})")
