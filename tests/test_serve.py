"""reproducers/serve: a server binary under the library, proven end to end on the simulated driver
with the stand-in server (tests/fixtures/stand-in-server: a fixture that holds memory the way
ggml-cuda does, never evidence about Lucebox).

Without LUCEPATCH_SRC_HAMI_CORE only the spec, region-layout and shape tests run; with it, real
HAMi-core builds of both lines (baseline and series) run the stand-in in both pool modes and with
each fault the harness must catch.
"""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import FIXTURES, REPO_ROOT

SERVE = REPO_ROOT / "reproducers" / "serve"
sys.path[:0] = [str(SERVE), str(REPO_ROOT / "lucepatch" / "native" / "workload")]
import lp_region  # noqa: E402
import serve  # noqa: E402

STAND_IN = FIXTURES / "stand-in-server"
SPEC = STAND_IN / "stand-in.toml"
SRC = os.environ.get("LUCEPATCH_SRC_HAMI_CORE")
needs_hami = pytest.mark.skipif(not SRC, reason="no-upstream: set LUCEPATCH_SRC_HAMI_CORE to a HAMi-core checkout")
MIB = 1 << 20


# ---- the spec ---------------------------------------------------------------------------------
def _spec_text(**replace) -> str:
    text = SPEC.read_text()
    for old, new in replace.items():
        assert old in text, old
        text = text.replace(old, new)
    return text


def test_the_stand_in_spec_expands_port_and_environment(monkeypatch):
    monkeypatch.setenv("LP_STAND_IN_SERVER", "/opt/x/stand_in_server")
    monkeypatch.setenv("LP_STAND_IN_POOL", "--no-vmm")
    s = serve.load_spec(str(SPEC), 4242)
    assert s.command[:5] == ["/opt/x/stand_in_server", "--host", "127.0.0.1", "--port", "4242"]
    assert "--no-vmm" in s.command
    assert s.ready_url == "http://127.0.0.1:4242/health"
    assert (s.limit, s.bound, s.oom_limit) == (8 << 30, 2 * MIB, 32 * MIB)
    assert s.request.method == "POST" and s.request.shape == {"choices.0.text": "string", "usage.completion_tokens": "integer"}


@pytest.mark.parametrize("edit, message", [
    ({"[oom]": "[oom]\nsize = 3"}, "[oom]: unknown key size"),
    ({'truth = ["log", "nvml"]': 'truth = ["guess"]'}, "truth must be a non-empty list of log, nvml"),
    ({'limit = "32m"': ''}, "[oom] needs both limit and error"),
    ({'bound = "2m"': 'bound = "2 MiB"'}, "is not a number of bytes"),
    ({'"choices.0.text" = "string"': '"choices.0.text" = "text"'}, "'text' is not one of string"),
    ({"${LP_STAND_IN_POOL}": "${LP_NOT_SET_ANYWHERE}"}, "${LP_NOT_SET_ANYWHERE} is not set in the environment"),
])
def test_a_bad_spec_is_one_line_naming_what_is_wrong(tmp_path, monkeypatch, edit, message):
    monkeypatch.setenv("LP_STAND_IN_SERVER", "/bin/true")
    monkeypatch.setenv("LP_STAND_IN_POOL", "--vmm")
    monkeypatch.delenv("LP_NOT_SET_ANYWHERE", raising=False)
    p = tmp_path / "s.toml"
    p.write_text(_spec_text(**edit))
    with pytest.raises(ValueError) as exc:
        serve.load_spec(str(p), 1)
    assert message in str(exc.value) and "\n" not in str(exc.value)


