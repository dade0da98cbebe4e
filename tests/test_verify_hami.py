"""Every reproducer against real HAMi-core on the simulated driver (LUCEPATCH_SRC_HAMI_CORE).

Builds HAMi-core at the pin (baseline = Build-Only patches, patched = the series), at e3c3477,
and with a PR #188-style patch (tests/fixtures/pr188); about a minute per build on 2 cores
when the cache is cold.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
import tomlkit

from conftest import FIXTURES, REPO_ROOT

SRC = os.environ.get("LUCEPATCH_SRC_HAMI_CORE")
pytestmark = pytest.mark.skipif(not SRC, reason="no-upstream: set LUCEPATCH_SRC_HAMI_CORE to a HAMi-core checkout")


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("hami-cache")


def _verify(cli, cache, *args, workspace=REPO_ROOT):
    res = cli("--workspace", workspace, "--cache-dir", cache, "verify", "--source", SRC, "--driver", "fake",
              "--json", *args)
    return res, (res.json["evidence"] if res.out.strip() else None)


def _as_main_on_the_pin(tdir: Path) -> None:
    """tdir (patches/hami-core of a scratch workspace) gets the v2.9 line's target.toml and Build-Only patch as
    the family's main target on 8f3a89c: the base the PR fixtures were written against."""
    doc = tomlkit.parse((REPO_ROOT / "patches" / "hami-core-v2.9" / "target.toml").read_text())
    for key in ("line_of",):
        del doc[key]
    doc["name"], doc["line"] = "hami-core", "main"
    (tdir / "target.toml").write_text(tomlkit.dumps(doc))
    shutil.copy(REPO_ROOT / "patches" / "hami-core-v2.9" / "build-accept-cmake-4.patch", tdir)


def test_all_reproducers_proven_on_the_pin(cli, cache):
    """The 8f3a89c line (the main line's base until issue 36): every fix proven."""
    res, doc = _verify(cli, cache, "--all", "--target", "hami-core-v2.9", "--runs", "5")
    assert res.code == 0, res.err
    assert doc["verdict"] == "proven"
    names = {r["name"] for r in doc["reproducers"]}
    assert {"async-sched", "llama-vmm", "multi-device", "zero-limit", "shared-region", "pr188-guard",
            "pool-alloc"} <= names
    v = {s["scenario"]: s["verdict"] for s in doc["scenarios"]}
    # the series trailers name these scenarios
    for key in ("llama-vmm:device-create", "multi-device:stream-device", "zero-limit:zero-means-unlimited",
                "shared-region:ctxless-free-other-process", "async-sched:ctxless-async-alloc",
                "pool-alloc:pool-charged", "pool-alloc:over-limit", "pool-alloc:ctxless-pool-alloc",
                "pool-alloc:default-pool", "pool-alloc:cross-device"):
        assert v[key] == "proven", (key, v[key])
    assert v["llama-vmm:host-numa-create"] == "guarded"


def test_main_line_on_upstream_main(cli, cache):
    """The main line on 52f33fc (issue 36): the series' fixes proven there too; what #217 fixed upstream
    (pool-charged, over-limit) passes on both sides; what #217 made worse (a context-less pool allocation:
    uncharged at 8f3a89c, a crash at 52f33fc) is the baseline's crash the series fixes; graph capture proven (every default-pool and pool capture)."""
    res, doc = _verify(cli, cache, "--all", "--target", "hami-core", "--runs", "5")
    assert doc["upstream"]["base"].startswith("52f33fc"), doc["upstream"]
    sc = {s["scenario"]: s for s in doc["scenarios"]}
    for key in ("async-sched:ctxless-async-alloc", "multi-device:stream-device", "zero-limit:zero-means-unlimited",
                "shared-region:ctxless-free-other-process", "pool-alloc:ctxless-pool-alloc", "pool-alloc:default-pool",
                "pool-alloc:cross-device", "untracked-free:async-free-sync-alloc", "graph-capture:capture-global",
                "graph-capture:capture-thread-local", "graph-capture:capture-relaxed", "graph-capture:capture-kept",
                "graph-capture:capture-pool", "llama-vmm:device-create"):
        assert sc[key]["verdict"] == "proven", (key, sc[key]["verdict"])
    # its worker relaxes itself (the bare H100 refused an unrelaxed one's allocation): a guard, both pass
    assert sc["graph-capture:other-thread-global"]["verdict"] == "guarded"
    assert sc["pool-alloc:ctxless-pool-alloc"]["baseline"]["outcomes"].get("crash", 0) >= 1
    for key in ("pool-alloc:pool-charged", "pool-alloc:over-limit"):  # upstream's #217: fixed on both sides
        assert (sc[key]["baseline"]["failures"], sc[key]["patched"]["failures"]) == (0, 0), key
        assert sc[key]["fixed_upstream"] == "9e1b0c3", key
        # 9e1b0c3 is an ancestor of 52f33fc: a guard of upstream's fix, not "baseline never failed"
        assert sc[key]["verdict"] == "guarded" and sc[key]["regression_guard"], (key, sc[key]["reason"])
        assert sc[key]["reason"].startswith("regression guard (fixed upstream by 9e1b0c3"), sc[key]["reason"]
        assert f"both variants pass {sc[key]['baseline']['runs']}+{sc[key]['patched']['runs']} runs" in sc[key]["reason"]
    assert res.code == 0 and doc["verdict"] == "proven", (doc["verdict"], res.err[-2000:])



