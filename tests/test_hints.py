"""Every hint names something that exists, and the small things a newcomer tripped over stay fixed:
the --fetch hint only on verbs that have --fetch; doctor's `lucepatch[docker]` printed as written;
`list` shows submodule series; `matrix --help` agrees with itself on first-parent; an interrupted
build leaves no staging folder behind."""

from __future__ import annotations

import ast
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import click
import pytest

from conftest import commit_all, git, write
from sigint import POPEN
from lucepatch.main import VERBS, cli as lucepatch_cli

REPO = Path(__file__).resolve().parent.parent


def _all_options() -> set[str]:
    opts: set[str] = set()

    def walk(cmd):
        for p in cmd.params:
            opts.update(o for o in (*p.opts, *p.secondary_opts) if o.startswith("--"))
        if isinstance(cmd, click.Group):
            ctx = click.Context(cmd)
            for n in cmd.list_commands(ctx):
                walk(cmd.get_command(ctx, n))
    walk(lucepatch_cli)
    return opts


def _strings():
    """Every string literal a user can be shown (docstrings of modules and functions excluded)."""
    for f in sorted((REPO / "lucepatch").rglob("*.py")):
        tree = ast.parse(f.read_text())
        docs = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant)}
        for node in ast.walk(tree):
            if id(node) in docs:
                continue
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                yield f.relative_to(REPO), node.value
            elif isinstance(node, ast.JoinedStr):  # f-strings: their literal parts
                yield f.relative_to(REPO), "".join(v.value for v in node.values
                                                    if isinstance(v, ast.Constant) and isinstance(v.value, str))


OPTION_HINT = re.compile(r"\b(?:pass|use|with|add|run|try|or|give|set|needs?|without|see)\s+`?(--[a-z][a-z0-9-]*)")
VERB_HINT = re.compile(r"(?:\b(?:run|re-run|rerun|use|try|see|then)\s+`?|`)lucepatch ([a-z][a-z-]*)")


def test_every_option_and_verb_a_hint_names_exists():
    options = _all_options()
    assert {"--fetch", "--source", "--strict", "--wide", "--html"} <= options
    bad = []
    for where, text in _strings():
        for m in OPTION_HINT.finditer(text):
            before = text[max(0, m.start() - 40):m.start()]
            if re.search(r"\bgit [a-z-]+\b[^;,.]*$", before):  # an option of git's, e.g. git format-patch --binary
                continue
            if m.group(1) not in options:
                bad.append(f"{where}: {m.group(0)!r}")
        for m in VERB_HINT.finditer(text):
            if m.group(1) not in VERBS:
                bad.append(f"{where}: {m.group(0)!r}")
    assert not bad, bad


@pytest.fixture
def moved_base(toy):
    """A target (buildable, so `build` gets as far as the base) whose pinned base is a commit the
    checkout does not have."""
    t = toy["ws"] / "patches" / "toy" / "target.toml"
    t.write_text(t.read_text().replace(toy["base"], "1" * 40) + "\n" + BUILD)
    return toy


@pytest.mark.parametrize("verb,has_fetch", [
    (["check", "toy"], True), (["status", "toy"], True), (["apply", "toy"], True),
    (["rebase", "toy", "--onto", "HEAD", "--dry-run"], True),
    (["build", "toy"], False), (["ci", "toy"], False),
])
def test_fetch_hint_only_where_fetch_exists(cli, moved_base, verb, has_fetch):
    r = cli("--workspace", moved_base["ws"], *verb, "--source", moved_base["upstream"])
    assert r.code == 3, r.err
    # the fetch is in that checkout (by path), from the target's upstream: not wherever the user stands
    assert "is not in the checkout" in r.err and f"git -C {moved_base['upstream']} fetch" in r.err, r.err
    assert ("--fetch" in r.err) == has_fetch, r.err


