"""The three real moves of issue 10 on a private clone of HAMi-core (LUCEPATCH_SRC_HAMI_CORE):
back to e3c3477 and forward again to the pin (the round trip gives the series back byte for
byte), sideways onto e3c3477 + PR #188's two commits (cherry-picked: their own base does not
build with CUDA 13 headers), and onto 54b1305 (HAMi v2.5.1), which stops for a human with
git's markers and survives --abort. The series is the frozen 1.0.0 copy in
tests/fixtures/hami-core-moves; hand resolutions are replayed from the resolved patch files
there. Neither the checkout nor the private clone is ever written by a session."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import FIXTURES, REPO_ROOT, git
from lucepatch.engine.transaction import snapshot
from test_fault_injection import state as checkout_state

SRC = Path(os.environ.get("LUCEPATCH_SRC_HAMI_CORE", REPO_ROOT / ".upstream/hami-core"))
MOVES = FIXTURES / "hami-core-moves"
PIN = "8f3a89c67b037d8fdfe6c4cd4d8c4f0cd6504811"
SERIES = (MOVES / "series-1.0.0" / "series").read_text().split()
ADD, ASYNC, FREE, BOUNDS, CREATE, ZERO = SERIES[1:]


def _has(ref: str) -> bool:
    return (SRC / ".git").exists() and subprocess.run(["git", "-C", str(SRC), "rev-parse", "-q", "--verify", ref],
                                                      capture_output=True).returncode == 0


pytestmark = pytest.mark.skipif(not all(_has(r) for r in ("8f3a89c^{commit}", "e3c3477^{commit}", "54b1305^{commit}",
                                                          "refs/pull/188/head")),
                                reason="no-upstream: set LUCEPATCH_SRC_HAMI_CORE to a HAMi-core checkout with "
                                       "8f3a89c, e3c3477, 54b1305 and refs/pull/188/head")
PICK = {"GIT_COMMITTER_NAME": "lucepatch", "GIT_COMMITTER_EMAIL": "lucepatch@localhost",
        "GIT_COMMITTER_DATE": "2026-01-01T00:00:00Z", "GIT_CONFIG_GLOBAL": os.devnull}


@pytest.fixture(scope="module")
def clone(tmp_path_factory):
    """A private clone (objects borrowed) with PR #188's commits cherry-picked onto e3c3477."""
    before = checkout_state(SRC)
    d = tmp_path_factory.mktemp("hc") / "hami-core"
    git(d.parent, "clone", "-q", "--shared", str(SRC), str(d))
    git(d, "fetch", "-q", str(SRC), "refs/pull/188/head:refs/pull/188/head")
    pr = git(d, "rev-list", "--reverse", "e3c3477..refs/pull/188/head", "--no-merges").split()
    assert [git(d, "log", "-1", "--format=%s", c).strip()[:22] for c in pr] == \
        ["fix(cuda): initialize ", "fix(allocator): handle"]
    git(d, "checkout", "-q", "-b", "pr188-on-e3c3477", "e3c3477")
    git(d, "cherry-pick", *pr, env=PICK)
    git(d, "checkout", "-q", PIN)
    yield d
    assert checkout_state(SRC) == before, "LUCEPATCH_SRC_HAMI_CORE was written"


@pytest.fixture
def hc(clone, tmp_path, cli):
    ws = tmp_path / "ws"
    tdir = ws / "patches" / "hami-core"
    shutil.copytree(MOVES / "series-1.0.0", tdir)
    (ws / "lucepatch.toml").write_text("schema_version = 1\n")
    (tdir / "target.toml").write_text(f'name = "hami-core"\nupstream = "https://github.com/Project-HAMi/HAMi-core"\n'
                                      f'base = "{PIN}"\nversion = "1.0.0"\n')
    shutil.copytree(REPO_ROOT / "reproducers", ws / "reproducers")
    before = checkout_state(clone)

    def rb(*args):
        return cli("--workspace", ws, "rebase", "hami-core", *args)

    yield {"ws": ws, "tdir": tdir, "rb": rb, "clone": clone, "cli": cli}
    assert checkout_state(clone) == before, "the private clone was written"


def replay(worktree: Path, resolved: Path, conflicted: list[str]) -> None:
    """Play the maintainer: the conflicted files back to the new base, then the resolution."""
    git(worktree, "checkout", "HEAD", "--", *conflicted)
    git(worktree, "apply", str(resolved))


def table(doc) -> list[tuple[str, str, str]]:
    return [(p["name"], p["applies"], p["action"]) for p in doc["patches"]]


