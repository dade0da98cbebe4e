"""The sub-targets a rebase session carries: every `[[submodule]]` with a series whose place differs
between the base and `--onto` (engine/layout.py) — a submodule pinned elsewhere, moved, vendored into
a folder, back from a folder to a submodule, or gone.

The session walks them in the superproject's flattened trees: base and onto each become a commit
(kept in the session's private repository, parent = the real commit) whose tree holds the moving
sub-targets' submodule trees in place of their gitlinks (layout.flatten). Their patches join the
walk after the superproject's, re-rooted under the path they have there and named
`<sub-target>/<file>`; everything a session does to a patch (exact, 3-way, absorbed by patch-id or
content, a conflict for a human, --continue/--skip/--abort, the journal, a kill at any step) is then
the same for them. When the session writes, each is re-rooted back into its own coordinates under
its series_dir, and its [[submodule]] table says where `--onto` holds it (a submodule's base, or
`layout = "folder"` / `"absent"`). Sub-targets that stay where they are stay out of the session.
"""

from __future__ import annotations

from pathlib import Path

from lucepatch import git, odb
from lucepatch.engine import layout, upstreamed
from lucepatch.engine.commits import PURE_ENV, format_commits
from lucepatch.engine.layout import Place
from lucepatch.engine.subtargets import placed
from lucepatch.errors import EnvironmentMissing
from lucepatch.series import Patch
from lucepatch.target import Target, update_submodule_toml

_ENV = {**PURE_ENV}
SEP = "/"  # `<sub-target>/<patch file>`: a moving sub-target's patch in the session


def _place(doc: dict) -> Place:
    return Place(doc["layout"], doc["at"], doc["declared"], doc.get("commit"))


def _same(a: Place, b: Place) -> bool:
    return (a.kind, a.path, a.commit) == (b.kind, b.path, b.commit)


def moving(t: Target, source: Path, onto: str) -> list[dict]:
    """Records (State.subs) of the sub-targets whose place at `onto` differs from the one at the
    pinned base; their submodules' commits must be in the checkouts (else one line saying which
    fetch brings them)."""
    at_base = dict((st.path, (st, pl)) for st, pl in placed(t, source, None))
    out = []
    for st, pl in placed(t, source, onto):
        if not st.target.series:
            continue
        _st, was = at_base[st.path]
        if _same(was, pl):
            continue
        checkout = layout.checkout_of(source, st.submodule, pl)
        for side in (was, pl):
            if side.kind == layout.SUBMODULE:
                if checkout is None:
                    st.source(source)  # the line saying how to initialise it
                if git.try_resolve(checkout, side.commit) != side.commit:
                    raise EnvironmentMissing(
                        f"commit {side.commit[:12]} of submodule {side.path} is not in {checkout}; "
                        f"{git.fetch_hint(checkout, st.target.upstream, side.commit)}")
        out.append({"label": st.label, "declared": st.path, "base": was.to_json(), "onto": pl.to_json(),
                    "checkout": str(checkout) if checkout else None})
    return out


def alternates(subs: list[dict]) -> list[Path]:
    """Object folders of the moving sub-targets' checkouts (their trees and 3-way preimages)."""
    return [layout.objects_of(Path(d["checkout"])) for d in subs if d.get("checkout")]


def flat(repo: Path, commit: str, subs: list[dict], side: str, objects: dict) -> str:
    """`commit` flattened for the session: each moving sub-target in a submodule there becomes a folder."""
    links = {pl.path: pl.commit for pl in (_place(d[side]) for d in subs) if pl.kind == layout.SUBMODULE}
    return layout.flatten(repo, commit, links, objects=objects)


def _owner(t: Target, label: str) -> Target:
    return next(st for st in t.sub_targets() if st.name == f"{t.name}.{label}")


