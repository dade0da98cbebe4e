"""What `verify` refuses before it builds or runs anything (issue 29), and what a huge --runs costs.

- `--driver real` where no CUDA driver loads: one line, exit 3, in well under a second, no build.
- `--evidence` that cannot be written (no such folder, a folder, not writable): one line before the
  builds, not after every run.
- `--runs` too small for the sequential rule to prove anything: one line, exit 2, the runs it needs.
- `--runs 10000` under the sequential rule: the exact bounds are a closed form, so the command takes
  under 2 s beyond its runs (the enumeration they replaced took minutes at 300 and hours past 1000).
The seconds are an idle machine's; a busy one's budget is stretched by what it stretches a lucepatch
start-up right now (tests/pace.py).
"""

from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import REPO_ROOT
from pace import stretch
from test_verify_verdicts import _series, fh, make_ws  # noqa: F401 (fh is a fixture)

pytestmark = pytest.mark.needs("gcc", "cmake", "/usr/local/cuda/include/cuda.h")


def lp(fh, ws, cache, *args) -> tuple[subprocess.CompletedProcess, float]:
    cmd = [sys.executable, "-m", "lucepatch", "--workspace", str(ws), "--cache-dir", str(cache), "verify",
           "--source", str(fh["upstream"]), "--reproducer", "async-sched", *map(str, args)]
    t0 = time.monotonic()
    r = subprocess.run(cmd, env={**os.environ, "PYTHONPATH": str(REPO_ROOT)}, capture_output=True, text=True)
    return r, time.monotonic() - t0


def _has_driver() -> bool:
    try:
        ctypes.CDLL("libcuda.so.1")
        return True
    except OSError:
        return False


def _nothing_built(cache: Path, r) -> None:
    assert not (cache / "builds").exists() and not (cache / "work").exists(), "a build started"
    assert "building" not in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr


@pytest.mark.skipif(_has_driver(), reason="this machine has a CUDA driver: the refusal cannot happen here")
def test_driver_real_without_a_driver_refuses_before_building(fh, tmp_path):
    ws = make_ws(fh, "ws-in-driver", _series(""), ["async-sched"])
    # the best of two: a machine busy with other work stretches Python's start-up, not the check
    (r, secs), (_, again) = (lp(fh, ws, tmp_path / "cache", "--driver", "real") for _ in range(2))
    secs = min(secs, again)
    assert r.returncode == 3 and r.stderr.startswith("lucepatch: error: --driver real: no NVIDIA driver here"), r.stderr
    assert "--driver fake" in r.stderr  # the fix
    _nothing_built(tmp_path / "cache", r)
    if secs >= 1.0:  # a busy machine stretches it (tests/pace.py)
        s = stretch()
        assert secs < 1.0 * s, f"{secs:.2f} s to refuse (machine stretch {s:.2f})"


@pytest.mark.parametrize("where,code,says", [
    ("missing/ev.json", 2, "does not exist; create it or give another path"),
    ("a-folder", 2, "is a directory"),  # click's own check
    ("/sys/lucepatch-evidence.json", (2, 3), "cannot create a file in /sys"),
])
def test_an_unusable_evidence_path_is_refused_before_anything_runs(fh, tmp_path, where, code, says):
    ws = make_ws(fh, "ws-in-evidence", _series(""), ["async-sched"])
    (tmp_path / "a-folder").mkdir()
    path = where if where.startswith("/") else tmp_path / where
    r, _ = lp(fh, ws, tmp_path / "cache", "--driver", "fake", "--evidence", path)
    assert r.returncode in (code if isinstance(code, tuple) else (code,)), r.stderr
    assert r.stderr.startswith("lucepatch: error: ") and str(path) in r.stderr and says in r.stderr, r.stderr
    _nothing_built(tmp_path / "cache", r)


