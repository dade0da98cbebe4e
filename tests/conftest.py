"""Shared fixtures: throwaway upstream repos, fixture workspaces, and an in-process CLI runner.

Skips in this suite say why with a prefix (docs/design.md, "Tests and the CI skip policy"):
`no-gpu:`, `no-cluster:`, `no-upstream:` are allowed in CI; `no-docker:` / `no-tool:` (tests/needs.py)
are skips on a newcomer's machine and failures under CI=true; any other skip fails CI.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

import needs
from lucepatch.main import main

REPO_ROOT = Path(__file__).resolve().parent.parent
FIXTURES = Path(__file__).resolve().parent / "fixtures"

GIT_ENV = {
    "GIT_AUTHOR_NAME": "Upstream Dev",
    "GIT_AUTHOR_EMAIL": "dev@upstream.invalid",
    "GIT_COMMITTER_NAME": "Upstream Dev",
    "GIT_COMMITTER_EMAIL": "dev@upstream.invalid",
    "GIT_AUTHOR_DATE": "2026-01-01T00:00:00Z",
    "GIT_COMMITTER_DATE": "2026-01-01T00:00:00Z",
}


def git(cwd, *args, check=True, env=None) -> str:
    e = {**os.environ, **GIT_ENV, **(env or {})}
    r = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, env=e)
    if check and r.returncode != 0:
        raise AssertionError(f"git {' '.join(args)} failed: {r.stderr}")
    return r.stdout


@dataclass
class CliResult:
    code: int
    out: str
    err: str

    @property
    def json(self):
        import json

        return json.loads(self.out)


def pytest_collection_modifyitems(config, items):
    needs.mark_missing(items)  # @pytest.mark.needs(...): a skip mark here; under CI=true nothing


def pytest_runtest_setup(item):
    needs.check_marks(item)  # ... and under CI=true a failure before the test runs


@pytest.fixture(autouse=True)
def _isolated_env(tmp_path_factory, monkeypatch):
    # Never touch the developer's real cache or workspace from tests.
    monkeypatch.setenv("LUCEPATCH_CACHE", str(tmp_path_factory.mktemp("cache")))
    monkeypatch.delenv("LUCEPATCH_WORKSPACE", raising=False)


@pytest.fixture
def cli(capsys):
    def run(*args) -> CliResult:
        code = main([str(a) for a in args])
        cap = capsys.readouterr()
        return CliResult(code, cap.out, cap.err)

    return run


def write(repo: Path, rel: str, text: str) -> None:
    p = repo / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text)


def commit_all(repo: Path, msg: str) -> str:
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", msg)
    return git(repo, "rev-parse", "HEAD").strip()


# The content-addressed parts of a lucepatch cache: builds (by recipe key), compiled objects (by
# preprocessed source and flags), the simulated driver, reproducer/launcher/reporter binaries and
# coverage maps (by tree, patches and reproducers). A test that needs a cache of its own for what is
# not content-addressed (saved retire reports, sessions, work areas) shares these with another's
# instead of rebuilding them: the bytes are the same, the runs still run. Share a cache whose
# coverage builds its owner already made: a coverage build made through the link records the
# resolved path (the compiler's cwd), and its runs then read no coverage (seen on test_retire_shipped).
CONTENT_ADDRESSED = ("builds", "objcache", "fakecuda", "reproducers", "launch", "reporter", "coverage")


def cache_sharing_builds(private: Path, shared: Path) -> Path:
    """`private`, a new cache whose content-addressed parts are `shared`'s (symlinks)."""
    private.mkdir(parents=True, exist_ok=True)
    for part in CONTENT_ADDRESSED:
        (shared / part).mkdir(parents=True, exist_ok=True)
        if not (private / part).exists():
            (private / part).symlink_to(shared / part, target_is_directory=True)
    return private


