"""Ctrl-C stops `lucepatch verify` at once, wherever it is (issue 29).

A real verify of the fakehami fixture on the simulated driver, run as a subprocess, gets SIGINT (or
SIGTERM) at random points — during the cold build (cmake and its compilers running), during the runs
(up to 6 reproducer processes in flight, each in a process group of its own), at the error bounds, at
the evidence write (lucepatch.faults pause points mark where each phase starts) — and twice in
a row. Every time: exit 130
(143), "lucepatch: interrupted" and no traceback on stderr, the process gone within a second of the
signal (times the machine's current stretch, tests/pace.py), no process it started still alive (found by a token in their environment), and no work area
left: build staging folders, private clones, the runs' scratch folder, a half-written evidence file.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from conftest import REPO_ROOT
from pace import stretch
from sigint import POPEN
from test_verify_verdicts import _series, fh, make_ws  # noqa: F401 (fh is a fixture)

pytestmark = pytest.mark.needs("gcc", "cmake", "/usr/local/cuda/include/cuda.h")

STOP_S = 1.0  # the contract: the process is gone within a second of the signal (on an idle machine: pace.py)


def _leftovers(token: str) -> list[str]:
    """Live processes whose environment carries the token (zombies have none to read)."""
    out = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            if token.encode() in Path(f"/proc/{pid}/environ").read_bytes():
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")[:120]
                out.append(f"{pid} {cmdline!r}")
        except OSError:
            continue
    return out


class Verify:
    """One `lucepatch verify` subprocess with its own token, TMPDIR and pause folder."""

    def __init__(self, fh, ws: Path, tmp: Path, cache: Path, *what: str):
        self.token = uuid.uuid4().hex
        self.tmp, self.pause = tmp / "tmp", tmp / "pause"
        self.tmp.mkdir()
        self.pause.mkdir()
        self.evidence = tmp / "out" / "ev.json"
        self.evidence.parent.mkdir()
        env = {**os.environ, "LP_TEST_TOKEN": self.token, "TMPDIR": str(self.tmp), "PYTHONPATH": str(REPO_ROOT),
               "LUCEPATCH_TEST_PAUSE_AT_PATCH": str(self.pause), "PYTHONUNBUFFERED": "1"}
        self.cache = cache
        cmd = [sys.executable, "-m", "lucepatch", "--workspace", str(ws), "--cache-dir", str(cache), "verify",
               *(what or ("--reproducer", "async-sched")), "--source", str(fh["upstream"]), "--driver", "fake",
               "--evidence", str(self.evidence)]
        self.proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, **POPEN)
        self.err = b""

    def wait_for(self, marker: str, timeout: float = 120.0) -> None:
        """Until pause point `marker` is reached (every other one is let through on the way)."""
        t0 = time.monotonic()
        os.set_blocking(self.proc.stderr.fileno(), False)
        while True:
            chunk = self.proc.stderr.read()  # drained as it goes: a full pipe would stall verify
            if chunk:
                self.err += chunk
            for m in self.pause.iterdir():
                if m.name.endswith(".tmp"):
                    continue
                if m.name == marker:
                    return
                m.unlink(missing_ok=True)
            if self.proc.poll() is not None:
                raise AssertionError(f"verify ended ({self.proc.returncode}) before {marker}: {self.err.decode()}")
            if time.monotonic() - t0 > timeout:
                raise AssertionError(f"no {marker} within {timeout} s: {self.err.decode()[-2000:]}")
            time.sleep(0.005)

    def release(self) -> None:
        """Let the run go on through every pause point from now on (a background thread removes the markers)."""
        import threading

        def sweep():
            while self.proc.poll() is None:
                for m in self.pause.iterdir():
                    if not m.name.endswith(".tmp"):
                        m.unlink(missing_ok=True)
                time.sleep(0.005)

        threading.Thread(target=sweep, daemon=True).start()

    def signal(self, sig=signal.SIGINT, count: int = 1, gap: float = 0.05) -> float:
        """Send `sig` `count` times; the seconds from the first one until the process is gone."""
        t0 = time.monotonic()
        for i in range(count):
            if i:
                time.sleep(gap)
            if self.proc.poll() is None:
                self.proc.send_signal(sig)
        os.set_blocking(self.proc.stderr.fileno(), True)
        out, err = self.proc.communicate(timeout=60)
        elapsed = time.monotonic() - t0
        self.err += err
        return elapsed

    def check_stopped(self, elapsed: float, code: int = 130, what: str = "interrupted") -> None:
        err = self.err.decode("utf-8", "replace")
        assert self.proc.returncode == code, (self.proc.returncode, err[-2000:])
        assert "Traceback" not in err and "Exception ignored" not in err, err[-3000:]
        assert err.rstrip().splitlines()[-1].startswith(f"lucepatch: {what}"), err[-1000:]
        if elapsed >= STOP_S:  # a busy machine stretches it: measured now, while that load lasts
            s = stretch()
            assert elapsed < STOP_S * s, f"{elapsed:.2f} s from the signal to the exit (machine stretch {s:.2f})"
        time.sleep(0.2)  # a killed group's last members are reaped by init, not by the test
        assert _leftovers(self.token) == [], "processes outlived verify"
        assert list(self.tmp.iterdir()) == [], "the runs' scratch folder was left behind"
        assert not (self.cache / "work").exists() or list((self.cache / "work").iterdir()) == [], "a private clone was left"
        staging = list((self.cache / "builds").glob("*.tmp-*")) if (self.cache / "builds").is_dir() else []
        assert staging == [], "a build's staging folder was left"
        assert list(self.evidence.parent.iterdir()) == [], "evidence written (or half of it) by an interrupted verify"


@pytest.fixture(scope="module")
def warm(fh, tmp_path_factory):
    """A workspace whose two builds are in a cache (the runs-phase points start at the runs at once)."""
    ws = make_ws(fh, "ws-interrupt", _series(""), ["async-sched", "harness"])
    cache = tmp_path_factory.mktemp("interrupt-cache")
    r = subprocess.run([sys.executable, "-m", "lucepatch", "--workspace", str(ws), "--cache-dir", str(cache), "verify",
                        "--reproducer", "async-sched", "--source", str(fh["upstream"]), "--driver", "fake", "--runs", "5"],
                       env={**os.environ, "PYTHONPATH": str(REPO_ROOT)}, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return ws, cache


# runs that are still running whenever the signal comes: the harness's `hang` forks a child and both sleep
# until the 3 s timeout (the reproducer and its child must die with verify), beside its control's runs
HANGING = ("--reproducer", "harness", "--scenario", "hang")


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_ctrl_c_during_the_runs(fh, warm, tmp_path, seed):
    """At a random moment after the runs started (seeded: the failing delay is in the test id)."""
    ws, cache = warm
    v = Verify(fh, ws, tmp_path, cache, *HANGING)
    v.wait_for("verify-runs")
    v.release()
    time.sleep(random.Random(seed).uniform(0.05, 1.5))
    v.check_stopped(v.signal())


def test_ctrl_c_among_many_short_runs(fh, warm, tmp_path):
    """async-sched's runs take milliseconds on the simulated driver: processes start and end all the time."""
    ws, cache = warm
    v = Verify(fh, ws, tmp_path, cache, "--reproducer", "async-sched", "--fixed", "--runs", "20")
    v.wait_for("verify-runs")
    v.release()
    time.sleep(0.15)  # 160 runs of ~20 ms on a few slots: seconds of runs, so this lands among them
    v.check_stopped(v.signal())