def test_async_accounting_is_guarded_on_the_pin(cli, cache):
    """740f9ef/111bf4d are upstream at the pin: a stream-ordered allocation is charged by its size and
    released on free, cycle after cycle, on both variants (the v2.5 line backports them)."""
    res, doc = _verify(cli, cache, "--reproducer", "async-accounting", "--runs", "5")
    assert doc["verdict"] == "not-proven" and res.code == 1, res.err  # guards alone prove nothing
    v = {s["scenario"]: s for s in doc["scenarios"]}
    assert v["async-accounting:control"]["verdict"] == "pass"
    for key in ("async-accounting:async-free-releases-the-charge", "async-accounting:async-cycles-do-not-drift"):
        assert v[key]["verdict"] == "guarded", (key, v[key]["verdict"])
        assert (v[key]["baseline"]["failures"], v[key]["patched"]["failures"]) == (0, 0), key

def test_llama_vmm_crash_fixed_upstream_between_refs(cli, cache):
    # the v2.9 line (8f3a89c): its Build-Only patch is the one written for CMakeLists' 2.8.11 of that era
    res, doc = _verify(cli, cache, "--reproducer", "llama-vmm", "--target", "hami-core-v2.9", "--baseline-ref", "e3c3477",
                       "--patched-ref", "8f3a89c", "--runs", "5", "--scenario", "host-numa-create",
                       "--scenario", "ctxless-device")
    assert res.code == 0, res.err
    s = {x["scenario"]: x for x in doc["scenarios"]}
    assert s["llama-vmm:host-numa-create"]["verdict"] == "proven"
    assert s["llama-vmm:host-numa-create"]["baseline"]["outcomes"] == {"crash": 5}
    assert doc["variants"]["baseline"]["from"] == "ref" and doc["variants"]["baseline"]["patches"] == ["build-accept-cmake-4.patch"]
    # the crash is named by its hook and call path: #187 (before 72b24fd), not the generic #289
    fp = s["llama-vmm:host-numa-create"]["fingerprint"]
    assert fp["issue"] == "Project-HAMi/HAMi-core#187" and "path add_chunk_only <- cuMemCreate" in fp["why"]
    crash = next(r for r in doc["runs"] if r["outcome"] == "crash")
    assert [f["function"] for f in crash["backtrace"][:4]] == [
        "get_current_device_memory_limit", "oom_check", "add_chunk_only", "cuMemCreate"]
    assert crash["load_proof"] == {"when": "before-action", "reporter": "program", "hami_initialized": True}


def test_pr188_style_patch_is_rejected_on_hami_core(cli, cache, tmp_path):
    ws = tmp_path / "ws"
    tdir = ws / "patches" / "hami-core"
    tdir.mkdir(parents=True)
    shutil.copy(REPO_ROOT / "lucepatch.toml", ws / "lucepatch.toml")
    shutil.copytree(REPO_ROOT / "reproducers", ws / "reproducers")
    _as_main_on_the_pin(tdir)
    pr188 = next((FIXTURES / "pr188").glob("*.patch"))
    shutil.copy(pr188, tdir)
    (tdir / "series").write_text(f"build-accept-cmake-4.patch\n{pr188.name}\n")
    res, doc = _verify(cli, cache, "--reproducer", "pr188-guard", "--runs", "5", workspace=ws)
    assert res.code == 1
    assert doc["verdict"] in ("regression", "not-proven")
    s = {x["scenario"]: x["verdict"] for x in doc["scenarios"]}
    assert s["pr188-guard:ctxless-alloc-valid-residue"] == "regression"
    assert s["pr188-guard:ctxless-alloc-exact-error"] == "not-proven"


