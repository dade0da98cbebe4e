"""jinja2 rendering of PR bodies (and other text) from lucepatch's templates.

PR-body templates (templates/pr/) are written for trim_blocks/lstrip_blocks; HTML templates
(`*.html.j2`, the evidence page) are autoescaped; every other template keeps the original whitespace
handling its authors wrote it for.
"""

from __future__ import annotations

import jinja2

_LOADER = jinja2.PackageLoader("lucepatch", "templates")

_env = jinja2.Environment(
    loader=_LOADER,
    undefined=jinja2.StrictUndefined,
    keep_trailing_newline=True,
    trim_blocks=False,
)

_pr_env = jinja2.Environment(
    loader=_LOADER,
    undefined=jinja2.StrictUndefined,
    keep_trailing_newline=True,
    trim_blocks=True,
    lstrip_blocks=True,
)


_html_env = jinja2.Environment(
    loader=_LOADER,
    undefined=jinja2.StrictUndefined,
    autoescape=True,
    trim_blocks=True,
    lstrip_blocks=True,
)


def render(template: str, **ctx) -> str:
    env = _html_env if template.endswith(".html.j2") else _pr_env if template.startswith("pr/") else _env
    return env.get_template(template).render(**ctx)
