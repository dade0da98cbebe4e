"""Trailers and patch-file edits: the one place that reads or writes `Key: value` trailer blocks.

Rules are git's (`git interpret-trailers`, trailer.c), so a message lucepatch writes parses the
same in git, b4 and GitHub, and one lucepatch reads parses the same everywhere in lucepatch:

- the trailer block is the last paragraph of the message, never its first (the title);
- it is a block when every line is a trailer (or a continuation line, which starts with
  whitespace and folds into the trailer above), or when it holds a git-generated line
  (`Signed-off-by: `, `(cherry picked from commit `) and at least 25 % of its lines are trailers;
- a trailer is `Token: value` with `Token` made of letters, digits and `-`, optional spaces
  before the `:`; keys compare case-insensitively.

Patch files are `git format-patch` mbox text: mail headers, a blank line, the message body, then
`---` + diffstat or the diff itself. `edit_patch` rewrites only the message (bytes in, bytes out);
series.rewrite_patch_file writes the result atomically and refuses when the diff — hence the patch
id — would change. This module reads text only and imports no Patch: lucepatch.series sits above it.
"""

from __future__ import annotations

import re
from typing import Iterable, Sequence

from lucepatch.errors import UsageError

_TOKEN_LINE = re.compile(r"^([A-Za-z0-9-]+)[ \t]*:[ \t]*(.*)$")  # git's find_separator()
_GIT_GENERATED = ("Signed-off-by: ", "(cherry picked from commit ")
_PATCH_BODY_END = re.compile(r"^---$|^diff --git ", re.M)

Item = tuple[str, str]


# ---- messages ---------------------------------------------------------------------------------
def _paragraph_bounds(lines: list[str]) -> tuple[int, int]:
    """[start, end) of the last paragraph, trailing blank lines excluded; (n, n) when none."""
    end = len(lines)
    while end > 0 and not lines[end - 1].strip():
        end -= 1
    start = end
    while start > 0 and lines[start - 1].strip():
        start -= 1
    return start, end


def _block(lines: list[str]) -> tuple[int, int] | None:
    """[start, end) of the trailer block in `lines` (a whole message), or None."""
    start, end = _paragraph_bounds(lines)
    if start == end:
        return None
    # The title paragraph is never a trailer block.
    first = 0
    while first < len(lines) and not lines[first].strip():
        first += 1
    if start <= first:
        return None
    trailers = others = 0
    recognised = False
    prev_trailer = False
    for line in lines[start:end]:
        if line[:1] in (" ", "\t") and prev_trailer:
            continue  # continuation of the trailer above
        if line.startswith(_GIT_GENERATED):
            recognised = True
        if _TOKEN_LINE.match(line):
            trailers += 1
            prev_trailer = True
        else:
            others += 1
            prev_trailer = False
    if trailers and (not others or (recognised and trailers * 3 >= others)):
        return start, end
    return None


def _items(lines: list[str]) -> list[Item]:
    out: list[list[str]] = []
    prev_trailer = False
    for line in lines:
        if line[:1] in (" ", "\t"):
            if prev_trailer:  # a continuation folds into the trailer above, never into prose
                out[-1][1] += " " + line.strip()
            continue
        m = _TOKEN_LINE.match(line)
        prev_trailer = bool(m)
        if m:
            out.append([m.group(1), m.group(2).strip()])
    return [(k, v.strip()) for k, v in out]


def parse(message: str) -> list[Item]:
    """The trailers of a commit message (title first), as git reads them; continuations unfolded."""
    lines = message.split("\n")
    b = _block(lines)
    return _items(lines[b[0]:b[1]]) if b else []


def values(items: Iterable[Item], key: str) -> list[str]:
    return [v for k, v in items if k.lower() == key.lower()]


def _render(items: Sequence[Item]) -> list[str]:
    return [f"{k}: {v}" for k, v in items]


