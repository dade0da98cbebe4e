"""deploy hami-core gates and --dry-run through the real CLI; cluster status parsing on recorded logs."""

from __future__ import annotations

import hashlib
import json
import subprocess

import pytest

from conftest import evidence_doc

import hamilib

from lucepatch.k8s import client, gates
from lucepatch.main import main

pytestmark = pytest.mark.needs("gcc")
pytest.importorskip("yaml")

SRC = """int shrreg_major_version(void) {{ return 1; }}
int shrreg_minor_version(void) {{ return {minor}; }}
int cuMemAlloc_v2(void) {{ return 0; }}
{extra}
"""


def _lib(tmp, name, minor=2, extra="int cuMemFreeAsync(void) { return 0; }"):
    c = tmp / f"{name}.c"
    c.write_text(SRC.format(minor=minor, extra=extra))
    out = tmp / f"{name}.so"
    subprocess.run(["gcc", "-O0", "-shared", "-fPIC", "-o", str(out), str(c)], check=True)
    return out


def _sha(p):
    return hashlib.sha256(p.read_bytes()).hexdigest()


@pytest.fixture
def kit(tmp_path):
    # a HAMi v2.8.x / v2.9.0 node's line (8f3a89c, region 1.2): the names of an upstream build at its base, and
    # of the line's own build (the main line, on upstream main 52f33fc, serves no release: see the line tests)
    base = hamilib.upstream_like(tmp_path, "baseline", line="hami-core-v2.9")
    patched = hamilib.line_build_like(tmp_path, "patched", line="hami-core-v2.9")
    # schema 1, as the committed H200 evidence is: the deploy gate reads it through the v1 reader
    ev = evidence_doc(baseline=base, patched=patched, gpu="H200", schema_version=1, target="hami-core-v2.9")
    evp = tmp_path / "evidence.json"
    evp.write_text(json.dumps(ev))
    return {"tmp": tmp_path, "base": base, "patched": patched, "ev": ev, "evp": evp}


def _deploy(capsys, *args):
    rc = main(["deploy", "hami-core", *args])
    out, err = capsys.readouterr()
    return rc, out, err


def test_dry_run_passes_and_prints_daemonset(kit, capsys):
    rc, out, err = _deploy(capsys, "--lib", str(kit["patched"]), "--evidence", str(kit["evp"]),
                           "--hami-version", "v2.9.0", "--dry-run", "--json")
    assert rc == 0, err
    doc = json.loads(out)
    assert doc["schema_version"] == 1 and doc["result"] == "dry-run"
    assert {g["name"]: g["ok"] for g in doc["gates"]} == {"evidence": True, "elf": True, "identity": True,
                                                          "symbols": True, "env": True, "loader": True,
                                                          "shrreg": True, "compatible_hami": True, "line": True}
    ds = next(o for o in doc["objects"] if o["kind"] == "DaemonSet")
    assert ds["metadata"]["annotations"]["lucepatch.dev/lib-sha256"] == _sha(kit["patched"])


def _mutate(kit, **changes):
    ev = json.loads(json.dumps(kit["ev"]))
    for path, val in changes.items():
        d = ev
        keys = path.split(".")
        for k in keys[:-1]:
            d = d[k]
        d[keys[-1]] = val
    kit["evp"].write_text(json.dumps(ev))


@pytest.mark.parametrize("case,gate", [
    ("not-proven", "evidence"), ("fake-driver", "evidence"), ("sha-mismatch", "evidence"),
    ("missing-symbols", "symbols"), ("shrreg", "shrreg"), ("hami-too-old", "compatible_hami"),
    ("not-elf", "elf"),
])
def test_gates_refuse(kit, capsys, case, gate):
    lib, hami = kit["patched"], "v2.8.3"
    if case == "not-proven":
        _mutate(kit, verdict="not-proven")
    elif case == "fake-driver":
        _mutate(kit, **{"driver.kind": "fake"})
    elif case == "sha-mismatch":
        _mutate(kit, **{"variants.patched.artifact.sha256": "0" * 64})
    elif case in ("missing-symbols", "shrreg", "not-elf"):
        if case == "missing-symbols":
            lib = _lib(kit["tmp"], "lean", extra="")
        elif case == "shrreg":
            lib = _lib(kit["tmp"], "oldregion", minor=1)
        else:
            lib = kit["tmp"] / "libvgpu.txt"
            lib.write_text("not a library")
        _mutate(kit, **{"variants.patched.artifact.sha256": _sha(lib)})
    elif case == "hami-too-old":
        hami = "v2.5.1"  # Olares 1.12.5's HAMi: shared-region 1.1
    rc, out, err = _deploy(capsys, "--lib", str(lib), "--evidence", str(kit["evp"]), "--hami-version", hami,
                           "--dry-run", "--json")
    assert rc == 1, err
    doc = json.loads(out)
    assert doc["result"] == "refused"
    assert {g["name"]: g["ok"] for g in doc["gates"]}[gate] is False
    assert "DaemonSet" not in out


