"""The rendered image entrypoint, run here with sh against fixture model folders, a stand-in
server that records its arguments, and an HF-like server on 127.0.0.1 that can stall mid-file.

The draft must reach the server as a file found the way upstream's server/scripts/run.py
resolve_draft does (dflash-draft-*.gguf, then *.gguf, then model.safetensors; recursive; sorted).
"""

from __future__ import annotations

import hashlib
import os
import struct
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from lucepatch.builders import image as img
from lucepatch.target import load_target_dir

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests" / "fixtures" / "cudaproj"))
import make_fixture  # noqa: E402

GGUF = b"GGUF" + struct.pack("<I", 3) + b"\0" * 4088


@pytest.fixture(scope="module")
def entry(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ep")
    fx = make_fixture.make(tmp)
    _, files = img.render_profile(load_target_dir(fx["tdir"]), "cpu")
    ep = tmp / "entrypoint.sh"
    ep.write_text(files["entrypoint.sh"])
    server = tmp / "server"
    server.write_text('#!/bin/sh\nprintf "%s\\n" "$@" > "$ARGS_OUT"\n')
    os.chmod(server, 0o755)
    return {"ep": ep, "server": server}


def _run(entry, models: Path, tmp: Path, **env):
    out = tmp / "args.txt"
    e = {"PATH": os.environ["PATH"], "MODEL_DIR": str(models), "SERVER_BIN": str(entry["server"]),
         "ARGS_OUT": str(out), "TARGET_REPO": "fixture/model-GGUF", "TARGET_FILE": "model.gguf",
         "DRAFT_REPO": "fixture/draft", "PORT": "8080", "HF_ENDPOINT": "http://127.0.0.1:9"}
    e.update({k: v for k, v in env.items() if v is not None})
    e = {k: v for k, v in e.items() if v != ""}
    r = subprocess.run(["sh", str(entry["ep"])], env=e, capture_output=True, text=True, timeout=120)
    args = out.read_text().splitlines() if out.is_file() else None
    return r, args


def _layout(root: Path, files: list[str]) -> Path:
    models = root / "models"
    (models / "target").mkdir(parents=True)
    (models / "target" / "model.gguf").write_bytes(GGUF)
    for f in files:
        p = models / "draft" / f
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(b"x")
    return models


def _python_resolve(d: Path) -> str | None:
    """upstream's resolve_draft (server/scripts/run.py), the reference the entrypoint follows."""
    for pattern in ("dflash-draft-*.gguf", "*.gguf", "model.safetensors"):
        for draft in sorted(d.rglob(pattern)):
            return str(draft)
    return None


LAYOUTS = {
    "dflash-first": (["model.safetensors", "a.gguf", "dflash-draft-3.6-q4_k_m.gguf", "config.json"],
                     "dflash-draft-3.6-q4_k_m.gguf"),
    "any-gguf-recursive": (["model.safetensors", "q8/zz.gguf", "q4/b.gguf"], "q4/b.gguf"),
    "components-sort": (["a-c/x.gguf", "a/b/y.gguf"], "a/b/y.gguf"),  # '/' before '-', as Path sorts
    "safetensors-repo": (["config.json", "model.safetensors"], "model.safetensors"),
    "nested-dflash": (["x.gguf", "sub/dflash-draft-q8.gguf"], "sub/dflash-draft-q8.gguf"),
}


@pytest.mark.parametrize("name", sorted(LAYOUTS))
def test_draft_file_resolved_like_upstream(entry, tmp_path, name):
    files, want = LAYOUTS[name]
    models = _layout(tmp_path, files)
    assert _python_resolve(models / "draft") == str(models / "draft" / want)
    r, args = _run(entry, models, tmp_path, SKIP_DOWNLOAD="1")
    assert r.returncode == 0, r.stderr
    assert args == [str(models / "target" / "model.gguf"), "--draft", str(models / "draft" / want),
                    "--host", "0.0.0.0", "--port", "8080"]


def test_no_draft_file_is_a_clear_error_before_the_server(entry, tmp_path):
    models = _layout(tmp_path, ["config.json", "README.md"])
    r, args = _run(entry, models, tmp_path, SKIP_DOWNLOAD="1")
    assert r.returncode == 2 and args is None
    assert "no DFlash draft under" in r.stderr and "dflash-draft-*.gguf" in r.stderr


def test_draft_file_override_and_port(entry, tmp_path):
    models = _layout(tmp_path, ["dflash-draft-a.gguf", "mine/other.gguf"])
    r, args = _run(entry, models, tmp_path, SKIP_DOWNLOAD="1", DRAFT_FILE="mine/other.gguf", PORT="9000")
    assert r.returncode == 0, r.stderr
    assert args[1:3] == ["--draft", str(models / "draft" / "mine" / "other.gguf")] and args[-1] == "9000"


def test_no_draft_repo_and_no_folder_runs_without_draft(entry, tmp_path):
    models = _layout(tmp_path, [])
    r, args = _run(entry, models, tmp_path, SKIP_DOWNLOAD="1", DRAFT_REPO="")
    assert r.returncode == 0, r.stderr
    assert "--draft" not in args


# ------------------------------------------------------------------ resumable downloads
class StallingHub:
    """/fixture/model-GGUF/resolve/main/model.gguf: the first GET sends half, then stalls; later
    GETs honour Range (206) — what a flaky CDN does."""

    def __init__(self, body: bytes):
        self.body, self.gets, self.ranges = body, 0, []
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
                if hub.gets == 1:
                    self.send_response(200)
                    self.send_header("Content-Length", str(len(hub.body)))
                    self.end_headers()
                    self.wfile.write(hub.body[: len(hub.body) // 2])
                    self.wfile.flush()
                    time.sleep(30)  # stall: the client must give up on its own (curl: ~5 s speed window + STALL_SECONDS)
                    return
                self.send_response(206 if start else 200)
                self.send_header("Content-Length", str(len(hub.body) - start))
                if start:
                    self.send_header("Content-Range", f"bytes {start}-{len(hub.body) - 1}/{len(hub.body)}")
                self.end_headers()
                self.wfile.write(hub.body[start:])

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@pytest.mark.needs("curl")
def test_download_stalls_keeps_part_then_resumes(entry, tmp_path):
    body = GGUF + os.urandom(600_000)
    hub = StallingHub(body)
    try:
        models = tmp_path / "models"
        models.mkdir()
        env = {"HF_ENDPOINT": f"http://127.0.0.1:{hub.port}", "DRAFT_REPO": "", "STALL_SECONDS": "2",
               "PROGRESS_SECONDS": "1", "DOWNLOAD_ONLY": "1"}
        r, _ = _run(entry, models, tmp_path, **env, DOWNLOAD_RETRIES="0")
        part = models / "target" / "model.gguf.part"
        assert r.returncode == 6 and "stalled" in r.stderr and "resume" in r.stderr, r.stderr
        assert part.is_file() and 0 < part.stat().st_size < len(body)
        assert "progress: model.gguf" in r.stderr
        kept = part.stat().st_size
        r, _ = _run(entry, models, tmp_path, **env)
        assert r.returncode == 0, r.stderr
        assert f"resuming fixture/model-GGUF/model.gguf at byte {kept}" in r.stderr
        assert hub.ranges[-1] == f"bytes={kept}-"
        assert (models / "target" / "model.gguf").read_bytes() == body and not part.exists()
        assert "download complete" in r.stderr
    finally:
        hub.server.shutdown()