def edit(message: str, *, set_: Sequence[Item] = (), add: Sequence[Item] = (),
         remove: Iterable[str] = ()) -> str:
    """A new message: keys in `remove` dropped; each key of `set_` replaces the first trailer with
    that key in place (later duplicates dropped) or is appended; `add` is appended as given.
    A message without a trailer block gets one, after a blank line. Ends with one newline."""
    lines = message.rstrip("\n").split("\n") if message.strip() else []
    b = _block(lines)
    if b:
        head, block = lines[: b[0]], lines[b[0]: b[1]]
        items = _items(block)
    else:
        head, items = lines, []
    drop = {k.lower() for k in remove}
    items = [(k, v) for k, v in items if k.lower() not in drop]
    for key, value in set_:
        out, done = [], False
        for k, v in items:
            if k.lower() == key.lower():
                if not done:
                    out.append((key, value))
                    done = True
                continue
            out.append((k, v))
        if not done:
            out.append((key, value))
        items = out
    items = items + list(add)
    while head and not head[-1].strip():
        head.pop()
    if not items:
        return "\n".join(head) + "\n"
    if not head:
        raise UsageError("a commit message needs a title before its trailers")
    return "\n".join(head) + "\n\n" + "\n".join(_render(items)) + "\n"


def append(message: str, extra: Sequence[Item]) -> str:
    """`message` with `extra` appended to its trailer block (git's `--trailer` with addIfDifferent off)."""
    return edit(message, add=extra)


def split(item: str) -> Item:
    """'Key: value' -> ('Key', 'value')."""
    m = _TOKEN_LINE.match(item.strip())
    if not m:
        raise UsageError(f"{item!r} is not a trailer (Key: value)")
    return m.group(1), m.group(2).strip()


# ---- patch files ------------------------------------------------------------------------------
def split_patch(raw: bytes) -> tuple[str, str, str]:
    """(mail headers incl. the blank line after them, message body, the rest from `---`/diff on)."""
    text = raw.decode("utf-8", errors="surrogateescape")
    m = _PATCH_BODY_END.search(text)
    if not m:
        raise UsageError("the patch has no message/diff separator; regenerate it with git format-patch")
    head, tail = text[: m.start()], text[m.start():]
    headers = ""
    if head.startswith("From "):
        hdr_end = head.find("\n\n")
        headers, head = (head, "") if hdr_end < 0 else (head[: hdr_end + 2], head[hdr_end + 2:])
    return headers, head, tail


def _subject(headers: str) -> str:
    m = re.search(r"^Subject:(.*(?:\n[ \t].*)*)", headers, re.M | re.I)
    return " ".join(m.group(1).split()) if m else ""


def edit_patch(raw: bytes, *, set_: Sequence[Item] = (), add: Sequence[Item] = (),
               remove: Iterable[str] = ()) -> bytes:
    """The patch with its message's trailers edited (same rules as `edit`); headers and the diff
    are byte-identical. Patches without mail headers (quilt/plain) carry the title in the body."""
    headers, body, tail = split_patch(raw)
    title = _subject(headers) if headers else ""
    # Edit the message as git sees it: title, blank line, body.
    if headers:
        message = (title or "patch") + "\n\n" + body
        new = edit(message, set_=set_, add=add, remove=remove)
        new_body = new.split("\n", 2)[2] if new.count("\n") >= 2 else ""
        new_body = new_body.lstrip("\n")
    else:
        new_body = edit(body, set_=set_, add=add, remove=remove)
    if not tail.startswith("---"):
        new_body += "---\n"
    return (headers + new_body + tail).encode("utf-8", errors="surrogateescape")


def replace_diff(raw: bytes, fresh: bytes) -> bytes:
    """`raw`'s mail headers and message (byte for byte) with the diffstat and diff of `fresh`
    (a format-patch of the same change on another base): a patch re-exported against a new
    base keeps its words and gets index lines, context and offsets that match the base."""
    headers, body, _tail = split_patch(raw)
    _h, _b, tail = split_patch(fresh)
    if not tail.startswith("---"):
        tail = "---\n" + tail
    body = body.rstrip("\n") + "\n" if body.strip() else body
    return (headers + body + tail).encode("utf-8", errors="surrogateescape")


def patch_trailers(raw: bytes) -> list[Item]:
    headers, body, _tail = split_patch(raw)
    return parse(((_subject(headers) or "patch") + "\n\n" + body) if headers else body)
