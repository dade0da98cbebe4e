"""Where a sub-target lives in a superproject commit, and its patches moved there.

A `[[submodule]]` of target.toml names a path of the superproject whose code carries a series of its
own (series_dir). Upstream may hold that code as a submodule (a gitlink), as a plain folder (vendored,
as Lucebox did with llama.cpp in 2026-07), or not at all, and may move a submodule to another path.
Its place is read from each commit's tree, never assumed from target.toml:

    submodule  a gitlink at the declared path, or at the path `.gitmodules` gives a submodule with
               the same URL or name (moved); its series applies in the submodule's checkout at
               the gitlink's commit
    folder     a tree at the declared path; its series applies in the superproject, every path
               re-rooted under that folder
    absent     neither; re-rooted like a folder, its patches then meet no files (a conflict, named)

A patch file always stays in the sub-target's own coordinates (paths relative to its root), so the
same file serves a line where the code is a submodule and one where it is vendored. `reroot` moves a
patch's paths (diff headers only; hunks are content) and gives a Patch of its own: patch-id,
safety checks, 3-way preimages and matrix paths all follow the moved paths.

`flatten` builds, for the rebase session, the superproject tree with every moving sub-target's
gitlink replaced by the submodule's tree at that commit: one walk then carries the superproject's
series and the sub-targets' re-rooted series across a submodule that became a folder, and back.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from lucepatch import git, odb
from lucepatch.errors import EnvironmentMissing, UsageError
from lucepatch.series import Patch, parse_patch_bytes
from lucepatch.target_sections import Submodule

SUBMODULE, FOLDER, ABSENT = "submodule", "folder", "absent"
LAYOUTS = (SUBMODULE, FOLDER)  # what target.toml may declare a sub-target is at the base
_GITLINK, _TREE = "160000", "40000"


@dataclass(frozen=True)
class Place:
    """A sub-target in one superproject commit."""

    kind: str  # SUBMODULE | FOLDER | ABSENT
    path: str  # where it is in that commit (the declared path unless a submodule moved)
    declared: str  # target.toml's path
    commit: str | None = None  # the gitlink's commit (SUBMODULE)

    @property
    def moved(self) -> bool:
        return self.path != self.declared

    @property
    def in_superproject(self) -> bool:
        """Its series applies in the superproject (re-rooted), not in a submodule checkout."""
        return self.kind != SUBMODULE

    def describe(self) -> str:
        if self.kind == SUBMODULE:
            return f"submodule at {self.path}" + (f" (moved from {self.declared})" if self.moved else "") + \
                f" @ {self.commit[:12]}"
        if self.kind == FOLDER:
            return f"folder {self.path}/ of the superproject"
        return f"not in the superproject ({self.declared} absent)"

    def to_json(self) -> dict:
        return {"layout": self.kind, "at": self.path, "declared": self.declared, "commit": self.commit,
                "moved": self.moved}


def entries(repo: Path, commits: list[str], path: str) -> list[tuple[str, str] | None]:
    """(mode, id) of the entry at `path` in each commit (None: absent), one git process for all:
    the tree holding `path` is read and its entry looked up. (`C:path` cannot be asked for a
    gitlink: its commit is not in the superproject's objects and reads "missing" like an absent
    path.)"""
    if not commits:
        return []
    parent, _, name = path.strip("/").rpartition("/")
    specs = [f"{c}:{parent}" if parent else f"{c}^{{tree}}" for c in commits]
    want = name.encode("utf-8", "surrogateescape")
    oid_bytes = 32 if len(commits[0]) == 64 else 20
    out: list[tuple[str, str] | None] = []
    for found in odb.read_specs(repo, specs):
        out.append(_tree_entry(found[1], want, oid_bytes) if found and found[0] == "tree" else None)
    return out


def _tree_entry(tree: bytes, name: bytes, oid_len: int) -> tuple[str, str] | None:
    i = 0
    while i < len(tree):
        sp = tree.index(b" ", i)
        nul = tree.index(b"\0", sp)
        mode, entry = tree[i:sp], tree[sp + 1:nul]
        oid = tree[nul + 1:nul + 1 + oid_len]
        i = nul + 1 + oid_len
        if entry == name:
            return mode.decode(), oid.hex()
    return None


def _norm_url(u: str) -> str:
    u = u.strip().rstrip("/").removesuffix(".git").lower()
    u = re.sub(r"^(?:https?|ssh|git)://(?:[^@/]+@)?", "", u)
    return re.sub(r"^[^@/]+@([^:/]+):", r"\1/", u)


def gitmodules(repo: Path, commit: str) -> list[dict]:
    """The submodules `.gitmodules` declares in `commit`: [{name, path, url}] (empty without one)."""
    res = git.run(repo, "config", "--blob", f"{commit}:.gitmodules", "-z", "--get-regexp",
                  r"^submodule\..*\.(path|url)$", check=False, env={"GIT_OPTIONAL_LOCKS": "0"})
    subs: dict[str, dict] = {}
    for item in res.stdout.split("\0") if res.status == 0 else []:
        key, _, value = item.partition("\n")
        m = re.match(r"^submodule\.(.*)\.(path|url)$", key)
        if m:
            subs.setdefault(m.group(1), {"name": m.group(1)})[m.group(2)] = value
    return [s for s in subs.values() if s.get("path")]


def _moved_to(repo: Path, commit: str, sub: Submodule) -> str | None:
    """The path `.gitmodules` of `commit` gives a submodule with `sub`'s URL (or, without a URL to
    compare, its name's last part), when that is not the declared path."""
    for s in gitmodules(repo, commit):
        same = (sub.url and s.get("url") and _norm_url(s["url"]) == _norm_url(sub.url)) or \
            (not sub.url and s["name"].rsplit("/", 1)[-1] == sub.label)
        if same and s["path"].strip("/") != sub.path.strip("/"):
            return s["path"].strip("/")
    return None


