"""The simulated driver against the hardware: replay every program whose driver-call trace was
recorded on a real H200 (tests/fakecuda/traces/*.h200.jsonl, recorded with the interposer and no
HAMi) on the simulated driver, and fail on any difference in (call, thread, context current,
result, output written, and the output's value by its meaning: lucepatch/native/trace VALUE_CLASS)."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest

from lucepatch.native import trace
from lucepatch.native.fakecuda import build_fakecuda
from lucepatch.verify.record_traces import SEMANTICS_PROBES, compile_semantics
from lucepatch.verify.reproducer import load_reproducer_dir, scenario_env
from lucepatch.verify.runner import compile_reproducer

ROOT = Path(__file__).resolve().parent.parent
TRACE_DIR = Path(__file__).parent / "fakecuda" / "traces"
TRACES = sorted(TRACE_DIR.glob("*.h200.jsonl"))
KNOWN = tomllib.loads((TRACE_DIR / "known-differences.toml").read_text())


RECORDED = {p.name.rsplit(".h200.jsonl", 1)[0] for p in TRACES}
AWAITING = KNOWN.get("awaiting-trace", {})
AWAITING_VALUES = KNOWN.get("awaiting-values", {})


def _programs() -> list[str]:
    """Every program.scenario that needs an H200 trace: the semantics probes, every C reproducer scenario
    (workloads are not driver-API programs of ours: record_all records C reproducers only; nor are
    reproducers whose loops run for a time: their calls differ from run to run)."""
    names = [f"driver-semantics.{probe}" for probe in SEMANTICS_PROBES]
    for rdir in sorted((ROOT / "reproducers").iterdir()):
        if (rdir / "reproducer.toml").is_file():
            repro = load_reproducer_dir(rdir)
            if not repro.is_workload and not repro.is_timed:  # timed: record_traces.programs says why
                names += [f"{repro.name}.{s.name}" for s in repro.scenarios]
    return names


@pytest.mark.parametrize("name", _programs())
def test_h200_trace_recorded(name):
    if name in RECORDED:
        assert name not in AWAITING, f"{name} has its H200 trace now: drop it from [awaiting-trace] in known-differences.toml"
        return
    if name in AWAITING:
        pytest.skip(f"no-gpu: no H200 trace for {name} yet; record it: {AWAITING[name]}")
    pytest.fail(f"no H200 trace for {name}: run tools/gpu_session.sh traces on the H200 and commit it")


def test_awaiting_entries_name_real_programs():
    stale = sorted(set(AWAITING) - set(_programs()))
    assert not stale, f"[awaiting-trace] lists programs that do not exist: {stale}"


@pytest.fixture(scope="module")
def sim(tmp_path_factory):
    cache = tmp_path_factory.mktemp("trace-cache")
    stubs = build_fakecuda(cache / "fakecuda")
    return cache, stubs, trace.build_interposer(cache)


@pytest.mark.parametrize("recorded", TRACES, ids=lambda p: p.name)
def test_simulated_driver_matches_h200(recorded, sim):
    cache, stubs, interposer = sim
    meta = json.loads(recorded.read_text().splitlines()[0][1:])
    program, scenario = meta["program"], meta["scenario"]
    if program == "driver-semantics":
        binary, env = compile_semantics(cache, stubs), {}
    else:
        repro_dir = ROOT / "reproducers" / program
        if not repro_dir.is_dir():
            pytest.fail(f"trace {recorded.name} names reproducer {program}, which no longer exists")
        repro = load_reproducer_dir(repro_dir)
        binary, env = compile_reproducer(repro, cache, stubs), scenario_env(repro, repro.scenario(scenario))
    got, rc = trace.record(binary, scenario, interposer, {**env, "LD_LIBRARY_PATH": str(stubs)})
    expected = trace.load(recorded)
    assert trace.diff(expected, got) == []
    known_rc = KNOWN.get("returncode", {}).get(f"{program}.{scenario}")
    if known_rc:
        assert rc != meta["returncode"], f"{program}.{scenario} now matches: drop it from known-differences.toml"
    else:
        assert rc == meta["returncode"]


def test_h200_traces_carry_output_values():
    with_values = [p.name for p in TRACES
                   if json.loads(p.read_text().splitlines()[0][1:]).get("values") == trace.VALUES_VERSION]
    if not with_values:
        pytest.skip("no-gpu: the committed H200 traces predate value recording; re-record them with "
                    "tools/gpu_session.sh traces (values are then compared on every replay)")
    without = {p.name.rsplit(".h200.jsonl", 1)[0] for p in TRACES if p.name not in with_values}
    assert without == set(AWAITING_VALUES), (
        "every trace records values except those [awaiting-values] in known-differences.toml lists "
        "(re-record the rest with tools/gpu_session.sh traces; drop an entry once its trace has values)")
    for p in TRACES:
        if p.name not in with_values:
            continue
        for e in trace.load(p):
            if e["written"] is True and e["call"] != "cuDeviceGetName":
                assert e["value"] is not None, (p.name, e)


def test_replay_compares_output_values(sim):
    """On the simulated driver: a trace with values replays equal to itself, and a recording that
    differs only in a value (a device id, a context's identity, null vs not) is a difference."""
    cache, stubs, interposer = sim
    binary = compile_semantics(cache, stubs)
    first, _ = trace.record(binary, "all", interposer, {"LD_LIBRARY_PATH": str(stubs)})
    again, _ = trace.record(binary, "all", interposer, {"LD_LIBRARY_PATH": str(stubs)})
    assert trace.diff(first, again) == []
    valued = [e for e in first if e["value"] not in (None, trace.NOT_RECORDED)]
    assert valued, "the interposer recorded no output value"

    def has(e, call):  # a written value; for pointers a non-null one (a failed alloc writes null)
        return e["call"] == call and e["value"] not in (None, trace.NOT_RECORDED) and \
            (e["value"] != 0 or trace.VALUE_CLASS.get(call) == "exact")

    def mutated(call, change):
        i = next(i for i, e in enumerate(first) if has(e, call))
        return first[:i] + [{**first[i], "value": change(first[i]["value"])}] + first[i + 1:]

    for call, change in (("cuDeviceGet", lambda v: v + 1),            # another device id
                         ("cuCtxGetDevice", lambda v: v + 1),
                         ("cuDevicePrimaryCtxRetain", lambda v: v + 4096),  # a context never seen
                         ("cuMemAddressReserve", lambda v: 0),            # null instead of a pointer
                         ("cuStreamGetCtx", lambda v: v + 4096)):         # not the context it was made in
        assert any(has(e, call) for e in first), f"the semantics probe no longer calls {call}"
        d = trace.diff(mutated(call, change), first)
        assert len(d) >= 1 and "value" in d[0], (call, d)
    # a context's identity: the same pointer at another address in another run is equal
    shifted = [{**e, "value": e["value"] + 8 if trace.VALUE_CLASS.get(e["call"]) == "context" and e["value"] else e["value"]}
               for e in first]
    assert trace.diff(shifted, first) == []
    # an old recording (no values) compares written only
    old = [{k: v for k, v in e.items() if k != "value"} for e in first]
    assert trace.diff([trace.normalise(e) for e in old], first) == []
