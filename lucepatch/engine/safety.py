"""Refuse patches that would write outside the repository before git ever sees them.

Checks (each failure is one UsageError line naming the patch file and the fix):
- size: a patch over MAX_PATCH_BYTES is refused before it is read;
- shape: CRLF-mangled diff headers, NUL bytes outside a git binary patch, binary changes without
  data (`Binary files ... differ`, regenerate with --binary);
- paths, taken from every header git reads (`diff --git`, `---`/`+++`, rename/copy from/to):
  absolute, `..`, `.git/` anywhere, a parent that is a symlink in the base tree or is made a
  symlink by an earlier patch of the series, a path inside a gitlink, a gitlink change itself.
Git's own `git apply` refuses several of these too; we refuse first, with a message that names
the file, so the user never sees git's error text or a half-done run.
"""

from __future__ import annotations

import re
from pathlib import PurePosixPath

from unidiff import PatchSet
from unidiff.errors import UnidiffParseError

from lucepatch import odb
from lucepatch.errors import UsageError
from lucepatch.series import Patch

MAX_PATCH_BYTES = 32 * 1024 * 1024

_RENAME = re.compile(r"^(?:rename|copy) (?:from|to) (.*)$")
_DIFFGIT = re.compile(r"^diff --git (.*)$")
_GITLINK = re.compile(r"^(?:(?:new file mode|new mode|deleted file mode|old mode) 160000|index [0-9a-f]+\.\.[0-9a-f]+ 160000)")
_NEW_SYMLINK = re.compile(r"^(?:new file mode|new mode) 120000")


def _unquote(p: str) -> str:
    p = p.rstrip("\r")
    if p.startswith('"') and p.endswith('"') and len(p) >= 2:
        body = p[1:-1]
        try:
            return body.encode("latin-1", "backslashreplace").decode("unicode_escape").encode("latin-1").decode(
                "utf-8", "surrogateescape")
        except (UnicodeDecodeError, UnicodeEncodeError):
            return body
    # `--- a/file\t2024-01-01 ...` (non-git diffs carry a timestamp)
    return p.split("\t", 1)[0]


def _strip_prefix(p: str) -> str:
    return p[2:] if p[:2] in ("a/", "b/") else p


def _header_paths(ps: PatchSet) -> list[str]:
    """Every path the headers of a parsed diff name, as git reads them (C-quoting undone, a/ b/
    removed): the `diff --git` pair, rename/copy from/to, and ---/+++. unidiff finds the headers,
    so a hunk line such as a removed `-- ../x` comment is content, never a path."""
    out: list[str] = []

    def add(p: str) -> None:
        if p and p != "/dev/null" and p not in out:
            out.append(p)

    for pf in ps:
        for line in pf.patch_info or ():  # None for a traditional diff (no header lines)
            line = str(line).rstrip("\n")
            m = _RENAME.match(line)
            if m:
                add(_unquote(m.group(1)))
                continue
            m = _DIFFGIT.match(line)
            if m:
                rest = m.group(1).rstrip("\r")
                if rest.startswith('"'):
                    add(_strip_prefix(_unquote(rest.split('" ', 1)[0] + '"')))
                else:
                    add(_strip_prefix(rest.split(" b/", 1)[0] if " b/" in rest else rest.split(" ", 1)[0]))
        for name in (pf.source_file, pf.target_file):
            raw = _unquote(name or "")
            add(raw if raw == "/dev/null" else _strip_prefix(raw))
    return out


def _parse(diff: bytes, name: str = "diff") -> PatchSet:
    try:
        return PatchSet(diff.decode("utf-8", "surrogateescape"))
    except UnidiffParseError as exc:
        raise UsageError(f"patch {name} has an unparseable diff ({exc}); regenerate it with git format-patch")


def diff_paths(diff: bytes) -> list[str]:
    """Every path a diff names, as git would read it (prefix a/ b/ removed)."""
    return _header_paths(_parse(diff))


def _header_lines(ps: PatchSet):
    for pf in ps:
        for line in pf.patch_info or ():
            yield pf, str(line).rstrip("\r\n")


