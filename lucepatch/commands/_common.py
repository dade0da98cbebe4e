"""Options and resolution shared by the verbs."""

from __future__ import annotations

from pathlib import Path

import click

from lucepatch.services import workspace as places

json_option = click.option("--json", "as_json", is_flag=True, help="Print a JSON document (with schema_version) on stdout.")
source_option = click.option("--source", type=click.Path(), default=None,
                             help="Upstream git checkout of the target (never modified except by `apply`).")


def workspace(ctx: click.Context):
    return places.workspace(ctx.obj.get("workspace") if ctx.obj else None)


def cache(ctx: click.Context) -> Path:
    return places.cache(ctx.obj.get("cache_dir") if ctx.obj else None)


def require_source(source: str | None, target_name: str, *, family: str | None = None) -> Path:
    return places.source(source, target_name, family=family)
