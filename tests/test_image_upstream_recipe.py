"""`build --image` for a target whose upstream ships its own Dockerfile (Luce-Org/lucebox since 2026-06;
issue 37): the file itself, as the series leaves it, with the profile's build arguments — built here
offline. NVIDIA's base was NOT used: the FROM lines name `nvidia/cuda:${CUDA_VERSION}-...-ubuntu${UBUNTU_VERSION}`
as upstream's do, and the test tags the project's offline bases (tests/fixtures/cudaproj/make_base.sh's debian-cc
for the builder, tests/docker_base.sh's busybox for the runtime stage; label org.lucepatch.base) under those names
with UBUNTU_VERSION=lucepatch-offline, a suffix NVIDIA never published; the build result names each base as the
stand-in it is. The project is a C CMake project (no CUDA here); what is tested is the route: upstream's ARGs,
its cmake RUN, the series in the context (a fix, and the patch that gives the Dockerfile an ARG for cmake
arguments, as patches/lucebox-vendored does), the profile's cmake arguments read back from the image's cmake
cache, the labels, the runtime closure; and, without Docker, every setting the image could not take refused
before a build, and the dry run.

Speed: Docker's vfs driver (CI's) copies the whole root filesystem for every build step, so the fixture's
Dockerfile keeps upstream's shape with few steps, its runtime stage starts from the 2 MB busybox base (the
builder's RUN gathers the binary with the loader and libc it needs, as a distroless image does), and one build
(module-scoped) is asserted by several tests.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import commit_all, git, init_repo, write
from lucepatch.builders import upstream_image as up
from lucepatch.errors import UsageError
from lucepatch.target import load_target_dir

REPO = Path(__file__).resolve().parent.parent
FIX = REPO / "tests" / "fixtures" / "cudaproj"
sys.path.insert(0, str(FIX))
import needs  # noqa: E402

BASE = os.environ.get("LUCEPATCH_DEBIAN_BASE", "lucepatch/base:debian-cc")
RT_BASE = os.environ.get("LUCEPATCH_BASE_IMAGE", "lucepatch/base:busybox")
OFFLINE = "lucepatch-offline"  # UBUNTU_VERSION: nvidia/cuda:13.0.0-devel-ubuntulucepatch-offline is never NVIDIA's

DOCKERFILE = r'''# syntax=docker/dockerfile:1.7
ARG CUDA_VERSION=12.8.1
ARG UBUNTU_VERSION=22.04
FROM nvidia/cuda:${CUDA_VERSION}-devel-ubuntu${UBUNTU_VERSION} AS builder
COPY server /src/server
ARG DFLASH_CUDA_ARCHES="75;80;86;89;90;120"
RUN cmake -S /src/server -B /src/server/build \
        -G Ninja \
        -DCMAKE_BUILD_TYPE=Release \
        -DDFLASH_ARCHES="${DFLASH_CUDA_ARCHES}" \
    && cmake --build /src/server/build --target hello --parallel \
    && mkdir -p /rt/opt/app /rt/lib64 /rt/lib/x86_64-linux-gnu \
    && cp /src/server/build/hello /src/server/build/arches.txt /rt/opt/app/ \
    && cp -L /lib64/ld-linux-x86-64.so.2 /rt/lib64/ \
    && cp -L /lib/x86_64-linux-gnu/libc.so.6 /rt/lib/x86_64-linux-gnu/
FROM nvidia/cuda:${CUDA_VERSION}-runtime-ubuntu${UBUNTU_VERSION} AS runtime
COPY --from=builder /rt/ /
CMD ["/opt/app/hello"]
'''
# what patches/lucebox-vendored/build-docker-dflash-cmake-args.patch does to upstream's file
CMAKE_ARGS_ARG = 'ARG DFLASH_CMAKE_ARGS=""\nRUN cmake -S'
CMAKE = '''cmake_minimum_required(VERSION 3.16)
project(hello C)
if(DEFINED DFLASH27B_TESTS)  # [build.image_leaves]: the image must not get it
  message(FATAL_ERROR "DFLASH27B_TESTS reached the image")
endif()
add_executable(hello hello.c)
file(WRITE ${CMAKE_BINARY_DIR}/arches.txt "${DFLASH_ARCHES}\\n")
'''
TOML = f'''name = "recipe"
upstream = "https://example.invalid/recipe"
description = 'a "quoted" $HOME, a back\\slash and ${{X}}: each must read back as written'
base = "@BASE@"
version = "1.0.0"

[build]
system = "cmake"
source_dir = "server"
dockerfile = "Dockerfile"
arch_build_arg = "DFLASH_CUDA_ARCHES"
arch_variable = "DFLASH_ARCHES"
cmake_args_build_arg = "DFLASH_CMAKE_ARGS"
image_roots = ["/opt/app"]

[build.image_leaves]
DFLASH27B_TESTS = "upstream's Dockerfile builds its test targets"

[profiles.sm120-cuda13]
cuda_archs = ["120"]
cmake_args = ["-DDFLASH_ARCHES=120", "-DGGML_NATIVE=OFF", "-DDFLASH27B_TESTS=OFF"]
builder_image = "nvidia/cuda:13.0.0-devel-ubuntu{OFFLINE}"
build_args = {{ CUDA_VERSION = "13.0.0", UBUNTU_VERSION = "{OFFLINE}" }}

[profiles.sm120-cuda13-hami]
inherits = "sm120-cuda13"
cmake_args = ["-DGGML_CUDA_NO_VMM=ON"]
'''


@pytest.fixture(scope="module")
def upstream(tmp_path_factory):
    """Upstream (a Dockerfile with upstream's structure, no ARG for cmake arguments) and the series: a fix and the
    Dockerfile patch, in a workspace of its own."""
    tmp = tmp_path_factory.mktemp("upstream-recipe")
    repo = init_repo(tmp / "up")
    write(repo, "Dockerfile", DOCKERFILE)
    write(repo, "server/CMakeLists.txt", CMAKE)
    write(repo, "server/hello.c", '#include <stdio.h>\nint main(void) { puts("hello from upstream"); return 0; }\n')
    base = commit_all(repo, "upstream with its own Dockerfile")
    git(repo, "checkout", "-q", "-b", "fix")
    write(repo, "server/hello.c", '#include <stdio.h>\nint main(void) { puts("hello, patched"); return 0; }\n')
    commit_all(repo, "fix(hello): say patched\n\nUpstream-Status: Pending\nSigned-off-by: F <f@x.invalid>")
    write(repo, "Dockerfile", DOCKERFILE.replace("RUN cmake -S", CMAKE_ARGS_ARG).replace(
        '"${DFLASH_CUDA_ARCHES}" \\\n', '"${DFLASH_CUDA_ARCHES}" \\\n        ${DFLASH_CMAKE_ARGS} \\\n'))
    commit_all(repo, "feat(docker): DFLASH_CMAKE_ARGS\n\nUpstream-Status: Pending\nBuild-Only: yes\n"
                     "Signed-off-by: F <f@x.invalid>")
    ws = tmp / "ws"
    tdir = ws / "patches" / "recipe"
    tdir.mkdir(parents=True)
    (ws / "lucepatch.toml").write_text("schema_version = 1\n")
    names = ["fix-hello.patch", "build-docker-cmake-args.patch"]
    for name, rev in zip(names, ("HEAD~1", "HEAD")):
        (tdir / name).write_text(git(repo, "format-patch", "--zero-commit", "--no-signature", "--full-index", "-N",
                                     "-1", "--stdout", rev))
    (tdir / "series").write_text("".join(n + "\n" for n in names))
    (tdir / "target.toml").write_text(TOML.replace("@BASE@", base))
    patched = tmp / "Dockerfile.patched"
    patched.write_text(git(repo, "show", "fix:Dockerfile"))
    git(repo, "checkout", "-q", "main")
    return {"up": repo, "ws": ws, "tdir": tdir, "tmp": tmp, "patched": patched}


def _target(upstream, edit=None):
    """The fixture's target, target.toml edited by `edit` (text -> text) in a copy of the folder."""
    if edit is None:
        return load_target_dir(upstream["tdir"])
    d = upstream["tmp"] / f"edited-{abs(hash(edit))}" / "recipe"
    d.mkdir(parents=True, exist_ok=True)
    for f in upstream["tdir"].iterdir():
        (d / f.name).write_text(f.read_text())
    (d / "target.toml").write_text(edit((upstream["tdir"] / "target.toml").read_text()))
    return load_target_dir(d)


def _plan(t, profile="sm120-cuda13-hami", dockerfile=None, **kw):
    from lucepatch.builders import image as img

    _n, prof = img.image_profile(t, profile)
    return up.plan(t, prof, dockerfile, **kw)


# ---------------------------------------------------------------------------------- without Docker
def test_the_profiles_cmake_arguments_are_a_build_argument_the_configure_run_appends(upstream):
    p = _plan(_target(upstream), dockerfile=upstream["patched"])
    assert p.build_args == {"CUDA_VERSION": "13.0.0", "UBUNTU_VERSION": OFFLINE, "DFLASH_CUDA_ARCHES": "120",
                            "DFLASH_CMAKE_ARGS": "-DGGML_NATIVE=OFF -DGGML_CUDA_NO_VMM=ON"}
    assert p.configure[-2:] == ["-DGGML_NATIVE=OFF", "-DGGML_CUDA_NO_VMM=ON"]  # last: they win over upstream's
    assert p.defines == {"GGML_NATIVE": "OFF", "GGML_CUDA_NO_VMM": "ON", "DFLASH_ARCHES": "120"}
    assert p.tag == "lucepatch/recipe:sm120-cuda13-hami-1.0.0"
    assert p.notes() == ["not passed to the image: -DDFLASH27B_TESTS=OFF ([build.image_leaves]: upstream's "
                         "Dockerfile builds its test targets)"]
    # --cuda-archs replaces the arch list, and the profile's own -D of it does not come back through the cmake args
    p = _plan(_target(upstream), dockerfile=upstream["patched"], archs=["90", "120"])
    assert p.build_args["DFLASH_CUDA_ARCHES"] == "90;120" and "DFLASH_ARCHES=120" not in p.build_args["DFLASH_CMAKE_ARGS"]


REFUSED = {  # what makes the image unable to take a setting -> the one line that says so
    "no-build-arg": (lambda s: s.replace('cmake_args_build_arg = "DFLASH_CMAKE_ARGS"\n', ""), None,
                     r"sets cmake arguments \(-DGGML_NATIVE=OFF -DGGML_CUDA_NO_VMM=ON\) but upstream's Dockerfile "
                     r"has no build argument for them"),
    "no-arg-in-dockerfile": (None, DOCKERFILE, r"DFLASH_CMAKE_ARGS name no ARG of Dockerfile: Docker would ignore"),
    "arg-not-in-the-run": (None, DOCKERFILE.replace("RUN cmake -S", 'ARG DFLASH_CMAKE_ARGS=""\nRUN cmake -S'),
                           r"-DGGML_NATIVE=OFF would not reach the cmake configure RUN of upstream's Dockerfile: "
                           r"DFLASH_CMAKE_ARGS does not reach that RUN"),
    "overridden": (lambda s: s.replace('"-DGGML_NATIVE=OFF"', '"-DCMAKE_BUILD_TYPE=Debug"'),
                   DOCKERFILE.replace("RUN cmake -S", 'ARG DFLASH_CMAKE_ARGS=""\nRUN cmake -S').replace(
                       "-G Ninja \\\n", "-G Ninja ${DFLASH_CMAKE_ARGS} \\\n"),
                   r"-DCMAKE_BUILD_TYPE=Debug would not reach .*: the command sets -DCMAKE_BUILD_TYPE=Release after it"),
    "blank": (lambda s: s.replace('"-DGGML_CUDA_NO_VMM=ON"', '"-DX=a b"'), None,
              r"cmake argument '-DX=a b' holds a blank or a glob character"),
    "base": (lambda s: s.replace('builder_image = "nvidia/cuda:13.0.0-devel', 'builder_image = "nvidia/cuda:12.8.1-devel'),
             None, r"builder_image nvidia/cuda:12.8.1-devel-ubuntulucepatch-offline is not what upstream's Dockerfile "
                   r"starts from with build args .*: nvidia/cuda:13.0.0-devel-ubuntulucepatch-offline"),
    "template-key": (lambda s: s.replace('cuda_archs = ["120"]\n', 'cuda_archs = ["120"]\nuid = 1000\n'), None,
                     r"sets uid, which only lucepatch's own Dockerfile template reads"),
    "arch-disagrees": (lambda s: s.replace('"-DDFLASH_ARCHES=120"', '"-DDFLASH_ARCHES=90"'), None,
                       r"-DDFLASH_ARCHES=90 disagrees with its cuda_archs '120'"),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_a_setting_the_image_cannot_take_is_refused_in_one_line(upstream, tmp_path, case):
    edit, dockerfile, message = REFUSED[case]
    df = upstream["patched"]
    if dockerfile is not None:
        df = tmp_path / "Dockerfile"
        df.write_text(dockerfile)
    with pytest.raises(UsageError, match=message) as exc:
        _plan(_target(upstream, edit), dockerfile=df)
    assert "\n" not in str(exc.value)


def test_a_profile_arg_the_dockerfile_does_not_declare_is_refused_before_a_build(upstream, tmp_path, monkeypatch):
    """Through the build's own entry, with Docker not asked at all (it failed in CI's Docker-less newcomer stage when
    the client came first): a misspelled build argument would be ignored by Docker, so it is one line, exit 2."""
    from lucepatch.builders import image as img

    def no_docker():
        raise AssertionError("Docker was asked before the refusal")

    monkeypatch.setattr(img, "docker_client", no_docker)
    t = _target(upstream, lambda s: s.replace("CUDA_VERSION = ", "CUDA_VERSON = "))
    with pytest.raises(UsageError, match=r"CUDA_VERSON name no ARG of Dockerfile: Docker would ignore them") as exc:
        up.build_upstream_image(t, upstream["up"], tmp_path / "c", up.ImageOptions(profile="sm120-cuda13"))
    assert "\n" not in str(exc.value)
    assert not (tmp_path / "c" / "images").exists()  # no context was written


def test_the_cmake_cache_check_names_what_the_image_lacks():
    cache = "# comment\nGGML_NATIVE:BOOL=OFF\nDFLASH_ARCHES:UNINITIALIZED=120\n"
    ok = up.cache_check(cache, {"GGML_NATIVE": "OFF", "DFLASH_ARCHES": "120"})
    assert ok["ok"] and ok["holds"] == {"GGML_NATIVE": "OFF", "DFLASH_ARCHES": "120"}
    bad = up.cache_check(cache, {"GGML_NATIVE": "ON", "GGML_CUDA_NO_VMM": "ON"})
    assert not bad["ok"] and bad["missing"] == ["GGML_CUDA_NO_VMM"]
    assert bad["differs"] == {"GGML_NATIVE": {"want": "ON", "cache": "OFF"}}
    assert up.cache_check(None, {"X": "1"}) == {"ok": False, "missing": ["X"], "differs": {}, "read": False}


def test_dry_run_shows_what_would_be_built_from_upstreams_dockerfile(upstream, cli, tmp_path):
    """Issue 37: `build lucebox-vendored --image --dry-run` said "no image template lucebox-vendored.Dockerfile.j2"."""
    out = tmp_path / "out"
    r = cli("--workspace", upstream["ws"], "build", "recipe", "--image", "--dry-run", "--profile", "sm120-cuda13-hami",
            "--source", upstream["up"], "--out", out)
    assert r.code == 0, r.err
    head = r.out.splitlines()
    assert head[0] == ("# would build lucepatch/recipe:sm120-cuda13-hami-1.0.0 from upstream's Dockerfile as the "
                       "series leaves it (profile sm120-cuda13-hami, preflight on); nothing built")
    assert head[1] == (f"# build args: CUDA_VERSION=13.0.0 UBUNTU_VERSION={OFFLINE} DFLASH_CUDA_ARCHES=120 "
                       "DFLASH_CMAKE_ARGS='-DGGML_NATIVE=OFF -DGGML_CUDA_NO_VMM=ON'")
    assert any(line.startswith(f"# base nvidia/cuda:13.0.0-devel-ubuntu{OFFLINE}: ") for line in head)
    assert "# not passed to the image: -DDFLASH27B_TESTS=OFF" in r.out
    assert f"# configure: cmake -S /src/server -B /src/server/build -G Ninja -DCMAKE_BUILD_TYPE=Release " \
           f"-DDFLASH_ARCHES=120 -DGGML_NATIVE=OFF -DGGML_CUDA_NO_VMM=ON" in r.out
    assert (out / "Dockerfile").read_text() == upstream["patched"].read_text()  # as the series leaves it
    assert json.loads((out / "build-args.json").read_text())["DFLASH_CMAKE_ARGS"] == "-DGGML_NATIVE=OFF -DGGML_CUDA_NO_VMM=ON"
    assert git(upstream["up"], "rev-parse", "--abbrev-ref", "HEAD").strip() == "main"  # the checkout is not touched
    r = cli("--workspace", upstream["ws"], "build", "recipe", "--image", "--dry-run", "--source", upstream["up"],
            "--builder-image", "x")  # lucepatch's template's option: refused, not ignored
    assert r.code == 2 and "does not use --builder-image" in r.err


def test_lint_names_sections_nothing_reads_where_the_image_is_upstreams(upstream, cli):
    t = _target(upstream, lambda s: s + '\n[model]\ntarget_repo = "a/b"\n')
    from lucepatch.services.lint import lint_image_sections

    assert lint_image_sections(load_target_dir(upstream["tdir"])) == []
    assert lint_image_sections(t) == [
        "[model] is read only by lucepatch's image template; recipe's image is upstream's Dockerfile, whose "
        "entrypoint fetches nothing: remove it (the chart's model_* values choose the model)"]
    t = _target(upstream, lambda s: s.replace("DFLASH27B_TESTS = ", "DFLASH27B_TEST = "))
    assert lint_image_sections(t) == ["[build.image_leaves] DFLASH27B_TEST: no profile sets it"]
    r = cli("--workspace", REPO, "lint", "lucebox-vendored")
    assert r.code == 0, r.out + r.err


# ---------------------------------------------------------------------------------- the build
@pytest.fixture(scope="module")
def client():
    needs.docker_client()  # skip (here) / fail (CI=true) with no-docker: when no daemon answers
    from lucepatch.builders import image as img

    return img.docker_client()


@pytest.fixture(scope="module")
def bases(client):
    """The offline stand-ins, tagged under the names upstream's FROM lines resolve to with the profile's build args."""
    names = []
    for script, tag, kind, stand_in in ((["bash", str(FIX / "make_base.sh"), "--flavour", "cc"], BASE, "devel", "debian-cc"),
                                        (["bash", str(REPO / "tests" / "docker_base.sh")], RT_BASE, "runtime", "busybox")):
        r = subprocess.run([*script, tag], capture_output=True, text=True, timeout=900)
        assert r.returncode == 0, r.stderr[-2000:]
        name = f"nvidia/cuda:13.0.0-{kind}-ubuntu{OFFLINE}"
        client.images.get(tag).tag(*name.rsplit(":", 1))
        names.append((name, stand_in))
    yield names
    for n, _ in names:
        client.images.remove(n, noprune=True)


@pytest.fixture(scope="module")
def built(client, bases, upstream):
    """One build of upstream's Dockerfile as the series leaves it, profile sm120-cuda13-hami, the way a person asks
    for it (`lucepatch build recipe --image ... --json`: the command, services/builds.build_image, the plan, the
    build); the tests below read its result."""
    import contextlib
    import io
    from types import SimpleNamespace

    from lucepatch.main import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["--workspace", str(upstream["ws"]), "--cache-dir", str(upstream["tmp"] / "cache"), "build", "recipe",
                     "--image", "--profile", "sm120-cuda13-hami", "--tag", "lucepatch-test/recipe", "--source",
                     str(upstream["up"]), "--json"])
    assert code == 0, err.getvalue()[-3000:]
    doc = json.loads(out.getvalue())["image"]
    res = SimpleNamespace(**{**doc, "log": Path(doc["log"]), "dockerfile": Path(doc["dockerfile"]),
                             "stderr": err.getvalue()})
    yield res
    from lucepatch.builders import image as img

    builder = img.step_image(res.log.read_text(), "cmake -S")
    client.images.remove(res.tag, force=True)
    if builder:  # the builder stage's layers: the final image does not hold them, so removing its tag leaves them
        client.images.remove(builder)


def test_upstreams_dockerfile_builds_with_the_profiles_build_args_and_says_what_base_it_used(built, bases, upstream):
    assert built.tag == "lucepatch-test/recipe:sm120-cuda13-hami-1.0.0"
    assert built.build_args == {"CUDA_VERSION": "13.0.0", "UBUNTU_VERSION": OFFLINE, "DFLASH_CUDA_ARCHES": "120",
                                "DFLASH_CMAKE_ARGS": "-DGGML_NATIVE=OFF -DGGML_CUDA_NO_VMM=ON"}
    assert json.loads((built.log.parent / "build-args.json").read_text()) == built.build_args
    assert [(b["ref"], b["stand_in"]) for b in built.base_images] == bases
    # said while building: what each base is here, and the profile's setting the image leaves to upstream
    assert f"base nvidia/cuda:13.0.0-devel-ubuntu{OFFLINE}: a local stand-in (debian-cc), not the image" in built.stderr
    assert "not passed to the image: -DDFLASH27B_TESTS=OFF" in built.stderr
    assert built.dockerfile.read_text() == upstream["patched"].read_text()  # upstream's file + the series, not ours


def test_the_profiles_cmake_arguments_are_in_the_images_cmake_cache(built):
    """Read back from the configure step's layer; DFLASH27B_TESTS was left out (the fixture's CMakeLists stops if it
    arrives)."""
    assert built.cmake_cache["ok"] and built.cmake_cache["holds"] == {
        "GGML_NATIVE": "OFF", "GGML_CUDA_NO_VMM": "ON", "DFLASH_ARCHES": "120"}


def test_the_series_and_the_arch_list_reach_the_binary(client, built):
    out = client.containers.run(built.tag, ["sh", "-c", "/opt/app/hello && cat /opt/app/arches.txt"],
                                remove=True).decode().split()
    assert out == ["hello,", "patched", "120"]  # the series is in the context; the arch ARG reached cmake


def test_the_labels_name_the_recipe_and_what_reached_cmake(client, built):
    labels = client.images.get(built.tag).labels
    assert {k: labels.get(k) for k in built.labels} == built.labels  # quotes, $ and \\ read back as written
    assert labels["org.opencontainers.image.description"].startswith('a "quoted" $HOME, a back\\slash and ${X}')
    # one LABEL step (in the file Docker read, outside the context), not one step per label
    assert built.log.read_text().count(" : LABEL ") == 1
    assert labels["org.lucepatch.recipe"] == "upstream Dockerfile" and labels["org.lucepatch.cuda-archs"] == "120"
    assert labels["org.lucepatch.cuda-version"] == "13.0"
    assert labels["org.lucepatch.cmake-args"] == "-DGGML_NATIVE=OFF -DGGML_CUDA_NO_VMM=ON"
    assert labels["org.lucepatch.cmake-args-left-to-upstream"] == "-DDFLASH27B_TESTS=OFF"
    assert labels["org.lucepatch.patch-ids"].startswith("recipe:fix-hello=")


def test_the_runtime_closure_resolves_in_the_image(built):
    """hello needs libc.so.6, which the busybox runtime stage has only because the builder's RUN put it there."""
    assert built.closure["ok"], built.closure
