"""The library image `build hami-core --image` makes feeds lucepatch's own DaemonSet and verify Jobs.

The image is FROM scratch (no shell, no cp): a fixture target rendered with the real hami-core
template is built with the Docker engine on the offline Debian base, and the swap DaemonSet's and
the verify Job's init-container commands, exactly as rendered, run in that image with a volume at
their destination. The copied bytes must be the library's.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

import needs
from lucepatch.builders import image as img
from lucepatch.k8s import manifests, values
from lucepatch.target import load_target_dir

REPO = Path(__file__).resolve().parent.parent
FIX = REPO / "tests" / "fixtures" / "cudaproj"
BASE = os.environ.get("LUCEPATCH_DEBIAN_BASE", "lucepatch/base:debian-cc")  # as make_base.sh and test_image

pytest.importorskip("yaml")

VGPU_C = "int cuMemAlloc_v2(void) { return 0; }\nint shrreg_major_version(void) { return 1; }\n"
CMAKE = "cmake_minimum_required(VERSION 3.16)\nproject(vgpufake C)\nadd_library(vgpu SHARED vgpu.c)\n"


def _git(cwd, *args):
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@example.invalid", *args], cwd=cwd,
                          check=True, capture_output=True, text=True).stdout


@pytest.fixture(scope="module")
def lib_image(tmp_path_factory):
    needs.docker_client()
    client = img.docker_client()
    r = subprocess.run(["bash", str(FIX / "make_base.sh"), BASE], capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-2000:]
    tmp = tmp_path_factory.mktemp("libimg")
    up = tmp / "vgpufake"
    up.mkdir()
    (up / "vgpu.c").write_text(VGPU_C)
    (up / "CMakeLists.txt").write_text(CMAKE)
    _git(up, "init", "-q", "-b", "main")
    _git(up, "add", "-A")
    _git(up, "commit", "-q", "-m", "base")
    base = _git(up, "rev-parse", "HEAD").strip()
    tdir = tmp / "ws" / "patches" / "vgpufake"
    tdir.mkdir(parents=True)
    (tmp / "ws" / "lucepatch.toml").write_text("schema_version = 1\n")
    (tdir / "series").write_text("")
    (tdir / "target.toml").write_text(f'''name = "vgpufake"
upstream = "https://example.invalid/vgpufake"
branch = "main"
base = "{base}"
version = "1.0.0"
description = "fixture: a HAMi-core-like library built with the hami-core image template"

[build]
system = "cmake"
targets = ["vgpu"]
image_template = "hami-core"

[build.artifacts]
"libvgpu.so" = "libvgpu.so"

[profiles.offline]
description = "the offline Debian builder"
cmake_args = ["-DCMAKE_BUILD_TYPE=Release"]
builder_image = "{BASE}"
builder_packages = []
''')
    t = load_target_dir(tdir)
    res = img.build_image(t, up, "offline", tmp / "cache", repo="lucepatch-test/vgpufake", closure=False)
    c = client.containers.create(res.tag, entrypoint=["/x"])
    try:
        bits, _ = c.get_archive("/lucepatch/lib/libvgpu.so")
        import io
        import tarfile
        with tarfile.open(fileobj=io.BytesIO(b"".join(bits))) as tf:
            lib = tf.extractfile("libvgpu.so").read()
        bits, _ = c.get_archive("/lucepatch/lib/libvgpu.so.sha256")
        with tarfile.open(fileobj=io.BytesIO(b"".join(bits))) as tf:
            sums = tf.extractfile("libvgpu.so.sha256").read().decode()
    finally:
        c.remove(force=True)
    # the checksum file beside it is what `sha256sum -c` reads in /lucepatch/lib: "<sha256>  libvgpu.so"
    assert sums == f"{hashlib.sha256(lib).hexdigest()}  libvgpu.so\n", sums
    yield {"tag": res.tag, "client": client, "lib_sha": hashlib.sha256(lib).hexdigest(), "dockerfile": res.dockerfile}
    client.images.remove(res.tag, force=True)


def _init_command(objs, name):
    for o in objs:
        if "template" not in o.get("spec", {}):
            continue
        spec = o["spec"]["template"]["spec"]
        for c in spec.get("initContainers", []):
            if c["name"] == name:
                return c["command"], c["volumeMounts"][0]["mountPath"]
    raise AssertionError(f"no init container {name}")


def _run_in_image(lib_image, command, mount, tmp_path) -> str:
    """Run `command` as the init container does: the image, its entrypoint replaced, a volume at `mount`."""
    out = tmp_path / "vol"
    out.mkdir()
    client = lib_image["client"]
    c = client.containers.run(lib_image["tag"], entrypoint=command[:1], command=command[1:], detach=True,
                              network_mode="none", volumes={str(out): {"bind": mount, "mode": "rw"}})
    try:
        rc = c.wait(timeout=120)["StatusCode"]
        logs = c.logs().decode(errors="replace")
    finally:
        c.remove(force=True)
    assert rc == 0, logs
    return hashlib.sha256((out / "libvgpu.so").read_bytes()).hexdigest()


def test_image_has_no_shell_and_holds_the_library_and_copier(lib_image):
    text = Path(lib_image["dockerfile"]).read_text()
    assert "FROM scratch" in text
    client = lib_image["client"]
    with pytest.raises(Exception):  # no /bin/sh: the old `cp` init container could never have run
        client.containers.run(lib_image["tag"], entrypoint=["/bin/sh"], command=["-c", "true"], remove=True,
                              network_mode="none")
    assert values.LIB_COPIER == img.LIB_COPIER_PATH
    assert values.SWAP["lib_path_in_image"].default == f"{img.LIB_DIR_IN_IMAGE}/libvgpu.so"


def test_swap_daemonset_init_container_copies_out_of_the_library_image(lib_image, tmp_path):
    vals = values.resolve("hami-core-swap", {"lib_image": lib_image["tag"], "lib_sha256": lib_image["lib_sha"]})
    objs = manifests.to_objects(manifests.render("hami-core-swap", vals))
    command, mount = _init_command(objs, "fetch-lib")
    assert _run_in_image(lib_image, command, mount, tmp_path) == lib_image["lib_sha"]


def test_verify_job_init_container_copies_out_of_the_library_image(lib_image, tmp_path):
    vals = values.resolve("verify-job", {"lib_image": lib_image["tag"], "lib_sha256": lib_image["lib_sha"]})
    objs = manifests.to_objects(manifests.render_verify_jobs(vals))
    command, mount = _init_command(objs, next(c["name"] for c in objs[0]["spec"]["template"]["spec"]["initContainers"]))
    assert _run_in_image(lib_image, command, mount, tmp_path) == lib_image["lib_sha"]


def test_copier_refuses_a_missing_source_with_one_line(lib_image, tmp_path):
    client = lib_image["client"]
    c = client.containers.run(lib_image["tag"], entrypoint=[img.LIB_COPIER_PATH], command=["/nope", "/tmp/x"],
                              detach=True, network_mode="none")
    try:
        rc = c.wait(timeout=60)["StatusCode"]
        logs = c.logs().decode()
    finally:
        c.remove(force=True)
    assert rc == 1 and logs.strip().splitlines() == ["lucepatch-copy: cannot open /nope: No such file or directory"]
