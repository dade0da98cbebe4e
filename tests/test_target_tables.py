"""target.toml's tables from issue 36: [build.instead_of] (what builds upstream as it ships where a
Build-Only patch no longer applies) and [regression_guard] (what upstream fixed at a line's base):
parsed, typed, linted, and left out of a build's key where they change no byte."""

from __future__ import annotations

import shutil

import pytest

from conftest import REPO_ROOT
from lucepatch.errors import UsageError
from lucepatch.services.lint import lint_target
from lucepatch.target import load_target
from lucepatch.workspace import resolve_workspace


@pytest.fixture()
def ws(tmp_path):
    root = tmp_path / "ws"
    shutil.copytree(REPO_ROOT / "patches", root / "patches")
    shutil.copytree(REPO_ROOT / "reproducers", root / "reproducers")
    (root / "lucepatch.toml").write_text("schema_version = 1\n")
    return root


def _edit(ws, text: str) -> None:
    f = ws / "patches" / "hami-core" / "target.toml"
    f.write_text(f.read_text() + text)


def _lint(ws):
    return [f.message for f in lint_target(resolve_workspace(ws), "hami-core", pending_days=100000, now=0)
            if f.level == "error"]


def test_the_shipped_targets_declare_cmake_4s_flag_and_lint_clean(ws):
    t = load_target(resolve_workspace(ws), "hami-core")
    assert t.build.instead_of == {"build-accept-cmake-4.patch": ["-DCMAKE_POLICY_VERSION_MINIMUM=3.5"]}
    assert "instead_of" not in t.build.key_json() and "instead_of" in t.build.to_json()
    assert _lint(ws) == []


def test_instead_of_names_a_build_only_patch_of_the_series(ws):
    f = ws / "patches" / "hami-core" / "target.toml"
    f.write_text(f.read_text().replace('"build-accept-cmake-4.patch" = ["-DCMAKE_POLICY_VERSION_MINIMUM=3.5"]',
                                       '"build-accept-cmake-4.patch" = ["-DX=1"]\n"nope.patch" = ["-DY=1"]\n'
                                       '"fix-memory-cumemgetinfo-v2-writes-only-the-outputs-it-is-given.patch" = []'))
    errs = _lint(ws)
    assert "[build.instead_of] 'nope.patch' is no patch of the series" in errs
    assert any("is not Build-Only" in e for e in errs)
    f.write_text(f.read_text().replace('"nope.patch" = ["-DY=1"]', '"nope.patch" = "-DY=1"'))
    with pytest.raises(UsageError, match=r"\[build\]: instead_of must be dict\[str, list\[str\]\]"):
        load_target(resolve_workspace(ws), "hami-core")


def test_regression_guards_name_checked_scenarios(ws):
    _edit(ws, '\n[regression_guard]\n"pool-alloc:pool-charged" = "upstream fixed it in 9ce21cc (#217)"\n'
              '"pool-alloc" = "a whole reproducer"\n"pool-alloc:control" = "a control"\n"pool-alloc:nope" = "x"\n')
    t = load_target(resolve_workspace(ws), "hami-core")
    assert t.regression_guard["pool-alloc:pool-charged"] == "upstream fixed it in 9ce21cc (#217)"
    errs = _lint(ws)
    assert not any("pool-charged" in e for e in errs)
    assert any("'pool-alloc': name a scenario" in e for e in errs)
    assert any("'pool-alloc:control' is a control" in e for e in errs)
    assert any("pool-alloc has no scenario 'nope'" in e for e in errs)
    _edit(ws, '"ctypes-meminfo:x" = ""\n')
    with pytest.raises(UsageError, match=r"\[regression_guard\] 'ctypes-meminfo:x' needs the reason"):
        load_target(resolve_workspace(ws), "hami-core")


def test_a_line_is_judged_with_its_familys_reproducers(ws):
    """`verify --retire 52f33fc --target hami-core-v2.9` (the series on 8f3a89c once the main line moved):
    the line shares hami-core's reproducers; before, it found none and judged nothing."""
    from lucepatch.upstream.retire_report import target_reproducers

    w = resolve_workspace(ws)
    line = next(load_target(w, n) for n in ("hami-core-v2.9", "hami-core-v2.5") if (ws / "patches" / n).is_dir())
    assert line.line_of == "hami-core"
    got = {r.name for r in target_reproducers(line, w)}
    assert {"pool-alloc", "async-sched", "untracked-free"} <= got
    assert got == {r.name for r in target_reproducers(load_target(w, "hami-core"), w)}
