"""What a reviewer reads before a `retire-candidate` leaves the series (issue 26).

Behaviour alone says only that the judged inputs behave alike with and without the patch at REF;
whether upstream really fixed the bug (or fixed part of the input space, masked the symptom, moved
the bug) is read in the code. For each candidate the report names:

  hunks          the patch's hunks (file, the line in the patch, git's function header, the text)
  ref_functions  REF's version of the functions those hunks touch (`git grep -W`, whole function)
  runs           the comparisons that made it a candidate (pair, scenario, both sides, the builds)

Nothing here decides anything: it is the material, cut to a readable size.
"""

from __future__ import annotations

import re
from pathlib import Path

from lucepatch import git

_HUNK = re.compile(r"^@@ -\d+(?:,\d+)? \+(\d+)(?:,\d+)? @@ ?(.*)$")
MAX_HUNK_LINES = 40
MAX_FUNCTION_LINES = 80


def hunks(diff: bytes) -> list[dict]:
    """[{file, line, header, text}] of a patch's diff, each hunk's text cut at MAX_HUNK_LINES."""
    out: list[dict] = []
    path = None
    for line in diff.decode("utf-8", "replace").splitlines():
        if line.startswith("+++ "):
            path = None if line[4:] == "/dev/null" else line[6:] if line.startswith("+++ b/") else line[4:]
            continue
        m = _HUNK.match(line)
        if m and path:
            out.append({"file": path, "line": int(m[1]), "header": m[2].strip(), "lines": [line]})
            continue
        if out and path and line[:1] in (" ", "+", "-", "\\"):
            out[-1]["lines"].append(line)
    for h in out:
        lines = h.pop("lines")
        h["text"] = "\n".join(lines[:MAX_HUNK_LINES]) + (f"\n… (+{len(lines) - MAX_HUNK_LINES} lines)"
                                                         if len(lines) > MAX_HUNK_LINES else "")
    return out


def _anchor(hunk_text: str) -> str | None:
    """A line of the hunk's pre-image nearest its change, for finding where REF has that code: the
    first removed line, else the nearest context line above the first added line, else below."""
    body = hunk_text.splitlines()[1:]

    def good(l: str) -> bool:
        t = l[1:].strip()
        return len(t) >= 8 and not t.startswith(("/*", "*", "//"))

    first = next((i for i, l in enumerate(body) if l[:1] in ("+", "-")), None)
    if first is None:
        return None
    removed = [l for l in body if l[:1] == "-" and good(l)]
    if removed:
        return removed[0][1:].strip()
    above = [l for l in reversed(body[:first]) if l[:1] == " " and good(l)]
    below = [l for l in body[first:] if l[:1] == " " and good(l)]
    pick = (above or below or [None])[0]
    return pick[1:].strip() if pick else None


def ref_functions(source: Path, ref: str, hs: list[dict]) -> list[dict]:
    """REF's version of the function around each hunk: {file, anchor, text} (or {file, missing})."""
    out, seen = [], set()
    for h in hs:
        anchor = _anchor(h["text"])
        if anchor is None:
            continue
        res = git.run(Path(source), "grep", "-n", "-W", "-F", "-e", anchor, ref, "--", h["file"], check=False,
                      env={"GIT_OPTIONAL_LOCKS": "0"})
        if res.status != 0 or not res.stdout.strip():
            out.append({"file": h["file"], "anchor": anchor,
                        "missing": f"{ref[:12]}'s {h['file']} has no line {anchor!r}: the code moved or changed"})
            continue
        # git grep prints "<ref>:<file>:<n>:text" (a match), "-<n>-" (context), "=<n>=" (the function line)
        prefix = re.compile(re.escape(f"{ref}:{h['file']}") + r"[:=-](\d+)[:=-]")
        lines = [prefix.sub(r"\1: ", l, count=1) for l in res.stdout.splitlines() if l != "--"]
        text = "\n".join(lines[:MAX_FUNCTION_LINES]) + (f"\n… (+{len(lines) - MAX_FUNCTION_LINES} lines)"
                                                        if len(lines) > MAX_FUNCTION_LINES else "")
        if text in seen:
            continue
        seen.add(text)
        out.append({"file": h["file"], "anchor": anchor, "text": text})
    return out


def runs(details: list[dict], sweep: list[dict] | None = None) -> list[dict]:
    """The comparisons at REF (and the sweep's points) as a reviewer reads them: one line each."""
    out = []
    for d in details + list(sweep or []):
        if d.get("at", "ref") != "ref" or "without" not in d or "with" not in d:
            continue
        out.append({"scenario": d["scenario"], "pair": d.get("pair"), "kind": d.get("kind"),
                    "without": f"{d['without']['build']}: {d['without']['summary']}",
                    "with": f"{d['with']['build']}: {d['with']['summary']}"})
    return out


def material(source: Path, ref: str, patch, details: list[dict], sweep: list[dict] | None = None) -> dict:
    """Everything a reviewer of one retire-candidate reads, with the question they answer."""
    hs = hunks(patch.diff)
    return {"question": "does upstream fix the bug for every input (not just the judged ones), or only "
                        "mask or move it? No code signal says upstream has this change",
            "hunks": hs, "ref_functions": ref_functions(source, ref, hs), "runs": runs(details, sweep)}