def patches(t: Target, subs: list[dict], side: str = "onto") -> list[Patch]:
    """The session's patches: the superproject's series, then each moving sub-target's, re-rooted
    under where `side` ("base" or "onto") holds it, named `<sub-target>/<file>`."""
    out = list(t.patches)
    for d in subs:
        at = d[side]["at"]
        out += [layout.reroot(p, "", at, name=f"{d['label']}{SEP}{p.name}") for p in _owner(t, d["label"]).patches]
    return out


def owner_of(name: str) -> tuple[str | None, str]:
    """(sub-target label or None for the superproject, patch file name) of a session patch name."""
    if SEP in name:
        label, _, file = name.partition(SEP)
        return label, file
    return None, name


def patch_ids(repo: Path, subs: list[dict]) -> dict[str, str]:
    """patch-id -> upstream commit for the moving sub-targets' own histories (a submodule at base and
    at onto: the commits between the two gitlinks, their paths re-rooted as in the walk)."""
    ids: dict[str, str] = {}
    for d in subs:
        was, now = _place(d["base"]), _place(d["onto"])
        if was.kind == layout.SUBMODULE and now.kind == layout.SUBMODULE:
            for pid, commit in upstreamed.upstream_patch_ids(repo, was.commit, now.commit, prefix=now.path).items():
                ids.setdefault(pid, commit)
    return ids


def own(t: Target, name: str) -> Patch | None:
    """The sub-target's own patch (its coordinates, its file) behind session patch `name`; None for
    the superproject's patches."""
    label, file = owner_of(name)
    if label is None:
        return None
    return next(p for p in _owner(t, label).patches if p.name == file)


def at_onto(subs: list[dict], name: str) -> str:
    label, _ = owner_of(name)
    return next(d for d in subs if d["label"] == label)["onto"]["at"]


def own_export(repo: Path, commit: str, at: str, out_dir: Path) -> bytes:
    """The format-patch file of the walk's `commit` as the sub-target's own repository would write
    it: the folder `at` of commit^ and of commit made into a one-commit chain (same author and
    message), formatted — paths, diffstat and index lines in its own coordinates."""
    def tree(rev: str) -> str:
        found = git.run(repo, "rev-parse", "--verify", "-q", f"{rev}:{at}", check=False, env=_ENV).stdout.strip()
        return found or git.run(repo, "hash-object", "-t", "tree", "--stdin", stdin=b"", env=_ENV).stdout.strip()

    meta = git.run(repo, "log", "-1", "--format=%an%x00%ae%x00%ad%x00%B", "--date=raw", commit, env=_ENV).stdout
    an, ae, ad, msg = meta.split("\x00", 3)
    who = {"GIT_AUTHOR_NAME": an, "GIT_AUTHOR_EMAIL": ae, "GIT_AUTHOR_DATE": "@" + ad, **_ENV}
    base = odb.commit_tree(repo, tree(f"{commit}^"), None, "sub-target base\n", env=who)
    head = odb.commit_tree(repo, tree(commit), base, msg, env=who)
    [(path, _pid, _c)] = format_commits(repo, base, head, out_dir)
    return path.read_bytes()


def in_own_coordinates(t: Target, subs: list[dict], name: str, raw: bytes, path: Path) -> tuple[Path, bytes]:
    """Where a session patch's file goes in the target folder (relative), and its bytes (a
    sub-target's are in its own coordinates already: Session.plan writes them so)."""
    label, file = owner_of(name)
    if label is None:
        return Path(file), raw
    series_dir = Path(_owner(t, label).dir).relative_to(Path(t.dir).resolve())
    return series_dir / file, raw


def write_tables(toml: Path, subs: list[dict]) -> None:
    """Each moving [[submodule]] table says where --onto holds it."""
    for d in subs:
        now = _place(d["onto"])
        if now.kind == layout.SUBMODULE:
            update_submodule_toml(toml, d["label"], remove=("layout",), base=now.commit, path=now.path)
        else:
            update_submodule_toml(toml, d["label"], remove=("base",), layout=now.kind)


__all__ = ["moving", "alternates", "flat", "patches", "owner_of", "patch_ids", "in_own_coordinates",
           "write_tables", "own", "own_export", "at_onto", "SEP"]