def places(repo: Path, commits: list[str], sub: Submodule) -> list[Place]:
    """Where `sub` is in each superproject commit (see the module's docstring)."""
    declared = sub.path.strip("/")
    out: list[Place] = []
    for c, e in zip(commits, entries(repo, commits, declared)):
        if e and e[0] == _GITLINK:
            out.append(Place(SUBMODULE, declared, declared, e[1]))
        elif e and e[0] == _TREE:
            out.append(Place(FOLDER, declared, declared))
        else:
            other = _moved_to(repo, c, sub) if e is None else None
            link = entries(repo, [c], other)[0] if other else None
            if link and link[0] == _GITLINK:
                out.append(Place(SUBMODULE, other, declared, link[1]))
            else:
                out.append(Place(ABSENT, declared, declared))
    return out


def place(repo: Path, commit: str, sub: Submodule) -> Place:
    return places(repo, [commit], sub)[0]


def checkout_of(superproject: Path, sub: Submodule, at: Place | None = None) -> Path | None:
    """The initialised checkout holding the submodule's objects: at its declared path, else where
    `at` (a moved submodule) says; None when neither is initialised."""
    for rel in dict.fromkeys([sub.path, at.path if at else sub.path]):
        p = Path(superproject) / rel
        if (p / ".git").exists():
            return p
    return None


def objects_of(checkout: Path) -> Path:
    """The objects folder of a checkout (a submodule's lives in the superproject's .git/modules/)."""
    res = git.run(checkout, "rev-parse", "--git-common-dir", env={"GIT_OPTIONAL_LOCKS": "0"})
    return (Path(checkout) / res.stdout.strip()).resolve() / "objects"


# ---------------------------------------------------------------------------------- re-rooting
def _move(path: bytes, old: bytes, new: bytes, where: str) -> bytes:
    """One path of a header: `a/<old>X` -> `a/<new>X` (quoted or not)."""
    quoted = path.startswith(b'"')
    body = path[1:] if quoted else path
    side = b""
    if body[:2] in (b"a/", b"b/"):
        side, body = body[:2], body[2:]
    if old and not body.startswith(old):
        raise UsageError(f"{where}: {body.decode('utf-8', 'replace')} is not under {old.decode().rstrip('/')}/; "
                         "a sub-target's patch may only touch files inside it")
    return (b'"' if quoted else b"") + side + new + body[len(old):]


def _split_paths(rest: bytes) -> list[bytes]:
    """The two paths of `diff --git A B` (quoted paths may hold spaces)."""
    if rest.startswith(b'"'):
        end = rest.index(b'" ', 1) + 1
        return [rest[:end], rest[end + 1:]]
    mid = rest.find(b" b/")
    if mid < 0:
        raise UsageError(f"cannot read the paths of 'diff --git {rest.decode('utf-8', 'replace')}'")
    return [rest[:mid], rest[mid + 1:]]


