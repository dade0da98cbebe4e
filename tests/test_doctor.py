"""`lucepatch doctor`: present/missing with a fix for each; exit 3 when a named verb's needs are missing."""

from __future__ import annotations

import os
import stat
from pathlib import Path


def _fake_tool(d: Path, name: str, out: str) -> None:
    p = d / name
    p.write_text(f"#!/bin/sh\necho '{out}'\n")
    p.chmod(p.stat().st_mode | stat.S_IEXEC)


def test_doctor_here_json(cli):
    r = cli("doctor", "--json")
    assert r.code in (0, 3)
    doc = r.json
    names = [i["name"] for i in doc["items"]]
    for n in ("git", "cmake", "nvcc", "nvml.h", "docker", "gpu", "valgrind", "quilt"):
        assert n in names
    for i in doc["items"]:
        assert i["status"] in ("present", "missing")
        if i["status"] == "missing":
            assert i["remedy"], i
    git = next(i for i in doc["items"] if i["name"] == "git")
    assert git["status"] == "present" and "merge-tree" in git["detail"]


def test_missing_tools_exit_3_for_the_verbs_that_need_them(cli, tmp_path, monkeypatch):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    _fake_tool(bindir, "git", "git version 2.30.1")
    _fake_tool(bindir, "nvidia-smi", "NVIDIA GeForce RTX 5090, 570.86.10")
    monkeypatch.setenv("PATH", str(bindir))
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-docker.sock")
    monkeypatch.setenv("CUDA_HOME", str(tmp_path / "nocuda"))
    r = cli("doctor", "--json")
    assert r.code == 3  # git too old: every verb needs it
    items = {i["name"]: i for i in r.json["items"]}
    assert items["git"]["status"] == "missing" and "2.38" in items["git"]["remedy"]
    assert items["cmake"]["status"] == "missing" and "apt-get install cmake" in items["cmake"]["remedy"]
    assert items["docker"]["status"] == "missing" and "daemon" in items["docker"]["detail"]
    assert items["gpu"]["status"] == "missing" and "R580" in items["gpu"]["detail"] and items["gpu"]["version"] == "570.86.10"
    assert items["quilt"]["status"] == "missing"
    assert set(r.json["blocking"]) == {"git"}
    r = cli("doctor", "--for", "build", "--json")
    assert r.code == 3 and {"git", "cmake", "cc"} <= set(r.json["blocking"]) and "docker" not in r.json["blocking"]
    r = cli("doctor", "--for", "build --image")
    assert r.code == 3 and "docker is missing" in r.err


def test_new_git_and_driver_pass(cli, tmp_path, monkeypatch):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    _fake_tool(bindir, "git", "git version 2.45.0")
    _fake_tool(bindir, "nvidia-smi", "NVIDIA H200, 580.159.04")
    monkeypatch.setenv("PATH", str(bindir) + os.pathsep + os.environ["PATH"])
    r = cli("doctor", "--json", "--for", "verify --driver real")
    items = {i["name"]: i for i in r.json["items"]}
    assert items["gpu"]["status"] == "present" and items["gpu"]["version"] == "580.159.04"
    assert "gpu" not in r.json["blocking"]