def test_an_unwritable_evidence_folder_is_refused(fh, tmp_path):
    ws = make_ws(fh, "ws-in-evidence-ro", _series(""), ["async-sched"])
    ro = tmp_path / "ro"
    ro.mkdir(mode=0o555)
    if os.geteuid() != 0:
        r, _ = lp(fh, ws, tmp_path / "cache", "--driver", "fake", "--evidence", ro / "ev.json")
        assert r.returncode == 3 and "cannot create a file in" in r.stderr and "Permission denied" in r.stderr, r.stderr
    else:
        # root writes through mode 0555, so the folder is made unwritable for root too: a read-only bind mount of
        # it in a private mount namespace of this one command (CI runs as root; unshare is how .ci/newcomer hides
        # tools too)
        if subprocess.run(["unshare", "-m", "--propagation", "private", "true"], capture_output=True).returncode:
            pytest.skip("no-tool: unshare -m (a private mount namespace) is needed to make a folder read-only for root")
        cmd = [sys.executable, "-m", "lucepatch", "--workspace", str(ws), "--cache-dir", str(tmp_path / "cache"),
               "verify", "--source", str(fh["upstream"]), "--reproducer", "async-sched", "--driver", "fake",
               "--evidence", str(ro / "ev.json")]
        script = 'mount --bind "$1" "$1" && mount -o remount,bind,ro "$1" && shift && exec "$@"'
        r = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c", script, "sh", str(ro), *cmd],
                           env={**os.environ, "PYTHONPATH": str(REPO_ROOT)}, capture_output=True, text=True)
        assert r.returncode == 3 and "cannot create a file in" in r.stderr and "Read-only file system" in r.stderr, \
            r.stderr
    _nothing_built(tmp_path / "cache", r)


@pytest.mark.parametrize("runs", [1, 4])
def test_runs_the_rule_cannot_prove_with_are_refused(fh, tmp_path, runs):
    ws = make_ws(fh, "ws-in-runs", _series(""), ["async-sched"])
    r, _ = lp(fh, ws, tmp_path / "cache", "--driver", "fake", "--runs", runs)
    assert r.returncode == 2 and "proven needs --runs 5 or more" in r.stderr and f"--fixed --runs {runs}" in r.stderr
    _nothing_built(tmp_path / "cache", r)


def test_runs_10000_answers_within_2_s_beyond_its_runs(fh, tmp_path):
    """Warm builds, then --runs 10000 under the sequential rule: every scenario settles or proves long
    before 10000 (the not-proven ones spend what decides and what estimates), and all that is not runs
    — start-up, the cached builds, the bounds at N = 10000, the evidence — takes under 2 s."""
    ws = make_ws(fh, "ws-in-10000", _series(""), ["async-sched"])
    cache = tmp_path / "cache"
    warm, _ = lp(fh, ws, cache, "--driver", "fake", "--runs", 5)
    assert warm.returncode == 0, warm.stderr
    beyond = []
    for _ in range(2):  # the best of two: a machine busy with other work stretches everything
        r, secs = lp(fh, ws, cache, "--driver", "fake", "--runs", 10000, "--json", "--evidence", tmp_path / "ev.json")
        assert r.returncode == 0, r.stderr
        doc = json.loads(r.stdout)["evidence"]
        pol = doc["run_policy"]
        assert pol["max_runs"] == 10000 and pol["bounds"]["proven_if_no_effect"] <= 0.01
        assert pol["bounds"]["proven_if_patched_rate_at_least_theta"] <= 0.01
        assert len(doc["runs"]) < 100
        beyond.append((secs - doc["execution"]["phases"]["runs_s"], secs))
    if min(beyond)[0] >= 2.0:  # a busy machine stretches it (tests/pace.py)
        s = stretch()
        assert min(beyond)[0] < 2.0 * s, f"(s beyond the runs, s in all): {beyond} (machine stretch {s:.2f})"


def test_retire_with_a_reproducer_and_no_target_names_the_target_by_the_reproducer(fh, tmp_path):
    """`verify --retire REF --reproducer R` without --target takes R's target (as verify --reproducer R
    does); an unknown R is one line, exit 2 — never a traceback (it once called select() without
    the keywords it takes)."""
    ws = make_ws(fh, "ws-retire-select", _series(""), ["async-sched"])
    cmd = [sys.executable, "-m", "lucepatch", "--workspace", str(ws), "--cache-dir", str(tmp_path / "c"), "verify",
           "--source", str(fh["upstream"]), "--retire", "HEAD", "--reproducer", "no-such-reproducer"]
    r = subprocess.run(cmd, env={**os.environ, "PYTHONPATH": str(REPO_ROOT)}, capture_output=True, text=True)
    assert r.returncode == 2 and "no-such-reproducer" in r.stderr and "Traceback" not in r.stderr, r.stderr
