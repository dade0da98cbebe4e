"""What runs in the pod (issue 27 item 0): `node --pod-root DIR` / `--pod NAME` and the node report
that doctor, deploy, verify and build --image read offline.

Fixture pods are directory trees made here: proc/1/environ (the container's environment, as HAMi's
device plugin sets it), etc/ld.so.preload, proc/driver/nvidia/version, the library at
/usr/local/vgpu/libvgpu.so (tests/hamilib.py) and a libc.so.6 (this machine's, copied). The `--pod`
path runs the real POD_SCRIPT with sh against the same tree and feeds its output through the
kubernetes client's exec API (the stream function replaced, as a pod's exec would return it).
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import REPO_ROOT, evidence_doc

import hamilib
from lucepatch.errors import UsageError
from lucepatch.lines import pod
from lucepatch.main import main
from lucepatch.native import elf
from lucepatch.node.report import load_node_report

pytestmark = pytest.mark.needs("gcc")
SCHEMA = json.loads((REPO_ROOT / "docs" / "schema" / "node-report.schema.json").read_text())
DRIVER_LINE = "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.95.05  Tue Sep 23 09:39:56 UTC 2025\nGCC version:  gcc 12\n"


def make_pod(root: Path, *, env: dict, preload: str | None = None, lib: Path | None = None, driver: bool = True,
             libc: bool = True) -> Path:
    (root / "proc" / "1").mkdir(parents=True)
    (root / "proc" / "1" / "environ").write_bytes(b"".join(f"{k}={v}".encode() + b"\0" for k, v in env.items()))
    if preload is not None:
        (root / "etc").mkdir()
        (root / "etc" / "ld.so.preload").write_text(preload)
    if lib is not None:
        (root / "usr" / "local" / "vgpu").mkdir(parents=True)
        shutil.copy(lib, root / "usr" / "local" / "vgpu" / "libvgpu.so")
    if driver:
        (root / "proc" / "driver" / "nvidia").mkdir(parents=True)
        (root / "proc" / "driver" / "nvidia" / "version").write_text(DRIVER_LINE)
    if libc and elf.system_libc() is not None:
        d = root / "lib" / "x86_64-linux-gnu"
        d.mkdir(parents=True)
        shutil.copy(elf.system_libc(), d / "libc.so.6")
    return root


BASE_ENV = {"PATH": "/usr/bin", "NVIDIA_VISIBLE_DEVICES": "GPU-0", "CUDA_DEVICE_MEMORY_SHARED_CACHE": "/usr/local/vgpu/x.cache"}


@pytest.fixture(scope="module")
def pods(tmp_path_factory):
    d = tmp_path_factory.mktemp("pods")
    up = hamilib.upstream_like(d, "up25", line="hami-core-v2.5")
    fork = hamilib.fork_like(d, "fork")  # _dl_sym bound lazily, as the real fork has it
    fork_load = hamilib.fork_like(d, "fork-load", dl_sym="load")  # resolved when it loads
    return {
        "upstream": make_pod(d / "upstream", env={**BASE_ENV, "CUDA_DEVICE_MEMORY_LIMIT_0": "4096m",
                                                   "CUDA_DEVICE_SM_LIMIT": "50"},
                             preload="/usr/local/vgpu/libvgpu.so\n", lib=up),
        "fork": make_pod(d / "fork", env={**BASE_ENV, "LD_PRELOAD": "/usr/local/vgpu/libvgpu.so",
                                          "CUDA_DEVICE_MEMORY_LIMIT_0": "0m", "CUDA_DEVICE_GPU_MODE_0": "1",
                                          "CUDA_DEVICE_REAL_MEMORY_LIMIT_0": "24564m", "CUDA_DEVICE_SM_LIMIT": "100",
                                          "SCHEDULER_WEBSOCKET_URL": "ws://gpu-scheduler.os-gpu:6000"}, lib=fork),
        "fork_load": make_pod(d / "fork-load", env={**BASE_ENV, "LD_PRELOAD": "/usr/local/vgpu/libvgpu.so",
                                                    "SCHEDULER_WEBSOCKET_URL": "ws://gpu-scheduler.os-gpu:6000"},
                              lib=fork_load),
        "exclusive": make_pod(d / "exclusive", env={**BASE_ENV, "CUDA_DEVICE_GPU_MODE_0": "0",
                                                    "SCHEDULER_WEBSOCKET_URL": "ws://gpu-scheduler.os-gpu:6000"}),
        "none": make_pod(d / "none", env={"PATH": "/usr/bin"}, driver=False),
        "broken": make_pod(d / "broken", env=BASE_ENV, preload="/usr/local/vgpu/libvgpu.so\n"),
        "disabled": make_pod(d / "disabled", env={**BASE_ENV, "CUDA_DISABLE_CONTROL": "true"}, lib=up),
        "libs": {"up": up, "fork": fork, "fork_load": fork_load}, "dir": d,
    }


def _cli(capsys, *args):
    rc = main(["--workspace", str(REPO_ROOT), *map(str, args)])
    out, err = capsys.readouterr()
    return rc, out, err


def _report(capsys, root, tmp_path, name="r.json", *extra):
    path = tmp_path / name
    rc, out, err = _cli(capsys, "node", "--pod-root", root, "--save-report", path, *extra)
    import jsonschema

    doc = json.loads(path.read_text())
    jsonschema.validate(doc, SCHEMA)
    return rc, out, err, path, doc


def test_upstream_pod(pods, capsys, tmp_path):
    rc, out, err, path, doc = _report(capsys, pods["upstream"], tmp_path)
    assert rc == 0, err
    inj = doc["injection"]
    assert inj["state"] == "injected" and inj["via"] == ["/etc/ld.so.preload"] and inj["library_path"] == pod.HAMI_LIB
    assert doc["library"]["sha256"] == elf_sha(pods["libs"]["up"]) and doc["library"]["identity"]["kind"] == "upstream"
    assert doc["driver"] == {"value": "580.95.05", "source": "/proc/driver/nvidia/version", "note": ""}
    assert doc["driver_version"] == "580.95.05"  # what the CUDA/driver gate reads (lucepatch/node/driver.py)
    from lucepatch.node.report import node_driver

    assert str(node_driver(report=str(path))) == "580.95.05"
    assert doc["limits"]["memory_mib"] == {"0": 4096.0} and doc["limits"]["sm_percent"] == {"all": 50}
    assert doc["vendor"]["value"] == "HAMi" and doc["hami"]["value"] is None and "--hami-version" in doc["hami"]["note"]
    assert doc["glibc"]["value"] and doc["loads"]["ok"] is True
    assert "injection      injected" in out and "drop-in" in out


def elf_sha(p):
    import hashlib

    return hashlib.sha256(Path(p).read_bytes()).hexdigest()


def test_fork_pod(pods, capsys, tmp_path):
    rc, out, err, path, doc = _report(capsys, pods["fork"], tmp_path, "r.json", "--hami-version", "v2.6.8")
    assert rc == 1 and "no drop-in" in err
    assert doc["injection"]["state"] == "injected" and doc["injection"]["via"] == ["LD_PRELOAD"]
    ident = doc["library"]["identity"]
    assert ident["kind"] == "fork" and "SCHEDULER_WEBSOCKET_URL" in ident["env"]
    assert doc["vendor"]["value"] == "beclab (Olares)" and "SCHEDULER_WEBSOCKET_URL" in doc["vendor"]["source"]
    assert doc["limits"]["gpu_mode"] == {"0": "memory slicing"} and doc["limits"]["real_memory_mib"] == {"0": 24564.0}
    assert any("0m" in n for n in doc["notes"])
    assert doc["hami"] == {"value": "v2.6.8", "source": "--hami-version", "note": ""}
    glibc = tuple(int(x) for x in doc["glibc"]["value"].split("."))
    if glibc >= (2, 34):  # the pod's own libc.so.6 was read: the fork binds _dl_sym lazily, so it loads there
        assert doc["loads"]["ok"] is True and doc["loads"]["problems"] == []
        assert doc["loads"]["lazy"][0].startswith("_dl_sym@GLIBC_PRIVATE is bound lazily")
        assert "loads          yes" in out and "LD_BIND_NOW=1" in out
    assert "1. exclusive mode" in out


def test_a_library_that_resolves_a_gone_symbol_at_load_does_not_load_in_the_pod(pods, capsys, tmp_path):
    rc, out, err, path, doc = _report(capsys, pods["fork_load"], tmp_path)
    glibc = tuple(int(x) for x in doc["glibc"]["value"].split("."))
    if glibc < (2, 34):
        pytest.skip(f"no-tool: this machine's glibc {doc['glibc']['value']} still exports _dl_sym")
    assert doc["loads"]["ok"] is False and "_dl_sym@GLIBC_PRIVATE" in doc["loads"]["problems"][0]
    assert "loads          NO" in out


def test_exclusive_pod_is_not_injected_and_says_why(pods, capsys, tmp_path):
    rc, out, err, path, doc = _report(capsys, pods["exclusive"], tmp_path)
    assert rc == 1 and "no libvgpu.so runs" in err
    assert doc["injection"]["state"] == "not-injected-exclusive" and doc["library"] is None
    assert "CUDA_DEVICE_GPU_MODE_0=0" in doc["injection"]["message"] and "beclab/Olares#3135" in doc["injection"]["message"]
    assert doc["limits"]["gpu_mode"] == {"0": "exclusive"}


@pytest.mark.parametrize("which,state", [("none", "not-injected"), ("broken", "preload-missing"),
                                         ("disabled", "mounted-not-preloaded")])
def test_other_pods(pods, capsys, tmp_path, which, state):
    rc, out, err, path, doc = _report(capsys, pods[which], tmp_path)
    assert doc["injection"]["state"] == state
    if which == "none":
        assert doc["driver"]["value"] is None and "not visible" in doc["driver"]["note"] and rc == 1
    if which == "broken":
        assert "cannot be preloaded" in doc["injection"]["message"] and doc["library"] is None
    if which == "disabled":
        assert "CUDA_DISABLE_CONTROL=true" in doc["injection"]["message"] and doc["library"]["identity"]["kind"] == "upstream"


def test_the_report_read_offline_gives_the_same_answer(pods, capsys, tmp_path):
    for which in ("upstream", "fork"):
        rc, out, err, path, doc = _report(capsys, pods[which], tmp_path, f"{which}.json")
        rc1, out1, _ = _cli(capsys, "node", "--pod-root", pods[which], "--json")
        rc2, out2, _ = _cli(capsys, "node", "--node-report", path, "--json")
        a, b = json.loads(out1)["node_library"], json.loads(out2)["node_library"]
        assert rc1 == rc2 and a["drop_in"] == b["drop_in"]
        assert a["identity"]["kind"] == b["identity"]["kind"] and a["judgement"] == b["judgement"]
        assert [r["name"] for r in a["routes"]] == [r["name"] for r in b["routes"]]
        assert load_node_report(path).library.sha256 == a["library"]["sha256"]


def test_the_exec_path_runs_the_real_script(pods, tmp_path, capsys, monkeypatch):
    """POD_SCRIPT under sh against the fixture tree (LP_ROOT) is what a pod's exec returns; node --pod parses it."""
    pytest.importorskip("kubernetes")
    import kubernetes.stream

    from lucepatch.k8s import client as kclient

    root = pods["fork"]

    def fake_stream(fn, name, namespace, command, **kw):
        assert command[:2] == ["sh", "-c"]
        path = None
        if command[2] == pod.POD_SCRIPT:
            r = subprocess.run(["sh", "-c", pod.POD_SCRIPT], capture_output=True, text=True, env={"LP_ROOT": str(root),
                               "PATH": "/usr/bin:/bin"})
            return r.stdout + r.stderr
        raise AssertionError(command)

    def fake_base64(fn, name, namespace, command, **kw):
        if command[0] == "base64":
            import base64

            return base64.encodebytes((root / command[1].lstrip("/")).read_bytes()).decode()
        return fake_stream(fn, name, namespace, command, **kw)

    class K8s:
        class CoreV1Api:
            def connect_get_namespaced_pod_exec(self, *a, **kw):
                raise AssertionError("through kubernetes.stream.stream")

    monkeypatch.setattr(kclient, "load", lambda **kw: K8s)
    monkeypatch.setattr(kubernetes.stream, "stream", fake_base64)
    path = tmp_path / "exec.json"
    rc, out, err = _cli(capsys, "node", "--pod", "app-0", "--namespace", "ai", "--save-report", path)
    doc = json.loads(path.read_text())
    import jsonschema

    jsonschema.validate(doc, SCHEMA)
    assert doc["collected_from"] == "pod ai/app-0" and doc["injection"]["state"] == "injected"
    assert doc["library"]["sha256"] == elf_sha(pods["libs"]["fork"]) and doc["library"]["identity"]["kind"] == "fork"
    assert doc["driver"]["value"] == "580.95.05" and doc["vendor"]["value"] == "beclab (Olares)"
    assert rc == 1 and "1. exclusive mode" in out
    # a cut-short output is one clear line, not a traceback
    with pytest.raises(Exception, match="did not finish reporting"):
        pod.parse_script_output("@@lp-file /proc/1/environ\nQUJD\n", "pod ai/app-0")


