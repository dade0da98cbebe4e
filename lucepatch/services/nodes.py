"""`node --lib/--image/--pod/--pod-root/--node-report` as a service: read the
node's library, say what it is (identity), whether the line's build (or --candidate) may replace
it (replace.judge, the same judge deploy's gates call), and then either the commands that build
the drop-in or, for a fork or an unknown library, the routes.

`what_a_line_drops(release)` answers `node --hami-version V` alone: what the line that serves V
would take away from a node that runs V's own HAMi-core.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from lucepatch.errors import UsageError
from lucepatch.k8s.client import pod_exec
from lucepatch.lines import pod as podmod
from lucepatch.lines.fit import Fit, compat_data, drop_in_commands, fit_node, load_lines, norm_release, vendor_rows
from lucepatch.lines.history import family, is_hook, load_history
from lucepatch.lines.identity import FORK, LINE_BUILD, UNKNOWN, UPSTREAM, Identity, identify, line_builds
from lucepatch.lines.replace import DROP_IN, Judgement, Route, Side, judge, routes
from lucepatch.native.libfacts import LibFacts, read_lib
from lucepatch.node.report import NodeReport, load_node_report, save_node_report
from lucepatch.services import node_sources as sources

__all__ = ["inspect_node_library", "what_a_line_drops", "identify_library", "load_node_report", "report_lines",
           "drops_lines", "identity_lines", "Identity", "NodeReport", "NodeLibrary", "Drops"]


@dataclass
class NodeLibrary:
    source: str  # the file, "IMAGE:PATH", "pod NS/NAME:PATH" or "--node-report FILE"
    facts: LibFacts | None
    fit: Fit
    identity: Identity | None = None
    judgement: Judgement | None = None
    candidate: str = ""  # what the judgement compared with
    routes: list[Route] = field(default_factory=list)
    report: NodeReport | None = None

    @property
    def drop_in(self) -> bool:
        return (self.judgement is not None and self.judgement.verdict == DROP_IN and self.identity is not None
                and self.identity.drop_in_possible and self.fit.line is not None)

    def to_json(self) -> dict:
        return {"source": self.source, "library": self.facts.to_json() if self.facts else None, "fit": self.fit.to_json(),
                "identity": self.identity.to_json(with_names=False) if self.identity else None,
                "judgement": self.judgement.to_json() if self.judgement else None, "candidate": self.candidate,
                "drop_in": self.drop_in, "routes": [r.to_json() for r in self.routes],
                "node_report": self.report.to_json() if self.report else None}


def _write_tmp(data: bytes, save: str | None) -> tuple[str, bool]:
    if save:
        Path(save).write_bytes(data)
        return save, False
    fd, tmp = tempfile.mkstemp(prefix="lucepatch-node-lib-", suffix=".so")
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    return tmp, True


def _judge_against(ident: Identity, fit: Fit, candidate: str | None, pod_glibc: str | None) -> tuple[Judgement | None, str]:
    node_side = Side.of(ident, "the node's library")
    if candidate:
        if not Path(candidate).is_file():
            raise UsageError(f"--candidate {candidate} not found: pass the libvgpu.so you would install")
        cand = identify(candidate)
        return judge(node_side, Side.of(cand, f"--candidate {candidate}"), pod_glibc=pod_glibc), f"--candidate {candidate}"
    target = (fit.line.target if fit.line else None) or ident.line
    ref = line_builds().get(target) if target else None
    if ref is None:
        return None, ""
    line = next((l for l in load_lines() if l.target == target), None)
    return (judge(node_side, Side.of_line_build(ref, line.shrreg if line else None), pod_glibc=pod_glibc),
            f"line {target}'s own build")


def inspect_node_library(*, lib: str | None = None, image: str | None = None, pod: str | None = None,
                         pod_root: str | None = None, node_report: str | None = None, namespace: str = "default",
                         container: str | None = None, lib_path: str | None = None, hami_versions=(),
                         save: str | None = None, save_report: str | None = None, candidate: str | None = None,
                         ws=None, context: str | None = None, exec_pod=None) -> NodeLibrary:
    """`exec_pod`: the cluster side's exec into a pod (default for `pod`: k8s/client.py pod_exec)."""
    if pod and exec_pod is None:
        exec_pod = pod_exec
    given = [x for x in (lib, image, pod, pod_root, node_report) if x]
    if len(given) != 1:
        raise UsageError("name exactly one library: --lib FILE, --image IMAGE, --pod NAME, --pod-root DIR or "
                         "--node-report FILE")
    if save_report and not (pod or pod_root):
        raise UsageError("--save-report writes what --pod/--pod-root found; give one of them")
    lines = load_lines(ws=ws)
    report = None
    tmp_to_remove = None
    if lib:
        if not Path(lib).is_file():
            raise UsageError(f"--lib {lib} not found: pass a copy of the node's libvgpu.so")
        where, path = lib, lib
    elif image:
        data, where = sources.from_image(image, lib_path)
        path, temp = _write_tmp(data, save)
        tmp_to_remove = path if temp else None
    elif node_report:
        report = load_node_report(node_report)
        return _from_report(report, f"--node-report {node_report}", lines, hami_versions, candidate)
    else:
        if pod and lib_path:  # the old form: just the file at a path
            data, where = sources.from_pod(pod, namespace=namespace, container=container, path=lib_path, context=context)
            path, temp = _write_tmp(data, save)
            tmp_to_remove = path if temp else None
        else:
            report, snap_data = podmod.collect(pod=pod, root=pod_root, exec_pod=exec_pod, namespace=namespace,
                                               container=container, context=context, hami_versions=hami_versions)
            if save_report:
                save_node_report(report, save_report)
            if report.library is None:
                return _from_report(report, report.collected_from, lines, hami_versions, candidate)
            where = f"{report.collected_from}:{report.library.path}"
            path, temp = _write_tmp(snap_data, save)
            tmp_to_remove = path if temp else None
    try:
        facts = read_lib(path)
        releases = hami_versions or _report_releases(report)
        ident = identify(path, lines=lines, hami_versions=releases)
        fit = fit_node(facts, lines, hami_versions=releases, identified=_identified(ident))
    finally:
        if tmp_to_remove:
            os.unlink(tmp_to_remove)
    if not lib:
        facts.path = ident.path = save or where
    node = NodeLibrary(source=where, facts=facts, fit=fit, identity=ident, report=report)
    _conclude(node, candidate, installed=save or lib, image=image)
    return node