def reroot_diff(diff: bytes, old: str, new: str, *, where: str = "patch") -> bytes:
    """The diff with every path moved from under `old` to under `new` ('' = the repository root):
    `diff --git`, `---`/`+++`, rename/copy and binary headers; hunk lines are content and kept."""
    o = (old.strip("/") + "/").encode() if old.strip("/") else b""
    n = (new.strip("/") + "/").encode() if new.strip("/") else b""
    out, in_header = [], False
    for line in diff.split(b"\n"):
        if line.startswith(b"diff --git "):
            in_header = True
            a, b = _split_paths(line[len(b"diff --git "):])
            line = b"diff --git " + _move(a, o, n, where) + b" " + _move(b, o, n, where)
        elif in_header and line.startswith((b"@@ ", b"GIT binary patch")):
            in_header = False
        elif in_header and line.startswith((b"--- ", b"+++ ")):
            p = line[4:]
            line = line[:4] + (p if p == b"/dev/null" else _move(p, o, n, where))
        elif in_header and line.startswith((b"rename from ", b"rename to ", b"copy from ", b"copy to ")):
            key, p = line.rsplit(b" ", 1) if b'"' not in line else line.split(b' "', 1)
            line = key + b" " + _move(p if b'"' not in line else b'"' + p, o, n, where)
        elif in_header and line.startswith(b"Binary files "):
            m = re.match(rb"^Binary files (.*) and (.*) differ$", line)
            if m:
                line = b"Binary files " + b" and ".join(
                    p if p == b"/dev/null" else _move(p, o, n, where) for p in m.groups()) + b" differ"
        out.append(line)
    return b"\n".join(out)


def reroot(patch: Patch, old: str, new: str, *, name: str | None = None) -> Patch:
    """`patch` with its paths moved from under `old` to under `new` (its message kept), named
    `name` (default: its own). Same author, message and trailers; its own patch-id."""
    if old.strip("/") == new.strip("/"):
        return patch if name in (None, patch.name) else parse_patch_bytes(patch.raw, patch.path, name)
    diff = reroot_diff(patch.diff, old, new, where=str(patch.path))
    head = patch.raw[: len(patch.raw) - len(patch.diff)] if patch.raw.endswith(patch.diff) else \
        patch.raw.split(b"diff --git ", 1)[0]
    return parse_patch_bytes(head + diff, patch.path, name or patch.name)


# ---------------------------------------------------------------------------------- flattening
def flatten(repo: Path, commit: str, links: dict[str, str], *, objects: dict) -> str:
    """A commit object (kept in `objects` until written) whose tree is `commit`'s with each gitlink
    of `links` ({path: submodule commit}) replaced by that submodule commit's tree, and whose
    parent is `commit`; `commit` itself when `links` is empty. The submodules' objects must be
    readable from `repo` (alternates)."""
    if not links:
        return commit
    algo = "sha256" if len(commit) == 64 else "sha1"
    tree = odb.Tree(odb.listing(repo, commit), algo)
    for path, sub_commit in links.items():
        found = odb.read_specs(repo, [f"{sub_commit}^{{tree}}"])[0]
        if found is None:
            raise EnvironmentMissing(f"commit {sub_commit[:12]} of submodule {path} is not in the objects lucepatch "
                                     "can read; fetch it in the submodule's checkout")
        # a folder given by id: Tree.write reads its id from `ids` and never rebuilds it (no `dirs` entry)
        tree.delete(path)
        tree.put(path, "040000", "")
        tree.ids[path] = odb.object_id("tree", found[1], algo)
    root = tree.write()
    objects.update(tree.new_objects)
    body = odb.commit_bytes(root, commit, "lucepatch <lucepatch@localhost> 0 +0000",
                            "lucepatch <lucepatch@localhost> 0 +0000",
                            "lucepatch: " + ", ".join(f"{p} as a folder at {c[:12]}" for p, c in links.items()) + "\n")
    oid = odb.object_id("commit", body, algo)
    objects[oid] = ("commit", body)
    return oid


__all__ = ["SUBMODULE", "FOLDER", "ABSENT", "LAYOUTS", "Place", "entries", "places", "place", "gitmodules",
           "checkout_of", "objects_of", "reroot", "reroot_diff", "flatten"]
