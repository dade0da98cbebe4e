"""ci/github/lucepatch.yml: valid against the GitHub workflow schema, and shaped as documented."""

from __future__ import annotations

import subprocess

import needs
import yaml
from conftest import REPO_ROOT

WORKFLOW = REPO_ROOT / "ci" / "github" / "lucepatch.yml"


def test_schema_valid():
    exe = needs.tool("check-jsonschema")
    r = subprocess.run([exe, "--builtin-schema", "vendor.github-workflows", str(WORKFLOW)], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_shape():
    wf = yaml.safe_load(WORKFLOW.read_text())
    on = wf[True] if True in wf else wf["on"]  # YAML 1.1 reads `on` as True
    assert "schedule" in on and "pull_request" in on
    jobs = wf["jobs"]
    assert {"targets", "cpu", "gpu", "canary"} <= set(jobs)
    for name in ("cpu", "gpu", "canary"):
        assert "fromJSON(needs.targets.outputs.matrix)" in str(jobs[name]["strategy"]["matrix"])
        runs = " ".join(s.get("run", "") for s in jobs[name]["steps"])
        assert "lucepatch --workspace . ci" in runs and "--junit" in runs and "--evidence-dir" in runs
        assert any("upload-artifact" in s.get("uses", "") for s in jobs[name]["steps"])
    assert "self-hosted" in jobs["gpu"]["runs-on"] and "--driver real" in str(jobs["gpu"])
    assert "--driver fake" in str(jobs["cpu"])
    canary = str(jobs["canary"])
    assert "--upstream-head" in canary and "--strict" in canary and "schedule" in jobs["canary"]["if"]
    # every gate the template runs is strict: nothing is skipped or warned past silently
    runs = [st["run"] for j in ("cpu", "gpu", "canary") for st in jobs[j]["steps"] if "lucepatch --workspace . ci" in st.get("run", "")]
    assert len(runs) == 3 and all("--strict" in r for r in runs), runs
