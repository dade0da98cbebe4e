"""Prepare an upstream PR: commits on a branch from the upstream ref, the upstream's own checks,
format-patch files with base-commit, a body in the upstream's template with the before/after table
rendered from the evidence, and the GitHub create-PR payload.

Nothing leaves the machine unless `push` is given (then one `git push` of the PR branch).
Revisions: `revise=PREV_DIR` makes v(N+1) of a PR directory, with a range-diff against vN.
"""

from __future__ import annotations

import json
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from lucepatch import __version__, git
from lucepatch.engine import stale
from lucepatch.engine.apply import WorkArea, apply_series
from lucepatch.errors import CheckFailed, UsageError
from lucepatch.render import render
from lucepatch.series import Patch, find_patch
from lucepatch.show import rates as rate_view
from lucepatch.show.model import build_view, driver_display, short_reason
from lucepatch.show.page import html
from lucepatch.target import Target
from lucepatch.upstream import real_clients as rc
from lucepatch.upstream.checks import CheckResult, run_checks
from lucepatch.upstream.conventions import conventions_for, is_placeholder, repo_slug
from lucepatch.upstream.moves import move_rows, split_moves
from lucepatch.upstream.scrub import Scrubber
from lucepatch.engine import layout
from lucepatch.upstream.pr_commits import Sender, finish_commits, name_after_patches, read_messages
from lucepatch.upstream.pr_probes import check_probe_evidence, probe_doc, probe_rows
from lucepatch.verify.combine import combine as combine_evidence
from lucepatch.verify.evidence import Evidence, load_evidence, staleness
from lucepatch.verify.rules import fmt_theta

META = "lucepatch.json"


@dataclass
class PrResult:
    out_dir: Path
    branch: str
    base: str
    head: str
    files: list[Path]
    evidence_used: bool
    revision: int = 1
    checks: list[CheckResult] = field(default_factory=list)
    pushed: str | None = None
    template: str = "generic"
    placeholder_messages: list[str] = field(default_factory=list)  # patches whose commit awaits the submitter's message
    ai_disclosure_given: bool = False

    def to_json(self) -> dict:
        return {"out_dir": str(self.out_dir), "branch": self.branch, "base": self.base, "head": self.head,
                "files": [f.name for f in self.files], "evidence_used": self.evidence_used,
                "revision": self.revision, "template": self.template, "pushed": self.pushed,
                "checks": [c.to_json() for c in self.checks], "placeholder_messages": self.placeholder_messages,
                "ai_disclosure_given": self.ai_disclosure_given}


def pr_patches(target: Target) -> list[Patch]:
    """What a PR to the target's upstream can carry: its series, then the series of each sub-target that
    is a folder of the superproject at the base (layout = "folder": vendored code is upstream's own
    files), re-rooted there and named `<sub-target>/<file>`, as `apply` commits them."""
    out = list(target.patches)
    for sub, st in zip(target.submodules, target.sub_targets()):
        if sub.layout == "folder":
            out += [layout.reroot(p, "", sub.path, name=f"{sub.label}/{p.name}") for p in st.patches]
    return out


def select_patches(target: Target, names: list[str] | None) -> list[Patch]:
    every = pr_patches(target)
    if not names:
        return every
    wanted = {find_patch(every, n, where=f"{target.name}'s series", flag="--patches").name for n in names}
    return [p for p in every if p.name in wanted]  # series order, always


def _body_text(p: Patch) -> str:
    paras = p.body.split("\n\n")
    if p.trailers:
        paras = paras[:-1]
    return "\n\n".join(paras).strip()


def check_evidence(ev: Evidence, target: Target, repro_hashes: dict[str, str], upstream_commit: str | None = None) -> None:
    if ev.target != target.name:
        raise CheckFailed(f"evidence is for target {ev.target!r}, not {target.name}")
    if ev.verdict != "proven":
        raise CheckFailed(f"evidence verdict is {ev.verdict!r}, not proven; re-run lucepatch verify or pass --no-evidence")
    why = staleness(ev.to_json(), upstream_commit=upstream_commit or target.base,
                    patch_ids=[p.patch_id for p in target.patches], reproducer_hashes=repro_hashes)
    if why:
        raise CheckFailed(f"evidence is stale: {'; '.join(why)}; re-run lucepatch verify")


# ---- the before/after table ---------------------------------------------------------------------



