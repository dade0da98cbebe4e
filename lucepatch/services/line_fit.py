"""Which line of a series family fits an upstream checkout (issue 37: Lucebox has a line on 8305b6c, where
llama.cpp is a submodule, and one on 62880e2, where it is vendored; HAMi-core's lines are chosen from
the node's library instead, lucepatch/lines/fit.py).

For each line (target) of the family, at the checkout's HEAD:
  base       the line's pinned base: HEAD itself, an ancestor N first-parent commits behind, ahead of
             HEAD, unrelated, or not in the checkout (with the fetch that brings it)
  layout     each sub-target where HEAD holds it (engine/layout.py) against where the line's base holds it
  applies    the line's series checked --onto HEAD (every sub-target where HEAD holds it): conflicts
A line fits when its base is HEAD or an ancestor, every sub-target is laid out as at its base and the
series applies at HEAD with no conflict; of those the nearest base wins. Nothing is written.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from lucepatch import git
from lucepatch.engine.subtargets import check_all, placed
from lucepatch.errors import LucepatchError, UsageError
from lucepatch.target import Target, list_targets, load_target
from lucepatch.workspace import Workspace


@dataclass
class LineFit:
    target: str
    base: str
    relation: str  # "at HEAD" | "ancestor" | "ahead of HEAD" | "unrelated" | "not in the checkout"
    behind: int | None = None  # first-parent commits from the base to HEAD (ancestor)
    layouts: list[dict] = field(default_factory=list)  # per sub-target: at the base, at HEAD, same
    conflicts: list[str] | None = None  # patches that conflict at HEAD (None: not checked)
    why: str = ""

    @property
    def fits(self) -> bool:
        return self.relation in ("at HEAD", "ancestor") and all(d["same"] for d in self.layouts) and self.conflicts == []

    def to_json(self) -> dict:
        return {"target": self.target, "base": self.base, "relation": self.relation, "behind": self.behind,
                "layouts": self.layouts, "conflicts": self.conflicts, "fits": self.fits, "why": self.why}


def _relation(source: Path, base: str | None, head: str) -> tuple[str, int | None]:
    if base is None:
        return "not in the checkout", None
    if base == head:
        return "at HEAD", 0
    anc = lambda a, b: git.run(source, "merge-base", "--is-ancestor", a, b, check=False).status == 0  # noqa: E731
    if anc(base, head):
        n = int(git.run(source, "rev-list", "--count", "--first-parent", f"{base}..{head}").stdout.strip() or 0)
        return "ancestor", n
    return ("ahead of HEAD", None) if anc(head, base) else ("unrelated", None)


def fit_line(t: Target, source: Path, head: str, cache: Path) -> LineFit:
    base = git.try_resolve(source, t.base)
    rel, behind = _relation(source, base, head)
    fit = LineFit(t.name, t.base, rel, behind)
    if base is None:
        fit.why = f"base {t.base[:12]} is not in {source} ({git.fetch_hint(source, t.upstream_urls, t.base)})"
        return fit
    try:
        at_base = {st.path: pl for st, pl in placed(t, source, None)}
        for st, pl in placed(t, source, head):
            was = at_base[st.path]
            fit.layouts.append({"sub_target": st.label, "at_base": was.describe(), "at_head": pl.describe(),
                                "same": was.kind == pl.kind and was.path == pl.path})
        res = check_all(t, source, cache, onto=head)
        fit.conflicts = [o.patch.name for o in res.all_conflicts]
    except LucepatchError as exc:  # e.g. a submodule HEAD pins is not initialised: say so, judge nothing
        fit.why = str(exc)
        return fit
    moved = [d["sub_target"] for d in fit.layouts if not d["same"]]
    fit.why = ("; ".join(f"{d['sub_target']}: {d['at_base']} at the base, {d['at_head']} at HEAD" for d in fit.layouts
                         if not d["same"]) if moved else
               f"{len(fit.conflicts)} patch(es) conflict at HEAD" if fit.conflicts else
               "base is HEAD" if rel == "at HEAD" else
               f"base is {behind} first-parent commit(s) behind HEAD" if rel == "ancestor" else f"base is {rel}")
    return fit


def family_of_checkout(ws: Workspace, source: Path, family: str | None = None) -> str:
    """`family` when given (checked), else the family whose upstream (or a former name) is a remote of
    the checkout; one line naming the families when none or several match."""
    targets = [load_target(ws, n) for n in list_targets(ws)]
    families = sorted({t.family for t in targets})
    if family is not None:
        if family not in families:
            raise UsageError(f"--family {family}: not a series family of this workspace ({', '.join(families)})")
        return family
    with git.repo_at(source) as repo:
        urls = [u for r in repo.remotes for u in r.urls]
    hits = sorted({t.family for t in targets for u in urls for up in t.upstream_urls if git._same_repo(u, up)})
    if len(hits) != 1:
        raise UsageError(f"cannot tell which series family {source} is a checkout of ("
                         f"{'its remotes match ' + ', '.join(hits) if hits else 'no remote names an upstream of'} "
                         f"{', '.join(families) if not hits else ''}); pass --family NAME".replace(" )", ")"))
    return hits[0]


def which_line(ws: Workspace, family: str, source: Path, cache: Path) -> dict:
    """Every line of `family` judged at `source`'s HEAD, and the one that fits (None when none does)."""
    head = git.resolve_commit(source, "HEAD", what="HEAD", remedy="the checkout has no commits")
    lines = [t for t in (load_target(ws, n) for n in list_targets(ws)) if t.family == family]
    fits = [fit_line(t, Path(source), head, cache) for t in lines]
    ok = [f for f in fits if f.fits]
    best = min(ok, key=lambda f: f.behind) if ok else None
    return {"family": family, "head": head, "lines": [f.to_json() for f in fits],
            "fits": best.target if best else None,
            "verdict": (f"{best.target} fits {head[:12]} ({best.why})" if best else
                        f"no line of {family} fits {head[:12]}: " + "; ".join(f"{f.target}: {f.why}" for f in fits))}


__all__ = ["LineFit", "fit_line", "which_line", "family_of_checkout"]
