"""How a quantitative scenario reads (issue 38): its numbers for the terminal and the PR body, and the
geometry of the page's two plots — the baseline's and the patched build's rate with their intervals
against the bound, and the rate over time of every process a run measured (per tenant, per variant).
Pure data from the evidence (`measure` of a scenario, `series` of its runs); the page's template
draws it as inline SVG (templates/show/evidence.html.j2), every value escaped there.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from lucepatch.verify.evidence import Evidence, ScenarioResult

W, H_IV, H_SERIES = 640, 120, 220  # px
PAD_L, PAD_R, PAD_T, PAD_B = 90, 20, 14, 28
CSS = {"bare": "s-bare", "baseline": "s-baseline", "patched": "s-patched", "layer": "s-patched"}


def bound_text(m: dict) -> str:
    lo, hi = (m.get("bound") or {}).get("lo"), (m.get("bound") or {}).get("hi")
    unit = f" {m['unit']}" if m.get("unit") else ""
    if lo is None:
        return f"≤ {hi:g}{unit}"
    if hi is None:
        return f"≥ {lo:g}{unit}"
    return f"[{lo:g}, {hi:g}]{unit}"


def interval_text(iv: dict) -> str:
    return f"{iv['estimate']:.3g} [{iv['low']:.3g}, {iv['high']:.3g}]"


def counted_rounds(m: dict) -> int:
    return sum(1 for r in m.get("rounds", []) if not r.get("warmup"))


def summary(s: ScenarioResult) -> str:
    """One line: both rates with their intervals, the bound, the rounds (terminal, PR body)."""
    m = s.extra.get("measure") or {}
    if "baseline" not in m:
        return f"{s.scenario}: {s.reason}"
    conf = m["baseline"].get("confidence", 0)
    what = f"x {m['per']}" if m.get("per") else (m.get("unit") or m.get("value", ""))
    return (f"{s.scenario}: baseline {interval_text(m['baseline'])}, patched {interval_text(m['patched'])} {what} "
            f"({100 * conf:.3g} % interval, {counted_rounds(m)} rounds + {m.get('warmup_rounds', 0)} warm-up); "
            f"must hold {bound_text(m)}")


def short(s: ScenarioResult) -> str:
    """The verdict table's few words for a rate row (the numbers are under the table)."""
    m = s.extra.get("measure") or {}
    looks = m.get("looks") or []
    last = looks[-1] if looks else {}
    if s.verdict == "proven":
        return ""
    if s.verdict == "guarded":
        return "both within bound"
    if s.verdict == "regression":
        return "patched misses bound"
    if s.verdict == "not-proven":
        if last.get("patched_place") == "outside":
            return "patched misses bound"
        if last.get("baseline_place") == "inside":
            return "baseline within bound"
        return "interval straddles bound"
    return ""


def cell(s: ScenarioResult, variant: str) -> str:
    """A rate row's baseline/patched cell: the estimate."""
    iv = (s.extra.get("measure") or {}).get(variant)
    return f"{iv['estimate']:.3g}" if iv else ""


# ---- the page's plots --------------------------------------------------------------------------

@dataclass
class Mark:
    label: str
    css: str
    estimate: float
    low: float
    high: float
    place: str
    y: float
    x: float = 0.0
    x_low: float = 0.0
    x_high: float = 0.0


@dataclass
class Line:
    label: str
    css: str
    points: str  # "x,y x,y ..." in px
    dash: str = ""


@dataclass
class RateView:
    scenario: str
    verdict: str
    reason: str
    summary: str
    unit: str
    bound: str
    width: int = W
    iv_height: int = H_IV
    series_height: int = H_SERIES
    marks: list[Mark] = field(default_factory=list)
    band: tuple[float, float] | None = None  # px range of the bound on the interval plot
    ticks: list[tuple[float, str]] = field(default_factory=list)
    lines: list[Line] = field(default_factory=list)
    x_ticks: list[tuple[float, str]] = field(default_factory=list)
    y_ticks: list[tuple[float, str]] = field(default_factory=list)
    series_unit: str = ""


def _nice_ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    if hi <= lo:
        hi = lo + 1
    raw = (hi - lo) / n
    mag = 10 ** math.floor(math.log10(raw))
    step = next(s * mag for s in (1, 2, 2.5, 5, 10) if s * mag >= raw)
    first = math.ceil(lo / step) * step
    return [round(first + i * step, 10) for i in range(int((hi - first) / step) + 1)]


