"""Patch files: parsing, trailers and identities.

A patch is a `git format-patch --zero-commit --no-signature --full-index -N` file: mbox headers
(From/Date/Subject), a message whose last paragraph holds trailers, then the diff. Its identity is
`git patch-id --stable` of the diff, so whitespace-preserving edits to the message never change it.
"""

from __future__ import annotations

import email.header
import email.utils
import hashlib
import re
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Sequence

from unidiff import PatchSet
from unidiff.errors import UnidiffParseError

from lucepatch import git, trailers
from lucepatch.errors import UsageError
from lucepatch.files import write_atomic

# Yocto's Upstream-Status values (docs/design.md "Contracts", Trailers).
UPSTREAM_STATUS = re.compile(
    r"^(Pending|Submitted \[[^\]]+\]|Denied|Inappropriate \[[^\]]+\]|Inactive-Upstream|Backport(?: \[[^\]]+\])?|Accepted)$"
)
_DIFF_START = re.compile(r"^diff --git ", re.M)
MAX_PATCH_BYTES = 32 * 1024 * 1024  # one patch file
MAX_SERIES_BYTES = 1024 * 1024  # the series file


@dataclass
class Patch:
    path: Path
    name: str  # file name as listed in `series`
    raw: bytes
    author: str = ""
    date: str = ""
    subject: str = ""
    body: str = ""  # message without subject, trailers included
    trailers: list[tuple[str, str]] = field(default_factory=list)
    diff: bytes = b""

    # -- trailers ---------------------------------------------------------------------------
    def trailer(self, key: str) -> str | None:
        values = self.trailer_all(key)
        return values[0] if values else None

    def trailer_all(self, key: str) -> list[str]:
        return trailers.values(self.trailers, key)

    @property
    def build_only(self) -> bool:
        return (self.trailer("Build-Only") or "").strip().lower() in ("yes", "true", "1")

    @property
    def reproducers(self) -> list[tuple[str, str | None]]:
        """(reproducer, scenario or None) pairs from `Reproducer: name[:scenario]` trailers."""
        out = []
        for value in self.trailer_all("Reproducer"):
            name, _, scenario = value.strip().partition(":")
            out.append((name, scenario or None))
        return out

    @property
    def slug(self) -> str:
        return self.name[:-6] if self.name.endswith(".patch") else self.name

    # -- identities -------------------------------------------------------------------------
    @cached_property
    def patch_id(self) -> str:
        pid = git.patch_id(self.diff)
        if not pid:
            raise UsageError(f"patch {self.path} has no diff git can read; regenerate it with git format-patch")
        return pid

    @cached_property
    def patchset(self) -> PatchSet:
        """The diff parsed with unidiff: files, their header lines (modes, renames), hunks and
        lines — what lint, import and the safety checks read (hunk lines are content, never headers)."""
        try:
            ps = PatchSet(self.diff.decode("utf-8", errors="surrogateescape"))
        except UnidiffParseError as exc:
            raise UsageError(f"patch {self.path} has an unparseable diff ({exc}); regenerate it with git format-patch")
        if not len(ps):
            raise UsageError(f"patch {self.path} holds no file diff; regenerate it with git format-patch")
        return ps

    @cached_property
    def files(self) -> list[str]:
        """Paths the diff touches (both sides of renames), as unidiff reads them."""
        paths = []
        for pf in self.patchset:
            for p in (pf.source_file, pf.target_file):
                if p and p != "/dev/null":
                    p = p[2:] if p[:2] in ("a/", "b/") else p
                    if p not in paths:
                        paths.append(p)
        return paths

    def message(self) -> str:
        return self.subject + ("\n\n" + self.body if self.body else "") + "\n"

    def to_json(self) -> dict:
        return {
            "name": self.name,
            "subject": self.subject,
            "patch_id": self.patch_id,
            "build_only": self.build_only,
            "upstream_status": self.trailer("Upstream-Status"),
            "reproducers": [f"{r}:{s}" if s else r for r, s in self.reproducers],
            "sha256": hashlib.sha256(self.raw).hexdigest(),
        }


def _decode_header(value: str) -> str:
    parts = []
    for chunk, enc in email.header.decode_header(value):
        parts.append(chunk.decode(enc or "utf-8", errors="replace") if isinstance(chunk, bytes) else chunk)
    return "".join(parts)


def parse_patch(path: Path, name: str | None = None) -> Patch:
    try:
        size = path.stat().st_size
        if path.is_file() and size > MAX_PATCH_BYTES:
            raise UsageError(f"patch {path} is {size // (1024 * 1024)} MiB, over the {MAX_PATCH_BYTES // (1024 * 1024)} MiB "
                             "limit for one patch; split it or check it is the file you meant")
        raw = path.read_bytes()
    except FileNotFoundError:
        raise UsageError(f"patch {path} is listed in the series but does not exist; restore it or drop it from series")
    except IsADirectoryError:
        raise UsageError(f"patch {path} is a directory, not a patch file")
    except PermissionError:
        raise UsageError(f"patch {path} is not readable; fix its permissions")
    return parse_patch_bytes(raw, path, name)


