"""tools/gpu_session.sh labels real-driver evidence with the GPU nvidia-smi names: issue 36's H100 run came
back as *.h200.json because the label was fixed to h200 (the files had to be renamed by hand)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def _env_step(tmp_path, gpu_name: str | None, **extra) -> subprocess.CompletedProcess:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    smi = bin_dir / "nvidia-smi"
    smi.unlink(missing_ok=True)
    if gpu_name is not None:  # a stand-in that answers the name query as the driver's tool does
        smi.write_text(f"#!/bin/sh\necho '{gpu_name}'\n")
        smi.chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:/usr/bin:/bin", "OUT": str(tmp_path / "out"), "DRIVER": "real", **extra}
    if "GPU_TAG" not in extra:
        env.pop("GPU_TAG", None)
    return subprocess.run(["bash", "tools/gpu_session.sh", "env"], check=False, cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("name, tag", [("NVIDIA H100 80GB HBM3", "h100"), ("NVIDIA H200", "h200"),
                                       ("NVIDIA GeForce RTX 5090", "geforce-rtx-5090")])
def test_label_is_the_gpu_nvidia_smi_names(tmp_path, name, tag):
    r = _env_step(tmp_path, name)
    assert r.returncode == 0, r.stderr
    assert f"evidence label: {tag}\n" in r.stdout
    assert (tmp_path / "out" / "env.txt").read_text().startswith(f"evidence label: {tag}\n")


def test_no_gpu_named_is_refused_unless_labelled(tmp_path):
    r = _env_step(tmp_path, None)
    assert r.returncode == 3 and "nvidia-smi names no GPU (set GPU_TAG" in r.stderr
    r = _env_step(tmp_path, None, GPU_TAG="h100")
    assert r.returncode == 0 and "evidence label: h100\n" in r.stdout
