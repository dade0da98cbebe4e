"""The exact step of the engine without a git process per patch.

`git apply --cached` (no fuzz, offsets allowed) is, for a plain text patch, a deterministic
function of the patch and the blobs it names: apply.c parses each hunk into a preimage and a
postimage, searches the preimage from the hunk's new position alternately forwards and backwards
(`find_pos`), never matching lines an earlier hunk of the same patch wrote, with the first/last
line anchored when the hunk starts at line 0/1 or has no trailing context, and replaces the lines
it found. This module does exactly that in Python (`apply_file`), builds the tree objects of
each result (`Tree`), and the commit objects the per-patch engine would write — so a series
whose patches apply exactly needs two git processes (the base tree, its blobs), not two per
patch. Anything it is not sure to do as git does returns None and the caller asks git (the
per-patch engine, engine/core.py): binary or mode changes, renames and copies, a file twice in
one patch, quoted or prefix-less paths, a non-regular file, a folder where a file goes.

The one approximation: git pre-filters candidate positions by a whitespace-blind 32-bit line hash
before comparing bytes; a position where that hash collides but the bytes differ only after the
preimage's last, newline-less line would be taken by git and refused here. Refusing is safe (git
decides then); tests/test_fastapply.py compares with `git apply --cached` on generated inputs.
"""

from __future__ import annotations

import hashlib
import os
import re
import struct
import zlib
from dataclasses import dataclass, field
from pathlib import Path

