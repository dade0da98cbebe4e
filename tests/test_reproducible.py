"""Reproducible builds (lucepatch/builders/reproducible.py): the same source tree + configuration +
toolchain give the same sha256 — in two cache folders, in two concurrent builds, and when a
maintainer rebuilds with plain `git am` of the exported patches (another folder, branch, identity
and date) and the recorded cmake command. The fixture target carries a HAMi-core-like build stamp
(git hash and branch written into a generated header, compiled into the library with __DATE__,
__TIME__ and __FILE__), so every neutraliser is needed for the bytes to match.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from conftest import REPO_ROOT, commit_all, git
from test_pr_fakehami import make_fakehami_ws

pytestmark = pytest.mark.skipif(
    shutil.which("gcc") is None or shutil.which("cmake") is None
    or not os.path.isfile("/usr/local/cuda/include/cuda.h"),
    reason="needs gcc, cmake and /usr/local/cuda/include/cuda.h to build the fixture (not a GPU: CI must have them)",
)

# HAMi-core's stamp (CMakeLists get_git_hash/get_git_branch -> src/static_config.h.in), made visible
# in the bytes: HAMi's own extern declarations happen to leave no trace, this one does.
STAMP_CMAKE = """
find_package(Git QUIET)
set(FH_GIT_HASH "")
set(FH_GIT_BRANCH "")
if(GIT_FOUND)
  execute_process(COMMAND ${GIT_EXECUTABLE} log -1 --pretty=format:%h OUTPUT_VARIABLE FH_GIT_HASH
                  OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET WORKING_DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR})
  execute_process(COMMAND ${GIT_EXECUTABLE} symbolic-ref --short -q HEAD OUTPUT_VARIABLE FH_GIT_BRANCH
                  OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET WORKING_DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR})
endif()
if(DEFINED ENV{CI_COMMIT_REF_NAME})
  set(FH_GIT_BRANCH $ENV{CI_COMMIT_REF_NAME})
