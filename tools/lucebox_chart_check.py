"""The vendored Lucebox chart's server container, as far as a machine without Kubernetes can run it.

  python3 tools/lucebox_chart_check.py --entrypoint E (--server BIN --model GGUF | --stand-in) --out DIR [--json F]
      [--port 18080] [--uid 10001] [--max-ctx 512] [--timeout 180]

E is upstream's own server/scripts/entrypoint.sh (Luce-Org/lucebox at the line's base; the GPU step takes it
from the carried tree), BIN a dflash_server. The server container's environment is what
`render k8s lucebox-vendored` renders (model_cache_mount = DIR/server/models holding GGUF, no draft, no
download, dflash.DFLASH_MAX_CTX = --max-ctx); the image's own ENV (its Dockerfile: DFLASH_HOST,
DFLASH_SERVER_BIN) and its layout (DFLASH_DIR) are given as the image would. The entrypoint runs as --uid
when this runs as root (the pod's runAsUser; setpriv), else as the caller. Then GET /health on --port,
as the chart's startup and readiness probes do, until 200, the process exits, or --timeout.

The JSON: the rendered env, the server's command line as the entrypoint built it (/proc/PID/cmdline: the
entrypoint execs, so the PID is the server's), the uid, the server binary's sha256 and whether it is an
ELF (a stand-in script is not), /health's status, body and seconds, the log's tail. Exit 0 when /health
answered 200. --stand-in (how the GPU step is proven off the GPU, DRIVER=fake): a Python stand-in that
answers GET /health on its --port and a 4-byte model, written under --out; the JSON says server_is_elf false.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path


def server_env(models: Path, model_name: str, port: int, max_ctx: int) -> dict[str, str]:
    from lucepatch.k8s import manifests, values  # lazy: lucepatch from PYTHONPATH (the repo root), 120 ms

    vals = values.resolve("lucebox-vendored", {
        "port": port, "model_cache_mount": str(models), "model_target_file": model_name,
        "model_draft_repo": None, "model_draft_file": None, "model_download_init": False,
        "dflash": {"DFLASH_MAX_CTX": max_ctx}})
    objs = manifests.to_objects(manifests.render("lucebox-vendored", vals))
    dep = next(o for o in objs if o["kind"] == "Deployment")
    server = next(c for c in dep["spec"]["template"]["spec"]["containers"] if c["name"] == "server")
    return {e["name"]: e["value"] for e in server["env"] if "value" in e}


STAND_IN = """#!/usr/bin/env python3
# a stand-in for dflash_server (tools/lucebox_chart_check.py --stand-in): GET /health -> 200 on its --port
import http.server, sys
port = int(sys.argv[sys.argv.index("--port") + 1])
print("stand-in dflash_server", *sys.argv[1:], flush=True)
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if self.path == "/health" else 404)
        self.end_headers()
        self.wfile.write(b'{"status":"stand-in"}')
    def log_message(self, *a):
        pass
