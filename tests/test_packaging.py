"""The wheel carries the maintained workspace: install it non-editable into a fresh venv and run
`lucepatch list` from an empty directory (no workspace anywhere above it)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_wheel_ships_patches_and_reproducers(tmp_path):
    wheel_dir = tmp_path / "wheel"
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q",
                        "-w", str(wheel_dir), str(ROOT)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    wheel = next(wheel_dir.glob("lucepatch-*.whl"))
    # a fresh venv that sees the already-installed dependencies but not the source tree
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True, system_site_packages=True).create(env_dir)
    py = env_dir / "bin" / "python"
    site = subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                          capture_output=True, text=True, check=True).stdout.strip()
    r = subprocess.run([str(py), "-m", "pip", "install", "--no-deps", "--no-index", "-q", str(wheel)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    empty = tmp_path / "empty"
    empty.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "LUCEPATCH_WORKSPACE")}
    env["HOME"] = str(tmp_path / "home")
    run = subprocess.run([str(env_dir / "bin" / "lucepatch"), "list", "--json"], cwd=empty, env=env,
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    doc = json.loads(run.stdout)
    assert doc["schema_version"] == 1
    assert doc["workspace"]["origin"] == "packaged" and doc["workspace"]["read_only"] is True
    assert Path(doc["workspace"]["path"]).is_relative_to(Path(site))
    names = {t["name"] for t in doc["targets"]}
    assert "hami-core" in names
    assert "async-sched" in {r["name"] for r in doc["reproducers"]}
    hami = next(t for t in doc["targets"] if t["name"] == "hami-core")
    assert len(hami["patches"]) >= 7 and all(len(p["patch_id"]) == 40 for p in hami["patches"])
