"""A crash's call path: addr2line answers are kept per library file and offset, so the same crash in
a scenario's later runs costs no process, and a rebuilt library is asked again."""

from __future__ import annotations

import os
import subprocess

import pytest

from lucepatch import children
from lucepatch.verify import backtrace

SRC = """
int lp_leaf(int x) { return x * 3 + 1; }
int lp_caller(int x) { return lp_leaf(x) + 2; }
"""


def _build(tmp_path, name="liblp_bt.so", extra=""):
    src = tmp_path / "bt.c"
    src.write_text(SRC + extra)
    lib = tmp_path / name
    subprocess.run(["gcc", "-g", "-O0", "-shared", "-fPIC", "-o", str(lib), str(src)], check=True)
    return lib


def _offset(lib, symbol):
    out = subprocess.run(["nm", str(lib)], capture_output=True, text=True, check=True).stdout
    return hex(int(next(l.split()[0] for l in out.splitlines() if l.endswith(" " + symbol)), 16))


@pytest.fixture
def counted(monkeypatch):
    calls = []
    real = children.run_helper

    def helper(argv, **kw):
        calls.append(argv)
        return real(argv, **kw)

    monkeypatch.setattr(children, "run_helper", helper)
    monkeypatch.setattr(backtrace, "_RESOLVED", {})
    return calls


@pytest.mark.needs("gcc", "addr2line", "nm")
def test_same_crash_resolved_once(tmp_path, counted):
    lib = _build(tmp_path)
    leaf, caller = _offset(lib, "lp_leaf"), _offset(lib, "lp_caller")
    first = backtrace._addr2line(str(lib), [leaf, caller])
    assert [f[0] for f in first] == ["lp_leaf", "lp_caller"]
    assert first[0][1] == "bt.c" and first[0][2] == 2
    assert len(counted) == 1
    # the next run's crash at the same places: answered from what is known, no process
    assert backtrace._addr2line(str(lib), [caller, leaf]) == [first[1], first[0]]
    assert len(counted) == 1
    # one known offset and one new one: only the new one is asked
    third = backtrace._addr2line(str(lib), [leaf, hex(int(caller, 16) + 4)])
    assert third[0] == first[0] and third[1][0] == "lp_caller"
    assert len(counted) == 2 and counted[1][-1] == hex(int(caller, 16) + 4)


@pytest.mark.needs("gcc", "addr2line", "nm")
def test_rebuilt_library_is_asked_again(tmp_path, counted):
    lib = _build(tmp_path)
    off = _offset(lib, "lp_leaf")
    assert backtrace._addr2line(str(lib), [off])[0][0] == "lp_leaf"
    # the same path, other bytes (a rebuild): a different function may now sit at that offset
    lib.unlink()
    rebuilt = _build(tmp_path, extra="int lp_other(int x) { return x; }\n")
    os.utime(rebuilt, ns=(1, 1))
    backtrace._addr2line(str(rebuilt), [off])
    assert len(counted) == 2


def test_missing_library_or_folder_resolves_nothing(tmp_path, counted):
    assert backtrace._addr2line(str(tmp_path / "gone.so"), ["0x10"]) == []
    assert backtrace._addr2line(str(tmp_path), ["0x10"]) == []
    assert counted == []