def _interval_plot(v: RateView, m: dict, names: tuple[str, ...] = ("baseline", "patched")) -> None:
    """The intervals `m[name]` (each a rate_stats.Interval's JSON) against m["bound"]."""
    ivs = [(name, m[name]) for name in names if m.get(name)]
    if not ivs:
        return
    lo, hi = (m.get("bound") or {}).get("lo"), (m.get("bound") or {}).get("hi")
    xs = [x for _, iv in ivs for x in (iv["low"], iv["high"])] + [x for x in (lo, hi) if x is not None]
    a, b = min(xs), max(xs)
    pad = (b - a) * 0.08 or 0.05
    a, b = a - pad, b + pad
    span = v.width - PAD_L - PAD_R

    def px(x: float) -> float:
        return round(PAD_L + (x - a) / (b - a) * span, 1)

    v.band = (px(lo if lo is not None else a), px(hi if hi is not None else b))
    v.ticks = [(px(t), f"{t:g}") for t in _nice_ticks(a, b)]
    for i, (name, iv) in enumerate(ivs):
        looks = m.get("looks") or [{}]
        place = looks[-1].get(f"{name}_place", "")
        v.marks.append(Mark(name, CSS.get(name, ""), iv["estimate"], iv["low"], iv["high"], place,
                            y=PAD_T + 22 + i * 36, x=px(iv["estimate"]), x_low=px(iv["low"]), x_high=px(iv["high"])))


def _series_plot(v: RateView, s: ScenarioResult, runs: list[dict]) -> None:
    """The last counted run of each variant: every series it reported (one per tenant), over time."""
    mine = [r for r in runs if r.get("scenario") == s.scenario and r.get("series")]
    last: dict[str, dict] = {}
    for r in sorted(mine, key=lambda r: r.get("index", 0)):
        last[r.get("variant", "")] = r["series"]
    series_lines(v, last)


def series_lines(v: RateView, last: dict[str, dict]) -> None:
    """variant -> {name: {step_s, unit, values}} as polylines over time (one per process: per tenant)."""
    curves = []
    for variant in ("bare", "baseline", "patched", "layer"):
        series = last.get(variant)
        if not series:
            continue
        for k, (name, ser) in enumerate(sorted(series.items())):
            vals = [float(x) for x in ser.get("values", [])]
            if vals:
                curves.append((variant, name, float(ser.get("step_s", 1.0)), vals, k))
                v.series_unit = ser.get("unit", v.series_unit)
    if not curves:
        return
    t_max = max(step * len(vals) for _, _, step, vals, _ in curves)
    y_max = max(max(vals) for *_, vals, _ in curves) * 1.1 or 1.0
    span_x, span_y = v.width - PAD_L - PAD_R, v.series_height - PAD_T - PAD_B

    def px(t: float) -> float:
        return round(PAD_L + t / t_max * span_x, 1)

    def py(y: float) -> float:
        return round(PAD_T + span_y - y / y_max * span_y, 1)

    for variant, name, step, vals, k in curves:
        pts = " ".join(f"{px((i + 0.5) * step)},{py(y)}" for i, y in enumerate(vals))
        v.lines.append(Line(f"{variant}: {name}", CSS.get(variant, ""), pts, dash="" if k == 0 else "5,3"))
    v.x_ticks = [(px(t), f"{t:g} s") for t in _nice_ticks(0, t_max)]
    v.y_ticks = [(py(y), f"{y:g}") for y in _nice_ticks(0, y_max)]


def rate_views(ev: Evidence) -> list[RateView]:
    out = []
    for s in ev.scenarios:
        m = s.extra.get("measure")
        if not m:
            continue
        v = RateView(scenario=s.scenario, verdict=s.verdict, reason=s.reason, summary=summary(s),
                     unit=m.get("unit", ""), bound=bound_text(m))
        _interval_plot(v, m)
        _series_plot(v, s, ev.runs)
        out.append(v)
    return out


def rate_rows(ev: Evidence) -> list[dict]:
    """The PR body's table of rates: one row per variant of each quantitative scenario."""
    rows = []
    for s in ev.scenarios:
        m = s.extra.get("measure")
        if not m or "baseline" not in m:
            continue
        for variant in ("baseline", "patched"):
            iv = m[variant]
            rows.append({"scenario": s.scenario, "variant": variant,
                         "rate": f"{iv['estimate']:.3g}" + (f" x {m['per']}" if m.get("per") else f" {m.get('unit', '')}"),
                         "interval": f"[{iv['low']:.3g}, {iv['high']:.3g}] ({100 * iv['confidence']:.3g} %)",
                         "bound": bound_text(m), "rounds": str(iv["n"]), "verdict": s.verdict})
    return rows


RATE_COLUMNS = ["scenario", "variant", "rate", "interval", "bound", "rounds", "verdict"]


def bench_views(doc: dict) -> list[RateView]:
    """One RateView per configuration of a `lucepatch bench` document: the layer's interval against what
    the configuration should give, and the rate over time of bare and the layer."""
    out = []
    for c in doc.get("configs", []):
        m = {**c["measure"], "layer": c.get("interval")}
        v = RateView(scenario=c["name"], verdict=c["answer"], reason=c["why"], summary=f"{c['name']}: {c['why']}",
                     unit=m.get("unit", ""), bound=bound_text(m))
        _interval_plot(v, m, names=("layer",))
        series_lines(v, c.get("series") or {})
        out.append(v)
    return out
