"""What a libvgpu.so is and what may replace it (issue 27 items 1 and 2): `node --lib`, deploy's identity/symbols/env/loader gates, the routes for a fork.

Libraries are built here (tests/hamilib.py): the exported names of a real build of a line, with a
vendor's extra names, hooks under CUDA 12 entry-point names, getenv() of the vendor's variables,
and a versioned `_dl_sym@GLIBC_PRIVATE` reference (linked against a stand-in libc.so.6 that
exports it at GLIBC_PRIVATE, as glibc < 2.34 did). The real beclab library is used only when
LUCEPATCH_FORK_LIB names it (opt-in); the real HAMi-core history only under LUCEPATCH_SRC_HAMI_CORE.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO_ROOT, evidence_doc

import hamilib
from lucepatch.lines import history
from lucepatch.lines.identity import FORK, LINE_BUILD, UNKNOWN, UPSTREAM, identify, line_builds
from lucepatch.lines.replace import DROP_IN, REFUSED, Side, judge
from lucepatch.main import main
from lucepatch.native import elf

pytestmark = pytest.mark.needs("gcc")


@pytest.fixture(scope="module")
def libs(tmp_path_factory):
    d = tmp_path_factory.mktemp("identity-libs")
    return {
        "up": hamilib.upstream_like(d, "up"),
        "up25": hamilib.upstream_like(d, "up25", line="hami-core-v2.5"),
        "line25": hamilib.line_build_like(d, "line25", line="hami-core-v2.5"),
        "fork": hamilib.fork_like(d, "fork"),  # _dl_sym in a PLT call, as the real fork has it: bound lazily
        "fork_load": hamilib.fork_like(d, "fork-load", dl_sym="load"),  # its address taken: bound at load
        "fork_now": hamilib.fork_like(d, "fork-now", flags=["-Wl,-z,now"]),  # a PLT call in a -z now library
        "fork_o2": hamilib.fork_like(d, "fork-o2", flags=["-O2"], dl_sym=False),
        "fork_noplt": hamilib.fork_like(d, "fork-noplt", flags=["-O2", "-fno-plt"], dl_sym=False),
        # the vendor's library with the line's fixes carried in: every vendor name kept
        "fork_fixed": hamilib.build(d, "fork-fixed", sorted(set(elf.defined_dynamic_symbols(
            hamilib.fork_like(d, "fork-src", dl_sym=False)))) + sorted(line_builds()["hami-core-v2.5"].adds - {
                "shrreg_major_version", "shrreg_minor_version"}), minor=1, env=hamilib.FORK_ENV),
        "tiny": hamilib.build(d, "tiny", ["cuMemAlloc_v2", "cuGetProcAddress", "nvmlInit_v2"], minor=2),
        "other": hamilib.build(d, "other", ["f"], minor=2),
        "dir": d,
    }


def _cli(capsys, *args):
    rc = main(["--workspace", str(REPO_ROOT), *map(str, args)])
    out, err = capsys.readouterr()
    return rc, out, err


def _here_glibc() -> tuple[int, ...]:
    libc = elf.system_libc()
    v = elf.libc_provides(libc).glibc if libc else None
    return tuple(int(x) for x in v.split(".")) if v else ()


# ---- identity ------------------------------------------------------------------------------------------


def test_upstream_names_at_the_main_base_are_upstream_at_its_commits(libs):
    i = identify(libs["up"])
    assert i.kind == UPSTREAM and i.line == "hami-core"
    state = history.load_history().state_of("52f33fc")  # the main line's base since issue 36
    assert i.commits == [state.span()] and "52f33fc" in i.summary
    assert any(d.startswith("exported hook set (") and state.span() in d for d in i.decided_by)
    assert any("shared region 1.2" in d for d in i.decided_by) and not i.foreign and i.drop_in_possible


def test_upstream_names_of_54b1305_place_it_on_the_v2_5_line(libs):
    i = identify(libs["up25"])
    h = history.load_history()
    assert i.kind == UPSTREAM and i.line == "hami-core-v2.5"
    assert h.state_of("54b1305").span() in i.commits  # the commits it can be include the line's base
    assert "region 1.1" in " ".join(i.decided_by)


def test_a_lines_own_build_is_recognised_by_the_names_its_patches_add(libs):
    i = identify(libs["line25"])
    assert i.kind == LINE_BUILD and i.line == "hami-core-v2.5"
    assert all(n in i.summary for n in line_builds()["hami-core-v2.5"].adds)
    assert i.renamed == [] and i.lacks == [] and i.env_extra == []


def test_a_fork_names_its_extra_symbols_and_environment_grouped(libs):
    i = identify(libs["fork"])
    assert i.kind == FORK and i.line == "hami-core-v2.5" and not i.drop_in_possible
    groups = {g.group: g for g in i.foreign}
    assert groups["scheduler client"].vendor and "olares_initialize_client" in groups["scheduler client"].names
    assert {"uwsc_new", "tcp_connect"} <= set(groups["websocket client"].names)
    assert {"ev_run", "event_base_new"} <= set(groups["event loop"].names)
    assert sum(len(g.names) for g in i.foreign) == len(hamilib.FORK_EXTRAS)
    # the same hooks, under the names CUDA 12 headers give them
    assert ["cuMemAdvise", "cuMemAdvise_v2"] in i.renamed and ["cuDeviceGetUuid", "cuDeviceGetUuid_v2"] in i.renamed
    env = {g.group: g.names for g in i.env_extra}
    assert env == {"scheduler client": ["SCHEDULER_WEBSOCKET_URL"], "network": ["KUBERNETES_SERVICE_HOST"],
                   "event loop": ["LIBEV_FLAGS"]}
    assert sorted(i.lacks) == sorted(line_builds()["hami-core-v2.5"].patched_only)  # the line's fixes are not in it


def _preload(lib, **env) -> subprocess.CompletedProcess:
    """A process of this machine started with `lib` preloaded (how HAMi injects it into a pod)."""
    return subprocess.run(["/bin/true"], env={"PATH": "/usr/bin:/bin", "LD_PRELOAD": str(lib), **env},
                          capture_output=True, text=True)


def test_a_forks_loader_needs_and_where_it_cannot_run(libs):
    """The real fork (beclab v2.5.4) calls _dl_sym through its PLT, only where dlvsym failed: bound
    lazily, it loads on glibc >= 2.34 and a process dies only under LD_BIND_NOW=1 (or at the call).
    A library resolving _dl_sym when it loads (its address taken, or -z now) cannot load there."""
    i = identify(libs["fork"])
    assert [str(r) for r in i.loader.private] == ["_dl_sym@GLIBC_PRIVATE"] and i.loader.private[0].file == "libc.so.6"
    assert i.loader.needed == ["libc.so.6"] and i.loader.newest_glibc == "2.2.5"
    assert [r.binding for r in i.loader.private] == [elf.LAZY]
    assert any("since glibc 2.34" in c and "bound lazily" in c and "LD_BIND_NOW=1" in c and "cannot load" not in c
               for c in i.cannot_run)
    for which in ("fork_load", "fork_now"):
        j = identify(libs[which])
        assert [r.binding for r in j.loader.private] == [elf.LOAD], which
        assert any("cannot load on glibc >= 2.34" in c for c in j.cannot_run), which
    if _here_glibc() >= (2, 34):  # this machine's libc.so.6 is asked, not assumed, and a process says the same
        assert i.here == [] and any(h.startswith("_dl_sym@GLIBC_PRIVATE is bound lazily") for h in i.here_lazy)
        assert _preload(libs["fork"]).returncode == 0
        r = _preload(libs["fork"], LD_BIND_NOW="1")
        assert r.returncode != 0 and "undefined symbol: _dl_sym, version GLIBC_PRIVATE" in r.stderr
        for which in ("fork_load", "fork_now"):
            assert any("_dl_sym@GLIBC_PRIVATE is not exported by glibc" in h for h in identify(libs[which]).here)
            r = _preload(libs[which])
            assert r.returncode != 0 and "undefined symbol: _dl_sym, version GLIBC_PRIVATE" in r.stderr, which
    assert identify(libs["up"]).here == [] and identify(libs["up"]).cannot_run == []


def test_getenv_call_sites_are_decoded_at_every_optimisation_level(libs):
    for which in ("fork", "fork_o2", "fork_noplt"):
        names = elf.env_names(libs[which])
        assert set(hamilib.FORK_ENV) <= set(names.getenv), (which, names)


def test_unknown_and_not_hami_core(libs):
    i = identify(libs["tiny"])
    assert i.kind == UNKNOWN and "matches no upstream commit" in i.summary and not i.drop_in_possible
    i = identify(libs["other"])
    assert i.kind == UNKNOWN and "not a HAMi-core libvgpu.so" in i.summary


# ---- the judge: one answer for doctor and deploy ----------------------------------------------------------


def test_the_line_build_cannot_replace_the_fork_and_no_flag_accepts_the_loss(libs):
    node, cand = identify(libs["fork"]), identify(libs["line25"])
    j = judge(Side.of(node, "node"), Side.of(cand, "cand"))
    assert j.verdict == REFUSED and j.vendor_loss
    sym = j.part("symbols")
    assert not sym.ok and sym.vendor and "scheduler client" in sym.message and "no flag accepts that" in sym.message
    assert [g.group for g in j.lost][:1] == ["scheduler client"]  # the vendor's machinery first
    assert any(g.group == "CUDA hooks under other entry-point versions" and "cuMemAdvise" in g.names for g in j.lost)
    env = j.part("env")
    assert not env.ok and env.vendor and "SCHEDULER_WEBSOCKET_URL" in env.message
    # the deploy verb has no option that could accept such a loss
    from lucepatch.commands.deploy import command as deploy

    opts = {o for p in deploy.commands["hami-core"].params for o in p.opts}
    assert not {o for o in opts if any(w in o for w in ("force", "allow", "accept", "skip", "ignore"))}


def test_a_candidate_that_keeps_the_vendors_names_is_a_drop_in(libs):
    j = judge(Side.of(identify(libs["fork"]), "node"), Side.of(identify(libs["fork_fixed"]), "cand"))
    assert j.part("symbols").ok and j.part("env").ok and j.part("shrreg").ok


def test_upstream_node_gets_a_drop_in_from_its_lines_build(libs):
    j = judge(Side.of(identify(libs["up25"]), "node"), Side.of(identify(libs["line25"]), "cand"))
    assert j.verdict == DROP_IN and all(f.ok for f in j.findings)


def test_doctor_and_deploy_give_the_same_answer_for_the_same_pair(libs, capsys):
    ev = libs["dir"] / "ev.json"
    ev.write_text(json.dumps(evidence_doc(baseline=libs["up25"], patched=libs["line25"], target="hami-core-v2.5")))
    for node in ("fork", "up25"):
        rc, out, err = _cli(capsys, "node", "--lib", libs[node], "--candidate", libs["line25"], "--json")
        j = json.loads(out)["node_library"]["judgement"]
        rc2, out2, err2 = _cli(capsys, "deploy", "hami-core", "--lib", libs["line25"], "--evidence", ev,
                               "--installed", libs[node], "--dry-run", "--json")
        gates = {g["name"]: g for g in json.loads(out2)["gates"]} if out2.strip().startswith("{") else None
        if gates is None:  # the dry run printed its manifests: read the gate lines of stderr
            gates = {}
            for line in err2.splitlines():
                if line.startswith("gate "):
                    state, name = line[5:9].strip(), line[10:].split(":", 1)[0]
                    gates[name] = {"ok": {"ok": True, "FAIL": False, "skip": None}[state]}
        for f in j["findings"]:
            if f["part"] in ("symbols", "env", "loader"):
                assert gates[f["part"]]["ok"] == f["ok"], (node, f, gates[f["part"]])
        assert (j["verdict"] == DROP_IN) == (rc2 == 0), (node, j["verdict"], rc2, err2[-400:])
        assert (rc == 0) == (rc2 == 0)


def test_deploy_refuses_a_fork_node_by_default(libs, capsys):
    ev = libs["dir"] / "ev-fork.json"
    ev.write_text(json.dumps(evidence_doc(baseline=libs["fork"], patched=libs["line25"], target="hami-core-v2.5")))
    rc, out, err = _cli(capsys, "deploy", "hami-core", "--lib", libs["line25"], "--evidence", ev, "--installed",
                        libs["fork"], "--hami-version", "v2.5.1", "--dry-run", "--json")
    assert rc == 1
    g = {x["name"]: x for x in json.loads(out)["gates"]}
    assert g["identity"]["ok"] is False and "a fork of HAMi-core" in g["identity"]["message"]
    assert "no flag accepts" in g["identity"]["message"] and f"node --lib {libs['fork']}" in g["identity"]["message"]
    assert g["symbols"]["ok"] is False and g["env"]["ok"] is False
    # loader: the fork binds _dl_sym lazily, so it sets no glibc ceiling, and the line build here references
    # GLIBC_2.2.5 only (a fixture): that part passes (test_loader_gate_with_the_pods_glibc has the refusals)
    assert "DaemonSet" not in out


def test_loader_gate_with_the_pods_glibc(libs):
    cand = Side.of(identify(libs["line25"]), "cand")
    cand.glibc_newest = "2.34"  # what a build on this machine references (data/line_builds.toml newest_glibc)
    # a node library that resolves _dl_sym when it loads runs only below 2.34: no pod loads both
    fork_load = Side.of(identify(libs["fork_load"]), "node")
    f = judge(fork_load, cand).part("loader")
    assert not f.ok and "glibc < 2.34" in f.message and "no pod loads both" in f.message
    assert not judge(fork_load, cand, pod_glibc="2.31").part("loader").ok  # 2.31 < 2.34: the candidate cannot load
    assert judge(fork_load, cand, pod_glibc="2.35").part("loader").ok
    back = Side.of(identify(libs["fork_load"]), "cand")  # as a candidate on a 2.35 pod: _dl_sym is gone there
    assert not judge(cand, back, pod_glibc="2.35").part("loader").ok
    # the real fork's shape: bound lazily, it loads on any glibc, so the pair is no loader conflict, said why
    fork = Side.of(identify(libs["fork"]), "node")
    f = judge(fork, cand).part("loader")
    assert f.ok and "lazily" in f.message and "LD_BIND_NOW=1" in f.message
    lazy_cand = Side.of(identify(libs["fork"]), "cand")
    f = judge(cand, lazy_cand, pod_glibc="2.35").part("loader")
    assert f.ok and "bound lazily" in f.message


# ---- node --lib: no drop-in heading for a fork, the routes in order -------------------------------------


def test_doctor_lib_on_a_fork_lists_the_routes_and_no_drop_in(libs, capsys):
    rc, out, err = _cli(capsys, "node", "--lib", libs["fork"])
    assert rc == 1 and "no drop-in" in err and len(err.strip().splitlines()) == 1
    assert "drop-in  " not in out and "\ndrop-in" not in out
    assert "identity       fork: a fork of HAMi-core" in out
    assert "foreign        scheduler client (vendor)" in out and "environment    reads beyond" in out
    assert "GLIBC_PRIVATE: _dl_sym" in out and "replacement    refused" in out
    order = [out.index(s) for s in ("1. exclusive mode", "2. the -hami Lucebox image", "3. a vendor bug report",
                                    "4. a line of the series on the vendor's source")]
    assert order == sorted(order)
    assert "--profile sm120-cuda13-hami" in out and "GGML_CUDA_NO_VMM=ON" in out
    assert f"--baseline-lib {libs['fork']} --lib <built libvgpu.so>" in out
    assert "lucepatch rebase hami-core-v2.5 --line beclab --onto <fork ref> --source" in out


def test_doctor_lib_on_unknown_gets_no_drop_in(libs, capsys):
    rc, out, err = _cli(capsys, "node", "--lib", libs["tiny"])
    assert rc == 1 and "\ndrop-in" not in out and "identity       unknown" in out and "routes" in out


def test_the_hami_profile_route_names_a_real_profile():
    from lucepatch.target import load_target
    from lucepatch.workspace import resolve_workspace

    t = load_target(resolve_workspace(REPO_ROOT), "lucebox")
    prof = t.profiles["sm120-cuda13-hami"]
    assert "-DGGML_CUDA_NO_VMM=ON" in prof.cmake_args


def test_node_lib_classifies_and_inspect_lib_is_its_old_spelling(libs, capsys):
    # `inspect --lib` printed a subset of `doctor --lib` (issue 35): both are `node --lib` now
    rc, out, err = _cli(capsys, "node", "--lib", libs["fork"], "--json")
    assert rc == 1 and json.loads(out)["node_library"]["identity"]["kind"] == FORK  # a fork: no drop-in
    rc, out, err = _cli(capsys, "node", "--lib", libs["up"])
    assert "identity       upstream" in out
    rc2, out2, err2 = _cli(capsys, "inspect", "--lib", libs["up"])
    assert (rc2, out2) == (rc, out) and "`lucepatch inspect --lib` is `lucepatch node --lib` now" in err2
    rc, _, err = _cli(capsys, "inspect")
    assert rc == 2 and "IMAGE" in err


def test_doctor_hami_version_alone_says_what_the_v2_5_line_drops(capsys):
    rc, out, err = _cli(capsys, "node", "--hami-version", "v2.7.0")
    assert rc == 0, err
    assert "HAMi-core 3506e62" in out and "line           hami-core-v2.5" in out
    # what 3506e62 hooks and the line's own build (data/line_builds.toml) does not
    state = history.load_history().state_of("3506e62")
    line_hooks = {history.family(n) for n in line_builds()["hami-core-v2.5"].exports if history.is_hook(n)}
    dropped = sorted(state.hooks - line_hooks)
    assert dropped and all(h in out for h in dropped) and "first-parent commits past" in out
    assert "cuMemImportFromShareableHandle" in dropped
    rc, out, err = _cli(capsys, "node", "--hami-version", "v2.6.8", "--json")
    d = json.loads(out)["hami_versions"][0]
    assert d["line"] is None and "vendor" in d["why"]


# ---- the data --------------------------------------------------------------------------------------------


def test_history_data_is_consistent():
    h = history.load_history()
    assert h.commits > 50 and len(h.names) > 500
    assert h.state_of("8f3a89c").region == "1.2" and h.state_of("54b1305").region == "1.1"
    for b in line_builds().values():  # every line's base is in the scanned history, and its adds are not
        assert h.state_of(b.base) is not None and not (b.adds & h.names)


def test_family_normalises_entry_point_versions():
    assert history.family("cuMemAdvise_v2") == history.family("cuMemAdvise") == "cuMemAdvise"
    assert history.family("cuMemcpy_ptds") == "cuMemcpy" and history.family("add_chunk_v2") == "add_chunk_v2"


def test_scanner_reads_definitions_not_declarations():
    src = """
    #include <x.h>
    /* int commented_out(void) { return 0; } */
    static int hidden(void) { return 1; }
    int visible(int a) { if (a) { return 2; } return 3; }
    extern int declared(void);
    int prototype(void);
    CUresult (*real_fp)(const char *s, void **p);
    entry_t table[] = { {.name = "cuInit"}, };
    typedef struct { int a; } not_a_var;
    struct s { int b; } a_var;
    int counter = 0, other;
    const char *s = "int fake(void) {";
    """
    assert history.defined_names(src) == {"visible", "real_fp", "table", "a_var", "counter", "other", "s"}


SRC_HAMI = os.environ.get("LUCEPATCH_SRC_HAMI_CORE")


@pytest.mark.skipif(not SRC_HAMI, reason="no-upstream: set LUCEPATCH_SRC_HAMI_CORE to a HAMi-core checkout")
def test_packaged_history_is_the_scan_of_the_real_history():
    r = subprocess.run([sys.executable, str(REPO_ROOT / "tools" / "hami_core_names.py"), SRC_HAMI, "--check"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.mark.skipif(not SRC_HAMI, reason="no-upstream: set LUCEPATCH_SRC_HAMI_CORE to a HAMi-core checkout")
def test_line_builds_data_matches_real_builds_and_the_scan(tmp_path):
    """Real builds of every line export what data/line_builds.toml says (by entry-point family: the CUDA
    headers rename hooks; exactly where this machine has the data's CUDA headers) and read the same
    environment; the source scan of each base names exactly the families its real baseline build exports."""
    sys.path.insert(0, str(REPO_ROOT / "tools"))
    import line_builds as tool

    from lucepatch import git
    from lucepatch.lines.fit import load_lines
    from lucepatch.workspace import resolve_workspace

    data, hist = line_builds(), history.load_history()
    fam = lambda names: {history.family(x) for x in names}  # noqa: E731
    for line in [l for l in load_lines(ws=resolve_workspace(REPO_ROOT)) if l.in_workspace]:
        paths = tool.build(line.target, SRC_HAMI, str(tmp_path / "cache"))
        rec, want = tool.record(line, paths, hist), data[line.target]
        assert fam(rec["exports"]) == fam(want.exports) and set(rec["adds"]) == want.adds, line.target
        assert set(rec["env"]) == want.env and set(rec["baseline_only"]) == want.baseline_only, line.target
        assert fam(rec["patched_only"]) == fam(want.patched_only), line.target
        if rec["cuda"] == want.cuda:
            assert set(rec["exports"]) == want.exports, line.target
        with git.repo_at(SRC_HAMI) as repo:
            scan = fam(history.scan_commit(repo, repo.commit(line.base)).names)
        built = fam(set(elf.defined_dynamic_symbols(paths["baseline"])))
        # a header-defined tentative variable (fp1 in 54b1305's log_utils.h) is exported only by compilers
        # that still default to -fcommon: the line's Build-Only patch turns it into one definition
        assert scan - built <= {"fp1"} and built - scan == set(), line.target


FORK_LIB = os.environ.get("LUCEPATCH_FORK_LIB")


def _fakecuda_dir(tmp: Path) -> Path:
    """The simulated driver's libcuda.so.1 (the real fork needs one to load at all)."""
    from lucepatch.native.fakecuda import build_fakecuda

    return build_fakecuda(tmp / "fakecuda")


@pytest.mark.skipif(not FORK_LIB, reason="no-upstream: set LUCEPATCH_FORK_LIB to beclab/HAMi v2.5.4's lib/nvidia/libvgpu.so")
def test_the_real_2025_07_fork_library(capsys, tmp_path):
    i = identify(FORK_LIB)
    assert i.kind == FORK and i.line == "hami-core-v2.5" and len(i.exports) == 723
    assert {g.group: len(g.names) for g in i.foreign} == {"scheduler client": 13, "websocket client": 24,
                                                           "event loop": 97, "logging": 4}
    assert [str(r) for r in i.loader.private] == ["_dl_sym@GLIBC_PRIVATE"] and i.shrreg == "1.1"
    assert [r.binding for r in i.loader.private] == [elf.LAZY]  # one PLT slot: loads where dlvsym works
    if _here_glibc() >= (2, 34):
        assert i.here == [] and _preload(FORK_LIB, LD_LIBRARY_PATH=str(_fakecuda_dir(tmp_path))).returncode == 0
        r = _preload(FORK_LIB, LD_LIBRARY_PATH=str(_fakecuda_dir(tmp_path)), LD_BIND_NOW="1")
        assert r.returncode != 0 and "undefined symbol: _dl_sym, version GLIBC_PRIVATE" in r.stderr
    assert "SCHEDULER_WEBSOCKET_URL" in {n for g in i.env_extra for n in g.names}
    assert len(i.renamed) == 10
    rc, out, err = _cli(capsys, "node", "--lib", FORK_LIB)
    assert rc == 1 and "\ndrop-in" not in out and "1. exclusive mode" in out
    # a C reproducer's first CUDA call precedes any dlsym: the fork's preInit calls _dl_sym, which this glibc
    # lacks - with the bind shim standing in at start, the run ends at that call, as a pod's process would
    if _here_glibc() >= (2, 34):
        ev = tmp_path / "ev-c.json"
        _cli(capsys, "--cache-dir", tmp_path / "cache", "verify", "--target", "hami-core-v2.5", "--reproducer",
             "async-sched", "--scenario", "ctxless-async-alloc", "--baseline-lib", FORK_LIB, "--lib", FORK_LIB,
             "--driver", "fake", "--fixed", "--runs", "1", "--evidence", ev)
        runs = json.loads(ev.read_text())["runs"]
        assert runs and all(r["reason"].startswith("cannot load: symbol lookup error: ") and "(called)" in r["reason"]
                            and "a pod's, dies at that same call" in r["reason"] for r in runs), runs[0]["reason"]
    # a workload reproducer binds lazily: its runs load the fork (proven by the preload report) on any glibc
    ev = tmp_path / "ev.json"
    rc, out, err = _cli(capsys, "--cache-dir", tmp_path / "cache", "verify", "--target", "hami-core-v2.5", "--reproducer",
                        "ctypes-meminfo", "--scenario", "null-total", "--baseline-lib", FORK_LIB, "--lib", FORK_LIB,
                        "--driver", "fake", "--fixed", "--runs", "1", "--evidence", ev)
    runs = json.loads(ev.read_text())["runs"]
    assert runs and not any(r["reason"].startswith("cannot load") for r in runs)
    assert all(any(p["path"] == FORK_LIB for p in r["preload"]) for r in runs), [r["reason"] for r in runs]


@pytest.mark.skipif(not SRC_HAMI, reason="no-upstream: set LUCEPATCH_SRC_HAMI_CORE to a HAMi-core checkout")
def test_gpu_session_fork_lib_step_on_the_simulated_driver(libs, tmp_path):
    """`DRIVER=fake bash tools/gpu_session.sh fork-lib`, the step the integrator runs on the H200, with a
    library built here that needs _dl_sym@GLIBC_PRIVATE standing in for the carried fork."""
    if _here_glibc() < (2, 34):
        pytest.skip("no-tool: this machine's glibc still exports _dl_sym")
    out = tmp_path / "out"
    env = {**os.environ, "DRIVER": "fake", "OUT": str(out), "FORK_LIB": str(libs["fork"]), "SRC": SRC_HAMI,
           "LUCEPATCH_CACHE": str(tmp_path / "cache"), "JOBS": "2", "PYTHONPATH": str(REPO_ROOT)}
    r = subprocess.run(["bash", str(REPO_ROOT / "tools" / "gpu_session.sh"), "fork-lib"], cwd=REPO_ROOT, env=env,
                       capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-2000:]
    for f in ("fork-lib.host.txt", "fork-lib.doctor.txt", "fork-lib.doctor.json", "fork-lib.fake.json", "fork-lib.fake.html",
              "fork-lib-workloads.fake.json", "fork-lib-workloads.fake.html"):
        assert (out / f).is_file(), f
    assert json.loads((out / "fork-lib.doctor.json").read_text())["node_library"]["identity"]["kind"] == FORK
    ev = json.loads((out / "fork-lib.fake.json").read_text())
    base = [x for x in ev["runs"] if x["variant"] == "baseline"]
    # bound lazily, _dl_sym does not stop the C reproducers' runs: the bind shim stands in for it (said in the
    # log); this stand-in's stub dlsym hook then breaks the reproducer's own report (the real fork: below)
    assert base and not any(x["reason"].startswith("cannot load") for x in base)
    assert "binds _dl_sym@GLIBC_PRIVATE lazily" in (out / "verify-fork-lib.log").read_text()
    # the workload reproducers bind lazily, as a pod does: the loader takes the fork (its _dl_sym in a PLT call);
    # this stand-in exports stub dlsym/dlopen hooks, so Python cannot run on it (the real one does, below)
    wl = json.loads((out / "fork-lib-workloads.fake.json").read_text())
    wbase = [x for x in wl["runs"] if x["variant"] == "baseline"]
    assert wbase and not any(x["reason"].startswith("cannot load") for x in wbase)
