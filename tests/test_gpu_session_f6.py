"""tools/gpu_session.sh `lucebox-f6-probe`: the F6 baseline re-measured with the masked link, run here
with DRIVER=fake on the cudaproj fixture (its F6 mimics Lucebox's) and a libcuda.so.1 that ld can see
on LD_LIBRARY_PATH, as the H200 host's driver is: unmasked, that library would satisfy the baseline's
link and show F6 "passing" (what docs/lucebox/bench-probe.h200.log recorded before the mask)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from lucepatch.builders import driverless
from lucepatch.native.fakecuda import build_fakecuda

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests" / "fixtures" / "cudaproj"))
import make_fixture  # noqa: E402


@pytest.mark.needs("cmake", "ninja", "nvcc", "unshare")
def test_step_remeasures_f6_baseline_with_a_visible_driver_masked(tmp_path):
    if not driverless.can_mask():
        import needs
        needs.unavailable("no-tool:", "a private mount namespace (root + unshare -m) to mask the visible libcuda.so.1")
    fx = make_fixture.make(tmp_path)
    fake = build_fakecuda(tmp_path / "fakecuda")
    assert (fake / "libcuda.so.1").is_file()
    out = tmp_path / "out"
    env = {**os.environ, "DRIVER": "fake", "OUT": str(out), "F6_TARGET": "cudaproj", "F6_SOURCE": str(fx["upstream"]),
           "F6_PROFILE": "test", "F6_WORKSPACE": str(fx["ws"]), "LD_LIBRARY_PATH": str(fake),
           "LUCEPATCH_CACHE": str(tmp_path / "cache")}
    r = subprocess.run(["bash", "tools/gpu_session.sh", "lucebox-f6-probe"], cwd=REPO, env=env, capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "F6 baseline re-measured: proven" in r.stdout
    verdict = json.loads((out / "commit" / "probe-f6-verdict.test.fake.json").read_text())
    assert verdict["baseline"]["status"] == "fail" and verdict["baseline"]["as_declared"] is True
    assert verdict["patched"]["status"] == "pass"
    assert str(fake / "libcuda.so.1") in verdict["driver_masked"]  # the visible driver was in play, and masked
    assert (out / "commit" / "probe-f6.test.fake.log").read_text().count("probe f6-link") == 2


def test_checker_says_not_proven_when_the_baseline_links(tmp_path):
    doc = {"runs": [{"variant": "baseline", "probes": [{"fix": "F6", "variant": "baseline", "status": "pass",
                                                         "detail": "linked", "evidence": {"driver_masked": []}}]},
                    {"variant": "patched", "probes": [{"fix": "F6", "variant": "patched", "status": "pass"}]}]}
    p = tmp_path / "p.json"
    p.write_text(json.dumps(doc))
    r = subprocess.run([sys.executable, "tools/lucebox_f6_probe_check.py", str(p)], cwd=REPO, capture_output=True,
                       text=True)
    assert r.returncode == 1 and "not-proven" in r.stdout
    p.write_text(json.dumps({"runs": []}))
    r = subprocess.run([sys.executable, "tools/lucebox_f6_probe_check.py", str(p)], cwd=REPO, capture_output=True,
                       text=True)
    assert r.returncode == 2
