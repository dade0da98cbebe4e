"""build hami-device-plugin: the plugin image with the patched library, checked by reading the
bytes back out of the built image. Needs the Docker engine .ci/run starts."""

from __future__ import annotations

import hashlib
import os
import subprocess
import tempfile
from pathlib import Path

import pytest

import needs
from lucepatch.errors import CheckFailed, UsageError

ROOT = Path(__file__).resolve().parent.parent
BASE = os.environ.get("LUCEPATCH_BASE_IMAGE", "lucepatch/base:busybox")


@pytest.fixture(scope="module")
def client():
    c = needs.docker_client()
    subprocess.run(["bash", str(ROOT / "tests" / "docker_base.sh"), BASE], check=True, capture_output=True)
    return c


def _so(tmp: Path, name: str, body: str) -> Path:
    src = tmp / f"{name}.c"
    src.write_text(body)
    out = tmp / name
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(out), str(src)], check=True)
    return out


@pytest.fixture(scope="module")
def upstream_plugin(client, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("plugin")
    lib = _so(tmp, "libvgpu.so", "int upstream_hook(void) { return 1; }\n")
    (tmp / "Dockerfile").write_text(
        f"FROM {BASE}\nRUN mkdir -p /k8s-vgpu/lib/nvidia /k8s-vgpu/bin\n"
        "COPY libvgpu.so /k8s-vgpu/lib/nvidia/libvgpu.so.v2.8.2\n")
    tag = "lucepatch-test/hami:v2.8.2"
    client.images.build(path=str(tmp), tag=tag, rm=True, network_mode="none")
    yield tag, hashlib.sha256(lib.read_bytes()).hexdigest()
    client.images.remove(tag, force=True)


def test_plugin_image_carries_patched_bytes(client, upstream_plugin, tmp_path):
    from lucepatch.k8s.plugin_image import build_plugin_image

    tag, upstream_sha = upstream_plugin
    patched = _so(tmp_path, "libvgpu.so", "int upstream_hook(void) { return 2; }\nint fixed(void) { return 0; }\n")
    res = build_plugin_image(tag, patched, "lucepatch-test/hami:v2.8.2-lucepatch", evidence_sha256="ab" * 32)
    try:
        assert res.lib_path == "/k8s-vgpu/lib/nvidia/libvgpu.so.v2.8.2"
        assert res.lib_sha256 == hashlib.sha256(patched.read_bytes()).hexdigest()
        assert res.replaced_sha256 == upstream_sha != res.lib_sha256
        labels = client.images.get(res.tag).labels
        assert labels["dev.lucepatch.hami-core.sha256"] == res.lib_sha256
        assert labels["dev.lucepatch.evidence.sha256"] == "ab" * 32
        assert 'repository: "lucepatch-test/hami"' in res.values_yaml and 'tag: "v2.8.2-lucepatch"' in res.values_yaml
    finally:
        client.images.remove(res.tag, force=True)


def test_refuses_non_plugin_image_and_non_elf(client, tmp_path):
    from lucepatch.k8s.plugin_image import build_plugin_image

    lib = _so(tmp_path, "libvgpu.so", "int x(void) { return 0; }\n")
    with pytest.raises(CheckFailed, match="not a HAMi device-plugin image"):
        build_plugin_image(BASE, lib, "lucepatch-test/nope:1")
    bad = tmp_path / "notelf.so"
    bad.write_text("hello")
    with pytest.raises(UsageError, match="not an ELF"):
        build_plugin_image(BASE, bad, "lucepatch-test/nope:1")
    with pytest.raises(UsageError, match="not present locally"):
        build_plugin_image("lucepatch-test/absent:0", lib, "lucepatch-test/nope:1")


def test_build_verb_device_plugin(cli, client, upstream_plugin, tmp_path):
    tag, upstream_sha = upstream_plugin
    patched = _so(tmp_path, "libvgpu.so", "int upstream_hook(void) { return 3; }\n")
    ev = tmp_path / "evidence.json"
    ev.write_text('{"schema_version": 1, "verdict": "proven"}\n')
    saved = tmp_path / "plugin.tar"
    r = cli("build", "hami-device-plugin", "--from", tag, "--lib", patched, "--evidence", ev, "--save", saved, "--json")
    assert r.code == 0, r.err
    doc = r.json
    try:
        assert doc["device_plugin"]["tag"] == "lucepatch-test/hami:v2.8.2-lucepatch"
        assert doc["device_plugin"]["lib_sha256"] == hashlib.sha256(patched.read_bytes()).hexdigest()
        assert doc["device_plugin"]["replaced_sha256"] == upstream_sha
        assert "devicePlugin:" in doc["helm_values"]
        labels = client.images.get(doc["device_plugin"]["tag"]).labels
        assert labels["dev.lucepatch.evidence.sha256"] == hashlib.sha256(ev.read_bytes()).hexdigest()
        assert saved.stat().st_size > 0
    finally:
        client.images.remove(doc["device_plugin"]["tag"], force=True)
    r = cli("build", "hami-device-plugin", "--lib", patched)
    assert r.code == 2 and "--from" in r.err