def check_patch_shape(patch: Patch) -> None:
    text = patch.diff.decode("utf-8", "surrogateescape")
    for line in text.split("\n"):
        if line.startswith(("diff --git ", "+++ ", "--- ", "@@ ")) and line.endswith("\r"):
            raise UsageError(f"patch {patch.path} has CRLF line endings in its diff headers (converted by an editor "
                             "or mail client); restore LF endings or regenerate it with git format-patch")
    if re.search(r"^Binary files .* differ\r?$", text, re.M):
        raise UsageError(f"patch {patch.path} has a binary change without its data; regenerate it with "
                         "git format-patch --binary (lucepatch applies git binary patches)")
    if "\nGIT binary patch\n" in text and not re.search(r"^index [0-9a-f]{40}\.\.[0-9a-f]{40}", text, re.M):
        raise UsageError(f"patch {patch.path} has a binary patch without full index lines; regenerate it with "
                         "git format-patch --full-index --binary")


def base_listing(repo_dir, commit: str) -> str:
    """`ls-tree -r -t -z` of the commit: every entry, folders included (safety reads symlinks and
    gitlinks from it, the fast apply path builds its trees from it)."""
    return odb.listing(repo_dir, commit)


def _tree_special_paths(repo_dir, commit: str, listing: str | None = None) -> tuple[set[str], set[str]]:
    """(symlinks, gitlinks) in the tree of `commit`."""
    out = listing if listing is not None else base_listing(repo_dir, commit)
    links, gitlinks = set(), set()
    for entry in out.split("\0"):
        if not entry:
            continue
        meta, _, path = entry.partition("\t")
        mode = meta.split(" ", 1)[0]
        if mode == "120000":
            links.add(path)
        elif mode == "160000":
            gitlinks.add(path)
    return links, gitlinks


def check_patch_paths(patch: Patch, repo_dir=None, *, symlinks: set[str] | None = None,
                      gitlinks: set[str] | None = None) -> list[str]:
    """Refuse unsafe paths in one patch; returns the paths it names."""
    symlinks = symlinks or set()
    gitlinks = gitlinks or set()
    paths = _header_paths(patch.patchset)
    for raw in paths:
        p = PurePosixPath(raw)
        if raw.startswith("/") or p.is_absolute():
            raise UsageError(f"patch {patch.path} writes the absolute path {raw}; patches must stay inside the repository")
        if ".." in p.parts:
            raise UsageError(f"patch {patch.path} writes {raw}, which escapes the repository through '..'")
        if any(part.lower() == ".git" for part in p.parts):
            raise UsageError(f"patch {patch.path} writes {raw} inside .git; patches may not touch git metadata")
        prefix = ""
        for part in p.parts[:-1]:
            prefix = f"{prefix}/{part}" if prefix else part
            if prefix in symlinks:
                raise UsageError(f"patch {patch.path} writes {raw} through the symlink {prefix}; "
                                 "patches may not write through symlinks")
            if prefix in gitlinks:
                raise UsageError(f"patch {patch.path} writes {raw} inside the submodule {prefix}; "
                                 "carry submodule changes as a submodule series")
        if raw in gitlinks:
            raise UsageError(f"patch {patch.path} changes the gitlink (submodule pointer) {raw}; "
                             "carry submodule changes as a submodule series")
    if any(_GITLINK.match(line) for _pf, line in _header_lines(patch.patchset)):
        raise UsageError(f"patch {patch.path} changes a gitlink (submodule pointer); carry submodule changes as a submodule series")
    return paths


def check_series_safety(patches: list[Patch], repo_dir, base: str, listing: str | None = None) -> None:
    """Shape and paths of every patch, with symlinks of the base tree and those the series creates."""
    symlinks, gitlinks = _tree_special_paths(repo_dir, base, listing)
    for p in patches:
        check_patch_shape(p)
        check_patch_paths(p, repo_dir, symlinks=symlinks, gitlinks=gitlinks)
        # symlinks this patch creates count for the later ones
        for pf, line in _header_lines(p.patchset):
            if _NEW_SYMLINK.match(line):
                symlinks.update(_header_paths([pf])[-1:])
