"""The v2.5 line against real HAMi-core (LUCEPATCH_SRC_HAMI_CORE): the session that made it,
replayed (every stop resolved with the committed patch, which then comes out byte for byte);
plain `git am` of the line on 54b1305; `lucepatch build` of it; and every reproducer on the
simulated driver — the fixed scenarios fail at 54b1305 + Build-Only and pass on the line, the three
reproducers whose assumptions do not hold at 54b1305 are reported not-applicable; and the accounting
backport (740f9ef/111bf4d) is what makes async-accounting pass on the line."""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import pytest

from conftest import REPO_ROOT, git
from test_fault_injection import state as checkout_state
from test_rebase_real_moves import MOVES, SRC, _has

LINE_DIR = REPO_ROOT / "patches" / "hami-core-v2.5"
BASE = "54b13055032577b9487d108fa1b18ccaf56274cc"
BACKPORTS = ["70fdbc1", "74a57a1", "833c62c", "72b24fd"]
# added after the first session: the fp1 build fix by hand; the pool fix (main-line patch added in
# 1.1.0) by a second session on the same base, which stopped for it and got it resolved; the
# stream-ordered accounting backport of 740f9ef/111bf4d (1.3.0) by hand, at the end of the series so
# that the carried fixes keep the bytes this session makes
ACCOUNTING = "backport-allocator-charge-cumemallocasync-by-its-size.patch"
# 1.4.0 (issue 28), by hand after the accounting backport: the fixes every released HAMi lacks (each
# the main line's patch of the same name, carried onto 54b1305), the VMM accounting of bd3d7c3 and the
# keep-VMM-charged-until-unmapped fix
ISSUE28 = ("fix-memory-cumemgetinfo-v2-writes-only-the-outputs-it-is-given.patch",
           "fix-allocator-free-untracked-pointers-through-the-driver.patch",
           "fix-allocator-check-the-limit-against-the-usage-at-the-nvml-index.patch",
           "fix-memory-cupointergetattributes-reports-what-the-driver-reports.patch",
           "backport-allocator-account-vmm-allocations.patch",
           "fix-memory-keep-vmm-memory-charged-until-its-last-mapping-is-unmapped.patch")
# 1.5.0 (issue 36): the stream-capture fix, added to the line's series and carried by a session on 54b1305
ISSUE36 = ("fix-allocator-never-break-a-stream-capture-to-charge.patch",)
# 1.6.0 (issue 38): the compute limit (graph launches charged, the watcher's step, #218's NVML fallback) and
# the first writer's limits
ISSUE38 = ("backport-fix-fallback-to-getprocessesutilizationinfo-on-blackwell-gpus.patch",
           "fix-graph-charge-cuda-graph-launches-against-the-sm-limit.patch",
           "fix-multiprocess-steer-the-sm-limit-by-what-a-launch-costs-not-by-sm-num-squared.patch",
           "fix-multiprocess-a-process-without-limit-variables-must-not-set-the-regions-limits.patch")
LATER = ("build-link-with-gcc-10-fp1-is-defined-in-a-header.patch",
         "fix-allocator-track-and-charge-pool-allocations-to-the-pools-device.patch", ACCOUNTING, *ISSUE28, *ISSUE36,
         *ISSUE38)

pytestmark = pytest.mark.skipif(not all(_has(r) for r in [BASE + "^{commit}", *(b + "^{commit}" for b in BACKPORTS)]),
                                reason="no-upstream: set LUCEPATCH_SRC_HAMI_CORE to a HAMi-core checkout with 54b1305 "
                                       "and the backported commits")
TOOLS = shutil.which("cmake") and shutil.which("gcc") and os.path.isfile("/usr/local/cuda/include/cuda.h")


@pytest.fixture(scope="module")
def builds(tmp_path_factory):
    """One build cache for this module's verifies: the line's baseline (54b1305 + Build-Only) and patched
    builds are the same in three tests (builds are keyed by their source tree), so each is built once."""
    return ["--cache-dir", str(tmp_path_factory.mktemp("builds"))]


