"""`build --image` for a target whose upstream ships its own Dockerfile (Luce-Org/lucebox since 2026-06;
issue 37): the file itself, as the series leaves it, with the profile's build arguments — built here
offline. NVIDIA's base was NOT used: the FROM lines name `nvidia/cuda:${CUDA_VERSION}-...-ubuntu${UBUNTU_VERSION}`
as upstream's do, and the test tags the project's offline base (tests/fixtures/cudaproj/make_base.sh,
label org.lucepatch.base) under those names with UBUNTU_VERSION=lucepatch-offline, a suffix NVIDIA never
published; the build result names each base as the stand-in it is. The project is a C CMake project (no
CUDA here); what is tested is the route: upstream's ARGs, its cmake RUN, the series in the context, the
labels, the refusal of a build argument the Dockerfile does not declare."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import commit_all, git, init_repo, write
from lucepatch.builders import image as img
from lucepatch.errors import UsageError
from lucepatch.target import load_target_dir

REPO = Path(__file__).resolve().parent.parent
FIX = REPO / "tests" / "fixtures" / "cudaproj"
sys.path.insert(0, str(FIX))
import needs  # noqa: E402

BASE = os.environ.get("LUCEPATCH_DEBIAN_BASE", "lucepatch/base:debian-cc")
OFFLINE = "lucepatch-offline"  # UBUNTU_VERSION: nvidia/cuda:13.0.0-devel-ubuntulucepatch-offline is never NVIDIA's

DOCKERFILE = r'''# syntax=docker/dockerfile:1.7
ARG CUDA_VERSION=12.8.1
ARG UBUNTU_VERSION=22.04
FROM nvidia/cuda:${CUDA_VERSION}-devel-ubuntu${UBUNTU_VERSION} AS builder
ARG DFLASH_CUDA_ARCHES="75;80;86;89;90;120"
WORKDIR /src
COPY server /src/server
RUN cmake -S /src/server -B /src/server/build \
        -G Ninja \
        -DCMAKE_BUILD_TYPE=Release \
        -DDFLASH_ARCHES="${DFLASH_CUDA_ARCHES}" \
    && cmake --build /src/server/build --target hello --parallel
FROM nvidia/cuda:${CUDA_VERSION}-runtime-ubuntu${UBUNTU_VERSION} AS runtime
COPY --from=builder /src/server/build/hello /opt/app/hello
COPY --from=builder /src/server/build/arches.txt /opt/app/arches.txt
CMD ["/opt/app/hello"]
'''
CMAKE = '''cmake_minimum_required(VERSION 3.16)
project(hello C)
add_executable(hello hello.c)
file(WRITE ${CMAKE_BINARY_DIR}/arches.txt "${DFLASH_ARCHES}\\n")
'''


@pytest.fixture(scope="module")
def client():
    needs.docker_client()  # skip (here) / fail (CI=true) with no-docker: when no daemon answers
    return img.docker_client()


@pytest.fixture(scope="module")
def bases(client):
    r = subprocess.run(["bash", str(FIX / "make_base.sh"), BASE], capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-2000:]
    base = client.images.get(BASE)
    names = [f"nvidia/cuda:13.0.0-{kind}-ubuntu{OFFLINE}" for kind in ("devel", "runtime")]
    for n in names:
        repo, tag = n.rsplit(":", 1)
        base.tag(repo, tag)
    yield names
    for n in names:
        client.images.remove(n, noprune=True)


@pytest.fixture(scope="module")
def upstream(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("upstream-recipe")
    up = init_repo(tmp / "up")
    write(up, "Dockerfile", DOCKERFILE)
    write(up, "server/CMakeLists.txt", CMAKE)
    write(up, "server/hello.c", '#include <stdio.h>\nint main(void) { puts("hello from upstream"); return 0; }\n')
    base = commit_all(up, "upstream with its own Dockerfile")
    git(up, "checkout", "-q", "-b", "fix")
    write(up, "server/hello.c", '#include <stdio.h>\nint main(void) { puts("hello, patched"); return 0; }\n')
    commit_all(up, "fix(hello): say patched\n\nUpstream-Status: Pending\nSigned-off-by: F <f@x.invalid>")
    patch = git(up, "format-patch", "--zero-commit", "--no-signature", "--full-index", "-N", "-1", "--stdout", "HEAD")
    git(up, "checkout", "-q", "main")
    tdir = tmp / "ws" / "patches" / "recipe"
    tdir.mkdir(parents=True)
    (tmp / "ws" / "lucepatch.toml").write_text("schema_version = 1\n")
    (tdir / "fix-hello.patch").write_text(patch)
    (tdir / "series").write_text("fix-hello.patch\n")
    (tdir / "target.toml").write_text(
        f'name = "recipe"\nupstream = "https://example.invalid/recipe"\nbase = "{base}"\nversion = "1.0.0"\n\n'
        '[build]\nsystem = "cmake"\nsource_dir = "server"\ndockerfile = "Dockerfile"\n'
        'arch_build_arg = "DFLASH_CUDA_ARCHES"\narch_variable = "DFLASH_ARCHES"\nimage_roots = ["/opt/app"]\n\n'
        '[profiles.sm120-cuda13]\ncuda_archs = ["120"]\n'
        f'build_args = {{ CUDA_VERSION = "13.0.0", UBUNTU_VERSION = "{OFFLINE}" }}\n')
    return {"up": up, "tdir": tdir, "tmp": tmp}


def test_upstreams_dockerfile_builds_with_the_series_and_says_what_base_it_used(client, bases, upstream):
    t = load_target_dir(upstream["tdir"])
    res = img.build_upstream_image(t, upstream["up"], "sm120-cuda13", upstream["tmp"] / "cache", repo="lucepatch-test/recipe")
    try:
        assert res.build_args == {"CUDA_VERSION": "13.0.0", "UBUNTU_VERSION": OFFLINE, "DFLASH_CUDA_ARCHES": "120"}
        assert [(b["ref"], b["stand_in"]) for b in res.base_images] == [(n, "debian-cc") for n in bases]
        out = client.containers.run(res.tag, remove=True).decode()
        assert out.strip() == "hello, patched"  # the series is in the context
        arches = client.containers.run(res.tag, ["cat", "/opt/app/arches.txt"], remove=True).decode()
        assert arches.strip() == "120"  # the arch list reached the Dockerfile's own ARG
        labels = client.images.get(res.tag).labels
        assert labels["org.lucepatch.recipe"] == "upstream Dockerfile" and labels["org.lucepatch.cuda-archs"] == "120"
        assert labels["org.lucepatch.cuda-version"] == "13.0"
        assert res.closure["ok"], res.closure
        assert (res.dockerfile.read_text() == DOCKERFILE)  # upstream's file, not a rendered one
    finally:
        client.images.remove(res.tag, force=True)


def test_a_profile_arg_the_dockerfile_does_not_declare_is_refused_before_a_build(upstream, tmp_path):
    toml = upstream["tdir"] / "target.toml"
    before = toml.read_text()
    try:
        toml.write_text(before.replace("CUDA_VERSION = ", "CUDA_VERSON = "))
        with pytest.raises(UsageError, match=r"CUDA_VERSON name no ARG of Dockerfile: Docker would ignore them"):
            img.build_upstream_image(load_target_dir(upstream["tdir"]), upstream["up"], "sm120-cuda13", tmp_path / "c")
    finally:
        toml.write_text(before)
