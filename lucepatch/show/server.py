"""What a server reproducer's evidence says (reproducers/serve, issue 40), per variant: does the server
run under the library, is its memory charged, is its limit enforced, is anything left charged after it
exits. Pure data from the evidence: the scenarios' tallies and the values each run recorded (the
harness's `server`, `ready_s`, `charged_*`, `reserved_*`, `region_after_exit`, `oom_error`, ...).

`server_view` is one evidence's part of the viewer's model (terminal, page, JSON); `matrix` lays several
side by side — one row per line (target), server build and variant — the table `lucepatch show A.json
B.json ...` prints.
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass, field

from lucepatch.verify.evidence import Evidence

REPRODUCER = "serve"
VARIANTS = ("baseline", "patched")
TRUTHS = ("log", "nvml", "device")  # reproducers/serve/serve.py: what the server reserved, read how


def mib(n) -> str:
    return "?" if n is None else f"{n / (1 << 20):.1f} MiB"



def _median(xs: list) -> float | None:
    xs = [x for x in xs if isinstance(x, (int, float))]
    return statistics.median(xs) if xs else None


@dataclass
class Tallied:
    """One scenario's runs on one variant: how many counted, how many passed, the first that did not."""
    runs: int = 0  # runs that measured something (not skipped, not invalid)
    passed: int = 0
    other: str = ""  # the first run that did not count or did not pass: "outcome: reason"

    @classmethod
    def of(cls, runs: list[dict]) -> "Tallied":
        done = [r for r in runs if r.get("outcome") not in ("skipped", "invalid")]
        bad = next((r for r in runs if r.get("outcome") != "pass"), None)
        return cls(len(done), sum(1 for r in done if r.get("outcome") == "pass"),
                   f"{bad.get('outcome')}: {(bad.get('reason') or '')[:200]}" if bad else "")

    def cell(self, word: str) -> str:
        if not self.runs:
            return self.other.split(":", 1)[0] or "not run"
        return f"{word} {self.passed}/{self.runs}"

    def text(self, word: str) -> str:
        return self.cell(word) + (f"; {self.other}" if self.other else "")


@dataclass
class ServerSide:
    """One variant's runs of the server scenarios: the tallies and the numbers the runs recorded."""
    variant: str
    library: str  # the variant's library: its base or series, sha256 prefix
    serves: Tallied
    charged: Tallied
    limit_oom: Tallied
    numbers: dict = field(default_factory=dict)  # medians (bytes): charged_meminfo, charged_region, reserved_<truth>
    limit: int | None = None  # the small limit of limit-oom (bytes)
    oom_error: str = ""  # the server's own out-of-memory line
    left_after_exit: int | None = None  # the most any run left charged after the server exited (region file)
    left_runs: int = 0

    def reserved(self) -> str:
        got = [f"{mib(self.numbers[f'reserved_{t}'])} ({t})" for t in TRUTHS if f"reserved_{t}" in self.numbers]
        return ", ".join(got) or "no readable truth"

    # the long form (one evidence, terminal and page) and the cells (several side by side)
    @property
    def runs_text(self) -> str:
        return self.serves.text("answered")

    @property
    def charged_text(self) -> str:
        if "charged_meminfo" not in self.numbers:
            return self.charged.text("within bound")
        return (f"HAMi {mib(self.numbers['charged_meminfo'])} (cuMemGetInfo), "
                f"{mib(self.numbers.get('charged_region'))} (region) of {self.reserved()} reserved (medians); "
                + self.charged.text("within bound"))

    @property
    def limit_text(self) -> str:
        text = self.limit_oom.text("clean out-of-memory") + (f" under {mib(self.limit)}" if self.limit is not None else "")
        return text + (f"; the server said: {self.oom_error[:160]}" if self.oom_error else "")

    @property
    def after_text(self) -> str:
        if self.left_after_exit is None:
            return "not read"
        return f"{mib(self.left_after_exit)} at most ({self.left_runs} runs; the region file read after the server exited)"

    def cells(self) -> list[str]:
        charged = self.charged.cell("within bound")
        if "charged_meminfo" in self.numbers:
            charged = f"{mib(self.numbers['charged_meminfo'])} of {self.reserved()}; {charged}"
        limit = self.limit_oom.cell("clean OOM") + (f" under {mib(self.limit)}" if self.limit is not None else "")
        left = "not read" if self.left_after_exit is None else mib(self.left_after_exit)
        return [self.serves.cell("answered"), charged, limit, left]


