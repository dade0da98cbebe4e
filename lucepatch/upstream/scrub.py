"""Keep the machine out of what `pr` writes: secrets from the environment, $HOME, cache and
workspace paths, host names.

Text lucepatch generates (body, payload, evidence copy) is scrubbed; patch content is the author's,
so a secret or $HOME found there is refused, never silently edited.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

# Environment variables whose values must never be written: names that look like credentials.
_SECRET_NAME = re.compile(r"(TOKEN|SECRET|PASSWORD|PASSWD|API_?KEY|ACCESS_KEY|PRIVATE_KEY|CREDENTIAL)", re.I)
_BUILD_PATH = re.compile(r"(?:/[^\s\"']+)?/builds/([0-9a-f]{8,64})/artifacts/([^\s\"']+)")


def secret_values(env: dict | None = None) -> dict[str, str]:
    env = os.environ if env is None else env
    return {k: v for k, v in env.items() if _SECRET_NAME.search(k) and v and len(v) >= 6}


class Scrubber:
    def __init__(self, *, cache: Path | None = None, workspace: Path | None = None, env: dict | None = None):
        env = os.environ if env is None else env
        self.secrets = secret_values(env)
        self.paths: list[tuple[str, str]] = []
        for p, label in ((cache, "$LUCEPATCH_CACHE"), (workspace, "<workspace>")):
            if p:
                self.paths.append((str(Path(p)), label))
                self.paths.append((str(Path(p).resolve()), label))
        home = env.get("HOME") or str(Path.home())
        if home and home not in ("/", ""):
            self.paths.append((home.rstrip("/"), "~"))
            self.paths.append((str(Path(home).resolve()), "~"))
        # longest first so a cache under $HOME becomes $LUCEPATCH_CACHE, not ~/...
        self.paths.sort(key=lambda x: -len(x[0]))
        self.home = home

    def text(self, s: str) -> str:
        for name, value in self.secrets.items():
            s = s.replace(value, f"<redacted ${name}>")
        s = _BUILD_PATH.sub(lambda m: f"$LUCEPATCH_CACHE/builds/{m.group(1)}/artifacts/{m.group(2)}", s)
        for prefix, label in self.paths:
            s = s.replace(prefix, label)
        return s

    def obj(self, o):
        if isinstance(o, str):
            return self.text(o)
        if isinstance(o, list):
            return [self.obj(x) for x in o]
        if isinstance(o, dict):
            return {k: self.obj(v) for k, v in o.items()}
        return o

    def evidence(self, doc: dict) -> dict:
        doc = self.obj(doc)
        host = doc.get("tool", {}).get("host")
        if isinstance(host, dict) and "hostname" in host:
            host["hostname"] = "<redacted>"
        ws = doc.get("workspace")
        if isinstance(ws, dict) and "path" in ws:
            ws["path"] = "<workspace>"
        return doc

    def leaks(self, data: bytes) -> list[str]:
        """Names of the secrets (or $HOME) found in data."""
        found = [f"${n}" for n, v in self.secrets.items() if v.encode() in data]
        if self.home and len(self.home) > 1 and (self.home.rstrip("/") + "/").encode() in data:
            found.append("$HOME")
        return found
