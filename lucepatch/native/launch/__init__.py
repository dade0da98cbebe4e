"""The per-run launcher (isolate.c): a private mount namespace with its own /tmp/vgpulock, no
core dumps, then the reproducer — one exec where unshare(1) + sh + mount(8) took four."""

from __future__ import annotations

from pathlib import Path

from lucepatch.native import compiling

_HERE = Path(__file__).resolve().parent


def build_isolate(cache: Path) -> Path:
    """The compiled launcher (once per source + compiler)."""
    cc = compiling.cc()
    unit = compiling.Unit(what="the run launcher (lucepatch-isolate)",
                          steps=[[cc, "-O2", "-Wall", "-o", "{out}/lucepatch-isolate", str(_HERE / "isolate.c")]],
                          outputs=["lucepatch-isolate"], inputs=[_HERE / "isolate.c"])
    return compiling.build_cached(unit, Path(cache) / "launch", compiler=cc) / "lucepatch-isolate"