def test_doctor_prints_brackets_as_written(cli, monkeypatch, tmp_path):
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-docker.sock")
    monkeypatch.setenv("COLUMNS", "400")
    r = cli("doctor", "--for", "build --image")
    assert r.code == 3
    assert "pip install 'lucepatch[docker]'" in r.err  # the hint line
    assert "'lucepatch[docker]'" in r.out  # and the table cell


def test_list_shows_submodule_series(cli, monkeypatch):
    monkeypatch.setenv("COLUMNS", "300")
    r = cli("--workspace", REPO, "list")
    assert r.code == 0
    assert "lucebox.llama.cpp 1.0.0 on b896cf69676b (submodule server/deps/llama.cpp" in r.out
    assert "f6-ggml-cuda-link-cuda-driver-public.patch" in r.out
    doc = cli("--workspace", REPO, "list", "--json").json
    lucebox = next(t for t in doc["targets"] if t["name"] == "lucebox")
    sub = {s["path"]: s for s in lucebox["submodules"]}
    assert [p["name"] for p in sub["server/deps/llama.cpp"]["patches"]] == ["f6-ggml-cuda-link-cuda-driver-public.patch"]
    assert len(sub["server/deps/llama.cpp"]["patches"][0]["patch_id"]) == 40


def test_matrix_help_agrees_on_first_parent(cli):
    r = cli("matrix", "--help")
    text = " ".join(r.out.split())
    assert "every commit unless --first-parent" in text
    assert "Only the first-parent chain of the range (default: every commit)" in text
    assert "(git range, first parent)" not in text


BUILD = ('[build]\nsystem = "cmake"\nconfigure_args = []\ntargets = ["slow"]\n\n'
         '[build.artifacts]\n"slow.txt" = "slow.txt"\n')
SLOW = ('cmake_minimum_required(VERSION 3.10)\nproject(slow NONE)\n'
        'add_custom_target(slow ALL COMMAND sleep 30 COMMAND ${CMAKE_COMMAND} -E touch slow.txt)\n')


@pytest.mark.needs("cmake", "make")
@pytest.mark.parametrize("sig,code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_interrupted_build_leaves_no_staging_behind(toy, tmp_path, sig, code):
    up, ws = toy["upstream"], toy["ws"]
    write(up, "CMakeLists.txt", SLOW)
    base = commit_all(up, "a build that takes a while")
    t = ws / "patches" / "toy" / "target.toml"
    t.write_text(t.read_text().replace(toy["base"], base) + "\n" + BUILD)
    cache = tmp_path / "cache"
    env = {**os.environ, "PYTHONPATH": str(REPO), "LUCEPATCH_CACHE": str(cache)}
    # the child starts with SIGINT/SIGTERM at their defaults and unblocked, whatever this process inherited
    # (SIG_IGN under a background job) or an earlier in-process test left in its mask (tests/sigint.py)
    proc = subprocess.Popen([sys.executable, "-m", "lucepatch", "--workspace", str(ws), "build", "toy", "--source", str(up)],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **POPEN)
    deadline = time.monotonic() + 120
    while not list((cache / "builds").glob("*.tmp-*/build")) and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.1)
    assert list((cache / "builds").glob("*.tmp-*/build")), "the build never started"
    time.sleep(1.0)  # inside cmake
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == code, err
    assert not list((cache / "builds").glob("*.tmp-*")), "an interrupted build left its staging folder"


def test_a_killed_build_is_swept_by_the_next(tmp_path):
    from lucepatch.builders.native import _sweep_stale_staging
    out = tmp_path / "builds" / "abc"
    dead = subprocess.Popen(["true"])
    dead.wait()
    stale = tmp_path / "builds" / f"abc.tmp-{dead.pid}-0123456789ab"
    live = tmp_path / "builds" / f"abc.tmp-{os.getpid()}-0123456789ab"
    for d in (stale, live):
        (d / "build").mkdir(parents=True)
    _sweep_stale_staging(out)
    assert not stale.exists() and live.exists()


