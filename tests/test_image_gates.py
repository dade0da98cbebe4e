"""`build --image` honours --cuda-archs (or refuses it), labels what a node needs to know, and the
CUDA/driver gate refuses an image whose CUDA the node's driver cannot start (data:
lucepatch/data/cuda_drivers.toml, node report: lucepatch/node/report.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lucepatch.builders import image as img
from lucepatch.errors import CheckFailed, UsageError
from lucepatch.k8s import values
from lucepatch.node import driver as drv
from lucepatch.node.report import load_node_report, node_driver, parse_node_report
from lucepatch.services import builds as service
from lucepatch.target import load_target_dir

REPO = Path(__file__).resolve().parent.parent
LUCEBOX = load_target_dir(REPO / "patches" / "lucebox")
HAMI = load_target_dir(REPO / "patches" / "hami-core")


# ------------------------------------------------------------------ --cuda-archs with --image
def test_cuda_archs_reach_the_dockerfile_tag_and_labels(tmp_path):
    r = service.render_image(LUCEBOX, "sm120-cuda13", cuda_archs="90;120")
    assert "ARG CUDA_ARCHITECTURES=90;120\n" in r.files["Dockerfile"]
    assert r.tag == "lucepatch/lucebox:sm120-cuda13-1.0.0-sm90-120"
    assert 'org.lucepatch.cuda-archs="90;120"' in r.files["Dockerfile"]
    # the profile's own list is the profile's image: its tag, no suffix
    same = service.render_image(LUCEBOX, "sm120-cuda13", cuda_archs="120")
    assert same.tag == "lucepatch/lucebox:sm120-cuda13-1.0.0"
    assert "ARG CUDA_ARCHITECTURES=120\n" in same.files["Dockerfile"]


def test_cuda_archs_refused_where_the_target_has_no_arch_list(tmp_path, cli):
    with pytest.raises(UsageError, match="has no CUDA arch list"):
        service.render_image(HAMI, None, cuda_archs="90")
    with pytest.raises(UsageError, match="has no CUDA arch list"):  # before any source or Docker is touched
        service.build_image(HAMI, tmp_path / "no-such-checkout", tmp_path / "cache", cuda_archs="90")
    r = cli("--workspace", REPO, "build", "hami-core", "--image", "--dry-run", "--cuda-archs", "90")
    assert r.code == 2 and "has no CUDA arch list" in r.err and len(r.err.strip().splitlines()) == 1
    r = cli("--workspace", REPO, "build", "lucebox", "--image", "--dry-run", "--cuda-archs", "sm_90")
    assert r.code == 2 and "SM numbers" in r.err


def test_description_label_is_cut_at_a_word():
    labels = img.labels_for(LUCEBOX, img.image_profile(LUCEBOX, "sm120-cuda13")[1])
    desc = labels["org.opencontainers.image.description"]
    full = " ".join(LUCEBOX.description.split())
    assert len(full) > 200 and len(desc) <= 200 and desc.endswith("…")
    kept = desc[:-1]
    assert full.startswith(kept) and full[len(kept)] in " ,;:", (kept[-20:], full[len(kept):len(kept) + 10])
    short = img.labels_for(HAMI, img.image_profile(HAMI, None)[1])["org.opencontainers.image.description"]
    assert short == " ".join(HAMI.description.split())[:200] or short.endswith("…")


def test_cuda_version_label_follows_the_runtime_base():
    prof = img.image_profile(LUCEBOX, "sm120-cuda13")[1]
    assert img.labels_for(LUCEBOX, prof)["org.lucepatch.cuda-version"] == "13.0"
    assert img.labels_for(LUCEBOX, prof, runtime_image="nvidia/cuda:13.3.0-runtime-ubuntu24.04")[
        "org.lucepatch.cuda-version"] == "13.3"


def test_manifest_default_image_is_the_tag_build_image_makes():
    tag = img.image_tag(LUCEBOX, img.image_profile(LUCEBOX, None)[0], None)
    assert values.LUCEBOX["image"].default == tag == "lucepatch/lucebox:sm120-cuda13-1.0.0"
    prof = img.image_profile(LUCEBOX, None)[1]
    assert values.LUCEBOX["image_cuda"].default == img.cuda_version_of(prof["runtime_image"])
    assert values.LUCEBOX["run_as_user"].default == img.template_vars(LUCEBOX, prof, labels={})["uid"]


# ------------------------------------------------------------------ the CUDA / driver gate
@pytest.mark.parametrize("cuda,driver,ok", [
    ("13.0", "580.65.06", True), ("13.0", "580.65.05", False), ("13.0", "595.84", True),
    ("13.1", "590.44.01", True), ("13.1", "590.44", False), ("13.2", "590.44.01", False),
    ("13.2", "595.84", True), ("13.3", "595.84", False), ("13.3", "610.43.02", True),
    ("12.8", "570.86.10", True), ("13.4", "615.71.09", False),
])
def test_gate_table(cuda, driver, ok):
    assert drv.check(cuda, drv.DriverVersion.parse(driver)).ok is ok


def test_olares_nodes_start_cuda_13_1_and_the_profiles_13_0_bases():
    oldest = min(drv.platform_drivers("olares"))
    assert str(oldest) == "590.44.01"
    fits = [c for c in drv.floors() if drv.check(c, oldest).ok and c.startswith("13.")]
    assert max(fits, key=lambda c: int(c.split(".")[1])) == "13.1"
    for name in LUCEBOX.profiles:
        prof = img.image_profile(LUCEBOX, name)[1]
        assert drv.check(img.cuda_version_of(prof["runtime_image"]), oldest).ok, name


def test_gate_refusal_says_why_and_what_fits():
    with pytest.raises(CheckFailed) as e:
        drv.require("nvidia/cuda:13.3.0-runtime-ubuntu24.04", drv.DriverVersion.parse("595.84"))
    msg = str(e.value)
    assert "needs driver >= 610.43.02" in msg and "595.84" in msg and "CUDA <= 13.2" in msg


def test_unknown_minor_is_refused_not_guessed():
    g = drv.check("13.5", drv.DriverVersion.parse("700.1"))
    assert not g.ok and "not in lucepatch/data/cuda_drivers.toml" in g.message


def test_node_report_reader(tmp_path):
    p = tmp_path / "node.json"
    p.write_text(json.dumps({"schema_version": 1, "node": "olares-one", "driver_version": "595.84",
                             "gpu": "RTX 5090"}))
    rep = load_node_report(p)
    assert rep.driver_version == drv.DriverVersion.parse("595.84") and rep.node == "olares-one"
    assert rep.extra == {"gpu": "RTX 5090"}  # later fields are kept for their readers
    assert node_driver(report=str(p)) == rep.driver_version
    with pytest.raises(UsageError, match="schema_version"):
        parse_node_report({"schema_version": 9, "driver_version": "1.2"})
    with pytest.raises(UsageError, match="not an NVIDIA driver version"):
        parse_node_report({"schema_version": 1, "driver_version": "latest"})
    with pytest.raises(UsageError, match="not both"):
        node_driver("595.84", str(p))
    p.write_text(json.dumps({"schema_version": 1}))
    with pytest.raises(UsageError, match="no driver_version"):
        node_driver(report=str(p))


def test_build_image_gate_refuses_before_any_work(tmp_path):
    with pytest.raises(CheckFailed, match="needs driver >= 610.43.02"):
        service.build_image(LUCEBOX, tmp_path / "no-such-checkout", tmp_path / "cache", profile="sm120-cuda13",
                            runtime_image="nvidia/cuda:13.3.0-runtime-ubuntu24.04",
                            node_driver=drv.DriverVersion.parse("595.84"))


def test_render_gate_on_the_cli(cli, tmp_path):
    ok = cli("render", "k8s", "lucebox", "--node-driver", "590.44.01")
    assert ok.code == 0, ok.err
    r = cli("render", "k8s", "lucebox", "--set", "image_cuda=13.3", "--node-driver", "595.84")
    assert r.code == 1 and "needs driver >= 610.43.02" in r.err and r.out == ""
    rep = tmp_path / "node.json"
    rep.write_text(json.dumps({"schema_version": 1, "driver_version": "595.84"}))
    r = cli("render", "k8s", "lucebox", "--set", "image_cuda=13.2", "--node-report", str(rep))
    assert r.code == 0, r.err
