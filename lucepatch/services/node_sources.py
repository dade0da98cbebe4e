"""Getting a node's libvgpu.so out of where it lives, without running anything.

- an image (docker SDK): a container is created from the image, never started; the file is
  copied out with the archive API (``docker cp``). HAMi's device-plugin image keeps the library
  the node installs at /k8s-vgpu/lib/nvidia/libvgpu.so.<version> (vgpu-init.sh copies it to
  /usr/local/vgpu); an application image may carry /usr/local/vgpu/libvgpu.so itself.
- a running pod (kubernetes client, LUCEPATCH_KUBECONFIG): the library HAMi mounts into every GPU
  pod, /usr/local/vgpu/libvgpu.so, read with ``base64`` through the exec API (the exec channel is
  text; base64 keeps the bytes intact).

Each returns the bytes and where they came from; the caller writes them where the user said.
"""

from __future__ import annotations

import base64
import binascii
import io
import tarfile
from pathlib import PurePosixPath

from lucepatch.errors import CheckFailed, UsageError

PLUGIN_LIB_DIR = "/k8s-vgpu/lib/nvidia"
POD_LIB_PATH = "/usr/local/vgpu/libvgpu.so"
IMAGE_CANDIDATES = (PLUGIN_LIB_DIR, POD_LIB_PATH)


def _archive_files(container, path: str) -> dict[str, bytes]:
    """Regular files under ``path`` in a (created, not started) container, by base name."""
    import docker  # optional: the docker extra

    try:
        stream, _ = container.get_archive(path)
    except docker.errors.NotFound:
        return {}
    out = {}
    with tarfile.open(fileobj=io.BytesIO(b"".join(stream))) as tar:
        for m in tar.getmembers():
            if m.isfile():
                out[PurePosixPath(m.name).name] = tar.extractfile(m).read()
    return out


def pick_library(files: dict[str, bytes]) -> tuple[str, bytes] | None:
    """The library a node would install: the one versioned libvgpu.so.<version> when there is
    exactly one (the plugin image's), else libvgpu.so."""
    versioned = sorted(n for n in files if n.startswith("libvgpu.so."))
    if len(versioned) == 1:
        return versioned[0], files[versioned[0]]
    if "libvgpu.so" in files:
        return "libvgpu.so", files["libvgpu.so"]
    return None


def from_image(image: str, path: str | None = None) -> tuple[bytes, str]:
    """(bytes, "IMAGE:PATH") of the libvgpu.so in ``image`` (present locally; never pulled, never run)."""
    from lucepatch.builders.image import docker_client  # lazy: the image builder, 55 ms

    client = docker_client()  # the SDK and a daemon that answers, else one line (exit 3)
    import docker  # optional: the docker extra  # present: docker_client imported it
    try:
        client.images.get(image)
    except docker.errors.ImageNotFound:
        raise UsageError(f"image {image} is not present locally; docker pull (or docker load) it first")
    container = client.containers.create(image, command=["true"])
    try:
        for where in ([path] if path else IMAGE_CANDIDATES):
            files = _archive_files(container, where)
            if path and len(files) == 1:
                name, data = next(iter(files.items()))
                return data, f"{image}:{path}"
            got = pick_library(files)
            if got:
                name, data = got
                full = where if PurePosixPath(where).name == name else f"{where.rstrip('/')}/{name}"
                return data, f"{image}:{full}"
    finally:
        container.remove(force=True)
    tried = path or ", ".join(IMAGE_CANDIDATES)
    raise CheckFailed(f"{image} has no libvgpu.so at {tried}: pass --lib-path PATH inside the image")


def from_pod(pod: str, *, namespace: str = "default", container: str | None = None, path: str = POD_LIB_PATH,
             context: str | None = None, kubeconfig: str | None = None) -> tuple[bytes, str]:
    """(bytes, "pod NS/NAME:PATH") of the library mapped into a running pod."""
    from lucepatch.k8s import client as kclient  # lazy: the cluster client, 14 ms

    k8s = kclient.load(context=context, kubeconfig=kubeconfig)
    from kubernetes.client.rest import ApiException  # optional: the k8s extra
    from kubernetes.stream import stream  # optional: the k8s extra

    api = k8s.CoreV1Api()
    kw = {"container": container} if container else {}
    try:
        out = stream(api.connect_get_namespaced_pod_exec, pod, namespace, command=["base64", path],
                     stderr=True, stdin=False, stdout=True, tty=False, **kw)
    except ApiException as exc:
        raise CheckFailed(f"cannot exec into pod {namespace}/{pod}: {exc.status} {exc.reason}")
    return decode_exec_output(out, f"pod {namespace}/{pod}:{path}"), f"pod {namespace}/{pod}:{path}"


def decode_exec_output(out: str, where: str) -> bytes:
    """The bytes of ``base64 FILE``'s output; CheckFailed (with the pod's message) when it is not base64."""
    text = "".join((out or "").split())
    try:
        data = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        first = (out or "").strip().splitlines()[:1]
        raise CheckFailed(f"{where}: could not read the library ({first[0][:160] if first else 'no output'}); "
                          "the container needs the file and a base64 tool")
    if not data:
        raise CheckFailed(f"{where}: the file is empty")
    return data
