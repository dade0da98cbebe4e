"""Probes on the cudaproj fixture (nvcc + cmake + ninja, no GPU) and on the real Lucebox checkout."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from lucepatch.builders import probe as P
from lucepatch.errors import UsageError
from lucepatch.native import elf
from lucepatch.target import load_target_dir

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests" / "fixtures" / "cudaproj"))
import make_fixture  # noqa: E402


@pytest.fixture
def cudaproj(tmp_path):
    return make_fixture.make(tmp_path)


@pytest.mark.needs("cmake", "ninja", "nvcc")
def test_fixture_probes_baseline_fail_as_declared_patched_pass(cudaproj, cli):
    r = cli("--workspace", cudaproj["ws"], "probe", "cudaproj", "--source", cudaproj["upstream"],
            "--profile", "test", "--both", "--json")
    assert r.code == 0, r.err
    doc = r.json
    assert doc["schema_version"] and doc["ok"]
    base, patched = doc["runs"]
    by = {p["fix"]: p for p in base["probes"]}
    assert by["F1"]["status"] == "fail" and "Unsupported gpu architecture 'compute_60'" in by["F1"]["first_error"]
    assert by["F1"]["error_count"] >= 1
    assert "libcuda.so.1, needed by libgpu.so" in by["F6"]["first_error"]
    assert "undefined reference to `cuMemCreate'" in by["F6"]["evidence"]["log_excerpt"]
    assert by["F6"]["evidence"]["layout"]["files"] == ["libcuda.so"]  # devel layout: no .so.1
    assert by["F7"]["first_error"] == "libcore.so => not found (needed by cudaproj_server)"
    assert all(p["signature_matched"] for p in base["probes"])
    pby = {p["fix"]: p for p in patched["probes"]}
    assert pby["F1"]["evidence"]["gpu_code"]["sass"] == ["sm_75"]
    assert pby["F6"]["status"] == "pass" and pby["F7"]["status"] == "pass"
    assert "$ORIGIN" in pby["F7"]["evidence"]["dynamic"]["runpath"]
    assert pby["F7"]["evidence"]["closure"]["ok"] and "libcore.so" in pby["F7"]["evidence"]["closure"]["needed_names"]
    assert patched["tree"]["repos"][0]["patches"] and not base["tree"]["repos"][0]["patches"]


@pytest.mark.needs("cmake", "ninja", "nvcc")
def test_probe_exit_1_when_a_fix_is_not_proven(cudaproj, cli):
    # drop the F6 patch from the series: its probe can no longer pass on the patched tree
    series = cudaproj["tdir"] / "series"
    kept = [l for l in series.read_text().splitlines() if "propagate" not in l]
    series.write_text("\n".join(kept) + "\n")
    r = cli("--workspace", cudaproj["ws"], "probe", "cudaproj", "--source", cudaproj["upstream"],
            "--profile", "test", "--only", "F6")
    assert r.code == 1
    assert "NOT PROVEN" in r.out


def test_unknown_profile_and_probe_are_usage_errors(cudaproj, cli):
    r = cli("--workspace", cudaproj["ws"], "probe", "cudaproj", "--source", cudaproj["upstream"], "--profile", "nope")
    assert r.code == 2 and "unknown profile 'nope'" in r.err and len(r.err.strip().splitlines()) == 1
    r = cli("--workspace", cudaproj["ws"], "probe", "cudaproj", "--source", cudaproj["upstream"], "--only", "F99")
    assert r.code == 2 and "unknown probe" in r.err


@pytest.mark.needs("nvcc")
def test_fatbin_reader_agrees_with_cuobjdump(tmp_path):
    cu = tmp_path / "k.cu"
    cu.write_text("__global__ void k(float *p) { p[0] = 1; }\n")
    objs = {}
    for name, gencode in {"k": ["--generate-code=arch=compute_75,code=[compute_75,sm_75]",
                                "--generate-code=arch=compute_120,code=sm_120"],
                          "ka": ["--generate-code=arch=compute_120a,code=sm_120a"]}.items():
        objs[name] = tmp_path / f"{name}.o"
        subprocess.run(["nvcc", "-c", str(cu), "-o", str(objs[name]), *gencode], check=True, capture_output=True)
    own = elf.gpu_code(objs["k"])
    assert own.sass == ["sm_75", "sm_120"] and own.ptx == ["compute_75"] and own.fatbins == 1
    assert elf.gpu_code(objs["ka"]).sass == ["sm_120a"]  # arch-specific (FP4 MMA) code told apart
    assert P.list_gpu_code(objs["k"]).sass == own.sass
    tool = P.find_cuobjdump()
    if tool:  # pip install nvidia-cuda-cuobjdump
        for o in objs.values():
            code = P.cuobjdump_list(o, tool)
            assert code.tool == tool and sorted(code.sass) == sorted(elf.gpu_code(o).sass)


def test_summarize_errors_first_line_and_count():
    log = "warning: x\nfoo.cu(1): error: bad\n" + "ptxas error   : y\n" * 10000 + "-Werror ok\n"
    first, n = P.summarize_errors(log)
    assert first == "foo.cu(1): error: bad" and n == 10001
    assert len(P.excerpt(log).splitlines()) == 12


def test_lucebox_profiles_and_probe_trailers_are_data():
    t = load_target_dir(REPO / "patches" / "lucebox")
    _, hami = P.resolve_profile(t, "sm120-cuda13-hami")
    assert "-DGGML_CUDA_NO_VMM=ON" in hami["cmake_args"] and "-DGGML_NATIVE=OFF" in hami["cmake_args"]
    assert hami["builder_image"].startswith("nvidia/cuda:13.0")
    _, sm86 = P.resolve_profile(t, "sm86")
    assert sm86["cuda_archs"] == ["86"] and sm86["hash"] != hami["hash"]
    specs, _ = P.load_probes(t)
    fixes = {s.fix: s for s in specs}
    assert set(fixes) == {"F1", "F2", "F3", "F6", "F7", "F11"}
    assert all(s.patches for s in specs), [s.name for s in specs if not s.patches]
    assert fixes["F6"].patches == ["f6-ggml-cuda-link-cuda-driver-public.patch"]  # the llama.cpp sub-target
    for p in t.patches:
        assert p.trailer("Upstream-Status") and p.trailer("Probe") and p.trailer("Signed-off-by")
    absorbed = sorted((t.dir / "absorbed").glob("*.patch")) + sorted((t.dir / "submodules/llama.cpp/absorbed").glob("*.patch"))
    assert len(absorbed) == 3
    from lucepatch.series import parse_patch
    assert {parse_patch(a).trailer("Applied-Upstream")[:9] for a in absorbed} == {"48beb9229", "cdf4b2369", "c253e49b9"} or \
        all(len(parse_patch(a).trailer("Applied-Upstream")) == 40 for a in absorbed)


def test_probe_names_must_exist(tmp_path, cudaproj):
    (cudaproj["tdir"] / "probes.toml").write_text('schema_version = 1\n')
    t = load_target_dir(cudaproj["tdir"])
    with pytest.raises(UsageError, match="names probe 'f1-archs'"):
        P.load_probes(t)


@pytest.mark.upstream
def test_real_lucebox_probes_sm120(cli):
    src = os.environ.get("LUCEPATCH_SRC_LUCEBOX")
    if not src:
        pytest.skip("no-upstream: LUCEPATCH_SRC_LUCEBOX is not set (lucebox-hub 8305b6c with submodules)")
    r = cli("--workspace", REPO, "probe", "lucebox", "--source", src, "--profile", "sm120-cuda13", "--both", "--json")
    assert r.code == 0, r.err
    for run in r.json["runs"]:
        assert {p["fix"] for p in run["probes"]} == {"F1", "F2", "F3", "F6", "F7", "F11"}
        assert all(p["as_declared"] for p in run["probes"])


@pytest.mark.upstream
def test_real_lucebox_absorbed_records_are_in_the_pinned_bases():
    src = os.environ.get("LUCEPATCH_SRC_LUCEBOX")
    if not src:
        pytest.skip("no-upstream: LUCEPATCH_SRC_LUCEBOX is not set (lucebox-hub 8305b6c with submodules)")
    from lucepatch.series import parse_patch
    t = load_target_dir(REPO / "patches" / "lucebox")
    repos = [(t.dir / "absorbed", Path(src), t.base)]
    for s in t.submodules:
        repos.append((t.dir / s.series_dir / "absorbed", Path(src) / s.path, s.base))
    n = 0
    for adir, repo, base in repos:
        for pf in sorted(adir.glob("*.patch")):
            commit = parse_patch(pf).trailer("Applied-Upstream")
            r = subprocess.run(["git", "-C", str(repo), "merge-base", "--is-ancestor", commit, base])
            assert r.returncode == 0, f"{pf.name}: {commit} is not in {base}"
            n += 1
    assert n == 3


def _lucebox_src() -> Path:
    src = os.environ.get("LUCEPATCH_SRC_LUCEBOX")
    if not src:
        pytest.skip("no-upstream: LUCEPATCH_SRC_LUCEBOX is not set (lucebox-hub 8305b6c with submodules)")
    return Path(src)


@pytest.mark.upstream
def test_real_lucebox_f7_fails_when_libggml_base_is_deleted_after_copy(tmp_path, monkeypatch):
    """ld.so --list stops at libcuda.so.1 (absent on a build machine) before libggml-base: the
    closure walk must still see the deleted library, and the patched F7 probe must fail."""
    src = _lucebox_src()
    t = load_target_dir(REPO / "patches" / "lucebox")
    orig = P.ProbeRunner.copy_runtime

    def copy_then_delete(self, bdir, binary, app):
        copied = orig(self, bdir, binary, app)
        gone = [p for p in app.glob("libggml-base.so*")]
        assert gone, copied
        for p in gone:
            p.unlink()
        return copied

    monkeypatch.setattr(P.ProbeRunner, "copy_runtime", copy_then_delete)
    run = P.run_probes(t, src, "sm120-cuda13", "patched", tmp_path / "cache", only=["F7"])
    (res,) = run.results
    assert res.status == "fail" and not res.as_declared, res.detail
    assert res.first_error.startswith("libggml-base.so.0 => not found"), res.first_error
    assert "libcuda.so.1" in res.evidence["closure"]["absent_allowed"]


@pytest.mark.upstream
def test_real_lucebox_substitution_only_for_cublas_headers(tmp_path):
    """arange.cu needs cublas_v2.h, absent from a PyPI toolkit: substituted, and shown as such."""
    src = _lucebox_src()
    t = load_target_dir(REPO / "patches" / "lucebox")
    run = P.run_probes(t, src, "sm120-cuda13", "patched", tmp_path / "cache", only=["F3"])
    (res,) = run.results
    assert res.status == "pass"
    from lucepatch.native.toolchain import cuda_include
    if (cuda_include() / "cublas_v2.h").is_file():
        assert not res.substituted
    else:
        sub = res.evidence["tu_substituted"]
        assert res.substituted and sub["missing_header"].endswith("cublas_v2.h") and sub["preprocessed"]


@pytest.mark.needs("cmake", "ninja", "nvcc")
@pytest.mark.parametrize("broken", [False, True])
def test_substitution_only_for_the_named_headers(tmp_path, cli, broken):
    """A TU whose only missing header is a named cuBLAS one is substituted (and says so); a patch
    that breaks another include of the same TU is not proven."""
    kern = "#include <cublas_v2.h>\n" + ('#include "kern_helpers_renamed.h"\n' if broken else "") + \
        "__global__ void k(float *p) { p[threadIdx.x] = 1.0f; }\n"
    fx = make_fixture.make(tmp_path, extra_files={"src/kern.cu": kern})
    text = (fx["tdir"] / "probes.toml").read_text().replace(
        '[stand_ins]\n', '[stand_ins]\nsubstitute_for = ["cublas_v2.h"]\n'
        'substitute_kernel = "__global__ void s(float *p) { p[0] = 2.0f; }\\n"\n', 1)
    (fx["tdir"] / "probes.toml").write_text(text)
    r = cli("--workspace", fx["ws"], "probe", "cudaproj", "--source", fx["upstream"], "--profile", "test",
            "--only", "F1", "--json")
    (probe,) = r.json["runs"][0]["probes"]
    from lucepatch.native.toolchain import cuda_include
    if broken:
        assert r.code == 1 and probe["status"] == "fail" and not probe["substituted"]
        assert "kern_helpers_renamed.h" in probe["first_error"] + probe["detail"]
    elif (cuda_include() / "cublas_v2.h").is_file():
        assert r.code == 0 and not probe["substituted"]
    else:
        assert r.code == 0 and probe["substituted"], probe
        assert probe["evidence"]["tu_substituted"]["missing_header"] == "cublas_v2.h"
        r = cli("--workspace", fx["ws"], "probe", "cudaproj", "--source", fx["upstream"], "--profile", "test",
                "--only", "F1")
        assert "substituted" in r.out
