"""The retirement report (schema 2 of `lucepatch-retire`, lucepatch/data/retire.schema.json): what
the rule (upstream/retire.py) decided, as the document `verify --retire` prints and saves, the
table and the review lines people read, the exit code, where a report is kept (by the target's
content, the commit and the reproducers it used) and how a kept report answers later questions
(`status --behaviour`, a rebase session's `needed`). The rule writes it; nothing here decides."""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path

from lucepatch.engine import retirement
from lucepatch.files import data_schema
from lucepatch.series import Patch
from lucepatch.target import Target
from lucepatch.upstream.behaviour import made_worse
from lucepatch.verify.reproducer import Reproducer, load_reproducer_dir

SCHEMA_VERSION = 2
KIND = "lucepatch-retire"
MIN_RUNS = 10

SUPERSEDED = retirement.SUPERSEDED
RETIRE_CANDIDATE = retirement.RETIRE_CANDIDATE
STILL_NEEDED = "still-needed"
NO_LONGER_EFFECTIVE = "no-longer-effective"
REGRESSION = "regression"
CONFLICT = "conflict"
UNTESTABLE = "untestable"
INCONCLUSIVE = "inconclusive"
NOT_JUDGED = "not-judged"
# still needed, and without it REF crashes or hangs where the base without it gave a wrong value:
# upstream made the bug worse (issue 36: 52f33fc's pool allocation from a context-less thread)
WORSE_UPSTREAM = "worse-upstream"
STATUSES = (SUPERSEDED, RETIRE_CANDIDATE, STILL_NEEDED, WORSE_UPSTREAM, NO_LONGER_EFFECTIVE, REGRESSION, CONFLICT,
            UNTESTABLE, INCONCLUSIVE, NOT_JUDGED)
NEEDED = {SUPERSEDED: "superseded", RETIRE_CANDIDATE: "retire-candidate", STILL_NEEDED: "still-needed",
          WORSE_UPSTREAM: "still-needed", NO_LONGER_EFFECTIVE: "still-needed", REGRESSION: "inconclusive",
          CONFLICT: "conflict", UNTESTABLE: "untestable", INCONCLUSIVE: "inconclusive", NOT_JUDGED: "not-judged"}
# how the table names a status (a candidate is not a verdict: a person reads the code first)
SHOWN = {RETIRE_CANDIDATE: "retire-candidate (needs review)", WORSE_UPSTREAM: "still-needed (upstream made it worse)"}
# the report's schema is data (lucepatch/data/retire.schema.json), read by show too without this rule;
# tests/test_retire_schema_data.py keeps its enums equal to the constants above
RETIRE_SCHEMA = data_schema("retire")


# ---- the reproducers a target's reports are judged with ----------------------------------------


def reproducers_dir(target: Target, workspace=None, directory: Path | None = None) -> Path:
    if directory is not None:
        return Path(directory)
    if workspace is not None:
        return Path(workspace.reproducers_dir)
    return target.dir.resolve().parent.parent / "reproducers"  # patches/<target>/ sits beside reproducers/


def target_reproducers(target: Target, workspace=None, directory: Path | None = None) -> list[Reproducer]:
    d = reproducers_dir(target, workspace, directory)
    if not d.is_dir():
        return []
    # a line of a series (hami-core-v2.9) shares its family's reproducers (written for hami-core)
    return [r for r in (load_reproducer_dir(p) for p in sorted(d.iterdir()) if (p / "reproducer.toml").is_file())
            if r.target in (target.name, target.family)]


# ---- the document -------------------------------------------------------------------------------


def _row(p: Patch, status: str, reason: str, applies: bool, scen: list[str], details: list, code,
         scenario: str | None = None, unreached: list[str] | None = None) -> dict:
    # `textual` is the code signal under its old name (reports before issue 26 had it, information only)
    return {"name": p.name, "subject": p.subject, "patch_id": p.patch_id, "build_only": p.build_only,
            "status": status, "needed": NEEDED[status], "reason": reason, "scenario": scenario, "applies": applies,
            "judged": scen, "unreached": unreached or [], "scenarios": details, "code_signal": code, "textual": code}


