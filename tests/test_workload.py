"""Workload reproducers (kind = "workload"): one runner, the same verdicts and evidence as the C ones.

The fixtures under tests/fixtures/workloads/ end in every way a run can end; they run under the
fakehami fixture interposer (compiled here from tests/fixtures/fakehami/src) on the simulated
driver, through `lucepatch verify --lib/--baseline-lib`, and each run's outcome, reason and load
proof are checked. The torch-free reproducer reproducers/ctypes-clients runs end to end against
the fakehami series here and against real HAMi-core in test_verify_hami.py.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from conftest import FIXTURES, REPO_ROOT, make_target
from lucepatch.errors import UsageError
from lucepatch.native import compiling, toolchain
from lucepatch.verify.reproducer import load_reproducer_dir

WORKLOADS = FIXTURES / "workloads"

pytestmark = pytest.mark.needs("gcc", "/usr/local/cuda/include/cuda.h")


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    root = tmp_path_factory.mktemp("workload")
    cache = root / "cache"
    cc = compiling.cc()
    src = FIXTURES / "fakehami" / "src" / "fakehami.c"
    unit = compiling.Unit(what="fakehami (workload tests)",
                          steps=[[cc, "-shared", "-fPIC", "-O1", "-g", f"-I{toolchain.cuda_include()}",
                                  "-o", "{out}/libvgpu.so", str(src), "-ldl", "-lpthread"]],
                          outputs=["libvgpu.so"], inputs=[src])
    lib = compiling.build_cached(unit, cache / "fakehami") / "libvgpu.so"
    ws = root / "ws"
    make_target(ws, "fakehami", "0" * 40, [])
    shutil.copytree(WORKLOADS, ws / "reproducers")
    return {"ws": ws, "cache": cache, "lib": lib}


def _verify(cli, env, reproducer, *scenarios, runs=1):
    args = ["--workspace", env["ws"], "--cache-dir", env["cache"], "verify", "--reproducer", reproducer,
            "--lib", env["lib"], "--baseline-lib", env["lib"], "--driver", "fake", "--fixed", "--runs", runs, "--json"]
    for s in scenarios:
        args += ["--scenario", s]
    res = cli(*args)
    assert res.out.strip(), res.err
    return res, res.json["evidence"]


def _runs(doc, scenario):
    return [r for r in doc["runs"] if r["scenario"].endswith(":" + scenario)]


@pytest.fixture(scope="module")
def lifecycle(env, request):
    from lucepatch.main import main
    import contextlib
    import io
    import json

    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        main(["--workspace", str(env["ws"]), "--cache-dir", str(env["cache"]), "verify", "--reproducer",
              "lifecycle", "--lib", str(env["lib"]), "--baseline-lib", str(env["lib"]), "--driver", "fake",
              "--fixed", "--runs", "1", "--json"])
    return json.loads(out.getvalue())["evidence"]


def test_control_passes_with_a_program_proof_before_the_action(lifecycle):
    for r in _runs(lifecycle, "control"):
        assert r["outcome"] == "pass", r
        assert r["load_proof"] == {"when": "before-action", "reporter": "program", "hami_initialized": True,
                                   "pid": r["load_proof"]["pid"]}
        names = [Path(p["path"]).name for p in r["preload"]]
        assert names.count("libvgpu.so") == 1 and "liblp_reporter.so" in names and r["libcuda"]


def test_crash_right_after_init_is_a_crash_never_invalid(lifecycle):
    s = next(x for x in lifecycle["scenarios"] if x["scenario"] == "lifecycle:crash-after-init")
    assert s["baseline"]["outcomes"] == {"crash": 1} and s["patched"]["outcomes"] == {"crash": 1}
    for r in _runs(lifecycle, "crash-after-init"):
        assert r["outcome"] == "crash" and r["signal"] == "SIGSEGV", r
        assert r["load_proof"]["when"] == "before-action"
        assert r["backtrace"], "the preloaded reporter records where it crashed"


def test_crash_before_the_program_reports_is_proven_by_the_reporter(lifecycle):
    for r in _runs(lifecycle, "crash-before-report"):
        assert r["outcome"] == "crash", r
        assert r["load_proof"]["reporter"] == "preload" and r["load_proof"]["when"] == "on-signal"
        assert r["load_proof"]["hami_initialized"] is True


def test_no_report_is_invalid(lifecycle):
    for r in _runs(lifecycle, "no-report"):
        assert r["outcome"] == "invalid" and r["reason"].startswith("no load report"), r


def test_interposer_error_line_fails_a_run_that_exits_0(lifecycle):
    for r in _runs(lifecycle, "log-only"):
        assert r["returncode"] == 0
        assert r["outcome"] == "fail-log" and "Illegal device id" in r["reason"], r
        assert r["hami_log"][0]["class"] == "bad-device-id"
        assert r["hami_log"][0]["site"] == "multiprocess_memory_limit.c:1271"


def test_setup_error_is_invalid(lifecycle):
    for r in _runs(lifecycle, "setup-error"):
        assert r["outcome"] == "invalid" and "broken on purpose" in r["reason"], r


def test_unmet_requirements_are_skipped_with_the_reason_never_run(lifecycle):
    s = {x["scenario"]: x for x in lifecycle["scenarios"]}
    mod = s["lifecycle:needs-module"]
    assert mod["verdict"] == "skipped" and "lucepatch_fixture_no_such_module" in mod["reason"]
    drv = s["lifecycle:needs-real-driver"]
    assert drv["verdict"] == "skipped" and "needs the real CUDA driver" in drv["reason"]
    for name in ("needs-module", "needs-real-driver"):
        assert all(r["outcome"] == "skipped" and r["duration_s"] == 0.0 for r in _runs(lifecycle, name))
    skipped = {x["scenario"] for x in lifecycle["skipped"]}
    assert {"lifecycle:needs-module", "lifecycle:needs-real-driver"} <= skipped
    # and they started no process
    assert lifecycle["execution"]["processes"] == sum(1 for r in lifecycle["runs"] if r["outcome"] != "skipped")


def test_every_rank_proves_what_it_loaded(lifecycle):
    for r in _runs(lifecycle, "two-ranks"):
        assert r["outcome"] == "pass", r
        ranks = r["load_proof"]["ranks"]
        assert [p["rank"] for p in ranks] == [0, 1] and len({p["pid"] for p in ranks}) == 2
        assert all(p["hami_initialized"] and p["when"] == "before-action" for p in ranks)


def test_a_rank_that_crashes_makes_the_run_a_crash(lifecycle):
    for r in _runs(lifecycle, "two-ranks-crash"):
        assert r["outcome"] == "crash" and r["signal"] == "SIGSEGV", r
        assert re.match(r"SIGSEGV in rank 1 \(pid \d+\)", r["reason"]), r["reason"]


def test_a_rank_without_a_proof_makes_the_run_invalid(lifecycle):
    for r in _runs(lifecycle, "two-ranks-missing"):
        assert r["outcome"] == "invalid" and "rank 1" in r["reason"], r


def test_verdicts_and_evidence_are_the_c_reproducers(lifecycle):
    # same lib on both sides: nothing proven, the failing scenarios are not-proven, the evidence valid
    assert lifecycle["verdict"] == "invalid"  # no-report / setup-error / two-ranks-missing are invalid
    assert {"name": "lifecycle", "kind": "workload"}.items() <= lifecycle["reproducers"][0].items()
    assert lifecycle["driver"]["kind"] == "fake"


# ---- load_proof = "preload": a program that prints nothing ---------------------------------------

def test_unmodified_program_is_proven_by_the_reporter(cli, env):
    res, doc = _verify(cli, env, "blackbox")
    by = {r["scenario"].split(":")[1]: r for r in doc["runs"] if r["variant"] == "patched"}
    assert by["control"]["outcome"] == "pass"
    assert by["control"]["load_proof"]["when"] == "at-exit" and by["control"]["load_proof"]["reporter"] == "preload"
    assert by["segv"]["outcome"] == "crash" and by["segv"]["load_proof"]["when"] == "on-signal"
    assert by["exit-7"]["outcome"] == "fail" and by["exit-7"]["reason"] == "exit 7"
    # an invalid run settles its scenario: under the sequential rule the first invalid run of either
    # variant may end it before a patched run starts (timing), so every run of it is checked
    no_cuda = [r for r in doc["runs"] if r["scenario"].endswith(":no-cuda")]
    assert no_cuda and all(r["outcome"] == "invalid" and r["reason"] == "no libcuda.so.1 mapped" for r in no_cuda)


def test_a_preload_that_does_not_load_is_invalid(cli, env, tmp_path):
    bad = tmp_path / "libvgpu.so"
    shutil.copy("/bin/true", bad)  # an ELF that ld.so refuses to preload (not a shared object)
    args = ["--workspace", env["ws"], "--cache-dir", env["cache"], "verify", "--reproducer", "lifecycle",
            "--scenario", "crash-after-init", "--lib", bad, "--baseline-lib", bad, "--driver", "fake",
            "--fixed", "--runs", "1", "--json"]
    res = cli(*args)
    doc = res.json["evidence"]
    assert res.code == 1 and doc["verdict"] == "invalid"
    runs = _runs(doc, "crash-after-init")
    # under --fixed the scenario runs although the control is invalid too (the sequential rule stops the
    # reproducer at its control, and this loop once checked nothing); ld.so's own refusal is the reason
    assert len(runs) == 2, doc["runs"]
    for r in runs:
        assert r["outcome"] == "invalid" and "cannot load" in r["reason"] and "cannot be preloaded" in r["reason"], r


# ---- the reproducer.toml contract ----------------------------------------------------------------

def _write(tmp_path, body: str) -> Path:
    d = tmp_path / "w"
    d.mkdir(exist_ok=True)
    (d / "reproducer.toml").write_text('target = "t"\nartifact = "libvgpu.so"\n' + body)
    return d


@pytest.mark.parametrize("body, message", [
    ('kind = "rust"\n[[scenario]]\nname = "c"\ncontrol = true\n', "kind must be one of c, workload"),
    ('kind = "workload"\n[[scenario]]\nname = "c"\ncontrol = true\n', "has no command"),
    ('kind = "workload"\ncommand = []\n[[scenario]]\nname = "c"\ncontrol = true\n', "non-empty list"),
    ('kind = "workload"\ncommand = ["x"]\nload_proof = "vibes"\n[[scenario]]\nname = "c"\ncontrol = true\n',
     "load_proof must be one of program, preload"),
    ('kind = "workload"\ncommand = ["x"]\n[requires]\ncuda = true\n[[scenario]]\nname = "c"\ncontrol = true\n',
     "unknown requirement cuda"),
    ('kind = "workload"\ncommand = ["x"]\n[[scenario]]\nname = "c"\ncontrol = true\nrequires = { driver = "fake" }\n',
     'requires.driver must be "any" or "real"'),
    ('sources = []\ncommand = ["x"]\n[[scenario]]\nname = "c"\ncontrol = true\n', "is for kind"),
    ('kind = "workload"\ncommand = ["x"]\n[[scenario]]\nname = "c"\ncontrol = true\nranks = 0\n', "ranks must be >= 1"),
])
def test_bad_workload_toml_is_one_clear_line(tmp_path, body, message):
    with pytest.raises(UsageError) as e:
        load_reproducer_dir(_write(tmp_path, body))
    assert message in str(e.value) and "\n" not in str(e.value)


def test_workload_hash_covers_the_helpers_it_runs_with():
    from lucepatch.native.workload import HASHED_FILES

    r = load_reproducer_dir(REPO_ROOT / "reproducers" / "ctypes-clients")
    assert r.is_workload and list(r.extra_hash_files) == list(HASHED_FILES)
    c = load_reproducer_dir(REPO_ROOT / "reproducers" / "async-sched")
    assert not c.is_workload and c.extra_hash_files == []


def test_in_cluster_refuses_workloads():
    from lucepatch.k8s.incluster import plan_runs

    r = load_reproducer_dir(REPO_ROOT / "reproducers" / "ctypes-clients")
    with pytest.raises(UsageError, match="is a workload"):
        plan_runs([r], None, ["baseline", "patched"])


def test_two_rank_scenario_is_skipped_on_one_gpu_with_the_reason():
    """Issue 18's scenario on a one-GPU machine: skipped, saying why (the device count comes from the
    driver the verify uses, asked without the library under test)."""
    from lucepatch.verify.requirements import unmet

    r = load_reproducer_dir(REPO_ROOT / "reproducers" / "torch-clients")
    two = r.scenario("two-rank-threads-async")
    assert two.ranks == 2 and two.min_devices == 2 and two.timeout_s == 300
    why = unmet(r, two, "real", devices=1)
    assert "needs 2 GPUs; the driver reports 1" in why
    assert "needs 2 GPUs" not in unmet(r, two, "real", devices=2)
    # the torch-free control runs anywhere; every torch scenario needs the real driver
    assert unmet(r, r.scenario("driver"), "fake", devices=1) == ""
    assert "needs the real CUDA driver (this verify uses the simulated one" in unmet(r, r.scenario("torch-init"), "fake")


def test_workload_runs_default_to_eight_slots_c_runs_to_six(cli, env, monkeypatch):
    """verify's default parallelism: 6 for C reproducers (their processes queue on the driver's context
    creation), 8 once workload reproducers run (their seconds go to Python and PyTorch start-up on the
    CPU); measured on one H200 in lucepatch/verify/session.py. An explicit --jobs always wins."""
    from lucepatch.verify import session
    from lucepatch.verify.runner import namespace_isolation

    monkeypatch.setattr(session.os, "cpu_count", lambda: 16)
    res, doc = _verify(cli, env, "blackbox", "control")
    ex = doc["execution"]
    assert (ex["mode"], ex["jobs"]) == (("parallel", 8) if namespace_isolation()[0] else ("serial", 1)), ex
    assert "8 jobs" in res.err or ex["mode"] == "serial"
    monkeypatch.setattr(session, "namespace_isolation", lambda: (True, "private mount namespace per run"))
    assert session.plan_execution(None).jobs == 6
    assert session.plan_execution(None, workloads=True).jobs == 8
    assert session.plan_execution(3, workloads=True).jobs == 3
    monkeypatch.setattr(session.os, "cpu_count", lambda: 4)
    assert session.plan_execution(None, workloads=True).jobs == 4
