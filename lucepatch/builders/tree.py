"""The tree a build starts from: the superproject and each `[[submodule]]` of target.toml with the
variant's patches applied by the engine (engine/subtargets.applied_each, with carried bases for
checkouts that came without history), the applied submodule trees linked into the applied
superproject tree at their paths (link_submodules), nested submodules copied where a full build
needs them. Probes (builders/probe.py), images (builders/image.py) and superproject builds
(builders/superbuild.py) all build from it."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from lucepatch import git, report
from lucepatch.engine.subtargets import applied_each, link_submodules
from lucepatch.errors import CheckFailed, UsageError
from lucepatch.target import Target


@dataclass
class AppliedTree:
    root: Path
    variant: str
    repos: list[dict]  # per repository: name, path, base, head, patches

    def to_json(self) -> dict:
        return {"variant": self.variant, "repos": self.repos}


def nested_submodules(sub_src: Path, base: str) -> list[dict]:
    """Submodules of a submodule (BSA's csrc/cutlass): path, pinned commit, and whether the
    user's checkout has it initialised at that commit."""
    gm = sub_src / ".gitmodules"
    if not gm.is_file():
        return []
    r = git.run(sub_src, "config", "-f", str(gm), "--get-regexp", r"^submodule\..*\.path$", check=False)
    out = []
    for line in r.stdout.splitlines():
        path = line.split(None, 1)[1].strip()
        ls = git.run(sub_src, "ls-tree", base, path, check=False).stdout.split()
        pinned = ls[2] if len(ls) >= 3 and ls[1] == "commit" else ""
        d = sub_src / path
        have = ""
        if (d / ".git").exists():
            have = git.try_resolve(d, "HEAD") or ""
        state = "absent" if not have else ("initialised" if have == pinned else f"initialised at {have[:12]}, pinned {pinned[:12]}")
        out.append({"path": path, "pinned": pinned, "head": have, "state": state})
    return out


def carried_bases(source: Path, repos: list[tuple[str, str]]) -> dict[str, str]:
    """Bases for checkouts carried without history (tools/carry_lucebox.py pack; a machine with no network).

    With LUCEPATCH_CARRIED_TREES=<manifest.json>, each repository of `source` is a one-commit copy of
    the pinned tree made by that tool; its HEAD is used as the base once HEAD^{tree} equals the tree
    the manifest recorded for that pinned commit (so the content is exactly what was carried)."""
    path = os.environ.get("LUCEPATCH_CARRIED_TREES")
    if not path:
        return {}
    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise UsageError(f"LUCEPATCH_CARRIED_TREES={path}: {exc}")
    out = {}
    for rel, pinned in repos:
        ent = doc.get(rel)
        if not ent or ent.get("pinned") != pinned:
            raise CheckFailed(f"{path} records no carried tree of {rel} at {pinned[:12]}: re-run python3 tools/carry_lucebox.py pack")
        repo = Path(source) / rel
        tree = git.tree_of(repo)
        if tree != ent["tree"]:
            raise CheckFailed(f"{repo}: tree {tree[:12]} is not the carried copy of {pinned[:12]} (tree {ent['tree'][:12]})")
        out[rel] = git.head(repo)
    return out


def prepare_tree(target: Target, source: Path, variant: str, cache: Path, stack: contextlib.ExitStack, *,
                 nested: bool = False) -> AppliedTree:
    """Superproject + every submodule with their series applied, in private work areas.

    nested: also copy the working trees of nested submodules (BSA's csrc/cutlass) from the user's
    checkout where initialised (full builds need them; probes do not, and skip the copy)."""
    # a folder sub-target is part of the superproject's carried tree (layout = "folder": no base of its own)
    carried = carried_bases(source, [(".", target.base)] + [(s.path, s.base) for s in target.submodules
                                                             if s.layout == "submodule"])
    # every submodule, an empty series too (BSA today): a build reads its tree at its path
    applied = applied_each(target, source, cache, stack, patches_for=lambda t: t.variant_patches(variant),
                           bases=carried, label=f"probe-{variant}", checkout=True, skip_empty=False)
    for a in applied:
        if a.result.conflicts:
            hint = f"; run lucepatch check {target.name}" if a.sub.is_superproject else ""
            raise CheckFailed(f"{a.sub.target.name} {variant}: {', '.join(o.patch.name for o in a.result.conflicts)} "
                              f"do(es) not apply on {a.result.base[:12]}{hint}")
    root = link_submodules(applied)
    repos = []
    for a in applied:
        entry = {"name": a.sub.target.name, "path": a.sub.path, "base": a.result.base, "head": a.result.head,
                 "patches": [p.name for p in a.patches]}
        if nested and not a.sub.is_superproject:
            entry["nested"] = nested_submodules(a.source, a.result.base)
            for n in entry["nested"]:
                if n["head"]:
                    ndest = Path(a.result.workdir) / n["path"]
                    shutil.rmtree(ndest, ignore_errors=True)
                    shutil.copytree(a.source / n["path"], ndest, symlinks=True, ignore=shutil.ignore_patterns(".git"))
                else:
                    report.progress(f"note: {a.sub.path}/{n['path']} is not initialised in {source} "
                                    f"(git -C {a.source} submodule update --init {n['path']}); builds that need it fall back")
        repos.append(entry)
    return AppliedTree(root, variant, repos)
