"""`lucepatch build TARGET --profile P` for a superproject with profiles (Lucebox): the native
build of the patched trees, reported as binaries + sha256, SASS per library, closure."""

from __future__ import annotations

import json
from pathlib import Path

from lucepatch import report
from lucepatch.errors import EXIT_CHECK_FAILED
from lucepatch.services import builds as service


def run(ws, t, src: Path, cache: Path, variants: list[str], profile: str | None, jobs: int | None,
        keep_build: bool, cuda_archs: str | None, summary: str | None, as_json: bool) -> int:
    results = service.build_profiles(t, src, cache, variants, profile=profile, jobs=jobs, keep_build=keep_build,
                                     cuda_archs=cuda_archs)
    doc = {"workspace": ws.to_json(), "target": t.name, "version": t.version, "builds": [r.to_json() for r in results]}
    if summary:
        Path(summary).write_text(json.dumps(doc, indent=1) + "\n")
    if as_json:
        report.emit_json("build", doc)
    for r in results:
        head = (f"build {t.name} {t.version} {r.variant} / {r.profile}: "
                + ("cached" if r.cached else f"configure {r.configure_s:.0f}s, build {r.build_s:.0f}s, "
                   f"{r.steps_done}/{r.steps_total} steps, -j {r.jobs}"))
        if not r.ok:
            f = r.failure
            report.table(head, ["", ""], [["result", "FAILED"], ["phase", f.get("phase", "")],
                                          ["first error", (f.get("first_error") or "")[:200]],
                                          ["error lines", str(f.get("error_lines", ""))], ["log", r.log or "-"]],
                         as_json=as_json)
            continue
        libs = r.sass.get("libraries", {})
        rows = []
        for path, sha in r.files.items():
            s = libs.get(path)
            sass = ", ".join(s["sass"]) if s else ""
            note = "" if not s else "; ".join(x for x in (
                f"missing {', '.join(s['missing'])}" if s["missing"] else "",
                f"unexpected {', '.join(s['unexpected'])}" if s["unexpected"] else "",
                f"arch-specific {', '.join(s['arch_specific'])}" if s["arch_specific"] else "",
                f"{s['fatbins']} fatbins") if x)
            rows.append([path, sha[:16], sass, note])
        cl = r.closure
        rows.append(["closure", "ok" if cl.get("ok") else "FAILED",
                     f"{cl.get('objects')} objects, {len(cl.get('needed_names', []))} NEEDED names",
                     "absent as allowed: " + (", ".join(cl.get("absent_allowed", [])) or "none")
                     + ("" if cl.get("ok") else f"; missing {json.dumps(cl.get('missing'))[:120]}")])
        rows.append(["SASS vs profile", "ok" if r.sass.get("ok") else "MISMATCH", ", ".join(r.sass.get("expected", [])), ""])
        report.table(head, ["file", "sha256", "SASS", "notes"], rows, as_json=as_json)
    return 0 if all(r.ok and r.sass.get("ok", True) for r in results) else EXIT_CHECK_FAILED