http.server.HTTPServer(("0.0.0.0", port), H).serve_forever()
"""


def stand_in(out: Path) -> tuple[Path, Path]:
    out.mkdir(parents=True, exist_ok=True)
    out.chmod(0o755)  # the uid the entrypoint runs as reads it
    server, model = out / "stand-in-dflash_server", out / "stand-in.gguf"
    server.write_text(STAND_IN)
    server.chmod(0o755)
    model.write_bytes(b"GGUF")
    model.chmod(0o644)
    return server, model


def health(port: int) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
            return r.status, r.read(400).decode(errors="replace")
    except urllib.error.HTTPError as e:
        return e.code, e.read(400).decode(errors="replace")
    except (urllib.error.URLError, OSError):
        return 0, ""


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--entrypoint", type=Path, required=True)
    ap.add_argument("--server", type=Path)
    ap.add_argument("--model", type=Path)
    ap.add_argument("--stand-in", action="store_true")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--port", type=int, default=18080)
    ap.add_argument("--uid", type=int, default=10001)
    ap.add_argument("--max-ctx", type=int, default=512)
    ap.add_argument("--timeout", type=float, default=180.0)
    a = ap.parse_args(argv)
    if a.stand_in == bool(a.server or a.model) or (not a.stand_in and not (a.server and a.model)):
        ap.error("give --server and --model, or --stand-in")
    if a.stand_in:
        standin_dir = Path(tempfile.mkdtemp(prefix="lbv-chart-standin-"))
        a.server, a.model = stand_in(standin_dir)
    for p in (a.entrypoint, a.server, a.model):
        if not p.is_file():
            print(f"lucebox_chart_check: {p} is not a file", file=sys.stderr)
            return 2
    # the image's layout: $DFLASH_DIR/{models,scripts}, the model linked in; in /tmp, where the uid can reach
    # it whatever the folders above --out allow
    a.out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="lbv-chart-"))
    models = work / "server" / "models"
    models.mkdir(parents=True)
    (models / a.model.name).symlink_to(a.model.resolve())
    script = work / "server" / "scripts" / "entrypoint.sh"
    script.parent.mkdir()
    shutil.copyfile(a.entrypoint, script)
    for d in (work, work / "server", models, script.parent):
        d.chmod(0o755)
    script.chmod(0o755)
    env = server_env(models, a.model.name, a.port, a.max_ctx)
    image_env = {"DFLASH_DIR": str(work / "server"), "DFLASH_HOST": "0.0.0.0",
                 "DFLASH_SERVER_BIN": str(a.server.resolve())}
    run_env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": "/", **image_env, **env}
    cmd = ["bash", str(script)]
    uid = os.getuid()
    if uid == 0 and shutil.which("setpriv"):
        cmd = ["setpriv", f"--reuid={a.uid}", f"--regid={a.uid}", "--clear-groups", *cmd]
        uid = a.uid
    log_path = a.out / "server.log"
    t0 = time.monotonic()
    with open(log_path, "w") as log:
        proc = subprocess.Popen(cmd, env=run_env, stdout=log, stderr=subprocess.STDOUT, cwd="/")
    status, body, argv_seen = 0, "", []
    while time.monotonic() - t0 < a.timeout and proc.poll() is None:
        if not argv_seen:
            try:
                argv_seen = Path(f"/proc/{proc.pid}/cmdline").read_bytes().decode(errors="replace").split("\0")[:-1]
                if argv_seen and Path(argv_seen[0]).name in ("bash", "setpriv"):
                    argv_seen = []  # the entrypoint has not exec'd the server yet
            except OSError:
                pass
        status, body = health(a.port)
        if status == 200:
            break
        time.sleep(0.5)
    seconds = round(time.monotonic() - t0, 1)
    rc = proc.poll()
    if rc is None:
        proc.send_signal(signal.SIGTERM)
        try:
            rc = proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            rc = proc.wait()
    data = a.server.read_bytes()
    if a.stand_in:
        shutil.rmtree(standin_dir, ignore_errors=True)
    doc = {"schema_version": 1, "entrypoint": str(a.entrypoint), "entrypoint_sha256": hashlib.sha256(
               a.entrypoint.read_bytes()).hexdigest(),
           "server": str(a.server), "server_sha256": hashlib.sha256(data).hexdigest(), "server_is_elf": data[:4] == b"\x7fELF",
           "uid": uid, "rendered_env": env, "image_env": image_env, "server_argv": argv_seen,
           "health": {"path": "/health", "port": a.port, "status": status, "body": body[:400], "seconds": seconds},
           "returncode_after_stop": rc,
           "log_tail": log_path.read_text(errors="replace").splitlines()[-25:]}
    text = json.dumps(doc, indent=1)
    if a.json:
        a.json.write_text(text + "\n")
    shutil.rmtree(work, ignore_errors=True)
    verdict = "answered 200" if status == 200 else f"did not answer 200 (last status {status or 'no connection'})"
    print(f"/health on :{a.port} {verdict} after {seconds} s; server {'ELF' if doc['server_is_elf'] else 'stand-in'} "
          f"as uid {uid}; argv: {' '.join(argv_seen) or '(not seen)'}")
    return 0 if status == 200 else 1


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
