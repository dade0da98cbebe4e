"""Reading evidence as a person does: the verdict table, the provenance, one glyph per run.

model.py   the view of one Evidence (pure data; the terminal, the HTML page and the PR body use it)
terminal.py  rich renderables (verify's table, show's provenance and per-run strip)
page.py    the self-contained HTML page (jinja2: templates/show/evidence.html.j2)
"""
