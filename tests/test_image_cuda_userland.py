"""The image closure check against NVIDIA's real CUDA 13.0 userland (libcudart, libcublas,
libcublasLt from the PyPI wheels, `make_base.sh --flavour cuda13-rt`), not a Debian stand-in:
a client linked against the real libcublas resolves its whole closure (libcublasLt is an
indirect dependency), runs, and the check fails when libcublasLt is taken away."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from lucepatch.builders import image as img

sys.path.insert(0, str(Path(__file__).resolve().parent))
import needs  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
FIX = REPO / "tests" / "fixtures" / "cudaproj"
TAG = os.environ.get("LUCEPATCH_CUDA13_RT_BASE", "lucepatch/base:cuda13-rt")
CUDA_LIB = "/usr/local/cuda-13.0/targets/x86_64-linux/lib"  # make_base.sh --flavour cuda13-rt puts the wheels' libraries here

pytestmark = pytest.mark.docker


@pytest.fixture(scope="module")
def client():
    needs.docker_client()  # skip (here) / fail (CI=true) with no-docker: when no daemon answers
    return img.docker_client()


@pytest.fixture(scope="module")
def cuda_rt(client):
    r = subprocess.run(["bash", str(FIX / "make_base.sh"), "--flavour", "cuda13-rt", TAG], capture_output=True,
                       text=True, timeout=1800)
    assert r.returncode == 0, r.stderr[-2000:]
    return TAG


def _client_binary(client, image: str, tmp: Path) -> Path:
    """A client linked against the libcudart and libcublas in `image` itself (copied out through the
    archive API; the image never runs): the same files the closure check resolves, whatever the host's
    wheel cache holds. libcublasLt (539 MB) stays in the image: it is libcublas's dependency, not the
    client's, so the link allows it unresolved and the image's loader is what must find it."""
    lib = tmp / "lib"
    lib.mkdir()
    c = client.containers.create(image, entrypoint=["/bin/true"])
    try:
        for n in ("libcudart.so.13", "libcublas.so.13"):
            bits, _ = c.get_archive(f"{CUDA_LIB}/{n}")
            with tarfile.open(fileobj=io.BytesIO(b"".join(bits))) as tf:
                (lib / n).write_bytes(tf.extractfile(tf.getmember(n)).read())
    finally:
        c.remove(force=True)
    (tmp / "c.c").write_text(
        "int cudaRuntimeGetVersion(int *v);\nint cublasGetVersion_v2(void *h, int *v);\n"
        "int main(void) { int v = 0; cudaRuntimeGetVersion(&v); (void)cublasGetVersion_v2; return v >= 13000 ? 0 : 1; }\n")
    out = tmp / "ctx" / "cublas_client"
    out.parent.mkdir()
    subprocess.run(["cc", "-o", str(out), str(tmp / "c.c"), "-Wl,--no-as-needed", f"-L{lib}", "-l:libcublas.so.13",
                    "-l:libcudart.so.13", "-Wl,--allow-shlib-undefined"], check=True, capture_output=True)
    return out


def test_closure_against_the_real_cublas(client, cuda_rt, tmp_path):
    binary = _client_binary(client, cuda_rt, tmp_path)
    ctx = binary.parent
    (ctx / "Dockerfile").write_text(f"FROM {cuda_rt}\nCOPY cublas_client /app/bin/cublas_client\n")
    whole, _ = client.images.build(path=str(ctx), tag="lucepatch-test/cublas-client:ok", rm=True)
    (ctx / "Dockerfile").write_text(f"FROM {whole.id}\nRUN rm /usr/local/cuda/lib64/libcublasLt.so.13 && ldconfig\n")
    broken, _ = client.images.build(path=str(ctx), tag="lucepatch-test/cublas-client:nolt", rm=True)
    try:
        c = img.closure_check(client, whole.id, ["/app"], cache=tmp_path / "cache")
        assert c["ok"], c
        assert {"libcublas.so.13", "libcudart.so.13"} <= set(c["needed_names"])
        # the indirect dependency of the real libcublas, resolved by the image's own loader
        assert c["resolved"]["libcublasLt.so.13"].startswith("/usr/local/cuda")
        # and the real runtime loads and answers (no driver needed for the runtime version)
        out = client.containers.run(whole.id, entrypoint=["/app/bin/cublas_client"], network_mode="none", remove=True)
        assert out == b""
        b = img.closure_check(client, broken.id, ["/app"], cache=tmp_path / "cache")
        assert not b["ok"] and b["unresolved"] == {"/app/bin/cublas_client": ["libcublasLt.so.13"]}, b
    finally:
        client.images.remove(broken.id, force=True)
        client.images.remove(whole.id, force=True)
