"""Every verdict of `lucepatch verify`, proven through the CLI on the fakehami fixture.

A throwaway upstream repo is built from tests/fixtures/fakehami/{src,CMakeLists.txt}; each test
gets a workspace (lucepatch.toml, patches/fakehami/{target.toml,series,*.patch}, reproducers
copied from the real ones with target = "fakehami"). Builds share one cache per module.

  proven      the fixture's fix series on async-sched
  not-proven  the no-op "fix" (patches/bad) on async-sched: the patched build still fails
  regression  a PR #188-style fix (patches/pr188) on pr188-guard: success without allocating
  invalid     --lib pointing at an ELF that does not load, and at one that lacks the marker
  timeout     the harness fixture's `hang` scenario: killed with its process group
  control     the harness fixture with a failing control: invalid, whatever the fix does
  skipped     multi-device on a one-device simulated machine
The real HAMi-core variants run only when LUCEPATCH_SRC_HAMI_CORE is set.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import FIXTURES, REPO_ROOT, commit_all, init_repo, make_target
from lucepatch.verify.runner import namespace_isolation

FAKEHAMI = FIXTURES / "fakehami"
PR188_HAMI = FIXTURES / "pr188"
BUILD = ('[build]\nsystem = "cmake"\nconfigure_args = []\ntargets = ["vgpu"]\n\n'
         '[build.artifacts]\n"libvgpu.so" = "libvgpu.so"\n')

pytestmark = pytest.mark.needs("gcc", "cmake", "/usr/local/cuda/include/cuda.h")


@pytest.fixture(scope="module")
def fh(tmp_path_factory):
    root = tmp_path_factory.mktemp("fakehami-verify")
    up = init_repo(root / "upstream")
    shutil.copytree(FAKEHAMI / "src", up / "src")
    shutil.copy(FAKEHAMI / "CMakeLists.txt", up / "CMakeLists.txt")
    base = commit_all(up, "fakehami base")
    return {"root": root, "upstream": up, "base": base, "cache": root / "cache"}


def _series(sub: str) -> list[Path]:
    d = FAKEHAMI / "patches" / sub if sub else FAKEHAMI / "patches"
    if sub:
        return sorted(d.glob("*.patch"))
    return [d / l.strip() for l in (d / "series").read_text().splitlines() if l.strip() and not l.startswith("#")]


def make_ws(fh, name: str, patches: list[Path], repros: list[str], toml_edit=None) -> Path:
    ws = fh["root"] / name
    if ws.exists():
        shutil.rmtree(ws)
    make_target(ws, "fakehami", fh["base"], patches, build=BUILD)
    rdir = ws / "reproducers"
    shutil.copytree(REPO_ROOT / "reproducers" / "common", rdir / "common")
    for r in repros:
        src = REPO_ROOT / "reproducers" / r
        if not src.is_dir():
            src = FAKEHAMI / "reproducers" / r
        shutil.copytree(src, rdir / r)
        t = rdir / r / "reproducer.toml"
        text = re.sub(r'(?m)^target = ".*"$', 'target = "fakehami"', t.read_text())
        if toml_edit:
            text = toml_edit(r, text)
        t.write_text(text)
    return ws


def verify(cli, fh, ws, *args):
    res = cli("--workspace", ws, "--cache-dir", fh["cache"], "verify", "--source", fh["upstream"],
              "--driver", "fake", "--json", *args)
    doc = res.json["evidence"] if res.out.strip() else None
    return res, doc


def by_name(doc) -> dict:
    return {s["scenario"].split(":", 1)[1]: s for s in doc["scenarios"]}


# ---- proven ----------------------------------------------------------------------------------


def test_fix_series_is_proven_with_per_scenario_verdicts(cli, fh, tmp_path):
    ws = make_ws(fh, "ws-fix", _series(""), ["async-sched"])
    ev = tmp_path / "ev.json"
    res, doc = verify(cli, fh, ws, "--reproducer", "async-sched", "--runs", "5", "--evidence", ev)
    assert res.code == 0, res.err
    assert doc["verdict"] == "proven"
    sc = by_name(doc)
    assert sc["control"]["verdict"] == "pass"
    assert sc["ctxless-async-alloc"]["verdict"] == "proven"
    assert sc["ctxless-async-alloc"]["baseline"]["failures"] == 5 and sc["ctxless-async-alloc"]["patched"]["failures"] == 0
    assert sc["ctxless-async-alloc"]["p_value"] < 0.01
    # 4 scenarios x 2 variants x 5 runs, each a process that proved what it loaded
    assert len(doc["runs"]) == 40 and all(r["preload"] and r["libcuda"] for r in doc["runs"])
    assert doc["driver"]["kind"] == "fake" and doc["simulated"] is True
    ex = doc["execution"]
    assert ex["processes"] == 40
    assert ex["mode"] == ("parallel" if namespace_isolation()[0] and (os.cpu_count() or 1) > 1 else "serial")
    assert json.loads(ev.read_text())["verdict"] == "proven"


@pytest.mark.parametrize("columns", [80, 100, 160])
def test_verify_table_is_readable_at_the_terminal_width(cli, fh, monkeypatch, tmp_path, columns):
    """Results on stdout, at 80/100/160 columns: every scenario by its own name, on one line with its
    numbers, verdict and short reason; the full reason only with --wide (and in the evidence)."""
    from lucepatch.show.model import short_reason
    from lucepatch.verify.evidence import load_evidence

    ws = make_ws(fh, "ws-width", _series(""), ["async-sched"])
    monkeypatch.setenv("COLUMNS", str(columns))
    ev = tmp_path / "ev.json"
    res = cli("--workspace", ws, "--cache-dir", fh["cache"], "verify", "--source", fh["upstream"], "--driver", "fake",
              "--reproducer", "async-sched", "--fixed", "--runs", "3", "--evidence", ev)
    assert res.code in (0, 1), res.err
    doc = load_evidence(ev)
    lines = res.out.splitlines()
    assert lines and all(len(l) <= columns for l in lines), lines
    assert "async-sched:" not in res.out  # the shared prefix is not repeated on every row
    for s in doc.scenarios:
        row = [l for l in lines if l.split() and l.split()[0] == s.name]
        assert len(row) == 1, (s.name, lines)  # one line, never truncated
        assert f"{s.baseline.failures}/{s.baseline.runs}" in row[0] and s.verdict in row[0]
        assert row[0].rstrip().endswith(short_reason(s)), row[0]
    assert f"lucepatch: verdict: {doc.verdict}" in res.err  # progress on stderr
    wide = cli("--workspace", ws, "--cache-dir", fh["cache"], "verify", "--source", fh["upstream"], "--driver", "fake",
               "--reproducer", "async-sched", "--fixed", "--runs", "3", "--wide", "--evidence", ev)
    flat = " ".join(wide.out.split())
    assert all(" ".join(s.reason.split()) in flat for s in load_evidence(ev).scenarios)


def test_jobs_1_runs_serially(cli, fh):
    ws = make_ws(fh, "ws-serial", _series(""), ["async-sched"])
    res, doc = verify(cli, fh, ws, "--reproducer", "async-sched", "--runs", "5", "--jobs", "1",
                      "--scenario", "ctxless-sync-alloc")
    assert res.code == 0, res.err
    assert doc["execution"]["mode"] == "serial" and doc["execution"]["jobs"] == 1
    assert set(by_name(doc)) == {"control", "ctxless-sync-alloc"}  # controls always run


def test_torch_free_workload_runs_end_to_end_on_the_fixture(cli, fh):
    """CI's end-to-end run of the workload kind: reproducers/ctypes-clients (Python, ctypes on the
    driver API, ThreadPoolExecutor workers without a context) against the fixture's baseline and
    fix series, built by lucepatch, on the simulated driver. (threadpool-async-alloc is left out:
    the fixture charges a garbage but in-range device silently and hooks no cuMemGetInfo, so its
    baseline passes; real HAMi-core fails it, tests/test_verify_hami.py.)"""
    ws = make_ws(fh, "ws-ctypes", _series(""), ["ctypes-clients"])
    res, doc = verify(cli, fh, ws, "--reproducer", "ctypes-clients", "--runs", "5",
                      "--scenario", "threadpool-async-free", "--scenario", "threadpool-sync-alloc")
    assert res.code == 0, res.err
    assert doc["verdict"] == "proven" and doc["reproducers"][0]["kind"] == "workload"
    sc = by_name(doc)
    for name in ("threadpool-async-free", "threadpool-sync-alloc"):
        assert sc[name]["baseline"]["failures"] == 5 and sc[name]["patched"]["failures"] == 0, sc[name]
    # which failure a baseline run shows depends on the stack residue of a Python thread (this
    # build: a crash, or exit 0 with the out-of-range id logged): any of them fails the run
    assert set(sc["threadpool-sync-alloc"]["baseline"]["outcomes"]) <= {"crash", "fail-log", "fail"}
    for r in doc["runs"]:
        assert r["load_proof"]["when"] == "before-action" and r["load_proof"]["hami_initialized"], r


# ---- not-proven ------------------------------------------------------------------------------


def test_noop_fix_is_not_proven(cli, fh):
    ws = make_ws(fh, "ws-bad", _series("bad"), ["async-sched"])
    res, doc = verify(cli, fh, ws, "--reproducer", "async-sched", "--runs", "5", "--scenario", "ctxless-async-alloc")
    assert res.code == 1
    assert doc["verdict"] == "not-proven"
    s = by_name(doc)["ctxless-async-alloc"]
    assert s["verdict"] == "not-proven" and "still fails" in s["reason"]
    assert s["patched"]["failures"] == 5


# ---- regression: the PR #188 guard ------------------------------------------------------------


def test_pr188_style_fix_is_caught(cli, fh):
    ws = make_ws(fh, "ws-pr188", _series("pr188"), ["pr188-guard"])
    res, doc = verify(cli, fh, ws, "--reproducer", "pr188-guard", "--runs", "5")
    assert res.code == 1
    assert doc["verdict"] == "regression"
    sc = by_name(doc)
    # residue 0: the baseline answers 201 by luck, the "fix" answers CUDA_SUCCESS -> regression
    assert sc["ctxless-alloc-valid-residue"]["verdict"] == "regression"
    assert sc["ctxless-alloc-valid-residue"]["baseline"]["failures"] == 0
    assert "CUDA_SUCCESS" in sc["ctxless-alloc-valid-residue"]["patched"]["first_error"]
    # out-of-range residue: the baseline crashes, the "fix" still lies -> not proven
    assert sc["ctxless-alloc-exact-error"]["verdict"] == "not-proven"
    assert set(sc["ctxless-alloc-exact-error"]["baseline"]["outcomes"]) == {"crash"}
    # both failed: settled not-proven at once (issue 29), the patched build ran for its failure rate only
    assert sc["ctxless-alloc-exact-error"]["mode"] == "settled"
    assert "settled not-proven" in sc["ctxless-alloc-exact-error"]["stop_reason"]


def test_pr188_guard_proves_the_real_fix(cli, fh):
    ws = make_ws(fh, "ws-pr188-fix", _series(""), ["pr188-guard"])
    res, doc = verify(cli, fh, ws, "--reproducer", "pr188-guard", "--runs", "5")
    assert res.code == 0, res.err
    sc = by_name(doc)
    assert sc["ctxless-alloc-exact-error"]["verdict"] == "proven"
    assert sc["ctxless-alloc-valid-residue"]["verdict"] == "guarded"


# ---- invalid: a preload that does not load, or lacks the marker ---------------------------------


@pytest.fixture(scope="module")
def libs(fh, tmp_path_factory):
    d = tmp_path_factory.mktemp("libs")
    broken = d / "libvgpu-broken.so"  # ELF magic, then nothing ld.so can load
    broken.write_bytes(b"\x7fELF" + b"\0" * 60)
    quiet_src = d / "quiet.c"
    quiet_src.write_text("int lucepatch_quiet_preload(void) { return 0; }\n")
    quiet = d / "libvgpu-quiet.so"  # loads fine, prints no "Initialized"
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(quiet), str(quiet_src)], check=True)
    from lucepatch.builders.native import build_variant
    from lucepatch.target import load_target
    from lucepatch.workspace import resolve_workspace

    ws = make_ws(fh, "ws-libs", _series(""), ["async-sched"])
    t = load_target(resolve_workspace(str(ws)), "fakehami")
    good = build_variant(t, fh["upstream"], "baseline", fh["cache"]).artifacts["libvgpu.so"]
    return {"ws": ws, "broken": broken, "quiet": quiet, "good": good}


# a library the loader ignores is `cannot load: <the loader's line>` (issue 27), no longer "was not mapped"
@pytest.mark.parametrize("which,why", [("broken", "cannot load: ERROR: ld.so: object 'libvgpu-broken.so' from LD_PRELOAD "
                                                  "cannot be preloaded"), ("quiet", "load marker")])
def test_lib_that_does_not_prove_itself_is_invalid(cli, fh, libs, which, why):
    res = cli("--workspace", libs["ws"], "--cache-dir", fh["cache"], "verify", "--reproducer", "async-sched",
              "--driver", "fake", "--fixed", "--runs", "2", "--scenario", "ctxless-async-alloc", "--json",
              "--baseline-lib", libs["good"], "--lib", libs[which])
    assert res.code == 1
    doc = res.json["evidence"]
    assert doc["verdict"] == "invalid"
    patched = [r for r in doc["runs"] if r["variant"] == "patched"]
    assert patched and all(r["outcome"] == "invalid" and why in r["reason"] for r in patched)
    assert doc["variants"]["patched"]["from"] == "file"


# the beclab fork's shape: _dl_sym bound lazily (a PLT call), here called from a constructor as HAMi-core's
# preInit calls it when a program's first CUDA call precedes any dlsym; and a reference bound at load
CALLS_DL_SYM = '__attribute__((constructor)) static void lp_init(void) { _dl_sym(0, "dlsym", 0); }\n'


def _old_glibc_lib(tmp_path, binding):
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import hamilib
    from lucepatch.native import elf

    here = elf.libc_provides(elf.system_libc()).glibc
    if tuple(int(x) for x in here.split(".")) < (2, 34):
        pytest.skip(f"no-tool: this machine's glibc {here} still exports _dl_sym: the library loads here")
    if binding == "called":
        return here, hamilib.build(tmp_path, "libvgpu-oldglibc", ["cuMemAlloc_v2"], dl_sym="lazy", extra=CALLS_DL_SYM)
    return here, hamilib.build(tmp_path, "libvgpu-oldglibc", ["cuMemAlloc_v2"], dl_sym=binding)


@pytest.mark.parametrize("binding", ["called", "load"])
def test_a_library_the_loader_refuses_is_cannot_load_with_the_loaders_line(cli, fh, libs, tmp_path, binding):
    """A node library built for glibc < 2.34 (it references _dl_sym@GLIBC_PRIVATE, as the beclab fork's
    does) as the baseline: every run is `invalid (cannot load: <the loader's line>)`, with the cause, in the
    evidence, the table (and whole under it) and the page (issue 27 item 3). The cause says which: a
    reference resolved at load stops any process; one bound lazily loads (the bind shim stands in for it
    under the C reproducers' LD_BIND_NOW=1) and stops the process where the library calls it - as it would
    a pod's."""
    here, old = _old_glibc_lib(tmp_path, binding)
    ev_path = tmp_path / "ev.json"
    res = cli("--workspace", libs["ws"], "--cache-dir", fh["cache"], "verify", "--reproducer", "async-sched",
              "--driver", "fake", "--fixed", "--runs", "2", "--scenario", "ctxless-async-alloc", "--evidence", ev_path,
              "--baseline-lib", old, "--lib", libs["good"])
    assert res.code == 1
    doc = json.loads(ev_path.read_text())
    base = [r for r in doc["runs"] if r["variant"] == "baseline"]
    assert base and all(r["outcome"] == "invalid" for r in base)
    want = "cannot load: symbol lookup error: libvgpu-oldglibc.so: undefined symbol: _dl_sym, version GLIBC_PRIVATE"
    assert all(r["reason"].startswith(want) for r in base)
    assert all(f"(cause: _dl_sym@GLIBC_PRIVATE is not exported by libc.so.6 since glibc 2.34; this machine has glibc "
               f"{here}" in r["reason"] for r in base)
    why = "a pod's, dies at that same call" if binding == "called" else "built for an older glibc"
    assert all(why in r["reason"] for r in base)
    assert ("liblp_bindshim.so" in res.err) is (binding == "called")  # verify says when it stands in
    control = by_name(doc)["control"]
    assert control["verdict"] == "invalid" and control["reason"].startswith(want) and "the baseline build" in control["reason"]
    assert want in res.out  # the table's why column
    # and under the table, once, with its cause (the row keeps the loader's line only)
    lines = res.out.splitlines()
    under = [i for i, l in enumerate(lines) if "scenario(s), the baseline build: cannot load:" in l]
    assert len(under) == 1, res.out
    below = " ".join(x.strip() for x in lines[under[0]:under[0] + 8])  # wrapped at spaces under the table
    assert "(cause: _dl_sym@GLIBC_PRIVATE is not exported" in below and why in below
    page = tmp_path / "ev.html"
    shown = cli("show", ev_path, "--html", page)
    assert shown.code in (0, 1) and want in page.read_text()


def test_a_lazily_bound_gone_symbol_does_not_stop_the_c_reproducers(cli, fh, libs, tmp_path):
    """Bound lazily and never called, _dl_sym would not stop a pod's process: under the C reproducers'
    LD_BIND_NOW=1 the bind shim resolves it (listed in each run's preload), so the run goes on to what
    the library does (this one is no HAMi-core: its runs lack the load marker, nothing about the loader)."""
    _, lazy = _old_glibc_lib(tmp_path, "lazy")
    ev_path = tmp_path / "ev.json"
    res = cli("--workspace", libs["ws"], "--cache-dir", fh["cache"], "verify", "--reproducer", "async-sched",
              "--driver", "fake", "--fixed", "--runs", "1", "--scenario", "ctxless-async-alloc", "--evidence", ev_path,
              "--baseline-lib", lazy, "--lib", libs["good"])
    doc = json.loads(ev_path.read_text())
    base = [r for r in doc["runs"] if r["variant"] == "baseline"]
    assert base and not any(r["reason"].startswith("cannot load") for r in base), [r["reason"] for r in base]
    assert all("load marker" in r["reason"] for r in base)
    assert all(any(p["path"].endswith("liblp_bindshim.so") for p in r["preload"]) for r in base)
    assert all(not any(p["path"].endswith("liblp_bindshim.so") for p in r["preload"])
               for r in doc["runs"] if r["variant"] == "patched")  # the good library needs none
    assert "binds _dl_sym@GLIBC_PRIVATE lazily" in res.err and "liblp_bindshim.so" in res.err


def test_lib_that_is_not_elf_is_a_usage_error(cli, fh, libs, tmp_path):
    txt = tmp_path / "libvgpu.so"
    txt.write_text("not a library\n")
    res = cli("--workspace", libs["ws"], "--cache-dir", fh["cache"], "verify", "--reproducer", "async-sched",
              "--driver", "fake", "--baseline-lib", libs["good"], "--lib", txt)
    assert res.code == 2 and "not an ELF" in res.err


# ---- timeout ------------------------------------------------------------------------------------


def test_hanging_scenario_times_out_and_its_process_group_dies(cli, fh):
    ws = make_ws(fh, "ws-hang", _series(""), ["harness"])
    res, doc = verify(cli, fh, ws, "--reproducer", "harness", "--fixed", "--runs", "1", "--scenario", "hang")
    assert res.code == 1
    hang = [r for r in doc["runs"] if r["scenario"] == "harness:hang"]
    assert len(hang) == 2 and all(r["outcome"] == "timeout" for r in hang)
    assert all(r["duration_s"] < 3 + 5 for r in hang)
    for r in hang:  # the forked child was killed with the group, not left sleeping
        pid = r["values"]["child_pid"]
        assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().split()[2]
    assert by_name(doc)["hang"]["verdict"] == "not-proven"
    assert by_name(doc)["hang"]["patched"]["outcomes"] == {"timeout": 1}


# ---- control failure ----------------------------------------------------------------------------


def test_failing_control_makes_everything_invalid(cli, fh):
    def fail_control(_r, text):
        return text.replace('[env]\n', '[env]\nLP_FIXTURE_FAIL_CONTROL = "1"\n')

    ws = make_ws(fh, "ws-ctl", _series(""), ["harness"], toml_edit=fail_control)
    res, doc = verify(cli, fh, ws, "--reproducer", "harness", "--fixed", "--runs", "3", "--scenario", "ctxless-async-alloc")
    assert res.code == 1
    assert doc["verdict"] == "invalid"
    sc = by_name(doc)
    assert sc["control"]["verdict"] == "invalid" and "control failed" in sc["control"]["reason"]
    # the fix itself works (3/3 vs 0/3), but nothing is proven on a broken harness
    assert sc["ctxless-async-alloc"]["verdict"] == "invalid"
    assert sc["ctxless-async-alloc"]["baseline"]["failures"] == 3 and sc["ctxless-async-alloc"]["patched"]["failures"] == 0


# ---- skipped ------------------------------------------------------------------------------------


def test_multi_device_on_one_device_is_skipped_and_says_so(cli, fh):
    def one_device(_r, text):
        return text.replace('LUCEPATCH_FAKECUDA_DEVICES = "2"', 'LUCEPATCH_FAKECUDA_DEVICES = "1"')

    ws = make_ws(fh, "ws-skip", _series(""), ["multi-device"], toml_edit=one_device)
    res, doc = verify(cli, fh, ws, "--reproducer", "multi-device", "--fixed", "--runs", "2")
    assert res.code == 1
    assert all(s["verdict"] == "skipped" for s in doc["scenarios"])
    assert {s["scenario"] for s in doc["skipped"]} == {"multi-device:control", "multi-device:stream-device",
                                                       "multi-device:free-recorded-device"}
    assert all("needs 2 CUDA devices" in s["reason"] for s in doc["skipped"])
    assert all(r["outcome"] == "skipped" for r in doc["runs"])
    assert doc["verdict"] == "not-proven"  # nothing was measured, so nothing is proven


def test_all_runs_every_reproducer_of_the_target(cli, fh):
    ws = make_ws(fh, "ws-all", _series(""), ["async-sched", "pr188-guard"])
    res = cli("--workspace", ws, "--cache-dir", fh["cache"], "verify", "--all", "--source", fh["upstream"],
              "--driver", "fake", "--runs", "5", "--json")
    assert res.code == 0, res.err
    doc = res.json["evidence"]
    assert {r["name"] for r in doc["reproducers"]} == {"async-sched", "pr188-guard"}
    assert {s["reproducer"] for s in doc["scenarios"]} == {"async-sched", "pr188-guard"}


def test_unknown_scenario_is_a_usage_error(cli, fh):
    ws = make_ws(fh, "ws-unknown", _series(""), ["async-sched"])
    res = cli("--workspace", ws, "--cache-dir", fh["cache"], "verify", "--source", fh["upstream"], "--driver", "fake",
              "--reproducer", "async-sched", "--scenario", "nope")
    assert res.code == 2 and "nope" in res.err
    # the error lists the scenarios that exist, and the build never started
    assert "valid: async-sched:ctxless-async-alloc" in res.err and "async-sched:ctxless-sync-alloc" in res.err
    assert len(res.err.strip().splitlines()) == 1


# ---- the sequential rule (default) against --fixed ---------------------------------------------


def test_sequential_spends_a_third_of_fixed_20_with_the_same_verdicts(cli, fh, tmp_path):
    from lucepatch.verify.evidence import load_evidence

    ws = make_ws(fh, "ws-seq", _series(""), ["async-sched"])
    res_f, fixed = verify(cli, fh, ws, "--reproducer", "async-sched", "--fixed", "--runs", "20")
    res_s, seq = verify(cli, fh, ws, "--reproducer", "async-sched", "--evidence", tmp_path / "seq.json")
    assert res_f.code == res_s.code == 0, res_s.err
    assert {k: v["verdict"] for k, v in by_name(seq).items()} == {k: v["verdict"] for k, v in by_name(fixed).items()}
    assert seq["verdict"] == fixed["verdict"] == "proven"
    assert fixed["execution"]["processes"] == 160 and fixed["run_policy"]["rule"] == "fixed"
    assert seq["execution"]["processes"] == len(seq["runs"]) == 2 * 5 + 3 * (5 + 10)
    pol = seq["run_policy"]
    assert pol["rule"] == "sequential" and pol["max_runs"] == 20 and pol["theta"] <= 0.37
    assert pol["bounds"]["proven_if_no_effect"] <= 0.01 and pol["bounds"]["proven_if_patched_rate_at_least_theta"] <= 0.01
    for name, s in by_name(seq).items():
        want = {"baseline": 5, "patched": 5} if name == "control" else {"baseline": 5, "patched": 10}
        assert s["runs_spent"] == want and s["mode"] == "sequential", (name, s)
        if name != "control":
            assert s["theta"] == 0.3691 and "patched 0/10 ⇒ failure rate < 0.37 at 99 %" in s["reason"]
            assert "failed 5/5 in a row" in s["stop_reason"]
    # launch order is recorded and the runs are listed in it
    assert [r["launch"] for r in seq["runs"]] == list(range(len(seq["runs"])))
    assert load_evidence(tmp_path / "seq.json").run_policy.theta == pol["theta"]


def _flaky(schedule: str, tickets: Path):
    def edit(_r, text):
        return text.replace('[env]\n', f'[env]\nLP_FIXTURE_SCHEDULE = "{schedule}"\nLP_FIXTURE_TICKETS = "{tickets}"\n')
    return edit


def test_a_baseline_pass_switches_to_flaky_mode_and_runs_to_the_maximum(cli, fh, tmp_path):
    ws = make_ws(fh, "ws-flaky", _series(""), ["harness"], toml_edit=_flaky("FFPFFFFFFFFF", tmp_path / "t"))
    res, doc = verify(cli, fh, ws, "--reproducer", "harness", "--runs", "12", "--scenario", "flaky")
    assert res.code == 0, res.err
    s = by_name(doc)["flaky"]
    assert s["mode"] == "flaky" and s["runs_spent"] == {"baseline": 12, "patched": 12}
    assert s["baseline"]["failures"] == 11 and s["baseline"]["pass"] == 1 and s["patched"]["failures"] == 0
    assert "a baseline run passed" in s["stop_reason"] and "(launch order) passed" in s["stop_reason"]
    assert s["verdict"] == "proven" and s["theta"] == 0.3188  # patched 0/12: 1 - 0.01 ** (1 / 12), rounded up
    assert by_name(doc)["control"]["runs_spent"] == {"baseline": 5, "patched": 5}


def test_a_patched_failure_settles_the_scenario(cli, fh, tmp_path):
    """Issue 29: the patched build failed (its 7th run), so `proven` is impossible and the baseline had
    failed: not-proven is settled. The baseline spends nothing more (its 5 were in), the patched build
    only what its failure rate needs (1/9 -> [0.003, 0.48] at 95 %) — not 16 + 16 as flaky mode did."""
    ws = make_ws(fh, "ws-flaky-p", _series(""), ["harness"], toml_edit=_flaky("FFFFFFXFFFFFFFFF", tmp_path / "t"))
    res, doc = verify(cli, fh, ws, "--reproducer", "harness", "--runs", "16", "--scenario", "flaky")
    assert res.code == 1
    s = by_name(doc)["flaky"]
    assert s["mode"] == "settled" and s["runs_spent"]["baseline"] == 5
    # 9 decide the estimate; a 10th may have been in flight when the 7th failed (launched, so tallied)
    assert s["runs_spent"]["patched"] in (9, 10) and s["patched"]["runs"] == s["runs_spent"]["patched"]
    assert s["patched"]["failures"] == 1 and s["verdict"] == "not-proven" and "still fails" in s["reason"]
    # the 7th run to start takes ticket 6; in parallel that may be launch index 5 or 7 (tickets go by start order)
    assert "settled not-proven" in s["stop_reason"]
    assert re.search(r"first trigger: patched run \d+ \(launch order\) failed", s["stop_reason"]), s["stop_reason"]
    rate = s["patched_rate"]
    assert (rate["failures"], rate["runs"], rate["confidence"]) == (1, s["patched"]["runs"], 0.95)
    assert rate["high"] - rate["low"] <= 0.5 and rate["low"] < 0.01
    assert doc["run_policy"]["settle"]["patched"]["max_width"] == 0.5


def test_runs_below_what_a_proof_needs_says_how_many(cli, fh):
    """The sequential rule spends runs towards a verdict: a --runs that can never prove is refused before
    anything is built (issue 29), with the runs a proof needs; --fixed still measures that many runs."""
    ws = make_ws(fh, "ws-runs3", _series(""), ["async-sched"])
    res, doc = verify(cli, fh, ws, "--reproducer", "async-sched", "--runs", "3", "--scenario", "ctxless-sync-alloc")
    assert res.code == 2 and doc is None and len(res.err.strip().splitlines()) == 1, res.err
    assert "smallest possible p is 0.05" in res.err and "proven needs --runs 5 or more" in res.err
    assert "--fixed --runs 3" in res.err and "building" not in res.err
    res, doc = verify(cli, fh, ws, "--reproducer", "async-sched", "--fixed", "--runs", "3", "--scenario", "ctxless-sync-alloc")
    assert res.code == 1 and doc["verdict"] == "not-proven"
    s = by_name(doc)["ctxless-sync-alloc"]
    assert s["baseline"]["failures"] == 3 and s["patched"]["failures"] == 0
    assert "with --fixed --runs 3" in s["reason"] and "smallest possible p is 0.05" in s["reason"]


def test_a_failing_control_stops_the_reproducer_under_the_sequential_rule(cli, fh):
    def fail_control(_r, text):
        return text.replace('[env]\n', '[env]\nLP_FIXTURE_FAIL_CONTROL = "1"\n')

    ws = make_ws(fh, "ws-ctl-seq", _series(""), ["harness"], toml_edit=fail_control)
    res, doc = verify(cli, fh, ws, "--reproducer", "harness", "--scenario", "ctxless-async-alloc")
    assert res.code == 1 and doc["verdict"] == "invalid"
    sc = by_name(doc)
    assert sc["control"]["verdict"] == "invalid" and "control failed" in sc["control"]["stop_reason"]
    s = sc["ctxless-async-alloc"]
    assert s["verdict"] == "invalid" and "stopped: control harness:control failed" in s["stop_reason"]
    assert sum(s["runs_spent"].values()) < 15 and len(doc["runs"]) < 2 * 5 + 15


def test_ref_vs_ref_logs_each_build_under_its_own_name(cli, fh):
    up = fh["upstream"]
    (up / "README.ref-a").write_text("a\n")
    ref_a = commit_all(up, "docs: a")
    (up / "README.ref-b").write_text("b\n")
    ref_b = commit_all(up, "docs: b")
    ws = make_ws(fh, "ws-refs", _series(""), ["async-sched"])
    res, doc = verify(cli, fh, ws, "--reproducer", "async-sched", "--fixed", "--runs", "1",
                      "--scenario", "ctxless-sync-alloc", "--baseline-ref", ref_a, "--patched-ref", ref_b)
    assert f"building fakehami baseline ({ref_a})" in res.err and f"building fakehami patched ({ref_b})" in res.err
    assert doc["variants"]["baseline"]["ref"] == ref_a and doc["variants"]["patched"]["ref"] == ref_b


def test_a_c_scenario_needing_more_gpus_than_the_driver_reports_is_skipped_unrun(cli, fh, monkeypatch):
    """device-index's reordered scenarios (CUDA_VISIBLE_DEVICES=1,0, min_devices = 2) on a machine
    whose driver reports one GPU: cuInit finds no device there, so the program could not prove what
    it loaded and its runs were `invalid` (the H200, docs/evidence/i28-hami-core.h200.json). The
    runner counts the GPUs first and skips them, starting no process; the control still runs."""
    monkeypatch.setenv("LUCEPATCH_FAKECUDA_DEVICES", "1")  # the driver the runner asks, and every run
    ws = make_ws(fh, "ws-skip-c", _series(""), ["device-index"])
    res, doc = verify(cli, fh, ws, "--reproducer", "device-index", "--fixed", "--runs", "2")
    sc = by_name(doc)
    reordered = [n for n in sc if n.startswith("reordered")]
    assert sorted(reordered) == ["reordered", "reordered-cuda-first", "reordered-device-1",
                                 "reordered-per-device-limits"]
    for n in reordered:
        assert sc[n]["verdict"] == "skipped", (n, sc[n])
        assert "needs 2 GPUs; the driver reports 1" in sc[n]["reason"]
    runs = [r for r in doc["runs"] if r["scenario"].split(":")[1] in reordered]
    assert runs and all(r["outcome"] == "skipped" and r["returncode"] is None for r in runs)
    assert sc["control"]["verdict"] != "skipped"  # one GPU is enough for it: it ran
    assert all(r["returncode"] is not None for r in doc["runs"] if r["scenario"] == "device-index:control")
