"""target.toml's tables are typed (lucepatch/target_sections.py): every committed target loads into
them, and a wrong type, an unknown key (a typo) or a missing required key is one UsageError that
names the file, the table and the key — at load, not at build time."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import REPO_ROOT

from lucepatch.errors import UsageError
from lucepatch.target import load_target_dir
from lucepatch.target_sections import BuildConfig, ModelConfig, PrConfig, Profile, Submodule

HEAD = 'name = "t"\nupstream = "https://example.invalid/t"\nbase = "0123456789abcdef"\nversion = "1.0.0"\n'


def load(tmp_path: Path, body: str):
    d = tmp_path / "t"
    d.mkdir(exist_ok=True)
    (d / "target.toml").write_text(HEAD + body)
    return load_target_dir(d)


def test_committed_targets_load_typed():
    hami = load_target_dir(REPO_ROOT / "patches" / "hami-core")
    assert isinstance(hami.build, BuildConfig) and hami.build.artifacts == {"libvgpu.so": "libvgpu.so"}
    assert hami.build.reproducible.stamp_files == ["config/static_config.h"]
    assert isinstance(hami.pr, PrConfig) and hami.pr.overrides()["template"] == "hami"
    lucebox = load_target_dir(REPO_ROOT / "patches" / "lucebox")
    assert all(isinstance(p, Profile) for p in lucebox.profiles.values())
    assert lucebox.profiles["sm120-cuda13-hami"].inherits == "sm120-cuda13"
    assert [s.label for s in lucebox.submodules] == ["llama.cpp", "Block-Sparse-Attention"]
    assert all(isinstance(s, Submodule) for s in lucebox.submodules)
    assert isinstance(lucebox.model, ModelConfig) and lucebox.model.target_file.endswith(".gguf")
    assert lucebox.build.source_dir == "server" and lucebox.build.port == 8080


def test_no_build_table_is_none(tmp_path):
    t = load(tmp_path, "")
    assert t.build is None and t.profiles == {} and t.submodules == [] and t.pr.overrides() == {}


@pytest.mark.parametrize("body, words", [
    ('[build]\nconfigure_arg = ["-DX=1"]\n', ["[build]", "unknown key(s) configure_arg", "configure_args"]),
    ('[build]\nport = "8080"\n', ["[build]", "port must be int", "'8080'"]),
    ('[build]\ntargets = "vgpu"\n', ["targets must be list[str]"]),
    ('[build.artifacts]\n"libvgpu.so" = 3\n', ["artifacts must be dict[str, str]"]),
    ('[build.reproducible]\nunset = ["X"]\n', ["[build].reproducible", "unknown key(s) unset"]),
    ('[profiles.a]\ncmake_args = "-DX"\n', ["[profiles.a]", "cmake_args must be"]),
    ('[profiles.a]\ninherit = "b"\n', ["[profiles.a]", "unknown key(s) inherit"]),
    ('[[submodule]]\npath = "deps/x"\nbase = "abc1234"\n', ["[[submodule]] #1", "lacks required key(s) series_dir"]),
    ('[pr]\ntemplat = "hami"\n', ["[pr]", "unknown key(s) templat"]),
    ('[model]\ntarget_repo = 1\n', ["[model]", "target_repo must be str"]),
    ('build = "cmake"\n', ["[build] must be a table"]),
])
def test_bad_tables_are_one_line_errors(tmp_path, body, words):
    with pytest.raises(UsageError) as exc:
        load(tmp_path, body)
    msg = str(exc.value)
    assert "\n" not in msg and str(tmp_path / "t" / "target.toml") in msg
    for w in words:
        assert w in msg, (w, msg)

