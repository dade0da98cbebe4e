"""Lucebox as a node runs it: the rendered manifest's env and init containers, run for real with the
image's rendered entrypoint against a stand-in server and an HF-like server on 127.0.0.1.

- the port of `render k8s lucebox --set port=9000` reaches the server (the PORT the entrypoint reads);
- a root-owned hostPath (DirectoryOrCreate makes it root 0755) becomes writable for the image's user
  (uid 10001) through the manifest's `prepare-cache` init step, run here as root on a real directory;
- retries within one start resume from where they stopped: a dropped connection (curl 18) and a
  stalled transfer (curl 28) both continue from the bytes the .part file holds;
- the progress loop leaves no process behind (its `sleep` used to outlive the download).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import struct
import subprocess
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

import needs
from lucepatch.builders import image as img
from lucepatch.k8s import manifests, values
from lucepatch.target import load_target_dir

pytest.importorskip("yaml")

REPO = Path(__file__).resolve().parent.parent
GGUF = b"GGUF" + struct.pack("<I", 3) + b"\0" * 4088
PROFILE = "sm120-cuda13"


@pytest.fixture(scope="module")
def lucebox():
    return load_target_dir(REPO / "patches" / "lucebox")


@pytest.fixture(scope="module")
def rendered(lucebox):
    """The lucebox image's entrypoint and the image ENV it runs under (what the Dockerfile sets)."""
    prof, files = img.render_profile(lucebox, PROFILE)
    v = img.template_vars(lucebox, prof, labels={})
    image_env = {"MODEL_DIR": v["model_dir"], "HF_ENDPOINT": "https://huggingface.co",
                 "TARGET_REPO": v["model"]["target_repo"], "TARGET_FILE": v["model"]["target_file"],
                 "DRAFT_REPO": v["model"]["draft_repo"], "SERVER_BIN": f"/app/bin/{v['binaries'][0]}",
                 "PORT": str(v["port"])}
    assert f"PORT={v['port']}" in files["Dockerfile"]  # the image's own default, which the manifest must override
    return {"entrypoint": files["entrypoint.sh"], "image_env": image_env, "uid": v["uid"]}


def _world_dir() -> Path:
    """A folder every uid can traverse (pytest's tmp_path is root 0700)."""
    d = Path(tempfile.mkdtemp(prefix="lp-lucebox-", dir="/tmp"))
    d.chmod(0o755)
    return d


def _scripts(root: Path, rendered) -> tuple[Path, Path]:
    ep = root / "entrypoint.sh"
    ep.write_text(rendered["entrypoint"])
    server = root / "dflash_server"
    server.write_text('#!/bin/sh\nprintf "%s\\n" "$@" > "$ARGS_OUT"\n')
    for p in (ep, server):
        p.chmod(0o755)
    return ep, server


def _container(objs, name):
    dep = next(o for o in objs if o["kind"] == "Deployment")
    spec = dep["spec"]["template"]["spec"]
    return next(c for c in spec.get("initContainers", []) + spec["containers"] if c["name"] == name)


def _plain_env(container) -> dict[str, str]:
    return {e["name"]: e["value"] for e in container.get("env", []) if "value" in e}


def _objects(**overrides):
    vals = values.resolve("lucebox", overrides)
    return manifests.to_objects(manifests.render("lucebox", vals))