def _identified(ident) -> tuple[str, str] | None:
    """(line, why) when the library's names tie it to a line: upstream HAMi-core at the line's base, or the
    line's own build (lines/fit.py fit_node prefers that line when no release is known)."""
    if ident is not None and ident.kind in (UPSTREAM, LINE_BUILD) and ident.line:
        return ident.line, ident.summary
    return None


def _report_releases(report) -> list[str]:
    return [v.strip() for v in (report.hami_version or "").split(",") if v.strip()] if report else []


def _from_report(report: NodeReport, source: str, lines, hami_versions, candidate) -> NodeLibrary:
    """A node report read offline: the identity it carries, judged like a file."""
    releases = list(hami_versions) or _report_releases(report)
    if report.library is None:
        fit = fit_node(None, lines, hami_versions=releases) if releases else Fit(
            line=None, why=f"no libvgpu.so in the report: {report.what_runs}")
        return NodeLibrary(source=source, facts=None, fit=fit, report=report)
    ident = Identity.from_json(report.library.identity)
    if ident.facts is None:
        raise UsageError(f"{source}: the report's library has no facts; write it again with lucepatch node --pod")
    facts = ident.facts
    fit = fit_node(facts, lines, hami_versions=releases, identified=_identified(ident))
    node = NodeLibrary(source=source, facts=facts, fit=fit, identity=ident, report=report)
    _conclude(node, candidate, installed=None, image=None)
    return node


def _conclude(node: NodeLibrary, candidate, *, installed, image) -> None:
    ident, fit = node.identity, node.fit
    pod_glibc = node.report.pod_glibc if node.report else None
    node.judgement, node.candidate = _judge_against(ident, fit, candidate, pod_glibc)
    if ident.kind == FORK or ident.kind == UNKNOWN or not node.drop_in:
        node.routes = routes(ident, node_lib=installed or "<copy of the node's libvgpu.so>")
    if node.drop_in:
        fit.commands = drop_in_commands(fit.line, installed=installed, releases=fit.releases, image=image)


# ----------------------------------------------------------------------------------- node --hami-version alone
@dataclass
class Drops:
    release: str
    hami_core: str | None
    region: str | None
    line: str | None
    why: str
    dropped_hooks: list[str] = field(default_factory=list)
    added_hooks: list[str] = field(default_factory=list)
    commits_between: int | None = None
    note: str = ""

    def to_json(self) -> dict:
        return self.__dict__.copy()


