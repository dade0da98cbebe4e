"""The call path of a crash, from the preloaded reporter's `signal` event.

The reporter records, for each frame of the crashing thread, the pc, the mapped library and the
offset into it, plus the name dladdr found (exported symbols only). Here the frames are resolved
again with addr2line (binutils), which also names static functions and gives file:line when the
library has debug info (HAMi-core builds Debug); the reporter's own handler frame and the signal
trampoline are dropped, so frame 0 is where the signal hit.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import threading
from collections import defaultdict
from pathlib import Path

from lucepatch import children

MAX_FRAMES = 24
_REPORTER_LIB = "liblp_reporter.so"
_HOOK = re.compile(r"^(cu|nvml)[A-Z]\w*$")


# (library identity, offset) -> addr2line's answer. The same crash gives the same offsets in every run
# (they are relative to the library), so a scenario's later crashes are resolved without a process:
# addr2line on libc alone takes ~0.17 s, spent inside a run's slot. Keyed by the file's identity too,
# so a rebuilt library at the same path is resolved again.
_RESOLVED: dict[tuple, tuple[str, str, int | None]] = {}
_RESOLVED_LOCK = threading.Lock()


def _identity(lib: str) -> tuple | None:
    try:
        st = os.stat(lib)
    except OSError:
        return None
    if not stat.S_ISREG(st.st_mode):
        return None
    return (lib, st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


def _addr2line(lib: str, offsets: list[str]) -> list[tuple[str, str, int | None]]:
    """addr2line's (function, file, line) for each offset; [] when it cannot be asked or answers oddly."""
    ident = _identity(lib)
    if ident is None:
        return []
    with _RESOLVED_LOCK:
        missing = list(dict.fromkeys(o for o in offsets if (ident, o) not in _RESOLVED))
    if missing:
        got = _run_addr2line(lib, missing)
        if not got:
            return []
        with _RESOLVED_LOCK:
            _RESOLVED.update({(ident, o): g for o, g in zip(missing, got)})
    with _RESOLVED_LOCK:
        return [_RESOLVED[(ident, o)] for o in offsets]


def _run_addr2line(lib: str, offsets: list[str]) -> list[tuple[str, str, int | None]]:
    tool = shutil.which("addr2line")
    if not tool:
        return []
    r = children.run_helper([tool, "-f", "-C", "-e", lib, *offsets], timeout=30)
    if r is None:
        return []
    lines = r.stdout.splitlines()
    if r.returncode != 0 or len(lines) != 2 * len(offsets):
        return []
    out = []
    for fn, loc in zip(lines[0::2], lines[1::2]):
        file, _, line = loc.rpartition(":")
        line = line.split(" ", 1)[0]
        out.append(("" if fn == "??" else fn, "" if file in ("??", "") else Path(file).name,
                    int(line) if line.isdigit() and line != "0" else None))
    return out


def _trim(frames: list[dict]) -> list[dict]:
    """Drop the reporter's handler and the signal trampoline above the faulting frame."""
    i = 0
    while i < len(frames) and Path(frames[i].get("lib", "")).name == _REPORTER_LIB:
        i += 1
    if i and i < len(frames) and Path(frames[i].get("lib", "")).name.startswith("libc.so") \
            and frames[i].get("fn", "") in ("", "__restore_rt"):
        i += 1
    return frames[i:]


def call_path(signal_event: dict, *, resolve: bool = True) -> list[dict]:
    """[{"function", "lib", "file"?, "line"?}] innermost first (frame 0 = where the signal hit)."""
    frames = _trim(list(signal_event.get("frames") or []))[:MAX_FRAMES]
    out = [{"function": f.get("fn", ""), "lib": Path(f.get("lib", "")).name} for f in frames]
    if not resolve:
        return out
    by_lib = defaultdict(list)
    for i, f in enumerate(frames):
        if f.get("lib") and f.get("off"):
            # a return address points after the call; -1 lands inside the calling line (not frame 0)
            off = int(f["off"], 16) - (1 if i else 0)
            by_lib[f["lib"]].append((i, hex(off)))
    for lib, items in by_lib.items():
        resolved = _addr2line(lib, [o for _, o in items])
        for (i, _), (fn, file, line) in zip(items, resolved):
            if fn:
                out[i]["function"] = fn
            if file:
                out[i]["file"] = file
            if line:
                out[i]["line"] = line
    return out


def hook_of(path: list[dict], interposer: str) -> str:
    """The first cu*/nvml* function of the interposer on the path: the hook the crash came through."""
    for f in path:
        fn = f.get("function", "")
        if f.get("lib") == interposer and _HOOK.match(fn):
            return fn
    return ""
