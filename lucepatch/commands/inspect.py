"""`lucepatch inspect IMAGE`: provenance from an image's labels (series, patches, evidence)."""

from __future__ import annotations

import click

from lucepatch import report
from lucepatch.commands._common import json_option
from lucepatch.errors import EXIT_CHECK_FAILED


@click.command("inspect")
@click.argument("image")
@json_option
def command(image, as_json):
    """Print what IMAGE was built from: upstream revision, series version/hash, patch ids, evidence."""
    from lucepatch.builders.image import LABEL_PREFIX, docker_client, inspect_labels

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