def _diff(path: Path) -> str:
    text = path.read_text()
    return text[text.index("\ndiff --git ") + 1:]


def test_the_line_is_what_the_session_makes(tmp_path, cli, monkeypatch):
    monkeypatch.setenv("GIT_COMMITTER_NAME", "lucepatch maintainers")
    monkeypatch.setenv("GIT_COMMITTER_EMAIL", "maintainers@lucepatch.invalid")
    before = checkout_state(SRC)
    ws = tmp_path / "ws"
    tdir = ws / "patches" / "hami-core"
    shutil.copytree(MOVES / "series-1.0.0", tdir)
    (ws / "lucepatch.toml").write_text("schema_version = 1\n")
    (tdir / "target.toml").write_text('name = "hami-core"\nupstream = "https://github.com/Project-HAMi/HAMi-core"\n'
                                      'base = "8f3a89c67b037d8fdfe6c4cd4d8c4f0cd6504811"\nversion = "1.0.0"\n')
    shutil.copytree(REPO_ROOT / "reproducers", ws / "reproducers")
    args = ["--workspace", ws, "rebase"]
    onto = [a for b in BACKPORTS for a in ("--backport", b)]
    r = cli(*args, "hami-core", "--source", SRC, "--onto", BASE[:7], "--line", "v2.5", *onto,
            "--build-only", "70fdbc1", "--build-only", "74a57a1", "--build-only", "72b24fd", "--json")
    stops = []
    while r.code == 1:
        cur = r.json["session"]["current"]
        stops.append(cur)
        wt = Path(r.json["session"]["worktree"])
        if not (LINE_DIR / cur).is_file():  # the line does not carry it: nothing to fix at 54b1305
            r = cli(*args, "hami-core-v2.5", "--skip", cur[:-6], "--json")
            continue
        git(wt, "reset", "-q", "--hard", "HEAD")
        git(wt, "clean", "-fdq")
        git(wt, "apply", "--index", str(LINE_DIR / cur))
        r = cli(*args, "hami-core-v2.5", "--continue", "--json")
    assert r.code == 0, r.err
    assert r.json["direction"] == "back" and r.json["bump"] == "new line"
    # every backport and every allocator/accessor fix needed a human at 54b1305; the CMake 4 build fix
    # and the 0-limit fix did not
    assert [s for s in stops if not s.startswith("backport-")] == [
        "fix-allocator-add-chunk-must-not-use-a-device-from-a-failed-cuctxgetdevice.patch",
        "fix-allocator-charge-stream-ordered-allocations-to-the-streams-device.patch",
        "fix-allocator-release-async-frees-against-the-recorded-device.patch",
        "fix-multiprocess-return-early-from-per-device-accessors-on-an-out-of-range-id.patch",
        "fix-memory-charge-device-cumemcreate-to-prop-location-id.patch"]
    assert len(stops) == 9
    made = ws / "patches" / "hami-core-v2.5"
    want = [n for n in (LINE_DIR / "series").read_text().split() if n not in LATER]
    assert (made / "series").read_text().split() == want
    for name in want:  # same diffs, index lines included; the committed messages add backport notes
        assert _diff(made / name) == _diff(LINE_DIR / name), name
    assert checkout_state(SRC) == before


def test_plain_git_am_of_the_line_on_54b1305(tmp_path):
    clone = tmp_path / "hc"
    git(tmp_path, "clone", "-q", "--no-local", "--no-checkout", str(SRC), str(clone))
    git(clone, "checkout", "-q", "--detach", BASE)
    for name in (LINE_DIR / "series").read_text().split():
        git(clone, "am", "-q", str(LINE_DIR / name),
            env={"GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@x", "GIT_CONFIG_GLOBAL": os.devnull})


