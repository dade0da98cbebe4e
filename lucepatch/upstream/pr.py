"""Prepare an upstream PR: commits on a branch from the upstream ref, format-patch files with
base-commit, a body in the upstream's template with the before/after table rendered from the
evidence, and the GitHub create-PR payload. Nothing leaves the machine."""

from __future__ import annotations

import json
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

from lucepatch import __version__, git
from lucepatch.engine.apply import WorkArea, apply_series
from lucepatch.errors import CheckFailed, UsageError
from lucepatch.series import Patch
from lucepatch.target import Target
from lucepatch.upstream.render import render
from lucepatch.verify.evidence import load_evidence, staleness


@dataclass
class PrResult:
    out_dir: Path
    branch: str
    base: str
    head: str
    files: list[Path]
    evidence_used: bool

    def to_json(self) -> dict:
        return {"out_dir": str(self.out_dir), "branch": self.branch, "base": self.base, "head": self.head,
                "files": [str(f) for f in self.files], "evidence_used": self.evidence_used}


def select_patches(target: Target, names: list[str] | None) -> list[Patch]:
    if not names:
        return list(target.patches)
    by = {p.name: p for p in target.patches} | {p.slug: p for p in target.patches}
    missing = [n for n in names if n not in by]
    if missing:
        raise UsageError(f"--patches: {', '.join(missing)} not in {target.name}'s series")
    return [by[n] for n in names]


def _body_text(p: Patch) -> str:
    paras = p.body.split("\n\n")
    if p.trailers:
        paras = paras[:-1]
    return "\n\n".join(paras).strip()


def check_evidence(doc: dict, target: Target, repro_hashes: dict[str, str]) -> None:
    if doc.get("target") != target.name:
        raise CheckFailed(f"evidence is for target {doc.get('target')!r}, not {target.name}")
    if doc["verdict"] != "proven":
        raise CheckFailed(f"evidence verdict is {doc['verdict']!r}, not proven; re-run lucepatch verify or pass --no-evidence")
    why = staleness(doc, upstream_commit=target.base, patch_ids=[p.patch_id for p in target.patches],
                    reproducer_hashes=repro_hashes)
    if why:
        raise CheckFailed(f"evidence is stale: {'; '.join(why)}; re-run lucepatch verify")


