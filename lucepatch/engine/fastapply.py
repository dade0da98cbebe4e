"""The exact step of the engine without a git process per patch.

`git apply --cached` (no fuzz, offsets allowed) is, for a plain text patch, a deterministic
function of the patch and the blobs it names: apply.c parses each hunk into a preimage and a
postimage, searches the preimage from the hunk's new position alternately forwards and backwards
(`find_pos`), never matching lines an earlier hunk of the same patch wrote, with the first/last
line anchored when the hunk starts at line 0/1 or has no trailing context, and replaces the lines
it found. This module does exactly that in Python (`apply_file`); engine/apply.py's TreeState
puts each result in a tree (lucepatch/odb.py `Tree`) and builds the commit objects the per-patch
engine would write — so a series whose patches apply exactly needs two git processes (the base
tree, its blobs), not two per patch. Anything it is not sure to do as git does returns None and the caller asks git (the
per-patch engine, engine/core.py): binary or mode changes, renames and copies, a file twice in
one patch, quoted or prefix-less paths, a non-regular file, a folder where a file goes.

The one approximation: git pre-filters candidate positions by a whitespace-blind 32-bit line hash
before comparing bytes; a position where that hash collides but the bytes differ only after the
preimage's last, newline-less line would be taken by git and refused here. Refusing is safe (git
decides then); tests/test_fastapply.py compares with `git apply --cached` on generated inputs.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

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
