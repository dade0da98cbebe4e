"""The wheel carries the maintained workspace and installs on its own: build it, install it with its
dependencies into a fresh venv that sees neither the source tree nor the running environment's
site-packages, and run `lucepatch list` from an empty directory (no workspace anywhere above it).

The dependencies come as wheels from `pip download` pinned to the versions the running environment
has, so pip serves them from its wheel cache where it can; the venv itself installs with --no-index.
This works the same from a user's venv and from CI's system Python.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _pip(*args, py=sys.executable, **kw):
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PIP_REQUIRE_VIRTUALENV")}
    return subprocess.run([str(py), "-m", "pip", *args], capture_output=True, text=True, env=env, **kw)


def _running_versions(path: Path) -> Path:
    """A constraints file: every distribution of the running environment at its installed version."""
    pins = sorted({f"{d.metadata['Name']}=={d.version}" for d in importlib.metadata.distributions()
                   if d.metadata["Name"] and d.metadata["Name"].lower() != "lucepatch"})
    path.write_text("\n".join(pins) + "\n")
    return path


def test_wheel_installs_into_a_fresh_venv_with_its_dependencies(tmp_path):
    wheel_dir = tmp_path / "wheel"
    r = _pip("wheel", "--no-deps", "-q", "-w", str(wheel_dir), str(ROOT))
    assert r.returncode == 0, r.stderr
    wheel = next(wheel_dir.glob("lucepatch-*.whl"))
    # the runtime dependencies as wheels, at the running environment's versions
    deps = tmp_path / "deps"
    r = _pip("download", "-q", "--only-binary=:all:", "-d", str(deps),
             "-c", str(_running_versions(tmp_path / "constraints.txt")), str(wheel))
    assert r.returncode == 0, f"pip download of the wheel's dependencies failed: {r.stderr[-2000:]}"
    assert any(deps.glob("rich-*.whl")) and any(deps.glob("jsonschema-*.whl"))

    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True, system_site_packages=False, clear=True).create(env_dir)
    py = env_dir / "bin" / "python"
    r = _pip("install", "--no-index", "--find-links", str(deps), "-q", str(wheel), py=py)
    assert r.returncode == 0, r.stderr[-2000:]
    site = subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                          capture_output=True, text=True, check=True).stdout.strip()

    empty = tmp_path / "empty"
    empty.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "LUCEPATCH_WORKSPACE", "VIRTUAL_ENV")}
    env["HOME"] = str(tmp_path / "home")
    # nothing outside the venv: the package and its dependencies resolve inside it
    where = subprocess.run([str(py), "-c", "import lucepatch, rich, jsonschema; "
                            "print(lucepatch.__file__, rich.__file__, jsonschema.__file__)"],
                           cwd=empty, env=env, capture_output=True, text=True)
    assert where.returncode == 0, where.stderr
    for f in where.stdout.split():
        assert Path(f).is_relative_to(Path(site)), (f, site)
    # the main job's headers come with `pip install .` (issue 24: `verify` exited 3 "nvml.h not found"
    # after a plain install): nvml.h is the toolkit's where it has one, else the venv's own
    nvml = subprocess.run([str(py), "-c", "from lucepatch.native.toolchain import nvml_include; print(nvml_include())"],
                          cwd=empty, env=env, capture_output=True, text=True)
    assert nvml.returncode == 0, nvml.stderr
    inc = Path(nvml.stdout.strip())
    assert (inc / "nvml.h").is_file()
    if not any(Path(d, "nvml.h").is_file() for d in ("/usr/local/cuda/include", "/usr/include")):
        assert inc.is_relative_to(Path(site)), (inc, site)
    run = subprocess.run([str(env_dir / "bin" / "lucepatch"), "list", "--json"], cwd=empty, env=env,
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    doc = json.loads(run.stdout)
    assert doc["schema_version"] == 1
    assert doc["workspace"]["origin"] == "packaged" and doc["workspace"]["read_only"] is True
    assert Path(doc["workspace"]["path"]).is_relative_to(Path(site))
    names = {t["name"] for t in doc["targets"]}
    assert "hami-core" in names
    assert "async-sched" in {r["name"] for r in doc["reproducers"]}
    hami = next(t for t in doc["targets"] if t["name"] == "hami-core")
    assert len(hami["patches"]) >= 7 and all(len(p["patch_id"]) == 40 for p in hami["patches"])


def test_help_lists_every_verb_without_importing_one():
    """`lucepatch --help` reads main.SUMMARY, never a command module (start-up time); SUMMARY is
    what each command says of itself."""
    import importlib
    import subprocess
    import sys

    from lucepatch.main import SUMMARY, VERBS

    assert set(SUMMARY) == set(VERBS)
    for verb, mod in VERBS.items():
        cmd = importlib.import_module(f"lucepatch.commands.{mod}").command
        assert cmd.get_short_help_str(limit=1000) == SUMMARY[verb], verb
    code = ("import sys; from lucepatch.main import main; main(['--help']); "
            "print([m for m in sys.modules if m.startswith(('lucepatch.commands.', 'git', 'rich'))])")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       env={**__import__('os').environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)})
    assert r.stdout.strip().splitlines()[-1] == "[]", r.stdout[-500:]
    for verb in VERBS:
        assert verb in r.stdout