def test_deploy_reads_the_report(pods, capsys, tmp_path):
    line = hamilib.line_build_like(tmp_path, "line25", line="hami-core-v2.5")
    ev = tmp_path / "ev.json"
    ev.write_text(json.dumps(evidence_doc(baseline=pods["libs"]["up"], patched=line, target="hami-core-v2.5")))
    _, _, _, up_report, _ = _report(capsys, pods["upstream"], tmp_path, "up.json")
    rc, out, err = _cli(capsys, "deploy", "hami-core", "--lib", line, "--evidence", ev, "--node-report", up_report,
                        "--hami-version", "v2.5.1", "--dry-run", "--json")
    assert rc == 0, err
    g = {x["name"]: x for x in json.loads(out)["gates"]}
    assert g["identity"]["ok"] and g["symbols"]["ok"] and g["env"]["ok"] and g["line"]["ok"]
    assert "can load on the pods' glibc" in g["loader"]["message"]
    _, _, _, fork_report, _ = _report(capsys, pods["fork"], tmp_path, "fork.json")
    rc, out, err = _cli(capsys, "deploy", "hami-core", "--lib", line, "--evidence", ev, "--node-report", fork_report,
                        "--dry-run", "--json")
    g = {x["name"]: x for x in json.loads(out)["gates"]}
    assert rc == 1 and g["identity"]["ok"] is False and g["symbols"]["ok"] is False
    # --installed must be the library the report saw
    rc, _, err = _cli(capsys, "deploy", "hami-core", "--lib", line, "--evidence", ev, "--node-report", fork_report,
                      "--installed", pods["libs"]["up"], "--dry-run")
    assert rc == 2 and "not the library the node report saw" in err


