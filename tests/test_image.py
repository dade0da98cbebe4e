"""`build --image` with a real Docker engine, offline: the lucebox templates built on a Debian base made
from the host's packages (tests/fixtures/cudaproj/make_base.sh) with the cudaproj fixture + series.

Checks: labels and `inspect`; a planted token nowhere in `docker save` layers, Config.Env or labels;
the entrypoint's download path against an HF-like HTTP server on 127.0.0.1 (host network) with
checksum, magic, 401 and disk-full errors; non-root user; the runtime closure check (and that it
catches a missing library); preflight refusal; docker down -> exit 3; rendered real Dockerfiles lint.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import struct
import subprocess
import sys
import tarfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from lucepatch.builders import image as img
from lucepatch.target import load_target_dir

REPO = Path(__file__).resolve().parent.parent
FIX = REPO / "tests" / "fixtures" / "cudaproj"
sys.path.insert(0, str(FIX))
import make_fixture  # noqa: E402
import needs  # noqa: E402

BASE = os.environ.get("LUCEPATCH_DEBIAN_BASE", "lucepatch/base:debian-cc")
RT_BASE = os.environ.get("LUCEPATCH_DEBIAN_RT_BASE", "lucepatch/base:debian-rt")
TOKEN = "hf_PLANTEDlucepatchTOKEN0123456789abcdef"
RUN_TOKEN = "hf_RUNTIMEonlyTOKEN9876543210"



@pytest.fixture(scope="module")
def client():
    needs.docker_client()  # skip (here) / fail (CI=true) with no-docker: when no daemon answers
    return img.docker_client()


@pytest.fixture(scope="module")
def base_image(client):
    for args in ([BASE], ["--flavour", "rt", RT_BASE]):
        r = subprocess.run(["bash", str(FIX / "make_base.sh"), *args], capture_output=True, text=True, timeout=900)
        assert r.returncode == 0, r.stderr[-2000:]
    return BASE


@pytest.fixture(scope="module")
def built(tmp_path_factory, client, base_image):
    tmp = tmp_path_factory.mktemp("img")
    fx = make_fixture.make(tmp)
    # a secret in the user's checkout (untracked) and in the environment of the build
    (fx["upstream"] / ".env").write_text(f"HF_TOKEN={TOKEN}\n")
    old = os.environ.get("HF_TOKEN")
    os.environ["HF_TOKEN"] = TOKEN
    try:
        from lucepatch.builders.probe import preflight
        t = load_target_dir(fx["tdir"])
        run = preflight(t, fx["upstream"], "cpu", tmp / "cache")
        res = img.build_image(t, fx["upstream"], "cpu", tmp / "cache", repo="lucepatch-test/cudaproj",
                              evidence=run.to_json(), save=tmp / "image.tar")
    finally:
        if old is None:
            os.environ.pop("HF_TOKEN", None)
        else:
            os.environ["HF_TOKEN"] = old
    return {"res": res, "fx": fx, "tmp": tmp, "target": t, "evidence": run.to_json()}


def test_labels_and_inspect(built, cli):
    res, fx = built["res"], built["fx"]
    assert res.tag == "lucepatch-test/cudaproj:cpu-1.0.0"
    r = cli("inspect", res.tag, "--json")
    assert r.code == 0, r.err
    labels = r.json["labels"]
    assert labels["org.opencontainers.image.source"] == "https://example.invalid/cudaproj"
    assert labels["org.opencontainers.image.revision"] == fx["base"]
    assert labels["org.lucepatch.series-version"] == "1.0.0"
    assert labels["org.lucepatch.profile"] == "cpu"
    ids = labels["org.lucepatch.patch-ids"].split(",")
    assert len(ids) == 3 and all(i.startswith("cudaproj:") for i in ids)
    ev = hashlib.sha256(json.dumps(built["evidence"], sort_keys=True).encode()).hexdigest()
    assert labels["org.lucepatch.evidence-sha256"] == ev
    assert labels["org.lucepatch.series-hash"] == built["target"].series_hash
    r = cli("inspect", BASE)
    assert r.code == 1  # an image lucepatch did not build


def test_non_root_healthcheck_and_closure(built, client):
    res = built["res"]
    attrs = client.images.get(res.tag).attrs["Config"]
    assert attrs["User"] == "10001:10001"
    assert attrs["Healthcheck"]["Test"][-1] == 'curl -fsS "http://127.0.0.1:${PORT}/health" || exit 1'  # the port in use
    out = client.containers.run(res.tag, entrypoint=["id", "-u"], remove=True, network_mode="none")
    assert out.decode().strip() == "10001"
    assert res.closure["ok"] and res.closure["elf_count"] >= 2 and not res.closure["unresolved"]


@pytest.fixture(scope="module")
def extra_images(built, client, tmp_path_factory):
    """Two images on top of the built one, made once for the closure tests below (each docker build
    step and each container is a full copy of the image on vfs): `whole` adds /app/extra/app ->
    libgpu.so -> (libcuda.so.1, libdeep.so); `broken` is `whole` with libdeep.so and the server's
    libcore.so deleted. The closure check of each runs once; the tests read what it found."""
    tmp = tmp_path_factory.mktemp("extra")
    ctx = tmp / "ctx"
    (ctx / "extra").mkdir(parents=True)
    for name, text in {"d.c": "int cuMemCreate(void) { return 0; }\n", "c.c": "int deep(void) { return 1; }\n",
                       "g.c": "int cuMemCreate(void); int deep(void); int gpu(void) { return cuMemCreate() + deep(); }\n",
                       "m.c": "int gpu(void); int main(void) { return gpu(); }\n"}.items():
        (tmp / name).write_text(text)
    cc = lambda *a: subprocess.run(["cc", *map(str, a)], check=True, capture_output=True)  # noqa: E731
    cc("-shared", "-fPIC", "-Wl,-soname,libcuda.so.1", "-o", tmp / "libcuda.so", tmp / "d.c")
    cc("-shared", "-fPIC", "-o", ctx / "extra" / "libdeep.so", tmp / "c.c")
    cc("-shared", "-fPIC", "-Wl,--no-as-needed", "-o", ctx / "extra" / "libgpu.so", tmp / "g.c",
       f"-L{tmp}", "-lcuda", f"-L{ctx / 'extra'}", "-ldeep", "-Wl,-rpath,$ORIGIN")
    cc("-o", ctx / "extra" / "app", tmp / "m.c", f"-L{ctx / 'extra'}", "-lgpu", "-Wl,--allow-shlib-undefined",
       "-Wl,-rpath,$ORIGIN")
    (ctx / "Dockerfile").write_text(f"FROM {built['res'].tag}\nCOPY extra/ /app/extra/\n")
    whole, _ = client.images.build(path=str(ctx), tag="lucepatch-test/cudaproj:extra", rm=True)
    df = f"FROM {whole.id}\nUSER 0\nRUN rm /app/extra/libdeep.so /app/lib/libcore.so*\n"
    broken, _ = client.images.build(fileobj=io.BytesIO(df.encode()), tag="lucepatch-test/cudaproj:broken", rm=True)
    try:
        yield {"whole": whole, "broken": broken,
               "whole_closure": img.closure_check(client, whole.id, ["/app"], cache=tmp / "cache"),
               "broken_closure": img.closure_check(client, broken.id, ["/app"], cache=tmp / "cache")}
    finally:
        client.images.remove(broken.id, force=True)
        client.images.remove(whole.id, force=True)


def test_closure_check_catches_a_missing_library(extra_images):
    c = extra_images["broken_closure"]
    assert not c["ok"]
    # the server's own library is gone: named for the server, and nothing that still resolves is named
    assert c["unresolved"]["/app/bin/cudaproj_server"] == ["libcore.so"], c
    assert set(c["unresolved"]) == {"/app/bin/cudaproj_server", "/app/extra/app", "/app/extra/libgpu.so"}, c


def test_closure_check_sees_past_the_absent_driver(extra_images, client):
    """/app/extra/app -> libgpu.so -> (libcuda.so.1, libdeep.so) with libdeep.so deleted: the
    loader alone stops at libcuda.so.1 (allowed) and would pass; the check must not."""
    broken = extra_images["broken"]
    try:
        # the premise: the loader without stubs names only the driver
        raw = client.containers.run(broken.id, entrypoint=["/lib64/ld-linux-x86-64.so.2", "--list", "/app/extra/app"],
                                    user="0", network_mode="none", remove=True, stderr=True).decode()
        assert "libcuda.so.1" in raw and "libdeep.so" not in raw, raw
    except Exception as exc:  # ContainerError carries the output of a non-zero exit
        raw = getattr(exc, "stderr", b"") or b""
        raw = raw.decode() if isinstance(raw, bytes) else str(raw)
        assert "libcuda.so.1" in raw and "libdeep.so" not in raw, raw
    ok = extra_images["whole_closure"]
    assert ok["ok"] and ok["absent_allowed"] == ["libcuda.so.1"], ok
    assert {"libgpu.so", "libdeep.so", "libcuda.so.1"} <= set(ok["needed_names"])
    c = extra_images["broken_closure"]
    assert not c["ok"]
    assert {f: v for f, v in c["unresolved"].items() if f.startswith("/app/extra/")} == {
        "/app/extra/app": ["libdeep.so"], "/app/extra/libgpu.so": ["libdeep.so"]}, c


def _scan_tar(data: bytes, needle: bytes, where: str, hits: list) -> None:
    with tarfile.open(fileobj=io.BytesIO(data)) as tf:
        for m in tf:
            if not m.isfile():
                continue
            blob = tf.extractfile(m).read()
            if m.name.endswith(".tar") or m.name.endswith("/layer.tar"):
                _scan_tar(blob, needle, f"{where}!{m.name}", hits)
            elif needle in blob:
                hits.append(f"{where}!{m.name}")


def test_planted_token_is_nowhere_in_the_image(built, client):
    saved = Path(built["res"].saved)
    assert saved.is_file()
    hits: list[str] = []
    _scan_tar(saved.read_bytes(), TOKEN.encode(), saved.name, hits)
    assert hits == []
    cfg = client.images.get(built["res"].tag).attrs["Config"]
    assert not any(TOKEN in e for e in cfg.get("Env") or [])
    assert not any(TOKEN in v for v in (cfg.get("Labels") or {}).values())
    # the saved tar is loadable by name (clusters without a registry)
    with tarfile.open(saved) as tf:
        manifest = json.loads(tf.extractfile("manifest.json").read())
    assert manifest[0]["RepoTags"] == [built["res"].tag]


# ------------------------------------------------------------------ entrypoint against a fake hub
GGUF = b"GGUF" + struct.pack("<I", 3) + b"\0" * 4088
SAFET_HDR = b'{"__metadata__":{"format":"pt"}}'
SAFETENSORS = struct.pack("<Q", len(SAFET_HDR)) + SAFET_HDR + b"\0" * 64


class Hub:
    def __init__(self):
        sha = lambda b: hashlib.sha256(b).hexdigest()  # noqa: E731
        self.files = {
            ("fixture/model-GGUF", "model-Q4_K_M.gguf"): {"body": GGUF, "sha": sha(GGUF)},
            ("fixture/draft", "config.json"): {"body": b'{"arch": "dflash"}\n', "sha": None, "gated": True},
            ("fixture/draft", "model.safetensors"): {"body": SAFETENSORS, "sha": sha(SAFETENSORS), "gated": True},
            ("fixture/badsum", "model-Q4_K_M.gguf"): {"body": GGUF, "sha": "0" * 64},
            ("fixture/safet", "model-Q4_K_M.gguf"): {"body": SAFETENSORS, "sha": sha(SAFETENSORS)},
            ("fixture/huge", "model-Q4_K_M.gguf"): {"body": GGUF, "sha": None, "size": 10 ** 15},
            ("fixture/nolen", "model-Q4_K_M.gguf"): {"body": GGUF * 64, "sha": None, "nolen": True},
        }
        self.auth_seen: list[str] = []
        hub = self

        class H(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def _auth_ok(self, gated):
                a = self.headers.get("Authorization")
                if a:
                    hub.auth_seen.append(a)
                return (not gated) or a == f"Bearer {RUN_TOKEN}"

            def _resolve(self, head):
                parts = self.path.split("/")
                # /org/repo/resolve/main/file
                if len(parts) >= 6 and parts[3] == "resolve":
                    repo, fname = f"{parts[1]}/{parts[2]}", "/".join(parts[5:])
                    f = hub.files.get((repo, fname))
                    if f is None:
                        return self.send_error(404)
                    if not self._auth_ok(f.get("gated")):
                        return self.send_error(401)
                    self.send_response(200)
                    if not f.get("nolen"):
                        size = f.get("size", len(f["body"]))
                        self.send_header("Content-Length", str(len(f["body"])))
                        self.send_header("X-Linked-Size", str(size))
                    if f.get("sha"):
                        self.send_header("X-Linked-Etag", f'"{f["sha"]}"')
                    self.end_headers()
                    if not head:
                        self.wfile.write(f["body"])
                    return None
                if self.path.startswith("/api/models/"):
                    repo = "/".join(self.path.split("/")[3:5])
                    names = [n for (r, n) in hub.files if r == repo]
                    gated = any(hub.files[(repo, n)].get("gated") for n in names)
                    if not names:
                        return self.send_error(404)
                    if not self._auth_ok(gated):
                        return self.send_error(401)
                    body = json.dumps({"id": repo, "siblings": [{"rfilename": n} for n in names + [".gitattributes"]]}).encode()
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    if not head:
                        self.wfile.write(body)
                    return None
                return self.send_error(404)

            def do_HEAD(self):
                self._resolve(True)

            def do_GET(self):
                self._resolve(False)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@pytest.fixture(scope="module")
def hub():
    h = Hub()
    yield h
    h.server.shutdown()


def _run(client, tag, env, models: Path | None = None, tmpfs: dict | None = None):
    kw = {"volumes": {str(models): {"bind": "/models", "mode": "rw"}}} if models else {}
    c = client.containers.run(tag, environment=env, network_mode="host", detach=True, tmpfs=tmpfs or {}, **kw)
    try:
        rc = c.wait(timeout=120)["StatusCode"]
        logs = c.logs(stdout=True, stderr=True).decode(errors="replace")
    finally:
        c.remove(force=True)
    return rc, logs


def _models(tmp_path) -> Path:
    d = tmp_path / "models"
    d.mkdir()
    os.chmod(d, 0o777)
    return d


def _env(hub, **kw):
    e = {"HF_ENDPOINT": f"http://127.0.0.1:{hub.port}", "TARGET_REPO": "fixture/model-GGUF",
         "TARGET_FILE": "model-Q4_K_M.gguf", "DRAFT_REPO": "fixture/draft"}
    e.update(kw)
    return {k: v for k, v in e.items() if v is not None}


def test_entrypoint_downloads_verifies_and_execs_the_server(built, client, hub, tmp_path):
    models = _models(tmp_path)
    rc, logs = _run(client, built["res"].tag, _env(hub, HF_TOKEN=RUN_TOKEN), models)
    assert rc == 0, logs
    # the draft reaches the server as a file inside the folder (upstream's resolve_draft order)
    assert "hello from cudaproj /models/target/model-Q4_K_M.gguf --draft /models/draft/model.safetensors " \
        "--host 0.0.0.0 --port 8080" in logs
    assert (models / "target" / "model-Q4_K_M.gguf").read_bytes() == GGUF
    assert (models / "draft" / "model.safetensors").read_bytes() == SAFETENSORS
    assert (models / "draft" / "config.json").is_file()
    assert not list(models.rglob("*.part*"))
    assert RUN_TOKEN not in logs and f"Bearer {RUN_TOKEN}" in hub.auth_seen
    # second start: everything present, nothing fetched again
    n = len(hub.auth_seen)
    rc, logs = _run(client, built["res"].tag, _env(hub, HF_TOKEN=RUN_TOKEN, HF_ENDPOINT="http://127.0.0.1:9"), models)
    assert rc == 0 and "present: /models/target/model-Q4_K_M.gguf" in logs, logs
    assert len(hub.auth_seen) == n


def test_entrypoint_gated_draft_without_token_is_a_clear_401(built, client, hub, tmp_path):
    rc, logs = _run(client, built["res"].tag, _env(hub), _models(tmp_path))
    assert rc == 3, logs
    assert "HTTP 401 for fixture/draft" in logs and "HF_TOKEN" in logs


def test_entrypoint_checksum_mismatch(built, client, hub, tmp_path):
    models = _models(tmp_path)
    rc, logs = _run(client, built["res"].tag, _env(hub, TARGET_REPO="fixture/badsum", DRAFT_REPO=""), models)
    assert rc == 5, logs
    assert "checksum mismatch for fixture/badsum/model-Q4_K_M.gguf" in logs
    assert not [p for p in models.rglob("*") if p.is_file()]  # nothing half-written is left


def test_entrypoint_safetensors_where_gguf_expected(built, client, hub, tmp_path):
    rc, logs = _run(client, built["res"].tag, _env(hub, TARGET_REPO="fixture/safet", DRAFT_REPO=""), _models(tmp_path))
    assert rc == 5, logs
    assert "invalid magic" in logs and "safetensors file, not GGUF" in logs


def test_entrypoint_disk_full(built, client, hub, tmp_path):
    rc, logs = _run(client, built["res"].tag, _env(hub, TARGET_REPO="fixture/huge", DRAFT_REPO=""), _models(tmp_path))
    assert rc == 4 and "disk full: fixture/huge/model-Q4_K_M.gguf needs 1000000000000000 bytes" in logs, logs
    # no size advertised: the write itself hits a 64 KiB tmpfs
    rc, logs = _run(client, built["res"].tag, _env(hub, TARGET_REPO="fixture/nolen", DRAFT_REPO=""),
                    tmpfs={"/models": "size=64k,uid=10001,gid=10001"})
    assert rc == 4 and "disk full while writing" in logs, logs


# ------------------------------------------------------------------ CLI paths that need no image
def test_preflight_refuses_a_build_known_to_fail(tmp_path, cli, client):
    fx = make_fixture.make(tmp_path)
    series = fx["tdir"] / "series"
    series.write_text("".join(l + "\n" for l in series.read_text().splitlines() if "libcore" not in l))
    r = cli("--workspace", fx["ws"], "build", "cudaproj", "--image", "--source", fx["upstream"], "--profile", "cpu",
            "--tag", "lucepatch-test/refused")
    assert r.code == 1
    assert "preflight: probe(s) f7-runpath failed" in r.err and "--no-preflight" in r.err
    assert not client.images.list(name="lucepatch-test/refused")


def test_docker_down_is_one_line_exit_3(cli, monkeypatch, tmp_path):
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-docker.sock")
    r = cli("inspect", "anything")
    assert r.code == 3
    assert len(r.err.strip().splitlines()) == 1 and "no Docker daemon answers" in r.err
    fx = make_fixture.make(tmp_path)
    r = cli("--workspace", fx["ws"], "build", "cudaproj", "--image", "--source", fx["upstream"], "--profile", "cpu")
    assert r.code == 3 and "no Docker daemon answers" in r.err


def test_dry_run_renders_without_docker(cli, monkeypatch, tmp_path):
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-docker.sock")
    r = cli("--workspace", REPO, "build", "lucebox", "--image", "--dry-run", "--profile", "sm120-cuda13-hami",
            "--tag", "registry.example/lucebox", "--json")
    assert r.code == 0, r.err
    doc = r.json["image"]
    assert doc["tag"] == "registry.example/lucebox:sm120-cuda13-hami-1.0.0"
    df = doc["files"]["Dockerfile"]
    assert "-DGGML_CUDA_NO_VMM=ON" in df and "ARG BUILDER_IMAGE=nvidia/cuda:13.0.0-devel-ubuntu22.04" in df
    assert "HF_TOKEN" not in df.split("# Secrets never")[1].split("\n", 1)[1]  # only the comment names it
    r = cli("--workspace", REPO, "build", "lucebox", "--image", "--tag", "repo:tag", "--dry-run")
    assert r.code == 2


PROFILES = ["sm120-cuda13", "sm120-cuda13-hami", "sm86"]


@pytest.mark.parametrize("profile", PROFILES + ["hami-core"])
def test_rendered_dockerfiles_are_current_and_lint_clean(profile, tmp_path):
    ws_target = "hami-core" if profile == "hami-core" else "lucebox"
    t = load_target_dir(REPO / "patches" / ws_target)
    _, files = img.render_profile(t, None if profile == "hami-core" else profile)
    docs = REPO / "docs" / "lucebox" / profile
    # label values follow the series (hashes, patch ids): the docs must match in everything else
    mask = lambda s: re.sub(r'(org\.[a-z.-]+)="[^"]*"', r'\1="…"', s)  # noqa: E731
    for name, text in files.items():
        (tmp_path / name).write_text(text)
        assert mask((docs / name).read_text()) == mask(text), f"docs/lucebox/{profile}/{name} is stale: re-render with " \
            f"lucepatch build {ws_target} --image --dry-run {'' if profile == 'hami-core' else '--profile ' + profile} --out {docs}"
    hadolint = needs.tool("hadolint")
    r = subprocess.run([hadolint, "--no-color", str(tmp_path / "Dockerfile")], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    if "entrypoint.sh" in files:
        r = subprocess.run(["sh", "-n", str(tmp_path / "entrypoint.sh")], capture_output=True, text=True)
        assert r.returncode == 0, r.stderr


def test_step_image_finds_the_compile_layer():
    log = ("[ 0.0s] Step 6/9 : COPY src/ /src/\n ---> Using cache\n ---> d576a2229504\n"
           "[ 1.0s] Step 7/9 : RUN cmake -S /src -B /build && cmake --build /build\n ---> Running in 41ef8f10e87d\n"
           "[1/2] cc -c a.c\nRemoving intermediate container 41ef8f10e87d\n ---> 3a6c2d4c2a7d\n"
           "[ 9.0s] Step 8/9 : COPY entrypoint.sh /out/bin/entrypoint.sh\n ---> 87f2ec364a1a\n")
    assert img.step_image(log, "cmake --build") == "3a6c2d4c2a7d"
    assert img.step_image(log, "no such step") is None
