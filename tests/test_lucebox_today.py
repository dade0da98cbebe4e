"""Lucebox as people clone it today (issue 37): upstream's Dockerfile read as the build recipe, the tiny
model the GPU step serves, and the serve check — each proven here on what it reads (a Dockerfile with
upstream's structure, the written GGUF read back, a stand-in server), the GPU run being the lead's step
`tools/gpu_session.sh lucebox-today`."""

from __future__ import annotations

import importlib.util
import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO_ROOT
from lucepatch.builders import dockerfile as D
from lucepatch.errors import UsageError

# upstream's structure (Luce-Org/lucebox 62880e2, Dockerfile): global ARGs used in FROM, the arch ARG in the
# builder stage, one RUN that configures and builds, a runtime stage
UPSTREAM_LIKE = r'''# syntax=docker/dockerfile:1.7
ARG CUDA_VERSION=12.8.1
ARG UBUNTU_VERSION=22.04
FROM nvidia/cuda:${CUDA_VERSION}-devel-ubuntu${UBUNTU_VERSION} AS builder
ARG DEBIAN_FRONTEND=noninteractive
ARG DFLASH_CUDA_ARCHES="75;80;86;89;90;120"
RUN ln -sf libcuda.so /usr/local/cuda/lib64/stubs/libcuda.so.1 \
    && ldconfig
# Configure + build.
RUN cmake -S /src/server -B /src/server/build \
        -G Ninja \
        -DCMAKE_BUILD_TYPE=Release \
        -DDFLASH27B_USER_CUDA_ARCHITECTURES="${DFLASH_CUDA_ARCHES}" \
        -DCMAKE_CUDA_ARCHITECTURES="${DFLASH_CUDA_ARCHES}" \
    && cmake --build /src/server/build --target test_dflash dflash_server test_server_unit --parallel
FROM nvidia/cuda:${CUDA_VERSION}-runtime-ubuntu${UBUNTU_VERSION} AS runtime
ARG GIT_SHA=""
RUN printf '%s\n' "$GIT_SHA" > /opt/IMAGE_INFO
'''


@pytest.fixture
def recipe(tmp_path):
    (tmp_path / "Dockerfile").write_text(UPSTREAM_LIKE)
    return D.read_recipe(tmp_path / "Dockerfile")


def test_the_recipe_is_what_upstreams_dockerfile_runs(recipe):
    assert recipe.global_args == {"CUDA_VERSION": "12.8.1", "UBUNTU_VERSION": "22.04"}
    assert [s.name for s in recipe.stages] == ["builder", "runtime"]
    # the CUDA 13 route is build arguments: the FROM lines follow CUDA_VERSION
    assert recipe.images({"CUDA_VERSION": "13.0.0"}) == ["nvidia/cuda:13.0.0-devel-ubuntu22.04",
                                                         "nvidia/cuda:13.0.0-runtime-ubuntu22.04"]
    conf, build = recipe.cmake({"DFLASH_CUDA_ARCHES": "120"})
    assert conf == ["cmake", "-S", "/src/server", "-B", "/src/server/build", "-G", "Ninja", "-DCMAKE_BUILD_TYPE=Release",
                    "-DDFLASH27B_USER_CUDA_ARCHITECTURES=120", "-DCMAKE_CUDA_ARCHITECTURES=120"]
    assert build == ["cmake", "--build", "/src/server/build", "--target", "test_dflash", "dflash_server",
                     "test_server_unit", "--parallel"]
    assert recipe.cmake({})[0][-1] == "-DCMAKE_CUDA_ARCHITECTURES=75;80;86;89;90;120"  # the ARG's default


def test_a_misspelled_build_argument_is_refused_not_ignored(recipe):
    """Docker builds the default arches when --build-arg names no ARG; lucepatch says so in one line."""
    D.check_build_args(recipe, {"DFLASH_CUDA_ARCHES": "120", "CUDA_VERSION": "13.0.0"})
    with pytest.raises(UsageError, match=r"DFLASH_CUDA_ARCH name no ARG of Dockerfile: Docker would ignore them .*"
                                         r"DFLASH_CUDA_ARCHES"):
        D.check_build_args(recipe, {"DFLASH_CUDA_ARCH": "120"})
    with pytest.raises(UsageError, match="LUCE_CUDA_ARCHES"):  # the CI variable's name is not the Dockerfile's
        D.check_build_args(recipe, {"LUCE_CUDA_ARCHES": "120"})


