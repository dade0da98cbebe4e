"""The hami-core v2.5 line (patches/hami-core-v2.5, HAMi v2.5.1's HAMi-core 54b1305): its data
(backports, Build-Only set, reproducers, what it serves) and the deploy gate that accepts its
libraries on shared-region 1.1 releases only."""

from __future__ import annotations

import json
import re
import shutil

import pytest

from conftest import REPO_ROOT, evidence_doc
from lucepatch.k8s import gates
from lucepatch.target import load_target
from lucepatch.workspace import resolve_workspace
from test_k8s_deploy import _lib

LINE = "hami-core-v2.5"
BACKPORTS = {  # the upstream commits the line takes, and why (the patch notes say it in full)
    "70fdbc1fe28598b1ea8746b26d87ff26b68c7e31": "loads on glibc >= 2.34 (no _dl_sym)",
    "74a57a1f0804f5d9e29d7f5ffe64417866cb5f7d": "builds with CUDA 13 headers",
    "833c62cd7edf7ad9e381613ef20d04eb21dc18c3": "checked cuCtxGetDevice in cuMemAllocManaged/Pitch",
    "72b24fdf63c53f77c4dc73ec858761a3dfbb6296": "graph calls fall through (with the CUDA 13 hooks)",
    "940161b745153db69544787b73dd30221e9ce4b7": "links with GCC >= 10 (fp1)",
    # a real fix, not Build-Only (111bf4d's hunk is folded in; the patch note names both)
    "740f9ef7824416feaf92af45cebe4d417e999acc": "cuMemAllocAsync charged by its size, released on free",
    # a real fix: VMM accounting (issue 28), as the main line has it with the series
    "bd3d7c3b1563b90f76e5f85be2c156c89a03d098": "DEVICE cuMemCreate checked and charged, uncharged at cuMemRelease",
    # a real fix (issue 38): PR #218, the watcher's NVML fallback on Blackwell (merged upstream as 06e6980)
    "06e698079335cffd0009f3c119bd95b012600ae5": "nvmlDeviceGetProcessesUtilizationInfo where GetProcessUtilization is NOT_SUPPORTED",
}


@pytest.fixture(scope="module")
def line():
    return load_target(resolve_workspace(REPO_ROOT), LINE)


def test_the_line_is_a_line_of_hami_core_on_54b1305(line, cli):
    assert (line.family, line.line, line.line_of) == ("hami-core", "v2.5", "hami-core")
    assert line.base == "54b13055032577b9487d108fa1b18ccaf56274cc"
    assert cli("--workspace", REPO_ROOT, "lint", LINE).code == 0
    ups = {p.name: p.trailer("Upstream-Status") for p in line.patches}
    backports = {re.fullmatch(r"Backport \[([0-9a-f]{40})\]", s).group(1) for s in ups.values()
                 if s.startswith("Backport [") and "/pull/" not in s}
    assert backports == set(BACKPORTS)
    # fixes upstream merged after the fetchable history: our own patches, naming the pull request
    prs = {n: s for n, s in ups.items() if "/pull/" in s}
    assert prs == {n: f"Backport [https://github.com/Project-HAMi/HAMi-core/pull/{pr}]" for n, pr in (
        ("fix-memory-cumemgetinfo-v2-writes-only-the-outputs-it-is-given.patch", 322),
        ("fix-allocator-free-untracked-pointers-through-the-driver.patch", 322),
        ("fix-memory-cupointergetattributes-reports-what-the-driver-reports.patch", 280))}
    build_only = {p.name for p in line.patches if p.build_only}
    assert build_only == {"backport-fix-dlopen-dl-sym.patch", "backport-add-support-for-cuda-13.patch",
                          "backport-fix-vllm-eager-mode-cause-core-dump.patch", "build-accept-cmake-4.patch",
                          "build-link-with-gcc-10-fp1-is-defined-in-a-header.patch"}
    acct = next(p for p in line.patches if p.trailer("Upstream-Status") == "Backport [740f9ef7824416feaf92af45cebe4d417e999acc]")
    assert "111bf4d" in acct.body and {r for r, _ in acct.reproducers} == {"async-accounting"}
    for p in line.patches:
        assert "Signed-off-by: lucepatch maintainers <maintainers@lucepatch.invalid>" in p.raw.decode(), p.name
        if not p.build_only and not p.name.startswith("backport-"):
            assert p.reproducers, p.name  # every carried fix still names what proves it
    main = load_target(resolve_workspace(REPO_ROOT), "hami-core")
    carried = [n for n in line.series if not n.startswith(("backport-", "build-"))]
    # every main-line fix but the cuMemCreate one (nothing to fix at 54b1305), the pool fix included
    assert set(main.series) - set(carried) == {"build-accept-cmake-4.patch",
                                               "fix-memory-charge-device-cumemcreate-to-prop-location-id.patch"}
    # the one main-line fix with nothing to fix at 54b1305 is recorded, not lost — as a person's skip in
    # dropped/, never as applied upstream (no code signal says 54b1305 has it: issue 41)
    skipped = (line.dir / "dropped" / "fix-memory-charge-device-cumemcreate-to-prop-location-id.patch").read_text()
    assert "Dropped-At: 54b13055032577b9487d108fa1b18ccaf56274cc" in skipped and "rebase --skip by a person" in skipped
    assert "Applied-Upstream" not in skipped and not (line.dir / "absorbed").exists()