def test_line_gate_refuses_a_library_of_another_line_and_names_the_right_one(kit, capsys, monkeypatch):
    """An Olares node (HAMi v2.5.1, HAMi-core 54b1305, shared region 1.1) must not get the main
    line's library (region 1.2): the refusal names the line that fits and how to build it."""
    node = _lib(kit["tmp"], "olares-node", minor=1)
    rc, out, err = _deploy(capsys, "--lib", str(kit["patched"]), "--evidence", str(kit["evp"]),
                           "--installed", str(node), "--dry-run", "--json")
    assert rc == 1
    g = {x["name"]: x for x in json.loads(out)["gates"]}
    assert g["shrreg"]["ok"] is False and g["line"]["ok"] is False
    assert "shared region 1.1" in g["line"]["message"] and "gate FAIL line" in err
    # with a line for region 1.1 in the data, the message names it and its build command
    data = gates.compat_data()
    data["series"]["hami-core-v2.5"] = {"base": "54b13055032577b9487d108fa1b18ccaf56274cc", "shrreg": "1.1",
                                        "compatible": ["v2.5.0", "v2.5.1", "v2.5.2", "v2.5.3"]}
    import lucepatch.lines.fit as fitmod

    monkeypatch.setattr(fitmod, "compat_data", lambda: data)
    gl = gates.run_gates(str(kit["patched"]), str(kit["evp"]), installed=str(node), hami_versions=["v2.5.1"])
    line = next(x for x in gl if x.name == "line")
    assert line.ok is False
    assert "--lib is from line hami-core-v2.9 (base 8f3a89c, shared region 1.2)" in line.message
    assert "the nodes need line hami-core-v2.5 (base 54b1305, shared region 1.1)" in line.message
    assert "lucepatch build hami-core-v2.5 --source" in line.message


def test_line_gate_sends_a_v2_9_node_to_the_v2_9_line(kit, capsys):
    """The main line (hami-core on upstream main 52f33fc, region 1.2 like v2.9.0's) serves no HAMi release: its
    library is refused on a v2.9.0 node, and the refusal names the line that serves it (issue 36)."""
    main_lib = hamilib.line_build_like(kit["tmp"], "main", line="hami-core")
    ev = evidence_doc(baseline=hamilib.upstream_like(kit["tmp"], "main-base"), patched=main_lib, gpu="H200",
                      schema_version=1, target="hami-core")
    evp = kit["tmp"] / "main-evidence.json"
    evp.write_text(json.dumps(ev))
    gl = {x.name: x for x in gates.run_gates(str(main_lib), str(evp), hami_versions=["v2.9.0"])}
    assert gl["shrreg"].ok is True and gl["line"].ok is False and gl["compatible_hami"].ok is False
    assert "hami-core-v2.9" in gl["line"].message and "v2.9.0" in gl["line"].message
    # the v2.9 line's own evidence and library pass the same node
    ok = {x.name: x.ok for x in gates.run_gates(str(kit["patched"]), str(kit["evp"]), hami_versions=["v2.9.0"])}
    assert ok["line"] is True and ok["compatible_hami"] is True


def test_line_gate_unknown_evidence_target(kit):
    _mutate(kit, target="not-a-line")
    g = {x.name: x for x in gates.run_gates(str(kit["patched"]), str(kit["evp"]), hami_versions=["v2.9.0"])}
    assert g["line"].ok is False and "no series line" in g["line"].message


