"""The per-run launcher (lucepatch-isolate), LD_BIND_NOW from the runner, and the driver helper:
the cuts issue 13 item 4 makes in the runner, each checked for doing what the old path did."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import needs

from lucepatch.native.fakecuda import build_fakecuda
from lucepatch.native.launch import build_isolate
from lucepatch.verify.driver import DriverChoice, hold_driver
from lucepatch.verify.runner import ISOLATION_FAILED_RC, namespace_isolation



def _need_namespaces():
    ok, why = namespace_isolation()
    if not ok:
        needs.unavailable("no-tool:", f"private mount namespaces (root and unshare from util-linux): {why}")


def _mounts() -> str:
    return Path("/proc/self/mounts").read_text()


def test_launcher_gives_each_run_a_private_vgpulock_and_no_core_dumps(tmp_path):
    _need_namespaces()
    exe = build_isolate(tmp_path / "cache")
    mark = f"lucepatch-test-{os.getpid()}"
    script = (f'grep " /tmp/vgpulock " /proc/self/mounts; ulimit -c; touch /tmp/vgpulock/{mark}; '
              'ls /tmp/vgpulock; cat /proc/self/mountinfo | grep " /tmp/vgpulock " | grep -c shared: || true')
    r = subprocess.run([str(exe), "/bin/sh", "-c", script], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.split("\n")
    assert lines[0].startswith("lucepatch-vgpulock /tmp/vgpulock tmpfs") and "size=4096k" in lines[0]
    assert lines[1] == "0" and lines[2] == mark
    assert lines[3] == "0"  # private: nothing propagates back to the host
    # the host never sees the run's tmpfs or its lock file
    assert "lucepatch-vgpulock" not in _mounts()
    assert not (Path("/tmp/vgpulock") / mark).exists()
    # two runs at once each get their own: a lock file of one is not in the other
    a = subprocess.Popen([str(exe), "/bin/sh", "-c", "touch /tmp/vgpulock/mine; sleep 1; ls /tmp/vgpulock"],
                         stdout=subprocess.PIPE, text=True)
    b = subprocess.run([str(exe), "/bin/sh", "-c", "sleep 0.3; ls /tmp/vgpulock"], capture_output=True, text=True)
    assert a.communicate(timeout=30)[0].split() == ["mine"] and b.stdout.split() == []


def test_launcher_fails_with_the_isolation_code_before_running_anything(tmp_path):
    _need_namespaces()
    exe = build_isolate(tmp_path / "cache")
    r = subprocess.run([str(exe), str(tmp_path / "no-such-program")], capture_output=True, text=True)
    assert r.returncode == ISOLATION_FAILED_RC and "no-such-program" in r.stderr
    r = subprocess.run([str(exe)], capture_output=True, text=True)
    assert r.returncode == ISOLATION_FAILED_RC and "usage" in r.stderr


def test_driver_helper_holds_nvml_and_cuinit_until_the_runs_end(tmp_path, monkeypatch):
    # the helper loads whatever libcuda.so.1 / libnvidia-ml.so.1 the runs would: here the simulated ones
    fake = build_fakecuda(tmp_path / "fakecuda")
    monkeypatch.setenv("LD_LIBRARY_PATH", str(fake))
    drv = DriverChoice("real", "real", {}, fake)
    with hold_driver(drv) as held:
        assert held.proc is not None and held.proc.poll() is None  # alive while the runs go on
        pid = held.proc.pid
        maps = ""
        for _ in range(100):
            maps = Path(f"/proc/{pid}/maps").read_text()
            if "libcuda.so.1" in maps and "libnvidia-ml.so.1" in maps:
                break
            import time
            time.sleep(0.05)
        assert str(fake / "libcuda.so.1") in maps and str(fake / "libnvidia-ml.so.1") in maps
    assert held.proc.returncode == 0 and not Path(f"/proc/{pid}").exists()
    assert held.describe().startswith("a helper process held NVML and the CUDA driver open")
    assert "nvmlInit_v2=0" in held.describe() and "cuInit=0" in held.describe()
    # the simulated driver needs no helper
    with hold_driver(DriverChoice("fake", "fake", {}, fake)) as none:
        assert none.proc is None
    assert none.describe() == ""


def test_runner_sets_bind_now_so_the_reproducer_does_not_exec_itself_again(tmp_path):
    # lp_bind_now re-execs only when LD_BIND_NOW is unset; with the runner's env the first image runs
    from lucepatch.native import compiling
    from lucepatch.verify.runner import scrubbed_environ

    src = tmp_path / "count.c"
    src.write_text('#include <stdio.h>\n#include <stdlib.h>\n#include <unistd.h>\n'
                   '#include <cuda.h>\n#include "lp_report.h"\n'
                   'int main(int argc, char **argv) { fprintf(stderr, "image\\n"); lp_bind_now(argv); '
                   'printf("%s\\n", getenv("LD_BIND_NOW")); return 0; }\n')
    from lucepatch.native import toolchain

    root = Path(__file__).resolve().parent.parent
    out = tmp_path / "count"
    stubs = build_fakecuda(tmp_path / "fakecuda")
    subprocess.run([compiling.cc(), "-o", str(out), str(src), f"-I{toolchain.cuda_include()}",
                    f"-I{root / 'reproducers' / 'common'}", f"-L{stubs}", "-lcuda", f"-Wl,-rpath,{stubs}"], check=True)
    env = scrubbed_environ()
    old = subprocess.run([str(out)], capture_output=True, text=True, env=env)
    new = subprocess.run([str(out)], capture_output=True, text=True, env={**env, "LD_BIND_NOW": "1"})
    assert old.stderr.count("image") == 2 and old.stdout.strip() == "1"
    assert new.stderr.count("image") == 1 and new.stdout.strip() == "1"
