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


def test_ci_all_gates_what_has_a_checkout_and_reports_the_rest_skipped(cli, two_targets, tmp_path, monkeypatch):
    """Without a target's checkout `ci --all` still gates the others and writes its reports; the
    missing one is skipped in JUnit and markdown, and fails the gate only with --strict."""
    monkeypatch.delenv("LUCEPATCH_SRC_FAKEHAMI_NOOP")
    junit, md = tmp_path / "report.xml", tmp_path / "report.md"
    args = ("--workspace", two_targets["ws"], "ci", "--all", "--driver", "fake", "--junit", junit, "--markdown", md)
    r = cli(*args)
    assert r.code == 0, r.err
    root = _junit(junit)
    noop = [c for c in root.iter("testcase") if c.get("classname").startswith("fakehami-noop.")]
    assert len(noop) == 1 and noop[0].find("skipped") is not None
    assert "LUCEPATCH_SRC_FAKEHAMI_NOOP" in noop[0].find("skipped").get("message")
    good = [c for c in root.iter("testcase") if c.get("classname").startswith("fakehami.")]
    assert good and all(c.find("failure") is None for c in good)
    text = md.read_text()
    assert "### fakehami-noop: skipped — no upstream checkout: set LUCEPATCH_SRC_FAKEHAMI_NOOP" in text
    assert "(1 of 2 targets gated)" in text and "### fakehami: gate pass" in text
    # results on stdout: one table per target and the verdict line
    assert "ci fakehami: gate pass" in r.out and "ci fakehami-noop: skipped" in r.out
    assert "ci: gate passed (1 of 2 target(s) gated)" in r.out
    # --strict: the skipped target fails the gate, and the report says so
    r = cli(*args, "--strict", "--json")
    assert r.code == 1
    by = {t["target"]: t for t in r.json["targets"]}
    assert by["fakehami-noop"]["gate"] == "skip" and by["fakehami-noop"]["skipped"]
    noop = [c for c in _junit(junit).iter("testcase") if c.get("classname").startswith("fakehami-noop.")]
    assert noop[0].find("failure") is not None
    # a checkout variable that points at no checkout is a skip too, naming the path
    monkeypatch.setenv("LUCEPATCH_SRC_FAKEHAMI_NOOP", str(tmp_path / "nowhere"))
    r = cli(*args, "--json")
    assert r.code == 0 and "nowhere" in {t["target"]: t for t in r.json["targets"]}["fakehami-noop"]["skipped"]


def test_ci_all_that_gates_nothing_exits_1_with_reports(cli, two_targets, tmp_path, monkeypatch):
    monkeypatch.delenv("LUCEPATCH_SRC_FAKEHAMI")
    monkeypatch.delenv("LUCEPATCH_SRC_FAKEHAMI_NOOP")
    junit = tmp_path / "report.xml"
    r = cli("--workspace", two_targets["ws"], "ci", "--all", "--driver", "fake", "--junit", junit)
    assert r.code == 1, r.err
    root = _junit(junit)
    assert int(root.get("tests")) == 2 and int(root.get("skipped")) == 2 and int(root.get("failures")) == 0
    assert "no target was gated" in r.err and "0 of 2 target(s) gated" in r.out
    # one named target still needs its checkout: exit 3, one line
    r = cli("--workspace", two_targets["ws"], "ci", "fakehami", "--driver", "fake")
    assert r.code == 3 and "LUCEPATCH_SRC_FAKEHAMI" in r.err and len(r.err.strip().splitlines()) <= 2


