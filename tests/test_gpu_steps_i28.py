"""The GPU steps of issue 28 (tools/gpu_session.sh i28-*) cover what they must: every reproducer a
new patch of either line names, on both lines, and every program whose H200 trace is awaited for
issue 28. (`DRIVER=fake bash tools/gpu_session.sh i28-main ...` runs them; this checks the coverage.)"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from lucepatch.series import parse_patch

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = (ROOT / "tools" / "gpu_session.sh").read_text()
KNOWN = tomllib.loads((ROOT / "tests" / "fakecuda" / "traces" / "known-differences.toml").read_text())


def _var(name: str) -> list[str]:
    m = re.search(rf'^{name}="(.*?)"$', SCRIPT, re.M | re.S)
    assert m, f"{name} is not set in gpu_session.sh"
    return m.group(1).replace("\\\n", " ").split()


def _issue28_patches():
    for line in ("hami-core", "hami-core-v2.5"):
        d = ROOT / "patches" / line
        for name in (d / "series").read_text().split():
            p = parse_patch(d / name, name)
            if any(r in ("meminfo-null", "untracked-free", "device-index", "pointer-attrs", "vmm-release")
                   for r, _ in p.reproducers) or name.startswith("backport-allocator-account-vmm"):
                yield line, p


def test_every_step_exists():
    for step in ("i28-main", "i28-v25", "i28-traces", "i28-2gpu", "i28-ggml"):
        assert re.search(rf"^\s+{re.escape(step)}\)$", SCRIPT, re.M), step
    assert "i28_verify hami-core i28-hami-core" in SCRIPT and "i28_verify hami-core-v2.5 i28-hami-core-v2.5" in SCRIPT


def test_the_steps_run_every_reproducer_the_new_patches_name():
    repros = set(_var("I28_REPROS")[1::2]) | set(_var("I28_CTYPES")[1::2])
    assert "--reproducer ggml-vmm-pool" in SCRIPT.split("i28-ggml)")[1].split(";;")[0]
    repros.add("ggml-vmm-pool")
    seen = 0
    for line, p in _issue28_patches():
        seen += 1
        for r, s in p.reproducers:
            assert r in repros, (line, p.name, r)
    assert seen == 5 + 6  # five on the main line, six on the v2.5 line


def test_the_traces_step_records_every_awaited_issue28_program():
    programs = _var("I28_TRACES")[1::2]
    awaited = [n for n, why in KNOWN["awaiting-trace"].items() if "issue 28" in why]
    assert awaited
    for name in awaited:
        prog = name.split(".")[0]
        assert name in programs or prog in programs, name
        if "2 GPUs" in KNOWN["awaiting-trace"][name]:
            two_gpu = SCRIPT.split("i28-2gpu)")[1].split(";;")[0]
            assert f"--program {name}" in two_gpu or f"--program {prog} " in two_gpu, name


def test_the_traces_step_re_records_every_exit_status_it_is_named_for():
    """A [returncode] entry that names i28-traces (a reproducer's checks changed after its H200 trace
    was recorded, with the same driver calls) is re-recorded by that step."""
    programs = _var("I28_TRACES")[1::2]
    named = [n for n, why in KNOWN.get("returncode", {}).items() if "i28-traces" in why]
    for name in named:
        assert name in programs or name.split(".")[0] in programs, name
