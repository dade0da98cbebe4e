"""Private work areas under <cache>/work/: a clone of the user's checkout that lucepatch builds,
applies and tests in, removed on exit, reclaimed by the next run when its owner was killed."""

from __future__ import annotations

import os
import shutil
import time
import uuid
from pathlib import Path

from lucepatch.engine.checkout import pid_alive


class WorkArea:
    """A private clone under <cache>/work/, removed on exit, reclaimed if a run was killed."""

    def __init__(self, cache: Path, label: str):
        self.root = cache / "work"
        self.root.mkdir(parents=True, exist_ok=True)
        reclaim_orphans(self.root)
        self.path = self.root / f"{label}-{uuid.uuid4().hex[:10]}"
        self.path.mkdir()
        (self.path / "owner.pid").write_text(str(os.getpid()))
        self.repo = self.path / "tree"

    def close(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def reclaim_orphans(root: Path) -> list[Path]:
    """Remove work areas whose owning lucepatch process is gone (killed by SIGKILL, power loss)."""
    removed = []
    for d in root.iterdir() if root.is_dir() else []:
        pidfile = d / "owner.pid"
        try:
            pid = int(pidfile.read_text().strip())
        except (OSError, ValueError):
            pid = -1
            try:
                if time.time() - d.stat().st_mtime < 60:
                    continue  # just made by another thread or process, its owner.pid not written yet
            except OSError:
                continue  # gone meanwhile
        if not pid_alive(pid):
            shutil.rmtree(d, ignore_errors=True)
            removed.append(d)
    return removed