def _doc(target, ref, commit, base, lab, n, rows, still, cov, notes, bare: dict | None = None) -> dict:
    """The document; bare: {"base": Build, "ref": Build} (upstream + Build-Only at each), whose
    common measurements give `made_worse`."""
    ddoc = lab.driver_doc()
    summary = {s: sum(1 for p in rows if p["status"] == s) for s in STATUSES}
    return {
        "schema_version": SCHEMA_VERSION, "kind": KIND, "target": target.name,
        "series": {"version": target.version, "series_hash": target.series_hash},
        "upstream": {"url": target.upstream, "ref": ref, "commit": commit, "base": base},
        "driver": ddoc, "simulated": ddoc.get("kind") == "fake", "runs": n,
        "rule": "add-one, leave-one-out, positive control at the base, coverage, input sweep, joint check; superseded "
                "only with a code signal (docs/design.md)",
        "invariant": retirement.INVARIANT,
        "reproducers": [{"name": r.name, "hash": r.hash} for r in lab.repros.values()],
        "builds": [b.to_json() for b in lab.builds.values()],
        # every measurement the rule made: what each reason may cite (check_reasons)
        "measured": [{"build_key": k, "scenario": sc, **ob.to_json()} for (k, sc), ob in lab.results.items()],
        "coverage": cov.to_json() if cov else None,
        "patches": rows,
        "superseded": [p["name"] for p in rows if p["status"] == SUPERSEDED],
        "retire_candidates": [p["name"] for p in rows if p["status"] == RETIRE_CANDIDATE],
        "no_longer_effective": [p["name"] for p in rows if p["status"] == NO_LONGER_EFFECTIVE],
        "still_failing": still,
        # scenarios REF + Build-Only crashes or hangs on where the base + Build-Only gave a wrong value
        "made_worse": made_worse_of(lab, bare or {}),
        "notes": notes,
        "summary": {k: v for k, v in summary.items() if v},
    }


def made_worse_of(lab, bare: dict) -> list[dict]:
    """Every scenario measured on both bare builds (`bare`: {"base": Build, "ref": Build}) that REF
    made worse, with both sides' signatures and runs."""
    base, ref = bare.get("base"), bare.get("ref")
    if base is None or ref is None or base is ref:
        return []
    out = []
    for (k, sc), before in sorted(lab.results.items(), key=lambda kv: kv[0][1]):
        if k != lab._id(base):
            continue
        after = lab.results.get((lab._id(ref), sc))
        if after is not None and made_worse(before, after):
            out.append({"scenario": sc, "base": before.to_json(), "ref": after.to_json()})
    return out


def retire_exit_code(doc: dict) -> int:
    """0 when every patch is judged and none has stopped working; 1 when a patch is no longer
    effective, a regression or inconclusive (superseded patches and candidates are news, not failures)."""
    bad = {NO_LONGER_EFFECTIVE, INCONCLUSIVE, REGRESSION}
    return 1 if any(p["status"] in bad for p in doc["patches"]) else 0


def format_retire_table(doc: dict) -> tuple[str, list[str], list[list[str]]]:
    """(title, columns, rows) for report.table: one row per patch, then the still-failing scenarios."""
    up = doc["upstream"]
    title = (f"retire check of {doc['target']} at {up['ref']} ({up['commit'][:12]}, base {up['base'][:12]}) — driver "
             f"{doc['driver'].get('kind')}{' (simulated)' if doc.get('simulated') else ''}, {doc['runs']} runs per side")
    rows = []
    for p in doc["patches"]:
        code = p.get("code_signal", p.get("textual"))
        sig = f" [code: {code['signal']}]" if code and p["status"] != SUPERSEDED else ""
        # `conflict` already says it does not apply (one name per state: engine/absorption.py)
        apart = "" if p["applies"] or p["status"] == CONFLICT else " (does not apply)"
        rows.append([p["name"], SHOWN.get(p["status"], p["status"]) + apart,
                     p.get("scenario") or "", p["reason"] + sig])
    for s in doc.get("still_failing", []):
        rows.append(["(no patch)", "still failing", s["scenario"], f"{s['behaviour']} on {s['build']}"])
    for w in doc.get("made_worse", []):  # both sides' signatures, measured on upstream + Build-Only
        rows.append(["(upstream)", "made worse", w["scenario"], f"{w['base']['summary']} on {w['base']['build']} -> "
                                                                f"{w['ref']['summary']} on {w['ref']['build']}"])
    return title, ["patch", "status", "decided by", "why"], rows


