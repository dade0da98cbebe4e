"""The object cache (lucepatch/native/objcache.py, issue 36): compiled objects reused across
variants, the bytes the same as without it.

The launcher on its own, on a two-file C program compiled in two folders with random names (as
lucepatch's work areas are), mapped by -ffile-prefix-map as builders/reproducible.py maps them: the
second compile is a hit and its object has the bytes an uncached compile there gives; a changed
flag, header or unmapped path is a miss (no false sharing); coverage runs the compiler untouched.
Then whole builds: the artifact of a build that took most of its objects from the cache has the
sha256 of the same build made without the cache (twobugs always; HAMi-core where a checkout is given).
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import FIXTURES
from lucepatch.builders.native import build_variant
from lucepatch.native import objcache
from lucepatch.target import load_target
from lucepatch.workspace import resolve_workspace

pytestmark = pytest.mark.needs("gcc")

SRC = os.environ.get("LUCEPATCH_SRC_HAMI_CORE")


def _tree(root: Path, define: str = "3", header: str = "#define X 3\n") -> Path:
    (root / "src").mkdir(parents=True)
    (root / "src" / "h.h").write_text(header)
    (root / "src" / "x.c").write_text('#include <stdio.h>\n#include "h.h"\nint f(void) { printf("%s\\n", __FILE__); '
                                      f"return X + Y; }}\n")
    (root / "build" / "sub").mkdir(parents=True)
    return root


def _compile(root: Path, store: Path | None, *extra: str, define="3", maps=True, log=None) -> tuple[bytes, Path]:
    src, build = root / "src", root / "build"
    args = ["gcc", "-g", "-O0", f"-DY={define}", f"-I{src}", *extra,
            *([f"-ffile-prefix-map={src}=src", f"-ffile-prefix-map={build}=build"] if maps else []),
            "-MD", "-MT", "sub/x.o", "-MF", "sub/x.o.d", "-c", str(src / "x.c"), "-o", "sub/x.o"]
    env = {**os.environ, **({objcache.DIR_ENV: str(store)} if store else {}), **({objcache.LOG_ENV: str(log)} if log else {})}
    cmd = [*objcache.launcher(), *args] if store else args
    subprocess.run(cmd, cwd=build, env=env, check=True)
    return (build / "sub" / "x.o").read_bytes(), build / "sub" / "x.o.d"


def test_a_second_compile_elsewhere_is_a_hit_with_the_bytes_of_an_uncached_compile(tmp_path):
    store, log = tmp_path / "store", tmp_path / "log"
    a, b = _tree(tmp_path / "wa-1f3c"), _tree(tmp_path / "wa-9be2")
    first, _ = _compile(a, store, log=log)
    hit, dep = _compile(b, store, log=log)
    assert objcache.count(log) == {"hit": 1, "miss": 1, "bypass": 0}
    plain, _ = _compile(b, None)
    assert hit == plain == first  # the object does not depend on where it was compiled
    # the dependency file CMake reads is written on a hit too, naming this tree's files
    assert dep.is_file() and str(b / "src" / "h.h") in dep.read_text()


def test_what_changes_the_object_is_a_miss(tmp_path):
    store, log = tmp_path / "store", tmp_path / "log"
    _compile(_tree(tmp_path / "a"), store, log=log)
    _compile(_tree(tmp_path / "b"), store, define="4", log=log)  # a flag
    _compile(_tree(tmp_path / "c", header="#define X 5\n"), store, log=log)  # a header
    _compile(_tree(tmp_path / "d"), store, "-O1", log=log)  # an optimisation level
    assert objcache.count(log) == {"hit": 0, "miss": 4, "bypass": 0}
    # without the prefix maps the folder is in the object, so it is in the key: no sharing
    _compile(_tree(tmp_path / "e"), store, maps=False, log=log)
    got, _ = _compile(_tree(tmp_path / "f"), store, maps=False, log=log)
    assert objcache.count(log)["hit"] == 0
    assert got == _compile(tmp_path / "f", None, maps=False)[0]


def test_coverage_and_non_compiles_bypass_the_cache(tmp_path):
    store, log = tmp_path / "store", tmp_path / "log"
    a, b = _tree(tmp_path / "a"), _tree(tmp_path / "b")
    _compile(a, store, "--coverage", log=log)
    _compile(b, store, "--coverage", log=log)
    assert objcache.count(log) == {"hit": 0, "miss": 0, "bypass": 2}
    assert not (store / "objects").exists()
    # a link line (no -c) runs as given
    rc = subprocess.run([*objcache.launcher(), "gcc", "--version"], env={**os.environ, objcache.DIR_ENV: str(store)},
                        capture_output=True).returncode
    assert rc == 0


def test_a_failing_compile_fails_the_same_and_stores_nothing(tmp_path):
    store = tmp_path / "store"
    a = _tree(tmp_path / "a")
    (a / "src" / "x.c").write_text("int f(void) { return undeclared; }\n")
    with pytest.raises(subprocess.CalledProcessError):
        _compile(a, store)
    assert not (store / "objects").exists()


_spec = importlib.util.spec_from_file_location("twobugs_fixture", FIXTURES / "twobugs" / "fixture.py")
tb = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(tb)


def _sha(b):
    return b.sha256["libvgpu.so"]


@pytest.mark.needs("cmake", "/usr/local/cuda/include/cuda.h")
def test_a_build_from_cached_objects_has_the_sha256_of_an_uncached_build(tmp_path, monkeypatch):
    repo, commits = tb.upstream(tmp_path, [])
    t = load_target(resolve_workspace(tb.workspace(tmp_path, commits[0])), "twobugs")
    monkeypatch.setenv(objcache.SWITCH_ENV, "off")
    plain = build_variant(t, repo, "baseline", tmp_path / "plain")
    assert not (tmp_path / "plain" / "objcache").exists()
    monkeypatch.setenv(objcache.SWITCH_ENV, "on")
    cold = build_variant(t, repo, "baseline", tmp_path / "c")
    shutil.rmtree(tmp_path / "c" / "builds")  # the artifact cache gone, the object cache kept
    warm = build_variant(t, repo, "baseline", tmp_path / "c")
    assert not warm.cached and _sha(plain) == _sha(cold) == _sha(warm)
    manifest = (warm.artifacts["libvgpu.so"].parent.parent / "manifest.json").read_text()
    assert '"hit": 1' in manifest


@pytest.mark.skipif(not SRC, reason="no-upstream: set LUCEPATCH_SRC_HAMI_CORE to a HAMi-core checkout")
@pytest.mark.needs("cmake", "/usr/local/cuda/include/cuda.h")
def test_hami_core_variants_share_objects_and_keep_their_bytes(tmp_path, monkeypatch):
    """One patch on the bare upstream (an add-one build of retirement) after the bare build: all but
    the patch's translation unit come from the cache, and the bytes are those of an uncached build."""
    ws = resolve_workspace(Path(__file__).resolve().parents[1])
    t = load_target(ws, "hami-core")
    add_one = [t.patches[0], next(p for p in t.patches if p.name.startswith("fix-multiprocess-treat-a-0"))]
    monkeypatch.setenv(objcache.SWITCH_ENV, "off")
    plain = build_variant(t, Path(SRC), "patched", tmp_path / "plain", patches=add_one, label="add-one")
    monkeypatch.setenv(objcache.SWITCH_ENV, "on")
    build_variant(t, Path(SRC), "baseline", tmp_path / "c")
    got = build_variant(t, Path(SRC), "patched", tmp_path / "c", patches=add_one, label="add-one")
    assert _sha(got) == _sha(plain) and got.key == plain.key
    import json
    objects = json.loads((tmp_path / "c" / "builds" / got.key / "manifest.json").read_text())["objects"]
    assert objects["miss"] <= 2 and objects["hit"] >= 12, objects
    assert hashlib.sha256(got.artifacts["libvgpu.so"].read_bytes()).hexdigest() == _sha(plain)
    assert sys.executable in objcache.launcher()