def parse_patch_bytes(raw: bytes, path: Path, name: str | None = None) -> Patch:
    """Parse a patch file's bytes (the file at `path` need not hold them yet)."""
    if b"\0" in raw:
        raise UsageError(f"patch {path} contains NUL bytes; binary content must be a git binary diff")
    text = raw.decode("utf-8", errors="surrogateescape")
    m = _DIFF_START.search(text)
    if not m:
        raise UsageError(f"patch {path} holds no 'diff --git' section; regenerate it with git format-patch")
    head, diff = text[: m.start()], text[m.start():]
    # format-patch ends the diff with "-- \n<version>\n"; --no-signature leaves none. Keep the diff as-is.
    patch = Patch(path=path, name=name or path.name, raw=raw, diff=diff.encode("utf-8", errors="surrogateescape"))

    lines = head.split("\n")
    headers: dict[str, str] = {}
    i = 0
    if lines and lines[0].startswith("From "):
        i = 1
        key = None
        while i < len(lines) and lines[i].strip() != "":
            line = lines[i]
            if line[:1] in (" ", "\t") and key:
                headers[key] += " " + line.strip()
            else:
                hm = re.match(r"^([!-9;-~]+):(.*)$", line)
                if not hm:
                    raise UsageError(f"patch {path} has a malformed mail header line {i + 1}: {line[:60]!r}; "
                                     "regenerate it with git format-patch")
                key = hm.group(1).lower()
                headers[key] = hm.group(2).strip()
            i += 1
        i += 1  # blank line after headers
    patch.author = _decode_header(headers.get("from", ""))
    patch.date = headers.get("date", "")
    subject = _decode_header(headers.get("subject", ""))
    patch.subject = re.sub(r"^\[PATCH[^\]]*\]\s*", "", subject).strip()

    # Message body: up to the '---' line that starts the diffstat (or the diff itself).
    body_lines = []
    for line in lines[i:]:
        if line == "---":
            break
        body_lines.append(line)
    while body_lines and not body_lines[-1].strip():
        body_lines.pop()
    while body_lines and not body_lines[0].strip():
        body_lines.pop(0)
    if not headers and body_lines and not patch.subject:
        # quilt/plain patch: first line is the subject (DEP-3 headers stay in the body)
        patch.subject = body_lines.pop(0).strip()
        while body_lines and not body_lines[0].strip():
            body_lines.pop(0)
    patch.body = "\n".join(body_lines)

    # Trailers by git's rules (lucepatch/trailers.py), read from the message as git sees it.
    patch.trailers = trailers.parse(patch.message())
    return patch


def read_series(series_file: Path) -> list[str]:
    """Quilt-compatible series: one patch per line; '#' comments; quilt options (-p1) allowed."""
    return [name for name, _strip in read_series_entries(series_file)]


def read_series_entries(series_file: Path) -> list[tuple[str, int]]:
    """(name, strip level) per series line; quilt's `-p0`/`-p1` option gives the strip level."""
    if not series_file.is_file():
        raise UsageError(f"series file {series_file} is missing; list the patches there, one per line")
    if series_file.stat().st_size > MAX_SERIES_BYTES:
        raise UsageError(f"series file {series_file} is over {MAX_SERIES_BYTES // 1024} KiB; it should list patch names, one per line")
    data = series_file.read_bytes()
    if b"\0" in data:
        raise UsageError(f"series file {series_file} contains NUL bytes; it should list patch names, one per line")
    names = []
    for n, line in enumerate(data.decode("utf-8", errors="replace").splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        parts = line.split()
        name = parts[0]
        if any(opt not in ("-p1", "-p0") for opt in parts[1:]):
            raise UsageError(f"series {series_file} line {n}: unsupported quilt option in {line!r}")
        if name.startswith("/") or ".." in Path(name).parts or "\\" in name:
            raise UsageError(f"series {series_file} line {n}: patch name {name!r} escapes the series folder")
        if name in [e[0] for e in names]:
            raise UsageError(f"series {series_file} line {n}: {name} is listed twice")
        names.append((name, 0 if "-p0" in parts[1:] else 1))
    return names


def compute_patch_ids(patches: list[Patch]) -> None:
    """Fill `patch_id` of many patches with one `git patch-id --stable` run (same ids, fewer processes)."""
    todo = [p for p in patches if "patch_id" not in p.__dict__]
    if len(todo) < 2:
        return
    buf = bytearray()
    for i, p in enumerate(todo):
        buf += b"commit %040x\n" % (i + 1)
        buf += p.diff if p.diff.endswith(b"\n") else p.diff + b"\n"
    out = git.run(".", "patch-id", "--stable", stdin=bytes(buf)).stdout
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 2:
            idx = int(parts[1], 16) - 1
            if 0 <= idx < len(todo):
                todo[idx].__dict__["patch_id"] = parts[0]


def series_hash(target_toml: Path, patches: list[Patch]) -> str:
    """sha256 over target.toml and the listed patches, in order (docs/design.md "Contracts", Identity)."""
    h = hashlib.sha256()
    h.update(b"target.toml\0" + target_toml.read_bytes() + b"\0")
    for p in patches:
        h.update(p.name.encode() + b"\0" + p.raw + b"\0")
    return h.hexdigest()


def find_patch(patches: Sequence[Patch], name: str, *, where: str, flag: str = "") -> Patch:
    """A patch of `patches` by file name or slug (the name without `.patch`)."""
    for p in patches:
        if name in (p.name, p.slug):
            return p
    listed = ", ".join(p.slug for p in patches) or "none"
    raise UsageError(f"{flag + ' ' if flag else ''}{name}: not in {where}; it has {listed}")


def rewrite_patch_file(patch: Patch, new_raw: bytes, *, check: dict[str, str] | None = None) -> Patch:
    """Atomically replace `patch`'s file with `new_raw` (trailers.edit_patch's result), which must
    keep its patch id (and, for each key of `check`, that trailer's value); nothing is written otherwise."""
    after = parse_patch_bytes(new_raw, patch.path, patch.name)
    if after.patch_id != patch.patch_id:
        raise UsageError(f"editing {patch.path} would change its diff (patch id); edit it by hand")
    for key, value in (check or {}).items():
        if after.trailer(key) != value:
            raise UsageError(f"could not set {key} in {patch.path}; edit it by hand")
    write_atomic(patch.path, new_raw)
    return after