def test_shipped_specs_load_with_their_variables_set(monkeypatch):
    for f in sorted((SERVE / "servers").glob("*.toml")):
        for var in ("DFLASH_SERVER", "LUCEBOX_MODEL"):
            monkeypatch.setenv(var, f"/x/{var.lower()}")
        monkeypatch.setenv("LUCEBOX_SERVER_ARGS", "--draft '/m/a b.gguf'")
        s = serve.load_spec(str(f), 5000)
        assert s.path == str(f) and "5000" in s.ready_url and s.oom_limit and s.oom_limit < s.limit
        if f.stem == "dflash-server":  # args_env: appended, split as a shell would
            assert s.command[:2] == ["/x/dflash_server", "/x/lucebox_model"] and s.command[-2:] == ["--draft", "/m/a b.gguf"]


def test_a_relative_spec_path_is_the_callers(monkeypatch, tmp_path):
    """The runner starts the harness in a scratch folder; lucepatch checked the path from the caller's."""
    monkeypatch.setenv("PWD", str(tmp_path))
    assert serve.spec_path("specs/x.toml") == str(tmp_path / "specs" / "x.toml")
    assert serve.spec_path("/abs/x.toml") == "/abs/x.toml"


def test_answer_shape_paths():
    doc = {"choices": [{"text": "x", "n": 1}], "ok": True}
    assert serve._at(doc, "choices.0.text") == "x"
    assert serve._at(doc, "choices.1.text") is serve._MISSING
    assert serve._at(doc, "ok.x") is serve._MISSING


def test_listens_on_tells_our_socket_from_anyone_elses():
    import socket

    with socket.socket() as s4, socket.socket(socket.AF_INET6) as s6, socket.socket() as idle:
        s4.bind(("127.0.0.1", 0))
        s4.listen()
        s6.bind(("::1", 0))
        s6.listen()
        idle.bind(("127.0.0.1", 0))  # bound, not listening
        me = os.getpid()
        assert serve.listens_on(me, s4.getsockname()[1]) is True
        assert serve.listens_on(me, s6.getsockname()[1]) is True
        assert serve.listens_on(me, idle.getsockname()[1]) is False
        child = subprocess.Popen(["sleep", "30"])
        try:
            assert serve.listens_on(child.pid, s4.getsockname()[1]) is False
        finally:
            child.kill()
            child.wait()


def test_log_truth_last_or_sum_with_units(monkeypatch):
    monkeypatch.setenv("LP_STAND_IN_SERVER", "/bin/true")
    monkeypatch.setenv("LP_STAND_IN_POOL", "--vmm")
    s = serve.load_spec(str(SPEC), 1)
    text = "stand-in: reserved 100 bytes\nstand-in: reserved 300 bytes\n"
    assert serve.log_reserved(s, text) == 300
    s.log_combine = "sum"
    assert serve.log_reserved(s, text) == 400
    import re
    s.log_pattern = re.compile(r"CUDA0 \w+ buffer size = +([\d.]+) (MiB)")
    assert serve.log_reserved(s, "CUDA0 model buffer size =   1.50 MiB\nCUDA0 KV buffer size =   2.00 MiB\n") == int(3.5 * MIB)
    assert serve.log_reserved(s, "nothing") is None


# ---- the region reader -------------------------------------------------------------------------
def _region(major=1, minor=2, slots=((100, 100, 5 * MIB),), limit=8 << 30) -> bytes:
    lay = lp_region.LAYOUTS[(1, 2)]
    buf = bytearray(lay["size"])
    struct.pack_into("<iII", buf, 0, lp_region.MAGIC, major, minor)
    struct.pack_into("<Q", buf, lay["limit"], limit)
    struct.pack_into("<i", buf, lay["proc_num"], len(slots))
    for i, (pid, hostpid, total) in enumerate(slots):
        base = lay["procs"] + i * lay["slot"]
        struct.pack_into("<ii", buf, base, pid, hostpid)
        struct.pack_into("<5Q", buf, base + lay["slot_used"], 1, 2, total - 3, 0, total)
    return bytes(buf)


