"""`pip install .` runs every command the README and docs show (issue 35 item 3): PyYAML and cpplint
are base dependencies (at 38ae54e `render k8s lucebox --out k8s/` wrote two files, then exited 3 asking
for `lucepatch[k8s]`, and `pr` exited 3 without cpplint), and `render` writes nothing before every
check passed. tests/test_docs_commands.py runs the documents' own blocks in such a venv; this file
checks the same base install in seconds, with no checkout."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import venvs
from conftest import REPO_ROOT


@pytest.fixture(scope="module")
def base_python(tmp_path_factory):
    """A venv that sees exactly what `pip install .` brings, and this tree (no pip: nothing downloads)."""
    where = tmp_path_factory.mktemp("base-install") / "venv"
    py = venvs.make_exact(where, REPO_ROOT / "pyproject.toml")
    own = Path(subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                              capture_output=True, text=True, check=True).stdout.strip())
    (own / "lucepatch-tree.pth").write_text(f"{REPO_ROOT}\n")
    return py


def test_the_base_install_renders_and_lints_what_the_docs_show(base_python, tmp_path):
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "LUCEPATCH_CACHE": str(tmp_path / "cache")}
    for args in (["render", "k8s", "lucebox", "--out", str(tmp_path / "k8s")],
                 ["render", "olares", "lucebox", "--out", str(tmp_path / "olares")]):
        r = subprocess.run([str(base_python), "-m", "lucepatch", *args], capture_output=True, text=True, env=env)
        assert r.returncode == 0, (args, r.stderr[-2000:])
    assert (tmp_path / "k8s" / "kustomization.yaml").is_file()
    assert (tmp_path / "olares" / "lucebox" / "OlaresManifest.yaml").is_file()
    # pr's upstream check: cpplint runs as `python -m cpplint` where its script is not on PATH
    r = subprocess.run([str(base_python), "-c", "from lucepatch.upstream.checks import _cpplint_cmd; import subprocess, sys;"
                        " sys.exit(subprocess.run([*_cpplint_cmd(), '--version']).returncode)"],
                       capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    # and nothing of the test extra came along
    assert subprocess.run([str(base_python), "-c", "import pytest"], capture_output=True).returncode != 0


def test_render_k8s_writes_nothing_when_a_later_step_fails(cli, tmp_path, monkeypatch):
    from lucepatch.errors import EnvironmentMissing
    from lucepatch.k8s import manifests

    def broken(docs):
        raise EnvironmentMissing("parsing the manifests failed (as a missing PyYAML did at 38ae54e)")

    monkeypatch.setattr(manifests, "to_objects", broken)
    out = tmp_path / "k8s"
    r = cli("render", "k8s", "lucebox", "--out", out)
    assert r.code == 3 and "parsing the manifests failed" in r.err
    assert not out.exists(), sorted(p.name for p in out.iterdir())


def test_render_olares_writes_nothing_when_olares_rules_refuse_it(cli, tmp_path, monkeypatch):
    from lucepatch.k8s import olares

    monkeypatch.setattr(olares, "lint", lambda pkg, objects: ["a rule this test breaks"])
    out = tmp_path / "olares"
    r = cli("render", "olares", "lucebox", "--out", out)
    assert r.code == 2 and r.err.count("lucepatch: error:") == 1 and "a rule this test breaks" in r.err
    assert not out.exists()
