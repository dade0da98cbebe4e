"""Content identity of files: the one sha256 helper (artifacts, evidence, deploy gates, caches)."""

from __future__ import annotations

import hashlib
import os


def sha256_file(path: str | os.PathLike) -> str:
    """Hex sha256 of a file's bytes, read in 1 MiB chunks (libraries can be large)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()