def test_serves_and_the_deploy_data_agree(line):
    data = gates.compat_data()
    rel = {r["hami"]: r for r in data["release"]}
    ser = data["series"][LINE]
    assert ser["shrreg"] == line.serves["shrreg"] == "1.1" and ser["base"] == line.base
    assert sorted(ser["compatible"]) == sorted(line.serves["hami"])
    # exactly the releases with region 1.1, v2.5.1 (Olares 1.12.5) among them
    assert sorted(ser["compatible"]) == sorted(v for v, r in rel.items() if r["shrreg"] == "1.1")
    assert rel["v2.5.1"]["hami_core"] == line.base
    assert line.not_applicable.keys() == {"multi-device", "shared-region"}  # llama-vmm: VMM accounted since 1.4.0


@pytest.mark.skipif(shutil.which("gcc") is None, reason="no-tool: needs gcc")
@pytest.mark.parametrize("target,hami,minor,ok", [
    (LINE, "v2.5.1", 1, True), (LINE, "v2.8.1", 1, True), (LINE, "v2.9.0", 1, False),
    ("hami-core", "v2.5.1", 2, False), (LINE, "v2.5.1", 2, False),
    # the main line sits on upstream main 52f33fc (issue 36), which no HAMi release vendors: v2.9.0 is served
    # by the line hami-core-v2.9 (8f3a89c), and the main line's library is refused there, the gate naming it
    ("hami-core-v2.9", "v2.9.0", 2, True), ("hami-core", "v2.9.0", 2, False),
])
def test_deploy_gate_takes_the_series_from_the_evidence(tmp_path, capsys, target, hami, minor, ok):
    from lucepatch.main import main

    base = _lib(tmp_path, "baseline", minor=minor)
    patched = _lib(tmp_path, "patched", minor=minor, extra="int cuMemFreeAsync(void) { return 0; }\nint fix(void) { return 1; }")
    evp = tmp_path / "evidence.json"
    evp.write_text(json.dumps(evidence_doc(baseline=base, patched=patched, target=target)))
    base.unlink()  # no reference library here: the shrreg gate compares with the series' data
    rc = main(["deploy", "hami-core", "--lib", str(patched), "--evidence", str(evp), "--hami-version", hami,
               "--dry-run", "--json"])
    out, err = capsys.readouterr()
    doc = json.loads(out)
    by = {g["name"]: g for g in doc["gates"]}
    assert by["compatible_hami"]["ok"] is (hami in gates.compat_data()["series"][target]["compatible"])
    assert by["shrreg"]["ok"] is (f"1.{minor}" == gates.compat_data()["series"][target]["shrreg"])
    assert (rc == 0) is ok, err
    if not ok:
        assert "deploy refused" in err
    if (target, hami) == ("hami-core", "v2.9.0"):
        assert not by["line"]["ok"] and "the nodes need line hami-core-v2.9" in by["line"]["message"], by["line"]
