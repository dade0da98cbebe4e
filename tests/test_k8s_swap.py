"""The node swap script, run for real on a temporary directory standing in for /usr/local/vgpu.

Two tiny shared libraries are built with gcc; a reader process keeps the old one dlopen'ed
across the swap. Every refusal must leave the directory byte-identical.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

import needs

from lucepatch.k8s import swap

pytestmark = pytest.mark.needs("gcc", "nm")

LIB_SRC = r"""
int hami_fake_version(void) { return %(ver)d; }
int shrreg_major_version(void) { return %(major)d; }
int shrreg_minor_version(void) { return %(minor)d; }
%(extra)s
"""

READER_SRC = r"""
#include <dlfcn.h>
#include <stdio.h>
int main(int argc, char **argv) {
    void *h = dlopen(argv[1], RTLD_NOW);
    if (!h) { printf("dlopen failed: %s\n", dlerror()); return 2; }
    int (*f)(void) = (int (*)(void))dlsym(h, "hami_fake_version");
    char line[64];
    printf("v=%d\n", f()); fflush(stdout);
    while (fgets(line, sizeof line, stdin)) { printf("v=%d\n", f()); fflush(stdout); }
    return 0;
}
"""


def _build_lib(tmp: Path, name: str, ver: int, major=1, minor=2, extra="int cuMemAlloc_v2(void) { return 0; }",
               opt="-O0") -> Path:
    src = tmp / f"{name}.c"
    src.write_text(LIB_SRC % {"ver": ver, "major": major, "minor": minor, "extra": extra})
    out = tmp / f"{name}.so"
    subprocess.run(["gcc", opt, "-shared", "-fPIC", "-o", str(out), str(src)], check=True)
    return out


@pytest.fixture(scope="module")
def libs(tmp_path_factory):
    t = tmp_path_factory.mktemp("libs")
    reader = t / "reader"
    (t / "reader.c").write_text(READER_SRC)
    subprocess.run(["gcc", "-o", str(reader), str(t / "reader.c"), "-ldl"], check=True)
    return {
        "old": _build_lib(t, "old", 1),
        "new": _build_lib(t, "new", 2, extra="int cuMemAlloc_v2(void) { return 0; }\nint added(void) { return 0; }"),
        "new2": _build_lib(t, "new2", 3, extra="int cuMemAlloc_v2(void) { return 0; }\nint added(void) { return 0; }"),
        "missing": _build_lib(t, "missing", 4, extra=""),
        "badver": _build_lib(t, "badver", 5, minor=1),
        "reader": reader,
    }


def sha(p) -> str:
    return hashlib.sha256(Path(p).read_bytes()).hexdigest()


def snapshot(d: Path) -> dict:
    """Every entry of the directory: name -> (mode, content sha256)."""
    return {p.name: (p.stat().st_mode, sha(p)) for p in sorted(d.iterdir())}


@pytest.fixture
def node(tmp_path, libs):
    d = tmp_path / "vgpu"
    d.mkdir()
    shutil.copy(libs["old"], d / "libvgpu.so")
    return d


def run(action, d, lib=None, sha256=None, env=None):
    e = dict(os.environ)
    e.pop("LUCEPATCH_SWAP_TEST_PAUSE", None)
    e.update(env or {})
    return swap.run_script(action, directory=str(d), lib=None if lib is None else str(lib), sha256=sha256, env=e)


def test_install_backup_state_and_noop(node, libs):
    old_sha = sha(libs["old"])
    rc, res, err = run("install", node, libs["new"], sha(libs["new"]))
    assert rc == 0, err
    assert res["outcome"] == "installed"
    assert sha(node / "libvgpu.so") == sha(libs["new"])
    assert sha(node / f"libvgpu.so.backup-{old_sha}") == old_sha
    state = (node / ".lucepatch-state").read_text()
    assert f"installed_sha256={sha(libs['new'])}" in state and f"original_sha256={old_sha}" in state
    assert not [p for p in node.iterdir() if "lucepatch-tmp" in p.name]
    before = snapshot(node)
    rc, res, _ = run("install", node, libs["new"], sha(libs["new"]))
    assert rc == 0 and res["outcome"] == "noop"
    assert snapshot(node) == before
    # a second, different fix keeps the ORIGINAL backup (backed up once) and no new one
    rc, res, _ = run("install", node, libs["new2"], sha(libs["new2"]))
    assert rc == 0 and res["outcome"] == "installed"
    backups = sorted(p.name for p in node.iterdir() if ".backup-" in p.name)
    assert backups == [f"libvgpu.so.backup-{old_sha}"]


def test_rollback_restores_and_verifies(node, libs):
    old_sha = sha(libs["old"])
    assert run("install", node, libs["new"], sha(libs["new"]))[0] == 0
    rc, res, err = run("rollback", node)
    assert rc == 0, err
    assert res["outcome"] == "rolled-back"
    assert sha(node / "libvgpu.so") == old_sha
    rc, res, _ = run("rollback", node)
    assert rc == 0 and res["outcome"] == "noop"


def test_rollback_refuses_over_a_library_lucepatch_did_not_install(node, libs):
    """A HAMi upgrade (vgpu-init.sh's plain cp) put a newer region-1.1 library over the fix: rolling
    back would write the old region-1.2 backup over it. The installed sha256 in the state says no."""
    assert run("install", node, libs["new"], sha(libs["new"]))[0] == 0
    shutil.copyfile(libs["badver"], node / "libvgpu.so")  # in place, as cp does
    before = snapshot(node)
    rc, res, err = run("rollback", node)
    assert rc == 1 and res["outcome"] == "refused", err
    assert "is not the library lucepatch installed" in res["message"]
    assert res["current_sha256"] == sha(libs["badver"]) and res["installed_sha256"] == sha(libs["new"])
    assert snapshot(node) == before


def test_lost_state_never_restores_or_backs_up_lucepatchs_own_library(node, libs):
    assert run("install", node, libs["new"], sha(libs["new"]))[0] == 0
    (node / ".lucepatch-state").unlink()
    before = snapshot(node)
    rc, res, _ = run("rollback", node)  # no state: nothing is restored
    assert rc == 1 and res["outcome"] == "refused" and "no lucepatch state" in res["message"]
    assert snapshot(node) == before
    # a later install would back up lucepatch's own library as "the original": refused instead
    rc, res, _ = run("install", node, libs["new2"], sha(libs["new2"]))
    assert rc == 1 and res["outcome"] == "refused" and "backups of an earlier lucepatch install" in res["message"]
    assert snapshot(node) == before


def test_state_records_every_library_lucepatch_installed(node, libs):
    old_sha = sha(libs["old"])
    for lib in ("new", "new2"):
        assert run("install", node, libs[lib], sha(libs[lib]))[0] == 0
    state = dict(l.split("=", 1) for l in (node / ".lucepatch-state").read_text().splitlines())
    assert state["lucepatch_installed"] == f"{sha(libs['new'])},{sha(libs['new2'])}"
    assert state["original_sha256"] == old_sha  # neither fix became "the original"
    rc, res, err = run("rollback", node)
    assert rc == 0 and res["outcome"] == "rolled-back", err
    assert sha(node / "libvgpu.so") == old_sha


def test_status_reports_current_and_state(node, libs):
    run("install", node, libs["new"], sha(libs["new"]))
    rc, res, _ = run("status", node)
    assert rc == 0
    assert res["current_sha256"] == sha(libs["new"]) == res["installed_sha256"]
    assert res["original_sha256"] == sha(libs["old"])


@pytest.mark.parametrize("case", ["bad-checksum", "non-elf", "missing-symbols", "shrreg-mismatch",
                                  "no-installed-lib", "rollback-no-state", "rollback-missing-backup",
                                  "rollback-corrupt-backup"])
def test_refusals_leave_dir_byte_identical(node, libs, tmp_path, case):
    lib, want = libs["new"], sha(libs["new"])
    action = "install"
    if case == "bad-checksum":
        want = "0" * 64
    elif case == "non-elf":
        lib = tmp_path / "notelf.so"
        lib.write_bytes(b"#!/bin/sh\necho not a library\n")
        want = sha(lib)
    elif case == "missing-symbols":
        lib, want = libs["missing"], sha(libs["missing"])
    elif case == "shrreg-mismatch":
        lib, want = libs["badver"], sha(libs["badver"])
    elif case == "no-installed-lib":
        (node / "libvgpu.so").unlink()
    elif case.startswith("rollback"):
        action, lib, want = "rollback", None, None
        if case != "rollback-no-state":
            assert run("install", node, libs["new"], sha(libs["new"]))[0] == 0
            backup = next(p for p in node.iterdir() if ".backup-" in p.name)
            if case == "rollback-missing-backup":
                backup.unlink()
            else:
                backup.write_bytes(b"\x7fELF corrupted")
    before = snapshot(node)
    rc, res, err = run(action, node, lib, want)
    assert rc == 1, (rc, err)
    assert res["outcome"] == "refused"
    assert snapshot(node) == before, err


def test_refuses_read_only_directory_untouched(node, libs):
    """A read-only bind mount (user+mount namespace), as when the hostPath is mounted ro."""
    if subprocess.run(["unshare", "-rm", "true"], capture_output=True).returncode != 0:
        needs.unavailable("no-tool:", "unshare -rm fails here (user namespaces are disabled); a root shell or "
                                       "kernel.unprivileged_userns_clone=1 runs it")
    before = snapshot(node)
    script = (f"mount --bind {node} {node} && mount -o remount,bind,ro {node} {node} && "
              f"exec bash {swap.script_path()} install --dir {node} --lib {libs['new']} --sha256 {sha(libs['new'])}")
    proc = subprocess.run(["unshare", "-rm", "sh", "-c", script], capture_output=True, text=True)
    assert proc.returncode == 1, proc.stderr
    assert "read-only" in proc.stderr
    assert snapshot(node) == before


def test_reader_keeps_old_library_across_swap(node, libs):
    target = node / "libvgpu.so"
    reader = subprocess.Popen([str(libs["reader"]), str(target)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert reader.stdout.readline().strip() == "v=1"
        assert run("install", node, libs["new"], sha(libs["new"]))[0] == 0
        # the running process still maps the old inode and keeps working
        mappers = swap.stale_mappers(target)
        assert [m["pid"] for m in mappers] == [reader.pid]
        assert mappers[0]["deleted"] is True
        reader.stdin.write("again\n")
        reader.stdin.flush()
        assert reader.stdout.readline().strip() == "v=1"
        # a new process gets the new library
        fresh = subprocess.run([str(libs["reader"]), str(target)], input="", capture_output=True, text=True)
        assert fresh.stdout.strip() == "v=2"
    finally:
        reader.stdin.close()
        assert reader.wait(timeout=10) == 0


def _wait_for(path: Path, timeout=20.0):
    end = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < end, f"{path} never appeared"
        time.sleep(0.02)


def test_kill_between_temp_write_and_rename_leaves_old_library(node, libs, tmp_path):
    hook = tmp_path / "hook"
    env = dict(os.environ, LUCEPATCH_SWAP_TEST_PAUSE=str(hook))
    cmd = ["bash", str(swap.script_path()), "install", "--dir", str(node), "--lib", str(libs["new"]),
           "--sha256", sha(libs["new"])]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    _wait_for(Path(f"{hook}.reached"))
    assert [p for p in node.iterdir() if "lucepatch-tmp" in p.name], "temp file should exist at the pause"
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)
    assert sha(node / "libvgpu.so") == sha(libs["old"])
    assert not (node / ".lucepatch-state").exists()
    # the next run cleans the stale temp file and completes
    rc, res, err = run("install", node, libs["new"], sha(libs["new"]))
    assert rc == 0, err
    assert sha(node / "libvgpu.so") == sha(libs["new"])
    assert not [p for p in node.iterdir() if "lucepatch-tmp" in p.name]


def test_concurrent_runs_serialise(node, libs, tmp_path):
    hook = tmp_path / "hook"
    base = ["bash", str(swap.script_path()), "install", "--dir", str(node)]
    first = subprocess.Popen(base + ["--lib", str(libs["new"]), "--sha256", sha(libs["new"])],
                             env=dict(os.environ, LUCEPATCH_SWAP_TEST_PAUSE=str(hook)),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _wait_for(Path(f"{hook}.reached"))
    env2 = {k: v for k, v in os.environ.items() if k != "LUCEPATCH_SWAP_TEST_PAUSE"}
    second = subprocess.Popen(base + ["--lib", str(libs["new2"]), "--sha256", sha(libs["new2"])],
                              env=env2, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(0.7)
    assert second.poll() is None, "second run must wait for the first one's lock"
    assert sha(node / "libvgpu.so") == sha(libs["old"])
    Path(f"{hook}.go").touch()
    out1, err1 = first.communicate(timeout=30)
    out2, err2 = second.communicate(timeout=30)
    assert first.returncode == 0 and second.returncode == 0, (err1, err2)
    r1, r2 = swap.parse_swap_result(out1), swap.parse_swap_result(out2)
    assert r1["outcome"] == r2["outcome"] == "installed"
    assert r2["previous_sha256"] == sha(libs["new"])  # ran strictly after the first
    assert sha(node / "libvgpu.so") == sha(libs["new2"])
    assert sorted(p.name for p in node.iterdir() if ".backup-" in p.name) == [f"libvgpu.so.backup-{sha(libs['old'])}"]


@pytest.mark.parametrize("opt", ["-O0", "-O2"])
def test_shrreg_version_read_from_elf(tmp_path, opt):
    lib = _build_lib(tmp_path, "v", 1, major=1, minor=2, opt=opt)
    assert swap.shrreg_version(lib) == "1.2"
    lib2 = _build_lib(tmp_path, "w", 1, major=3, minor=7, opt=opt)
    assert swap.shrreg_version(lib2) == "3.7"


def test_shrreg_version_none_when_hidden(tmp_path):
    src = tmp_path / "h.c"
    src.write_text("int shrreg_major_version(void){return 1;}\nint shrreg_minor_version(void){return 2;}\n"
                   "__attribute__((visibility(\"default\"))) int other(void){return 0;}\n")
    out = tmp_path / "h.so"
    subprocess.run(["gcc", "-O2", "-shared", "-fPIC", "-fvisibility=hidden", "-o", str(out), str(src)], check=True)
    assert swap.shrreg_version(out) is None
    assert swap.exported_symbols(out) >= {"other"}


def test_missing_symbols(libs):
    assert swap.missing_symbols(libs["missing"], libs["old"]) == ["cuMemAlloc_v2"]
    assert swap.missing_symbols(libs["new"], libs["old"]) == []


def test_parse_maps_for():
    maps = ("7f00-7f10 r-xp 00000000 08:01 1234 /usr/local/vgpu/libvgpu.so (deleted)\n"
            "7f10-7f20 r--p 00000000 08:01 99 /usr/lib/libc.so.6\n")
    assert swap.parse_maps_for(maps, "/usr/local/vgpu/libvgpu.so", 555) == {"inode": 1234, "deleted": True}
    assert swap.parse_maps_for(maps, "/usr/local/vgpu/libvgpu.so", 1234) is None
