"""Patch messages the move 8f3a89c -> 52f33fc made untrue are flagged, the others are not (issue 36,
item 4), on the real HAMi-core history and the shipped series on 8f3a89c.

Issue 36 found three statements a rebase session carried and `pr` would have sent: "cuMemAllocFromPoolAsync()
is a bare pass-through" and "Upstream PR #217 (merged after this base)" (the pool patch; #217 made
the hook track pool allocations) and "still ask for 2.8.11" (the CMake patch; 52f33fc asks for
2.8.12). Each is flagged with what changed it; no patch the move left untouched (applied exactly)
is flagged, whatever its message cites.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from conftest import REPO_ROOT
from lucepatch.engine import session as S
from lucepatch.engine.stale import Move, message_sha256, review_entries, stale_statements
from lucepatch.target import list_targets, load_target
from lucepatch.workspace import resolve_workspace

SRC = os.environ.get("LUCEPATCH_SRC_HAMI_CORE")
PIN, MOVE = "8f3a89c67b037d8fdfe6c4cd4d8c4f0cd6504811", "52f33fc"
POOL = "fix-allocator-track-and-charge-pool-allocations-to-the-pools-device.patch"

pytestmark = pytest.mark.skipif(not SRC, reason="no-upstream: set LUCEPATCH_SRC_HAMI_CORE to a HAMi-core checkout")


@pytest.fixture(scope="module")
def move(tmp_path_factory):
    if subprocess.run(["git", "-C", SRC, "cat-file", "-e", f"{MOVE}^{{commit}}"]).returncode:
        pytest.skip(f"no-upstream: {SRC} lacks {MOVE} (fetch ../shared/upstream/hami-core-main-2026-07-23.bundle)")
    ws = resolve_workspace(REPO_ROOT)
    t = next(t for t in (load_target(ws, n) for n in list_targets(ws))
             if t.base == PIN and any(p.name == POOL for p in t.patches))
    doc = S.dry_run(tmp_path_factory.mktemp("cache"), t, Path(SRC), MOVE, S.Options(no_behaviour=True))
    touched = {r["name"] for r in doc["patches"] if r["applies"] != "exact"}
    return t, Move(Path(SRC), PIN, MOVE), touched


def test_the_three_stale_statements_are_flagged_with_what_changed_them(move):
    t, m, touched = move
    by = {p.name: p for p in t.patches}
    assert {POOL, "build-accept-cmake-4.patch"} <= touched
    pool = {s.cites: s for s in stale_statements(m, by[POOL], True)}
    assert pool["cuMemAllocFromPoolAsync()"].text.startswith("cuMemAllocFromPoolAsync() is a bare pass-through")
    assert "changed cuMemAllocFromPoolAsync() in src/cuda/memory.c" in pool["cuMemAllocFromPoolAsync()"].changed_by
    assert pool["#217"].text.startswith("Upstream PR #217 (merged after this base)")
    assert pool["#217"].changed_by.startswith("9ce21cc6279a Merge pull request #217")
    cmake = {s.cites: s for s in stale_statements(m, by["build-accept-cmake-4.patch"], True)}
    assert "still ask for 2.8.11" in cmake["2.8.11"].text and "CMakeLists.txt" in cmake["2.8.11"].changed_by


def test_no_patch_the_move_left_untouched_is_flagged(move):
    t, m, touched = move
    exact = [p for p in t.patches if p.name not in touched]
    assert len(exact) >= 6
    assert {p.name: [s.cites for s in stale_statements(m, p, False)] for p in exact} == {p.name: [] for p in exact}
    entries = review_entries(m, [(p, p.name in touched) for p in t.patches])
    assert set(entries) <= touched and {POOL, "build-accept-cmake-4.patch"} <= set(entries)
    assert entries[POOL]["message_sha256"] == message_sha256(next(p for p in t.patches if p.name == POOL))
