"""`lucepatch ci` on the fakehami fixture targets with the simulated driver."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pytest
from conftest import commit_all, git
from test_pr_fakehami import FAKEHAMI, make_fakehami_ws, pytestmark  # noqa: F401  (same skip rule)


@pytest.fixture
def two_targets(tmp_path, monkeypatch):
    good = make_fakehami_ws(tmp_path)
    bad = make_fakehami_ws(tmp_path, name="fakehami-noop", patches=[FAKEHAMI / "patches" / "bad" / "0001-fix-allocator-noop.patch"])
    monkeypatch.setenv("LUCEPATCH_SRC_FAKEHAMI", str(good["up"]))
    monkeypatch.setenv("LUCEPATCH_SRC_FAKEHAMI_NOOP", str(bad["up"]))
    return {"ws": good["ws"], "good": good, "bad": bad, "tmp": tmp_path}


def _junit(path):
    root = ET.parse(path).getroot()
    assert root.tag == "testsuites"
    for suite in root.iter("testsuite"):
        cases = list(suite.iter("testcase"))
        assert int(suite.get("tests")) == len(cases)
        assert int(suite.get("failures")) == sum(1 for c in cases if c.find("failure") is not None)
        assert int(suite.get("skipped")) == sum(1 for c in cases if c.find("skipped") is not None)
        assert all(c.get("classname") and c.get("name") and float(c.get("time")) >= 0 for c in cases)
    return root


def test_ci_all_gates_fixture_targets_with_valid_junit(cli, two_targets, tmp_path, monkeypatch):
    summary = tmp_path / "summary.md"
    summary.write_text("# earlier step\n")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    junit = tmp_path / "junit.xml"
    r = cli("--workspace", two_targets["ws"], "ci", "--all", "--driver", "fake", "--junit", junit, "--json",
            "--evidence-dir", tmp_path / "ev")
    assert r.code == 1, r.err  # the no-op "fix" cannot be proven: the gate fails
    doc = r.json
    by = {t["target"]: t for t in doc["targets"]}
    assert by["fakehami"]["gate"] == "pass" and by["fakehami-noop"]["gate"] == "fail"
    verify = next(s for s in by["fakehami"]["steps"] if s["name"] == "verify")
    assert {c["name"] for c in verify["cases"]} >= {"async-sched:ctxless-async-alloc", "async-sched:control"}
    assert all(c["driver"] == "fake" for c in verify["cases"])
    root = _junit(junit)
    failed = [c for c in root.iter("testcase") if c.find("failure") is not None]
    assert failed and all(c.get("classname").startswith("fakehami-noop.") for c in failed)
    md = summary.read_text()
    assert md.startswith("# earlier step\n") and "## lucepatch ci — FAILED" in md and "### fakehami: gate pass" in md
    assert (tmp_path / "ev" / "fakehami.async-sched.evidence.json").is_file()
    # only the good target: exit 0
    r = cli("--workspace", two_targets["ws"], "ci", "fakehami", "--driver", "fake", "--junit", junit)
    assert r.code == 0, r.err
    _junit(junit)


def test_ci_cache_reruns_when_a_reproducer_changes(cli, two_targets):
    ws = two_targets["ws"]
    args = ("--workspace", ws, "ci", "fakehami", "--driver", "fake", "--json")
    first = cli(*args)
    assert first.code == 0 and first.json["targets"][0]["cached"] is False
    again = cli(*args)
    assert again.code == 0 and again.json["targets"][0]["cached"] is True
    assert again.json["targets"][0]["key"] == first.json["targets"][0]["key"]
    src = ws / "reproducers" / "async-sched" / "async_sched.c"
    src.write_text(src.read_text() + "\n/* edited */\n")
    edited = cli(*args)
    assert edited.code == 0 and edited.json["targets"][0]["cached"] is False
    assert edited.json["targets"][0]["key"] != first.json["targets"][0]["key"]
    forced = cli(*args, "--no-cache")
    assert forced.json["targets"][0]["cached"] is False


def test_failing_canary_warns_unless_strict(cli, two_targets):
    up = two_targets["good"]["up"]
    git(up, "checkout", "-q", "-b", "head")
    c = up / "src" / "fakehami.c"
    c.write_text(c.read_text().replace("size_t limit = region->limit[dev];", "size_t limit = region->limit[dev] + 0;"))
    commit_all(up, "upstream moves the lines the fix touches")
    git(up, "checkout", "-q", "main")
    args = ("--workspace", two_targets["ws"], "ci", "fakehami", "--driver", "fake", "--upstream-head", "head", "--json")
    r = cli(*args)
    assert r.code == 0, r.err
    t = r.json["targets"][0]
    assert t["gate"] == "pass" and t["canary"] == "warn" and "warning" in r.err
    r = cli(*args, "--strict")
    assert r.code == 1 and r.json["targets"][0]["canary"] == "warn"


def test_missing_named_reproducer_fails_the_gate(cli, two_targets):
    tdir = two_targets["good"]["tdir"]
    p = tdir / "fix-allocator-use-stream-device.patch"
    p.write_text(p.read_text().replace("Reproducer: async-sched", "Reproducer: async-sched\nReproducer: nope:x"))
    r = cli("--workspace", two_targets["ws"], "ci", "fakehami", "--driver", "fake", "--json", "--no-cache")
    assert r.code == 1
    verify = next(s for s in r.json["targets"][0]["steps"] if s["name"] == "verify")
    assert any(c["name"] == "nope" and c["status"] == "fail" for c in verify["cases"])


def test_usage(cli, two_targets):
    assert cli("--workspace", two_targets["ws"], "ci", "fakehami", "--all").code == 2
    assert cli("--workspace", two_targets["ws"], "ci", "--all", "--source", two_targets["good"]["up"]).code == 2
