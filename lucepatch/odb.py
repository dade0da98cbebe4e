"""The git object layer: every git object lucepatch reads in bulk or writes itself goes through here.

git's own steps that write objects as a side effect (`git apply --cached`, `git commit`, `git am`,
`git stash`) stay git's; what lucepatch does with objects directly is here and nowhere else
(tests/test_odb.py checks the formats against git; tests/test_layers.py that no other module
writes objects):

- ids: `object_id` (sha1 or sha256, by the id length a repository uses);
- reads, one git process per batch: `read_blobs` (`cat-file --batch`), `read_specs` (`<rev>:<path>`
  specs, a missing one None), `batch_check` (ids and types, `cat-file --batch-check`), `read_file`;
  `listing` (a commit's whole tree, `ls-tree -r -t`);
- object bytes: `Tree` (a commit's tree as lucepatch changes it file by file: only the folders a
  change touched get new tree objects), `commit_bytes`;
- writes: `write_objects` (one pack and its index — two files, which the checkout switch copies as
  they are — or loose objects for sha256 ids), `write_pack`, `loose_bytes`; git's `commit-tree` and
  `write-tree` where git must make the object (`commit_tree`, `write_tree`);
- index files: `write_index` / `read_index` (version 2/3, stage and id only: what matrix's batches
  need without two git processes per round);
- between object stores: `copy_objects` (a private repository's new packs and loose objects into a
  checkout's store: a temporary name, then a rename, a pack before its index) and `objects_dir`.

This is the object model of the series engine (engine/fastapply.py applies patches in Python on a
`Tree`; engine/apply.py's TreeState writes what it made with `write_objects`), as git-revise keeps
its own small object model; GitPython (lucepatch/git.py) serves the repository questions (refs,
HEAD, config), which are not hot paths.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import struct
import zlib
from pathlib import Path

from lucepatch import git

RO = {"GIT_OPTIONAL_LOCKS": "0"}
PACK_LIMIT = 1 << 30  # larger sets of objects go loose (4-byte pack offsets); never for a patch series


# ---- ids ------------------------------------------------------------------------------------------
def algo_of(oid: str) -> str:
    """The hash a repository with ids like `oid` uses."""
    return "sha256" if len(oid) == 64 else "sha1"


def object_id(kind: str, body: bytes, algo: str = "sha1") -> str:
    h = hashlib.new(algo)
    h.update(f"{kind} {len(body)}\0".encode())
    h.update(body)
    return h.hexdigest()


# ---- reads ----------------------------------------------------------------------------------------
def _batch(repo: Path, specs: list[str]) -> list[tuple[list[bytes], bytes | None]]:
    """`cat-file --batch` of `specs`: per spec (its header words, its content or None when missing)."""
    out = git.run_bytes(repo, "cat-file", "--batch",
                        stdin="".join(f"{s}\n" for s in specs).encode("utf-8", "surrogateescape"), env=RO)
    res, pos = [], 0
    for _ in specs:
        nl = out.index(b"\n", pos)
        head = out[pos:nl].split()
        pos = nl + 1
        if len(head) != 3:  # "<spec> missing" (or ambiguous)
            res.append((head, None))
            continue
        size = int(head[2])
        res.append((head, out[pos:pos + size]))
        pos += size + 1
    return res


def read_blobs(repo: Path, oids) -> dict[str, bytes]:
    """{id: content} of blobs, one git process; ValueError naming an id that is no blob."""
    oids = sorted(set(oids))
    if not oids:
        return {}
    out = {}
    for head, data in _batch(repo, oids):
        if data is None or head[1] != b"blob":
            raise ValueError(head[0].decode("utf-8", "replace"))
        out[head[0].decode()] = data
    return out


def read_specs(repo: Path, specs: list[str]) -> list[tuple[str, bytes] | None]:
    """(type, content) of each `<rev>:<path>` (or id) spec, None where it is missing; one process."""
    return [None if data is None else (head[1].decode(), data) for head, data in _batch(repo, specs)]


def batch_check(repo: Path, specs: list[str]) -> list[tuple[str, str] | None]:
    """(id, type) of each spec, None where it is missing; one `cat-file --batch-check` process."""
    if not specs:
        return []
    out = git.run(repo, "cat-file", "--batch-check=%(objectname) %(objecttype)",
                  stdin="".join(f"{s}\n" for s in specs).encode("utf-8", "surrogateescape"), env=RO).stdout
    return [None if line.endswith(" missing") else tuple(line.split()[:2]) for line in out.splitlines()]


def read_file(repo: Path, rev: str, path: str) -> str | None:
    """The text of `path` in `rev`, None when it has none there."""
    res = git.run(repo, "cat-file", "-p", f"{rev}:{path}", check=False, env=RO)
    return res.stdout if res.status == 0 else None


def read_object(repo: Path, kind: str, oid: str) -> bytes:
    return git.run_bytes(repo, "cat-file", kind, oid, env=RO)


def hash_files(repo: Path, paths: list[str]) -> list[str]:
    """The blob ids files of `repo`'s work tree would get (nothing is written)."""
    if not paths:
        return []
    return git.run(repo, "hash-object", "--stdin-paths", stdin="\n".join(paths).encode() + b"\n", env=RO).stdout.split()


