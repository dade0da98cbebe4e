"""Crash fingerprints on a corpus of recorded logs (tests/fixtures/crashlogs, provenance in expected.toml)."""

from __future__ import annotations

import json
import tomllib

import pytest
from conftest import FIXTURES, REPO_ROOT

from lucepatch.fingerprints import load_fingerprints, log_facts, match_fingerprint, render_crash_log

CORPUS = FIXTURES / "crashlogs"
_DATA = tomllib.loads((CORPUS / "expected.toml").read_text())
EXPECTED = _DATA["expected"]
EVIDENCE = _DATA.get("evidence", [])
FAMILY = "device id from a failed cuCtxGetDevice"


def _assert_expected(m, want):
    if not want:
        assert m is None, m
    elif want == "family":
        assert m is not None and m["issue"] is None and m["family"] == FAMILY, m
        assert "Project-HAMi/HAMi-core#289" in m["ambiguous"] and "no call path" in m["summary"]
    else:
        assert m is not None and m["issue"] == want, m
        assert m["url"] == f"https://github.com/{want.replace('#', '/issues/')}"
        assert m["summary"] == f"matches {want}"


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_corpus(name):
    _assert_expected(match_fingerprint(None, (CORPUS / name).read_text()), EXPECTED[name])


def test_corpus_covers_every_issue_and_two_unrelated():
    issues = {fp["issue"] for fp in load_fingerprints()["fingerprint"] if not fp.get("family")}
    assert issues == {v for v in EXPECTED.values() if v and v != "family"}
    assert sum(1 for v in EXPECTED.values() if not v) >= 2
    assert all((CORPUS / n).is_file() for n in EXPECTED)
    assert all(p.name in EXPECTED for p in CORPUS.glob("*.log")), "every corpus log needs an expected.toml line"


@pytest.mark.parametrize("entry", EVIDENCE, ids=[f"{e['file'].rsplit('/', 1)[-1]}:{e['scenario']}" for e in EVIDENCE])
def test_committed_evidence_baseline_failures(entry):
    doc = json.loads((REPO_ROOT / entry["file"]).read_text())
    failing = [r for r in doc["runs"] if r["scenario"] == entry["scenario"] and r["variant"] == "baseline"
               and r["outcome"] not in ("pass", "skipped", "invalid")]
    assert failing, f"no failing baseline run of {entry['scenario']} in {entry['file']}"
    for r in failing:
        m = match_fingerprint(r.get("signal"), "\n".join([r.get("first_error", ""), r.get("log_tail", "")]),
                              frames=r.get("backtrace"))
        _assert_expected(m, entry["expect"])
        # the corpus rendering of the same run reads back to the same answer
        _assert_expected(match_fingerprint(None, render_crash_log(r)), entry["expect"])


def test_the_log_line_alone_names_no_single_issue():
    """HAMi's `Illegal device id` comes from every site of the family; without the hook and the call
    path the answer is the family, and without the signal it is no crash fingerprint at all."""
    doc = json.loads((REPO_ROOT / "docs" / "evidence" / "async-sched.h200.json").read_text())
    crashes = [r for r in doc["runs"] if r["variant"] == "baseline" and r.get("signal") and "Illegal" in r["first_error"]]
    assert crashes
    for r in crashes[:5]:
        _assert_expected(match_fingerprint(r["signal"], r["first_error"]), "family")
    assert match_fingerprint(None, crashes[0]["first_error"]) is None


def test_signal_forms_and_site_table():
    line = "[HAMI-core ERROR (pid:1 thread=2 multiprocess_memory_limit.c:1261)]: Illegal device id: 99"
    for sig in ("SIGSEGV", "segv", -11, "11"):
        assert match_fingerprint(sig, line)["family"] == FAMILY
    facts = log_facts(line, "SIGSEGV")
    assert facts["sites"] == ["multiprocess_memory_limit.c:1261"]
    assert facts["functions"] == ["set_current_device_memory_limit"]
    assert match_fingerprint("SIGABRT", line) is None
    assert match_fingerprint(None, "") is None


def test_async_hooks_are_more_specific():
    log = ("[HAMI-core ERROR (pid:1 thread=2 multiprocess_memory_limit.c:1271)]: Illegal device id: 7\n"
           "#0  0x1 in get_current_device_memory_limit (dev=7) at src/multiprocess/multiprocess_memory_limit.c:1273\n"
           "#1  0x2 in oom_check (dev=7, addon=4096) at src/allocator/allocator.c:44\n"
           "#2  0x3 in add_chunk_async (address=0x4, size=4096, hStream=0x5) at src/allocator/allocator.c:270\n"
           "#3  0x4 in cuMemAllocAsync (dptr=0x4, bytesize=4096, hStream=0x5) at src/cuda/memory.c:640\n")
    m = match_fingerprint(None, log)  # no signal: only the async fingerprint (no signal clause) holds
    assert m["issue"] == "Project-HAMi/HAMi-core#289" and "hook cuMemAllocAsync" in m["why"]


