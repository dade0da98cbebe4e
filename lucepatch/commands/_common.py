"""Options, resolution and tables shared by the verbs (the library is reached through lucepatch.api only)."""

from __future__ import annotations

import tomllib
from pathlib import Path

import click

from lucepatch import api, report
from lucepatch.errors import UsageError

json_option = click.option("--json", "as_json", is_flag=True, help="Print a JSON document (with schema_version) on stdout.")
source_option = click.option("--source", type=click.Path(), default=None,
                             help="Upstream git checkout of the target (never modified except by `apply`).")
fetch_option = click.option("--fetch", is_flag=True, help="Allow a `git fetch` when the base commit is not in the checkout.")


def workspace(ctx: click.Context):
    return api.open_workspace(ctx.obj.get("workspace") if ctx.obj else None)


def cache(ctx: click.Context) -> Path:
    return api.cache_dir(ctx.obj.get("cache_dir") if ctx.obj else None)


def load_checked(ctx, target):
    """(workspace, target) with every patch parsed before any output; an open (or interrupted)
    rebase session of the target is noted, with how to resume or abort it."""
    ws = workspace(ctx)
    t, line = api.load_checked(ws, target, cache(ctx))
    if line:
        report.err.print(f"lucepatch: note: {line}", markup=False, highlight=False)
    return ws, t


def _where(st, r) -> str:
    """A sub-target's table title: where the commit it was applied on holds it (engine/layout.py)."""
    pl = getattr(r, "place", None)
    if pl is None or pl.kind == "submodule":
        return f"submodule {pl.path if pl else st.path} ({st.label})" + (f", moved from {pl.declared}" if pl and pl.moved else "")
    if pl.kind == "folder":
        return f"folder {pl.path}/ ({st.label}, in the superproject)"
    return f"{st.label}: not in the superproject ({pl.declared} absent)"


def print_outcomes(title: str, result, *, as_json: bool = False) -> None:
    """One table per sub-target: the target's, then each submodule's (result.subs)."""
    for head, r in [(title, result)] + [(f"  {_where(st, r)} onto {r.base[:12]}", r) for st, r in result.subs]:
        report.table(head, ["#", "patch", "status", "commit", "detail"],
                     [[i, o.patch.name, o.status + (" (after conflict)" if o.after_conflict and o.status != api.CONFLICT else ""),
                       (o.commit or "")[:12], o.detail] for i, o in enumerate(r.outcomes, 1)], as_json=as_json)


# ---- which options each mode takes (lucepatch/data/verb_modes.toml) ------------------------------
# data, read once per process: the file holds the table the refusal below and tests/test_verb_options.py read
MODES_FILE = Path(__file__).resolve().parent.parent / "data" / "verb_modes.toml"
_MODES: dict = {}


def verb_modes() -> dict:
    """The table: {verb: {"common": [...], "mode": [{name, when, chosen, takes}, ...]}}."""
    if not _MODES:
        _MODES.update(tomllib.loads(MODES_FILE.read_text(encoding="utf-8")))
    return _MODES


def flag_of(p: click.Parameter) -> str:
    """The option as the table and a person name it: its first long spelling (--jobs for -j/--jobs)."""
    return next((o for o in p.opts if o.startswith("--")), p.opts[0])


def given_options(ctx: click.Context) -> list[str]:
    """The options given on the command line (not their defaults), in the command's order."""
    return [flag_of(p) for p in ctx.command.params if isinstance(p, click.Option)
            and ctx.get_parameter_source(p.name) is click.core.ParameterSource.COMMANDLINE]


def mode_of(verb: str, given: list[str], chosen: str | None = None) -> dict:
    """The mode the command chose from what it read (`chosen`: a mode's name), else the first mode not
    chosen by a command whose `when` options are all given, else the verb's default."""
    modes = verb_modes()[verb]["mode"]
    if chosen is not None:
        return next(m for m in modes if m["name"] == chosen)
    for m in modes:
        if m.get("when") and not m.get("chosen") and all(w in given for w in m["when"]):
            return m
    default = next((m for m in modes if not m.get("when") and not m.get("chosen")), None)
    if default is None:  # every mode is named by an option: say which
        raise UsageError(f"{verb} needs one of " + _and([" ".join(m["when"]) for m in modes if m.get("when")], "or"))
    return default


def _and(words, conj: str = "and") -> str:
    words = list(words)
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + f" {conj} " + words[-1]


def refuse_unused(ctx: click.Context, verb: str, *, chosen: str | None = None) -> str:
    """Refuse (UsageError, exit 2) an option the selected mode of `verb` does not use, with one line
    naming the modes that do; return the mode's name. No option is silently ignored."""
    table = verb_modes()[verb]
    given = given_options(ctx)
    m = mode_of(verb, given, chosen)
    takes = set(table.get("common", [])) | set(m.get("takes", [])) | set(m.get("when", []))
    unused = [flag for flag in given if flag not in takes]
    if unused:
        groups: dict[tuple, list[str]] = {}  # who uses them -> the flags: one clause per group
        for flag in unused:
            users = tuple(o["name"] for o in table["mode"] if flag in o.get("takes", []) or flag in o.get("when", []))
            groups.setdefault(users, []).append(flag)
        raise UsageError(f"{m['name']} does not use " + "; ".join(
            ", ".join(flags) + (f" (used by {_and(users)})" if users else "") for users, flags in groups.items()))
    return m["name"]
