"""Classify an interposer's log lines (lucepatch/data/hami_log.toml): which are failure signatures
even when the program exits 0, which mean the interposer did not set up (the run is invalid), and
which are only recorded.

HAMi-core logs `[HAMI-core ERROR (pid:… thread=… file.c:LINE)]: msg` (and the older
`[HAMI-core ERROR(pid:tid:file.c:LINE)]`); the fakehami CI fixture logs `[FAKEHAMI ERROR(pid:…)]`.
Lines the runner itself emitted (`@@lucepatch …`) are never classified.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

DATA = Path(__file__).resolve().parent.parent / "data" / "hami_log.toml"
EFFECTS = ("fail", "invalid", "note")
_ERROR_LINE = re.compile(r"\[(?:HAMI-core|FAKEHAMI)\s+ERROR")
_SITE = re.compile(r"([\w.-]+\.c):(\d+)\)")
MAX_KEPT = 12  # distinct classified lines kept with a run


@dataclass(frozen=True)
class Rule:
    cls: str
    pattern: re.Pattern
    effect: str
    why: str


@lru_cache(maxsize=2)
def rules(path: str | None = None) -> tuple[Rule, ...]:
    data = tomllib.loads(Path(path or DATA).read_text(encoding="utf-8"))
    out = []
    for e in data.get("line", []):
        if e.get("effect") not in EFFECTS:
            raise ValueError(f"{path or DATA}: {e.get('class')}: effect must be one of {EFFECTS}")
        out.append(Rule(e["class"], re.compile(e["pattern"]), e["effect"], e.get("why", "")))
    return tuple(out)


def classify_line(line: str) -> dict | None:
    """{"class", "effect", "line", "site"?} for a line that means something, else None."""
    if line.startswith("@@lucepatch"):
        return None
    for r in rules():
        if r.pattern.search(line):
            return _entry(r.cls, r.effect, line)
    if _ERROR_LINE.search(line):
        return _entry("unclassified", "note", line)
    return None


def _entry(cls: str, effect: str, line: str) -> dict:
    out = {"class": cls, "effect": effect, "line": line.strip()[:300]}
    m = _SITE.search(line)
    if m:
        out["site"] = f"{m.group(1)}:{m.group(2)}"
    return out


def classify_log(text: str) -> list[dict]:
    """Classified lines in order of appearance, one per (class, site, message without numbers),
    at most MAX_KEPT, each with how often it was seen."""
    seen: dict[tuple, dict] = {}
    for line in text.splitlines():
        c = classify_line(line)
        if c is None:
            continue
        msg = re.sub(r"\d+", "N", c["line"].split("]", 1)[-1])
        key = (c["class"], c.get("site"), msg)
        if key in seen:
            seen[key]["count"] += 1
        elif len(seen) < MAX_KEPT:
            seen[key] = {**c, "count": 1}
    return list(seen.values())


def first_with(entries: list[dict], effect: str) -> dict | None:
    return next((e for e in entries if e["effect"] == effect), None)
