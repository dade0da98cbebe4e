"""Carry the Lucebox checkout to a machine without network: working trees without history.

  python3 tools/carry_lucebox.py pack   [SRC] [OUT]   (here: SRC = LUCEPATCH_SRC_LUCEBOX, OUT = .upstream/lucebox-carry)
  python3 tools/carry_lucebox.py unpack OUT DEST     (there: one-commit git repos at DEST)

pack writes one .tar.xz per repository (the superproject's server/ and share/, llama.cpp's ggml/,
common/ and vendor/ — what the server's CMake reads — and all of Block-Sparse-Attention; for a checkout
where llama.cpp is vendored (Luce-Org/lucebox >= ad69d12d) the superproject's server/ with it, share/,
the Dockerfile and bake file, and BSA: repos_of), the
nlohmann-json3-dev .deb (apt-get download; dpkg -x there), and trees.json: per repository the
pinned commit and the git tree id of exactly the packed files. unpack makes each a git repo of one
commit; with LUCEPATCH_CARRIED_TREES=OUT/trees.json lucepatch applies the series on that commit
after checking its tree id (lucepatch/builders/probe.py carried_bases). A few MB in all.
"""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

REPOS = [(".", ["server", "share", "CMakeLists.txt", "LICENSE"]),
         ("server/deps/llama.cpp", ["ggml", "common", "vendor", "include", "CMakeLists.txt", "cmake", "LICENSE"]),
         ("server/deps/Block-Sparse-Attention", ["."])]
# Luce-Org/lucebox since ad69d12d (2026-07-08): llama.cpp/ggml is a folder of the superproject (with
# gguf-py, which the GPU step writes its test model with), upstream's Dockerfile and bake file are read
# by the build; test data the build never reads stays behind
VENDORED = [(".", ["server", "share", "Dockerfile", "docker-bake.hcl", "LICENSE",
                   ":!server/eval", ":!server/scripts/fixtures", ":!*.gif", ":!*.png"]),
            ("server/deps/Block-Sparse-Attention", ["."])]


def repos_of(src: Path) -> list:
    """The old layout (llama.cpp a submodule) or the vendored one, as the checkout's HEAD holds it."""
    entry = git(src, "ls-tree", "HEAD", "server/deps/llama.cpp").split()
    return REPOS if entry and entry[0] == "160000" else VENDORED
ENV = {"GIT_AUTHOR_NAME": "carry", "GIT_AUTHOR_EMAIL": "carry@lucepatch.invalid", "GIT_COMMITTER_NAME": "carry",
       "GIT_COMMITTER_EMAIL": "carry@lucepatch.invalid", "GIT_AUTHOR_DATE": "2026-01-01T00:00:00Z",
       "GIT_COMMITTER_DATE": "2026-01-01T00:00:00Z"}


def git(cwd, *args) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True,
                          env={**os.environ, **ENV}).stdout.strip()


def commit_tree(d: Path, exclude: list[str] = ()) -> str:
    git(d, "init", "-q")
    git(d, "add", "-A", "-f", "--", ".", *[f":!{e}" for e in exclude])
    git(d, "commit", "-q", "--no-verify", "-m", "carried tree")
    return git(d, "rev-parse", "HEAD^{tree}")


def pack(src: Path, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    doc = {}
    for rel, specs in repos_of(src):
        repo = src / rel
        files = [f for f in git(repo, "ls-files", "-z", "--", *specs).split("\0")
                 if f and (repo / f).is_file() or (f and (repo / f).is_symlink())]
        name = "repo-" + (rel.replace("/", "_") if rel != "." else "superproject") + ".tar.xz"
        with tarfile.open(out / name, "w:xz") as tf:
            for f in files:
                tf.add(repo / f, arcname=f, recursive=False)
        with tempfile.TemporaryDirectory() as tmp:
            with tarfile.open(out / name) as tf:
                tf.extractall(tmp)
            tree = commit_tree(Path(tmp))
        doc[rel] = {"pinned": git(repo, "rev-parse", "HEAD"), "tree": tree, "archive": name, "files": len(files)}
        print(f"carry: {rel}: {len(files)} files, {(out / name).stat().st_size // 1024} KiB, tree {tree[:12]}", file=sys.stderr)
    if not glob.glob(str(out / "nlohmann-json3-dev_*.deb")):
        r = subprocess.run(["apt-get", "download", "nlohmann-json3-dev"], cwd=out, capture_output=True, text=True)
        if r.returncode != 0:
            print(f"carry: apt-get download nlohmann-json3-dev failed ({r.stderr.strip()[:160]}): run apt-get update first",
                  file=sys.stderr)
            raise SystemExit(3)
    (out / "trees.json").write_text(json.dumps(doc, indent=1) + "\n")


def unpack(out: Path, dest: Path) -> None:
    doc = json.loads((out / "trees.json").read_text())
    for rel, ent in doc.items():
        d = dest / rel
        d.mkdir(parents=True, exist_ok=True)
        with tarfile.open(out / ent["archive"]) as tf:
            tf.extractall(d)
    # submodules first, then the superproject without the submodule folders (as packed)
    for rel, ent in sorted(doc.items(), key=lambda kv: -kv[0].count("/")):
        d = dest / rel
        tree = commit_tree(d, [r for r in doc if r != "."] if rel == "." else [])
        if tree != ent["tree"]:
            raise SystemExit(f"carry: {rel}: unpacked tree {tree[:12]} is not the packed {ent['tree'][:12]}")
        print(f"carry: {rel}: tree {tree[:12]} as packed (pinned {ent['pinned'][:12]})", file=sys.stderr)


if __name__ == "__main__":
    cmd = sys.argv[1] if len(sys.argv) > 1 else ""
    if cmd == "pack":
        src = sys.argv[2] if len(sys.argv) > 2 else os.environ.get("LUCEPATCH_SRC_LUCEBOX")
        if not src:
            sys.exit("carry_lucebox: give SRC or set LUCEPATCH_SRC_LUCEBOX (a Lucebox checkout at a line's base, "
                     "submodules initialised)")
        pack(Path(src), Path(sys.argv[3] if len(sys.argv) > 3 else ".upstream/lucebox-carry"))
    elif cmd == "unpack" and len(sys.argv) == 4:
        unpack(Path(sys.argv[2]), Path(sys.argv[3]))
    else:
        print(__doc__, file=sys.stderr)
        raise SystemExit(2)
