"""The durable node fix: the same HAMi device-plugin image with the patched libvgpu.so.

Hot-swapping the library on a node (deploy hami-core) is undone by the next device-plugin start,
because vgpu-init.sh copies /k8s-vgpu/lib/nvidia/libvgpu.so.<version> from the plugin image onto
the node. Rebuilding the plugin image with the patched bytes under the same name makes the fix
survive restarts; the Helm values snippet points the chart at it.
"""

from __future__ import annotations

import hashlib
import io
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from lucepatch.builders.image import docker_client
from lucepatch.errors import CheckFailed, UsageError
from lucepatch.native import elf
from lucepatch.render import render

PLUGIN_LIB_DIR = "/k8s-vgpu/lib/nvidia"


@dataclass
class PluginImage:
    tag: str
    image_id: str
    lib_path: str
    lib_sha256: str
    replaced_sha256: str
    values_yaml: str

    def to_json(self) -> dict:
        return {"tag": self.tag, "image_id": self.image_id, "lib_path": self.lib_path,
                "lib_sha256": self.lib_sha256, "replaced_sha256": self.replaced_sha256}


def _read_plugin_libs(client, image: str) -> dict[str, bytes]:
    """libvgpu.so.* files in the image's plugin lib dir, read without running the image."""
    import docker  # optional: the docker extra

    try:
        client.images.get(image)
    except docker.errors.ImageNotFound:
        raise UsageError(f"image {image} is not present locally; docker pull it (or docker load it) first")
    container = client.containers.create(image, command=["true"])
    try:
        try:
            stream, _ = container.get_archive(PLUGIN_LIB_DIR)
        except docker.errors.NotFound:
            raise CheckFailed(f"{image} has no {PLUGIN_LIB_DIR}: it is not a HAMi device-plugin image")
        buf = io.BytesIO(b"".join(stream))
    finally:
        container.remove(force=True)
    libs = {}
    with tarfile.open(fileobj=buf) as tar:
        for m in tar.getmembers():
            name = PurePosixPath(m.name).name
            if m.isfile() and name.startswith("libvgpu.so"):
                libs[name] = tar.extractfile(m).read()
    return libs


def build_plugin_image(from_image: str, lib: Path, tag: str, evidence_sha256: str = "") -> PluginImage:
    lib = Path(lib)
    data = lib.read_bytes() if lib.is_file() else None
    if data is None:
        raise UsageError(f"--lib {lib} is not a file")
    if not elf.is_elf(lib):
        raise UsageError(f"--lib {lib} is not an ELF shared library")
    client = docker_client()
    libs = _read_plugin_libs(client, from_image)
    versioned = sorted(n for n in libs if n != "libvgpu.so")
    if len(versioned) != 1:
        found = ", ".join(sorted(libs)) or "none"
        raise CheckFailed(f"{from_image}: expected exactly one libvgpu.so.<version> in {PLUGIN_LIB_DIR}, found {found}")
    name = versioned[0]
    sha = hashlib.sha256(data).hexdigest()
    replaced = hashlib.sha256(libs[name]).hexdigest()
    with tempfile.TemporaryDirectory(prefix="lucepatch-plugin-") as ctx:
        Path(ctx, "libvgpu.so").write_bytes(data)
        Path(ctx, "Dockerfile").write_text(render(
            "k8s/hami-device-plugin.Dockerfile.j2", from_image=from_image, lib_dir=PLUGIN_LIB_DIR, lib_name=name,
            lib_sha256=sha, replaced_sha256=replaced, evidence_sha256=evidence_sha256))
        image, _ = client.images.build(path=ctx, tag=tag, rm=True, network_mode="none")
    # Check what was built rather than trusting the build: read the file back out of the image.
    got = _read_plugin_libs(client, tag).get(name)
    if got is None or hashlib.sha256(got).hexdigest() != sha:
        raise CheckFailed(f"{tag}: {PLUGIN_LIB_DIR}/{name} in the built image is not the patched library")
    repo, _, t = tag.rpartition(":") if ":" in tag.split("/")[-1] else (tag, "", "latest")
    values = render("k8s/hami-device-plugin-values.yaml.j2", repository=repo, tag=t)
    return PluginImage(tag, image.id, f"{PLUGIN_LIB_DIR}/{name}", sha, replaced, values)