def test_the_native_build_runs_the_same_invocation_elsewhere(recipe, tmp_path):
    conf, build = D.native(*recipe.cmake({"DFLASH_CUDA_ARCHES": "90;120"}), src_from="/src", src_to=tmp_path / "tree",
                           build_dir=tmp_path / "b", jobs=14, targets=["backend_ipc_daemon", "dflash_server"])
    assert conf[:5] == ["cmake", "-S", str(tmp_path / "tree/server"), "-B", str(tmp_path / "b")]
    assert conf[5:] == recipe.cmake({"DFLASH_CUDA_ARCHES": "90;120"})[0][5:]
    assert build == ["cmake", "--build", str(tmp_path / "b"), "--target", "test_dflash", "dflash_server",
                     "test_server_unit", "backend_ipc_daemon", "--parallel", "14"]


def test_a_dockerfile_without_a_cmake_run_is_one_line(tmp_path):
    (tmp_path / "Dockerfile").write_text("FROM busybox\nRUN make\n")
    with pytest.raises(UsageError, match="no RUN configures with `cmake -S`"):
        D.read_recipe(tmp_path / "Dockerfile").cmake({})


def _module(name: str):
    spec = importlib.util.spec_from_file_location(name, REPO_ROOT / "tools" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _gguf_py() -> Path:
    src = os.environ.get("LUCEPATCH_SRC_LUCEBOX_VENDORED")
    if not src or not (Path(src) / "server/deps/llama.cpp/gguf-py/gguf").is_dir():
        pytest.skip("no-upstream: LUCEPATCH_SRC_LUCEBOX_VENDORED is not set (Luce-Org/lucebox at 62880e2: its gguf-py)")
    return Path(src) / "server/deps/llama.cpp/gguf-py"


def _vendored_checkout() -> Path:
    src = os.environ.get("LUCEPATCH_SRC_LUCEBOX_VENDORED")
    if not src or not (Path(src) / "Dockerfile").is_file():
        pytest.skip("no-upstream: LUCEPATCH_SRC_LUCEBOX_VENDORED is not set (a Luce-Org/lucebox checkout with 62880e2)")
    return Path(src)


def test_every_profile_setting_reaches_upstreams_image_or_is_named(cli):
    """Issue 37: `build lucebox-vendored --image --profile sm120-cuda13-hami` built upstream's Dockerfile without the
    profile's -DGGML_CUDA_NO_VMM=ON (and every profile without -DGGML_NATIVE=OFF, F8) and tagged it -hami; the dry
    run said "no image template lucebox-vendored.Dockerfile.j2". Now the series gives the Dockerfile
    DFLASH_CMAKE_ARGS and the plan, read on the applied tree, passes the profile's cmake arguments through it."""
    r = cli("--workspace", REPO_ROOT, "build", "lucebox-vendored", "--image", "--dry-run", "--profile",
            "sm120-cuda13-hami", "--source", _vendored_checkout(), "--json")
    assert r.code == 0, r.err
    plan = json.loads(r.out)["image"]["plan"]
    assert plan["build_args"] == {
        "CUDA_VERSION": "13.0.0", "UBUNTU_VERSION": "22.04", "DFLASH_CUDA_ARCHES": "120",
        "DFLASH_CMAKE_ARGS": "-DGGML_NATIVE=OFF -DDFLASH27B_USE_BLACKWELL_CONSUMER_FIX=ON "
                             "-DCMAKE_BUILD_WITH_INSTALL_RPATH=ON -DDFLASH27B_FA_ALL_QUANTS=OFF -DCMAKE_BUILD_TYPE=Release "
                             "-DGGML_CUDA_NO_VMM=ON"}
    assert plan["configure"][-1] == "-DGGML_CUDA_NO_VMM=ON" and "-DGGML_NATIVE=OFF" in plan["configure"]
    assert plan["images"] == ["nvidia/cuda:13.0.0-devel-ubuntu22.04", "nvidia/cuda:13.0.0-runtime-ubuntu22.04"]
    # upstream's Dockerfile builds test_server_unit, which only DFLASH27B_TESTS=ON defines: said, not dropped silently
    assert list(plan["left_to_upstream"]) == ["-DDFLASH27B_TESTS=OFF"]
    assert plan["cmake_cache_expects"]["GGML_CUDA_NO_VMM"] == "ON"
    assert plan["tag"] == "lucepatch/lucebox-vendored:sm120-cuda13-hami-1.0.0"


def test_the_tiny_model_has_the_layout_the_qwen3_loader_reads(tmp_path):
    """Read back with gguf's reader: every tensor load_qwen3_drafter_model asks for, with the shape and type
    it allocates (n_vocab 151936 is fixed by the loader, the rest from the metadata written)."""
    gp = _gguf_py()
    out = tmp_path / "tiny.gguf"
    r = subprocess.run([sys.executable, str(REPO_ROOT / "tools/lucebox_tiny_model.py"), str(out), "--gguf-py", str(gp)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    sys.path.insert(0, str(gp))
    try:
        from gguf import GGUFReader  # lazy: the tree's gguf-py, 150 ms
    finally:
        sys.path.remove(str(gp))
    rd = GGUFReader(str(out))
    f = {k: v for k, v in rd.fields.items()}

    def u32(key):
        return int(f[key].parts[-1][0])
    embd, ff, heads, kv, hd, nl = (u32("qwen3.embedding_length"), u32("qwen3.feed_forward_length"),
                                   u32("qwen3.attention.head_count"), u32("qwen3.attention.head_count_kv"),
                                   u32("qwen3.attention.key_length"), u32("qwen3.block_count"))
    tensors = {t.name: ([int(x) for x in t.shape], t.tensor_type.name) for t in rd.tensors}
    want = {"token_embd.weight": ([embd, 151936], "BF16"), "output_norm.weight": ([embd], "F32")}
    for i in range(nl):
        want.update({f"blk.{i}.attn_norm.weight": ([embd], "F32"), f"blk.{i}.attn_q.weight": ([embd, heads * hd], "BF16"),
                     f"blk.{i}.attn_k.weight": ([embd, kv * hd], "BF16"), f"blk.{i}.attn_v.weight": ([embd, kv * hd], "BF16"),
                     f"blk.{i}.attn_output.weight": ([heads * hd, embd], "BF16"),
                     f"blk.{i}.attn_q_norm.weight": ([hd], "F32"), f"blk.{i}.attn_k_norm.weight": ([hd], "F32"),
                     f"blk.{i}.ffn_norm.weight": ([embd], "F32"), f"blk.{i}.ffn_gate.weight": ([embd, ff], "BF16"),
                     f"blk.{i}.ffn_up.weight": ([embd, ff], "BF16"), f"blk.{i}.ffn_down.weight": ([ff, embd], "BF16")})
    assert tensors == want
    assert len(f["tokenizer.ggml.tokens"].data) == 151936 and bytes(f["general.architecture"].parts[-1]) == b"qwen3"
    assert out.stat().st_size < 32 * 1024 * 1024


STAND_IN = r'''#!{py}
import json, sys
from http.server import BaseHTTPRequestHandler, HTTPServer
mode = {mode!r}
if mode == "refuse":
    print("[qwen3] model load failed: one or more Qwen3-0.6B tensors failed to load", flush=True)
    sys.exit(1)
port = int(sys.argv[sys.argv.index("--port") + 1])
class H(BaseHTTPRequestHandler):
    def log_message(self, *a): pass
    def do_GET(self):
        self.send_response(200 if self.path == "/health" else 404); self.end_headers(); self.wfile.write(b'{{"status":"ok"}}')
    def do_POST(self):
        n = int(self.headers["Content-Length"]); body = json.loads(self.rfile.read(n))
        out = {{"choices": [{{"message": {{"role": "assistant", "content": "hi"}}}}], "echo": body["messages"][0]["content"]}}
        self.send_response(200); self.end_headers(); self.wfile.write(json.dumps(out).encode())
print("[server] listening", flush=True)
HTTPServer(("127.0.0.1", port), H).serve_forever()
'''


def _stand_ins(d: Path, mode: str) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    (d / "dflash_server").write_text(STAND_IN.format(py=sys.executable, mode=mode))
    (d / "test_dflash").write_text("#!/bin/sh\necho \"usage: test_dflash <target.gguf> <draft>\" >&2\nexit 2\n")
    for n in ("dflash_server", "test_dflash"):
        (d / n).chmod((d / n).stat().st_mode | stat.S_IEXEC)
    return d


@pytest.mark.parametrize("mode,rc,verdict", [("serve", 0, "answered"), ("refuse", 1, "refused or failed before /health")])
def test_serve_check_against_a_stand_in_server(tmp_path, mode, rc, verdict):
    """The check the GPU step runs: /health, one chat request, test_dflash's usage — against a stand-in that
    serves, and one that refuses the model with the loader's own error (kept in server_errors)."""
    b = _stand_ins(tmp_path / "bin", mode)
    (tmp_path / "m.gguf").write_bytes(b"GGUF")
    r = subprocess.run([sys.executable, str(REPO_ROOT / "tools/lucebox_serve_check.py"), "--bin", str(b), "--model",
                        str(tmp_path / "m.gguf"), "--out", str(tmp_path / "out"), "--port", str(18000 + os.getpid() % 1000),
                        "--timeout", "30"], capture_output=True, text=True, timeout=120)
    assert r.returncode == rc, r.stdout + r.stderr
    doc = json.loads((tmp_path / "out/serve-check.json").read_text())
    assert doc["verdict"] == verdict and doc["test_dflash"]["started"]
    if mode == "serve":
        assert doc["dflash_server"]["request"]["status"] == 200 and doc["dflash_server"]["request"]["choices"] == 1
    else:
        assert any("failed to load" in ln for ln in doc["dflash_server"]["server_errors"])


def test_the_renamed_upstream_still_names_an_old_checkout(tmp_path):
    """Luce-Org/lucebox-hub became Luce-Org/lucebox: a clone whose remote still names the old URL is a
    checkout of the target's upstream (upstream_aliases), so a missing commit's hint fetches from it."""
    from conftest import git, init_repo
    from lucepatch import git as lgit
    from lucepatch.target import load_target_dir

    repo = init_repo(tmp_path / "clone")
    git(repo, "remote", "add", "mine", "https://github.com/someone/fork")
    git(repo, "remote", "add", "old", "git@github.com:Luce-Org/lucebox-hub.git")
    for name in ("lucebox", "lucebox-vendored"):
        t = load_target_dir(REPO_ROOT / "patches" / name)
        assert t.upstream == "https://github.com/Luce-Org/lucebox"
        assert lgit.fetch_hint(repo, t.upstream_urls, t.base) == f"git -C {repo} fetch old"
        # with the new name alone the old remote is not recognised: the URL itself is named
        assert lgit.fetch_hint(repo, t.upstream, t.base).startswith(f"git -C {repo} fetch https://github.com/Luce-Org/lucebox")


def _probe_doc(base: str, target: str = "lucebox-vendored") -> dict:
    def run(variant, status, detail, first=""):
        return {"variant": variant, "profile": "sm120-cuda13", "tree": {"repos": [{"base": base}]},
                "probes": [{"probe": "f1-default-archs-nvcc13", "fix": "F1", "status": status, "detail": detail,
                            "first_error": first, "seconds": 1.0, "as_declared": True}]}
    return {"verb": "probe", "target": target, "runs": [run("baseline", "fail", "compile failed",
                                                            "nvcc fatal : Unsupported gpu architecture 'compute_60'"),
                                                        run("patched", "pass", "SASS sm_120")]}


def test_a_pr_carries_the_probe_verdicts_of_its_patches(tmp_path):
    """`pr --evidence <probe --both --json>`: the body's table is the probes the PR's patches name, from the
    runs as measured; evidence of another target, base or a single variant is refused."""
    from lucepatch.errors import CheckFailed
    from lucepatch.target import load_target_dir
    from lucepatch.upstream import pr, pr_probes

    t = load_target_dir(REPO_ROOT / "patches/lucebox-vendored")
    doc = _probe_doc(t.base)
    f1 = [p for p in pr.select_patches(t, ["fix-cmake-f1-drop-archs-below-75-under-nvcc13"])]
    pr_probes.check_probe_evidence([doc], t, t.base)
    [row] = pr_probes.probe_rows([doc], f1)
    assert (row["probe"], row["baseline"], row["patched"]) == ("f1-default-archs-nvcc13", "fail", "pass")
    assert "compute_60" in row["baseline_error"]
    assert pr_probes.probe_rows([doc], pr.select_patches(t, ["fix-cmake-f7-install-rpath-origin-after-copy"])) == []
    for bad, why in ((_probe_doc("0" * 40), "not the PR's base"), (_probe_doc(t.base, "lucebox"), "not lucebox-vendored"),
                     ({**doc, "runs": doc["runs"][1:]}, "patched variant only")):
        with pytest.raises(CheckFailed, match=why):
            pr_probes.check_probe_evidence([bad], t, t.base)
    # the folder sub-target's patch is a commit of the superproject's PR, re-rooted
    [f6] = pr.select_patches(t, ["llama.cpp/f6-ggml-cuda-link-cuda-driver-public"])
    assert f6.files == ["server/deps/llama.cpp/ggml/src/ggml-cuda/CMakeLists.txt"] and f6.subject.startswith("fix(ggml-cuda):")