def test_verify_reads_the_report(pods, capsys, tmp_path):
    _, _, _, fork_report, _ = _report(capsys, pods["fork"], tmp_path, "fork.json")
    rc, out, err = _cli(capsys, "verify", "--reproducer", "async-sched", "--target", "hami-core-v2.5", "--driver", "fake",
                        "--baseline-lib", pods["libs"]["up"], "--lib", pods["libs"]["up"], "--node-report", fork_report)
    assert rc == 2 and "is not the library --node-report" in err and len(err.strip().splitlines()) == 1
    # the node's own bytes as the baseline: the evidence records the node it came from
    ev = tmp_path / "ev.json"
    rc, out, err = _cli(capsys, "verify", "--reproducer", "async-sched", "--target", "hami-core-v2.5", "--driver", "fake",
                        "--fixed", "--runs", "1", "--scenario", "ctxless-async-alloc",
                        "--baseline-lib", pods["libs"]["fork"], "--lib", pods["libs"]["up"], "--node-report", fork_report,
                        "--evidence", ev)
    assert rc == 1, err
    node = json.loads(ev.read_text())["node"]
    assert node["collected_from"] == f"root {pods['fork']}" and node["vendor"] == "beclab (Olares)"
    assert node["library"] == {"path": pod.HAMI_LIB, "sha256": elf_sha(pods["libs"]["fork"]), "kind": "fork",
                               "is_baseline": True}