def test_region_reader_sums_slots_and_refuses_what_it_does_not_know():
    r = lp_region.parse(_region(slots=((7, 70, 5 * MIB), (8, 80, 3 * MIB))))
    assert r.version == (1, 2) and r.initialized and r.limits[0] == 8 << 30
    assert r.charged() == 8 * MIB and r.slot(8).hostpid == 80 and r.slot(9) is None
    assert r.slot(7).used[0]["context_size"] == 1 and r.slot(7).used[0]["data_size"] == 5 * MIB - 3
    with pytest.raises(lp_region.RegionError, match="region version 1.3: no known layout"):
        lp_region.parse(_region(minor=3))
    with pytest.raises(lp_region.RegionError, match="shorter than a 1.2 region"):
        lp_region.parse(_region()[:4096])


@needs_hami
@pytest.mark.needs("gcc")
def test_region_layout_is_the_headers_at_every_line_base(tmp_path):
    """offsetof() of HAMi-core's own header at 54b1305 (1.1) and 8f3a89c (1.2) against LAYOUTS."""
    from lucepatch.native import toolchain

    probe = tmp_path / "off.c"
    probe.write_text('#include "multiprocess/multiprocess_memory_limit.h"\nint main(void){printf("%zu %zu %zu %zu %zu %zu %zu %zu %zu %u %u\\n",'
                     "offsetof(shared_region_t, limit), offsetof(shared_region_t, sm_limit), offsetof(shared_region_t, procs),"
                     "sizeof(shrreg_proc_slot_t), offsetof(shrreg_proc_slot_t, used), sizeof(device_memory_t),"
                     "offsetof(shared_region_t, proc_num), sizeof(shared_region_t), offsetof(device_memory_t, total),"
                     "MAJOR_VERSION, MINOR_VERSION);return 0;}\n")
    for commit in ("54b1305", "8f3a89c"):
        src = tmp_path / commit
        src.mkdir()
        tar = subprocess.run(["git", "-C", SRC, "archive", commit, "src"], capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", str(src)], input=tar, check=True)
        (src / "src" / "static_config.h").write_text("")
        exe = tmp_path / f"off-{commit}"
        subprocess.run(["gcc", f"-I{src / 'src'}", f"-I{toolchain.cuda_include()}", f"-I{toolchain.nvml_include()}",
                        str(probe), "-o", str(exe)], check=True, capture_output=True)
        got = [int(x) for x in subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout.split()]
        lay = lp_region.LAYOUTS[(got[9], got[10])]
        assert got[:9] == [lay["limit"], lay["sm_limit"], lay["procs"], lay["slot"], lay["slot_used"],
                           lay["device_memory"], lay["proc_num"], lay["size"],
                           lp_region.MEMORY_FIELDS.index("total") * 8], commit


# ---- end to end on the simulated driver ---------------------------------------------------------
@pytest.fixture(scope="module")
def stand_in(tmp_path_factory):
    sys.path.insert(0, str(STAND_IN))
    import build

    return build.build(tmp_path_factory.mktemp("stand-in"))


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("serve-cache")


def _verify(cli, cache, *args):
    res = cli("--workspace", REPO_ROOT, "--cache-dir", cache, "verify", "--reproducer", "serve", "--driver", "fake",
              "--json", *args)
    assert res.out.strip(), res.err
    return res.json["evidence"]


def _runs(doc, variant):
    return {r["scenario"].split(":")[1]: r for r in doc["runs"] if r["variant"] == variant}


def _env(monkeypatch, stand_in, pool, spec=SPEC):
    monkeypatch.setenv("LUCEPATCH_SERVER_SPEC", str(spec))
    monkeypatch.setenv("LP_STAND_IN_SERVER", str(stand_in))
    monkeypatch.setenv("LP_STAND_IN_POOL", pool)


def test_without_a_named_server_every_scenario_is_skipped(cli, cache, monkeypatch, tmp_path):
    """No spec, no claim: skipped with the variable to set (the libraries here are any ELF: nothing loads them)."""
    monkeypatch.delenv("LUCEPATCH_SERVER_SPEC", raising=False)
    lib = tmp_path / "libvgpu.so"
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(lib), "-x", "c", "/dev/null"], check=True)
    doc = _verify(cli, cache, "--lib", lib, "--baseline-lib", lib, "--fixed", "--runs", "1")
    assert {s["verdict"] for s in doc["scenarios"]} == {"skipped"}
    assert all("needs ${LUCEPATCH_SERVER_SPEC}: set the variable it names" in s["reason"] for s in doc["scenarios"])
    assert doc["execution"]["processes"] == 0


