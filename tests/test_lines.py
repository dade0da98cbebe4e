"""Which series line fits a node's libvgpu.so (`node --lib/--image/--pod`, lucepatch/lines/).

Fixture libraries are small ELF files compiled here with the symbols a HAMi-core build carries
(shrreg_major/minor_version returning the region version; GIT_HASH_/GIT_BRANCH_ as builds before
HAMi-core 048efe9 defined them); one test builds the real libvgpu.so of every line in this
workspace from LUCEPATCH_SRC_HAMI_CORE, baseline and patched, and asks doctor which line it is.
"""

from __future__ import annotations

import base64
import io
import json
import os
import shutil
import subprocess
import tarfile
import uuid

import pytest

from conftest import REPO_ROOT

import hamilib

from lucepatch.errors import CheckFailed, UsageError
from lucepatch.lines.fit import Line, compat_data, drop_in_commands, fit_node, load_lines, releases_of_commit
from lucepatch.main import main
from lucepatch.native.libfacts import read_lib, returned_immediate
from lucepatch.services import node_sources as sources
from lucepatch.workspace import resolve_workspace

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="no-tool: needs gcc")

SRC = r"""
#include <stddef.h>
#define VISIBLE __attribute__((visibility("default")))
int shrreg_major_version(void) { return 1; }
int shrreg_minor_version(void) { return MINOR; }
VISIBLE int cuMemAlloc_v2(void) { return 0; }
VISIBLE int cuGetProcAddress(void) { return 0; }
VISIBLE int cuMemGetInfo_v2(void) { return 0; }
VISIBLE int nvmlInit_v2(void) { return 0; }
#ifdef STAMP
size_t GIT_HASH_fb11ec3;  /* HAMi-core before 048efe9: a definition in config/static_config.h */
size_t GIT_BRANCH_main;
#endif
"""

MAIN, V25 = "8f3a89c67b037d8fdfe6c4cd4d8c4f0cd6504811", "54b13055032577b9487d108fa1b18ccaf56274cc"


def _lib(tmp, name, *, minor=2, flags=(), stamp=False, strip=False, src=SRC):
    c = tmp / f"{name}.c"
    c.write_text(src.replace("MINOR", str(minor)))
    out = tmp / f"{name}.so"
    cmd = ["gcc", "-shared", "-fPIC", "-O0", *flags, "-o", str(out), str(c)] + (["-DSTAMP", "-fcommon"] if stamp else [])
    subprocess.run(cmd, check=True)
    if strip:
        subprocess.run(["strip", "--strip-all", str(out)], check=True)
    return out


def two_lines() -> tuple[list[Line], dict]:
    """The packaged data plus a line for HAMi v2.5.x on 54b1305 (region 1.1), as a second line is laid out."""
    data = compat_data()
    data = {**data, "series": {**data["series"], "hami-core-v2.5": {
        "base": V25, "shrreg": "1.1", "compatible": ["v2.5.0", "v2.5.1", "v2.5.2", "v2.5.3"]}}}
    return load_lines(data), data


# ---- reading the library ---------------------------------------------------------------------------


def test_reads_region_and_no_commit_from_a_debug_build(tmp_path):
    f = read_lib(_lib(tmp_path, "debug", flags=["-g"]))
    assert f.shrreg == "1.2" and f.shrreg_from == ".dynsym"
    assert f.is_hami_core and f.debug_info and f.machine == "x86-64"
    assert f.git_hash is None and any("048efe9" in n for n in f.notes)


def test_reads_the_stamp_of_old_builds(tmp_path):
    f = read_lib(_lib(tmp_path, "old", minor=1, stamp=True))
    assert (f.git_hash, f.git_branch) == ("fb11ec3", "main")


def test_release_build_keeps_the_region_in_symtab_stripped_loses_it(tmp_path):
    hidden = ["-fvisibility=hidden"]
    f = read_lib(_lib(tmp_path, "release", flags=hidden))
    assert f.shrreg == "1.2" and f.shrreg_from == ".symtab" and f.is_hami_core
    f = read_lib(_lib(tmp_path, "stripped", flags=hidden, strip=True))
    assert f.shrreg is None and f.shrreg_from == "" and f.is_hami_core
    assert any("not determinable" in n for n in f.notes)


