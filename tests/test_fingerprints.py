"""Crash fingerprints on a corpus of recorded logs (tests/fixtures/crashlogs, provenance in expected.toml)."""

from __future__ import annotations

import json
import tomllib

import pytest
from conftest import FIXTURES, REPO_ROOT

from lucepatch.upstream.fingerprints import load_fingerprints, log_facts, match_fingerprint

CORPUS = FIXTURES / "crashlogs"
EXPECTED = tomllib.loads((CORPUS / "expected.toml").read_text())["expected"]


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_corpus(name):
    m = match_fingerprint(None, (CORPUS / name).read_text())
    want = EXPECTED[name]
    if not want:
        assert m is None, m
    else:
        assert m is not None and m["issue"] == want, m
        assert m["url"] == f"https://github.com/{want.replace('#', '/issues/')}"
        assert m["summary"] == f"matches {want}"


def test_corpus_covers_every_issue_and_two_unrelated():
    issues = {fp["issue"] for fp in load_fingerprints()["fingerprint"]}
    assert issues == {v for v in EXPECTED.values() if v}
    assert sum(1 for v in EXPECTED.values() if not v) >= 2
    assert all((CORPUS / n).is_file() for n in EXPECTED)


def test_real_h200_evidence_first_errors_match_289():
    doc = json.loads((REPO_ROOT / "docs" / "evidence" / "async-sched.h200.json").read_text())
    crashes = [r for r in doc["runs"] if r["variant"] == "baseline" and r.get("signal") and "Illegal" in r["first_error"]]
    assert crashes
    for r in crashes[:5]:
        m = match_fingerprint(r["signal"], r["first_error"])
        assert m and m["issue"] == "Project-HAMi/HAMi-core#289"
    # the same line without a crash is not a fingerprint of a crash
    assert match_fingerprint(None, crashes[0]["first_error"]) is None


def test_signal_forms_and_site_table():
    line = "[HAMI-core ERROR (pid:1 thread=2 multiprocess_memory_limit.c:1261)]: Illegal device id: 99"
    for sig in ("SIGSEGV", "segv", -11, "11"):
        assert match_fingerprint(sig, line)["issue"] == "Project-HAMi/HAMi-core#289"
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
