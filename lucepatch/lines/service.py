"""`doctor --lib/--image/--pod` as a service: read the node's library, name its line and the commands."""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from lucepatch.errors import UsageError
from lucepatch.lines import sources
from lucepatch.lines.fit import Fit, drop_in_commands, fit_node, load_lines
from lucepatch.lines.libfacts import LibFacts, read_lib


@dataclass
class NodeLibrary:
    source: str  # the file, "IMAGE:PATH" or "pod NS/NAME:PATH"
    facts: LibFacts
    fit: Fit

    def to_json(self) -> dict:
        return {"source": self.source, "library": self.facts.to_json(), "fit": self.fit.to_json()}


def _facts_of_bytes(data: bytes, save: str | None) -> LibFacts:
    if save:
        Path(save).write_bytes(data)
        return read_lib(save)
    fd, tmp = tempfile.mkstemp(prefix="lucepatch-node-lib-", suffix=".so")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        facts = read_lib(tmp)
    finally:
        os.unlink(tmp)
    return facts


def inspect_node_library(*, lib: str | None = None, image: str | None = None, pod: str | None = None,
                         namespace: str = "default", container: str | None = None, lib_path: str | None = None,
                         hami_versions=(), save: str | None = None, ws=None, context: str | None = None) -> NodeLibrary:
    given = [x for x in (lib, image, pod) if x]
    if len(given) != 1:
        raise UsageError("name exactly one library: --lib FILE, --image IMAGE or --pod NAME")
    if lib:
        if not Path(lib).is_file():
            raise UsageError(f"--lib {lib} not found: pass a copy of the node's libvgpu.so")
        facts, where = read_lib(lib), lib
    elif image:
        data, where = sources.from_image(image, lib_path)
        facts = _facts_of_bytes(data, save)
    else:
        data, where = sources.from_pod(pod, namespace=namespace, container=container,
                                       path=lib_path or sources.POD_LIB_PATH, context=context)
        facts = _facts_of_bytes(data, save)
    if not lib:
        facts.path = save or where
    fit = fit_node(facts, load_lines(ws=ws), hami_versions=hami_versions)
    if fit.line is not None:
        fit.commands = drop_in_commands(fit.line, installed=save or lib, releases=fit.releases, image=image)
    return NodeLibrary(source=where, facts=facts, fit=fit)


def report_lines(node: NodeLibrary) -> list[str]:
    """The human report, one fact per line."""
    f, fit = node.facts, node.fit
    out = [f"library        {node.source}",
           f"               sha256 {f.sha256[:16]}…, {f.size} bytes, {f.machine}, "
           f"{'debug info' if f.debug_info else 'no debug info'}, {f.exported} exported symbols",
           f"shared region  {f.shrreg or 'unknown'}" + (f" (from {f.shrreg_from})" if f.shrreg_from else ""),
           "HAMi-core      " + (f"commit {f.git_hash}" + (f", branch {f.git_branch}" if f.git_branch else "")
                                 if f.git_hash else "no embedded commit"),
           "HAMi release   " + (f"{', '.join(fit.releases)} ({fit.releases_from})" if fit.releases else "unknown")]
    if fit.base_of is not None:
        out.append(f"note           this is {fit.base_of.target}'s upstream base {fit.base_of.base[:7]}, unpatched")
    for n in f.notes:
        out.append(f"note           {n}")
    if fit.line is None:
        out.append(f"line           none fits: {fit.why}")
        return out
    line = fit.line
    profile = line.profile + (f" ({line.profile_detail})" if line.profile_detail else "")
    out += [f"line           {line.describe()}",
            f"why            {fit.why}",
            f"profile        {profile}"]
    if not f.debug_info:
        out.append("               the node's library carries no debug info (Release or stripped); the profile "
                   "builds what upstream's build.sh builds: the deploy gate checks exported symbols and region")
    out.append("drop-in        " + (fit.commands[0] if fit.commands else ""))
    out += [f"               {c}" for c in fit.commands[1:]]
    return out
