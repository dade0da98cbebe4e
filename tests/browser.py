"""A headless Chromium driven over the DevTools protocol through a pipe (--remote-debugging-pipe:
JSON messages separated by NUL on fds 3 and 4), so it needs no port, no websocket library and no
network: as root it runs in a network namespace of its own (`unshare -n`, not even loopback is up)
with the DevTools offline emulation on top. Debian's chromium (apt-get install chromium).

    with Chromium() as b:
        page = b.open(Path("page.html"), width=1024)
        page.evaluate("document.title"); page.screenshot(); page.requests
"""

from __future__ import annotations

import base64
import json
import os
import select
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

FLAGS = ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic",
         "--disable-default-apps", "--disable-extensions", "--mute-audio", "--no-default-browser-check",
         "--remote-debugging-pipe"]


class BrowserError(RuntimeError):
    pass


def executable() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


def private_netns_available() -> bool:
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        return False
    return subprocess.run(["unshare", "-n", "true"], capture_output=True).returncode == 0


class Page:
    def __init__(self, browser: "Chromium", session: str):
        self.b, self.session = browser, session
        self.requests: list[dict] = []  # Network.requestWillBeSent params, in order

    def send(self, method: str, params: dict | None = None, timeout: float = 60) -> dict:
        return self.b.send(method, params, session=self.session, timeout=timeout)

    def evaluate(self, expression: str):
        res = self.send("Runtime.evaluate", {"expression": expression, "returnByValue": True, "awaitPromise": True})
        if "exceptionDetails" in res:
            raise BrowserError(f"page script failed: {res['exceptionDetails'].get('text')} "
                               f"{res['exceptionDetails'].get('exception', {}).get('description', '')}")
        return res["result"].get("value")

    def screenshot(self) -> bytes:
        """The whole page (not only the viewport) as PNG."""
        m = self.send("Page.getLayoutMetrics")
        size = m.get("cssContentSize") or m["contentSize"]
        clip = {"x": 0, "y": 0, "width": size["width"], "height": size["height"], "scale": 1}
        data = self.send("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True, "clip": clip})
        return base64.b64decode(data["data"])


class Chromium:
    def __init__(self, exe: str | None = None, netns: bool | None = None, timeout: float = 90):
        self.exe = exe or executable()
        if not self.exe:
            raise BrowserError("chromium not found (apt-get install chromium)")
        self.netns = private_netns_available() if netns is None else netns
        self.timeout = timeout
        self._id = 0
        self._buf = b""
        self._events: list[dict] = []
        self.proc: subprocess.Popen | None = None

    # -- process ----------------------------------------------------------------------------------
    def __enter__(self) -> "Chromium":
        self._profile = tempfile.mkdtemp(prefix="lucepatch-chromium-")
        to_chrome_r, self._w = os.pipe()
        self._r, from_chrome_w = os.pipe()

        def fds():  # the child's fd 3 reads our commands, fd 4 carries its answers
            a, b = os.dup(to_chrome_r), os.dup(from_chrome_w)
            os.dup2(a, 3)
            os.dup2(b, 4)

        cmd = [self.exe, *FLAGS, f"--user-data-dir={self._profile}", "about:blank"]
        if self.netns:
            cmd = ["unshare", "-n", "--", *cmd]
        self._log = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=self._log, stderr=self._log,
                                     preexec_fn=fds, pass_fds=(3, 4), start_new_session=True)
        os.close(to_chrome_r)
        os.close(from_chrome_w)
        self.send("Target.getTargets")  # first answer: the browser is up
        return self

    def __exit__(self, *exc) -> None:
        try:
            if self.proc and self.proc.poll() is None:
                try:
                    self.send("Browser.close", timeout=10)
                except BrowserError:
                    pass
                try:
                    self.proc.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    os.killpg(self.proc.pid, 9)
                    self.proc.wait(timeout=15)
        finally:
            for fd in (self._w, self._r):
                try:
                    os.close(fd)
                except OSError:
                    pass
            self._log.close()
            shutil.rmtree(self._profile, ignore_errors=True)

    def log_tail(self) -> str:
        self._log.seek(0)
        return self._log.read().decode(errors="replace")[-2000:]

    # -- protocol ---------------------------------------------------------------------------------
    def _read(self, deadline: float) -> dict:
        while b"\0" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise BrowserError(f"no answer from chromium in time; its log: {self.log_tail()}")
            ready, _, _ = select.select([self._r], [], [], left)
            if ready:
                chunk = os.read(self._r, 1 << 20)
                if not chunk:
                    raise BrowserError(f"chromium closed the pipe; its log: {self.log_tail()}")
                self._buf += chunk
        msg, self._buf = self._buf.split(b"\0", 1)
        return json.loads(msg)

    def send(self, method: str, params: dict | None = None, *, session: str | None = None,
             timeout: float | None = None) -> dict:
        self._id += 1
        msg = {"id": self._id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        os.write(self._w, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + (timeout or self.timeout)
        while True:
            m = self._read(deadline)
            if m.get("id") == self._id:
                if "error" in m:
                    raise BrowserError(f"{method}: {m['error']}")
                return m.get("result", {})
            if "method" in m:
                self._events.append(m)

    def wait_event(self, method: str, session: str, timeout: float | None = None) -> dict:
        deadline = time.monotonic() + (timeout or self.timeout)
        while True:
            for i, e in enumerate(self._events):
                if e["method"] == method and e.get("sessionId") == session:
                    return self._events.pop(i)
            m = self._read(deadline)
            if "method" in m:
                self._events.append(m)

    def open(self, path: Path, *, width: int = 1024, height: int = 800) -> Page:
        """Load a local file at a fixed viewport, offline; every request the page makes is recorded."""
        target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        page = Page(self, session)
        for method, params in (("Page.enable", {}), ("Network.enable", {}), ("Runtime.enable", {}),
                               ("Network.emulateNetworkConditions", {"offline": True, "latency": 0,
                                                                     "downloadThroughput": -1, "uploadThroughput": -1}),
                               ("Emulation.setDeviceMetricsOverride", {"width": width, "height": height,
                                                                       "deviceScaleFactor": 1, "mobile": False})):
            page.send(method, params)
        self._events = [e for e in self._events if e.get("sessionId") != session]
        page.send("Page.navigate", {"url": Path(path).resolve().as_uri()})
        self.wait_event("Page.loadEventFired", session)
        page.evaluate("new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))")
        page.requests = [e["params"] for e in self._events
                         if e["method"] == "Network.requestWillBeSent" and e.get("sessionId") == session]
        return page


def png_rgb(data: bytes, max_rows: int | None = None) -> tuple[int, int, list[bytes]]:
    """Decode an 8-bit RGB/RGBA PNG (what Chromium's screenshots are) into rows of RGB bytes; only the
    first `max_rows` rows when given (pure Python: decoding a whole long page takes seconds)."""
    import struct
    import zlib

    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat = 8, b""
    w = h = bpp = 0
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            w, h, depth, color = struct.unpack(">IIBB", body[:10])
            if depth != 8 or color not in (2, 6):
                raise ValueError(f"unsupported PNG (depth {depth}, color type {color})")
            bpp = 3 if color == 2 else 4
        elif kind == b"IDAT":
            idat += body
        pos += 12 + n
    raw = zlib.decompress(idat)
    stride = w * bpp
    rows, prev = [], bytearray(stride)
    for y in range(h if max_rows is None else min(h, max_rows)):
        f = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b = prev[i]
            c = prev[i - bpp] if i >= bpp else 0
            if f == 1:
                line[i] = (line[i] + a) & 255
            elif f == 2:
                line[i] = (line[i] + b) & 255
            elif f == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif f == 4:
                pa, pb, pc = abs(b - c), abs(a - c), abs(a + b - 2 * c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        prev = line
        rows.append(bytes(line) if bpp == 3 else bytes(v for j in range(0, stride, 4) for v in line[j:j + 3]))
    return w, h, rows
