"""lucepatch.api drives the main job alone — workspace, target, check, build, verify (typed
evidence), PR directory, apply — without click or the CLI, and gets the same evidence as the CLI:
verdicts, scenarios and the variants' sha256 (the builds are reproducible, so a second cache
folder gives the same bytes)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO_ROOT, git
from test_pr_fakehami import make_fakehami_ws

pytestmark = pytest.mark.skipif(
    shutil.which("gcc") is None or shutil.which("cmake") is None
    or not os.path.isfile("/usr/local/cuda/include/cuda.h"),
    reason="needs gcc, cmake and /usr/local/cuda/include/cuda.h to build the fixture (not a GPU: CI must have them)",
)

# The main job as a program that only knows lucepatch.api; it reports what it got and whether
# click or any lucepatch.commands module was ever imported.
JOB = r'''
import json, sys
from pathlib import Path
from lucepatch import api

ws_dir, up, cache_dir, out = sys.argv[1:5]
ws = api.open_workspace(ws_dir)
t = api.target(ws, "fakehami")
src = api.source(t, up)
cache = api.cache_dir(cache_dir)
checked = api.check(t, src, cache)
builds = api.build(t, src, cache, ("baseline", "patched"))
lines = []
ev = api.verify(ws, t, ["async-sched"], source=src, cache=cache, driver="fake", runs=5, progress=lines.append)
assert isinstance(ev, api.Evidence)
api.write_evidence(Path(out) / "evidence.json", ev)
pr = api.write_pr(ws, t, src, cache, Path(out) / "pr", evidence=[Path(out) / "evidence.json"])
json.dump({
    "check": [o.status for o in checked.outcomes],
    "builds": {b.variant: b.sha256["libvgpu.so"] for b in builds},
    "verdict": ev.verdict,
    "scenarios": {s.scenario: s.verdict for s in ev.scenarios},
    "variants": {n: v.artifact.sha256 for n, v in ev.variants.items()},
    "progress": len(lines),
    "pr_files": sorted(f.name for f in pr.files),
    "click": "click" in sys.modules,
    "commands": sorted(m for m in sys.modules if m.startswith("lucepatch.commands") or m == "lucepatch.main"),
}, sys.stdout)
'''


def test_main_job_through_the_api_matches_the_cli(cli, tmp_path):
    fx = make_fakehami_ws(tmp_path / "fx")
    out = tmp_path / "out"
    out.mkdir()
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    r = subprocess.run([sys.executable, "-c", JOB, str(fx["ws"]), str(fx["up"]), str(tmp_path / "api-cache"), str(out)],
                       capture_output=True, text=True, env=env, timeout=900)
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)
    assert got["click"] is False and got["commands"] == []  # the API alone: no click, no command module
    assert set(got["check"]) == {"applied"}
    assert got["verdict"] == "proven" and got["progress"] > 0
    assert got["variants"] == got["builds"]
    assert "pr-body.md" in got["pr_files"]

    # the CLI, in another cache folder: the same evidence
    cli_ev = tmp_path / "cli-evidence.json"
    c = cli("--workspace", fx["ws"], "--cache-dir", tmp_path / "cli-cache", "verify", "--reproducer", "async-sched",
            "--source", fx["up"], "--driver", "fake", "--runs", "5", "--evidence", cli_ev)
    assert c.code == 0, c.err
    doc = json.loads(cli_ev.read_text())
    assert doc["verdict"] == got["verdict"]
    assert {s["scenario"]: s["verdict"] for s in doc["scenarios"]} == got["scenarios"]
    assert {n: v["artifact"]["sha256"] for n, v in doc["variants"].items()} == got["variants"]
    api_doc = json.loads((out / "evidence.json").read_text())
    assert api_doc["schema_version"] == doc["schema_version"]
    for v in ("baseline", "patched"):  # the same recipe, up to where each cache keeps its link stubs
        a, b = api_doc["variants"][v]["recipe"], doc["variants"][v]["recipe"]
        assert (a["env"], a["build"], a["unset_env"]) == (b["env"], b["build"], b["unset_env"])


def test_apply_and_errors_through_the_api(tmp_path, monkeypatch):
    from lucepatch import api

    fx = make_fakehami_ws(tmp_path / "fx")
    ws = api.open_workspace(fx["ws"])
    t = api.target(ws, "fakehami")
    src = api.source(t, fx["up"])
    applied = api.apply(t, src, api.cache_dir(tmp_path / "cache"))
    assert applied.switched and not applied.result.conflicts
    assert git(fx["up"], "symbolic-ref", "--short", "HEAD").strip() == t.branch_name
    with pytest.raises(api.UsageError) as exc:
        api.target(ws, "no-such-target")
    assert exc.value.exit_code == 2
    monkeypatch.delenv("LUCEPATCH_SRC_FAKEHAMI", raising=False)
    with pytest.raises(api.EnvironmentMissing) as exc:
        api.source(t, None)
    assert exc.value.exit_code == 3 and "LUCEPATCH_SRC_FAKEHAMI" in str(exc.value)


def test_the_api_module_declares_its_surface():
    from lucepatch import api

    for name in api.__all__:
        assert hasattr(api, name), name
    doc = (REPO_ROOT / "docs" / "api.md").read_text()
    for name in ("open_workspace", "target", "source", "check", "apply", "build", "verify", "write_pr", "gate"):
        assert f"api.{name}(" in doc, name
