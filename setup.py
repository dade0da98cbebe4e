"""Ship the maintained workspace (patches/, reproducers/, lucepatch.toml) inside the wheel.

They live at the repository root, where they are edited and reviewed; a wheel copies them to
lucepatch/_workspace/, the read-only workspace lucepatch falls back to when run outside any
workspace (docs/design.md "Contracts"). Metadata is in pyproject.toml.
"""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
SHIPPED = ("patches", "reproducers", "lucepatch.toml")


class BuildPyWithWorkspace(build_py):
    def run(self):
        super().run()
        dest = Path(self.build_lib) / "lucepatch" / "_workspace"
        shutil.rmtree(dest, ignore_errors=True)
        dest.mkdir(parents=True)
        for name in SHIPPED:
            src = ROOT / name
            if src.is_dir():
                shutil.copytree(src, dest / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
            elif src.is_file():
                shutil.copy2(src, dest / name)


setup(cmdclass={"build_py": BuildPyWithWorkspace})
