"""`lucepatch bench`'s use case (lucepatch/services/bench.py, lucepatch/verify/bench.py; issue 38): the
configurations it measures, the rounds (bare and the layer, alternating), the answer from the interval,
the document (schema-valid), its table and its page — on made-up runs with known rates, so what is
checked is what the bench does with them. One bench on the simulated driver runs in tests/test_sm_limit.py."""

from __future__ import annotations

import math
import random
from pathlib import Path

import pytest

from lucepatch.errors import UsageError
from lucepatch.services import bench as service
from lucepatch.verify import bench
from lucepatch.verify.driver import DriverChoice
from lucepatch.verify.reproducer import load_reproducer_dir
from lucepatch.verify.runner import PASS, RunRecord

ROOT = Path(__file__).resolve().parent.parent


def test_the_configurations_and_what_each_should_give():
    cfgs = bench.configs(bench.BenchRequest(lib=Path("/x.so"), modes=("eager", "graph"), sm_limits=(30, 50),
                                            tenants=(30, 70)))
    names = [c.name for c in cfgs]
    assert names == ["memory-only-eager", "sm-30-eager", "sm-50-eager", "tenants-30-70-eager",
                     "memory-only-graph", "sm-30-graph", "sm-50-graph", "tenants-30-70-graph"]
    by = {c.name: c for c in cfgs}
    assert by["memory-only-eager"].measure.bound.lo == pytest.approx(0.99) and by["memory-only-eager"].measure.per == "bare"
    assert (by["sm-30-eager"].measure.bound.lo, by["sm-30-eager"].measure.bound.hi) == (pytest.approx(0.2), pytest.approx(0.4))
    assert by["sm-50-graph"].env == {"LP_MODE": "graph", "CUDA_DEVICE_MEMORY_LIMIT": "60g", "CUDA_DEVICE_SM_LIMIT": "50"}
    t = by["tenants-30-70-eager"].measure
    assert t.value == "share_sm30" and t.per is None and (t.bound.lo, t.bound.hi) == (pytest.approx(0.2), pytest.approx(0.4))


@pytest.mark.parametrize("req,why", [
    (dict(rounds=1), "--rounds must be at least 2"),
    (dict(sm_limits=(100,)), "a limit is 1..99"),
    (dict(tenants=(30,)), "--tenants takes two SM limits"),
    (dict(modes=("fast",)), "--mode takes eager, graph or both"),
    (dict(alpha=0.7), "--alpha must be in"),
])
def test_bad_requests_are_one_line(req, why):
    with pytest.raises(UsageError, match=why):
        bench.configs(bench.BenchRequest(lib=Path("/x.so"), **req))


def test_the_library_must_be_an_elf_file(tmp_path):
    with pytest.raises(UsageError, match="is not a file"):
        service.check(bench.BenchRequest(lib=tmp_path / "none.so"))
    txt = tmp_path / "lib.so"
    txt.write_text("not elf")
    with pytest.raises(UsageError, match="not an ELF shared library"):
        service.check(bench.BenchRequest(lib=txt))


def fake_run(layer_over_bare: dict, share: float = 0.31, seed: int = 3, fail: tuple | None = None, noise: float = 0.002):
    """Runs whose rate is 500 tok/s bare, 500 x layer_over_bare[config] with the layer (`noise`: relative sd)."""
    rng = random.Random(seed)
    seen = []

    def run(binary, repro, scenario, variant, index, preload, driver_env, scratch, **kw):
        seen.append((scenario.name, variant, index, preload))
        rec = RunRecord(variant=variant, scenario=scenario.name, index=index, outcome=PASS, returncode=0, signal=None,
                        duration_s=1.0, driver={"version": 13000, "device_count": 1, "gpu": "NVIDIA H100 80GB HBM3"})
        if fail and (scenario.name, variant, index) == fail:
            rec.outcome, rec.reason = "crash", "SIGSEGV"
            return rec
        jitter = math.exp(rng.gauss(0, noise))
        if scenario.measure.per:
            rate = 500.0 * (layer_over_bare[scenario.name] if variant == "layer" else 1.0) * jitter
            rec.values = {"tok_per_s": rate}
        else:
            rec.values = {scenario.measure.value: share * jitter}
        rec.series = {"tok_per_s": {"step_s": 0.25, "unit": "tok/s", "values": [500.0] * 4}}
        return rec

    run.seen = seen
    return run


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    """A workload shaped like reproducers/sm-limit (its program never runs here: the runs are made up)."""
    d = tmp_path_factory.mktemp("repros") / "sm-limit"
    d.mkdir()
    (d / "r.c").write_text("int main(void) { return 0; }\n")
    (d / "reproducer.toml").write_text(
        'target = "hami-core"\nartifact = "libvgpu.so"\nsources = ["r.c"]\n[[scenario]]\nname = "control"\n'
        'control = true\n[[scenario]]\nname = "sm50-eager"\n[scenario.measure]\nvalue = "tok_per_s"\nper = "bare"\n'
        'lo = 0.4\nhi = 0.6\n')
    repro = load_reproducer_dir(d)
    drv = DriverChoice("fake", "fake", {}, None)
    return bench.Bench(repro, None, Path("/reporter.so"), None, False, drv, Path("/node/libvgpu.so"), "a" * 64)