def what_a_line_drops(release: str, ws=None) -> Drops:
    """What the line that serves `release` would take away from a node running that release's HAMi-core."""
    release = norm_release(release)
    data = compat_data()
    row = next((r for r in data.get("release", []) if norm_release(r["hami"]) == release), None)
    lines = load_lines(ws=ws)
    fit = fit_node(None, lines, hami_versions=[release])
    out = Drops(release, row.get("hami_core") if row else None, row.get("shrreg") if row else None,
                fit.line.target if fit.line else None, fit.why)
    if row is None:
        vendor = vendor_rows([release], data)
        out.why = (f"HAMi {release} is no upstream release in lucepatch/data/compatible_hami.toml"
                   + ("".join(f"; {v['distribution']} {', '.join(v.get('versions', []))} ships {v['hami']}, a vendor's "
                              f"own library ({v['source']})" for v in vendor) if vendor else " (a vendor's tag?)")
                   + ": read the node's library instead (node --pod / --lib)")
        return out
    if fit.line is None:
        return out
    hist = load_history()
    st = hist.state_of(out.hami_core) if out.hami_core else None
    ref = line_builds().get(fit.line.target)
    if st is None or ref is None:
        out.note = (f"HAMi-core {str(out.hami_core)[:7]} is not in the scanned first-parent history to {hist.ref[:7]}: "
                    "what the line drops there is unknown")
        return out
    line_hooks = {family(n) for n in ref.exports if is_hook(n)}
    out.dropped_hooks = sorted(st.hooks - line_hooks)
    out.added_hooks = sorted(line_hooks - st.hooks)
    base_state = hist.state_of(fit.line.base)
    order = [c for s in hist.states for c in s.commits]
    try:
        out.commits_between = order.index(out.hami_core[:12]) - order.index(fit.line.base[:12])
    except ValueError:
        out.commits_between = None
    ser = (data.get("series") or {}).get(fit.line.target, {})
    out.note = ser.get("note", "")
    if base_state is not None and base_state.first == st.first:
        out.why += f"; {str(out.hami_core)[:7]} has the line base's hook set"
    return out


# ----------------------------------------------------------------------------------- the human report
def _n(names, k: int = 5) -> str:
    names = list(names)
    return ", ".join(names[:k]) + (f", … (+{len(names) - k})" if len(names) > k else "")


def identity_lines(ident: Identity, *, here: bool = True) -> list[str]:
    out = [f"identity       {ident.kind}: {ident.summary}"]
    out += [("decided by     " if i == 0 else "               ") + d for i, d in enumerate(ident.decided_by)]
    for g in ident.foreign:
        out.append(f"foreign        {g.group}{' (vendor)' if g.vendor else ''} {len(g.names)}: {_n(g.names)}")
    if ident.renamed:
        out.append(f"renamed hooks  {len(ident.renamed)} hooks under other CUDA entry-point versions than "
                   f"{ident.compared_with or 'the line build'}: " + _n(f"{a} (line: {b})" for a, b in ident.renamed))
    if ident.env_extra:
        out.append("environment    reads beyond " + (ident.compared_with or "the line's build") + ": "
                   + "; ".join(f"{g.group}{' (vendor)' if g.vendor else ''}: {', '.join(g.names)}" for g in ident.env_extra))
    ld = ident.loader
    out.append(f"loader         NEEDED {', '.join(ld.needed) or 'none'}; newest GLIBC_{ld.newest_glibc or '?'}; "
               + (f"GLIBC_PRIVATE: {', '.join(r.name for r in ld.private)}" if ld.private else "no GLIBC_PRIVATE symbol"))
    for c in ident.cannot_run:
        out.append(f"cannot run     {c}")
    if ident.here and here:
        out.append(f"here           cannot load on this machine: {'; '.join(ident.here)}")
    elif ident.here_lazy and here:
        out.append(f"here           loads on this machine (glibc {ident.here_glibc}); "
                   + "; ".join(n.split(" (a PLT call)")[0] for n in ident.here_lazy)  # "<ref> is bound lazily"
                   + " (see cannot run)")
    return out