def test_ambiguous_tie_is_not_guessed():
    data = {"sites": {}, "fingerprint": [
        {"issue": "a/b#1", "message": "boom"}, {"issue": "a/b#2", "message": "bo+m"}]}
    m = match_fingerprint(None, "boom", data=data)
    assert m["issue"] is None and m["ambiguous"] == ["a/b#1", "a/b#2"]


# ---- one neighbouring crash per fingerprint that must not match it -----------------------------
def _gdb(*frames, signal="SIGSEGV", line="[HAMI-core ERROR (pid:1 thread=2 multiprocess_memory_limit.c:1271)]: "
                                          "Illegal device id: 7"):
    out = [line] if line else []
    out.append(f"Thread 3 received signal {signal}, Segmentation fault.")
    out += [f"#{i}  0x{i + 1:x} in {fn} () at {src}" for i, (fn, src) in enumerate(frames)]
    return "\n".join(out) + "\n"


_MEMINFO_BAD_ID = _gdb(("get_current_device_memory_usage", "multiprocess_memory_limit.c:1294"),
                       ("cuMemGetInfo_v2", "memory.c:491")) + "free=0x7ffe1000, total=0x7ffe1008\n"
_SYNC_FREE = _gdb(("rm_gpu_device_memory_usage", "multiprocess_memory_limit.c:526"), ("remove_chunk", "allocator.c:210"),
                  ("free_raw", "allocator.c:235"), ("cuMemFree_v2", "memory.c:150"), line="")

# id -> (a crash that matches it, the neighbouring crash that must not)
NEIGHBOURS = {
    "169-cumemcreate-oom-check": ("hami-core-169.log", "sim-llama-vmm-host-numa-create.e3c3477.log"),
    "187-cumemcreate-add-chunk-only": ("sim-llama-vmm-host-numa-create.e3c3477.log", "hami-core-169.log"),
    "234-meminfo-null-output": ("hami-core-234.log", _MEMINFO_BAD_ID),
    "276-cumemalloc-add-chunk": ("sim-async-sched-ctxless-sync-alloc.8f3a89c.log",
                                 "sim-async-sched-ctxless-async-alloc.8f3a89c.log"),
    "289-async-alloc": ("sim-async-sched-ctxless-async-alloc.8f3a89c.log", "sim-async-sched-ctxless-sync-alloc.8f3a89c.log"),
    "289-async-free": ("sim-async-sched-ctxless-async-free.8f3a89c.log", _SYNC_FREE),
    "family-device-id": ("hami-core-289.log", "unrelated-utilization-watcher-null-proc.log"),
}


def _text(x: str) -> str:
    return (CORPUS / x).read_text() if x.endswith(".log") else x


def test_every_fingerprint_has_a_neighbour_test():
    assert {fp["id"] for fp in load_fingerprints()["fingerprint"]} == set(NEIGHBOURS)


@pytest.mark.parametrize("fid", sorted(NEIGHBOURS))
def test_neighbouring_crash_does_not_match(fid):
    own, neighbour = NEIGHBOURS[fid]
    m = match_fingerprint(None, _text(own))
    assert m is not None and m["id"] == fid, m
    n = match_fingerprint(None, _text(neighbour))
    assert n is None or n["id"] != fid, n


def test_the_e3c3477_host_numa_crash_names_its_reports_not_289():
    """The llama-vmm / NCCL host-memory crash before 72b24fd is HAMi-core #187 (also reported as
    #169 and, for vLLM's NCCL, HAMi #1764), told by its call path: add_chunk_only <- cuMemCreate."""
    m = match_fingerprint(None, (CORPUS / "sim-llama-vmm-host-numa-create.e3c3477.log").read_text())
    assert m["issue"] == "Project-HAMi/HAMi-core#187" and m["fixed_by"].startswith("72b24fd")
    assert set(m["related"]) == {"Project-HAMi/HAMi-core#169", "Project-HAMi/HAMi#1764"}
    # the same crash without its call path is only the family, never #289
    line = (CORPUS / "sim-llama-vmm-host-numa-create.e3c3477.log").read_text().splitlines()[0]
    assert match_fingerprint("SIGSEGV", line)["issue"] is None


def test_frames_given_by_the_run_override_the_log():
    log = (CORPUS / "hami-core-289.log").read_text()  # line only: the family
    frames = [{"function": "get_current_device_memory_limit", "lib": "libvgpu.so"},
              {"function": "oom_check", "lib": "libvgpu.so"}, {"function": "add_chunk_only", "lib": "libvgpu.so"},
              {"function": "cuMemCreate", "lib": "libvgpu.so"}, {"function": "", "lib": "libnccl.so.2"}]
    assert match_fingerprint("SIGSEGV", log, frames=frames)["issue"] == "Project-HAMi/HAMi-core#187"