class Hub:
    """/<repo>/resolve/main/<file> for one GGUF body. `first` says what the first GET does:
    "ok", "drop" (sends half of a full Content-Length, then closes: curl 18) or "stall" (half,
    then silence: curl's speed limit, 28). Later GETs honour Range (206)."""

    def __init__(self, body: bytes, first: str = "ok"):
        self.body, self.first, self.gets, self.ranges = body, first, 0, []
        hub = self

        class H(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_HEAD(self):
                self.send_response(200)
                self.send_header("Content-Length", str(len(hub.body)))
                self.send_header("X-Linked-Size", str(len(hub.body)))
                self.send_header("X-Linked-Etag", f'"{hashlib.sha256(hub.body).hexdigest()}"')
                self.end_headers()

            def do_GET(self):
                hub.gets += 1
                rng = self.headers.get("Range")
                hub.ranges.append(rng)
                start = int(rng.split("=")[1].split("-")[0]) if rng else 0
                if hub.gets == 1 and hub.first in ("drop", "stall"):
                    self.send_response(200)
                    self.send_header("Content-Length", str(len(hub.body)))
                    self.end_headers()
                    self.wfile.write(hub.body[: len(hub.body) // 2])
                    self.wfile.flush()
                    if hub.first == "stall":
                        time.sleep(20)
                    return  # HTTP/1.0: the connection closes short of Content-Length
                self.send_response(206 if start else 200)
                self.send_header("Content-Length", str(len(hub.body) - start))
                if start:
                    self.send_header("Content-Range", f"bytes {start}-{len(hub.body) - 1}/{len(hub.body)}")
                self.end_headers()
                self.wfile.write(hub.body[start:])

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()


def _run(ep: Path, env: dict, *, as_uid: int | None = None, session: bool = False, timeout=120):
    cmd = ["sh", str(ep)]
    if as_uid is not None:
        cmd = [needs.tool("setpriv"), f"--reuid={as_uid}", f"--regid={as_uid}", "--clear-groups", *cmd]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout,
                          start_new_session=session)


def _download_env(rendered, models: Path, hub: Hub, **extra) -> dict:
    env = {"PATH": os.environ["PATH"], **rendered["image_env"], "MODEL_DIR": str(models),
           "HF_ENDPOINT": hub.url, "TARGET_REPO": "fixture/model-GGUF", "TARGET_FILE": "model.gguf",
           "DRAFT_REPO": "", "DOWNLOAD_ONLY": "1", "DOWNLOAD_RETRY_DELAY": "0"}
    env.update(extra)
    return {k: v for k, v in env.items() if v != ""}


# ------------------------------------------------------------------ the port reaches the server
def test_port_value_reaches_the_server(rendered, tmp_path):
    objs = _objects(port=9000)
    server_c = _container(objs, "server")
    assert server_c["ports"][0]["containerPort"] == 9000
    svc = next(o for o in objs if o["kind"] == "Service")
    assert svc["spec"]["ports"][0]["port"] == 9000 and svc["spec"]["ports"][0]["targetPort"] == "http"
    ep, server = _scripts(tmp_path, rendered)
    models = tmp_path / "models"
    (models / "target").mkdir(parents=True)
    (models / "target" / rendered["image_env"]["TARGET_FILE"]).write_bytes(GGUF)
    # what the container runs with: the image's ENV, then the manifest's env over it
    env = {"PATH": os.environ["PATH"], **rendered["image_env"], **_plain_env(server_c),
           "MODEL_DIR": str(models), "SERVER_BIN": str(server), "ARGS_OUT": str(tmp_path / "args"),
           "SKIP_DOWNLOAD": "1", "DRAFT_REPO": ""}
    r = _run(ep, env)
    assert r.returncode == 0, r.stderr
    args = (tmp_path / "args").read_text().split()
    assert args[args.index("--port") + 1] == "9000", args
    assert "on 0.0.0.0:9000" in r.stderr


# ------------------------------------------------------------------ a fresh volume is writable
def test_security_context_matches_the_image_user(rendered):
    for case in ({}, {"model_cache_pvc": False}):
        pod = next(o for o in _objects(**case) if o["kind"] == "Deployment")["spec"]["template"]["spec"]
        sc = pod["securityContext"]
        assert sc["runAsUser"] == sc["runAsGroup"] == sc["fsGroup"] == rendered["uid"] == 10001
        assert sc["fsGroupChangePolicy"] == "OnRootMismatch" and sc["runAsNonRoot"] is True
        assert "prepare-cache" not in [c["name"] for c in pod.get("initContainers", [])]


@pytest.mark.needs("curl")
def test_root_owned_host_path_becomes_writable_for_uid_10001(rendered):
    if os.geteuid() != 0:
        needs.unavailable("no-tool:", "root (the test chowns a real root-owned folder and runs as uid 10001)")
    root = _world_dir()
    hub = Hub(GGUF + os.urandom(200_000))
    try:
        ep, _ = _scripts(root, rendered)
        host = root / "lucebox-models"
        host.mkdir(mode=0o755)  # what kubelet's DirectoryOrCreate leaves: root:root 0755
        os.chown(host, 0, 0)
        objs = _objects(model_cache_host_path=str(host))
        vol = next(o for o in objs if o["kind"] == "Deployment")["spec"]["template"]["spec"]["volumes"][0]
        assert vol["hostPath"] == {"path": str(host), "type": "DirectoryOrCreate"}
        env = _download_env(rendered, host, hub)
        # without the init step the image's user cannot write there (what the issue reproduced)
        r = _run(ep, env, as_uid=rendered["uid"])
        assert r.returncode == 2 and "is the volume writable by uid 10001" in r.stderr, r.stderr
        prep = _container(objs, "prepare-cache")
        assert prep["securityContext"]["runAsUser"] == 0
        assert prep["volumeMounts"] == _container(objs, "server")["volumeMounts"]
        penv = {**_plain_env(prep), "PATH": os.environ["PATH"]}
        assert penv["CACHE_DIR"] == prep["volumeMounts"][0]["mountPath"]
        penv["CACHE_DIR"] = str(host)  # the mount, as the kubelet would bind it
        # a file a root process left in the folder earlier is handed over too
        (host / "target").mkdir()
        os.chown(host / "target", 0, 0)
        p = subprocess.run(prep["command"], env=penv, capture_output=True, text=True, timeout=60)
        assert p.returncode == 0, p.stderr
        assert (host.stat().st_uid, (host / "target").stat().st_uid) == (10001, 10001)
        r = _run(ep, env, as_uid=rendered["uid"])
        assert r.returncode == 0, r.stderr
        got = host / "target" / "model.gguf"
        assert got.read_bytes() == hub.body and got.stat().st_uid == 10001
        # idempotent on the next pod start
        assert subprocess.run(prep["command"], env=penv, capture_output=True, timeout=60).returncode == 0
    finally:
        hub.close()
        shutil.rmtree(root, ignore_errors=True)


# ------------------------------------------------------------------ retries resume within one start
@pytest.mark.needs("curl")
@pytest.mark.parametrize("first", ["drop", "stall"])
def test_retry_within_one_start_resumes_from_the_current_offset(rendered, tmp_path, first):
    body = GGUF + os.urandom(400_000)
    hub = Hub(body, first=first)
    try:
        ep, _ = _scripts(tmp_path, rendered)
        models = tmp_path / "models"
        models.mkdir()
        r = _run(ep, _download_env(rendered, models, hub, STALL_SECONDS="2", DOWNLOAD_RETRIES="2"))
        assert r.returncode == 0, r.stderr
        assert (models / "target" / "model.gguf").read_bytes() == body
        half = len(body) // 2
        # one start, two requests: the second asks for the bytes after the half the first delivered
        assert hub.ranges == [None, f"bytes={half}-"], (hub.ranges, r.stderr)
        rc = "18" if first == "drop" else "28"
        assert f"interrupted (curl {rc}) at {half} bytes; retry 1/2 resumes there" in r.stderr
    finally:
        hub.close()


@pytest.mark.needs("curl")
def test_retries_exhausted_keep_the_part_to_resume(rendered, tmp_path):
    body = GGUF + os.urandom(100_000)
    hub = Hub(body, first="drop")
    try:
        ep, _ = _scripts(tmp_path, rendered)
        models = tmp_path / "models"
        models.mkdir()
        r = _run(ep, _download_env(rendered, models, hub, DOWNLOAD_RETRIES="0"))
        assert r.returncode == 6 and "curl 18" in r.stderr and "kept" in r.stderr, r.stderr
        assert (models / "target" / "model.gguf.part").stat().st_size == len(body) // 2
    finally:
        hub.close()


# ------------------------------------------------------------------ no orphaned sleep
def _session_members(sid: int) -> list[str]:
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        if int(fields[3]) == sid:  # field 6 of /proc/PID/stat: the session id
            out.append(f"{d.name} {stat[stat.index('(') + 1:stat.rindex(')')]}")
    return out


@pytest.mark.needs("curl")
def test_progress_loop_leaves_no_process_behind(rendered, tmp_path):
    hub = Hub(GGUF + os.urandom(100_000))
    try:
        ep, _ = _scripts(tmp_path, rendered)
        models = tmp_path / "models"
        models.mkdir()
        env = _download_env(rendered, models, hub, PROGRESS_SECONDS="30")
        proc = subprocess.Popen(["sh", str(ep)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                start_new_session=True, text=True)
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
        time.sleep(0.3)
        left = _session_members(proc.pid)
        for line in left:  # do not leave them running on the machine either
            subprocess.run(["kill", line.split()[0]], check=False)
        assert left == [], f"processes of the entrypoint's session still running: {left}"
    finally:
        hub.close()
