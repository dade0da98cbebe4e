"""The image closure check against NVIDIA's real CUDA 13.0 userland (libcudart, libcublas,
libcublasLt from the PyPI wheels, `make_base.sh --flavour cuda13-rt`), not a Debian stand-in:
a client linked against the real libcublas resolves its whole closure (libcublasLt is an
indirect dependency), runs, and the check fails when libcublasLt is taken away."""

from __future__ import annotations

import glob
import io
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from lucepatch.builders import image as img

sys.path.insert(0, str(Path(__file__).resolve().parent))
import needs  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
FIX = REPO / "tests" / "fixtures" / "cudaproj"
TAG = os.environ.get("LUCEPATCH_CUDA13_RT_BASE", "lucepatch/base:cuda13-rt")
WHEELS = Path(os.environ.get("LUCEPATCH_WHEEL_CACHE", Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
                             / "lucepatch" / "wheels"))

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


def _client_binary(tmp: Path) -> Path:
    lib = tmp / "lib"
    lib.mkdir()
    for pat in ("nvidia_cuda_runtime-13.0.88-*.whl", "nvidia_cublas-13.0.2.14-*.whl"):
        (whl,) = glob.glob(str(WHEELS / pat))
        with zipfile.ZipFile(whl) as z:
            for i in z.infolist():
                n = os.path.basename(i.filename)
                if n in ("libcudart.so.13", "libcublas.so.13", "libcublasLt.so.13"):
                    (lib / n).write_bytes(z.read(i))
    (tmp / "c.c").write_text(
        "int cudaRuntimeGetVersion(int *v);\nint cublasGetVersion_v2(void *h, int *v);\n"
        "int main(void) { int v = 0; cudaRuntimeGetVersion(&v); (void)cublasGetVersion_v2; return v >= 13000 ? 0 : 1; }\n")
    out = tmp / "ctx" / "cublas_client"
    out.parent.mkdir()
    subprocess.run(["cc", "-o", str(out), str(tmp / "c.c"), "-Wl,--no-as-needed", f"-L{lib}", "-l:libcublas.so.13",
                    "-l:libcudart.so.13", f"-Wl,-rpath-link,{lib}"], check=True, capture_output=True)
    return out


def test_closure_against_the_real_cublas(client, cuda_rt, tmp_path):
    binary = _client_binary(tmp_path)
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