def listing(repo: Path, rev: str) -> str:
    """`ls-tree -r -t -z` of `rev`: every entry, folders included (what `Tree` is built from)."""
    return git.run(repo, "ls-tree", "-r", "-t", "-z", "--full-tree", rev, env=RO).stdout


# ---- object bytes ----------------------------------------------------------------------------------
class Tree:
    """The tree of a commit as lucepatch changes it file by file; tree objects are computed only
    for the folders a change touched (`ls-tree -r -t` gives the others' ids)."""

    def __init__(self, listing: str, algo: str = "sha1"):
        self.algo = algo
        self.dirs: dict[str, dict[str, tuple[str, str]]] = {"": {}}  # folder -> name -> (mode, id)
        self.dirty: set[str] = set()
        self.ids: dict[str, str] = {}
        self.new_objects: dict[str, tuple[str, bytes]] = {}  # id -> (kind, body) written by us
        for entry in listing.split("\0"):
            if not entry:
                continue
            meta, _, path = entry.partition("\t")
            mode, kind, oid = meta.split()
            parent, _, name = path.rpartition("/")
            self.dirs.setdefault(parent, {})[name] = (mode, oid)
            if kind == "tree":
                self.dirs.setdefault(path, {})
                self.ids[path] = oid

    def get(self, path: str) -> tuple[str, str] | None:
        parent, _, name = path.rpartition("/")
        return self.dirs.get(parent, {}).get(name)

    def is_dir(self, path: str) -> bool:
        return path in self.dirs

    def _touch(self, folder: str) -> None:
        while True:
            self.dirty.add(folder)
            if not folder:
                return
            folder = folder.rpartition("/")[0]

    def can_create(self, path: str) -> bool:
        """No entry there, no file where one of its folders goes (git apply refuses both)."""
        if self.get(path) is not None or self.is_dir(path):
            return False
        parts = path.split("/")
        for k in range(1, len(parts)):
            e = self.get("/".join(parts[:k]))
            if e is not None and e[0] != "040000":
                return False
        return True

    def put(self, path: str, mode: str, oid: str) -> None:
        parent, _, name = path.rpartition("/")
        if parent and parent not in self.dirs:
            self.put_dir(parent)
        self.dirs[parent][name] = (mode, oid)
        self._touch(parent)

    def put_dir(self, folder: str) -> None:
        parent, _, name = folder.rpartition("/")
        if parent and parent not in self.dirs:
            self.put_dir(parent)
        self.dirs.setdefault(folder, {})
        self.dirs[parent][name] = ("040000", "")
        self._touch(folder)

    def delete(self, path: str) -> None:
        parent, _, name = path.rpartition("/")
        del self.dirs[parent][name]
        self._touch(parent)
        while parent and not self.dirs[parent]:  # git drops folders that became empty
            del self.dirs[parent]
            self.ids.pop(parent, None)
            parent, _, name = parent.rpartition("/")
            del self.dirs[parent][name]
            self._touch(parent)

    def write(self) -> str:
        """The root tree's id; every changed folder's tree object is kept in new_objects."""
        for folder in sorted(self.dirty, key=lambda d: (-d.count("/") if d else 1, d)):
            if folder not in self.dirs:
                continue
            entries = self.dirs[folder]
            for name, (mode, oid) in list(entries.items()):
                if mode == "040000":
                    sub = f"{folder}/{name}" if folder else name
                    entries[name] = (mode, self.ids[sub])
            body = b"".join(
                f"{'40000' if mode == '040000' else mode} ".encode() + name.encode("utf-8", "surrogateescape") + b"\0"
                + bytes.fromhex(oid)
                for name, (mode, oid) in sorted(entries.items(), key=lambda e: _tree_order(e[0], e[1][0])))
            oid = object_id("tree", body, self.algo)
            self.new_objects.setdefault(oid, ("tree", body))
            self.ids[folder] = oid
        self.dirty.clear()
        return self.ids[""]


