"""The "real clients" table: what the software people run (PyTorch, NCCL, vLLM's patterns) did
under HAMi-core, read from workload-reproducer evidence (kind = "workload").

Used by the HAMi-core PR body (`lucepatch pr --real-clients FILE`) and docs/evidence.md
(`lucepatch render real-clients --evidence FILE...`). Each evidence file keeps its own pair of
variants: a ref-vs-ref run (e3c3477 vs the pin) and a pin-vs-series run sit in one table, each
row naming the commits it compared. Only evidence that ran on the real driver is accepted: a
simulated driver cannot run PyTorch, and the table claims hardware results.
"""

from __future__ import annotations

from pathlib import Path

from lucepatch.errors import CheckFailed
from lucepatch.render import render
from lucepatch.show.model import driver_display
from lucepatch.verify.evidence import read_evidence_json, staleness

COLUMNS = ["client pattern", "baseline", "patched", "baseline result", "patched result", "verdict", "GPU, driver"]


def _side(doc: dict, variant: str) -> str:
    """The upstream commit a side ran, as a reviewer reads it: `e3c3477`, `8f3a89c` + series."""
    v = doc["variants"].get(variant, {})
    if v.get("from") == "ref":
        return f"`{(v.get('ref') or v.get('base') or '')[:7]}`"
    if v.get("from") == "file":
        return f"file `{(v.get('artifact') or {}).get('sha256', '')[:12]}`"
    base = (v.get("base") or doc["upstream"].get("base") or "")[:7]
    build_only = {p["name"] for p in doc["series"].get("patches", []) if p.get("build_only")}
    fixes = [p for p in v.get("patches", []) if p not in build_only]
    return f"`{base}` + series" if fixes else f"`{base}`"


def _result(tally: dict, runs: list[dict]) -> str:
    """'10/10 crash (SIGSEGV)', '10/10 fail-log: `Illegal device id`', '0/10'."""
    n, fails = tally["runs"], tally["failures"]
    if not n:
        return "—"
    if tally.get("skipped") == n:
        return "skipped"
    if not fails:
        return f"0/{n} failed"
    kinds = {k: v for k, v in (tally.get("outcomes") or {}).items() if k in ("crash", "fail", "fail-log", "timeout")}
    what = ", ".join(f"{v} {k}" for k, v in sorted(kinds.items(), key=lambda kv: -kv[1]))
    sig = next((r.get("signal") for r in runs if r.get("signal")), None)
    err = tally.get("first_error", "")
    line = next((m for m in ("Illegal device id", "cuDeviceGetMemPool failed") if m in err), "")
    out = f"{fails}/{n} failed ({what}{', ' + sig if sig else ''})"
    return out + (f": `{line}`" if line else "")


def rows(docs: list[dict]) -> list[dict]:
    out = []
    for doc in docs:
        kinds = {r["name"]: r.get("kind", "c") for r in doc["reproducers"]}
        drv = doc.get("driver") or {}
        d = driver_display(doc)
        for s in doc["scenarios"]:
            if s.get("control") or kinds.get(s.get("reproducer", s["scenario"].split(":")[0])) != "workload":
                continue
            runs = {v: [r for r in doc["runs"] if r["scenario"] == s["scenario"] and r["variant"] == v]
                    for v in ("baseline", "patched")}
            verdict = s["verdict"]
            if verdict == "skipped":
                verdict = f"skipped: {s.get('reason', '').removeprefix('not run on this machine: ')}"
            fp = (s.get("fingerprint") or {}).get("issue")
            out.append({
                # the reproducer stays in the name: ctypes-clients and torch-clients share pattern names
                "client pattern": f"`{s['scenario']}`",
                "baseline": _side(doc, "baseline"), "patched": _side(doc, "patched"),
                "baseline result": _result(s["baseline"], runs["baseline"]) + (f" — matches {fp}" if fp else ""),
                "patched result": _result(s["patched"], runs["patched"]),
                "verdict": verdict, "GPU, driver": f"{d['gpu']}, {d['driver']}" if drv else "",
            })
    return out


def load(paths: list[Path], *, target: str, repro_hashes: dict[str, str]) -> list[dict]:
    """The real-client evidence files, checked: this target, the real driver, workload reproducers,
    reproducers unchanged since the run."""
    docs = []
    for p in paths:
        doc = read_evidence_json(p)
        if doc["target"] != target:
            raise CheckFailed(f"{p}: evidence for target {doc['target']!r}, not {target}")
        if (doc.get("driver") or {}).get("kind") != "real":
            raise CheckFailed(f"{p}: not real-driver evidence (driver {doc.get('driver', {}).get('kind')}); "
                              "the real-clients table reports hardware runs only")
        if not any(r.get("kind") == "workload" for r in doc["reproducers"]):
            raise CheckFailed(f"{p}: no workload reproducer in this evidence; pass it with --evidence instead")
        why = [w for w in staleness(doc, upstream_commit=doc["upstream"]["base"], patch_ids=doc["series"]["patch_ids"],
                                    reproducer_hashes=repro_hashes) if "reproducer" in w]
        if why:
            raise CheckFailed(f"{p}: {'; '.join(why)}; re-run it (tools/gpu_session.sh)")
        docs.append(doc)
    return docs


def markdown(docs: list[dict]) -> str:
    return render("pr/_real_clients.md.j2", real_clients=rows(docs), real_clients_columns=COLUMNS,
                  real_clients_sources=[source(d) for d in docs])


def source(doc: dict) -> str:
    names = ", ".join(f"`{r['name']}`" for r in doc["reproducers"])
    policy = doc.get("run_policy") or {}
    n = policy.get("max_runs") or doc["execution"].get("runs_per_variant")
    runs = (f"sequential rule, at most {n} runs per variant" if policy.get("rule") == "sequential"
            else f"{n} runs per variant")
    return f"{names}, {runs} ({doc['tool'].get('created', '')[:10]})"