def test_ci_all_one_variable_gates_every_line_and_no_line_goes_ungated(cli, tmp_path, monkeypatch):
    """One variable per upstream repository serves every line of it: with only LUCEPATCH_SRC_FAKEHAMI
    set, `ci --all` gates fakehami and its line fakehami-v1 (the v2.5 line of hami-core once stayed
    silently ungated with only LUCEPATCH_SRC_HAMI_CORE set). A line whose checkout lacks its base
    fails with one line naming the fetch; a family left without a checkout while its line is gated
    fails too, never a silent skip."""
    import shutil

    fx = make_fakehami_ws(tmp_path)
    ws, line = fx["ws"], fx["ws"] / "patches" / "fakehami-v1"
    shutil.copytree(fx["tdir"], line)
    toml = line / "target.toml"
    toml.write_text(toml.read_text().replace('name = "fakehami"\n', 'name = "fakehami-v1"\nline_of = "fakehami"\nline = "v1"\n'))
    for k in [k for k in __import__("os").environ if k.startswith("LUCEPATCH_SRC_")]:
        monkeypatch.delenv(k)
    monkeypatch.setenv("LUCEPATCH_SRC_FAKEHAMI", str(fx["up"]))
    args = ("--workspace", ws, "ci", "--all", "--driver", "fake", "--json")
    r = cli(*args)
    assert r.code == 0, r.out
    by = {t["target"]: t for t in r.json["targets"]}
    assert by["fakehami"]["gate"] == "pass" and by["fakehami-v1"]["gate"] == "pass", r.err
    assert f"fakehami-v1: gating with {fx['up']}" in r.err
    # a line's [not_applicable] scenario is reported skipped in its gate, never run (it was an error:
    # "no such scenario"); the gate still passes, --strict fails on the skip
    line_toml = toml.read_text()
    toml.write_text(line_toml + '\n[not_applicable]\n"async-sched:ctxless-async-free" = "the line never frees off-thread"\n')
    r = cli(*args)
    assert r.code == 0, r.out
    v1 = {t["target"]: t for t in r.json["targets"]}["fakehami-v1"]
    verify = next(s for s in v1["steps"] if s["name"] == "verify")
    case = next(c for c in verify["cases"] if c["name"] == "async-sched:ctxless-async-free")
    assert case["status"] == "skip" and "not applicable at fakehami-v1's base: the line never frees" in case["detail"]
    assert "1 skipped" in verify["detail"] and v1["gate"] == "pass"
    assert cli(*args, "--strict").code == 1
    toml.write_text(line_toml)
    # the line's base is a commit the checkout never fetched: a failure naming the fetch, in one line
    other = tmp_path / "elsewhere"
    git(tmp_path, "clone", "-q", str(fx["up"]), str(other))
    (other / "NEWS").write_text("v1 line base\n")
    v1_base = commit_all(other, "a commit only the line's branch has")
    toml.write_text(toml.read_text().replace(fx["base"], v1_base))
    r = cli(*args)
    assert r.code == 1
    by = {t["target"]: t for t in r.json["targets"]}
    step = by["fakehami-v1"]["steps"][0]
    assert by["fakehami-v1"]["gate"] == "fail" and step["name"] == "checkout", by["fakehami-v1"]
    assert f"base commit of fakehami-v1 {v1_base} is not in the checkout {fx['up']}" in step["detail"]
    assert f"git -C {fx['up']} fetch" in step["detail"] and "\n" not in step["detail"]
    assert by["fakehami"]["gate"] == "pass"
    # only the line's own variable (the old per-line name): the family would go ungated — a failure
    toml.write_text(toml.read_text().replace(v1_base, fx["base"]))
    monkeypatch.delenv("LUCEPATCH_SRC_FAKEHAMI")
    monkeypatch.setenv("LUCEPATCH_SRC_FAKEHAMI_V1", str(fx["up"]))
    r = cli(*args)
    assert r.code == 1
    by = {t["target"]: t for t in r.json["targets"]}
    assert by["fakehami-v1"]["gate"] == "pass" and by["fakehami"]["gate"] == "fail"
    assert "fakehami would go ungated while fakehami-v1 of the same repository is gated" in by["fakehami"]["steps"][0]["detail"]
    assert "set LUCEPATCH_SRC_FAKEHAMI" in by["fakehami"]["steps"][0]["detail"]