@needs_hami
def test_main_line_vmm_pool_charged_only_with_the_series(cli, cache, monkeypatch, stand_in):
    """8f3a89c uncharges each pool chunk at cuMemRelease (the stand-in calls it right after cuMemMap, as
    ggml does): the server is charged its weights only; the series keeps the pool charged until it is
    unmapped. Proven under the sequential rule; serving and the clean OOM are guarded."""
    _env(monkeypatch, stand_in, "--vmm")
    doc = _verify(cli, cache, "--source", SRC, "--runs", "10")
    v = {s["scenario"]: s["verdict"] for s in doc["scenarios"]}
    failed = [(r["variant"], r["scenario"], r["outcome"], r["reason"]) for r in doc["runs"] if r["outcome"] != "pass"
              and not (r["variant"] == "baseline" and r["scenario"] == "serve:charged")]
    assert v == {"serve:driver": "pass", "serve:serves": "guarded", "serve:charged": "proven",
                 "serve:limit-oom": "guarded"}, (v, failed)
    base, pat = _runs(doc, "baseline")["charged"], _runs(doc, "patched")["charged"]
    assert base["values"]["charged_meminfo"] == 64 * MIB and base["values"]["reserved_log"] == 192 * MIB
    assert "got 67108864" in base["reason"]
    assert pat["values"]["charged_meminfo"] == pat["values"]["charged_region"]["total"] == 192 * MIB
    assert pat["values"]["region_after_exit"]["charged"] == 0
    # both processes proved what they loaded: the harness (rank 0) and the server (rank 1)
    assert [p["rank"] for p in pat["load_proof"]["ranks"]] == [0, 1]
    assert pat["values"]["server"]["binary_sha256"] and pat["values"]["server"]["spec"] == "stand-in"
    oom = _runs(doc, "baseline")["limit-oom"]
    assert oom["outcome"] == "pass" and oom["values"]["server_exit"] == "exit status 1"


@needs_hami
def test_v25_line_vmm_not_charged_at_the_base(cli, cache, monkeypatch, stand_in):
    """54b1305 charges no VMM memory at all; the v2.5 line's backport charges the pool; its OOM path runs
    `ps ax` (a third process under the preload) and still only the two ranks are judged."""
    _env(monkeypatch, stand_in, "--vmm")
    doc = _verify(cli, cache, "--target", "hami-core-v2.5", "--source", SRC, "--fixed", "--runs", "1")
    base, pat = _runs(doc, "baseline"), _runs(doc, "patched")
    assert base["charged"]["outcome"] == "fail" and base["charged"]["values"]["charged_meminfo"] == 64 * MIB
    assert pat["charged"]["outcome"] == "pass" and pat["charged"]["values"]["charged_meminfo"] == 192 * MIB
    for side in (base, pat):
        assert {k: r["outcome"] for k, r in side.items() if k != "charged"} == {
            "driver": "pass", "serves": "pass", "limit-oom": "pass"}
        assert side["limit-oom"]["values"]["region_after_exit"]["version"] == "1.1"


@needs_hami
def test_no_vmm_pool_is_charged_by_every_library(cli, cache, monkeypatch, stand_in):
    """GGML_CUDA_NO_VMM's legacy pool is cuMemAlloc: the base charges it as the series does."""
    _env(monkeypatch, stand_in, "--no-vmm")
    doc = _verify(cli, cache, "--source", SRC, "--fixed", "--runs", "1")
    for variant in ("baseline", "patched"):
        runs = _runs(doc, variant)
        assert {k: r["outcome"] for k, r in runs.items()} == {
            "driver": "pass", "serves": "pass", "charged": "pass", "limit-oom": "pass"}, variant
        assert runs["charged"]["values"]["charged_meminfo"] == 192 * MIB


