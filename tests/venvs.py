"""A venv of its own that still sees the running environment's packages (lucepatch's dependencies:
no download), whether the tests run on a system Python or inside a venv (the newcomer stage): a
`--system-site-packages` venv made from a venv's Python sees the *base* interpreter's packages, not
that venv's, so the running environment's site folders are added with a .pth file instead. Its own
site-packages come first on sys.path: what is installed there (nvml.h, `pip install .`) wins."""

from __future__ import annotations

import site
import subprocess
import sys
import sysconfig
from pathlib import Path


def make(where: Path, *, with_pip: bool = False) -> Path:
    """The venv's python."""
    args = [sys.executable, "-m", "venv", "--system-site-packages", str(where)]
    subprocess.run(args if with_pip else [*args, "--without-pip"], check=True)
    py = where / "bin" / "python"
    own = Path(subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                              capture_output=True, text=True, check=True).stdout.strip())
    parent = dict.fromkeys([*site.getsitepackages(), sysconfig.get_path("purelib"), sysconfig.get_path("platlib")])
    (own / "lucepatch-test-parent.pth").write_text("".join(f"{p}\n" for p in parent if Path(p).is_dir() and Path(p) != own))
    return py