def test_immediate_decoding():
    assert returned_immediate(bytes.fromhex("f30f1efab802000000c3"), "x86-64") == 2  # endbr64; mov eax,2; ret
    assert returned_immediate(bytes.fromhex("c3b802000000"), "x86-64") is None  # ret first
    assert returned_immediate((0x52800000 | (3 << 5)).to_bytes(4, "little") + bytes.fromhex("c0035fd6"), "aarch64") == 3


def test_not_an_elf_is_a_usage_error(tmp_path):
    p = tmp_path / "libvgpu.so"
    p.write_text("not a library")
    with pytest.raises(UsageError, match="not an ELF file"):
        read_lib(p)


# ---- which line ----------------------------------------------------------------------------------------


def test_region_1_2_is_the_v2_9_line(tmp_path):
    """Region 1.2 nodes run HAMi v2.8.2 .. v2.9.0, whose HAMi-core is an ancestor of 8f3a89c: the v2.9 line.
    The main line (upstream main, 52f33fc) has region 1.2 too but serves no release, so it is no node's answer."""
    fit = fit_node(read_lib(_lib(tmp_path, "l12")), load_lines())
    assert fit.line is not None and fit.line.target == "hami-core-v2.9"
    assert "shared region 1.2" in fit.why and "--hami-version" in fit.why
    main = next(l for l in load_lines() if l.target == "hami-core")
    assert main.shrreg == "1.2" and main.compatible == [] and main not in fit.candidates


def test_region_1_1_names_the_v2_5_line_when_there_is_one(tmp_path):
    facts = read_lib(_lib(tmp_path, "l11", minor=1))
    lines, data = two_lines()
    fit = fit_node(facts, lines, data=data, hami_versions=["2.5.1"])
    assert fit.line.target == "hami-core-v2.5" and fit.releases == ["v2.5.1"]
    # the packaged data has that line now (patches/hami-core-v2.5)
    assert fit_node(facts, load_lines(), hami_versions=["2.5.1"]).line.target == "hami-core-v2.5"
    # without a line for region 1.1 nothing fits, and the report says which releases use it
    data = compat_data()
    main_only = {**data, "series": {"hami-core": data["series"]["hami-core"]}}
    fit = fit_node(facts, load_lines(main_only), data=main_only)
    assert fit.line is None and "shared region 1.1" in fit.why and "v2.4.1" in fit.why


def test_release_outside_every_line_and_region_clash(tmp_path):
    lines, data = two_lines()
    fit = fit_node(read_lib(_lib(tmp_path, "l11", minor=1)), lines, data=data, hami_versions=["v2.8.1"])
    assert fit.line is None and "no line serves HAMi v2.8.1" in fit.why
    fit = fit_node(read_lib(_lib(tmp_path, "l12", minor=2)), lines, data=data, hami_versions=["v2.5.1"])
    assert fit.line is None and "region 1.2" in fit.why and "ships region 1.1" in fit.why


def test_embedded_commit_names_the_release(tmp_path):
    assert releases_of_commit("fb11ec3") == ["v2.4.0"] and releases_of_commit("fb11") == []
    fit = fit_node(read_lib(_lib(tmp_path, "v240", minor=1, stamp=True)), load_lines())
    assert fit.releases == ["v2.4.0"] and fit.releases_from == "embedded commit" and fit.line is None


def test_stripped_library_needs_the_release(tmp_path):
    facts = read_lib(_lib(tmp_path, "s", flags=["-fvisibility=hidden"], strip=True))
    fit = fit_node(facts, load_lines())
    assert fit.line is None and "--hami-version" in fit.why
    fit = fit_node(facts, load_lines(), hami_versions=["v2.9.0"])
    assert fit.line.target == "hami-core-v2.9" and "v2.9.0" in fit.why