@pytest.fixture(scope="module")
def series_lib(cache):
    """The main line's series build (the same bytes verify builds into this cache)."""
    r = subprocess.run([sys.executable, "-m", "lucepatch", "--workspace", str(REPO_ROOT), "--cache-dir", str(cache),
                        "build", "hami-core", "--source", SRC, "--json"], capture_output=True, text=True,
                       env={**os.environ, "PYTHONPATH": str(REPO_ROOT)})
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)["builds"][0]["artifacts"]["libvgpu.so"]["path"]


@needs_hami
def test_a_port_another_server_answers_on_is_not_readiness(cli, cache, monkeypatch, stand_in, series_lib, tmp_path):
    """Parallel runs pick free ports; one can be taken meanwhile. Another server answering the readiness
    URL is not ours: the stand-in cannot bind, exits 1, and the run says so instead of measuring the other."""
    import http.server
    import threading

    class Health(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b'{"status":"ok"}')

        def log_message(self, *a):
            pass

    other = http.server.HTTPServer(("127.0.0.1", 0), Health)
    threading.Thread(target=other.serve_forever, daemon=True).start()
    port = other.server_address[1]
    spec = tmp_path / "spec.toml"
    spec.write_text(_spec_text(**{'"--port", "{port}"': f'"--port", "{port}"',
                                  "http://127.0.0.1:{port}/health": f"http://127.0.0.1:{port}/health"}))
    _env(monkeypatch, stand_in, "--vmm", spec)
    try:
        doc = _verify(cli, cache, "--lib", series_lib, "--baseline-lib", series_lib, "--fixed", "--runs", "1",
                      "--scenario", "serves")
    finally:
        other.shutdown()
    run = _runs(doc, "patched")["serves"]
    assert run["outcome"] == "fail" and "got exited first (exit status 1)" in run["reason"], run["reason"]


# fault -> (scenario, outcome, what the reason says)
FAULTS = {
    "segv-on-request": ("serves", "crash", "SIGSEGV in rank 1"),
    "bad-answer": ("serves", "fail", "answer has choices.0.text (string): expected string, got missing"),
    "never-ready": ("serves", "fail", "expected ready within 2 s, got timeout"),
    "quick-exit": ("charged", "fail", "nothing is charged to the server after it exited (region file): expected 0, got 201326592"),
    "hang-on-oom": ("limit-oom", "fail", "got hang: neither exited nor answered readiness"),
    "exit0-on-oom": ("limit-oom", "fail", "exits by itself with a non-zero status: expected exit status > 0, got exit status 0"),
}


@needs_hami
@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_each_way_a_server_misbehaves_is_caught(cli, cache, monkeypatch, stand_in, series_lib, tmp_path, fault):
    scenario, outcome, says = FAULTS[fault]
    spec = tmp_path / "spec.toml"
    spec.write_text(_spec_text(**{'"${LP_STAND_IN_POOL}",': f'"${{LP_STAND_IN_POOL}}", "--fault", "{fault}",',
                                  "ready_timeout_s = 30": "ready_timeout_s = 2", "\ntimeout_s = 30\n": "\ntimeout_s = 2\n"}))
    _env(monkeypatch, stand_in, "--vmm", spec)
    doc = _verify(cli, cache, "--lib", series_lib, "--baseline-lib", series_lib, "--fixed", "--runs", "1",
                  "--scenario", scenario)
    run = _runs(doc, "patched")[scenario]
    assert run["outcome"] == outcome and says in run["reason"], run["reason"]
    # the server proved what it ran even when it crashed, hung or never listened
    assert [p["rank"] for p in run["load_proof"]["ranks"]] == [0, 1]