def test_a_second_ctrl_c_while_it_stops(fh, warm, tmp_path):
    ws, cache = warm
    v = Verify(fh, ws, tmp_path, cache, *HANGING)
    v.wait_for("verify-runs")
    v.release()
    time.sleep(0.4)
    v.check_stopped(v.signal(count=3, gap=0.03))


def test_sigterm_during_the_runs(fh, warm, tmp_path):
    ws, cache = warm
    v = Verify(fh, ws, tmp_path, cache, *HANGING)
    v.wait_for("verify-runs")
    v.release()
    time.sleep(0.3)
    v.check_stopped(v.signal(signal.SIGTERM), code=143, what="terminated")


@pytest.mark.parametrize("point", ["verify-bounds", "evidence-write"])
def test_ctrl_c_at_the_bounds_and_at_the_evidence(fh, warm, tmp_path, point):
    ws, cache = warm
    v = Verify(fh, ws, tmp_path, cache)
    v.wait_for(point)
    v.check_stopped(v.signal())


@pytest.mark.parametrize("seed", [4, 5])
def test_ctrl_c_during_a_cold_build(fh, tmp_path, seed):
    """Cold cache: cmake configures and builds the fixture (make and the compilers in cmake's process
    group); the signal comes a random moment after the first build began."""
    ws = make_ws(fh, f"ws-interrupt-cold-{seed}", _series(""), ["async-sched"])
    cache = tmp_path / "cache"
    v = Verify(fh, ws, tmp_path, cache)
    v.wait_for("build-steps")
    v.release()
    time.sleep(random.Random(seed).uniform(0.05, 0.8))
    v.check_stopped(v.signal())
    shutil.rmtree(cache, ignore_errors=True)
