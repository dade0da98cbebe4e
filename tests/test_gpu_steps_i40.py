"""The GPU steps of issue 40 (tools/gpu_session.sh lbx-vgpu-build, lbx-vgpu-serve, ggml-traces, i28-ggml) cover
what the issue asks: dflash_server in both builds (ggml's VMM pool, GGML_CUDA_NO_VMM=ON) under both lines'
libraries, base vs series, with reproducers/serve; ggml-vmm-pool on both lines and its driver calls traced.
`DRIVER=fake bash tools/gpu_session.sh lbx-vgpu-build lbx-vgpu-serve` runs them with the stand-in; this checks
what they run."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = (ROOT / "tools" / "gpu_session.sh").read_text()


def _step(name: str) -> str:
    m = re.search(rf"^    {re.escape(name)}\)\n(.*?);;", SCRIPT, re.M | re.S)
    assert m, f"no step {name} in gpu_session.sh"
    return m.group(1)


def test_the_steps_exist_and_are_listed():
    head = SCRIPT.split("set -uo pipefail")[0]
    for step in ("lbx-vgpu-build", "lbx-vgpu-serve", "ggml-traces"):
        _step(step)
        assert step in head, f"{step} is not in the header's step list"


def test_serve_runs_both_builds_under_both_lines_base_vs_series():
    body = _step("lbx-vgpu-serve")
    assert "for kind in ${LBV_KINDS:-vmm novmm}" in body and "for t in ${LBV_TARGETS:-hami-core hami-core-v2.5}" in body and "need_52f33fc" in body
    assert "--reproducer serve" in body and "--source $SRC" in body  # base vs series: built from the checkout
    assert "reproducers/serve/servers/dflash-server.toml" in body
    assert "$LBV/build-novmm" in body and "D=$LBV/build;" in body
    # the fake driver runs the stand-in, never the dflash spec
    fake = body.split('if [ "$DRIVER" = fake ]; then', 1)[1].split("else", 1)[0]
    assert "stand-in.toml" in fake and "dflash" not in fake


def test_the_no_vmm_build_is_the_hami_profiles_flag():
    body = _step("lbx-vgpu-build")
    target = tomllib.loads((ROOT / "patches" / "lucebox-vendored" / "target.toml").read_text())
    assert "-DGGML_CUDA_NO_VMM=ON" in target["profiles"]["sm120-cuda13-hami"]["cmake_args"]
    assert "--cmake-arg -DGGML_CUDA_NO_VMM=ON" in body and "build-novmm" in body
    assert "tools/lucebox_native_build.py" in body and "--target lucebox-vendored" in body


def test_the_dflash_spec_starts_the_server_as_lucebox_today_does():
    spec = tomllib.loads((ROOT / "reproducers" / "serve" / "servers" / "dflash-server.toml").read_text())
    check = (ROOT / "tools" / "lucebox_serve_check.py").read_text()
    assert '"--max-ctx", "512"' in check and spec["command"][-2:] == ["--max-ctx", "512"]
    assert "/v1/chat/completions" in check and spec["request"]["url"].endswith("/v1/chat/completions")
    assert "tiny-qwen3.gguf" in _step("lucebox-today") and "$LBV/tiny-qwen3.gguf" in _step("lbx-vgpu-serve")


def test_ggml_vmm_pool_runs_on_both_lines_and_is_traced():
    assert "--reproducer ggml-vmm-pool" in _step("i28-ggml") and "for t in hami-core hami-core-v2.5" in _step("i28-ggml")
    assert "lbx_ggml_dir" in _step("i28-ggml")
    traces = _step("ggml-traces")
    assert "--program ggml-vmm-pool" in traces and "traces-ggml" in traces