def test_unknown_hami_version_skipped_in_dry_run_refused_live(kit):
    g = gates.run_gates(str(kit["patched"]), str(kit["evp"]), live=False)
    assert {x.name: x.ok for x in g}["compatible_hami"] is None and gates.passed(g, live=False)
    g = gates.run_gates(str(kit["patched"]), str(kit["evp"]), live=True)
    assert not gates.passed(g, live=True)


def test_usage_and_environment_errors(kit, capsys, monkeypatch, tmp_path):
    monkeypatch.delenv("LUCEPATCH_KUBECONFIG", raising=False)
    rc, _, err = _deploy(capsys, "--lib", str(kit["patched"]), "--evidence", str(kit["evp"]))
    assert rc == 2 and "LUCEPATCH_KUBECONFIG" in err and len(err.strip().splitlines()) == 1
    rc, _, err = _deploy(capsys, "--lib", str(kit["patched"]), "--evidence", str(tmp_path / "nope.json"), "--dry-run")
    assert rc == 2 and "verify" in err
    monkeypatch.setenv("LUCEPATCH_KUBECONFIG", str(tmp_path / "missing-kubeconfig"))
    rc, _, err = _deploy(capsys, "--lib", str(kit["patched"]), "--evidence", str(kit["evp"]),
                         "--hami-version", "v2.9.0", "--lib-image", "reg/x:1")
    assert rc == 3, err


def test_rollback_dry_run_needs_no_lib(capsys):
    rc, out, err = _deploy(capsys, "--rollback", "--dry-run")
    assert rc == 0, err
    assert "SWAP_ACTION" in out and '"rollback"' in out and "fetch-lib" not in out


def test_compat_data_is_consistent():
    """Every line: its base is its target's, its compatible releases share its region version."""
    from conftest import REPO_ROOT

    from lucepatch.target import load_target_dir

    data = gates.compat_data()
    rel = {r["hami"]: r for r in data["release"]}
    assert "hami-core" in data["series"]
    for name, ser in data["series"].items():
        assert len(ser["base"]) == 40 and ser["shrreg"], name
        for v in ser["compatible"]:
            assert rel[v]["shrreg"] == ser["shrreg"], (name, v)
        tdir = REPO_ROOT / "patches" / name
        if tdir.is_dir():
            assert load_target_dir(tdir).base == ser["base"], name
        for r in data["release"]:
            if r["hami_core"] == ser["base"]:
                assert r["shrreg"] == ser["shrreg"], (name, r["hami"])
    for r in data["release"]:
        assert len(r["hami_core"]) == 40


RECORDED_SWAP_LOGS = {
    "node-a": 'hami-core-swap: backed up ...\n@@lucepatch-swap {"action":"install","outcome":"installed","dir":"/host/vgpu",'
              '"name":"libvgpu.so","node":"node-a","message":"installed","current_sha256":"%s"}\n@@lucepatch-swap-exit 0\n',
    "node-b": '@@lucepatch-swap {"action":"install","outcome":"refused","dir":"/host/vgpu","name":"libvgpu.so",'
              '"node":"node-b","message":"lacks 2 exported symbol(s)"}\n@@lucepatch-swap-exit 1\n',
    "node-c": '@@lucepatch-swap {"action":"install","outcome":"installed","current_sha256":"%s"}\n'
              '@@lucepatch-swap {"action":"install","outcome":"installed","current_sha256":"%s","message":"re-asserted"}\n',
    "node-d": "Error from server: container not ready\n",
}


def test_cluster_status_rows_from_recorded_logs():
    want, other = "a" * 64, "b" * 64
    logs = dict(RECORDED_SWAP_LOGS)
    logs["node-a"] = logs["node-a"] % want
    logs["node-c"] = logs["node-c"] % (other, want)
    rows = {r["node"]: r for r in client.swap_status_rows(want, logs)}
    assert rows["node-a"]["state"] == "ok"
    assert rows["node-b"]["state"] == "refused"
    assert rows["node-c"]["state"] == "ok"  # the last result counts
    assert rows["node-d"]["state"] == "unknown"
    logs["node-c"] = RECORDED_SWAP_LOGS["node-c"] % (want, other)
    assert {r["node"]: r for r in client.swap_status_rows(want, logs)}["node-c"]["state"] == "drift"
