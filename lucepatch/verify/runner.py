"""Run a reproducer under a preloaded library, one fresh process per run: a compiled C reproducer
or a workload's command (reproducer.py), classified the same way.

Each run proves what it ran (proof.py): the program reports (from /proc/self/maps) the realpath
and sha256 of the preloaded library and of the mapped libcuda.so.1 after CUDA init and before its
action — or lucepatch's preloaded reporter does, at exit and on a fatal signal — and the
interception library's load marker must appear in that process's log. A run that cannot show
both is `invalid`, never a pass: a preload that fails to load is silently ignored by ld.so and the
program exits 0. A run that proved it and then crashed is a `crash`.

Failure signatures: a fatal signal (of the program, or of any process of the run the reporter saw
die: a torch rank), a non-zero exit, a failed check, and the interposer's log lines that
lucepatch/data/hami_log.toml classifies as failures (`Illegal device id`, ...) even at exit 0.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import signal
import subprocess
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path

from lucepatch import children
from lucepatch.native import compiling, toolchain, workload as wl
from lucepatch.verify import backtrace, hami_log, proof
from lucepatch.verify.reproducer import Reproducer, Scenario, scenario_env

EVENT_PREFIX = "@@lucepatch "

# Outcomes of one run.
PASS = "pass"
FAIL = "fail"  # a check failed / wrong CUresult
FAIL_LOG = "fail-log"  # exited 0 but the hook logged an out-of-range device id
CRASH = "crash"
TIMEOUT = "timeout"
INVALID = "invalid"
SKIPPED = "skipped"  # the scenario cannot run on this machine (e.g. needs 2 GPUs); neither pass nor fail
FAILURES = (FAIL, FAIL_LOG, CRASH, TIMEOUT)

# Log signatures of the bug family (docs/field-notes.md §3); the full table is lucepatch/data/hami_log.toml.
ERROR_SIGNATURES = ("Illegal device id",)

# Variables a run never inherits from the caller: they would change what is loaded or measured.
_SCRUB = ("LD_PRELOAD", "LD_LIBRARY_PATH", "CUDA_DEVICE_MEMORY_LIMIT", "CUDA_DEVICE_SM_LIMIT",
          "CUDA_DEVICE_MEMORY_SHARED_CACHE", "LIBCUDA_LOG_LEVEL", "CUDA_DISABLE_CONTROL", "LD_BIND_NOW")
# ... nor any per-device variant (CUDA_DEVICE_MEMORY_LIMIT_0=0m would change what a run measures)
_SCRUB_PREFIXES = ("CUDA_DEVICE_MEMORY_LIMIT_", "CUDA_DEVICE_SM_LIMIT_")

# HAMi-core's host-wide lock (src/utils.c); parallel runs each get a private tmpfs here.
VGPULOCK_DIR = "/tmp/vgpulock"
ISOLATION_FAILED_RC = 125
_NS_WRAPPER = (f'mount -t tmpfs -o size=4m,mode=1777 lucepatch-vgpulock {VGPULOCK_DIR} || exit {ISOLATION_FAILED_RC}; '
               'ulimit -c 0; exec "$0" "$@"')


def scrubbed_environ() -> dict:
    return {k: v for k, v in os.environ.items() if k not in _SCRUB and not k.startswith(_SCRUB_PREFIXES)}


_NS_PROBE: tuple[bool, str] | None = None


def namespace_isolation() -> tuple[bool, str]:
    """(available, why): can each run get a private mount namespace with its own /tmp/vgpulock?

    Needs root (or CAP_SYS_ADMIN) and a working `unshare --mount`; probed once per process by
    doing exactly what a run does."""
    global _NS_PROBE
    if _NS_PROBE is not None:
        return _NS_PROBE
    unshare = shutil.which("unshare")
    if os.geteuid() != 0:
        _NS_PROBE = (False, "not root: runs share the host-wide /tmp/vgpulock lock, so they run serially")
    elif unshare is None:
        _NS_PROBE = (False, "no unshare(1) (util-linux): runs run serially")
    else:
        try:
            os.makedirs(VGPULOCK_DIR, exist_ok=True)
            r = subprocess.run([unshare, "--mount", "--propagation", "private", "--", "/bin/sh", "-c",
                                _NS_WRAPPER, "/bin/true"], capture_output=True, text=True, timeout=20)
            ok = r.returncode == 0
            why = "private mount namespace per run, tmpfs on /tmp/vgpulock" if ok else \
                f"unshare --mount failed ({(r.stderr.strip() or 'exit %d' % r.returncode)[:160]}): runs run serially"
        except (OSError, subprocess.TimeoutExpired) as exc:
            ok, why = False, f"unshare probe failed ({exc}): runs run serially"
        _NS_PROBE = (ok, why)
    return _NS_PROBE


@dataclass
class RunRecord:
    variant: str
    scenario: str
    index: int
    outcome: str
    returncode: int | None
    signal: str | None
    duration_s: float
    reason: str = ""
    preload: list = field(default_factory=list)
    libcuda: dict | None = None
    driver: dict | None = None
    checks: list = field(default_factory=list)
    first_error: str = ""
    log_tail: str = ""
    values: dict = field(default_factory=dict)
    launch: int | None = None  # launch order in the whole verification (set by the scheduler)
    load_proof: dict | None = None  # which proof counted (proof.Proof.to_json), per rank when ranks > 1
    backtrace: list = field(default_factory=list)  # the reporter's call path of a crash, innermost first
    hami_log: list = field(default_factory=list)  # classified interposer log lines (hami_log.classify_log)
    series: dict = field(default_factory=dict)  # name -> {step_s, unit, values}: a rate over the run (`series` events)

    @property
    def failed(self) -> bool:
        return self.outcome in FAILURES

    def to_json(self) -> dict:
        out = asdict(self)
        if out["launch"] is None:
            del out["launch"]
        for k in ("load_proof", "backtrace", "hami_log", "series"):
            if not out[k]:
                del out[k]
        return out


def compile_reproducer(repro: Reproducer, cache: Path, stub_dir: Path) -> Path:
    """cc the reproducer against the CUDA headers; the stub dir gives link-time libcuda.so."""
    cc = compiling.cc()
    inc = toolchain.cuda_include()
    unit = compiling.Unit(
        what=f"reproducer {repro.name}",
        steps=[[cc, "-O1", "-g", "-o", f"{{out}}/{repro.name}", *[str(repro.dir / s) for s in repro.sources],
                f"-I{inc}", f"-I{repro.common_dir}", f"-L{stub_dir}", *[f"-l{l}" for l in repro.libs]]],
        outputs=[repro.name], key_extra=[repro.hash], headers=[inc / "cuda.h"], user_error=True)
    return compiling.build_cached(unit, cache / "reproducers", compiler=cc) / repro.name


def _no_core_dumps():
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def parse_events(stdout: str) -> list[dict]:
    events = []
    for line in stdout.splitlines():
        if line.startswith(EVENT_PREFIX):
            try:
                events.append(json.loads(line[len(EVENT_PREFIX):]))
            except json.JSONDecodeError:
                events.append({"event": "garbled", "text": line[:200]})
    return events


def run_once(binary: Path | None, repro: Reproducer, scenario: Scenario, variant: str, index: int,
             preload: Path | None, driver_env: dict, scratch: Path, expected_sha256: str | None = None,
             extra_env: dict | None = None, isolate: bool = False, launcher: Path | None = None,
             bind_now: bool = True, reporter: Path | None = None, params: dict | None = None,
             bind_shim: Path | None = None) -> RunRecord:
    """One fresh process: the compiled `binary` (C) or the workload's command, with `preload` (and
    the `reporter` after it) in LD_PRELOAD. isolate=True: in a private mount namespace with its own
    tmpfs on /tmp/vgpulock (what makes parallel runs under HAMi safe) — through `launcher`
    (lucepatch.native.launch, one exec) when given, else unshare(1) + sh + mount(8); otherwise a
    plain child.

    bind_now: start a C reproducer with LD_BIND_NOW=1. The reproducers re-exec themselves with it
    (lp_bind_now: lazy binding would run ld.so's resolver inside the hooks and wipe the stack
    poison); setting it here skips that second exec, which maps libcuda and the preload again.
    Workloads poison no stack and start as the user runs them (eager binding of PyTorch's libraries
    would only cost seconds).

    params: values for the scenario's declared parameters (reproducer.toml [params]); every
    parameter not given runs at its default.

    bind_shim: preloaded last, for a C reproducer, when the library under test binds a function this
    glibc lacks lazily (lucepatch.verify.bindshim): bound at start, it would otherwise not load."""
    region = scratch / f"region-{uuid.uuid4().hex}.cache"  # never reuse a region file
    # the simulated driver's machine: one per run, shared by the run's processes (fakecuda/fakegpu.c);
    # a real driver ignores the variable
    machine = scratch / f"machine-{uuid.uuid4().hex}"
    events = scratch / f"events-{uuid.uuid4().hex}.jsonl"
    env = scrubbed_environ()
    if repro.is_workload:
        env.pop("PYTHONPATH", None)
        env.update(wl.workload_env(repro, scenario, params))
        argv = wl.command_for(repro, scenario, binary)  # binary: the folder of its [build], if any
    else:
        env.update(scenario_env(repro, scenario, params))
        argv = [str(binary), scenario.name]
    env.update(driver_env)
    env.update(extra_env or {})
    env["LIBCUDA_LOG_LEVEL"] = "2"  # HAMi prints its load marker only at >= 2
    env["CUDA_DEVICE_MEMORY_SHARED_CACHE"] = str(region)
    env["LUCEPATCH_FAKECUDA_MACHINE"] = str(machine)
    if bind_now and not repro.is_workload:
        env["LD_BIND_NOW"] = "1"
    shim = bind_shim if not repro.is_workload else None  # a workload binds lazily, as a pod does
    libs = [str(p) for p in (preload, reporter, shim) if p is not None]
    if libs:
        env["LD_PRELOAD"] = " ".join(libs)
    if reporter is not None:
        env[wl.EVENTS_ENV] = str(events)
        if repro.is_workload and repro.load_proof == "preload":
            env[wl.AT_EXIT_ENV] = "1"
    start = time.monotonic()
    if not os.path.isabs(argv[0]):  # the launcher execs a path, not a name looked up on PATH
        argv[0] = shutil.which(argv[0], path=env.get("PATH")) or argv[0]
    if isolate and launcher is not None:
        cmd, popen = [str(launcher), *argv], dict(start_new_session=True)
    elif isolate:
        # no preexec_fn: runs are started from several threads; the shell sets the core limit
        cmd = [shutil.which("unshare") or "unshare", "--mount", "--propagation", "private", "--",
               "/bin/sh", "-c", _NS_WRAPPER, *argv]
        popen = dict(start_new_session=True)
    else:
        cmd, popen = argv, dict(start_new_session=True, preexec_fn=_no_core_dumps)
    try:
        # registered, in its own process group: a Ctrl-C kills it at once (lucepatch.children)
        proc = children.popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=scratch, **popen)
    except OSError as exc:
        return RunRecord(variant=variant, scenario=scenario.name, index=index, outcome=INVALID, returncode=None,
                         signal=None, duration_s=0.0, reason=f"cannot start {argv[0]}: {exc.strerror or exc}")
    timed_out = False
    try:
        try:
            out, err = proc.communicate(timeout=scenario.timeout_s or repro.timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
            children.kill_group(proc)  # the whole group: HAMi's watcher threads/children too
            out, err = proc.communicate()
        duration = time.monotonic() - start
        children.kill_group(proc)  # children the scenario forked and left behind die with the run
    except BaseException:  # interrupted: the run dies with verify and is not tallied (nothing is)
        children.kill_group(proc)
        proc.communicate()
        raise
    finally:
        children.release(proc)
    region.unlink(missing_ok=True)
    machine.unlink(missing_ok=True)
    reporter_events = read_events_file(events)
    events.unlink(missing_ok=True)
    stdout = out.decode("utf-8", "replace")
    stderr = err.decode("utf-8", "replace")
    if isolate and proc.returncode == ISOLATION_FAILED_RC and "@@lucepatch" not in stdout:
        return RunRecord(variant=variant, scenario=scenario.name, index=index, outcome=INVALID,
                         returncode=proc.returncode, signal=None, duration_s=round(duration, 4),
                         reason="could not mount a private /tmp/vgpulock for this run",
                         log_tail=stderr.strip()[-500:])
    return classify(repro, scenario, variant, index, proc.returncode, timed_out, duration, stdout, stderr,
                    preload, expected_sha256, reporter_events=reporter_events, main_pid=proc.pid)


def read_events_file(path: Path) -> list[dict]:
    """The reporter's events (one JSON object per line; a line cut short by a dying process is dropped)."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return []
    out = []
    for line in text.splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return out