def test_rounds_alternate_and_answers_follow_the_interval(prepared, tmp_path):
    req = bench.BenchRequest(lib=Path("/node/libvgpu.so"), modes=("eager",), sm_limits=(50,), tenants=(30, 70), rounds=4)
    cfgs = bench.configs(req)
    run = fake_run({"memory-only-eager": 1.0, "sm-50-eager": 0.8})
    results = bench.run_bench(prepared, cfgs, run=run)
    by = {r.config.name: r for r in results}
    assert by["memory-only-eager"].answer == "holds"
    assert by["sm-50-eager"].answer == "does not hold" and "0.8" in by["sm-50-eager"].why
    assert by["tenants-30-70-eager"].answer == "holds"
    # 1 warm-up + 4 counted rounds of bare and the layer, first place alternating; the layer preloaded only
    mem = [(v, i, p) for n, v, i, p in run.seen if n == "memory-only-eager"]
    assert [v for v, _, _ in mem[:4]] == ["bare", "layer", "layer", "bare"] and len(mem) == 10
    assert all((p is None) == (v == "bare") for v, _, p in mem)
    assert by["memory-only-eager"].interval["n"] == 4 and by["memory-only-eager"].rounds[0]["warmup"]
    # the tenants' scenario needs a proof from each tenant's process
    assert all(n != "tenants-30-70-eager" or v == "layer" for n, v, _, _ in run.seen)


def test_a_run_that_fails_is_could_not_measure_and_noise_is_undecided(prepared):
    req = bench.BenchRequest(lib=Path("/node/libvgpu.so"), modes=("graph",), sm_limits=(), tenants=None, rounds=3)
    (res,) = bench.run_bench(prepared, bench.configs(req), run=fake_run({"memory-only-graph": 1.0}, fail=("memory-only-graph", "layer", 2)))
    assert res.answer == "could not measure" and "layer run of round 2: crash (SIGSEGV)" in res.why
    (near,) = bench.run_bench(prepared, bench.configs(req), run=fake_run({"memory-only-graph": 0.99}, noise=0.01))
    assert near.answer == "undecided"  # a cost at the 1 % line with 1 % noise: not rounded into "no overhead"


def test_the_document_its_table_and_its_page(prepared, tmp_path):
    req = bench.BenchRequest(lib=Path("/node/libvgpu.so"), modes=("eager",), sm_limits=(50,), tenants=(30, 70), rounds=3)
    results = bench.run_bench(prepared, bench.configs(req), run=fake_run({"memory-only-eager": 1.0, "sm-50-eager": 0.52}))
    doc = service.document(req, prepared.repro, results, "a" * 64)
    service.validate(doc)
    assert doc["verb"] == "bench" and doc["driver"]["gpu"] == "NVIDIA H100 80GB HBM3" and doc["simulated"] is False
    rows = service.table_rows(doc)
    assert [r["configuration"] for r in rows] == ["memory-only", "sm-50", "tenants-30-70"]
    assert rows[1]["answer"] == "holds" and rows[1]["result"].startswith("0.52")
    page = service.write_page(doc, tmp_path / "bench.html").read_text()
    assert page.count('class="rate intervals"') == 3 and 'data-answer="holds"' in page
    assert "Content-Security-Policy" in page and "<script" not in page


@pytest.fixture(scope="module")
def interposer(tmp_path_factory):
    """A preloadable library that prints HAMi-core's load marker and limits nothing (tests/fixtures/fakehami)."""
    import shutil  # lazy: only this fixture, 1 ms
    import subprocess  # lazy: only this fixture, 1 ms

    if shutil.which("gcc") is None or not Path("/usr/local/cuda/include/cuda.h").is_file():
        pytest.skip("no-tool: needs gcc and /usr/local/cuda/include/cuda.h")
    d = tmp_path_factory.mktemp("layer")
    subprocess.run(["gcc", "-shared", "-fPIC", "-O1", "-o", str(d / "libvgpu.so"),
                    str(ROOT / "tests/fixtures/fakehami/src/fakehami.c"), "-I/usr/local/cuda/include", "-ldl"], check=True)
    return d / "libvgpu.so"


def test_the_verb_on_the_simulated_driver_prints_its_document(cli, interposer, tmp_path):
    """Real runs (short ones) of the sm-limit workload under a layer that limits nothing: the memory-only
    cost is measured, the SM limit does not hold, the verb says so (exit 1) and its JSON is its schema's."""
    import json  # lazy: only this test, 1 ms

    import jsonschema  # lazy: only this test, 34 ms

    r = cli("bench", "--lib", interposer, "--mode", "eager", "--sm-limit", "50", "--no-tenants", "--rounds", "2",
            "--warmup-rounds", "0", "--warmup-ms", "0", "--measure-ms", "250", "--driver", "fake", "--json",
            "--html", tmp_path / "b.html")
    assert r.code == 1, r.err
    doc = json.loads(r.out)
    jsonschema.validate(doc, json.loads((ROOT / "docs/schema/bench.schema.json").read_text()))
    by = {c["name"]: c for c in doc["configs"]}
    assert doc["simulated"] is True and set(by) == {"memory-only-eager", "sm-50-eager"}
    assert all(c["interval"] and c["interval"]["n"] == 2 for c in by.values())
    assert by["sm-50-eager"]["answer"] != "holds"  # nothing limits: about 1 x bare, not 0.5
    assert by["sm-50-eager"]["interval"]["estimate"] > 0.8
    assert "not shown to hold" in r.err and (tmp_path / "b.html").is_file()
    assert cli("bench", "--lib", interposer, "--tenants", "30", "--driver", "fake").code == 2