def verdict_rows(ev: Evidence) -> list[dict]:
    """The rows of the before/after table, as strings, in the order the body prints them."""
    rows = []
    for s in ev.checked:
        # combined evidence: each scenario carries the driver of the run it came from
        own = s.extra.get("driver")
        d = driver_display({"driver": own} if own else ev)
        if s.verdict in ("skipped", "not-applicable"):  # nothing ran: no counts, only why (a "0/1" reads as a run)
            why = short_reason(s).replace("|", "/")
            rows.append({"scenario": s.scenario, "variant": "", "upstream commit": "", "GPU": d["gpu"],
                         "driver": d["driver"], "runs": "", "failures": "", "failure rate": "", "p-value": "",
                         "verdict": f"{s.verdict} ({why})" if why else s.verdict})
            continue
        for v in ("baseline", "patched"):
            var = ev.variants.get(v)
            commit = (var.base if var is not None else None) or ev.upstream.get("base") or ""
            t = getattr(s, v)
            if s.extra.get("measure"):  # judged on a rate, not on failures: the numbers are in the rates table
                rows.append({"scenario": s.scenario, "variant": v, "upstream commit": commit[:12], "GPU": d["gpu"],
                             "driver": d["driver"], "runs": str(t.runs), "failures": "",
                             "failure rate": "", "p-value": "", "verdict": f"{s.verdict} (a rate: see Rates)"})
                continue
            rows.append({
                "scenario": s.scenario, "variant": v, "upstream commit": commit[:12], "GPU": d["gpu"],
                "driver": d["driver"], "runs": str(t.runs), "failures": str(t.failures),
                "failure rate": f"{t.failure_rate:.2f}",
                "p-value": "" if s.p_value is None else f"{s.p_value:.3g}", "verdict": s.verdict,
            })
    return rows


TABLE_COLUMNS = ["scenario", "variant", "upstream commit", "GPU", "driver", "runs", "failures", "failure rate",
                 "p-value", "verdict"]
# the body's table: one row per scenario, the GPU, driver and commits said once above it (issue 35: a body
# a maintainer reads in two minutes; every run is in evidence.html)
BODY_COLUMNS = ["scenario", "baseline failed", "patched failed", "p-value", "verdict"]


def body_rows(ev: Evidence) -> list[dict]:
    """The body's before/after table: per scenario, failures/runs of each build, p, the verdict."""
    def failed(r: dict) -> str:  # a rate is judged on its rounds, not on failures: see Rates
        return f"{r['failures']}/{r['runs']}" if r["failures"] != "" else f"{r['runs']} runs (a rate)"

    rows = []
    for r in verdict_rows(ev):
        if not r["variant"]:  # skipped / not applicable: nothing ran
            rows.append({"scenario": r["scenario"], "baseline failed": "", "patched failed": "", "p-value": "",
                         "verdict": r["verdict"]})
        elif r["variant"] == "baseline":
            rows.append({"scenario": r["scenario"], "baseline failed": failed(r), "patched failed": "",
                         "p-value": r["p-value"], "verdict": r["verdict"]})
        else:
            rows[-1]["patched failed"] = failed(r)
    return rows


def parse_verdict_table(markdown: str) -> list[dict]:
    """Read the body's before/after table back (tests and `pr --revise` use it)."""
    rows = []
    lines = markdown.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("| scenario | baseline failed |"):
            header = [c.strip() for c in line.strip().strip("|").split("|")]
            for row in lines[i + 2:]:
                if not row.startswith("|"):
                    break
                rows.append(dict(zip(header, [c.strip() for c in row.strip().strip("|").split("|")])))
            break
    return rows


# ---- the PR directory ---------------------------------------------------------------------------

def _bugs(patches: list[Patch]) -> list[str]:
    bugs: list[str] = []
    for p in patches:
        for b in p.trailer_all("Bug"):
            m = re.search(r"github\.com/([^/]+/[^/]+)/(?:issues|pull)/(\d+)", b)
            ref = f"{m.group(1)}#{m.group(2)}" if m else b.strip()
            if ref not in bugs:
                bugs.append(ref)
    return bugs


def _read_previous(prev_dir: Path) -> dict:
    meta = prev_dir / META
    if not meta.is_file() or not (prev_dir / "branch.bundle").is_file():
        raise UsageError(f"--revise {prev_dir}: not a lucepatch PR directory (no {META} / branch.bundle); "
                         "pass the directory an earlier `lucepatch pr` wrote")
    return json.loads(meta.read_text())


