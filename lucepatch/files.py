"""Files as lucepatch writes and identifies them: the one sha256 helper (artifacts, evidence, deploy
gates, caches), the one atomic write (patches, target.toml, evidence, evidence pages) and the JSON
schemas shipped in lucepatch/data/ (read by every module that writes or reads such a document,
whatever its floor: the schema is data, not the writer's code)."""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from functools import lru_cache
from importlib import resources
from pathlib import Path


@lru_cache(maxsize=None)
def data_schema(name: str) -> dict:
    """lucepatch/data/<name>.schema.json (evidence, retire), parsed once per process."""
    with resources.files("lucepatch").joinpath("data", f"{name}.schema.json").open("rb") as f:
        return json.load(f)


def sha256_file(path: str | os.PathLike) -> str:
    """Hex sha256 of a file's bytes, read in 1 MiB chunks (libraries can be large)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def write_atomic(path: str | os.PathLike, data: bytes | str, *, mode: int | None = None) -> Path:
    """Write through a temporary file in the same folder and one rename: a reader (or a crash)
    sees the old file or the new one, never half of one. `mode` None keeps the file's mode (0o644
    for a new file); otherwise `mode` less the umask (0o666: world-readable files that go into PRs)."""
    path = Path(path)
    if mode is None:
        mode = path.stat().st_mode & 0o777 if path.exists() else 0o644
    else:
        umask = os.umask(0)
        os.umask(umask)
        mode &= ~umask
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data.encode("utf-8") if isinstance(data, str) else data)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:  # any interruption: drop the temporary file, then re-raise (nothing swallowed)
        Path(tmp).unlink(missing_ok=True)
        raise
    return path