def _tree_order(name: str, mode: str) -> bytes:
    """git sorts tree entries by name, a folder as if its name ended in '/'."""
    b = name.encode("utf-8", "surrogateescape")
    return b + b"/" if mode == "040000" else b


def commit_bytes(tree: str, parent: str, author: str, committer: str, message: str) -> bytes:
    """A commit object's body as `git commit-tree` writes it: `author`/`committer` are
    "Name <mail> <epoch> <+hhmm>" lines, `message` is written as given."""
    return f"tree {tree}\nparent {parent}\nauthor {author}\ncommitter {committer}\n\n{message}".encode("utf-8")


# ---- writes ---------------------------------------------------------------------------------------
def loose_bytes(kind: str, body: bytes) -> bytes:
    """The zlib stream of a loose object file (git reads any compression level)."""
    return zlib.compress(f"{kind} {len(body)}\0".encode() + body, 1)


_PACK_TYPES = {"commit": 1, "tree": 2, "blob": 3, "tag": 4}


def write_pack(pack_dir, objects: dict[str, tuple[str, bytes]]) -> str:
    """Write `objects` (sha1 ids) as one pack and its version-2 index into `pack_dir`, the way
    `git index-pack` would leave them (pack-<checksum>.pack, then .idx: git looks a pack up by its
    index, so the index appears last). Whole objects, no deltas: a pack git reads like any other,
    two files instead of one per object. Returns the pack's checksum."""
    pack_dir = Path(pack_dir)
    pack_dir.mkdir(parents=True, exist_ok=True)
    items = sorted(objects.items())
    body = bytearray(b"PACK" + struct.pack(">II", 2, len(items)))
    entries = []
    for oid, (kind, data) in items:
        offset = len(body)
        size = len(data)
        head = bytearray()
        byte = (_PACK_TYPES[kind] << 4) | (size & 0x0F)
        size >>= 4
        while size:
            head.append(byte | 0x80)
            byte = size & 0x7F
            size >>= 7
        head.append(byte)
        packed = bytes(head) + zlib.compress(data, 1)
        body += packed
        entries.append((bytes.fromhex(oid), zlib.crc32(packed) & 0xFFFFFFFF, offset))
    checksum = hashlib.sha1(bytes(body)).digest()
    body += checksum
    if len(body) >= 1 << 31:
        raise ValueError("pack too large for 4-byte offsets")  # never for a patch series; write_objects goes loose
    fanout = [0] * 256
    for raw, _, _ in entries:
        fanout[raw[0]] += 1
    total = 0
    for i in range(256):
        total += fanout[i]
        fanout[i] = total
    idx = bytearray(b"\377tOc" + struct.pack(">I", 2) + struct.pack(">256I", *fanout))
    idx += b"".join(raw for raw, _, _ in entries)
    idx += b"".join(struct.pack(">I", crc) for _, crc, _ in entries)
    idx += b"".join(struct.pack(">I", off) for _, _, off in entries)
    idx += checksum
    idx += hashlib.sha1(bytes(idx)).digest()
    name = checksum.hex()
    for ext, data in ((".pack", body), (".idx", idx)):
        final = pack_dir / f"pack-{name}{ext}"
        tmp = pack_dir / f"tmp-{name}{ext}-{os.getpid()}"
        tmp.write_bytes(bytes(data))
        os.chmod(tmp, 0o444)
        os.replace(tmp, final)
    return name


def write_loose(objects_dir: Path, objects: dict[str, tuple[str, bytes]]) -> None:
    """Each object as a loose file (a temporary name, then a rename); present ones are left."""
    for oid, (kind, body) in objects.items():
        f = Path(objects_dir) / oid[:2] / oid[2:]
        if f.exists():
            continue
        f.parent.mkdir(exist_ok=True)
        tmp = f.with_name(f".tmp-{oid[2:]}-{os.getpid()}")
        tmp.write_bytes(loose_bytes(kind, body))
        os.replace(tmp, f)


def write_objects(repo: Path, objects: dict[str, tuple[str, bytes]]) -> None:
    """`objects` into `repo`'s store: one pack (sha1 ids, under 1 GiB), else loose files."""
    if not objects:
        return
    d = Path(repo) / ".git" / "objects"
    first = next(iter(objects))
    if algo_of(first) == "sha1" and sum(len(b) for _, b in objects.values()) < PACK_LIMIT:
        write_pack(d / "pack", objects)
    else:
        write_loose(d, objects)