def test_pr217_style_pool_tracking_is_rejected(cli, cache, tmp_path):
    """Tracking pool allocations with the current context's device (upstream #217's choice) closes
    the bypass on the context's own device and nowhere else: the context-less and cross-device
    scenarios must still fail, so pool-alloc cannot be passed by the unchecked cuCtxGetDevice. On a
    thread without a context the unchecked device id is the poisoned stack's: the patched build
    crashes where the pin only left the allocation uncharged, which verify names `worse` (issue 36,
    as 52f33fc does), never a pass."""
    ws = tmp_path / "ws"
    tdir = ws / "patches" / "hami-core"
    tdir.mkdir(parents=True)
    shutil.copy(REPO_ROOT / "lucepatch.toml", ws / "lucepatch.toml")
    shutil.copytree(REPO_ROOT / "reproducers", ws / "reproducers")
    _as_main_on_the_pin(tdir)
    pr217 = next((FIXTURES / "pr217").glob("*.patch"))
    shutil.copy(pr217, tdir)
    (tdir / "series").write_text(f"build-accept-cmake-4.patch\n{pr217.name}\n")
    res, doc = _verify(cli, cache, "--reproducer", "pool-alloc", "--runs", "5", workspace=ws)
    assert res.code == 1
    s = {x["scenario"]: x for x in doc["scenarios"]}
    assert s["pool-alloc:pool-charged"]["verdict"] == "proven"
    assert s["pool-alloc:over-limit"]["verdict"] == "proven"
    for name in ("pool-alloc:ctxless-pool-alloc", "pool-alloc:default-pool", "pool-alloc:cross-device"):
        assert s[name]["patched"]["failures"] == 5, (name, s[name]["patched"])
    for name in ("pool-alloc:ctxless-pool-alloc", "pool-alloc:default-pool"):  # a crash where the pin was uncharged
        assert s[name]["verdict"] == "worse", (name, s[name]["verdict"], s[name]["reason"])
        assert s[name]["patched"]["outcomes"].get("crash", 0) >= 1 and "crash" not in s[name]["baseline"]["outcomes"]
        assert "Illegal device id" in s[name]["reason"], s[name]["reason"]
    # the context's device charged instead of the pool's: a wrong value on both builds, no crash
    assert s["pool-alloc:cross-device"]["verdict"] == "not-proven", s["pool-alloc:cross-device"]


def test_torch_free_workload_proven_and_torch_workload_skipped(cli, cache):
    """The workload runner end to end on real HAMi-core: ctypes-clients (ThreadPoolExecutor workers
    on the driver API) is proven on the simulated driver; torch-clients reports every torch scenario
    skipped with the reason, never passed, and its torch-free control still runs."""
    res, doc = _verify(cli, cache, "--reproducer", "ctypes-clients", "--runs", "5")
    assert res.code == 0, res.err
    s = {x["scenario"]: x for x in doc["scenarios"]}
    for name in ("threadpool-async-alloc", "threadpool-async-free", "threadpool-sync-alloc"):
        assert s[f"ctypes-clients:{name}"]["verdict"] == "proven", s[f"ctypes-clients:{name}"]
    # at the pin: exit 0 with `Illegal device id` logged (the log line alone fails the run) ...
    sync = [r for r in doc["runs"] if r["variant"] == "baseline" and r["scenario"].endswith("threadpool-sync-alloc")]
    assert any(r["outcome"] == "fail-log" and r["returncode"] == 0 for r in sync)
    # ... the async allocations are made but under-charged (HAMi's usage vs the pool's reservation):
    # add_chunk_async reads the device from a failed cuCtxGetDevice into an uninitialised `dev`, so
    # each allocation is charged only when that stack slot happens to hold a valid device id (0) and
    # refused by cuDeviceGetMemPool otherwise. Which calls see 0 is stack layout, not a rule: on the
    # H200 (docs/evidence/ctypes-clients.h200.json) and here 1 of the 8 blocks is charged every run.
    # What holds whatever the stack held: whole blocks only, at least one of them never charged, and
    # every run logs `Illegal device id`.
    block = 64 << 20
    base = [r for r in doc["runs"] if r["variant"] == "baseline" and r["scenario"].endswith("threadpool-async-alloc")]
    assert base and all(r["values"]["pool_reserved_delta"] >= 8 * block for r in base), base
    assert all(r["values"]["accounted_delta"] % block == 0 for r in base), base
    assert all(r["values"]["accounted_delta"] <= r["values"]["pool_reserved_delta"] - block for r in base), base
    assert all("Illegal device id" in r["reason"] for r in base), base
    patched = [r for r in doc["runs"] if r["variant"] == "patched" and r["scenario"].endswith("threadpool-async-alloc")]
    assert all(r["values"]["accounted_delta"] == r["values"]["pool_reserved_delta"] for r in patched), patched
    # ... and frees from worker threads are uncharged on a garbage device (usage stays, or a crash)
    free = [r for r in doc["runs"] if r["variant"] == "baseline" and r["scenario"].endswith("threadpool-async-free")]
    assert all(r["outcome"] == "crash" or "released with the frees" in r["reason"] for r in free), free
    assert all(r["load_proof"]["hami_initialized"] for r in doc["runs"])

    res, doc = _verify(cli, cache, "--reproducer", "torch-clients", "--fixed", "--runs", "2")
    assert res.code == 1 and doc["verdict"] == "not-proven"  # nothing checked ran: nothing proven
    s = {x["scenario"]: x for x in doc["scenarios"]}
    assert s["torch-clients:driver"]["verdict"] == "pass" and doc["driver"]["kind"] == "fake"
    torch = [v for k, v in s.items() if k != "torch-clients:driver"]
    assert len(torch) == 13 and all(v["verdict"] == "skipped" for v in torch)
    assert all("needs the real CUDA driver" in v["reason"] for v in torch)
    assert {x["scenario"] for x in doc["skipped"]} == {v["scenario"] for v in torch}