@pytest.mark.skipif(not TOOLS, reason="no-tool: needs gcc, cmake and /usr/local/cuda/include/cuda.h")
def test_every_reproducer_on_the_simulated_driver(cli, builds):
    r = cli("--workspace", REPO_ROOT, *builds, "verify", "--all", "--target", "hami-core-v2.5", "--source", SRC,
            "--driver", "fake", "--fixed", "--runs", "3", "--json")
    ev = r.json["evidence"]
    assert ev["target"] == "hami-core-v2.5" and ev["upstream"]["base"] == BASE and ev["simulated"] is True
    sc = {s["scenario"]: s for s in ev["scenarios"]}
    fixed = ["async-sched:ctxless-async-alloc", "async-sched:ctxless-async-free", "async-sched:ctxless-sync-alloc",
             "pr188-guard:ctxless-alloc-exact-error", "async-accounting:async-free-releases-the-charge",
             "async-accounting:async-cycles-do-not-drift", "zero-limit:zero-means-unlimited",
             "zero-limit:zero-overrides-fallback", "pool-alloc:pool-charged", "pool-alloc:over-limit",
             "pool-alloc:ctxless-pool-alloc", "pool-alloc:default-pool", "pool-alloc:cross-device",
             "ctypes-clients:threadpool-async-alloc", "ctypes-clients:threadpool-async-free",
             "ctypes-clients:threadpool-sync-alloc",
             # issue 28: VMM accounted on the line, and the fixes every released HAMi lacks
             "llama-vmm:main-device", "llama-vmm:ctxless-device", "llama-vmm:device-create",
             "vmm-release:release-while-mapped", "vmm-release:unmap-then-release", "vmm-release:limit",
             "meminfo-null:null-total", "meminfo-null:null-free", "untracked-free:sync-free-async-alloc",
             "device-index:reordered", "device-index:reordered-cuda-first", "pointer-attrs:managed-reported-managed",
             "pointer-attrs:error-null-data", "ctypes-meminfo:null-total", "ctypes-meminfo:null-free-procaddress",
             # issue 38: an env-less first process no longer sets the region's limits (HAMi#2125)
             "first-writer:envless-first"]
    for name in fixed:
        assert (sc[name]["baseline"]["failures"], sc[name]["patched"]["failures"]) == (3, 0), name
    assert sc["pr188-guard:ctxless-alloc-valid-residue"]["verdict"] == "guarded"
    # only the workloads that need the real CUDA driver (ggml-client, ggml-vmm-pool) or PyTorch
    # (torch-clients, torch-decode), and the rates a GPU has to give (issue 38: sm-limit's quantitative
    # scenarios measure the model on the simulated driver), may skip there; every other control runs and passes
    skipped = {n for n, s in sc.items() if s["verdict"] == "skipped"}
    # (serve: issue 40's server workload, which needs a built server named by LUCEPATCH_SERVER_SPEC)
    assert all(n.startswith(("ggml-client:", "ggml-vmm-pool:", "torch-clients:", "torch-decode:", "serve:"))
               or (n.startswith("sm-limit:") and "model of a GPU" in sc[n]["reason"]) for n in skipped), skipped
    for name, s in sc.items():
        if s["control"] and name not in skipped and not name.startswith(("multi-device", "shared-region")):
            assert s["verdict"] == "pass", name
    na = [n for n, s in sc.items() if s["verdict"] == "not-applicable"]
    assert sorted(na) == sorted(n for n in sc if re.match(r"(multi-device|shared-region):", n))
    assert all(sc[n]["patched"]["runs"] == 0 for n in na)
    assert ev["verdict"] in ("proven", "not-proven")  # 3 runs: significant only at p < 0.01 with more


