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

from lucepatch.errors import UsageError
from lucepatch.native import elf
from lucepatch.verify.bindshim import MARK

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


_SYMBOL = re.compile(r"symbol lookup error: (?P<obj>\S+): undefined symbol: (?P<sym>[^,\s]+)(?:, version (?P<ver>\S+))?")
_VERSION = re.compile(r"version .(?P<ver>GLIBC_[0-9.]+). not found \(required by (?P<obj>[^)]+)\)")
_OPEN = re.compile(r"error while loading shared libraries: (?P<lib>[^:]+): (?P<why>.*)")
_PRELOAD = re.compile(r"object '(?P<obj>[^']+)' from (?P<via>\S+) cannot be preloaded \((?P<why>[^)]*)\)")


def loader_reason(line: str, *, bind_now: bool = False) -> str:
    """`cannot load: <the loader's line>` with the cause named, for a run whose log has glibc's
    loader refusing a library (the line from the loader's own words on, paths shortened to names).
    bind_now: the run started with LD_BIND_NOW=1 (the C reproducers): a reference the library binds
    lazily then fails at start, where a process bound lazily (a pod's) would load it."""
    m = re.search(r"(symbol lookup error: .*|error while loading shared libraries: .*|ERROR: ld\.so: .*|"
                  r"[^\s:]+: version .GLIBC_.*)", line)
    said = m.group(1) if m else line.strip()
    said = re.sub(r"/\S+/([^/\s:']+)", r"\1", said)[:240]
    libc = elf.system_libc()
    here = elf.libc_provides(libc).glibc if libc else None
    cause = ""
    if (s := _SYMBOL.search(line)) is not None:
        lim = elf.private_symbol_limits().get(s["sym"]) if s["ver"] == "GLIBC_PRIVATE" else None
        if lim:
            cause = (f"{s['sym']}@GLIBC_PRIVATE is not exported by libc.so.6 since glibc {lim['removed_in']}"
                     + (f"; this machine has glibc {here}" if here else ""))
            binding = _binding_of(s["obj"], s["sym"])
            if MARK in line:  # the bind shim stood in for it at start, and the library called it
                cause += (f". The library called {s['sym']} while running (lucepatch's bind shim let it load under "
                          f"LD_BIND_NOW=1): a process bound lazily, a pod's, dies at that same call")
                lim = {**lim, "called": elf.private_symbol_limits().get(s["sym"], {}).get("called", "")}
                if lim["called"]:
                    cause += f" ({lim['called']})"
            elif binding == elf.LAZY and bind_now:
                cause += (f". The library binds {s['sym']} lazily (a PLT call): this run binds every symbol at start "
                          "(LD_BIND_NOW=1, as the C reproducers must), so it stops here, where a process bound lazily "
                          f"(a pod's) loads it and dies only if it calls {s['sym']}")
            elif binding == elf.LAZY:
                cause += f": the library called {s['sym']}, which a process bound lazily resolves at that call"
            else:
                cause += ": the library was built for an older glibc"
        elif s["ver"]:
            cause = f"no library here exports {s['sym']} at version {s['ver']}" + (f" (glibc {here})" if here else "")
        else:
            cause = f"no library here exports {s['sym']}"
    elif (v := _VERSION.search(line)) is not None:
        cause = f"it needs {v['ver']}" + (f"; this machine has glibc {here}" if here else "")
    elif (o := _OPEN.search(line)) is not None:
        cause = f"{o['lib']} is not on the loader's path ({o['why'].strip()})"
    elif (p := _PRELOAD.search(line)) is not None:
        cause = f"the preload was ignored ({p['why']}): the program ran without the library"
    return f"cannot load: {said}" + (f" (cause: {cause})" if cause else "")


@lru_cache(maxsize=32)  # every baseline run of a verify names the same library
def _binding_of(obj: str, sym: str) -> str | None:
    """How the library the loader named binds `sym` (elf.LOAD/LAZY/UNUSED), when it can be read."""
    try:
        return next((r.binding for r in elf.loader_needs(obj).private if r.name == sym), None)
    except (OSError, UsageError):
        return None


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
