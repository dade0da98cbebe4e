"""Compile a reproducer and run it under a preloaded library, one fresh process per run.

Each run proves what it ran: the reproducer reports (from /proc/self/maps) the realpath and
sha256 of the preloaded library and of the mapped libcuda.so.1, and the interception library's
load marker must appear in its log. A run that cannot show both is `invalid`, never a pass:
a preload that fails to load is silently ignored by ld.so and the program exits 0.
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

from lucepatch import compiling
from lucepatch.builders import toolchain
from lucepatch.verify.reproducer import Reproducer, Scenario

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

# Log signatures of the bug family (docs/field-notes.md §3).
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

    @property
    def failed(self) -> bool:
        return self.outcome in FAILURES

    def to_json(self) -> dict:
        d = asdict(self)
        if d["launch"] is None:
            del d["launch"]
        return d


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


def run_once(binary: Path, repro: Reproducer, scenario: Scenario, variant: str, index: int,
             preload: Path | None, driver_env: dict, scratch: Path, expected_sha256: str | None = None,
             extra_env: dict | None = None, isolate: bool = False, launcher: Path | None = None,
             bind_now: bool = True) -> RunRecord:
    """One fresh process. isolate=True: in a private mount namespace with its own tmpfs on
    /tmp/vgpulock (what makes parallel runs under HAMi safe) — through `launcher`
    (lucepatch.verify.launch, one exec) when given, else unshare(1) + sh + mount(8); otherwise a
    plain child.

    bind_now: start the reproducer with LD_BIND_NOW=1. The reproducers re-exec themselves with it
    (lp_bind_now: lazy binding would run ld.so's resolver inside the hooks and wipe the stack
    poison); setting it here skips that second exec, which maps libcuda and the preload again."""
    region = scratch / f"region-{uuid.uuid4().hex}.cache"  # never reuse a region file
    env = scrubbed_environ()
    env.update(repro.env)
    env.update(scenario.env)
    env.update(driver_env)
    env.update(extra_env or {})
    env["LIBCUDA_LOG_LEVEL"] = "2"  # HAMi prints its load marker only at >= 2
    env["CUDA_DEVICE_MEMORY_SHARED_CACHE"] = str(region)
    if bind_now:
        env["LD_BIND_NOW"] = "1"
    if preload is not None:
        env["LD_PRELOAD"] = str(preload)
    start = time.monotonic()
    if isolate and launcher is not None:
        cmd = [str(launcher), str(binary), scenario.name]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=scratch,
                                start_new_session=True)
    elif isolate:
        # no preexec_fn: runs are started from several threads; the shell sets the core limit
        cmd = [shutil.which("unshare") or "unshare", "--mount", "--propagation", "private", "--",
               "/bin/sh", "-c", _NS_WRAPPER, str(binary), scenario.name]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=scratch,
                                start_new_session=True)
    else:
        proc = subprocess.Popen([str(binary), scenario.name], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                env=env, cwd=scratch, start_new_session=True, preexec_fn=_no_core_dumps)
    timed_out = False
    try:
        out, err = proc.communicate(timeout=repro.timeout_s)
    except subprocess.TimeoutExpired:
        timed_out = True
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # the whole group: HAMi's watcher threads/children too
        except ProcessLookupError:
            pass
        out, err = proc.communicate()
    duration = time.monotonic() - start
    if not timed_out:
        try:  # children the scenario forked and left behind die with the run
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    region.unlink(missing_ok=True)
    stdout = out.decode("utf-8", "replace")
    stderr = err.decode("utf-8", "replace")
    if isolate and proc.returncode == ISOLATION_FAILED_RC and "@@lucepatch" not in stdout:
        return RunRecord(variant=variant, scenario=scenario.name, index=index, outcome=INVALID,
                         returncode=proc.returncode, signal=None, duration_s=round(duration, 4),
                         reason="could not mount a private /tmp/vgpulock for this run",
                         log_tail=stderr.strip()[-500:])
    return classify(repro, scenario, variant, index, proc.returncode, timed_out, duration, stdout, stderr,
                    preload, expected_sha256)


def classify(repro: Reproducer, scenario: Scenario, variant: str, index: int, returncode: int | None,
             timed_out: bool, duration: float, stdout: str, stderr: str, preload: Path | None,
             expected_sha256: str | None) -> RunRecord:
    events = parse_events(stdout)
    loaded = next((e for e in events if e.get("event") == "loaded"), None)
    drv = next((e for e in events if e.get("event") == "driver"), None)
    done = next((e for e in events if e.get("event") == "done"), None)
    skip = next((e for e in events if e.get("event") == "skip"), None)
    values = {e.get("name"): e.get("value") for e in events if e.get("event") == "value"}
    checks = [e for e in events if e.get("event") == "check"]
    sig = None
    if returncode is not None and returncode < 0:
        try:
            sig = signal.Signals(-returncode).name
        except ValueError:
            sig = f"SIG{-returncode}"
    log = stderr + "\n" + stdout
    first_error = next((l.strip() for l in log.splitlines()
                        if any(s in l for s in ERROR_SIGNATURES) or " ERROR " in l or "ERROR (" in l), "")
    if not first_error:
        bad = next((c for c in checks if not c.get("ok")), None)
        if bad:
            first_error = f"check {bad.get('name')}: expected {bad.get('expected')}, got {bad.get('got')}"
    rec = RunRecord(variant=variant, scenario=scenario.name, index=index, outcome=PASS, returncode=returncode,
                    signal=sig, duration_s=round(duration, 4), preload=(loaded or {}).get("preload", []),
                    libcuda=(loaded or {}).get("libcuda"), driver=drv, checks=checks, first_error=first_error[:300],
                    log_tail="\n".join(log.strip().splitlines()[-8:])[-1500:], values=values)

    # 1. Proof of what ran. Without it nothing else about the run means anything.
    if preload is not None:
        if loaded is None:
            rec.outcome, rec.reason = INVALID, "no load report from the reproducer (it died before reporting, or is not a lucepatch reproducer)"
            if timed_out:
                rec.outcome, rec.reason = TIMEOUT, "timed out before reporting what it loaded"
            return rec
        mapped = [p for p in rec.preload if Path(p.get("path", "")).name == preload.name]
        if not mapped:
            rec.outcome, rec.reason = INVALID, f"{preload.name} was not mapped: the preload did not load"
            return rec
        if expected_sha256 and mapped[0].get("sha256") != expected_sha256:
            rec.outcome, rec.reason = INVALID, "the mapped library is not the artifact under test (sha256 differs)"
            return rec
        if repro.load_marker and repro.load_marker not in stderr:
            rec.outcome, rec.reason = INVALID, f"load marker {repro.load_marker!r} missing from the log"
            return rec
    if not rec.libcuda and loaded is not None:
        rec.outcome, rec.reason = INVALID, "no libcuda.so.1 mapped"
        return rec
    # 2. What happened.
    if timed_out:
        rec.outcome, rec.reason = TIMEOUT, f"killed after {repro.timeout_s:g}s (process group)"
    elif skip is not None and returncode == 0 and all(c.get("ok") for c in checks):
        rec.outcome, rec.reason = SKIPPED, str(skip.get("reason", ""))[:200]
    elif sig:
        rec.outcome, rec.reason = CRASH, sig
    elif returncode == 2:
        rec.outcome, rec.reason = INVALID, "reproducer setup error (exit 2): " + (rec.log_tail.splitlines() or [""])[-1][:200]
    elif returncode == 1 or (done and not done.get("ok")) or any(not c.get("ok") for c in checks):
        rec.outcome, rec.reason = FAIL, rec.first_error or f"exit {returncode}"
    elif returncode != 0:
        rec.outcome, rec.reason = FAIL, f"exit {returncode}"
    elif done is None:
        rec.outcome, rec.reason = INVALID, "exited 0 without reporting the scenario's end"
    elif any(s in log for s in ERROR_SIGNATURES):
        rec.outcome, rec.reason = FAIL_LOG, rec.first_error
    return rec