def test_not_hami_core(tmp_path):
    facts = read_lib(_lib(tmp_path, "other", src="int f(void) { return 1; }\n"))
    fit = fit_node(facts, load_lines())
    assert fit.line is None and "not a HAMi-core libvgpu.so" in fit.why


def test_commands_name_the_line_and_the_node(tmp_path):
    lines, _ = two_lines()
    v25 = next(l for l in lines if l.target == "hami-core-v2.5")
    cmds = drop_in_commands(v25, installed="/tmp/node.so", releases=["v2.5.1"], image="hami:v2.5.1")
    assert cmds[1] == "lucepatch build hami-core-v2.5 --source ~/src/HAMi-core"
    assert "verify --all --target hami-core-v2.5" in cmds[2]
    assert "--installed /tmp/node.so --hami-version v2.5.1 --dry-run" in cmds[3]
    assert cmds[4].startswith("lucepatch build hami-device-plugin --from hami:v2.5.1")


def test_workspace_completes_the_line(tmp_path):
    line = next(l for l in load_lines(ws=resolve_workspace(REPO_ROOT)) if l.target == "hami-core")
    assert line.in_workspace and line.version and line.profile == "default"
    assert "-DCMAKE_BUILD_TYPE=Debug" in line.profile_detail


# ---- the verb -----------------------------------------------------------------------------------------


def _doctor(capsys, *args):
    rc = main(["--workspace", str(REPO_ROOT), "node", *args])
    out, err = capsys.readouterr()
    return rc, out, err


def test_doctor_lib_names_the_line_and_the_commands(tmp_path, capsys):
    """A HAMi v2.8.x/v2.9.0 node (upstream names at 8f3a89c's state, region 1.2): the v2.9 line replaces it."""
    lib = hamilib.upstream_like(tmp_path, "node", flags=["-g"], line="hami-core-v2.9")
    rc, out, err = _doctor(capsys, "--lib", str(lib))
    assert rc == 0, err
    assert "shared region  1.2 (from .dynsym)" in out
    assert "line           hami-core-v2.9 " in out and "profile        default (" in out
    assert "lucepatch build hami-core-v2.9 --source ~/src/HAMi-core" in out
    rc, out, err = _doctor(capsys, "--lib", str(lib), "--hami-version", "v2.8.3", "--json")
    doc = json.loads(out)
    assert rc == 0 and doc["ok"] and doc["node_library"]["fit"]["line"]["target"] == "hami-core-v2.9"
    assert doc["node_library"]["library"]["shrreg"] == "1.2"


def test_doctor_lib_at_upstream_main_names_the_main_line(tmp_path, capsys):
    """A build of upstream main 52f33fc (no HAMi release vendors it; region 1.2 like v2.9's): its names put it
    at the main line's base, so the main line replaces it although it serves no release, and with a release
    named the release decides (v2.9.0: the v2.9 line, whose build then lacks 52f33fc's names)."""
    lib = hamilib.upstream_like(tmp_path, "main", flags=["-g"])
    rc, out, err = _doctor(capsys, "--lib", str(lib))
    assert rc == 0, err
    assert "line           hami-core " in out and "which holds line hami-core's base 52f33fc" in out
    assert "lucepatch build hami-core --source ~/src/HAMi-core" in out
    rc, out, err = _doctor(capsys, "--lib", str(lib), "--hami-version", "v2.9.0")
    assert rc == 1 and "line           hami-core-v2.9 " in out and "add_chunk_from_pool_async" in out


def test_doctor_lib_names_the_v2_5_line_for_an_upstream_v2_5_1_node(tmp_path, capsys):
    """Upstream HAMi v2.5.1's library (HAMi-core 54b1305's names, region 1.1): the v2.5 line replaces it.
    (An Olares node runs the beclab fork instead: tests/test_identity.py.)"""
    node = hamilib.upstream_like(tmp_path, "v251", line="hami-core-v2.5")
    rc, out, err = _doctor(capsys, "--lib", str(node), "--hami-version", "v2.5.1")
    assert rc == 0, err
    assert "line           hami-core-v2.5 " in out and "lucepatch build hami-core-v2.5" in out