endif()
configure_file(src/stamp.h.in ${CMAKE_CURRENT_BINARY_DIR}/config/stamp.h)
target_sources(vgpu PRIVATE src/stamp.c)
target_include_directories(vgpu PRIVATE ${CMAKE_CURRENT_BINARY_DIR}/config)
"""
STAMP_H = '#define FH_BUILD_STAMP "hash=@FH_GIT_HASH@ branch=@FH_GIT_BRANCH@"\n'
STAMP_C = ('#include "stamp.h"\n'
           '__attribute__((used, visibility("default"))) const char fh_build_stamp[] =\n'
           '    FH_BUILD_STAMP " built " __DATE__ " " __TIME__ " from " __FILE__;\n')
NEUTRALISE = ('[build.reproducible]\nconfigure_args = ["-DCMAKE_DISABLE_FIND_PACKAGE_Git=TRUE"]\n'
              'unset_env = ["CI_COMMIT_REF_NAME"]\nstamp_files = ["config/stamp.h"]\n')


def stamped_ws(root: Path, reproducible: str = NEUTRALISE) -> dict:
    """The fakehami fixture whose base commit carries the build stamp."""
    fx = make_fakehami_ws(root)
    up = fx["up"]
    with open(up / "CMakeLists.txt", "a") as f:
        f.write(STAMP_CMAKE)
    (up / "src" / "stamp.h.in").write_text(STAMP_H)
    (up / "src" / "stamp.c").write_text(STAMP_C)
    base = commit_all(up, "fakehami: build stamp")
    toml = fx["tdir"] / "target.toml"
    toml.write_text(toml.read_text().replace(fx["base"], base) + reproducible)
    fx["base"] = base
    return fx


def lp_build(cli, fx, cache: Path, *extra) -> dict:
    r = cli("--workspace", fx["ws"], "--cache-dir", cache, "build", "fakehami", "--source", fx["up"], "--json", *extra)
    assert r.code == 0, r.err
    return {b["variant"]: b for b in r.json["builds"]}


def sha(path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def maintainer_rebuild(fx: dict, recipe: dict, where: Path, *, series_dir: Path, names: list[str],
                       branch: str = "maint/fix-ctxless", shell: str | None = None) -> Path:
    """The README's recipe: a plain clone elsewhere, another branch and identity, `git am` of the
    exported patches in series order, then the recorded cmake commands (build folder inside)."""
    where.mkdir(parents=True, exist_ok=True)
    src = where / "HAMi-core-checkout"
    git(where, "clone", "-q", str(fx["up"]), str(src))
    git(src, "checkout", "-q", "-b", branch, fx["base"])
    who = {"GIT_COMMITTER_NAME": "Some Maintainer", "GIT_COMMITTER_EMAIL": "maint@elsewhere.invalid",
           "GIT_COMMITTER_DATE": "2031-05-05T12:00:00Z"}
    for n in names:
        git(src, "-c", "user.name=Some Maintainer", "-c", "user.email=maint@elsewhere.invalid",
            "am", "-q", str(series_dir / n), env=who)
    build = src / "build"
    env = dict(os.environ, CI_COMMIT_REF_NAME="feature/other-ci-branch")  # e.g. a GitLab CI job
    if shell is not None:  # recipe.sh unsets and exports what it must itself
        env.update(SRC=str(src), BUILD=str(build))
        r = subprocess.run(["sh", "-e", shell], env=env, capture_output=True, text=True)
        assert r.returncode == 0, r.stdout + r.stderr
    else:
        env = {k: v for k, v in env.items() if k not in recipe["unset_env"]}
        env.update(recipe["env"])
        for cmd in (recipe["configure"], recipe["build"]):
            argv = [w.replace("$SRC", str(src)).replace("$BUILD", str(build)) for w in cmd]
            r = subprocess.run(argv, env=env, capture_output=True, text=True)
            assert r.returncode == 0, r.stdout + r.stderr
    return build / "libvgpu.so"


def test_two_cache_dirs_give_identical_bytes(cli, tmp_path):
    fx = stamped_ws(tmp_path / "fx")
    a = lp_build(cli, fx, tmp_path / "cache-one", "--both")
    b = lp_build(cli, fx, tmp_path / "cache-two", "--both")
    for v in ("baseline", "patched"):
        pa, pb = a[v]["artifacts"]["libvgpu.so"], b[v]["artifacts"]["libvgpu.so"]
        assert pa["path"] != pb["path"]
        assert pa["sha256"] == pb["sha256"] == sha(pa["path"]) == sha(pb["path"])
        assert a[v]["key"] == b[v]["key"]  # the key names the inputs, not the cache folder
        data = Path(pa["path"]).read_bytes()
        assert str(tmp_path).encode() not in data  # no work-area or build-folder path
        assert b"from src/src/stamp.c" in data and b"hash= branch=" in data
        assert b"built Jan  1 2026 00:00:00" in data  # SOURCE_DATE_EPOCH = the base commit's time
    assert a["baseline"]["artifacts"]["libvgpu.so"]["sha256"] != a["patched"]["artifacts"]["libvgpu.so"]["sha256"]


def test_maintainer_recipe_gives_the_same_bytes_and_verify_accepts_the_rebuild(cli, tmp_path):
    fx = stamped_ws(tmp_path / "fx")
    cache = tmp_path / "cache"
    ev_path = tmp_path / "evidence.json"
    r = cli("--workspace", fx["ws"], "--cache-dir", cache, "verify", "--reproducer", "async-sched",
            "--source", fx["up"], "--driver", "fake", "--runs", "5", "--evidence", ev_path)
    assert r.code == 0, r.err
    ev = json.loads(ev_path.read_text())
    recipe = ev["variants"]["patched"]["recipe"]
    assert recipe["env"]["SOURCE_DATE_EPOCH"] == git(fx["up"], "log", "-1", "--format=%ct", fx["base"]).strip()
    names = (fx["tdir"] / "series").read_text().split()
    rebuilt = maintainer_rebuild(fx, recipe, tmp_path / "elsewhere", series_dir=fx["tdir"], names=names)
    assert sha(rebuilt) == ev["variants"]["patched"]["artifact"]["sha256"]
    # the baseline of this series is upstream itself (no Build-Only patch)
    base_rebuilt = maintainer_rebuild(fx, ev["variants"]["baseline"]["recipe"], tmp_path / "elsewhere-base",
                                      series_dir=fx["tdir"], names=[], branch="main-copy")
    assert sha(base_rebuilt) == ev["variants"]["baseline"]["artifact"]["sha256"]
    # verify the maintainer's bytes: the evidence names the same sha256 and the same verdict
    ev2_path = tmp_path / "evidence-rebuild.json"
    r = cli("--workspace", fx["ws"], "--cache-dir", cache, "verify", "--reproducer", "async-sched",
            "--lib", rebuilt, "--baseline-lib", base_rebuilt, "--driver", "fake", "--runs", "5",
            "--evidence", ev2_path)
    assert r.code == 0, r.err
    ev2 = json.loads(ev2_path.read_text())
    assert ev2["variants"]["patched"]["artifact"]["sha256"] == ev["variants"]["patched"]["artifact"]["sha256"]
    assert ev2["verdict"] == ev["verdict"] == "proven"


def test_recorded_recipe_sh_runs_as_is(cli, tmp_path):
    fx = stamped_ws(tmp_path / "fx")
    built = lp_build(cli, fx, tmp_path / "cache")["patched"]
    art = Path(built["artifacts"]["libvgpu.so"]["path"])
    recipe_sh = art.parent.parent / "recipe.sh"
    assert "-ffile-prefix-map=$SRC=src" in recipe_sh.read_text()
    rebuilt = maintainer_rebuild(fx, built["recipe"], tmp_path / "elsewhere", series_dir=fx["tdir"],
                                 names=(fx["tdir"] / "series").read_text().split(), shell=str(recipe_sh))
    assert sha(rebuilt) == built["artifacts"]["libvgpu.so"]["sha256"]


def test_stamp_that_names_the_commit_is_refused_and_would_change_the_bytes(cli, tmp_path):
    # stamp_files declared but the neutraliser missing: configure writes the commit id -> refused
    fx = stamped_ws(tmp_path / "fx", reproducible='[build.reproducible]\nstamp_files = ["config/stamp.h"]\n')
    r = cli("--workspace", fx["ws"], "--cache-dir", tmp_path / "c1", "build", "fakehami", "--source", fx["up"])
    assert r.code == 1
    assert "config/stamp.h names the commit being built" in r.err and "[build.reproducible]" in r.err
    # and with no [build.reproducible] at all the bytes really do depend on the commit and branch
    fx2 = stamped_ws(tmp_path / "fx2", reproducible="")
    built = lp_build(cli, fx2, tmp_path / "c2")["patched"]
    rebuilt = maintainer_rebuild(fx2, built["recipe"], tmp_path / "elsewhere", series_dir=fx2["tdir"],
                                 names=(fx2["tdir"] / "series").read_text().split())
    assert sha(rebuilt) != built["artifacts"]["libvgpu.so"]["sha256"]
    assert b"branch=feature/other-ci-branch" in rebuilt.read_bytes()


def test_concurrent_builds_share_no_path_and_agree(tmp_path):
    fx = stamped_ws(tmp_path / "fx")
    cache = tmp_path / "cache"
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    cmd = [sys.executable, "-m", "lucepatch.main", "--workspace", str(fx["ws"]), "--cache-dir", str(cache),
           "build", "fakehami", "--source", str(fx["up"]), "--json"]
    procs = [subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(3)]
    outs = [p.communicate(timeout=600) for p in procs]
    assert all(p.returncode == 0 for p in procs), [e for _, e in outs]
    arts = [json.loads(o)["builds"][0]["artifacts"]["libvgpu.so"] for o, _ in outs]
    assert len({a["sha256"] for a in arts}) == 1 and len({a["path"] for a in arts}) == 1
    assert sha(arts[0]["path"]) == arts[0]["sha256"]
    builds = cache / "builds"
    assert not [p for p in builds.iterdir() if ".tmp-" in p.name]  # every staging folder removed
    assert not list((cache / "work").iterdir())


def test_cache_key_follows_the_compiler_and_the_cuda_headers(cli, tmp_path, monkeypatch):
    fx = stamped_ws(tmp_path / "fx")
    cache = tmp_path / "cache"
    first = lp_build(cli, fx, cache)["patched"]
    assert lp_build(cli, fx, cache)["patched"]["cached"] is True
    # another compiler (here: gcc behind a wrapper that reports another version) -> another key
    wrap = tmp_path / "bin" / "my-cc"
    wrap.parent.mkdir()
    gcc = shutil.which("gcc")
    wrap.write_text(f'#!/bin/sh\nif [ "$1" = --version ]; then echo "my-cc 99.1"; exit 0; fi\nexec {gcc} "$@"\n')
    wrap.chmod(0o755)
    monkeypatch.setenv("CC", str(wrap))
    cc_build = lp_build(cli, fx, cache)["patched"]
    assert cc_build["cached"] is False and cc_build["key"] != first["key"]
    monkeypatch.delenv("CC")
    # other CUDA headers (a cuda.h that differs by one comment) -> another key
    home = tmp_path / "cuda"
    (home / "include").mkdir(parents=True)
    for e in Path("/usr/local/cuda/include").iterdir():
        if e.name != "cuda.h":
            (home / "include" / e.name).symlink_to(e)
    (home / "include" / "cuda.h").write_text(Path("/usr/local/cuda/include/cuda.h").read_text() + "/* local */\n")
    monkeypatch.setenv("CUDA_HOME", str(home))
    h_build = lp_build(cli, fx, cache)["patched"]
    assert h_build["cached"] is False and h_build["key"] not in (first["key"], cc_build["key"])


@pytest.mark.upstream
def test_real_hami_core_is_reproducible(cli, tmp_path):
    src = os.environ.get("LUCEPATCH_SRC_HAMI_CORE")
    if not src or not Path(src, "src", "static_config.h.in").is_file():
        pytest.skip("no-upstream: set LUCEPATCH_SRC_HAMI_CORE to a HAMi-core checkout")
    base = tomllib.loads((REPO_ROOT / "patches" / "hami-core" / "target.toml").read_text())["base"]
    if subprocess.run(["git", "-C", src, "cat-file", "-e", f"{base}^{{commit}}"]).returncode:
        pytest.skip(f"no-upstream: the HAMi-core checkout lacks the main line's base {base[:7]}")
    builds = []
    for c in ("cache-one", "cache-two"):
        r = cli("--workspace", REPO_ROOT, "--cache-dir", tmp_path / c, "build", "hami-core", "--source", src, "--json")
        assert r.code == 0, r.err
        builds.append(r.json["builds"][0])
    shas = [b["artifacts"]["libvgpu.so"]["sha256"] for b in builds]
    assert shas[0] == shas[1]
    fx = {"up": Path(src), "base": base}
    tdir = REPO_ROOT / "patches" / "hami-core"
    rebuilt = maintainer_rebuild(fx, builds[0]["recipe"], tmp_path / "elsewhere", series_dir=tdir,
                                 names=(tdir / "series").read_text().split())
    assert sha(rebuilt) == shas[0]
    header = (rebuilt.parent / "config" / "static_config.h").read_text()
    assert "GIT_HASH_;" in header and "GIT_BRANCH_;" in header  # the stamp, neutralised explicitly


# ---- the same bytes from two venvs (issue 24): the include folders a build reads are mapped too ----

NVML_PROBE_C = ('#include <nvml.h>\n'
                '__attribute__((visibility("default"))) nvmlReturn_t fh_nvml_probe(nvmlDevice_t d) {\n'
                '    (void)d;\n    return NVML_SUCCESS;\n}\n')


def venv_with_nvml(where: Path) -> Path:
    """A venv whose own site-packages hold nvml.h where pip puts it (nvidia/cu13/include), as
    `pip install nvidia-nvml-dev` in that venv would; the rest (lucepatch's dependencies) comes from
    the running environment. Returns its python."""
    from lucepatch.native.toolchain import nvml_include

    import venvs

    py = venvs.make(where)
    site = Path(subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                               capture_output=True, text=True, check=True).stdout.strip())
    inc = site / "nvidia" / "cu13" / "include"
    inc.mkdir(parents=True)
    shutil.copy(nvml_include() / "nvml.h", inc / "nvml.h")
    return py


def build_in(py: Path, ws: Path, target: str, src: Path, cache: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV",)}
    env["PYTHONPATH"] = str(REPO_ROOT)
    r = subprocess.run([str(py), "-m", "lucepatch", "--workspace", str(ws), "--cache-dir", str(cache), "build", target,
                        "--source", str(src), "--json"], capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)["builds"][0]


def test_two_venvs_give_identical_bytes(tmp_path):
    """The NVML headers pip installs sit at a different path in every venv; a Debug build records
    the include folders it read in its line table, so without a prefix map for them the same source
    gave a different libvgpu.so per venv (two cache folders in one venv agreed)."""
    from lucepatch.native.toolchain import cuda_include

    if (cuda_include() / "nvml.h").is_file() or Path("/usr/include/nvml.h").is_file():
        pytest.skip("no-tool: this machine's CUDA toolkit ships nvml.h, so no venv's copy would be read")
    fx = make_fakehami_ws(tmp_path / "fx")
    (fx["up"] / "src" / "nvml_probe.c").write_text(NVML_PROBE_C)
    with open(fx["up"] / "CMakeLists.txt", "a") as f:
        f.write("target_sources(vgpu PRIVATE src/nvml_probe.c)\n")
    base = commit_all(fx["up"], "fakehami: a function typed by nvml.h, as HAMi-core's NVML hooks are")
    toml = fx["tdir"] / "target.toml"
    toml.write_text(toml.read_text().replace(fx["base"], base).replace('targets = ["vgpu"]', 'targets = ["vgpu"]\nneeds = ["cuda.h", "nvml.h"]'))
    pys = [venv_with_nvml(tmp_path / name) for name in ("venv-one", "a-longer-prefix" + "/x" * 5 + "/venv-two")]
    builds = [build_in(py, fx["ws"], "fakehami", fx["up"], tmp_path / f"cache-{i}") for i, py in enumerate(pys)]
    incs = [next(f for f in b["recipe"]["configure"] if "-I" in f) for b in builds]
    assert "venv-one" in incs[0] and "venv-two" in incs[1]  # each build read its own venv's nvml.h ...
    art = [Path(b["artifacts"]["libvgpu.so"]["path"]) for b in builds]
    assert all(b"fh_nvml_probe" in a.read_bytes() for a in art)
    assert b"venv-one" not in art[0].read_bytes() and b"venv-two" not in art[1].read_bytes()  # ... and names neither
    assert sha(art[0]) == sha(art[1])


def test_compiled_helpers_do_not_depend_on_where_their_sources_are(tmp_path):
    """compiling.py (the simulated driver, the reproducers, the trace interposer): the same sources
    and headers in two other folders, built into two caches with -g, give the same bytes — the
    folders are mapped (`inc0`, `src0`, `out`), the working directory is the output folder."""
    from lucepatch.native import compiling

    outs = []
    for where in ("one", "somewhere/much/deeper/two"):
        d = tmp_path / where
        (d / "include").mkdir(parents=True)
        (d / "include" / "lp_probe.h").write_text("typedef struct { int device; } lp_probe_t;\n#define LP_WHERE __FILE__\n")
        (d / "probe.c").write_text('#include "lp_probe.h"\nconst char *lp_where(lp_probe_t *p) { (void)p; return LP_WHERE; }\n')
        unit = compiling.Unit(what="probe", steps=[[compiling.cc(), "-shared", "-fPIC", "-g", "-O0", "-o", "{out}/libprobe.so",
                                                     str(d / "probe.c"), f"-I{d / 'include'}"]],
                              outputs=["libprobe.so"], inputs=[d / "probe.c"])
        outs.append(compiling.build_cached(unit, tmp_path / f"cache-{where.replace('/', '-')}") / "libprobe.so")
    data = [o.read_bytes() for o in outs]
    assert str(tmp_path).encode() not in data[0] and str(tmp_path).encode() not in data[1]
    assert b"src0/probe.c" in data[0] and b"inc0" in data[0]  # __FILE__ and the header folder, under fixed names
    assert sha(outs[0]) == sha(outs[1])


@pytest.mark.upstream
def test_real_hami_core_same_bytes_from_two_venvs(tmp_path):
    src = os.environ.get("LUCEPATCH_SRC_HAMI_CORE")
    if not src or not Path(src, "src", "static_config.h.in").is_file():
        pytest.skip("no-upstream: set LUCEPATCH_SRC_HAMI_CORE to a HAMi-core checkout")
    from lucepatch.native.toolchain import cuda_include

    if (cuda_include() / "nvml.h").is_file() or Path("/usr/include/nvml.h").is_file():
        pytest.skip("no-tool: this machine's CUDA toolkit ships nvml.h, so no venv's copy would be read")
    pys = [venv_with_nvml(tmp_path / name) for name in ("venv-one", "elsewhere/venv-two")]
    builds = [build_in(py, REPO_ROOT, "hami-core", Path(src), tmp_path / f"cache-{i}") for i, py in enumerate(pys)]
    assert builds[0]["key"] != builds[1]["key"]  # the recipes name their own venv's headers
    assert builds[0]["artifacts"]["libvgpu.so"]["sha256"] == builds[1]["artifacts"]["libvgpu.so"]["sha256"]