def _signame(returncode: int | None) -> str | None:
    if returncode is None or returncode >= 0:
        return None
    try:
        return signal.Signals(-returncode).name
    except ValueError:
        return f"SIG{-returncode}"


def classify(repro: Reproducer, scenario: Scenario, variant: str, index: int, returncode: int | None,
             timed_out: bool, duration: float, stdout: str, stderr: str, preload: Path | None,
             expected_sha256: str | None, *, reporter_events: list[dict] | None = None,
             main_pid: int | None = None) -> RunRecord:
    events = parse_events(stdout)
    reporter_events = reporter_events or []
    drv = next((e for e in events if e.get("event") == "driver"), None)
    done = next((e for e in events if e.get("event") == "done"), None)
    skip = next((e for e in events if e.get("event") == "skip"), None)
    setup_error = next((e for e in events if e.get("event") == "setup-error"), None)
    values = {e.get("name"): e.get("value") for e in events if e.get("event") == "value"}
    series = {e["name"]: {k: e[k] for k in ("step_s", "unit", "values") if k in e}
              for e in events if e.get("event") == "series" and isinstance(e.get("name"), str)}
    checks = [e for e in events if e.get("event") == "check"]
    signals = [e for e in reporter_events if e.get("event") == "signal"]
    children = [e for e in events if e.get("event") == "child-exit"]
    sig = _signame(returncode)
    log = stderr + "\n" + stdout
    classified = hami_log.classify_log(log)
    failing_line = hami_log.first_with(classified, "fail")
    broken_line = hami_log.first_with(classified, "invalid")
    # the first line that decides something (a failure signature, a broken set-up), else the first
    # failed check (what the program measured), else the first ERROR line: a benign ERROR (HAMi's
    # "host pid is error!", the `Device 0 OOM` line of a limit the scenario expects to be enforced)
    # must not hide the one that matters
    decisive = failing_line or broken_line
    bad = next((c for c in checks if not c.get("ok")), None)
    if decisive:
        first_error = decisive["line"]
    elif bad:
        first_error = f"check {bad.get('name')}: expected {bad.get('expected')}, got {bad.get('got')}"
    else:
        first_error = next((l.strip() for l in log.splitlines() if not l.startswith("@@lucepatch")
                            and (any(s in l for s in ERROR_SIGNATURES) or " ERROR " in l or "ERROR (" in l)), "")
    proofs = proof.collect(events, reporter_events, stderr, repro.load_marker)
    main = proof.best(proofs, pid=main_pid) or proof.sole(proofs)
    rec = RunRecord(variant=variant, scenario=scenario.name, index=index, outcome=PASS, returncode=returncode,
                    signal=sig, duration_s=round(duration, 4), preload=(main.preload if main else []),
                    libcuda=(main.libcuda if main else None), driver=drv, checks=checks,
                    first_error=first_error[:300],
                    log_tail="\n".join(log.strip().splitlines()[-8:])[-1500:], values=values,
                    hami_log=classified, series=series)
    if signals:
        rec.backtrace = backtrace.call_path(signals[0])

    # 0. The loader refused a library of the run: nothing ran as asked, and the loader's own line says why.
    loader = next((c for c in classified if c["class"] == "loader"), None)
    if loader is not None:
        # C reproducers always run bound at start (LD_BIND_NOW=1 from the runner, or lp_bind_now's re-exec)
        rec.outcome, rec.reason = INVALID, hami_log.loader_reason(loader["line"], bind_now=not repro.is_workload)
        rec.first_error = rec.reason[:300]
        return rec
    # 1. Proof of what ran. Without it nothing else about the run means anything.
    if preload is not None:
        why = _proof_problem(repro, scenario, proofs, main, main_pid, preload, expected_sha256, rec)
        if why:
            if timed_out and why.startswith("no load report"):
                rec.outcome, rec.reason = TIMEOUT, "timed out before reporting what it loaded"
            elif setup_error is not None:
                rec.outcome, rec.reason = INVALID, "reproducer setup error: " + str(setup_error.get("message"))[:200]
            else:
                rec.outcome, rec.reason = INVALID, why
            return rec
    elif main is not None and not rec.libcuda:
        rec.outcome, rec.reason = INVALID, "no libcuda.so.1 mapped"
        return rec
    if broken_line is not None:
        rec.outcome, rec.reason = INVALID, f"the interposer did not set up ({broken_line['class']}): {broken_line['line'][:160]}"
        return rec
    # 2. What happened.
    crashed = next((e for e in signals if e.get("pid") != main_pid), None)
    died = next((c for c in children if isinstance(c.get("exitcode"), int) and c["exitcode"] < 0
                 and not c.get("killed")), None)
    if timed_out:
        rec.outcome, rec.reason = TIMEOUT, f"killed after {scenario.timeout_s or repro.timeout_s:g}s (process group)"
    elif skip is not None and returncode == 0 and all(c.get("ok") for c in checks):
        rec.outcome, rec.reason = SKIPPED, str(skip.get("reason", ""))[:200]
    elif sig:
        rec.outcome, rec.reason = CRASH, sig
    elif crashed is not None or died is not None:
        if crashed is not None:
            who = _who(crashed.get("pid"), events)
            rec.signal = crashed.get("signal")
        else:
            who = f"rank {died.get('rank')} (pid {died.get('pid')})"
            rec.signal = _signame(died["exitcode"])
        rec.outcome, rec.reason = CRASH, f"{rec.signal} in {who}"
    elif setup_error is not None or (returncode == 2 and not repro.is_workload):
        msg = (setup_error or {}).get("message") or (rec.log_tail.splitlines() or [""])[-1]
        rec.outcome, rec.reason = INVALID, "reproducer setup error (exit 2): " + str(msg)[:200]
    elif returncode == 1 or (done and not done.get("ok")) or any(not c.get("ok") for c in checks):
        rec.outcome, rec.reason = FAIL, rec.first_error or f"exit {returncode}"
    elif returncode != 0:
        rec.outcome, rec.reason = FAIL, f"exit {returncode}"
    elif done is None and _reports_done(repro):
        rec.outcome, rec.reason = INVALID, "exited 0 without reporting the scenario's end"
    elif failing_line is not None:
        rec.outcome, rec.reason = FAIL_LOG, failing_line["line"][:300]
        rec.first_error = rec.first_error or failing_line["line"][:300]
    return rec