_HUNK = re.compile(rb"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
_INDEX = re.compile(rb"^index ([0-9a-f]+)\.\.([0-9a-f]+)(?: ([0-7]{6}))?$")
_C_SPACE = b" \t\n\v\f\r"


@dataclass
class Hunk:
    oldpos: int
    newpos: int
    pre: list[bytes]  # image lines (each with its b"\n" unless it is an incomplete last line)
    post: list[bytes]
    trailing: int  # context lines after the last change


@dataclass
class FileDiff:
    path: str
    kind: str  # modify | add | delete
    mode: str | None  # the mode of a new file
    hunks: list[Hunk] = field(default_factory=list)


def _lines(data: bytes) -> list[bytes]:
    """Split like apply.c: at b"\\n" only, each line keeps it; a last line may lack it."""
    if not data:
        return []
    parts = data.split(b"\n")
    out = [p + b"\n" for p in parts[:-1]]
    if parts[-1]:
        out.append(parts[-1])
    return out


def parse(diff: bytes) -> list[FileDiff] | None:
    """The file diffs of a plain text patch (`-p1`, a/ b/ paths), None when anything is unusual."""
    lines = _lines(diff)
    files: list[FileDiff] = []
    i, n = 0, len(lines)
    while i < n and not lines[i].startswith(b"diff --git "):
        if lines[i].startswith((b"--- ", b"+++ ", b"@@ ")):
            return None  # a diff without a git header: let git read it
        i += 1
    while i < n:
        m = re.match(rb"^diff --git a/(\S+) b/(\S+)\n$", lines[i])
        if not m or m.group(1) != m.group(2) or m.group(1).startswith(b'"'):
            return None
        path = m.group(1).decode("utf-8", "surrogateescape")
        if any(f.path == path for f in files):
            return None
        fd = FileDiff(path, "modify", None)
        i += 1
        minus = plus = None
        while i < n and not lines[i].startswith((b"@@ ", b"diff --git ")):
            line = lines[i].rstrip(b"\n")
            if line.startswith(b"new file mode "):
                fd.kind, fd.mode = "add", line.split()[-1].decode()
            elif line.startswith(b"deleted file mode "):
                fd.kind = "delete"
            elif line.startswith(b"index "):
                if not _INDEX.match(line):
                    return None
            elif line.startswith(b"--- "):
                minus = line[4:]
            elif line.startswith(b"+++ "):
                plus = line[4:]
            else:
                return None  # old/new mode, similarity, rename, copy, binary, anything else
            i += 1
        p = path.encode("utf-8", "surrogateescape")
        if fd.kind == "add":
            if (minus, plus) != (b"/dev/null", b"b/" + p) or fd.mode not in ("100644", "100755"):
                return None
        elif fd.kind == "delete":
            if (minus, plus) != (b"a/" + p, b"/dev/null"):
                return None
        elif (minus, plus) != (b"a/" + p, b"b/" + p):
            return None
        while i < n and lines[i].startswith(b"@@ "):
            hunk, i = _hunk(lines, i)
            if hunk is None:
                return None
            fd.hunks.append(hunk)
        if not fd.hunks and fd.kind != "add":
            return None  # an empty new file is fine; an empty modification is git's to judge
        if (fd.kind == "add" and any(h.pre for h in fd.hunks)) or (fd.kind == "delete" and any(h.post for h in fd.hunks)):
            return None  # "new file depends on old contents" / "deleted file still has contents"
        files.append(fd)
        if i < n and not lines[i].startswith(b"diff --git "):
            return None
    return files or None


def _hunk(lines: list[bytes], i: int) -> tuple[Hunk | None, int]:
    """apply.c parse_fragment + the image building of apply_one_fragment (default options)."""
    m = _HUNK.match(lines[i])
    if not m:
        return None, i
    oldpos, newpos = int(m.group(1)), int(m.group(3))
    oldlines = int(m.group(2)) if m.group(2) is not None else 1
    newlines = int(m.group(4)) if m.group(4) is not None else 1
    i += 1
    body: list[bytes] = []
    added = deleted = trailing = 0
    while i < len(lines) and (oldlines or newlines):
        line = lines[i]
        if not line.endswith(b"\n"):
            return None, i
        c = line[:1]
        if c in (b" ", b"\n"):
            oldlines -= 1
            newlines -= 1
            trailing += 1
        elif c == b"-":
            deleted += 1
            oldlines -= 1
            trailing = 0
        elif c == b"+":
            added += 1
            newlines -= 1
            trailing = 0
        elif c == b"\\":
            if len(line) < 12 or not line.startswith(b"\\ "):
                return None, i
        else:
            return None, i
        body.append(line)
        i += 1
    if oldlines or newlines or not (added or deleted) or oldlines < 0 or newlines < 0:
        return None, i
    if i < len(lines) and lines[i].startswith(b"\\ ") and len(lines[i]) > 12:
        body.append(lines[i])
        i += 1
    pre, post = [], []
    for k, line in enumerate(body):
        c = line[:1]
        if c == b"\\":
            continue
        text = line[1:] if c != b"\n" else b"\n"
        if k + 1 < len(body) and body[k + 1][:1] == b"\\":
            if c == b"\n":
                return None, i  # an empty context line without its newline: too odd to mirror
            text = text[:-1]
        if c in (b" ", b"\n", b"-"):
            pre.append(text)
        if c in (b" ", b"\n", b"+"):
            post.append(text)
    return Hunk(oldpos, newpos, pre, post, trailing), i


def _matches(img: list[bytes], patched: list[bool], offsets: list[int], total: int, pre: list[bytes],
             prebuf: bytes, lno: int, match_beginning: bool, match_end: bool) -> bool:
    """apply.c match_fragment for the default options (no whitespace fixing or ignoring)."""
    n = len(pre)
    if n + lno > len(img) or (match_end and n + lno != len(img)):
        return False
    if match_beginning and lno:
        return False
    for k in range(n):
        if patched[lno + k]:
            return False
    start = offsets[lno]
    if match_end and start + len(prebuf) != total:
        return False
    if n == 0:
        return True
    # the bytes must be equal over the preimage's length; every preimage line but an incomplete
    # last one ends in b"\n" at the same place as the image's lines then
    for k in range(n - 1):
        if img[lno + k] != pre[k]:
            return False
    last, cand = pre[-1], img[lno + n - 1]
    if cand == last:
        return True
    # git compares bytes over the preimage's length only (and a whitespace-blind hash per line):
    # an incomplete preimage line matches an image line that continues with whitespace only
    return not last.endswith(b"\n") and cand.startswith(last) and not cand[len(last):].strip(_C_SPACE)


def apply_file(content: bytes, hunks: list[Hunk]) -> bytes | None:
    """The file after the hunks, as `git apply` makes it; None when git would not apply them."""
    img = _lines(content)
    patched = [False] * len(img)
    for h in hunks:
        pre, post = h.pre, h.post
        prebuf = b"".join(pre)
        match_beginning = h.oldpos <= 1
        match_end = h.trailing == 0
        offsets = [0]
        for line in img:
            offsets.append(offsets[-1] + len(line))
        total = offsets[-1]
        line = h.newpos - 1 if h.newpos else 0
        if match_beginning:
            line = 0
        elif match_end:
            line = len(img) - len(pre)
        if line > len(img) or line < 0:  # apply.c compares unsigned: a negative start is "past the end"
            line = len(img)
        back = fwd = cur = line
        i = 0
        found = -1
        while True:
            if _matches(img, patched, offsets, total, pre, prebuf, cur, match_beginning, match_end):
                found = cur
                break
            moved = False
            while not moved:
                if back == 0 and fwd == len(img):
                    break
                if i & 1:
                    if back == 0:
                        i += 1
                        continue
                    back -= 1
                    cur = back
                else:
                    if fwd == len(img):
                        i += 1
                        continue
                    fwd += 1
                    cur = fwd
                moved = True
            if not moved:
                break
            i += 1
        if found < 0:
            return None
        img[found:found + len(pre)] = post
        patched[found:found + len(pre)] = [True] * len(post)
    return b"".join(img)


# ---- objects and trees --------------------------------------------------------------------------
def object_id(kind: str, body: bytes, algo: str = "sha1") -> str:
    h = hashlib.new(algo)
    h.update(f"{kind} {len(body)}\0".encode())
    h.update(body)
    return h.hexdigest()


def loose_bytes(kind: str, body: bytes) -> bytes:
    """The zlib stream of a loose object file (git reads any compression level)."""
    return zlib.compress(f"{kind} {len(body)}\0".encode() + body, 1)


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
        raise ValueError("pack too large for 4-byte offsets")  # never for a patch series; caller writes loose
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
