"""`lucepatch inspect IMAGE`: provenance from an image's labels (series, patches, evidence).
`lucepatch inspect --lib FILE`: what a libvgpu.so is (lucepatch/lines/identity.py): upstream HAMi-core
at a line (the commits it can be, and how that was decided), a build of a line, a vendor's fork
(its extra names and the environment it reads, grouped), or unknown; and its loader needs."""

from __future__ import annotations

import click

from lucepatch import api, report
from lucepatch.commands._common import json_option
from lucepatch.errors import EXIT_CHECK_FAILED, UsageError


@click.command("inspect")
@click.argument("image", required=False)
@click.option("--lib", "lib", type=click.Path(dir_okay=False), default=None, help="Classify this libvgpu.so instead.")
@json_option
def command(image, lib, as_json):
    """Print what IMAGE was built from (upstream revision, series version/hash, patch ids, evidence),
    or with --lib what a libvgpu.so is and what it needs of the loader."""
    if bool(image) == bool(lib):
        raise UsageError("inspect takes an IMAGE or --lib FILE (one of them)")
    if lib:
        return _lib(lib, as_json)
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


def _lib(lib: str, as_json: bool) -> int:
    ident = api.identify_library(lib)
    if as_json:
        report.emit_json("inspect", {"lib": lib, "identity": ident.to_json(with_names=False)})
    else:
        click.echo(f"library        {lib}")
        click.echo(f"               sha256 {ident.sha256[:16]}…, {ident.size} bytes, {len(ident.exports)} exported symbols")
        for line in api.identity_lines(ident):
            click.echo(line)
    return 0