def test_a_hand_written_driver_only_report(tmp_path, capsys):
    """The driver gate's minimal form is a node report too: doctor says what it lacks, deploy's gates skip."""
    p = tmp_path / "node.json"
    p.write_text(json.dumps({"schema_version": 1, "node": "olares-one", "driver_version": "595.84"}))
    rep = load_node_report(p)
    assert not rep.from_doctor and rep.library is None and rep.state == "driver-only"
    rc, out, err = _cli(capsys, "node", "--node-report", p)
    assert rc == 1 and "driver 595.84" in out and "carries only the node's driver" in err


def test_bad_reports_are_usage_errors(tmp_path, capsys):
    p = tmp_path / "r.json"
    for text, msg in (("not json", "not JSON"), ('{"kind": "x"}', "not a lucepatch node report"),
                      ('{"kind": "lucepatch-node-report", "schema_version": 9}', "schema_version 9")):
        p.write_text(text)
        with pytest.raises(UsageError, match=msg):
            load_node_report(p)
        rc, _, err = _cli(capsys, "node", "--node-report", p)
        assert rc == 2 and msg in err
    rc, _, err = _cli(capsys, "node", "--lib", p, "--save-report", tmp_path / "x.json")
    assert rc == 2 and "--save-report" in err


def test_memory_limit_values_read_as_hami_core_reads_them():
    assert pod.memory_mib("24000m") == 24000 and pod.memory_mib("4g") == 4096 and pod.memory_mib("0m") == 0
    assert pod.memory_mib(str(1 << 30)) == 1024 and pod.memory_mib("lots") is None


