"""Start a built dflash_server on a model, wait for /health, send one chat request, stop it; and check
that test_dflash starts (loads its libraries and answers with its usage). One JSON document of what
happened, every line of both programs' output kept beside it.

  python3 tools/lucebox_serve_check.py --bin DIR --model M.gguf --out DIR [--port 18080] [--timeout 180]

DIR holds dflash_server and test_dflash as the build left them (their RUNPATH finds ggml). The server is
started as `dflash_server MODEL --port P --host 127.0.0.1 --max-ctx 512`; /health is polled every 0.5 s
until it answers 200 or the server exits or the timeout passes; then POST /v1/chat/completions with one
user message and max_tokens 8. Exit 0 when /health answered and the request got a 200 with a choice;
1 when the server refused the model or the request failed (the server's own first error lines are in
the JSON: what a clear refusal looks like); 3 when a binary is missing.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path


def _get(url: str, timeout: float = 2.0) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, r.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode("utf-8", "replace")
    except (urllib.error.URLError, OSError) as exc:
        return 0, str(exc)


def _post(url: str, body: dict, timeout: float = 120.0) -> tuple[int, str, float]:
    t0 = time.monotonic()
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read().decode("utf-8", "replace"), time.monotonic() - t0
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode("utf-8", "replace"), time.monotonic() - t0
    except (urllib.error.URLError, OSError) as exc:
        return 0, str(exc), time.monotonic() - t0


def _errors(text: str, n: int = 8) -> list[str]:
    keys = ("error", "fail", "invalid", "missing", "unsupported", "refus", "abort", "assert")
    return [ln for ln in text.splitlines() if any(k in ln.lower() for k in keys)][:n]


def test_dflash_starts(binary: Path, out: Path) -> dict:
    """test_dflash with no arguments: it must load (every library resolves) and print its usage (exit 2)."""
    r = subprocess.run([str(binary)], capture_output=True, text=True, timeout=60)
    (out / "test_dflash.start.log").write_text(r.stdout + r.stderr)
    loaded = "usage:" in (r.stdout + r.stderr)
    return {"binary": str(binary), "rc": r.returncode, "started": loaded,
            "first_lines": (r.stdout + r.stderr).strip().splitlines()[:3]}


def serve(binary: Path, model: Path, out: Path, port: int, timeout: float) -> dict:
    log = open(out / "dflash_server.log", "w")
    cmd = [str(binary), str(model), "--port", str(port), "--host", "127.0.0.1", "--max-ctx", "512"]
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    doc: dict = {"command": cmd, "health": None, "request": None}
    try:
        while time.monotonic() - t0 < timeout:
            if proc.poll() is not None:
                break
            code, body = _get(f"http://127.0.0.1:{port}/health")
            if code == 200:
                doc["health"] = {"status": code, "body": body[:400], "after_s": round(time.monotonic() - t0, 2)}
                break
            time.sleep(0.5)
        if doc["health"]:
            body = {"model": "tiny", "messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 8,
                    "temperature": 0, "stream": False}
            code, text, secs = _post(f"http://127.0.0.1:{port}/v1/chat/completions", body)
            try:
                answer = json.loads(text)
            except ValueError:
                answer = None
            doc["request"] = {"status": code, "seconds": round(secs, 2), "body": text[:2000],
                              "choices": len((answer or {}).get("choices") or []) if isinstance(answer, dict) else 0}
    finally:
        doc["exited_early"] = proc.poll() is not None
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        doc["rc"] = proc.returncode
        log.close()
    text = (out / "dflash_server.log").read_text(errors="replace")
    doc["server_errors"] = _errors(text)
    doc["server_log_tail"] = text.strip().splitlines()[-15:]
    return doc


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bin", type=Path, required=True)
    ap.add_argument("--model", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--port", type=int, default=18080)
    ap.add_argument("--timeout", type=float, default=180.0)
    a = ap.parse_args(argv)
    a.out.mkdir(parents=True, exist_ok=True)
    server, daemon = a.bin / "dflash_server", a.bin / "test_dflash"
    missing = [str(p) for p in (server, daemon) if not os.access(p, os.X_OK)]
    if missing:
        print(f"lucebox_serve_check: not built: {', '.join(missing)}", file=sys.stderr)
        return 3
    doc = {"test_dflash": test_dflash_starts(daemon, a.out), "dflash_server": serve(server, a.model, a.out, a.port, a.timeout)}
    s = doc["dflash_server"]
    ok = bool(s["health"]) and bool(s["request"]) and s["request"]["status"] == 200 and s["request"]["choices"] > 0
    doc["verdict"] = ("answered" if ok else "health only" if s["health"] else "refused or failed before /health")
    (a.out / "serve-check.json").write_text(json.dumps(doc, indent=1) + "\n")
    print(json.dumps({k: doc[k] for k in ("verdict",)} | {"health": s["health"], "request": s["request"],
                                                            "server_errors": s["server_errors"]}, indent=1))
    return 0 if ok and doc["test_dflash"]["started"] else 1


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