def init_repo(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    git(path, "init", "-q", "-b", "main")
    git(path, "config", "user.name", "Upstream Dev")
    git(path, "config", "user.email", "dev@upstream.invalid")
    return path


def format_patches(repo: Path, rev_range: str, out: Path) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    names = git(repo, "format-patch", "--zero-commit", "--no-signature", "--full-index", "-N",
                "-o", str(out), rev_range).split()
    return [Path(n) for n in names]


def make_target(ws: Path, name: str, base: str, patch_files: list[Path], *, version="1.0.0",
                build: str = "", extra: str = "") -> Path:
    tdir = ws / "patches" / name
    tdir.mkdir(parents=True, exist_ok=True)
    (ws / "lucepatch.toml").write_text("schema_version = 1\n")
    listed = []
    for pf in patch_files:
        slug = pf.name.split("-", 1)[1] if pf.name[:4].isdigit() else pf.name
        shutil.copy(pf, tdir / slug)
        listed.append(slug)
    (tdir / "series").write_text("".join(f"{n}\n" for n in listed))
    (tdir / "target.toml").write_text(
        f'name = "{name}"\nupstream = "https://example.invalid/{name}"\nbranch = "main"\n'
        f'base = "{base}"\nversion = "{version}"\n{extra}\n{build}\n'
    )
    return tdir


@pytest.fixture
def toy(tmp_path):
    """An upstream repo with a base commit and a two-patch series made from real commits."""
    up = init_repo(tmp_path / "upstream")
    write(up, "src/a.c", "int a(void) {\n    return 1;\n}\n")
    write(up, "src/b.c", "int b(void) {\n    return 2;\n}\n")
    base = commit_all(up, "base")
    git(up, "checkout", "-q", "-b", "work")
    write(up, "src/a.c", "int a(void) {\n    return 10;\n}\n")
    commit_all(up, "fix(a): return ten\n\nUpstream-Status: Pending\nSigned-off-by: Fixer <fixer@example.invalid>")
    write(up, "src/b.c", "int b(void) {\n    return 20;\n}\n")
    commit_all(up, "fix(b): return twenty\n\nUpstream-Status: Pending\nSigned-off-by: Fixer <fixer@example.invalid>")
    pfiles = format_patches(up, f"{base}..work", tmp_path / "fp")
    git(up, "checkout", "-q", "main")
    git(up, "branch", "-q", "-D", "work")
    ws = tmp_path / "ws"
    make_target(ws, "toy", base, pfiles)
    return {"upstream": up, "base": base, "ws": ws, "tmp": tmp_path}


def evidence_doc(*, verdict="proven", driver_kind="real", gpu="NVIDIA H200", baseline=None, patched=None,
                 target="hami-core", schema_version=2) -> dict:
    """A minimal, schema-valid evidence document (lucepatch/data/evidence.schema.json) for tests
    of the verbs that read evidence; `baseline`/`patched` are library paths whose sha256 it records."""
    import hashlib as _h

    def art(p):
        return {"path": str(p), "sha256": _h.sha256(Path(p).read_bytes()).hexdigest() if p else None}

    doc = {
        "schema_version": 2, "kind": "lucepatch-evidence",
        "tool": {"lucepatch": "test", "created": "2026-12-01T00:00:00+00:00"}, "workspace": {},
        "target": target, "series": {"version": "1.0.0", "series_hash": "0" * 64, "patch_ids": []},
        "upstream": {"url": "https://example.invalid/up", "base": "0" * 40},
        "reproducers": [{"name": "r", "hash": "0" * 64}],
        "driver": {"kind": driver_kind, "gpu": gpu, "version": 13000},
        "simulated": driver_kind == "fake", "execution": {"mode": "serial", "runs_per_variant": 20},
        "run_policy": {"rule": "fixed", "max_runs": 20, "alpha": 0.01},
        "skipped": [],
        "variants": {"baseline": {"from": "file", "artifact": art(baseline) if baseline else {"path": "", "sha256": None}},
                     "patched": {"from": "file", "artifact": art(patched) if patched else {"path": "", "sha256": None}}},
        "scenarios": [], "verdict": verdict, "runs": [],
    }
    if schema_version == 1:
        doc["schema_version"] = 1
        del doc["run_policy"]
    return doc
