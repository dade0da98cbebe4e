"""The view of one evidence document: what `verify` prints, what `show` prints and writes as HTML,
and what the PR body's per-run strip is made of. Pure data, built only from the typed Evidence
(lucepatch/verify/evidence.py) and, for the reproducer source, the workspace.

One glyph per run, the same in the terminal, the HTML page and the PR body (ASCII, so a PR body
renders it anywhere): `+` pass, `X` crash (a signal), `x` fail (a check or a wrong CUresult),
`!` fail-log (exit 0 but the hook logged a bad device id), `T` timeout, `?` invalid (the run could
not prove what it loaded), `-` skipped (the machine cannot run it).
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

from lucepatch.errors import LucepatchError
from lucepatch.show import rates, server
from lucepatch.verify.evidence import Evidence, ScenarioResult, Tally
from lucepatch.verify.reproducer import load_reproducer
from lucepatch.verify.rules import fmt_theta


@dataclass(frozen=True)
class Glyph:
    char: str
    label: str
    style: str  # rich style
    css: str  # class in the HTML page


GLYPHS: dict[str, Glyph] = {
    "pass": Glyph("+", "pass", "green", "pass"),
    "crash": Glyph("X", "crash (signal)", "bold red", "crash"),
    "fail": Glyph("x", "fail (check / CUresult)", "red", "fail"),
    "fail-log": Glyph("!", "fail (bad device id logged)", "yellow", "faillog"),
    "timeout": Glyph("T", "timeout", "magenta", "timeout"),
    "invalid": Glyph("?", "invalid (could not prove what ran)", "bold yellow", "invalid"),
    "skipped": Glyph("-", "skipped (cannot run here)", "dim", "skipped"),
}
UNKNOWN = Glyph("*", "other", "white", "other")
VARIANTS = ("baseline", "patched")


def glyph(outcome: str) -> Glyph:
    return GLYPHS.get(outcome, UNKNOWN)


@dataclass
class RunMark:
    index: int
    outcome: str
    reason: str = ""

    @property
    def glyph(self) -> Glyph:
        return glyph(self.outcome)


@dataclass
class Strip:
    """The runs of one scenario on one variant, in launch order (`ordered`) — or, for evidence
    that kept only the tallies (old combined evidence), grouped by outcome."""
    scenario: str
    variant: str
    marks: list[RunMark]
    ordered: bool = True

    @property
    def text(self) -> str:
        return "".join(m.glyph.char for m in self.marks)

    def summary(self) -> str:
        c = Counter(m.outcome for m in self.marks)
        return ", ".join(f"{n} {o}" for o, n in sorted(c.items(), key=lambda kv: (-kv[1], kv[0])))


@dataclass
class Row:
    scenario: str  # reproducer:scenario, as in the evidence
    name: str  # the scenario without its reproducer prefix (tables group rows by reproducer instead)
    reproducer: str
    control: bool
    guard: bool
    verdict: str
    baseline: Tally
    patched: Tally
    p_value: float | None
    reason: str  # the full text, as in the evidence
    short: str  # the short reason an 80-column table has room for
    description: str = ""
    rate: ScenarioResult | None = None  # a quantitative scenario: its cells are the measured rates

    def frac(self, variant: str) -> str:
        if self.rate is not None:
            return rates.cell(self.rate, variant)
        t = self.baseline if variant == "baseline" else self.patched
        return f"{t.failures}/{t.runs}"

    @property
    def p_text(self) -> str:
        return "" if self.p_value is None else f"{self.p_value:.2g}"


@dataclass
class View:
    target: str
    version: str
    verdict: str
    simulated: bool
    driver: dict  # kind, gpu, driver (display strings)
    reproducers: list[dict]  # name, hash, sources [{path, text}], current (bool | None)
    rows: list[Row]
    strips: dict[str, dict[str, Strip]]  # scenario -> variant -> Strip
    provenance: list[tuple[str, str]]
    variants: dict[str, dict]  # baseline/patched: from, commit, base, patches, artifact, sha256, build_key
    first_errors: list[dict]  # scenario, variant, text
    fingerprints: list[dict]  # scenario, summary, issue, url, title
    run_policy: dict
    created: str = ""
    notes: list[str] = field(default_factory=list)
    rates: list = field(default_factory=list)  # show.rates.RateView per quantitative scenario
    server: server.ServerView | None = None  # a server reproducer's evidence: runs, charge, limit per variant

    @property
    def title(self) -> str:
        names = [r["name"] for r in self.reproducers]
        what = ", ".join(names) if len(names) <= 2 else f"{len(names)} reproducers"
        return f"{what} on {self.target} {self.version}"

    @property
    def grouped(self) -> bool:
        """More than one reproducer: tables show a heading row per reproducer, names without prefix."""
        return len({r.reproducer for r in self.rows}) > 1

    def groups(self) -> list[tuple[str, list[Row]]]:
        out: list[tuple[str, list[Row]]] = []
        for r in self.rows:
            if not out or out[-1][0] != r.reproducer:
                out.append((r.reproducer, []))
            out[-1][1].append(r)
        return out

    @property
    def glyph_count(self) -> int:
        return sum(len(s.marks) for per in self.strips.values() for s in per.values())

    def strip_block(self) -> str:
        """The compact per-run strip for a PR body: one line per scenario, both variants, in a code block."""
        width = max([len(r.scenario) for r in self.rows] + [8])
        runs = max([len(s.marks) for per in self.strips.values() for s in per.values()] + [8])
        lines = [f"{'scenario':<{width}}  {'baseline':<{runs}}  patched"]
        for r in self.rows:
            b, p = (self.strips[r.scenario][v].text or "(none)" for v in VARIANTS)
            lines.append(f"{r.scenario:<{width}}  {b:<{runs}}  {p}".rstrip())
        return "\n".join(lines)

    def legend_text(self) -> str:
        seen = {m.outcome for per in self.strips.values() for s in per.values() for m in s.marks}
        return ", ".join(f"{g.char} {g.label}" for o, g in GLYPHS.items() if o in seen)  # plain: it goes in <summary>

    def to_json(self) -> dict:
        out = asdict(self)
        out["strips"] = {sc: {v: {"text": s.text, "ordered": s.ordered, "runs": len(s.marks)} for v, s in per.items()}
                         for sc, per in self.strips.items()}
        out["provenance"] = [{"what": k, "value": v} for k, v in self.provenance]
        for r in out["reproducers"]:
            r.pop("sources", None)
        for r in out["rows"]:
            r.pop("rate", None)
        out["rates"] = [{"scenario": v.scenario, "summary": v.summary} for v in self.rates]
        return out


# ---- pieces ------------------------------------------------------------------------------------

def driver_display(doc: "Evidence | dict") -> dict:
    """GPU and driver as a reviewer reads them: '580.159.04 (CUDA 13.0)', never from a flag."""
    drv = (doc.driver if isinstance(doc, Evidence) else doc.get("driver")) or {}
    kind = drv.get("kind")
    api = drv.get("version")
    cuda = f"CUDA {api // 1000}.{(api % 1000) // 10}" if isinstance(api, int) and api > 0 else "CUDA ?"
    path = (drv.get("libcuda") or {}).get("path") or ""
    m = re.search(r"libcuda\.so\.(\d+\.\d+(?:\.\d+)?)", path)
    if kind == "real":
        version = f"{m.group(1)} ({cuda})" if m else cuda
    else:
        version = f"simulated ({cuda})"
    return {"kind": kind, "gpu": drv.get("gpu") or "unknown", "driver": version}


def split_name(scenario: str) -> tuple[str, str]:
    """`reproducer:scenario` -> (reproducer, scenario); a bare name has no reproducer."""
    rep, sep, name = scenario.partition(":")
    return (rep, name) if sep else ("", scenario)


def _words(text: str, n: int) -> str:
    """The whole words of `text` that fit in `n` characters (never a cut word, never "…")."""
    out = ""
    for w in text.split():
        if len(out) + bool(out) + len(w) > n:
            break
        out = f"{out} {w}" if out else w
    return out or text[:n]


def short_reason(s: ScenarioResult) -> str:
    """Why, in a few words, from the tallies (the full text stays in `reason` and the evidence)."""
    b, p, v = s.baseline, s.patched, s.verdict
    if s.extra.get("measure") and v not in ("skipped", "invalid", "not-applicable"):
        return rates.short(s)
    if v in ("pass", "proven"):
        return ""
    if v == "guarded":
        return "passes on both"
    if v == "skipped":  # the first thing it needs, in whole words; the table prints the full reason under it
        first = re.split(r" \(|[;,] ", re.sub(r"^not run on this machine:\s*", "", s.reason), maxsplit=1)[0]
        return _words(first, 28)
    if v == "not-applicable":  # the target's sentence is long: it prints whole under the table
        return "by target.toml"
    if v == "invalid":
        if s.reason.startswith("cannot load: "):  # the loader's line is the whole story: keep it
            return s.reason.split(" (cause:", 1)[0]
        if s.control:
            return "control failed"
        if b.invalid or p.invalid:
            return f"{b.invalid + p.invalid} run(s) invalid"
        if b.skipped or p.skipped:
            return "some runs skipped"
        return "a control failed"
    if v == "regression":
        return "patched fails, baseline passes"
    if v == "worse":  # the two sides' outcomes print whole in the reason under the table
        return "crash where baseline: wrong value" if p.outcomes.get("crash") else "hang where baseline: wrong value"
    if v == "not-proven":
        if p.failures:
            return f"patched still fails {p.failures}/{p.runs}"
        if not b.failures:
            return "baseline never failed"
        # the verdict rule's hint when --runs could never reach p < alpha (lucepatch/verify/rules.py)
        m = re.search(r"proven needs (--runs \d+) or more", s.reason)
        return f"needs {m.group(1)} or more" if m else "too few baseline failures"
    return _words(s.reason, 28)


def _strip_from_tally(scenario: str, variant: str, t: Tally) -> Strip:
    marks, i = [], 0
    for outcome, n in sorted((t.outcomes or {}).items(), key=lambda kv: (kv[0] != "pass", kv[0])):
        for _ in range(int(n)):
            marks.append(RunMark(i, outcome))
            i += 1
    return Strip(scenario, variant, marks, ordered=False)


def _reproducer_sources(workspace, reproducers: dict | None, name: str,
                        recorded_hash: str) -> tuple[list[dict], bool | None]:
    rep = (reproducers or {}).get(name)
    if rep is None and workspace is not None:
        try:
            rep = load_reproducer(workspace, name)
        except LucepatchError:  # unknown or broken reproducer folder: no source to show
            rep = None
    if rep is None:
        return [], None
    sources = []
    for src in rep.sources:
        p = Path(rep.dir) / src
        try:
            sources.append({"path": f"reproducers/{name}/{src}", "text": p.read_text(encoding="utf-8", errors="replace")})
        except OSError:
            continue
    return sources, rep.hash == recorded_hash


# ---- the view ----------------------------------------------------------------------------------

def build_view(ev: Evidence, workspace=None, reproducers: dict | None = None) -> View:
    """The view of `ev`; the reproducer source comes from `reproducers` (name -> Reproducer) or the
    workspace, and is flagged when its hash is not the one the evidence recorded."""
    rows = [Row(scenario=s.scenario, reproducer=split_name(s.scenario)[0],
                name=split_name(s.scenario)[1] + (" (control)" if s.control and split_name(s.scenario)[1] != "control" else ""),
                control=s.control, guard=bool(s.regression_guard), verdict=s.verdict, baseline=s.baseline,
                patched=s.patched, p_value=s.p_value, reason=s.reason, short=short_reason(s),
                description=s.description or "", rate=s if s.extra.get("measure") else None) for s in ev.scenarios]

    by: dict[tuple[str, str], list[RunMark]] = {}
    for r in ev.runs:
        by.setdefault((r.get("scenario", ""), r.get("variant", "")), []).append(
            RunMark(int(r.get("index", 0)), r.get("outcome", ""), r.get("reason") or r.get("first_error") or ""))
    strips: dict[str, dict[str, Strip]] = {}
    notes = []
    for s in ev.scenarios:
        strips[s.scenario] = {}
        for v in VARIANTS:
            marks = sorted(by.get((s.scenario, v), []), key=lambda m: m.index)
            tally = s.baseline if v == "baseline" else s.patched
            if marks or not tally.runs:
                strips[s.scenario][v] = Strip(s.scenario, v, marks)
            else:
                strips[s.scenario][v] = _strip_from_tally(s.scenario, v, tally)
    if any(not st.ordered for per in strips.values() for st in per.values()):
        notes.append("this evidence kept only the tallies of some scenarios: their runs are shown grouped by "
                     "outcome, not in launch order")

    d = driver_display(ev)
    variants = {}
    for v in VARIANTS:
        vi = ev.variants.get(v)
        if vi is None:
            continue
        variants[v] = {"from": vi.source or "", "commit": vi.commit or "", "base": vi.base or "",
                       "ref": vi.ref or "", "patches": list(vi.patches or []), "artifact": vi.artifact.path,
                       "sha256": vi.artifact.sha256 or "", "build_key": vi.build_key or ""}
    drv = ev.driver or {}
    libcuda = drv.get("libcuda") or {}
    host = (ev.tool or {}).get("host") or {}
    ex = ev.execution or {}
    rp = ev.run_policy.to_json()
    prov: list[tuple[str, str]] = [
        ("target", f"{ev.target} series {ev.series.version} (series_hash {ev.series.series_hash[:12]}, "
                   f"{len(ev.series.patch_ids)} patches)"),
        ("upstream", f"{ev.upstream.get('url', '')} at {str(ev.upstream.get('base', ''))[:12]}"),
    ]
    for v, info in variants.items():
        what = info["from"] or "?"
        built = f"built from {info['commit'][:12]}" if info["commit"] else ""
        base = f"on {info['base'][:12]}" if info["base"] else (f"ref {info['ref']}" if info["ref"] else "")
        patches = f"+ {len(info['patches'])} patch(es)" if info["patches"] else ""
        prov.append((v, " ".join(x for x in (what + ":", built, base, patches) if x)))
        # whole: `deploy --lib` and `node --lib` take the path, a reviewer compares the sha256
        prov.append((f"{v} artifact", info["artifact"] + (f" (build key {info['build_key']})" if info["build_key"] else "")))
        prov.append((f"{v} sha256", info["sha256"] or "unknown"))
    prov += [
        ("driver", f"{d['kind']}{' (simulated: not GPU evidence)' if ev.simulated else ''} — {d['gpu']}, "
                   f"driver {d['driver']}" + (f", {drv['device_count']} device(s)" if drv.get("device_count") else "")),
        ("libcuda", f"{libcuda.get('path', '')} sha256 {libcuda.get('sha256') or ''}".strip()),
        ("runs", f"{rp.get('rule')} rule, up to {rp.get('max_runs')} per variant and scenario, alpha {rp.get('alpha')}"
                 + (f", theta {rp['theta']}" if rp.get("theta") is not None else "")
                 + (f"; {ex.get('processes')} processes in {ex.get('wall_s')} s, {ex.get('mode')}" if ex.get("processes") else "")),
        # the rule's own error, by exact enumeration (the PR body points here for it)
        ("error bounds", "" if not rp.get("bounds") else
         f"P(proven | no effect) ≤ {rp['bounds']['proven_if_no_effect']:.2g}, P(proven | patched failure rate ≥ "
         f"{fmt_theta(rp['bounds']['theta'])}) ≤ {rp['bounds']['proven_if_patched_rate_at_least_theta']:.2g}"),
        ("patched bounds", "; ".join(
            f"{s.scenario} {s.patched.failures}/{s.patched.runs} ⇒ failure rate < {fmt_theta(s.theta)} at "
            f"{100 * (1 - rp.get('alpha', 0.01)):g} %" for s in ev.scenarios
            if not s.control and getattr(s, "theta", None) is not None and s.verdict in ("proven", "guarded"))),
        ("host", ", ".join(f"{k} {host[k]}" for k in ("hostname", "machine", "kernel", "cpus") if host.get(k))),
        ("taken", f"{(ev.tool or {}).get('created', '')} by lucepatch {(ev.tool or {}).get('lucepatch', '')}".strip()),
    ]
    combined = ev.extra.get("combined_from") or []
    if combined:
        prov.append(("combined", f"{len(combined)} verify runs; each scenario keeps the driver and builds it ran on"))
    prov = [(k, v) for k, v in prov if v and v.strip(" —:")]

    first_errors = []
    for s in ev.scenarios:
        for v in VARIANTS:
            t = s.baseline if v == "baseline" else s.patched
            if t.first_error:
                first_errors.append({"scenario": s.scenario, "variant": v, "text": t.first_error})
    fingerprints = [{"scenario": s.scenario, "summary": s.fingerprint.get("summary", ""),
                     "issue": s.fingerprint.get("issue") or "", "url": s.fingerprint.get("url") or "",
                     "title": s.fingerprint.get("title") or ""} for s in ev.scenarios if s.fingerprint]
    reps = []
    for r in ev.reproducers:
        sources, current = _reproducer_sources(workspace, reproducers, r["name"], r.get("hash", ""))
        reps.append({"name": r["name"], "hash": r.get("hash", ""), "sources": sources, "current": current})
    return View(target=ev.target, version=ev.series.version, verdict=ev.verdict, simulated=bool(ev.simulated),
                driver=d, reproducers=reps, rows=rows, strips=strips, provenance=prov, variants=variants,
                first_errors=first_errors, fingerprints=fingerprints, run_policy=rp,
                created=(ev.tool or {}).get("created", ""), notes=notes, rates=rates.rate_views(ev),
                server=server.server_view(ev))