def test_doctor_lib_without_a_line_exits_1_with_the_reason(tmp_path, capsys):
    node = hamilib.upstream_like(tmp_path, "v2x", line="hami-core-v2.5")
    rc, out, err = _doctor(capsys, "--lib", str(node), "--hami-version", "v2.10.0")
    assert rc == 1
    assert "no series line fits" in err and len(err.strip().splitlines()) == 1
    assert "line           none fits" in out


def test_doctor_bad_input(tmp_path, capsys):
    rc, _, err = _doctor(capsys, "--lib", str(tmp_path / "missing.so"))
    assert rc == 2 and "not found" in err
    junk = tmp_path / "junk.so"
    junk.write_bytes(b"\x7fELF" + b"\0" * 8)
    rc, _, err = _doctor(capsys, "--lib", str(junk))
    assert rc == 2 and "not a readable ELF file" in err
    rc, _, err = _doctor(capsys, "--lib", str(junk), "--image", "x")  # one library at a time: the table says so
    assert rc == 2 and "node --lib does not use --image (used by node --image)" in err


# ---- sources ------------------------------------------------------------------------------------------


def test_pick_library_prefers_the_versioned_plugin_copy():
    assert sources.pick_library({"libvgpu.so": b"a", "libvgpu.so.v2.5.1": b"b"}) == ("libvgpu.so.v2.5.1", b"b")
    assert sources.pick_library({"libvgpu.so": b"a"}) == ("libvgpu.so", b"a")
    assert sources.pick_library({"libvgpu.so.1": b"a", "libvgpu.so.2": b"b", "x": b""}) is None


def test_pod_output_decoding():
    data = bytes(range(256)) * 3
    text = base64.encodebytes(data).decode()  # wrapped lines, as coreutils base64 prints
    assert sources.decode_exec_output(text, "pod p") == data
    with pytest.raises(CheckFailed, match="base64: /usr/local/vgpu/libvgpu.so: No such file"):
        sources.decode_exec_output("base64: /usr/local/vgpu/libvgpu.so: No such file or directory\n", "pod p")


def test_pod_source_reads_through_exec(tmp_path, monkeypatch):
    """from_pod execs `base64 PATH` in the pod through the kubernetes client and decodes the output."""
    pytest.importorskip("kubernetes")
    import kubernetes.stream

    from lucepatch.k8s import client as kclient

    lib = _lib(tmp_path, "podlib").read_bytes()
    seen = {}

    class Api:
        def connect_get_namespaced_pod_exec(self, *a, **kw):
            raise AssertionError("called only through kubernetes.stream.stream")

    class K8s:
        CoreV1Api = Api

    def fake_stream(fn, name, namespace, **kw):
        seen.update(name=name, namespace=namespace, **kw)
        return base64.encodebytes(lib).decode()

    monkeypatch.setattr(kclient, "load", lambda **kw: K8s)
    monkeypatch.setattr(kubernetes.stream, "stream", fake_stream)
    data, where = sources.from_pod("vllm-0", namespace="ai", container="main")
    assert data == lib and where == "pod ai/vllm-0:/usr/local/vgpu/libvgpu.so"
    assert seen["command"] == ["base64", "/usr/local/vgpu/libvgpu.so"] and seen["container"] == "main"
    assert seen["stdin"] is False and seen["tty"] is False


