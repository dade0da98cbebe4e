"""Verify Jobs: the in-pod runner script, and pod logs -> run outcomes.

Log line formats (one JSON object per line, after a fixed marker; anything else is plain log):

``@@lucepatch {json}``
    Printed by the reproducer itself (its events: ``loaded``, ``driver``, ``check``, ``done``;
    see the verify package). Attributed to the run it appears in.
``@@lucepatch-run-start {"run": i, "variant": "baseline"|"patched"}``
    Printed by the runner before run ``i`` (1-based).
``@@lucepatch-run {"run": i, "variant": ..., "returncode": int, "signal": int|null,
"timed_out": bool, "stderr_tail": str}``
    Printed by the runner after run ``i``. ``returncode`` follows Python's subprocess
    convention: negative = killed by that signal (-11 = SIGSEGV), 124 = per-run timeout.
    ``stderr_tail`` = the last 2000 bytes of the run's stderr (HAMi's log lines go there),
    control characters removed.
``@@lucepatch-job {"variant": ..., "runs": n, "node": ..., "lib_sha256": ..., "error": str|null}``
    Printed once at the start (``error`` null) and on a fatal refusal (e.g. the library's
    sha256 is not the expected one: nothing is run, the Job exits 3).

A run's stderr is also copied to the pod log between its start and end markers, so the log
alone reconstructs every run: events, exit status, HAMi's ``Initialized`` marker.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

EVENT = "@@lucepatch "
RUN_START = "@@lucepatch-run-start "
RUN_END = "@@lucepatch-run "
JOB = "@@lucepatch-job "

# POSIX sh; runs in the reproducer image. argv after the script name = the reproducer command.
# LD_PRELOAD is set for the reproducer only, never for the runner's own tools. printf, never echo:
# dash's echo would expand the backslash escapes of the JSON.
RUNNER_SCRIPT = r"""
lib="${LUCEPATCH_LIB:?}"; variant="${LUCEPATCH_VARIANT:?}"; runs="${LUCEPATCH_RUNS:-1}"
tmo="${LUCEPATCH_RUN_TIMEOUT:-120}"; want="${LUCEPATCH_LIB_SHA256:-}"; node="${LUCEPATCH_NODE:-}"
esc() { tr -d '\000-\010\013-\037\177' | sed -e 's/\\/\\\\/g' -e 's/"/\\"/g' -e 's/\t/\\t/g' | awk 'BEGIN{ORS=""} {if (NR>1) printf "%s", "\\n"; print}'; }
got="$(sha256sum "$lib" 2>/dev/null | cut -d' ' -f1)"
if [ -n "$want" ] && [ "$got" != "$want" ]; then
  printf '%s\n' "@@lucepatch-job {\"variant\":\"$variant\",\"runs\":0,\"node\":\"$node\",\"lib_sha256\":\"$got\",\"error\":\"library sha256 $got is not the expected $want\"}"
  exit 3
fi
printf '%s\n' "@@lucepatch-job {\"variant\":\"$variant\",\"runs\":$runs,\"node\":\"$node\",\"lib_sha256\":\"$got\",\"error\":null}"
errf="${TMPDIR:-/tmp}/lucepatch-run.stderr"
i=1
while [ "$i" -le "$runs" ]; do
  region="${TMPDIR:-/tmp}/lucepatch-region-$i.cache"; rm -f "$region"
  printf '%s\n' "@@lucepatch-run-start {\"run\":$i,\"variant\":\"$variant\"}"
  if command -v timeout >/dev/null 2>&1; then
    CUDA_DEVICE_MEMORY_SHARED_CACHE="$region" LD_PRELOAD="$lib" timeout -k 5 "$tmo" "$@" 2>"$errf"; rc=$?
  else
    CUDA_DEVICE_MEMORY_SHARED_CACHE="$region" LD_PRELOAD="$lib" "$@" 2>"$errf"; rc=$?
  fi
  cat "$errf" >&2
  sig=null; to=false
  if [ "$rc" -gt 128 ] && [ "$rc" -lt 193 ]; then sig=$((rc - 128)); rc=$((128 - rc)); fi
  if [ "$rc" -eq 124 ]; then to=true; fi
  tail_txt="$(tail -c 2000 "$errf" | esc)"
  printf '%s\n' "@@lucepatch-run {\"run\":$i,\"variant\":\"$variant\",\"returncode\":$rc,\"signal\":$sig,\"timed_out\":$to,\"stderr_tail\":\"$tail_txt\"}"
  rm -f "$region" "$errf"
  i=$((i + 1))
