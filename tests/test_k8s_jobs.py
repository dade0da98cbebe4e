"""Verify Job logs -> run outcomes: recorded pod logs, and the runner script run for real."""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path

import pytest

from lucepatch.k8s import jobs

RECORDED = r"""2026-07-01T12:00:00.000000001Z @@lucepatch-job {"variant":"baseline","runs":3,"node":"olares-one","lib_sha256":"aa11","error":null}
@@lucepatch-run-start {"run":1,"variant":"baseline"}
[HAMI-core Msg(17:140:libvgpu.c:836)]: Initializing.....
[HAMI-core Msg(17:140:libvgpu.c:855)]: Initialized
@@lucepatch {"event":"loaded","preload":"/lucepatch/variant/libvgpu.so","sha256":"aa11"}
@@lucepatch {"event":"driver","kind":"real","gpu":"NVIDIA GeForce RTX 5090 Laptop GPU","driver_version":13000}
[HAMI-core ERROR (pid:17 thread=141 multiprocess_memory_limit.c:1271)]: Illegal device id: 2139062143
@@lucepatch-run {"run":1,"variant":"baseline","returncode":-11,"signal":11,"timed_out":false,"stderr_tail":"[HAMI-core Msg]: Initialized\nIllegal device id: 2139062143"}
@@lucepatch-run-start {"run":2,"variant":"baseline"}
[HAMI-core Msg(18:140:libvgpu.c:855)]: Initialized
@@lucepatch {"event":"check","name":"control","ok":true}
@@lucepatch {"event":"done","ok":true}
@@lucepatch-run {"run":2,"variant":"baseline","returncode":0,"signal":null,"timed_out":false,"stderr_tail":"Initialized"}
@@lucepatch-run-start {"run":3,"variant":"baseline"}
@@lucepatch {"event":"loaded","preload":null}
@@lucepatch {"broken json
@@lucepatch-run {"run":3,"variant":"baseline","returncode":0,"signal":null,"timed_out":false,"stderr_tail":""}
"""


def test_recorded_log():
    log = jobs.parse_job_log(RECORDED)
    assert log.variant == "baseline" and log.node == "olares-one" and log.expected_runs == 3
    assert log.complete
    assert [r.run for r in log.runs] == [1, 2, 3]
    r1, r2, r3 = log.runs
    assert r1.returncode == -11 and r1.signal == 11 and r1.hami_initialized
    assert [e["event"] for e in r1.events] == ["loaded", "driver"]
    assert "Illegal device id" in r1.stderr_tail
    assert r2.returncode == 0 and r2.hami_initialized and r2.events[-1] == {"event": "done", "ok": True}
    assert r3.returncode == 0 and not r3.hami_initialized  # no load marker: proves nothing
    assert len(log.malformed) == 1
    s = jobs.summarise([log])["baseline"]
    assert s == {"runs": 3, "finished": 3, "passed": 1, "failed": 1, "signalled": 1, "timed_out": 0, "invalid": 1}


def test_truncated_log_is_incomplete():
    cut = RECORDED.split("@@lucepatch-run-start {\"run\":3")[0] + '@@lucepatch-run-start {"run":3,"variant":"baseline"}\n'
    log = jobs.parse_job_log(cut)
    assert not log.complete
    assert log.runs[-1].run == 3 and not log.runs[-1].finished
    assert jobs.summarise([log])["baseline"]["finished"] == 2


def test_refused_job():
    log = jobs.parse_job_log('@@lucepatch-job {"variant":"patched","runs":0,"node":"n","lib_sha256":"bb",'
                             '"error":"library sha256 bb is not the expected cc"}\n')
    assert log.error and not log.complete and log.runs == []


FAKE_REPRO = r"""#!/bin/sh
# stands in for a reproducer: HAMi's marker on stderr, events on stdout, then a mode
echo "[HAMI-core Msg(1:1:libvgpu.c:855)]: Initialized" >&2
echo "@@lucepatch {\"event\":\"loaded\",\"preload\":\"$LD_PRELOAD\",\"region\":\"$CUDA_DEVICE_MEMORY_SHARED_CACHE\"}"
n=$(cat "$STATE" 2>/dev/null || echo 0); n=$((n+1)); echo $n > "$STATE"
case "$n" in
  1) printf 'tab\there "quoted" back\\slash\n' >&2; kill -SEGV $$ ;;
  2) echo "@@lucepatch {\"event\":\"done\",\"ok\":true}"; exit 0 ;;
  3) sleep 5 ;;
  *) exit 7 ;;
esac
"""


def _run_runner(tmp_path, runs, want_sha=None, timeout_s=1):
    repro = tmp_path / "repro.sh"
    repro.write_text(FAKE_REPRO)
    repro.chmod(0o755)
    lib = tmp_path / "libvgpu.so"
    lib.write_bytes(b"\x7fELF fake lib")
    env = {"PATH": os.environ["PATH"], "LUCEPATCH_LIB": str(lib), "LUCEPATCH_VARIANT": "patched",
           "LUCEPATCH_RUNS": str(runs), "LUCEPATCH_RUN_TIMEOUT": str(timeout_s), "LUCEPATCH_NODE": "node-a",
           "LUCEPATCH_LIB_SHA256": want_sha if want_sha is not None else hashlib.sha256(lib.read_bytes()).hexdigest(),
           "STATE": str(tmp_path / "count"), "TMPDIR": str(tmp_path)}
    # LD_PRELOAD of a non-library only makes ld.so print a warning; the fake reproducer is a shell script.
    # stdout and stderr share one stream, as in a pod log.
    proc = subprocess.run(["sh", "-c", jobs.RUNNER_SCRIPT, "lucepatch-runner", str(repro)], env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=60)
    return proc


def test_runner_script_for_real(tmp_path):
    proc = _run_runner(tmp_path, runs=4)
    assert proc.returncode == 0, proc.stdout
    log = jobs.parse_job_log(proc.stdout)
    assert log.complete and log.node == "node-a" and not log.malformed
    r = {x.run: x for x in log.runs}
    assert r[1].returncode == -11 and r[1].signal == 11
    assert 'tab\there "quoted" back\\slash' in r[1].stderr_tail
    assert r[2].returncode == 0 and r[2].events[-1] == {"event": "done", "ok": True}
    assert r[2].events[0]["preload"] == str(tmp_path / "libvgpu.so")
    assert r[2].events[0]["region"].endswith("lucepatch-region-2.cache")
    assert r[3].timed_out and r[3].returncode == 124
    assert r[4].returncode == 7
    assert all(x.hami_initialized for x in log.runs)
    assert not list(Path(tmp_path).glob("lucepatch-region-*"))


def test_runner_refuses_wrong_library(tmp_path):
    proc = _run_runner(tmp_path, runs=2, want_sha="0" * 64)
    assert proc.returncode == 3
    log = jobs.parse_job_log(proc.stdout)
    assert log.error and "not the expected" in log.error and log.runs == []
    assert not (tmp_path / "count").exists()  # the reproducer never ran