@pytest.mark.skipif(not TOOLS, reason="no-tool: needs gcc, cmake and /usr/local/cuda/include/cuda.h")
def test_llama_vmm_holds_where_hami_charges_the_context(cli, monkeypatch, builds):
    """54b1305 charges its context_size (the memory NVML reports for the process at init: 518 MiB on the
    H200) again on every cuDevicePrimaryCtxRetain that follows a release (upstream fixed it in 98a39b7).
    llama-vmm's usage reads once retained and released the primary context each time, so on the H200
    (i28-v25, docs/evidence/i28-hami-core-v2.5.h200.json) its control failed on both sides: the reads grew
    the usage they read. The simulated driver's context footprint at the H200's size shows the same with
    that instrument; with the context held across reads the control passes and the VMM charges are proven."""
    monkeypatch.setenv("LUCEPATCH_FAKECUDA_CTX_OVERHEAD_MIB", "518")
    r = cli("--workspace", REPO_ROOT, *builds, "verify", "--target", "hami-core-v2.5", "--reproducer", "llama-vmm",
            "--source", SRC, "--driver", "fake", "--fixed", "--runs", "3", "--json")
    sc = {s["scenario"]: s for s in r.json["evidence"]["scenarios"]}
    assert sc["llama-vmm:control"]["verdict"] == "pass", sc["llama-vmm:control"]["reason"]
    for name in ("llama-vmm:main-device", "llama-vmm:ctxless-device", "llama-vmm:device-create"):
        assert (sc[name]["baseline"]["failures"], sc[name]["patched"]["failures"]) == (3, 0), name
    assert sc["llama-vmm:host-numa-create"]["verdict"] == "guarded"


@pytest.mark.skipif(not TOOLS, reason="no-tool: needs gcc, cmake and /usr/local/cuda/include/cuda.h")
def test_the_accounting_backport_makes_the_difference(tmp_path, cli, builds):
    """The line without the 740f9ef/111bf4d backport drifts like 54b1305 does: the
    accounting fix, not the carried device fixes before it, is what async-accounting proves.

    The stream-capture fix (1.5.0) edits add_chunk_async as the backport left it, so without the backport
    it does not apply (git am's 3-way fallback found the backport's blobs only in a clone where the series
    had been applied before: CI's fresh clone said "do not apply on 54b130550325"); it leaves the line too.
    That it is not what fixes async-accounting is shown by the line without it alone (fixed)."""
    assert ACCOUNTING in (LINE_DIR / "series").read_text().split()
    on_it = "fix-allocator-never-break-a-stream-capture-to-charge.patch"  # written on the backport's code

    def without(names):
        ws = tmp_path / "-".join(n[:12] for n in names)
        shutil.copytree(REPO_ROOT / "patches" / "hami-core-v2.5", ws / "patches" / "hami-core-v2.5")
        shutil.copytree(REPO_ROOT / "patches" / "hami-core", ws / "patches" / "hami-core")
        shutil.copytree(REPO_ROOT / "reproducers", ws / "reproducers")
        (ws / "lucepatch.toml").write_text("schema_version = 1\n")
        series = ws / "patches" / "hami-core-v2.5" / "series"
        series.write_text("".join(f"{n}\n" for n in series.read_text().split() if n not in names))
        for n in names:
            (ws / "patches" / "hami-core-v2.5" / n).unlink()
        return ws

    def failures(workspace):
        r = cli("--workspace", workspace, *builds, "verify", "--reproducer", "async-accounting", "--target", "hami-core-v2.5",
                "--source", SRC, "--driver", "fake", "--fixed", "--runs", "3", "--json")
        assert r.out, r.err  # a refusal (a patch that does not apply) prints no document: say why
        sc = {s["scenario"]: s for s in r.json["evidence"]["scenarios"]}
        assert sc["async-accounting:control"]["verdict"] == "pass"
        return {n: (s["baseline"]["failures"], s["patched"]["failures"]) for n, s in sc.items() if not s["control"]}

    # without it the line charges the pool's 32 MiB reservation and drifts, as 54b1305 does
    assert set(failures(without([ACCOUNTING, on_it])).values()) == {(3, 3)}
    # the capture fix alone out, the backport in: fixed, so the backport is the difference
    assert set(failures(without([on_it])).values()) == {(3, 0)}