done
""".strip() + "\n"


@dataclass
class RunOutcome:
    run: int
    variant: str
    returncode: int | None = None  # None: the log ends before the run finished
    signal: int | None = None
    timed_out: bool = False
    stderr_tail: str = ""
    events: list[dict] = field(default_factory=list)
    log_lines: list[str] = field(default_factory=list)

    @property
    def finished(self) -> bool:
        return self.returncode is not None

    @property
    def hami_initialized(self) -> bool:
        """HAMi's load marker in the run's output: without it the run proves nothing."""
        return any("Initialized" in line and "Initializing" not in line for line in self.log_lines) or \
            "Initialized" in self.stderr_tail.replace("Initializing", "")

    def to_dict(self) -> dict:
        return {"run": self.run, "variant": self.variant, "returncode": self.returncode, "signal": self.signal,
                "timed_out": self.timed_out, "finished": self.finished, "hami_initialized": self.hami_initialized,
                "events": self.events, "stderr_tail": self.stderr_tail}


@dataclass
class JobLog:
    variant: str | None = None
    node: str | None = None
    lib_sha256: str | None = None
    expected_runs: int | None = None
    error: str | None = None
    runs: list[RunOutcome] = field(default_factory=list)
    malformed: list[str] = field(default_factory=list)  # marker lines whose JSON did not parse

    @property
    def complete(self) -> bool:
        return (self.error is None and self.expected_runs is not None
                and len([r for r in self.runs if r.finished]) == self.expected_runs)

    def to_dict(self) -> dict:
        return {"variant": self.variant, "node": self.node, "lib_sha256": self.lib_sha256,
                "expected_runs": self.expected_runs, "error": self.error, "complete": self.complete,
                "malformed": self.malformed, "runs": [r.to_dict() for r in self.runs]}


def _payload(line: str, marker: str) -> dict | None:
    try:
        obj = json.loads(line[len(marker):])
    except json.JSONDecodeError:
        return None
    return obj if isinstance(obj, dict) else None


def parse_job_log(text: str) -> JobLog:
    """Pod log text of one verify Job -> JobLog with one RunOutcome per run.

    Kubelet may prefix lines with a timestamp (``kubectl logs --timestamps``): a leading
    RFC 3339 token before a marker is tolerated.
    """
    log = JobLog()
    current: RunOutcome | None = None
    by_run: dict[int, RunOutcome] = {}
    for raw in text.splitlines():
        line = raw.rstrip("\r")
        for marker in (RUN_START, RUN_END, JOB, EVENT):
            idx = line.find(marker)
            if idx == 0 or (idx > 0 and line[idx - 1] == " " and " " not in line[:idx].strip()):
                line = line[idx:]
                break
        if line.startswith(JOB):
            p = _payload(line, JOB)
            if p is None:
                log.malformed.append(raw)
                continue
            log.variant = p.get("variant", log.variant)
            log.node = p.get("node") or log.node
            log.lib_sha256 = p.get("lib_sha256") or log.lib_sha256
            if p.get("error"):
                log.error = p["error"]
            else:
                log.expected_runs = p.get("runs")
        elif line.startswith(RUN_START):
            p = _payload(line, RUN_START)
            if p is None or not isinstance(p.get("run"), int):
                log.malformed.append(raw)
                continue
            current = RunOutcome(run=p["run"], variant=p.get("variant", log.variant or "?"))
            by_run[current.run] = current
            log.runs.append(current)
        elif line.startswith(RUN_END):
            p = _payload(line, RUN_END)
            if p is None or not isinstance(p.get("run"), int):
                log.malformed.append(raw)
                continue
            r = by_run.get(p["run"])
            if r is None:  # end without start (log truncated at the head)
                r = RunOutcome(run=p["run"], variant=p.get("variant", log.variant or "?"))
                by_run[r.run] = r
                log.runs.append(r)
            r.returncode = int(p["returncode"]) if p.get("returncode") is not None else None
            r.signal = p.get("signal")
            r.timed_out = bool(p.get("timed_out"))
            r.stderr_tail = p.get("stderr_tail") or ""
            current = None
        elif line.startswith(EVENT):
            p = _payload(line, EVENT)
            if p is None:
                log.malformed.append(raw)
                continue
            if current is not None:
                current.events.append(p)
        elif current is not None:
            current.log_lines.append(line)
    log.runs.sort(key=lambda r: r.run)
    return log


def summarise(logs: list[JobLog]) -> dict:
    """Counts per variant: runs, finished, passed (returncode 0 with HAMi initialised), crashed."""
    out: dict[str, dict] = {}
    for jl in logs:
        for r in jl.runs:
            s = out.setdefault(r.variant, {"runs": 0, "finished": 0, "passed": 0, "failed": 0,
                                           "signalled": 0, "timed_out": 0, "invalid": 0})
            s["runs"] += 1
            if not r.finished:
                continue
            s["finished"] += 1
            if not r.hami_initialized:
                s["invalid"] += 1
            elif r.returncode == 0:
                s["passed"] += 1
            else:
                s["failed"] += 1
            if r.signal:
                s["signalled"] += 1
            if r.timed_out:
                s["timed_out"] += 1
    return out
