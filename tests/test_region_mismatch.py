"""Libraries of different shared-region versions on one region file, measured on the simulated
driver (issue 27 item 4; the README's Olares section and compatible_hami.toml cite this).

The main line's build (HAMi-core 8f3a89c, region 1.2) and the v2.5 line's (54b1305, region 1.1), both
built from LUCEPATCH_SRC_HAMI_CORE, run one after the other with the same
CUDA_DEVICE_MEMORY_SHARED_CACHE file (and one /tmp/vgpulock, in a private mount namespace where the
machine allows one). The first creates the file; the second — either way round — logs HAMi-core's
`The current version number A.B is different from the file's version number C.D` and goes on (HAMi-core
only logs the mismatch). What happens next depends on what the other version left at the offsets this
one reads, so neither way is safe:
- the v2.5 line (1.1) on the main line's region hangs in its initialisation: killed by the timeout, it
  never reaches the program's first allocation;
- the main line (1.2) on a region the v2.5 line made runs on and allocates, reading the file with its
  own layout. Until the v2.5 line carried the env-less first writer's field (1.6.0, HAMi#2125) it hung
  there too: measured with that line's series cut before that patch (23 of 24 patches: killed; 24: runs).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
from pathlib import Path

import pytest

from conftest import REPO_ROOT

from lucepatch.main import main
from lucepatch.verify.driver import build_fakecuda
from lucepatch.verify.runner import VGPULOCK_DIR, namespace_isolation

SRC = os.environ.get("LUCEPATCH_SRC_HAMI_CORE")
pytestmark = [pytest.mark.needs("gcc", "cmake", "/usr/local/cuda/include/cuda.h"),
              pytest.mark.skipif(not SRC, reason="no-upstream: set LUCEPATCH_SRC_HAMI_CORE to a HAMi-core checkout")]

PROG = r"""
#include <cuda.h>
#include <stdio.h>
int main(void) {
    CUdevice d; CUcontext c; CUdeviceptr p;
    if (cuInit(0) != CUDA_SUCCESS) return 2;
    cuDeviceGet(&d, 0);
    cuCtxCreate_v2(&c, 0, d);
    CUresult r = cuMemAlloc_v2(&p, 1 << 20);
    printf("@@region-test alloc %d\n", (int)r);
    fflush(stdout);
    return r == CUDA_SUCCESS ? 0 : 1;
}
"""
HANG_S = 10


def _build(line: str, cache: Path, capsys) -> Path:
    rc = main(["--workspace", str(REPO_ROOT), "--cache-dir", str(cache), "build", line, "--source", SRC, "--json"])
    out = capsys.readouterr().out
    assert rc == 0
    return Path(json.loads(out)["builds"][0]["artifacts"]["libvgpu.so"]["path"])


def _pair(first: Path, second: Path, prog: Path, fake: Path, region: Path) -> list[dict]:
    """Run the program under `first`, then under `second`, on one region file; each run's output and fate."""
    env = {"PATH": "/usr/bin:/bin", "LD_LIBRARY_PATH": str(fake), "CUDA_DEVICE_MEMORY_SHARED_CACHE": str(region),
           "CUDA_DEVICE_MEMORY_LIMIT": "1g"}
    script = ('mount -t tmpfs -o size=4m,mode=1777 lucepatch-region-test {lock} || exit 97; '
              'LD_PRELOAD="$1" "$3" > "$4.1" 2>&1; echo $? > "$4.1.rc"; '
              'LD_PRELOAD="$2" timeout -s KILL {t} "$3" > "$4.2" 2>&1; echo $? > "$4.2.rc"').format(lock=VGPULOCK_DIR, t=HANG_S)
    isolated, _ = namespace_isolation()
    if isolated:
        cmd = [shutil.which("unshare"), "--mount", "--propagation", "private", "--", "/bin/sh", "-c", script, "sh"]
    else:  # the host's /tmp/vgpulock, serially (a non-root machine)
        cmd = ["/bin/sh", "-c", script.split("; ", 1)[1], "sh"]
    out = region.with_suffix(".out")
    proc = subprocess.Popen([*cmd, str(first), str(second), str(prog), str(out)], env=env, start_new_session=True)
    try:
        proc.wait(timeout=HANG_S * 3 + 30)
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return [{"log": Path(f"{out}.{i}").read_text(errors="replace"), "rc": int(Path(f"{out}.{i}.rc").read_text())}
            for i in (1, 2)]


def test_two_region_versions_on_one_region_file(tmp_path, capsys):
    cache = tmp_path / "cache"
    main12 = _build("hami-core", cache, capsys)
    v25_11 = _build("hami-core-v2.5", cache, capsys)
    fake = build_fakecuda(cache / "fakecuda")
    (tmp_path / "prog.c").write_text(PROG)
    prog = tmp_path / "prog"
    subprocess.run(["gcc", "-I/usr/local/cuda/include", "-o", str(prog), str(tmp_path / "prog.c"), f"-L{fake}",
                    "-l:libcuda.so.1", f"-Wl,-rpath,{fake}"], check=True)
    for first, second, a, b, hangs in ((main12, v25_11, "1.2", "1.1", True), (v25_11, main12, "1.1", "1.2", False)):
        region = tmp_path / f"region-{a}-then-{b}.cache"
        one, two = _pair(first, second, prog, fake, region)
        assert one["rc"] == 0 and "@@region-test alloc 0" in one["log"], one  # the file's creator runs
        assert f"The current version number {b} is different from the file's version number {a}" in two["log"], two
        if hangs:
            assert two["rc"] == 137 and "@@region-test" not in two["log"], two  # hung until killed: no allocation
        else:  # runs on a region of the other layout: the mismatch is only logged, never refused
            assert two["rc"] == 0 and "@@region-test alloc 0" in two["log"], two
