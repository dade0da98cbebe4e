"""Which scenarios reach which patch — measured, not declared (issue 11 item 2).

The series applied at REF is built with gcc --coverage (service.build_variants, a coverage spec),
every scenario of every reproducer of the target runs once on it on the configured driver, with
its .gcda files redirected into a folder of its own (GCOV_PREFIX), and `gcov --json-format` says
which lines ran. Each patch's hunks are taken from its own commit in a private clone of the series
at REF (`git diff -U3 commit^ commit`) and followed to the final tree through the later patches'
diffs, so the line numbers are the ones the coverage build compiled.

A hunk is *executed* by a scenario (the scenario reaches the patch) when one of its added lines that
the compiler made code for ran; a hunk with no such line (a pure deletion, a declaration) counts by
the code lines of its range, context included; a hunk with none at all travels with the patch's
other hunks. Coverage is *complete* for retirement only when every added code line ran in some
scenario: a bounds check whose early return never ran has not been shown unnecessary. A scenario whose
run crashed or hung wrote no coverage: it is recorded as incomplete and conservatively *reaches
every patch* (the map adds scenarios to judge, it never hides one). Workload reproducers (PyTorch,
ggml, ctypes clients) run as verify runs them — their command, their [build], the preloaded
reporter — or, where the machine lacks what they require, are recorded `skipped` with the reason:
a skipped scenario ran nothing, so it reaches nothing (its comparisons are inconclusive, never a
pass). The map also says whose hunks a scenario executed (`executed_by`): what a failure of that
scenario is attributed to (blame by coverage, lucepatch.upstream.retire).

The map is cached under <cache>/coverage/<key>.json, key = the coverage build's tree + the patch
ids + the reproducers' hashes.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from lucepatch import git, report
from lucepatch.engine.apply import WorkArea, apply_series
from lucepatch.errors import EnvironmentMissing
from lucepatch.native.launch import build_isolate
from lucepatch.native.workload import build_program, build_reporter
from lucepatch.verify import bindshim
from lucepatch.verify.runner import CRASH, SKIPPED, TIMEOUT, compile_reproducer, run_once
from lucepatch.verify.session import requirements

VERSION = 2
_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


@dataclass
class Hunk:
    patch: str
    index: int
    file: str
    line: int  # first line of the hunk in the patch's own commit at REF (what file:line reports)
    added: list[int] = field(default_factory=list)  # final-tree lines the hunk added (still there)
    span: list[int] = field(default_factory=list)  # final-tree lines of its whole range, context included

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}"

    def to_json(self) -> dict:
        return {"patch": self.patch, "index": self.index, "file": self.file, "line": self.line,
                "added": self.added, "span": self.span}


@dataclass
class CoverageMap:
    ref: str
    build: dict
    hunks: dict  # patch name -> [Hunk]
    scenarios: dict  # reproducer:scenario -> {"complete", "outcome", "why", "hunks": ["patch#i"], "lines": ["patch#i:N"]}
    code: dict = field(default_factory=dict)  # patch#i -> the final-tree lines it added that compiled to code
    key: str = ""
    cached: bool = False

    def reaching(self, patch: str) -> list[str]:
        """Scenarios that executed a hunk of `patch`, plus every incomplete one (conservatively); a
        scenario skipped here (its requirements unmet) ran nothing and reaches nothing."""
        ids = {f"{patch}#{h.index}" for h in self.hunks.get(patch, [])}
        return [s for s, d in self.scenarios.items() if not d.get("skipped")
                and (not d["complete"] or ids & set(d["hunks"]))]

    def executed_by(self, scenario: str) -> list[str] | None:
        """The patches whose hunks `scenario`'s run executed; None when its coverage is unknown
        (it crashed, hung or was skipped): who a failure of it is attributed to (blame by coverage)."""
        d = self.scenarios.get(scenario)
        if d is None or not d["complete"]:
            return None
        return list(dict.fromkeys(h.rsplit("#", 1)[0] for h in d["hunks"]))

    def unreached(self, patch: str) -> list[str]:
        """file:line (in REF + series) of every line `patch` added that compiled to code and that no
        complete scenario executed — a hunk whose `if` ran but whose early `return` never did counts as
        not reached: that return is what would be dropped. Hunks without code lines travel with the rest."""
        hit = {ln for d in self.scenarios.values() if d["complete"] for ln in d.get("lines", [])}
        out = []
        for h in self.hunks.get(patch, []):
            for n in self.code.get(f"{patch}#{h.index}", []):
                if f"{patch}#{h.index}:{n}" not in hit:
                    out.append(f"{h.file}:{n}")
        return out

    @property
    def incomplete(self) -> list[str]:
        return [s for s, d in self.scenarios.items() if not d["complete"] and not d.get("skipped")]

    @property
    def skipped(self) -> list[str]:
        return [s for s, d in self.scenarios.items() if d.get("skipped")]

    def to_json(self) -> dict:
        return {"schema_version": VERSION, "kind": "lucepatch-coverage-map", "ref": self.ref, "key": self.key,
                "build": self.build, "hunks": {p: [h.to_json() for h in hs] for p, hs in self.hunks.items()},
                "code": self.code, "scenarios": self.scenarios}

    @classmethod
    def from_json(cls, d: dict, cached: bool = False) -> "CoverageMap":
        hunks = {p: [Hunk(**h) for h in hs] for p, hs in d["hunks"].items()}
        return cls(d["ref"], d["build"], hunks, d["scenarios"], d.get("code", {}), d.get("key", ""), cached)


# ---- hunks of each patch, in the final tree -----------------------------------------------------


def _line_map(repo: Path, old: str, new: str, path: str):
    """old-commit line -> new-commit line of `path` (None where a later diff changed that line)."""
    out = git.run(repo, "diff", "-U0", "--no-color", old, new, "--", path).stdout
    changes = []
    for line in out.splitlines():
        m = _HUNK.match(line)
        if m:
            a, b = int(m[1]), int(m[2]) if m[2] is not None else 1
            c, d = int(m[3]), int(m[4]) if m[4] is not None else 1
            changes.append((a, b, c, d))

    def mapped(n: int) -> int | None:
        shift = 0
        for a, b, c, d in changes:
            if b and a <= n < a + b:
                return None
            # the first line after the hunk, on each side (a count of 0 names the line before it)
            next_old, next_new = (a + b if b else a + 1), (c + d if d else c + 1)
            if n < next_old:
                break
            shift = next_new - next_old
        return n + shift

    return mapped


def patch_hunks(repo: Path, commits: dict[str, str], head: str) -> dict[str, list[Hunk]]:
    """{patch name: [Hunk]} for the patches applied as `commits` (name -> commit) in `repo`."""
    out: dict[str, list[Hunk]] = {}
    for name, commit in commits.items():
        diff = git.run(repo, "diff", "-U3", "--no-color", "--no-renames", f"{commit}^", commit).stdout
        hunks: list[Hunk] = []
        path = None
        maps: dict = {}
        newline = 0
        for line in diff.splitlines():
            if line.startswith("+++ "):
                path = None if line[4:] == "/dev/null" else line[6:] if line.startswith("+++ b/") else line[4:]
                continue
            if line.startswith(("--- ", "diff --git", "index ", "new file", "deleted file", "similarity", "old mode",
                                "new mode")):
                continue
            m = _HUNK.match(line)
            if m and path:
                newline = int(m[3])
                if path not in maps:
                    maps[path] = _line_map(repo, commit, head, path)
                hunks.append(Hunk(name, len(hunks), path, newline))
                continue
            if not hunks or path is None:
                continue
            h = hunks[-1]
            if line.startswith("+"):
                n = maps[path](newline)
                if n is not None:
                    h.added.append(n)
                    h.span.append(n)
                newline += 1
            elif line.startswith(" "):
                n = maps[path](newline)
                if n is not None:
                    h.span.append(n)
                newline += 1
        out[name] = hunks
    return out


# ---- gcov -------------------------------------------------------------------------------------


def _gcov() -> str:
    exe = shutil.which("gcov")
    if not exe:
        raise EnvironmentMissing("the coverage map needs gcov (apt-get install gcc: it ships with the compiler)")
    return exe


def read_coverage(gcda_root: Path, build_dir: Path) -> dict[str, dict[int, int]]:
    """{source path relative to the tree: {line: count}} from the .gcda files under gcda_root."""
    lines: dict[str, dict[int, int]] = {}
    for gcda in sorted(gcda_root.rglob("*.gcda")):
        rel = gcda.relative_to(gcda_root)
        gcno = (build_dir / rel).with_suffix(".gcno")
        if not gcno.is_file():
            continue
        shutil.copyfile(gcno, gcda.with_suffix(".gcno"))
        r = subprocess.run([_gcov(), "--json-format", "--stdout", gcda.name], cwd=gcda.parent,
                           capture_output=True, text=True)
        for chunk in r.stdout.splitlines():
            if not chunk.strip().startswith("{"):
                continue
            for f in json.loads(chunk).get("files", []):
                name = f["file"]
                if name.startswith("src/"):  # the builds map the source tree to src (reproducible.py)
                    name = name[4:]
                elif name.startswith(("build/", "/")):
                    continue
                per = lines.setdefault(name, {})
                for ln in f.get("lines", []):
                    per[ln["line_number"]] = per.get(ln["line_number"], 0) + int(ln["count"])
    return lines


def executed_lines(hunks: dict[str, list[Hunk]], cov: dict[str, dict[int, int]]) -> tuple[dict, list[str]]:
    """({patch#i: added lines that are code}, ["patch#i:N" of those that ran])."""
    code, ran = {}, []
    for patch, hs in hunks.items():
        for h in hs:
            per = cov.get(h.file, {})
            lines = [n for n in h.added if n in per]
            code[f"{patch}#{h.index}"] = lines
            ran += [f"{patch}#{h.index}:{n}" for n in lines if per[n] > 0]
    return code, ran


def executed(hunks: dict[str, list[Hunk]], cov: dict[str, dict[int, int]]) -> list[str]:
    """The hunk ids (patch#i) the coverage `cov` shows executed."""
    hit: list[str] = []
    for patch, hs in hunks.items():
        silent = []
        any_hit = False
        for h in hs:
            per = cov.get(h.file, {})
            code = [n for n in h.added if n in per] or [n for n in h.span if n in per]
            if not code:
                silent.append(h)
                continue
            if any(per[n] > 0 for n in code):
                hit.append(f"{patch}#{h.index}")
                any_hit = True
        if any_hit:  # hunks the compiler made no code for travel with the patch's other hunks
            hit += [f"{patch}#{h.index}" for h in silent]
    return hit


# ---- the map ------------------------------------------------------------------------------------


def coverage_map(lab, ref: str, patches: list[str]) -> CoverageMap:
    """The coverage map of `patches` (names, series order) applied at `ref`, from `lab` (behaviour.Lab)."""
    t, source, cache = lab.target, lab.source, lab.cache
    by = {p.name: p for p in t.patches}
    with WorkArea(cache, f"coverage-{t.name}") as work:
        res = apply_series(t, source, [by[n] for n in patches], work, base=ref, trailers=False, checkout=False)
        commits = {o.patch.name: o.commit for o in res.outcomes if o.commit and not o.patch.build_only}
        key_doc = {"version": VERSION, "tree": res.tree, "patch_ids": [by[n].patch_id for n in patches],
                   "reproducers": sorted((r.name, r.hash) for r in lab.repros.values()), "driver": lab.driver.chosen,
                   "workloads": "run or skipped"}  # maps from before workloads ran as workloads are not reused
        key = hashlib.sha256(json.dumps(key_doc, sort_keys=True).encode()).hexdigest()[:24]
        path = cache / "coverage" / f"{key}.json"
        if path.is_file():
            return CoverageMap.from_json(json.loads(path.read_text()), cached=True)
        hunks = patch_hunks(work.repo, commits, res.head)
    b = lab.build(f"{ref[:12]}+series (coverage)", ref, patches, coverage=True)
    if b.variant is None or not b.coverage:
        raise EnvironmentMissing(f"the coverage build failed: {b.error or 'no .gcno files'}")
    build_dir, strip = Path(b.coverage["build_dir"]), int(b.coverage["strip"])
    scen: dict[str, dict] = {}
    code: dict[str, list[int]] = {}
    report.progress(f"coverage map: every scenario once on {b.name}")
    # workloads run as verify runs them (their command, their [build], the preloaded reporter) or
    # are skipped with the reason their requirements give (so is a scenario needing more GPUs than
    # the driver has): never compiled as C; C reproducers with the bind shim verify gives them
    selected = [(r, s) for r in lab.repros.values() for s in r.scenarios]
    unmet = requirements(selected, lab.driver)
    reporter = build_reporter(cache) if any(r.is_workload for r in lab.repros.values()) else None
    shim, _ = bindshim.for_library(cache, b.variant.lib)  # as verify runs the C reproducers (LD_BIND_NOW=1)
    with tempfile.TemporaryDirectory(prefix="lucepatch-coverage-") as tmp:
        tmp = Path(tmp)
        for rname, repro in lab.repros.items():
            binary = _program(repro, cache, lab, unmet)
            for s in repro.scenarios:
                key = f"{rname}:{s.name}"
                if unmet.get(key):
                    scen[key] = {"complete": False, "skipped": True, "outcome": SKIPPED, "why": unmet[key],
                                 "control": s.control, "hunks": [], "lines": []}
                    continue
                d = tmp / f"{rname}.{s.name}"
                d.mkdir()
                rec = run_once(binary, repro, s, b.name, 0, b.variant.lib, lab.driver.env, tmp,
                               expected_sha256=b.variant.sha256,
                               extra_env={"GCOV_PREFIX": str(d), "GCOV_PREFIX_STRIP": str(strip)},
                               isolate=lab.execution.isolation == "namespace", launcher=_launcher(lab),
                               reporter=reporter if repro.is_workload else None, bind_shim=shim)
                if rec.outcome == SKIPPED:  # the program itself said it cannot run here (needs 2 GPUs)
                    scen[key] = {"complete": False, "skipped": True, "outcome": SKIPPED,
                                 "why": rec.reason or "the program reported it cannot run here",
                                 "control": s.control, "hunks": [], "lines": []}
                    continue
                cov = read_coverage(d, build_dir)
                complete = bool(cov) and rec.outcome not in (CRASH, TIMEOUT)
                why = "" if complete else (f"the run ended {rec.outcome} ({rec.reason or rec.signal}): no coverage written"
                                           if rec.outcome in (CRASH, TIMEOUT) else f"no coverage written ({rec.outcome})")
                code_now, ran = executed_lines(hunks, cov)
                for k, v in code_now.items():  # a line is code if any run's gcov knows it
                    code[k] = sorted(set(code.get(k, [])) | set(v))
                scen[key] = {"complete": complete, "outcome": rec.outcome, "why": why,
                                             "control": s.control, "hunks": executed(hunks, cov) if complete else [],
                                             "lines": ran if complete else []}
    m = CoverageMap(ref, {"name": b.name, "build_key": b.key, "tree": b.variant.provenance.get("tree"),
                          "commit": b.variant.provenance.get("commit"), "driver": lab.driver.chosen},
                    hunks, scen, code, key)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp_path = path.with_suffix(f".tmp{id(m)}")
    tmp_path.write_text(json.dumps(m.to_json(), indent=2) + "\n")
    tmp_path.replace(path)
    return m


def _program(repro, cache: Path, lab, unmet: dict) -> Path | None:
    """What run_once starts for `repro`: a C reproducer compiled; a workload's [build] output folder
    when some scenario of it can run here; else None (a workload runs its command)."""
    if not repro.is_workload:
        return compile_reproducer(repro, cache, lab.driver.fake_dir)
    if repro.build is not None and any(not unmet.get(f"{repro.name}:{s.name}") for s in repro.scenarios):
        return build_program(repro, cache)
    return None


def _launcher(lab):
    if lab.execution.isolation != "namespace":
        return None

    return build_isolate(lab.cache)


def format_coverage_map(m: CoverageMap) -> tuple[str, list[str], list[list[str]]]:
    """(title, columns, rows): one row per patch — the scenarios reaching it and its unreached hunks."""
    title = (f"coverage map at {m.ref[:12]} ({m.build.get('name')}, driver {m.build.get('driver')})"
             + (" [cached]" if m.cached else ""))
    rows = []
    for patch, hs in m.hunks.items():
        reach = [s for s in m.reaching(patch) if not m.scenarios[s].get("control")]
        miss = m.unreached(patch)
        rows.append([patch, str(len(hs)), ", ".join(reach) or "-",
                     ", ".join(miss[:4]) + (f" (+{len(miss) - 4})" if len(miss) > 4 else "") or "-"])
    for s in m.incomplete:
        rows.append(["(incomplete)", "", s, m.scenarios[s]["why"]])
    for s in m.skipped:
        rows.append(["(skipped)", "", s, m.scenarios[s]["why"]])
    return title, ["patch", "hunks", "scenarios reaching it (checked)", "its code lines no scenario ran"], rows