# ---- each message names the right thing: the flag, the repository, the cause ------------------------

def test_every_file_a_message_names_exists():
    bad = []
    for where, text in _strings():
        for m in re.finditer(r"(?<![\w/.-])((?:docs|tools|\.ci|bench|ci|reproducers|patches)/[\w./-]+\w)", text):
            if "{" not in m.group(1) and not (REPO / m.group(1)).exists():
                bad.append(f"{where}: {m.group(1)}")
    extras = set(re.findall(r"^(\w+) = \[", (REPO / "pyproject.toml").read_text().split("[project.optional-dependencies]")[1]
                            .split("\n[")[0], re.M))
    for where, text in _strings():
        bad += [f"{where}: lucepatch[{x}]" for x in re.findall(r"lucepatch\[(\w+)\]", text) if x not in extras]
    assert not bad, bad


@pytest.mark.parametrize("verb", [["check", "toy", "--onto", "2" * 40], ["rebase", "toy", "--onto", "2" * 40, "--dry-run"],
                                  ["rebase", "toy", "--onto", "HEAD", "--backport", "2" * 40, "--dry-run"]])
def test_a_ref_the_user_gave_is_named_by_its_flag(cli, toy, verb):
    r = cli("--workspace", toy["ws"], *verb, "--source", toy["upstream"])
    assert r.code == 3, r.err
    flag = "--backport" if "--backport" in verb else "--onto"
    assert f"{flag} {'2' * 40} is not in the checkout {toy['upstream']}" in r.err, r.err
    assert "base commit" not in r.err and "or name a ref that exists there" in r.err


def test_the_fetch_hint_names_the_upstream_remote_not_a_forks_origin(cli, moved_base):
    up = moved_base["upstream"]
    git(up, "remote", "add", "origin", "https://example.invalid/someones-fork-of-toy")
    r = cli("--workspace", moved_base["ws"], "check", "toy", "--source", up)
    assert r.code == 3 and f"git -C {up} fetch https://example.invalid/toy {'1' * 40}" in r.err, r.err
    assert "fetch origin" not in r.err  # origin is the fork: fetching it would not bring upstream's commit
    git(up, "remote", "add", "upstream", "git@example.invalid:toy.git")  # the same repository, by ssh
    r = cli("--workspace", moved_base["ws"], "status", "toy", "--source", up)
    assert f"git -C {up} fetch upstream" in r.err, r.err


def test_a_submodules_commit_is_fetched_in_the_submodule(tmp_path):
    from lucepatch import git as g
    from lucepatch.engine.apply import resolve_base
    from lucepatch.errors import EnvironmentMissing

    sup = tmp_path / "super"
    sub = sup / "deps" / "lib"
    for repo in (sup, sub):
        repo.mkdir(parents=True, exist_ok=True)
        git(repo, "init", "-q")
    git(sub, "remote", "add", "origin", "https://example.invalid/lib")
    with pytest.raises(EnvironmentMissing) as exc:
        resolve_base(sub, "3" * 40, "super.lib", upstream="https://example.invalid/lib", fetch=None)
    assert f"is not in the checkout {sub}" in str(exc.value) and f"git -C {sub} fetch origin" in str(exc.value)
    assert g.fetch_hint(sup, "https://example.invalid/lib") == f"git -C {sup} fetch https://example.invalid/lib"


def test_the_real_driver_skip_names_the_cuda_runtime_not_pytorch():
    from lucepatch.verify.reproducer import load_reproducer
    from lucepatch.verify.requirements import unmet
    from lucepatch.workspace import resolve_workspace

    ws = resolve_workspace(REPO)
    for name in ("ggml-client", "torch-clients"):
        r = load_reproducer(ws, name)
        why = unmet(r, next(s for s in r.scenarios if not s.control), "fake")
        assert "needs the real CUDA driver" in why and "CUDA runtime" in why, why
        if name == "ggml-client":
            assert "PyTorch" not in why and "torch" not in why, why
