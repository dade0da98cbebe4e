"""`lucepatch inspect IMAGE`: provenance from an image's labels (series, patches, evidence).
`lucepatch inspect --lib FILE`: what a libvgpu.so is (lucepatch/lines/identity.py): upstream HAMi-core
at a line (the commits it can be, and how that was decided), a build of a line, a vendor's fork
(its extra names and the environment it reads, grouped), or unknown; and its loader needs."""

from __future__ import annotations

from pathlib import Path

import click

from lucepatch import report
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
    from lucepatch.builders.image import LABEL_PREFIX, docker_client, inspect_labels  # lazy: an image's labels only, 47 ms

    info = inspect_labels(docker_client(), image)
    labels = info["labels"]
    ours = {k: v for k, v in labels.items() if k.startswith(LABEL_PREFIX) or k.startswith("org.opencontainers.")}
    if as_json:
        report.emit_json("inspect", {"image": image, "id": info["id"], "tags": info["tags"], "labels": ours,
                                      "user": info["user"], "healthcheck": info["healthcheck"],
                                      "lucepatch": bool(labels.get(LABEL_PREFIX + "target"))})
    rows = [[k, v] for k, v in sorted(ours.items()) if k != LABEL_PREFIX + "patch-ids"]
    for pid in (labels.get(LABEL_PREFIX + "patch-ids") or "").split(","):
        if pid:
            rows.append(["patch", pid])
    rows.append(["user", info["user"] or "root"])
    report.table(f"inspect {image} ({info['id'][:19]})", ["label", "value"], rows, as_json=as_json)
    if not labels.get(LABEL_PREFIX + "target"):
        report.progress(f"{image} carries no lucepatch labels: not built by lucepatch build --image")
        return EXIT_CHECK_FAILED
    return 0


def _lib(lib: str, as_json: bool) -> int:
    from lucepatch.lines.identity import identify  # lazy: --lib only, 20 ms
    from lucepatch.lines.service import identity_lines  # lazy: --lib only, 20 ms

    if not Path(lib).is_file():
        raise UsageError(f"--lib {lib} not found: pass a libvgpu.so")
    ident = identify(lib)
    if as_json:
        report.emit_json("inspect", {"lib": lib, "identity": ident.to_json(with_names=False)})
    else:
        click.echo(f"library        {lib}")
        click.echo(f"               sha256 {ident.sha256[:16]}…, {ident.size} bytes, {len(ident.exports)} exported symbols")
        for line in identity_lines(ident):
            click.echo(line)
    return 0