def _docker():
    try:
        import docker

        c = docker.from_env(timeout=10)
        c.ping()
        return c
    except Exception:
        return None


def test_build_image_says_whether_the_image_can_run_the_nodes_library(pods, capsys, tmp_path):
    """The runtime base's own libc.so.6 (an image holding this machine's glibc) against the node's library."""
    client = _docker()
    if client is None:
        pytest.skip("no-docker: no Docker daemon answers")
    import io
    import tarfile
    import uuid

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        tar.add(str(elf.system_libc()), arcname="lib/x86_64-linux-gnu/libc.so.6")
    tag = f"lucepatch-test/glibc-base:{uuid.uuid4().hex[:8]}"
    subprocess.run(["docker", "import", "-", tag], input=buf.getvalue(), check=True, capture_output=True)
    try:
        _, _, _, fork_report, _ = _report(capsys, pods["fork_load"], tmp_path, "fork.json")
        _, _, _, lazy_report, _ = _report(capsys, pods["fork"], tmp_path, "lazy.json")
        _, _, _, up_report, _ = _report(capsys, pods["upstream"], tmp_path, "up.json")
        from lucepatch.builders import image as img

        here = elf.libc_provides(elf.system_libc()).glibc
        res = img.node_library_check(client, tag, load_node_report(fork_report))
        if tuple(int(x) for x in here.split(".")) >= (2, 34):
            assert res["ok"] is False and "_dl_sym@GLIBC_PRIVATE" in res["message"] and "exclusive mode" in res["message"]
            lazy = img.node_library_check(client, tag, load_node_report(lazy_report))
            assert lazy["ok"] is True and "bound lazily" in lazy["message"] and "LD_BIND_NOW" in lazy["message"]
        assert img.node_library_check(client, tag, load_node_report(up_report))["ok"] is True
        # the verb: the dry run checks the runtime base (present locally) before any build
        rc, out, err = _cli(capsys, "build", "lucebox", "--image", "--dry-run", "--profile", "sm120-cuda13-hami",
                            "--runtime-image", tag, "--node-report", fork_report, "--json")
        doc = json.loads(out)["image"]["node_library"]
        assert doc["image"] == tag and doc["glibc"] == here and (rc == 1) == (doc["ok"] is False)
        rc, out, err = _cli(capsys, "build", "lucebox", "--image", "--dry-run", "--runtime-image", "nothing/here:1",
                            "--node-report", fork_report)
        assert rc == 0 and "not present locally" in err
    finally:
        client.images.remove(tag, force=True)


def test_the_cuda_driver_gate_reads_the_report_doctor_pod_writes(pods, capsys, tmp_path):
    """issue 25 item 4 with issue 27's report: the pod's driver (580.95.05 here) gates the image's CUDA."""
    _, _, _, path, doc = _report(capsys, pods["upstream"], tmp_path)
    assert doc["driver_version"] == "580.95.05"
    rc, out, err = _cli(capsys, "render", "k8s", "lucebox", "--node-report", path, "--set", "image_cuda=13.1")
    assert rc == 1 and "needs driver >= 590.44.01" in err and "580.95.05" in err and out == ""
    rc, out, err = _cli(capsys, "render", "k8s", "lucebox", "--node-report", path)  # the profiles' CUDA 13.0
    assert rc == 0 and "kind: Deployment" in out, err