@dataclass
class ServerView:
    spec: str
    build: str
    binary_sha256: str
    target: str
    version: str
    gpu: str
    simulated: bool
    sides: list[ServerSide]

    def to_json(self) -> dict:
        return asdict(self)


def _runs(ev: Evidence, scenario: str, variant: str) -> list[dict]:
    key = f"{REPRODUCER}:{scenario}"
    return [r for r in ev.runs if r.get("scenario") == key and r.get("variant") == variant]


def _side(ev: Evidence, v: str) -> ServerSide:
    vi = ev.variants.get(v)
    lib = ""
    if vi is not None:
        where = vi.ref or (vi.base or "")[:12]
        lib = f"{'series on' if v == 'patched' and not vi.ref else 'base'} {where}, sha256 {(vi.artifact.sha256 or '')[:12]}"
    charged, oom = _runs(ev, "charged", v), _runs(ev, "limit-oom", v)
    measured = [r.get("values") or {} for r in charged if r.get("outcome") not in ("skipped", "invalid")]
    nums = {"charged_meminfo": _median([x.get("charged_meminfo") for x in measured]),
            "charged_region": _median([(x.get("charged_region") or {}).get("total") for x in measured])}
    for t in TRUTHS:
        nums[f"reserved_{t}"] = _median([x.get(f"reserved_{t}") for x in measured])
    vals = [r.get("values") or {} for r in oom]
    left = [((r.get("values") or {}).get("region_after_exit") or {}).get("charged") for r in charged + oom]
    left = [x for x in left if isinstance(x, int)]
    return ServerSide(variant=v, library=lib, serves=Tallied.of(_runs(ev, "serves", v)), charged=Tallied.of(charged),
                      limit_oom=Tallied.of(oom), numbers={k: x for k, x in nums.items() if x is not None},
                      limit=next((x.get("limit") for x in vals if x.get("limit") is not None), None),
                      oom_error=next((x.get("oom_error") for x in vals if x.get("oom_error")), "") or "",
                      left_after_exit=max(left) if left else None, left_runs=len(left))


def server_view(ev: Evidence) -> ServerView | None:
    """The server part of `ev`, or None when no server scenario ran."""
    if not any(s.scenario.startswith(f"{REPRODUCER}:") for s in ev.scenarios):
        return None
    server = next(((r.get("values") or {}).get("server") for r in ev.runs if (r.get("values") or {}).get("server")), {})
    drv = ev.driver or {}
    return ServerView(spec=server.get("spec", ""), build=server.get("build", ""),
                      binary_sha256=server.get("binary_sha256", ""), target=ev.target, version=ev.series.version,
                      gpu=drv.get("gpu") or "unknown", simulated=bool(ev.simulated),
                      sides=[_side(ev, v) for v in VARIANTS])


COLUMNS = ["line", "server build", "GPU", "library", "starts, answers", "charged of reserved", "limit enforced",
           "left after exit"]


def matrix(views: list[ServerView]) -> list[list[str]]:
    """One row per line, server build and variant: the table `show A.json B.json ...` prints."""
    rows = []
    for sv in views:
        gpu = f"{sv.gpu}: not GPU evidence" if sv.simulated else sv.gpu
        for side in sv.sides:
            rows.append([f"{sv.target} {sv.version}", f"{sv.spec}: {sv.build}" if sv.build else sv.spec, gpu,
                         f"{side.variant}: {side.library.split(', sha256')[0]}", *side.cells()])
    return rows