def review_lines(doc: dict) -> list[str]:
    """For each retire-candidate, what its reviewer reads (the whole material is in the report's
    `review`): the hunks, REF's version of the functions they touch, the runs."""
    out = []
    for p in doc["patches"]:
        rv = p.get("review")
        if p["status"] != RETIRE_CANDIDATE or not rv:
            continue
        fns = [f"{f['file']} ({f['text'].splitlines()[0][:60]} …)" if "text" in f else f"{f['file']}: {f['missing']}"
               for f in rv["ref_functions"]]
        out.append(f"{p['name']}: retire-candidate (needs review) — {rv['question']}")
        hunks = ", ".join(f"{h['file']}:{h['line']} {h['header']}".strip() for h in rv["hunks"])
        out.append(f"  its hunks: {hunks}")
        out.append(f"  {doc['upstream']['commit'][:12]}'s version: {'; '.join(fns) or 'none found'}")
        out.append(f"  runs: {len(rv['runs'])} comparison(s), e.g. "
                   + "; ".join(f"{r['scenario']} {r['pair']}: {r['with']}" for r in rv["runs"][:2]))
    return out


# ---- a kept report: where it is, what it answers ------------------------------------------------


def _upstream_has(doc: dict, row: dict) -> bool:
    """The one judgement, for a recorded row: superseded with a code signal, under the invariant."""
    return retirement.accepts(row["status"], row.get("code_signal"), doc.get("invariant"))


def report_hook(doc: dict):
    """A behaviour hook (engine.upstreamed) answering from one retire report: `status --behaviour`."""
    by = {p["name"]: p for p in doc["patches"]}

    def retirement_rule(target, patch, source, ref):
        row = by.get(patch.name)
        if row is None or ref != doc["upstream"]["commit"]:
            return None
        return True if _upstream_has(doc, row) else False if row["needed"] == "still-needed" else None

    def code_signal(patch, ref):
        row = by.get(patch.name)
        ok = row is not None and ref == doc["upstream"]["commit"] and _upstream_has(doc, row)
        return row["code_signal"] if ok else None

    retirement_rule.detail = lambda patch, ref: f"superseded at {ref[:12]}: {by[patch.name]['reason']}"[:300]
    retirement_rule.code_signal = code_signal
    return retirement_rule


def content_key(target: Target, commit: str) -> str:
    """Where a target's reports at `commit` are kept: its content (target.toml and the patches, the
    series hash) and the commit — never a path, so a rebase session's staged copy finds them."""
    doc = {"series": target.series_hash, "commit": commit}
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:24]


def _reproducers_key(used: list[dict]) -> str:
    doc = sorted((r["name"], r["hash"]) for r in used)
    return hashlib.sha256(json.dumps(doc).encode()).hexdigest()[:24]


def save_report(doc: dict, target: Target, cache: Path, workspace=None) -> Path:
    """Keep the report where a rebase session's judge and status --behaviour find it: under the
    target's content and commit, one file per set of reproducers (with their hashes) it used."""
    path = (Path(cache) / "retire" / content_key(target, doc["upstream"]["commit"])
            / f"{_reproducers_key(doc.get('reproducers', []))}.json")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(doc, indent=2) + "\n")
    tmp.replace(path)
    return path


def load_saved(target: Target, commit: str, cache: Path, workspace=None, *,
               reproducers: Path | None = None) -> dict | None:
    """The saved report for this target's content at `commit` whose reproducers are all unchanged in
    the workspace (`reproducers`: their folder; default the workspace's), the one judged with the
    most of them; None when there is none."""
    current = {r.name: r.hash for r in target_reproducers(target, workspace, reproducers)}
    best, size = None, -1
    for f in sorted((Path(cache) / "retire" / content_key(target, commit)).glob("*.json")):
        try:
            doc = json.loads(f.read_text())
        except (OSError, ValueError):
            continue  # a torn or foreign file is no report
        used = {r["name"]: r["hash"] for r in doc.get("reproducers", [])}
        if not used or any(current.get(n) != h for n, h in used.items()):
            continue  # made with reproducers that changed since (or are gone): not this judgement
        if len(used) > size:
            best, size = doc, len(used)
    return best


# ---- the invariant: every reason names runs the report holds -------------------------------------

# a clause that says what was *not* measured names an absence, not runs
_ABSENCE = ("not measured", "not measurable", "not built", "not judged", "no coverage map", "has no complete run",
            "no selected scenario", "reached by no scenario", "no reproducer", "no scenario reaches it",
            "nothing measured", "does not build")
_HEX12 = re.compile(r"\b[0-9a-f]{12}\b")


def _clauses(reason: str) -> list[str]:
    return [c for c in re.split(r"; | — |\(|\)", reason) if c.strip()]