def test_back_to_e3c3477_and_forward_to_the_pin_gives_the_series_back(hc):
    rb, tdir = hc["rb"], hc["tdir"]
    r = rb("--source", hc["clone"], "--onto", "e3c3477", "--json")
    assert r.code == 1 and r.json["direction"] == "back" and r.json["session"]["current"] == ADD
    stopped = r.json["patches"][1]
    assert stopped["conflict_files"] == ["src/allocator/allocator.c"]
    replay(Path(r.json["session"]["worktree"]), MOVES / "resolved/e3c3477" / ADD, stopped["conflict_files"])
    r = rb("--continue", "--json")
    assert r.code == 0, r.err
    assert table(r.json) == [(SERIES[0], "exact", "carried"), (ADD, "conflict", "resolved"), (ASYNC, "exact", "carried"),
                             (FREE, "exact", "carried"), (BOUNDS, "exact", "carried"), (CREATE, "exact", "carried"),
                             (ZERO, "3-way", "carried")]
    assert r.json["new_version"] == "2.0.0" and (tdir / ADD).read_bytes() == (MOVES / "resolved/e3c3477" / ADD).read_bytes()
    r = rb("--source", hc["clone"], "--onto", PIN, "--json")
    assert r.code == 1 and r.json["direction"] == "forward" and r.json["session"]["current"] == ADD
    replay(Path(r.json["session"]["worktree"]), MOVES / "series-1.0.0" / ADD, ["src/allocator/allocator.c"])
    r = rb("--continue", "--json")
    assert r.code == 0 and r.json["new_version"] == "3.0.0"
    for name in SERIES:  # the round trip gives every patch back byte for byte
        assert (tdir / name).read_bytes() == (MOVES / "series-1.0.0" / name).read_bytes(), name
    assert f'base = "{PIN}"' in (tdir / "target.toml").read_text()


def test_sideways_onto_e3c3477_plus_pr188(hc):
    rb, tdir = hc["rb"], hc["tdir"]
    r = rb("--source", hc["clone"], "--onto", "pr188-on-e3c3477", "--json")
    resolved = MOVES / "resolved/pr188-on-e3c3477"
    stops = []
    while r.code == 1:
        assert r.json["direction"] == "sideways"
        cur = r.json["session"]["current"]
        row = next(p for p in r.json["patches"] if p["name"] == cur)
        stops.append((cur, row["conflict_files"]))
        replay(Path(r.json["session"]["worktree"]), resolved / cur, row["conflict_files"])
        r = rb("--continue", "--json")
    assert r.code == 0, r.err
    assert stops == [(ADD, ["src/allocator/allocator.c"]), (ASYNC, ["src/allocator/allocator.c"]),
                     (FREE, ["src/allocator/allocator.c"]), (CREATE, ["src/cuda/memory.c"])]
    assert [a for _, a, _ in table(r.json)] == ["exact", "conflict", "conflict", "conflict", "3-way", "conflict", "3-way"]
    add = (tdir / ADD).read_text()
    assert "-        return CUDA_SUCCESS;" in add and "+        return res;" in add  # PR #188's fake success replaced
    assert hc["cli"]("--workspace", hc["ws"], "lint", "hami-core").code == 0
    assert hc["cli"]("--workspace", hc["ws"], "check", "hami-core", "--source", hc["clone"]).code == 0


def test_onto_54b1305_stops_for_a_human_with_markers_and_survives_abort(hc):
    rb = hc["rb"]
    ws_before = snapshot(hc["ws"])
    r = rb("--source", hc["clone"], "--onto", "54b1305", "--json")
    assert r.code == 1 and r.json["direction"] == "back" and r.json["onto"].startswith("54b13055")
    assert r.json["session"]["current"] == ADD and table(r.json)[0] == (SERIES[0], "exact", "carried")
    wt = Path(r.json["session"]["worktree"])
    row = r.json["patches"][1]
    unmerged = git(wt, "diff", "--name-only", "--diff-filter=U").split()
    assert row["conflict_files"] == unmerged == ["src/allocator/allocator.c"]
    text = (wt / "src/allocator/allocator.c").read_text()
    opens, mids, closes = (len(re.findall(p, text, re.M)) for p in (r"^<<<<<<< ours$", r"^=======$", r"^>>>>>>> theirs$"))
    assert opens == mids == closes >= 1
    # ours is 54b1305's add_chunk (the unchecked lookup), theirs the patch's checked one
    ours = re.search(r"^<<<<<<< ours\n(.*?)^=======\n(.*?)^>>>>>>> theirs$", text, re.M | re.S)
    assert "cuCtxGetDevice(&dev);" in ours.group(1) and "res = cuCtxGetDevice(&dev);" in ours.group(2)
    assert rb("--continue").code == 1
    assert snapshot(hc["ws"]) == ws_before
    r = rb("--abort")
    assert r.code == 0 and not wt.exists() and snapshot(hc["ws"]) == ws_before
    assert "no rebase session" in rb("--status").err