def _reports_done(repro: Reproducer) -> bool:
    """C reproducers and program-proof workloads report their end; a program lucepatch cannot change
    (load_proof = "preload") ends with its exit status."""
    return not (repro.is_workload and repro.load_proof == "preload")


def _who(pid, events: list[dict]) -> str:
    rank = next((e.get("rank") for e in events if e.get("event") == "rank" and e.get("pid") == pid), None)
    return f"rank {rank} (pid {pid})" if rank is not None else f"pid {pid}"


def _proof_problem(repro: Reproducer, scenario: Scenario, proofs: list, main, main_pid, preload: Path,
                   expected_sha256: str | None, rec: RunRecord) -> str:
    """Why the run did not prove what it loaded ("" when it did); records the proof that counted."""
    ranks = scenario.ranks if repro.is_workload else 1
    if ranks > 1:
        per = []
        for r in range(ranks):
            p = proof.best(proofs, rank=r)
            if p is None:
                return f"no load report from rank {r} (it died before reporting, or never started)"
            why = proof.problem(p, preload, expected_sha256)
            if why:
                return f"rank {r}: {why}"
            per.append(p.to_json())
        first = proof.best(proofs, rank=0)
        rec.preload, rec.libcuda = first.preload, first.libcuda
        rec.load_proof = {**per[0], "ranks": per}
        return ""
    if main is None:
        return "no load report from the reproducer (it died before reporting, or is not a lucepatch reproducer)"
    why = proof.problem(main, preload, expected_sha256)
    if why == "load marker missing from the log":
        return f"load marker {repro.load_marker!r} missing from the log"
    if why:
        return why
    rec.load_proof = main.to_json()
    return ""