def prepare_pr(target: Target, source: Path, cache: Path, out_dir: Path, *, patch_names=None,
               upstream_ref: str | None = None, signoff: bool = False, evidence_path: Path | None = None,
               no_evidence: bool = False, draft: bool = False, repro_hashes: dict | None = None,
               template: str | None = None) -> PrResult:
    if out_dir.exists() and (not out_dir.is_dir() or any(out_dir.iterdir())):
        raise UsageError(f"--out {out_dir} exists and is not empty; choose a new directory")
    if evidence_path is None and not no_evidence:
        raise UsageError("pass --evidence FILE (from lucepatch verify) or --no-evidence")
    doc = None
    if evidence_path is not None:
        doc = load_evidence(evidence_path)
        check_evidence(doc, target, repro_hashes or {})
    patches = select_patches(target, patch_names)

    am_args: tuple[str, ...] = ()
    am_env = None
    unsigned = [p.name for p in patches if not p.trailer_all("Signed-off-by")]
    if unsigned:
        if not signoff:
            raise CheckFailed(f"patch(es) {', '.join(unsigned)} have no Signed-off-by (upstream needs DCO); "
                              "add it to the patch or pass --signoff to sign with your git identity")
        ident = git.config_identity(source)
        if not ident:
            raise UsageError("--signoff needs user.name and user.email in git config; lucepatch never invents a sign-off")
        am_args = ("--signoff",)
        am_env = {"GIT_COMMITTER_NAME": ident[0], "GIT_COMMITTER_EMAIL": ident[1]}

    branch = f"lucepatch/pr/{target.name}/{target.version}"
    with WorkArea(cache, f"pr-{target.name}") as work:
        res = apply_series(target, source, patches, work, base=upstream_ref, trailers=False,
                           am_args=am_args, am_env=am_env)
        bad = [o for o in res.outcomes if o.status not in ("applied", "applied-3way")]
        if bad:
            raise CheckFailed(f"{', '.join(o.patch.name + ' ' + o.status for o in bad)} on {res.base[:12]}; "
                              "rebase the series before opening a PR")
        git.run(work.repo, "checkout", "-q", "-b", branch)
        staging = out_dir.with_name(out_dir.name + ".lucepatch-tmp")
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
        names = git.run(work.repo, "format-patch", "--quiet", f"--base={res.base}", "--no-signature",
                        "-o", str(staging), f"{res.base}..HEAD").stdout.split()
        bugs = []
        for p in patches:
            for b in p.trailer_all("Bug"):
                m = re.search(r"github\.com/([^/]+/[^/]+)/(?:issues|pull)/(\d+)", b)
                ref = f"{m.group(1)}#{m.group(2)}" if m else b
                if ref not in bugs:
                    bugs.append(ref)
        ctx = _body_context(target, patches, doc, res.base, res.head, bugs)
        tmpl = template or target.pr.get("template", "generic")
        body = render(f"pr/{tmpl}.md.j2", **ctx)
        (staging / "pr-body.md").write_text(body)
        payload = {"title": ctx["title"], "head": branch, "base": target.branch, "body": body, "draft": draft,
                   "maintainer_can_modify": True}
        (staging / "pr.json").write_text(json.dumps(payload, indent=2) + "\n")
        if doc is not None:
            (staging / "evidence.json").write_text(json.dumps(doc, indent=2) + "\n")
        # The PR branch itself, as a git bundle a reviewer can fetch.
        git.run(work.repo, "bundle", "create", "--quiet", str(staging / "branch.bundle"), f"{res.base}..{branch}")
        out_dir.parent.mkdir(parents=True, exist_ok=True)
        if out_dir.exists():
            out_dir.rmdir()
        staging.rename(out_dir)
        files = sorted(out_dir.iterdir())
        return PrResult(out_dir, branch, res.base, res.head, files, doc is not None)


def _body_context(target: Target, patches: list[Patch], doc: dict | None, base: str, head: str, bugs: list[str]) -> dict:
    subjects = [p.subject for p in patches if not p.build_only] or [p.subject for p in patches]
    title = subjects[0] if len(subjects) == 1 else f"{target.name}: {subjects[0]} (+{len(subjects) - 1} more)"
    ctx = {
        "title": title,
        "summary": target.pr.get("summary", target.description) or title,
        "release_note": target.pr.get("release_note", "NONE"),
        "patches": [{"subject": p.subject, "body_text": _body_text(p), "bugs": p.trailer_all("Bug")} for p in patches],
        "all_bugs": [f"https://github.com/{b.split('#')[0]}/issues/{b.split('#')[1]}" if "#" in b else b for b in bugs],
        "target": target.name, "version": target.version, "base": base, "lucepatch_version": __version__,
        "evidence": doc, "overhead": target.pr.get("overhead", ""),
    }
    if doc is not None:
        drv = doc.get("driver", {})
        ctx.update(
            scenarios=doc["scenarios"], driver_kind=drv.get("kind"), gpu=drv.get("gpu"),
            driver_version=drv.get("version"),
            commits={v: doc["variants"][v].get("commit") or doc["upstream"]["base"] for v in ("baseline", "patched")},
            baseline_patches=doc["variants"]["baseline"].get("patches", []),
        )
    return ctx


def parse_verdict_table(markdown: str) -> list[dict]:
    """Read the before/after table back (tests and `pr --revise` use it)."""
    rows = []
    lines = markdown.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("| scenario | variant |"):
            header = [c.strip() for c in line.strip("|").split("|")]
            for row in lines[i + 2:]:
                if not row.startswith("|"):
                    break
                rows.append(dict(zip(header, [c.strip() for c in row.strip("|").split("|")])))
            break
    return rows
