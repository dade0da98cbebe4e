"""Gate reports: JUnit XML (one testcase per step, per scenario and per probe) and markdown
(also appended to $GITHUB_STEP_SUMMARY when set)."""

from __future__ import annotations

import os
import xml.etree.ElementTree as ET
from pathlib import Path

from lucepatch.services.gate.result import FAIL, PASS, SKIP, WARN, TargetResult


def junit_xml(results: list[TargetResult], strict: bool) -> str:
    suites = ET.Element("testsuites", name="lucepatch ci")
    total = fails = skips = 0
    for r in results:
        suite = ET.SubElement(suites, "testsuite", name=f"lucepatch.{r.target}")
        n = f = s = 0
        for step in r.steps:
            items = step.cases if step.name in ("verify", "probes") and step.cases else [
                {"name": step.name, "status": step.status, "detail": step.detail}]
            for c in items:
                n += 1
                name = c["name"] if items is step.cases else step.name
                tc = ET.SubElement(suite, "testcase", classname=f"{r.target}.{step.name}", name=name,
                                   time=f"{step.seconds / max(len(items), 1):.3f}")
                failing = (c["status"] == FAIL or (c["status"] == WARN and step.name == "canary" and strict)
                           or (r.skipped is not None and strict))  # --strict: a target without a checkout fails
                if failing:
                    f += 1
                    ET.SubElement(tc, "failure", message=c.get("detail", "")[:500], type=step.name).text = c.get("detail", "")
                elif c["status"] == SKIP:
                    s += 1
                    ET.SubElement(tc, "skipped", message=c.get("detail", ""))
                elif c["status"] == WARN:
                    ET.SubElement(tc, "system-out").text = "warning: " + c.get("detail", "")
        suite.set("tests", str(n))
        suite.set("failures", str(f))
        suite.set("errors", "0")
        suite.set("skipped", str(s))
        total, fails, skips = total + n, fails + f, skips + s
    suites.set("tests", str(total))
    suites.set("failures", str(fails))
    suites.set("errors", "0")
    suites.set("skipped", str(skips))
    ET.indent(suites)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(suites, encoding="unicode") + "\n"


_ICON = {PASS: "✅", FAIL: "❌", SKIP: "⏭️", WARN: "⚠️"}


def markdown(results: list[TargetResult], exit_code: int) -> str:
    gated = [r for r in results if not r.skipped]
    lines = [f"## lucepatch ci — {'passed' if exit_code == 0 else 'FAILED'}"
             + (f" ({len(gated)} of {len(results)} targets gated)" if len(gated) < len(results) else ""), ""]
    for r in results:
        if r.skipped:
            lines += [f"### {r.target}: skipped — {r.skipped.replace('|', '/')}", ""]
            continue
        lines += [f"### {r.target}: gate {r.gate}, canary {r.canary}{' (cached)' if r.cached else ''}", "",
                  "| step | status | detail |", "|---|---|---|"]
        for s in r.steps:
            lines.append(f"| {s.name} | {_ICON.get(s.status, '')} {s.status} | {s.detail.replace('|', '/')} |")
            if s.name == "verify":
                for c in s.cases:
                    lines.append(f"| &nbsp;&nbsp;{c['name']} | {_ICON.get(c['status'], '')} {c['status']} | "
                                 f"{c['detail'].replace('|', '/')} |")
        lines.append("")
    return "\n".join(lines) + "\n"


def write_reports(results: list[TargetResult], code: int, *, strict: bool, junit_path: str | None = None,
                  md_path: str | None = None) -> None:
    """JUnit XML to junit_path, markdown to md_path and to $GITHUB_STEP_SUMMARY (appended) when set."""
    if junit_path:
        Path(junit_path).parent.mkdir(parents=True, exist_ok=True)
        Path(junit_path).write_text(junit_xml(results, strict))
    md = markdown(results, code)
    if md_path:
        Path(md_path).write_text(md)
    summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if summary:
        with open(summary, "a", encoding="utf-8") as f:
            f.write(md)
