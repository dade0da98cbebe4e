"""jinja2 rendering of PR bodies (and other text) from lucepatch's templates."""

from __future__ import annotations

import jinja2

_env = jinja2.Environment(
    loader=jinja2.PackageLoader("lucepatch", "templates"),
    undefined=jinja2.StrictUndefined,
    keep_trailing_newline=True,
    trim_blocks=True,
    lstrip_blocks=True,
)


def render(template: str, **ctx) -> str:
    return _env.get_template(template).render(**ctx)