def _resolve_remote(source: Path, remote: str) -> str:
    return git.remote_url(source, remote) or remote  # else a URL or a path


@dataclass
class PrOptions:
    """What `lucepatch pr` is asked for (its options: the pr row of the verbs table in docs/design.md)."""
    patch_names: list[str] | None = None  # --patches: a subset, kept in series order
    upstream_ref: str | None = None
    signoff: bool = False
    evidence_path: Path | list[Path] | None = None
    no_evidence: bool = False
    draft: bool = False
    template: str | None = None
    push: str | None = None
    branch: str | None = None
    revise: Path | None = None
    ai_use: str | None = None
    skip_checks: bool = False
    real_clients: list[Path] | None = None
    messages: Path | None = None


@dataclass
class PrContext:
    """What the workspace knows that the PR reads: the reproducers (their hashes stale the evidence)."""
    reproducers: dict = field(default_factory=dict)
    repro_hashes: dict = field(default_factory=dict)
    workspace: Path | None = None


def prepare_pr(target: Target, source: Path, cache: Path, out_dir: Path, opts: PrOptions,
               known: PrContext | None = None) -> PrResult:
    known = known or PrContext()
    o = opts
    patch_names, upstream_ref, signoff, evidence_path, no_evidence, draft = (
        o.patch_names, o.upstream_ref, o.signoff, o.evidence_path, o.no_evidence, o.draft)
    template, push, branch, revise, ai_use, skip_checks, real_clients, messages = (
        o.template, o.push, o.branch, o.revise, o.ai_use, o.skip_checks, o.real_clients, o.messages)
    reproducers, repro_hashes, workspace = known.reproducers, known.repro_hashes, known.workspace
    # paths as the caller meant them: git format-patch and git bundle run inside the private clone,
    # where a relative --out (or --revise) named a folder in the clone, not the caller's
    out_dir = Path(out_dir).expanduser().absolute()
    revise = Path(revise).expanduser().absolute() if revise is not None else None
    messages = Path(messages).expanduser().absolute() if messages is not None else None
    if out_dir.exists() and (not out_dir.is_dir() or any(out_dir.iterdir())):
        raise UsageError(f"--out {out_dir} exists and is not empty; choose a new directory")
    if evidence_path is None and not no_evidence:
        raise UsageError("pass --evidence FILE (from lucepatch verify) or --no-evidence")
    if evidence_path is not None and no_evidence:
        raise UsageError("--evidence and --no-evidence exclude each other")
    if push and not branch:
        raise UsageError("--push REMOTE needs --branch NAME (the branch to create on the fork)")
    conv = conventions_for(target.upstream, target.pr.overrides())
    if conv.get("commit_messages", "series") not in ("series", "author"):
        raise UsageError(f"[pr] commit_messages of {target.toml_path} must be \"series\" or \"author\", "
                         f"not {conv.get('commit_messages')!r}")
    author_messages = conv.get("commit_messages") == "author"
    if messages is not None and not author_messages:
        raise UsageError(f"--messages is for upstreams whose commit messages the submitter writes; {target.upstream} "
                         "takes the series' own (set [pr] commit_messages = \"author\" to write them)")
    tmpl = template or conv["template"]
    ai_use = ai_use or conv.get("ai_use")
    if conv.get("ai_use_required") and not ai_use:
        raise UsageError(f"{target.upstream} asks every PR to disclose AI use; pass --ai-use TEXT "
                         f"or set ai_use in [pr] of {target.toml_path}")
    base_sha = git.resolve_commit(source, upstream_ref or target.base,
                                  what="--upstream-ref" if upstream_ref else f"base commit of {target.name}",
                                  upstream=target.upstream_urls)
    ev = None
    probe_docs: list[dict] = []
    moves: list[Evidence] = []
    if evidence_path is not None:
        paths = [Path(p).expanduser() for p in (evidence_path if isinstance(evidence_path, (list, tuple)) else [evidence_path])]
        probe_docs = [d for d in (probe_doc(p) for p in paths) if d is not None]
        paths = [p for p in paths if probe_doc(p) is None]
    if probe_docs:
        check_probe_evidence(probe_docs, target, base_sha)
    if evidence_path is not None and paths:
        # a ref-vs-ref evidence says what the move to the base did (issue 36): rendered apart, never combined
        evs, moves = split_moves([load_evidence(p) for p in paths], paths, base_sha)
        ev = evs[0] if len(evs) == 1 else Evidence.from_json(combine_evidence(evs, repro_hashes or {}))
        check_evidence(ev, target, repro_hashes or {}, base_sha)
    clients = []
    if real_clients:
        clients = rc.load(list(real_clients), target=target.name, repro_hashes=repro_hashes or {})
    patches = select_patches(target, patch_names)
    stale.refuse_flagged(target, patches)  # messages a rebase session found citing what the move changed
    own = read_messages(messages, patches) if messages is not None else {}
    if author_messages and push and len(own) < len(patches):
        raise UsageError("refusing to push commits whose messages are lucepatch's placeholders: "
                         f"{target.upstream} takes no generated commit messages; write yours "
                         "(--messages DIR, one <patch>.txt per patch) and run pr again")
    prev = _read_previous(revise) if revise else None
    revision = (prev["revision"] + 1) if prev else 1
    scrub = Scrubber(cache=cache, workspace=workspace)
    for p in patches:
        leaked = scrub.leaks(p.raw)
        if leaked:
            raise CheckFailed(f"patch {p.name} contains the value of {', '.join(leaked)}; remove it from the patch "
                              "before opening a PR")

    # who the commits are from: the patches' own authors, except lucepatch's placeholder identity, which
    # is nobody (conventions.PLACEHOLDER_DOMAIN): the submitter's git identity authors those, and signs off
    unclaimed = [p.name for p in patches if is_placeholder(p.author)]
    submitter = git.config_identity(source)
    if (signoff or unclaimed) and not submitter:
        why = "--signoff" if signoff else f"{unclaimed[0]} has no author but lucepatch's placeholder, so the PR"
        raise UsageError(f"{why} needs your git identity (git config user.name and user.email): the commits are "
                         "yours to author and sign off; lucepatch never invents one")
    unsigned = [p.name for p in patches if not [s for s in p.trailer_all("Signed-off-by") if not is_placeholder(s)]]
    if unsigned and "dco" in conv["checks"] and not signoff:
        raise CheckFailed(f"patch(es) {', '.join(unsigned)} have no Signed-off-by from a person (upstream needs DCO); "
                          f"add yours to the patch or pass --signoff to certify {'them' if len(unsigned) > 1 else 'it'} "
                          f"as {submitter[0]} <{submitter[1]}>" if submitter else
                          f"patch(es) {', '.join(unsigned)} have no Signed-off-by from a person (upstream needs DCO); "
                          "set your git identity and pass --signoff")

    pr_branch = branch or f"lucepatch/pr/{target.name}/{target.version}"
    with WorkArea(cache, f"pr-{target.name}") as work:
        res = apply_series(target, source, patches, work, base=base_sha, trailers=False)
        bad = [o for o in res.outcomes if o.status not in ("applied", "applied-3way")]
        if bad:
            raise CheckFailed(f"{', '.join(o.patch.name + ' ' + o.status for o in bad)} on {res.base[:12]}; "
                              "rebase the series before opening a PR")
        git.run(work.repo, "checkout", "-q", "-B", pr_branch)
        placeholders = finish_commits(work.repo, res.base, patches, own, Sender(
            submitter, signoff, author_messages, repo_slug(target.upstream) or target.upstream))
        checks = [] if skip_checks else run_checks(conv["checks"], work.repo, res.base, conv)
        failed = [c for c in checks if not c.ok]
        if failed:
            first = failed[0]
            more = f" (+{len(failed) - 1} more failed check(s))" if len(failed) > 1 else ""
            raise CheckFailed(f"upstream check {first.name} failed: {first.summary}: "
                              f"{'; '.join(first.findings[:3])}{more}; fix the patches, then re-run lucepatch pr")

        range_diff = ""
        if prev:
            git.run(work.repo, "fetch", "--quiet", str(revise / "branch.bundle"),
                    f"+refs/heads/{prev['branch']}:refs/lucepatch/prev")
            range_diff = git.run(work.repo, "range-diff", "--no-color", f"{prev['base']}..refs/lucepatch/prev",
                                 f"{res.base}..HEAD").stdout.rstrip("\n")

        staging = out_dir.with_name(out_dir.name + ".lucepatch-tmp")
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
        fp_args = ["format-patch", "--quiet", f"--base={res.base}", "--no-signature", "-o", str(staging)]
        if revision > 1:
            fp_args.append(f"-v{revision}")
        if len(patches) > 1:
            fp_args.append("--numbered")
        git.run(work.repo, *fp_args, f"{res.base}..HEAD")
        name_after_patches(staging, patches)

        ctx = _body_context(target, patches, ev, res.base, conv, checks, reproducers or {},
                            revision=revision, range_diff=range_diff, ai_use=ai_use, prev=prev)
        ctx["moves"] = [move_rows(m) for m in moves]
        ctx["placeholder_messages"] = placeholders
        ctx["probes"] = probe_rows(probe_docs, patches)
        if clients:
                ctx.update(real_clients=rc.rows(clients), real_clients_sources=[rc.source(d) for d in clients])
        body = scrub.text(render(f"pr/{tmpl}.md.j2", **ctx))
        (staging / "pr-body.md").write_text(body)
        (staging / "notes.md").write_text(scrub.text(render("pr/notes.md.j2", **ctx)))
        payload = {"title": ctx["title"], "head": pr_branch, "base": target.branch, "body": body, "draft": draft,
                   "maintainer_can_modify": True}
        (staging / "pr.json").write_text(json.dumps(payload, indent=2) + "\n")
        if ev is not None:
            clean = scrub.evidence(ev.to_json())
            (staging / "evidence.json").write_text(json.dumps(clean, indent=2) + "\n")
            # the page is rendered from the scrubbed evidence; the reproducer sources are scrubbed
            # as text before rendering (scrubbing rendered HTML would cut across its tags)
            view = build_view(Evidence.from_json(clean), reproducers=reproducers or {})
            for rep in view.reproducers:
                for src in rep["sources"]:
                    src["text"] = scrub.text(src["text"])
            (staging / "evidence.html").write_text(html(view))
        head = git.head(work.repo)
        git.run(work.repo, "bundle", "create", "--quiet", str(staging / "branch.bundle"), f"{res.base}..{pr_branch}")
        pushed = None
        if push:
            url = _resolve_remote(source, push)
            args = ["push", "--quiet"] + (["--force"] if prev else []) + [url, f"{pr_branch}:refs/heads/{pr_branch}"]
            r = git.run(work.repo, *args, check=False)
            if r.status != 0:
                shutil.rmtree(staging, ignore_errors=True)
                last = (r.stderr or r.stdout).strip().splitlines()[-1:] or ["no output"]
                raise CheckFailed(f"git push to {push} failed: {last[0]}; check the remote and your access")
            pushed = f"{push} {pr_branch}"
        meta = {
            "schema_version": 1, "lucepatch": __version__, "target": target.name, "version": target.version,
            "upstream": target.upstream, "revision": revision, "branch": pr_branch, "base": res.base, "head": head,
            "tree": git.tree_of(work.repo), "template": tmpl,
            "patches": [{"name": p.name, "patch_id": p.patch_id, "subject": p.subject} for p in patches],
            "checks": [c.to_json() for c in checks], "evidence": ev.verdict if ev is not None else None,
            "driver": (driver_display(ev) if ev is not None else None), "pushed": pushed,
            "commit_messages": ("author" if author_messages else "series"), "placeholder_messages": placeholders,
            "ai_disclosure": "given" if ai_use else ("left to the submitter" if tmpl == "hami" else None),
        }
        (staging / META).write_text(json.dumps(scrub.obj(meta), indent=2) + "\n")
        out_dir.parent.mkdir(parents=True, exist_ok=True)
        if out_dir.exists():
            out_dir.rmdir()
        staging.rename(out_dir)
        files = sorted(out_dir.iterdir())
        return PrResult(out_dir, pr_branch, res.base, head, files, ev is not None, revision, checks, pushed, tmpl,
                        placeholders, bool(ai_use))


