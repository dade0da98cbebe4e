"""`lucepatch inspect IMAGE`: provenance from an image's labels (series, patches, evidence). What a
libvgpu.so is, is `lucepatch node --lib FILE` (`inspect --lib` was a subset of it: main.py rewrites
that spelling, with a note)."""

from __future__ import annotations

import click

from lucepatch import api, report
from lucepatch.commands._common import json_option, refuse_unused
from lucepatch.errors import EXIT_CHECK_FAILED


@click.command("inspect")
@click.argument("image")
@json_option
@click.pass_context
def command(ctx, image, as_json):
    """Print what IMAGE was built from (upstream revision, series version/hash, patch ids, evidence)."""
    refuse_unused(ctx, "inspect")
    info = api.image_provenance(image)
    if as_json:
        report.emit_json("inspect", {"image": image, "id": info["id"], "tags": info["tags"], "labels": info["labels"],
                                      "user": info["user"], "healthcheck": info["healthcheck"],
                                      "lucepatch": info["lucepatch"]})
    rows = [[k, v] for k, v in sorted(info["labels"].items()) if k != info["patch_ids_label"]]
    rows += [["patch", pid] for pid in info["patch_ids"]]
    rows.append(["user", info["user"] or "root"])
    report.table(f"inspect {image} ({info['id'][:19]})", ["label", "value"], rows, as_json=as_json)
    if not info["lucepatch"]:
        report.progress(f"{image} carries no lucepatch labels: not built by lucepatch build --image")
        return EXIT_CHECK_FAILED
    return 0