def test_pod_needs_a_cluster(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("LUCEPATCH_KUBECONFIG", raising=False)
    rc, _, err = _doctor(capsys, "--pod", "vllm-0")
    assert rc == 3 and "LUCEPATCH_KUBECONFIG" in err


@pytest.mark.skipif(not os.environ.get("LUCEPATCH_KUBECONFIG"), reason="no-cluster: set LUCEPATCH_KUBECONFIG")
def test_pod_on_a_live_cluster(capsys):
    pod, ns = os.environ.get("LUCEPATCH_TEST_POD", ""), os.environ.get("LUCEPATCH_TEST_NAMESPACE", "default")
    if not pod:
        pytest.skip("no-cluster: set LUCEPATCH_TEST_POD to a pod that maps HAMi's libvgpu.so")
    rc, out, err = _doctor(capsys, "--pod", pod, "--namespace", ns, "--json")
    assert rc in (0, 1), err
    assert json.loads(out)["node_library"]["library"]["is_hami_core"]


def _docker():
    try:
        import docker

        c = docker.from_env(timeout=10)
        c.ping()
        return c
    except Exception:
        return None


def test_doctor_image_reads_the_plugin_copy_without_running_it(tmp_path, capsys):
    client = _docker()
    if client is None:
        pytest.skip("no-docker: no Docker daemon answers")
    lib = hamilib.upstream_like(tmp_path, "plugin", flags=["-g"])
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        info = tarfile.TarInfo("k8s-vgpu/lib/nvidia/libvgpu.so.v2.9.0")
        info.size = lib.stat().st_size
        tar.addfile(info, io.BytesIO(lib.read_bytes()))
    tag = f"lucepatch-test/plugin-lib:{uuid.uuid4().hex[:8]}"
    # an image with no shell and no binaries: it can only be read, never run
    subprocess.run(["docker", "import", "-", tag], input=buf.getvalue(), check=True, capture_output=True)
    try:
        saved = tmp_path / "from-image.so"
        rc, out, err = _doctor(capsys, "--image", tag, "--save", str(saved), "--json")
        assert rc == 0, err
        doc = json.loads(out)["node_library"]
        assert doc["source"] == f"{tag}:/k8s-vgpu/lib/nvidia/libvgpu.so.v2.9.0"
        assert doc["library"]["sha256"] == __import__("hashlib").sha256(lib.read_bytes()).hexdigest()
        assert doc["fit"]["line"]["target"] == "hami-core"
        assert any(c.startswith(f"lucepatch build hami-device-plugin --from {tag}") for c in doc["fit"]["commands"])
        assert saved.read_bytes() == lib.read_bytes()
        assert not client.containers.list(all=True, filters={"ancestor": tag})  # the reading container is gone
        rc, _, err = _doctor(capsys, "--image", tag, "--lib-path", "/usr/lib/nothing.so")
        assert rc == 1 and "no libvgpu.so at /usr/lib/nothing.so" in err
    finally:
        client.images.remove(tag, force=True)
    rc, _, err = _doctor(capsys, "--image", tag)
    assert rc == 2 and "not present locally" in err


# ---- the real thing ----------------------------------------------------------------------------------

SRC_HAMI = os.environ.get("LUCEPATCH_SRC_HAMI_CORE")


@pytest.mark.skipif(not SRC_HAMI, reason="no-upstream: set LUCEPATCH_SRC_HAMI_CORE to a HAMi-core checkout")
@pytest.mark.parametrize("line", [l.target for l in load_lines(ws=resolve_workspace(REPO_ROOT)) if l.in_workspace])
def test_doctor_names_the_line_of_real_builds(line, tmp_path, capsys):
    """Every line of this workspace: its libvgpu.so built from its base (baseline) and with its
    series (patched) is recognised as that line's."""
    for variant in ("--baseline", None):
        args = ["--workspace", str(REPO_ROOT), "--cache-dir", str(tmp_path / "cache"), "build", line,
                "--source", SRC_HAMI, "--json"] + ([variant] if variant else [])
        assert main(args) == 0
        build = json.loads(capsys.readouterr().out)["builds"][0]
        lib = build["artifacts"]["libvgpu.so"]["path"]
        rc, out, err = _doctor(capsys, "--lib", lib, "--json")
        assert rc == 0, err
        doc = json.loads(out)["node_library"]
        assert doc["library"]["is_hami_core"] and doc["library"]["debug_info"]
        assert doc["fit"]["line"]["target"] == line, doc["fit"]["why"]