def _real_client_columns() -> list[str]:
    return rc.COLUMNS


def _title(target: Target, patches: list[Patch], conv: dict) -> str:
    if conv.get("title"):
        return conv["title"]
    subjects = [p.subject for p in patches if not p.build_only] or [p.subject for p in patches]
    if len(subjects) == 1:
        return subjects[0]
    return f"{subjects[0]} (+{len(subjects) - 1} more)"


def _body_context(target: Target, patches: list[Patch], ev: Evidence | None, base: str, conv: dict,
                  checks: list[CheckResult], reproducers: dict, *, revision: int, range_diff: str,
                  ai_use: str | None, prev: dict | None) -> dict:
    bugs = _bugs(patches)
    slug = repo_slug(target.upstream)
    fixes = []
    for b in bugs:
        if "#" in b and not b.startswith("http"):
            repo, num = b.split("#", 1)
            fixes.append(f"#{num}" if slug and repo.lower() == slug.lower() else f"{repo}#{num}")
        else:
            fixes.append(b)
    named = []
    for p in patches:
        for r, s in p.reproducers:
            if (r, s) not in named:
                named.append((r, s))
    ran = {}
    if ev is not None:
        ran = {s.scenario: s for s in ev.scenarios}
    repro_ctx = []
    for name in dict.fromkeys(r for r, _ in named):
        rep = reproducers.get(name)
        scen = [s for r, s in named if r == name]
        repro_ctx.append({
            "name": name, "available": rep is not None,
            "description": " ".join((rep.description if rep else "").split()),
            "scenarios": [{"name": s or "(all)", "in_evidence": f"{name}:{s}" in ran,
                           "description": " ".join(rep.scenario(s).description.split())
                           if rep and s and any(x.name == s for x in rep.scenarios) else ""} for s in scen],
        })
    ctx = {
        "title": _title(target, patches, conv),
        "summary": conv.get("summary", target.description) or _title(target, patches, conv),
        "release_note": conv.get("release_note"),  # None: the submitter's to write (never a made-up NONE)
        "kind": conv.get("kind", "bug"),
        "patches": [{"subject": p.subject, "body_text": _body_text(p), "bugs": p.trailer_all("Bug"),
                     "build_only": p.build_only, "reproducers": [f"{r}:{s}" if s else r for r, s in p.reproducers],
                     "reproducer_names": list(dict.fromkeys(r for r, _ in p.reproducers))}
                    for p in patches],
        "fixes": fixes,
        "all_bugs": [f"https://github.com/{b.split('#')[0]}/issues/{b.split('#')[1]}" if "#" in b else b for b in bugs],
        "target": target.name, "version": target.version, "base": base, "lucepatch_version": __version__,
        "evidence": ev.to_json() if ev is not None else None, "overhead": conv.get("overhead", ""), "checks": checks, "reproducers": repro_ctx,
        "revision": revision, "range_diff": range_diff, "ai_use": ai_use or "",
        "prev_revision": prev["revision"] if prev else None, "upstream": target.upstream,
        "rows": [], "columns": BODY_COLUMNS, "rate_rows": [], "rate_columns": [], "rate_rule": None,
        "real_clients": [], "real_clients_sources": [], "real_clients_columns": _real_client_columns(),
        "validation": bool(conv.get("validation")), "validated_on": None, "placeholder_messages": [], "moves": [],
    }
    if ev is not None:  # the templates read plain dicts (Evidence.to_json())
        d = driver_display(ev)
        view = build_view(ev)
        ctx.update(run_strip=view.strip_block(), run_legend=view.legend_text(), run_count=view.glyph_count)
        ctx.update(
            run_policy=ev.run_policy.to_json() if ev.run_policy else {"rule": "fixed", "alpha": 0.01},
            theta_text=fmt_theta,
            scenarios=[s.to_json() for s in ev.scenarios], driver_kind=d["kind"], gpu=d["gpu"],
            driver_version=d["driver"], rows=body_rows(ev), columns=BODY_COLUMNS,
            rate_rows=rate_view.rate_rows(ev), rate_columns=rate_view.RATE_COLUMNS,
            rate_rule=next((s.extra["measure"].get("rate_rule") for s in ev.scenarios if s.extra.get("measure")), None),
            commits={v: ev.variants[v].base or ev.upstream["base"] for v in ("baseline", "patched")},
            baseline_patches=ev.variants["baseline"].patches or [],
            not_proven_here=[s.to_json() for s in ev.checked if s.verdict != "proven"],
        )
        if d["kind"] == "real":
            ctx["validated_on"] = f"{d['gpu']}, NVIDIA driver {d['driver']}"

    return ctx