def check_reasons(doc: dict) -> list[str]:
    """Where a report breaks the invariant "every reason names runs that exist in its evidence"
    (docs/design.md "Retirement"): each clause of a reason that names a build, a scenario, REF or the
    base, or another upstream commit must be backed by runs the report holds — `measured` (every
    (build, scenario) the rule ran, runs > 0 on a build that was made), a bisect's probes for the
    commit it names. A clause that says what was not measured names an absence and is not checked.
    Returns one line per violation (empty: the report keeps the invariant)."""
    builds = {b["name"]: b for b in doc.get("builds", [])}
    by_key: dict[str, set[str]] = {}
    key_of = {n: (b.get("build_key") or f"unbuilt:{n}") for n, b in builds.items()}
    commit_of = {n: (b.get("ref") or b.get("commit") or "") for n, b in builds.items()}  # the upstream commit
    for m in doc.get("measured", []):
        if m.get("runs", 0) > 0 and m.get("state") != "not-built":
            by_key.setdefault(m["build_key"], set()).add(m["scenario"])
    scenarios = {m["scenario"] for m in doc.get("measured", [])}
    for row in doc.get("patches", []):
        scenarios |= set(row.get("judged") or [])
        scenarios |= {d["scenario"] for d in row.get("scenarios") or [] if d.get("scenario")}
    ref, base = doc["upstream"]["commit"], doc["upstream"]["base"]
    names = sorted(builds, key=len, reverse=True)
    keys = sorted(scenarios, key=len, reverse=True)
    repros = {r["name"] for r in doc.get("reproducers", [])} | {k.split(":", 1)[0] for k in scenarios}
    # any `<reproducer>:<scenario>` the text names, known to the report or not
    mention = re.compile(rf"(?<![\w/.-])(?:{'|'.join(map(re.escape, sorted(repros, key=len, reverse=True)))}):[\w.-]+"
                         rf"(?:@[\w.=-]+)?") if repros else None
    out = []

    def measured_on(build: str) -> set[str]:
        return by_key.get(key_of.get(build, ""), set())

    def at(commit: str, scenario: str) -> bool:
        return any(scenario in measured_on(n) for n in builds if commit_of[n].startswith(commit[:12]))

    for row in doc.get("patches", []):
        probes = {p.get("commit", "")[:12]: p for p in (row.get("applied_upstream") or {}).get("probes") or []}
        if row.get("reason", "").startswith("not measured:"):
            continue  # the whole reason says what was not measured (and why: a build's own error text)
        for clause in _clauses(row.get("reason", "")):
            if any(a in clause for a in _ABSENCE):
                continue
            rest, named = clause, []
            for n in names:
                if n in rest:
                    named.append(n)
                    rest = rest.replace(n, " ")
            said = []
            for k in keys:
                if re.search(rf"(?<![\w:.-]){re.escape(k)}(?![\w-])", rest):
                    said.append(k)
                    rest = rest.replace(k, " ")
            for m in (mention.findall(rest) if mention else []):
                said.append(m.rstrip("."))
                rest = rest.replace(m, " ")
            for n in named:
                if not measured_on(n):
                    out.append(f"{row['name']}: names build {n}, which has no runs in the report: {clause.strip()!r}")
            commits = set()
            if re.search(r"\bREF\b", rest) or ref[:12] in rest:
                commits.add(ref)
            if base != ref and (base[:12] in rest or "the base" in rest):
                commits.add(base)
            for k in said:
                if not any(k in v for v in by_key.values()):
                    out.append(f"{row['name']}: names {k}, which never ran in the report: {clause.strip()!r}")
                    continue
                for c in commits:
                    if not at(c, k):
                        out.append(f"{row['name']}: says how {c[:12]} behaves on {k} with no run of it there: "
                                   f"{clause.strip()!r}")
            for h in set(_HEX12.findall(rest)) - {ref[:12], base[:12]}:
                p = probes.get(h)
                if p is None or not (p.get("scenarios") or p.get("runs")):
                    out.append(f"{row['name']}: names upstream commit {h} with no probe of it in the report: "
                               f"{clause.strip()!r}")
    for s in doc.get("still_failing", []):
        if s["scenario"] not in measured_on(s["build"]):
            out.append(f"still failing {s['scenario']} on {s['build']}: no runs of it in the report")
    for w in doc.get("made_worse", []):
        for side in ("base", "ref"):
            if w["scenario"] not in measured_on(w[side]["build"]):
                out.append(f"made worse {w['scenario']}: no runs of it on {w[side]['build']} in the report")
    return out
