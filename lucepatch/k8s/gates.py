"""deploy hami-core's gates: nothing reaches a node unless every gate passes (or is honestly skipped).

Gates, in order (each -> ok True / False / None = not determinable here, with the reason):
- ``evidence``: evidence JSON says verdict ``proven``, driver kind ``real``, and its patched
  artifact's sha256 is the sha256 of ``--lib`` (these exact bytes were verified).
- ``elf``: ``--lib`` is an ELF shared object.
- ``symbols``: ``--lib`` exports every dynamic symbol of the reference library: ``--installed``
  (a copy of a node's current library) else the evidence's baseline artifact when present
  locally with a matching sha256. The DaemonSet repeats this check on every node against the
  library actually installed there.
- ``shrreg``: shared-region MAJOR.MINOR read from the ELF (swap.shrreg_version) equals the
  reference library's, else the series' ``shrreg`` in compatible_hami.toml. Not determinable
  for builds that do not export ``shrreg_*_version`` (Release builds): skipped, said so.
- ``compatible_hami``: every HAMi version given (``--hami-version``, e.g. from the device-plugin
  image tag) is in the series' ``compatible`` list. Unknown HAMi version = failure for a live
  deploy (refuse rather than guess), skipped for ``--dry-run``.
- ``line``: the series line the evidence was taken for (its target) is the line that fits the
  nodes, judged from ``--installed`` (its shared-region version, any embedded commit) and the HAMi
  versions (lucepatch/lines/fit.py). A mismatch is refused with the line that does fit and the
  commands that build its drop-in; neither known = skipped for ``--dry-run``, refused live.
- ``identity``: what the nodes' library is (lucepatch/lines/identity.py): upstream HAMi-core or a
  line's build may be replaced; a vendor's fork only by a library that keeps all of the vendor's
  names (never by a flag); an unknown library is not replaced live.
- ``symbols``/``env``/``loader`` with a reference (``--installed`` or ``--node-report``): the
  verdict of lucepatch.lines.replace.judge — the one `node --lib NODE --candidate LIB` prints —
  on what --lib would take away (symbols grouped, the vendor's machinery never accepted),
  the environment variables the nodes' library reads and --lib ignores, and whether --lib can
  load in the pods (their glibc from the node report, else against where the nodes' library loads).
  Without a reference: skipped for ``--dry-run``, refused live (the DaemonSet re-checks symbols on
  each node, but nothing there knows what the vendor's library reads or where it loads).

The series is the evidence's target (a line of compatible_hami.toml ``[series.*]``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from lucepatch.errors import UsageError
from lucepatch.files import sha256_file
from lucepatch.k8s import swap
from lucepatch.lines.fit import compat_data, drop_in_commands, fit_node, load_lines
from lucepatch.lines.identity import FORK, LINE_BUILD, UPSTREAM, Identity, identify
from lucepatch.lines.replace import Side, judge
from lucepatch.native.libfacts import LibFacts, read_lib
from lucepatch.node.report import load_node_report
from lucepatch.verify.evidence import Evidence, load_evidence


@dataclass
class Gate:
    name: str
    ok: bool | None
    message: str

    def to_dict(self) -> dict:
        return {"name": self.name, "ok": self.ok, "message": self.message}


def evidence_gate(evidence: Evidence, lib_sha: str) -> Gate:
    problems = []
    if evidence.verdict != "proven":
        problems.append(f"verdict is {evidence.verdict!r}, not 'proven'")
    if evidence.driver_kind != "real":
        problems.append(f"driver kind is {evidence.driver_kind!r}, not 'real' (a simulated driver proves "
                        "nothing about a node)")
    ev_sha = evidence.artifact_sha256("patched")
    if ev_sha != lib_sha:
        problems.append(f"evidence covers patched sha256 {ev_sha}, not --lib's {lib_sha} (verify these exact bytes)")
    if problems:
        return Gate("evidence", False, "; ".join(problems))
    return Gate("evidence", True, f"proven on a real driver for sha256 {lib_sha[:12]}")


def reference_library(evidence: Evidence, installed: str | None) -> tuple[str | None, str]:
    if installed:
        return installed, f"--installed {installed}"
    base = evidence.variants.get("baseline")
    path, want = (base.artifact.path, base.artifact.sha256) if base else (None, None)
    if path and Path(path).is_file() and sha256_file(path) == want:
        return path, f"the evidence's baseline artifact {path}"
    return None, "no reference library here (pass --installed FILE); each node checks its own"


def line_gate(evidence: Evidence, installed: str | None, hami_versions, node_facts=None) -> Gate:
    """Is the evidence's line the one that fits the nodes? (`node_facts`: a node report's library facts.)"""
    lines = load_lines()
    base = (evidence.upstream or {}).get("base") or ""
    own = next((l for l in lines if l.target == evidence.target), None) or next(
        (l for l in lines if base and l.base == base), None)
    if own is None:
        return Gate("line", False, f"evidence is for {evidence.target} (base {base[:7] or '?'}), which is no series "
                                   "line in compatible_hami.toml")
    if not installed and not hami_versions and node_facts is None:
        return Gate("line", None, "the nodes' library and HAMi version are unknown: pass --installed or --hami-version")
    fit = fit_node(read_lib(installed) if installed else node_facts, lines, hami_versions=hami_versions)
    if fit.line is None:
        return Gate("line", False, f"no series line fits the nodes: {fit.why}")
    if fit.line.target != own.target:
        cmds = "; ".join(drop_in_commands(fit.line, installed=installed, releases=fit.releases)[1:3])
        return Gate("line", False, f"--lib is from line {own.target} (base {own.base[:7]}, shared region {own.shrreg}), "
                                   f"the nodes need line {fit.line.target} (base {fit.line.base[:7]}, shared region "
                                   f"{fit.line.shrreg}): {fit.why}; build its drop-in: {cmds}")
    return Gate("line", True, f"line {own.target} fits the nodes ({fit.why})")


def replacement_gates(lib: str, ref: str | None, ref_desc: str, report=None) -> list[Gate]:
    """identity, symbols, env and loader from replace.judge (the judge `node --lib --candidate` calls)."""
    if ref is not None:
        node = identify(ref)
    elif report is not None and report.library is not None:
        node = Identity.from_json(report.library.identity)
        ref_desc = f"the node report's library {report.library.path} (sha256 {report.library.sha256[:12]})"
    else:
        why = ("the nodes' library is unknown: pass --installed (a copy of it) or --node-report (lucepatch node "
               "--pod NAME --save-report FILE)")
        if report is not None:
            why = f"the node report names no libvgpu.so ({report.state}): {report.what_runs}"
        return [Gate("identity", None, why), Gate("symbols", None, why), Gate("env", None, why),
                Gate("loader", None, why)]
    cand = identify(lib)
    j = judge(Side.of(node, f"the nodes' library ({ref_desc})"), Side.of(cand, f"--lib {Path(lib).name}"),
              pod_glibc=report.pod_glibc if report is not None else None)
    if node.kind in (UPSTREAM, LINE_BUILD):
        ident = Gate("identity", True, f"the nodes run {node.summary}")
    elif node.kind == FORK:
        ident = Gate("identity", not j.vendor_loss,
                     f"the nodes run {node.summary}: "
                     + ("--lib keeps every vendor name" if not j.vendor_loss else
                        "replacing it drops the vendor's machinery, which no flag accepts; the routes: lucepatch node "
                        + (f"--lib {ref}" if ref else "--node-report FILE")))
    else:
        ident = Gate("identity", None, f"the nodes' library is not known: {node.summary}")
    return [ident] + [Gate(f.part, f.ok, f.message) for f in j.findings if f.part in ("symbols", "env", "loader")]


def run_gates(lib: str, evidence_path: str, *, installed: str | None = None, hami_versions=(),
              series: str | None = None, live: bool = False, node_report: str | None = None) -> list[Gate]:
    if not Path(lib).is_file():
        raise UsageError(f"--lib {lib} not found: pass the built libvgpu.so (the one verify ran)")
    evidence = load_evidence(evidence_path)
    report = None
    if node_report:
        report = load_node_report(node_report)
        if installed and report.library is not None and sha256_file(installed) != report.library.sha256:
            raise UsageError(f"--installed {installed} is not the library the node report saw "
                             f"({report.library.path}, sha256 {report.library.sha256[:12]}): pass the node's own copy")
    series = series or evidence.target
    lib_sha = sha256_file(lib)
    gates = [evidence_gate(evidence, lib_sha)]
    if not swap.is_elf(lib):
        gates.append(Gate("elf", False, f"{lib} is not an ELF shared object"))
        return gates
    gates.append(Gate("elf", True, "ELF shared object"))

    if installed or report is None:
        ref, ref_desc = reference_library(evidence, installed)
    else:  # the node report says what the nodes run: it outranks the evidence's baseline artifact
        ref, ref_desc = None, "the node report"
    gates += replacement_gates(lib, ref, ref_desc, report)

    data = compat_data()
    ser = (data.get("series") or {}).get(series, {})
    v_lib = swap.shrreg_version(lib)
    report_ident = report.library.identity if report is not None and report.library is not None else None
    v_ref = swap.shrreg_version(ref) if ref else (report_ident or {}).get("shrreg")
    if not ref and v_ref:
        ref_desc = f"the node report's library {report.library.path}"
    want, want_desc = (v_ref, ref_desc) if v_ref else (ser.get("shrreg"), f"series {series} base")
    if v_lib is None:
        gates.append(Gate("shrreg", None, "shared-region version not determinable from --lib (shrreg_*_version not "
                                          "exported, e.g. a Release build); not checked"))
    elif want is None:
        gates.append(Gate("shrreg", None, f"--lib has shared-region {v_lib}; nothing to compare with"))
    else:
        gates.append(Gate("shrreg", v_lib == want, f"--lib shared-region {v_lib} vs {want} ({want_desc})"))

    compatible = ser.get("compatible") or []
    if not hami_versions:
        gates.append(Gate("compatible_hami", None if not live else False,
                          "HAMi version of the nodes unknown: pass --hami-version (device-plugin image tag)"))
    else:
        bad = [v for v in hami_versions if _norm(v) not in {_norm(c) for c in compatible}]
        gates.append(Gate("compatible_hami", not bad,
                          f"HAMi {', '.join(hami_versions)} in {series}'s compatible list" if not bad else
                          f"HAMi {', '.join(bad)} not in {series}'s compatible list {compatible} "
                          "(lucepatch/data/compatible_hami.toml)"))
    facts = None
    if not installed and report_ident and report_ident.get("facts"):
        facts = LibFacts(**report_ident["facts"])
    gates.append(line_gate(evidence, installed, hami_versions or _report_versions(report), facts))
    return gates


def _report_versions(report) -> list[str]:
    return [v.strip() for v in (report.hami_version or "").split(",") if v.strip()] if report is not None else []


def _norm(v: str) -> str:
    v = str(v).strip()
    return v if v.startswith("v") else "v" + v


def passed(gates: list[Gate], live: bool) -> bool:
    """All gates ok; a skipped (None) gate is acceptable live only for shrreg (a Release build hides
    its version; the DaemonSet re-checks it on each node). Symbols, env, loader and identity need
    the nodes' library (--installed or --node-report) before anything reaches a node."""
    for g in gates:
        if g.ok is False:
            return False
        if g.ok is None and live and g.name not in ("shrreg",):
            return False
    return True
