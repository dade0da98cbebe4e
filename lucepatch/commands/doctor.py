"""`lucepatch doctor`: what is present or missing here, with the fix for each, and which verbs need it
(the checks live in lucepatch/doctor.py).

`doctor --lib FILE | --image IMAGE | --pod NAME`: which series line fits the node that library
comes from, its profile and the commands that build its drop-in replacement (lucepatch/lines/).

Exit 0, or 3 when something a verb named with `--for` needs is missing (without `--for`: when git,
which every verb needs, is missing or too old). With a library: 0 when a line fits, 1 when none does.
"""

from __future__ import annotations

import click

from lucepatch import report
from lucepatch.commands._common import json_option, workspace
from lucepatch.doctor import VERBS, blocking, diagnose
from lucepatch.errors import EXIT_ENVIRONMENT, CheckFailed
from lucepatch.report import KEY, TEXT, Col


@click.command("doctor")
@click.option("--for", "for_verbs", multiple=True, type=click.Choice(VERBS),
              help="Exit 3 if something this verb needs is missing (repeatable).")
@click.option("--lib", "lib", type=click.Path(dir_okay=False), default=None,
              help="A node's libvgpu.so: name the series line that replaces it.")
@click.option("--image", default=None, help="Read the libvgpu.so out of this local image (never run), e.g. HAMi's device plugin.")
@click.option("--pod", default=None, help="Read the libvgpu.so mapped into this running pod (needs LUCEPATCH_KUBECONFIG).")
@click.option("--namespace", default="default", show_default=True, help="Namespace of --pod.")
@click.option("--container", default=None, help="Container of --pod (default: its first).")
@click.option("--lib-path", default=None, help="Path of the library inside --image / --pod (default: HAMi's locations).")
@click.option("--hami-version", "hami_versions", multiple=True,
              help="The node's HAMi release (e.g. v2.5.1, the device-plugin image tag); repeatable.")
@click.option("--save", type=click.Path(dir_okay=False), default=None, help="With --image/--pod: keep the library here.")
@click.option("--context", default=None, help="kubeconfig context for --pod.")
@json_option
@click.pass_context
def command(ctx, for_verbs, lib, image, pod, namespace, container, lib_path, hami_versions, save, context, as_json):
    """Show which tools lucepatch can use here (git, cmake, nvcc, nvml.h, docker, GPU/driver, valgrind, quilt),
    or with --lib/--image/--pod which series line fits a node's libvgpu.so."""
    if lib or image or pod:
        return _node_library(ctx, lib, image, pod, namespace, container, lib_path, hami_versions, save, context, as_json)
    items = diagnose()
    block = blocking(items, list(for_verbs))
    if as_json:
        report.emit_json("doctor", {"items": [i.to_json() for i in items], "for": list(for_verbs),
                                    "blocking": [i.name for i in block], "ok": not block})
    else:
        # the fix of each missing tool is prose too long for a column: whole, under the table
        report.table("lucepatch doctor", [Col("tool", KEY), Col("status", KEY), Col("version", TEXT), Col("detail", TEXT),
                                          Col("needed by", TEXT)],
                     [[i.name, "present" if i.ok else "MISSING", i.version, i.detail,
                       ", ".join(i.needed_by) or "optional"] for i in items],
                     notes=[f"fix {i.name}: {i.remedy}" for i in items if not i.ok])
    for i in block:
        report.progress(f"{i.name} is missing ({i.detail}); needed by {', '.join(v for v in i.needed_by if not for_verbs or v in for_verbs)}: {i.remedy}")
    return EXIT_ENVIRONMENT if block else 0


def _node_library(ctx, lib, image, pod, namespace, container, lib_path, hami_versions, save, context, as_json):
    from lucepatch.lines.service import inspect_node_library, report_lines

    node = inspect_node_library(lib=lib, image=image, pod=pod, namespace=namespace, container=container,
                                lib_path=lib_path, hami_versions=hami_versions, save=save, ws=workspace(ctx),
                                context=context)
    if as_json:
        report.emit_json("doctor", {"node_library": node.to_json(), "ok": node.fit.line is not None})
    else:
        for line in report_lines(node):
            click.echo(line)
    if node.fit.line is None:
        raise CheckFailed(f"no series line fits {node.source}: {node.fit.why}")
    return 0