def report_lines(node: NodeLibrary) -> list[str]:
    """The human report, one fact per line."""
    out: list[str] = []
    if node.report is not None and not node.report.from_doctor:
        r = node.report
        out += [f"node           {r.node or 'unnamed'}: driver {r.driver_version or 'unknown'} ({r.source})",
                f"               {r.what_runs}"]
        return out
    if node.report is not None:
        r = node.report
        out += [f"pod            {r.collected_from}",
                f"injection      {r.injection.state}: {r.injection.message}",
                f"driver         {r.driver.value or 'unknown'} ({r.driver.source}{'; ' + r.driver.note if r.driver.note else ''})",
                f"HAMi           {r.hami.value or 'unknown'} ({r.hami.source}{'; ' + r.hami.note if r.hami.note else ''}); "
                f"vendor {r.vendor.value or 'unknown'} ({r.vendor.source})",
                f"glibc          {r.glibc.value or 'unknown'} ({r.glibc.source})"]
        lim = r.limits
        if lim.get("memory_mib") or lim.get("sm_percent") or lim.get("gpu_mode"):
            out.append("limits         " + "; ".join(
                [f"memory GPU {k}: {v:g} MiB" if isinstance(v, (int, float)) else f"memory GPU {k}: {v}"
                 for k, v in lim.get("memory_mib", {}).items()]
                + [f"SM GPU {k}: {v} %" for k, v in lim.get("sm_percent", {}).items()]
                + [f"mode GPU {k}: {v}" for k, v in lim.get("gpu_mode", {}).items()]))
        if r.loads.get("ok") is False:
            out.append(f"loads          NO, in this pod: {'; '.join(r.loads['problems'])}")
        elif r.loads.get("ok"):
            out.append(f"loads          yes ({r.loads.get('against')})"
                       + "".join(f"; {n}" for n in r.loads.get("lazy") or []))
        for n in r.notes:
            out.append(f"note           {n}")
        if node.identity is None:
            out.append(f"line           {node.fit.why}" if node.fit.line is None else f"line           {node.fit.line.describe()}")
            return out
    f, fit, ident = node.facts, node.fit, node.identity
    out += [f"library        {node.source}",
            f"               sha256 {f.sha256[:16]}…, {f.size} bytes" + (f", {f.machine}" if f.machine else "")
            + (f", {'debug info' if f.debug_info else 'no debug info'}, {f.exported} exported symbols" if f.machine else
               f", {f.exported} exported symbols")]
    out += identity_lines(ident, here=node.report is None)  # a report's "loads" line says it for the pod
    out += [f"shared region  {f.shrreg or 'unknown'}" + (f" (from {f.shrreg_from})" if f.shrreg_from else ""),
            "HAMi release   " + (f"{', '.join(fit.releases)} ({fit.releases_from})" if fit.releases else "unknown")]
    if fit.base_of is not None:
        out.append(f"note           this is {fit.base_of.target}'s upstream base {fit.base_of.base[:7]}, unpatched")
    if fit.line is not None:
        out.append(f"line           {fit.line.describe()}")
    else:
        out.append(f"line           none fits: {fit.why}")
    if node.judgement is not None:
        j = node.judgement
        out.append(f"replacement    {j.verdict} by {node.candidate}")
        for x in j.findings:
            out.append(f"               {'ok  ' if x.ok else 'NO  '}{x.part}: {x.message}")
    elif ident.kind != UNKNOWN:
        out.append("replacement    no line build to compare with (pass --candidate LIB)")
    if node.drop_in:
        line = fit.line
        profile = line.profile + (f" ({line.profile_detail})" if line.profile_detail else "")
        out += [f"why            {fit.why}", f"profile        {profile}"]
        if not f.debug_info and f.machine:
            out.append("               the node's library carries no debug info (Release or stripped); the profile "
                       "builds what upstream's build.sh builds: the deploy gate checks exported symbols and region")
        out.append("drop-in        " + (fit.commands[0] if fit.commands else ""))
        out += [f"               {c}" for c in fit.commands[1:]]
        return out
    out.append("routes         " + ("the node runs a vendor's fork: do not replace it; in order:" if ident.kind == FORK
                                    else "no drop-in for this library; in order:"))
    for i, r in enumerate(node.routes, 1):
        out.append(f"               {i}. {r.name}: {r.what}")
        out += [f"                  $ {c}" for c in r.commands]
    return out


def drops_lines(d: Drops) -> list[str]:
    out = [f"HAMi release   {d.release}: HAMi-core {str(d.hami_core)[:7] if d.hami_core else 'unknown'}, shared region "
           f"{d.region or 'unknown'}",
           f"line           {d.line or 'none'}: {d.why}"]
    if d.line and (d.dropped_hooks or d.added_hooks or d.commits_between is not None):
        if d.commits_between is not None:
            out.append(f"               {d.release}'s HAMi-core is {d.commits_between} first-parent commits past the line's base")
        out.append(f"drops          {len(d.dropped_hooks)} hook(s) {d.release}'s HAMi-core has and the line's build does not: "
                   + (", ".join(d.dropped_hooks) or "none"))
        if d.added_hooks:
            out.append(f"               (the line's build hooks {', '.join(d.added_hooks)} that it does not)")
    if d.note:
        out.append(f"note           {d.note}")
    return out


def identify_library(path: str | Path) -> Identity:
    """What a libvgpu.so is (`node --lib`; lines/identity.py): `.kind` upstream /
    line-build / fork / unknown, `.line`, `.commits`, `.decided_by`, `.foreign` (a fork's extra names,
    grouped), `.env_extra`, `.loader` (GLIBC_PRIVATE needs, newest GLIBC, NEEDED) and `.cannot_run`;
    UsageError when `path` (`~` expanded) is no file."""
    path = Path(path).expanduser()
    if not Path(path).is_file():
        raise UsageError(f"--lib {path} not found: pass a libvgpu.so")
    return identify(path)
