"""`lucepatch node --lib FILE | --image IMAGE | --pod NAME | --pod-root DIR | --node-report FILE`: what a
node's libvgpu.so is (upstream at a line, a build of a line, a vendor's fork, unknown), what it needs of
the loader, whether the line's build (or --candidate LIB) may replace it — the same judge as deploy's
gates — and then the drop-in's commands or the routes (lucepatch/lines/). `--pod`/`--pod-root` also say
whether a libvgpu.so is preloaded at all, the driver, the HAMi the pod sees and the limits;
`--save-report FILE` keeps that as a node report. `node --hami-version V` alone: what the line serving
V would drop on a node running V. (Was `doctor --lib ...` and `inspect --lib`: main.py rewrites those.)

Exit 0 when a drop-in exists, 1 when none does (a fork, an unknown library, a refused replacement, no
line); `--hami-version` alone: 0.
"""

from __future__ import annotations

import click

from lucepatch import api, report
from lucepatch.commands._common import json_option, refuse_unused, workspace
from lucepatch.errors import CheckFailed


@click.command("node")
@click.option("--lib", "lib", type=click.Path(dir_okay=False), default=None,
              help="A node's libvgpu.so: what it is, and what may replace it.")
@click.option("--image", default=None, help="Read the libvgpu.so out of this local image (never run), e.g. HAMi's device plugin.")
@click.option("--pod", default=None, help="What runs in this pod: preload, library, driver, limits (needs LUCEPATCH_KUBECONFIG).")
@click.option("--pod-root", type=click.Path(file_okay=False), default=None,
              help="Read this directory as the pod's filesystem (inside a pod: /).")
@click.option("--node-report", type=click.Path(dir_okay=False), default=None,
              help="Read a node report (node --pod ... --save-report) offline.")
@click.option("--namespace", default="default", show_default=True, help="Namespace of --pod.")
@click.option("--container", default=None, help="Container of --pod (default: its first).")
@click.option("--lib-path", default=None, help="Path of the library inside --image / --pod (default: HAMi's locations).")
@click.option("--hami-version", "hami_versions", multiple=True,
              help="The node's HAMi release (e.g. v2.5.1, the device-plugin image tag); repeatable. Alone: what the "
                   "line serving it would drop on such a node.")
@click.option("--candidate", type=click.Path(dir_okay=False), default=None,
              help="Judge this library as the replacement (default: the line's own build).")
@click.option("--save", type=click.Path(dir_okay=False), default=None, help="With --image/--pod: keep the library here.")
@click.option("--save-report", type=click.Path(dir_okay=False), default=None,
              help="With --pod/--pod-root: write the node report here (JSON, docs/schema/node-report.schema.json).")
@click.option("--context", default=None, help="kubeconfig context for --pod.")
@json_option
@click.pass_context
def command(ctx, lib, image, pod, pod_root, node_report, namespace, container, lib_path, hami_versions, candidate, save,
            save_report, context, as_json):
    """What a node runs (--lib FILE, --image IMAGE, --pod NAME, --pod-root DIR, --node-report FILE) and what may
    replace it, or with --hami-version alone what the line serving that release would drop."""
    refuse_unused(ctx, "node")
    if lib or image or pod or pod_root or node_report:
        return _node_library(ctx, lib=lib, image=image, pod=pod, pod_root=pod_root, node_report=node_report,
                             namespace=namespace, container=container, lib_path=lib_path, hami_versions=hami_versions,
                             candidate=candidate, save=save, save_report=save_report, context=context, as_json=as_json)
    return _drops(ctx, hami_versions, as_json)


def _node_library(ctx, *, as_json, **kw):
    node = api.inspect_node_library(ws=workspace(ctx), **kw)
    if as_json:
        report.emit_json("node", {"node_library": node.to_json(), "ok": node.drop_in})
    else:
        for line in api.report_lines(node):
            click.echo(line)
    if kw.get("save_report"):
        report.progress(f"node report written to {kw['save_report']}")
    if node.identity is None:
        raise CheckFailed(f"no libvgpu.so runs in {node.source}: {node.report.what_runs}" if node.report else
                          f"no series line fits {node.source}: {node.fit.why}")
    if not node.drop_in:
        if node.identity.kind in ("fork", "unknown"):
            why = node.identity.summary
        elif node.fit.line is None:
            raise CheckFailed(f"no series line fits {node.source}: {node.fit.why}")
        else:
            why = next((f.message for f in node.judgement.findings if not f.ok), "") if node.judgement else node.fit.why
        raise CheckFailed(f"no drop-in for {node.source} ({node.identity.kind}): {why[:300]}; the routes are listed above")
    return 0


def _drops(ctx, hami_versions, as_json):
    found = [api.what_a_line_drops(v, ws=workspace(ctx)) for v in hami_versions]
    if as_json:
        report.emit_json("node", {"hami_versions": [d.to_json() for d in found]})
    else:
        for d in found:
            for line in api.drops_lines(d):
                click.echo(line)
    return 0
