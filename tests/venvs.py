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


# ---- a venv that sees exactly what an install line brings --------------------------------------
def requirements(pyproject: Path, extras: tuple[str, ...] = ()) -> list[str]:
    """The requirements `pip install '.[extras]'` of that pyproject asks for (base + those extras)."""
    import tomllib

    project = tomllib.loads(Path(pyproject).read_text(encoding="utf-8"))["project"]
    return [*project.get("dependencies", []), *[r for e in extras for r in project["optional-dependencies"][e]]]


def closure(reqs: list[str]) -> dict[str, object]:
    """{name: installed Distribution} for `reqs` and everything they require (markers evaluated here,
    extras followed), read from the running environment's installed distributions."""
    from importlib.metadata import PackageNotFoundError, distribution

    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    out: dict[str, object] = {}
    todo = [(Requirement(r), ()) for r in reqs]
    while todo:
        req, _ = todo.pop()
        if req.marker and not req.marker.evaluate({"extra": ""}):
            continue
        name = canonicalize_name(req.name)
        if name in out:
            continue
        try:
            dist = distribution(req.name)
        except PackageNotFoundError:
            raise RuntimeError(f"{req.name} (needed by the install line) is not installed in the running environment")
        out[name] = dist
        for r in dist.requires or []:
            sub = Requirement(r)
            if sub.marker and not any(sub.marker.evaluate({"extra": e}) for e in ("", *req.extras)):
                continue
            todo.append((sub, ()))
    return out


def make_exact(where: Path, pyproject: Path, extras: tuple[str, ...] = (), *, with_pip: bool = False) -> Path:
    """A venv (no system site-packages) that sees exactly the distributions `pip install '.[extras]'`
    brings — the running environment's copies, linked file by file into <where>/deps (no download) —
    and nothing else the running environment holds (no pytest, nothing of another extra). Its python."""
    args = [sys.executable, "-m", "venv", str(where)]
    subprocess.run(args if with_pip else [*args, "--without-pip"], check=True)
    py = where / "bin" / "python"
    farm = where / "deps"
    for dist in closure(requirements(pyproject, extras)).values():
        root = Path(dist.locate_file(""))
        for f in dist.files or []:
            if f.parts and f.parts[0] == "..":  # a script in bin/: `python -m` serves instead
                continue
            dst = farm / f
            if not dst.exists():
                dst.parent.mkdir(parents=True, exist_ok=True)
                dst.symlink_to(root / f)
    own = Path(subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                              capture_output=True, text=True, check=True).stdout.strip())
    (own / "lucepatch-exact-deps.pth").write_text(f"{farm}\n")
    return py