def commit_tree(repo: Path, tree: str, parent: str | None, message: str, env: dict | None = None) -> str:
    """`git commit-tree` (identities and dates from `env`): where git must make the commit; a root
    commit when `parent` is None."""
    return git.run(repo, "commit-tree", tree, *(("-p", parent) if parent else ()), "-F", "-",
                   stdin=message.encode("utf-8", "surrogateescape"), env=env).stdout.strip()


def write_tree(repo: Path, env: dict | None = None) -> str:
    """`git write-tree` of the index `env` names (GIT_INDEX_FILE), else the repository's."""
    return git.run(repo, "write-tree", env=env).stdout.strip()


# ---- index files ----------------------------------------------------------------------------------
def write_index(path: Path, entries: list[tuple[str, str, str]]) -> None:
    """A version-2 index of (mode, oid, path) at stage 0 with no stat data (git apply --cached
    reads only modes, ids and paths); what `git update-index --index-info` would write."""
    body = [b"DIRC", struct.pack(">II", 2, len(entries))]
    for mode, oid, p in sorted(entries, key=lambda e: e[2].encode("utf-8", "surrogateescape")):
        name = p.encode("utf-8", "surrogateescape")
        raw = bytes.fromhex(oid)
        head = struct.pack(">10I", 0, 0, 0, 0, 0, 0, int(mode, 8), 0, 0, 0) + raw
        head += struct.pack(">H", min(len(name), 0xFFF)) + name
        head += b"\0" * (8 - (len(head) % 8))
        body.append(head)
    data = b"".join(body)
    digest = hashlib.sha1 if len(entries) == 0 or len(entries[0][1]) == 40 else hashlib.sha256
    Path(path).write_bytes(data + digest(data).digest())


def read_index(path: Path, oid_len: int) -> list[tuple[str, str, int]] | None:
    """(path, oid, stage) of a version 2/3 index; None for anything else (then ask git)."""
    path = Path(path)
    if not path.exists():
        return []
    data = path.read_bytes()
    if len(data) < 12 or data[:4] != b"DIRC":
        return None
    version, count = struct.unpack(">II", data[4:12])
    if version not in (2, 3):
        return None
    out, pos, n = [], 12, oid_len // 2
    for _ in range(count):
        oid = data[pos + 40:pos + 40 + n].hex()
        flags = struct.unpack(">H", data[pos + 40 + n:pos + 42 + n])[0]
        start = pos + 42 + n + (2 if flags & 0x4000 else 0)
        end = data.index(b"\0", start)
        out.append((data[start:end].decode("utf-8", "surrogateescape"), oid, (flags >> 12) & 3))
        pos += ((end - pos) // 8 + 1) * 8
    return out


# ---- between object stores ------------------------------------------------------------------------
def objects_dir(git_dir: Path) -> Path:
    """The object store of a repository (a linked worktree's is its common dir's)."""
    gd = Path(git_dir)
    if (gd / "commondir").is_file():
        gd = (gd / (gd / "commondir").read_text().strip()).resolve()
    return gd / "objects"


def copy_objects(mine: Path, dest: Path) -> None:
    """Every pack and loose object of the store `mine` that `dest` lacks, copied into `dest` as
    they are (content-addressed): a temporary name, then a rename, a pack before its index, as git
    does. OSError as the file system gave it (the caller names whose disk it is)."""
    mine, dest = Path(mine), Path(dest)
    for idx in sorted((mine / "pack").glob("pack-*.idx")):
        for f in (idx.with_suffix(".pack"), idx):
            final = dest / "pack" / f.name
            if not final.exists():
                _copy_in(f, final, final.with_name(f"tmp-lucepatch-{f.name}-{os.getpid()}"))
    for fan in mine.iterdir():
        if len(fan.name) != 2 or not fan.is_dir():
            continue
        target = dest / fan.name
        for obj in fan.iterdir():
            final = target / obj.name
            if final.exists() or obj.name.startswith("."):
                continue
            target.mkdir(exist_ok=True)
            _copy_in(obj, final, target / f".lucepatch-{obj.name}-{os.getpid()}")


def _copy_in(f: Path, final: Path, tmp: Path) -> None:
    """One object file into a store: a temporary name, then a rename (removed if the copy fails)."""
    try:
        shutil.copyfile(f, tmp)
        os.chmod(tmp, 0o444)
        os.replace(tmp, final)
    except OSError:
        tmp.unlink(missing_ok=True)
        raise
