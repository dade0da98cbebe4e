"""Rebase sessions on the `carry` fixture (tests/fixtures/carry): forward, back and sideways moves
that need a human, resolved in the session's work tree the way a maintainer would; --skip,
--abort, the bad-input cases, the `needed` judge interface, and what the rebased series is
worth afterwards (lint, check, git am on a fresh clone, export --check, the simulated driver)."""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
from pathlib import Path

import pytest

from conftest import FIXTURES, git
from lucepatch.engine import needed, retirement
from lucepatch.engine.transaction import snapshot
from test_fault_injection import state as checkout_state

_spec = importlib.util.spec_from_file_location("carry_fixture", FIXTURES / "carry" / "fixture.py")
cf = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(cf)
RES = FIXTURES / "carry" / "resolutions"
SLUG = {n: n[:-6] for n in cf.SERIES}


@pytest.fixture(scope="module")
def upstream(tmp_path_factory):
    repo, commits = cf.upstream(tmp_path_factory.mktemp("carry-up"))
    return repo, commits


@pytest.fixture
def carry(upstream, tmp_path, cli):
    repo, commits = upstream
    ws = cf.workspace(tmp_path, commits["base"])

    def rb(*args):
        return cli("--workspace", ws, "rebase", "carry", *args)

    return {"up": repo, "c": commits, "ws": ws, "tdir": ws / "patches" / "carry", "rb": rb, "cli": cli,
            "tmp": tmp_path}


def rows(doc):
    return {p["name"]: p for p in doc["patches"]}


def actions(doc):
    return [(p["applies"], p["action"]) for p in doc["patches"]]


def resolve(worktree: Path, side: str, restore=()):
    """What the maintainer does in the printed work tree: take the new base's version of files
    the fix no longer belongs in, write the resolved files."""
    for rel in restore:
        git(worktree, "checkout", "HEAD", "--", rel)
    src = RES / side
    for f in src.rglob("*"):
        if f.is_file():
            shutil.copy(f, worktree / f.relative_to(src))


def fresh_clone(up: Path, at: str, dest: Path) -> Path:
    git(dest.parent, "clone", "-q", "--no-local", str(up), str(dest))
    git(dest, "checkout", "-q", "--detach", at)
    return dest


def am_cleanly(up: Path, at: str, tdir: Path, dest: Path) -> None:
    """Every kept patch applies with plain `git am` (no -3) on a clone that has none of the
    session's objects, and each one's index lines name the blobs that clone has at that point."""
    clone = fresh_clone(up, at, dest)
    for name in (tdir / "series").read_text().split():
        text = (tdir / name).read_text()
        for path, pre in re.findall(r"^diff --git a/(\S+) .*\n(?:.*\n)*?index ([0-9a-f]{40})\.\.", text, re.M):
            if pre != "0" * 40:
                assert git(clone, "rev-parse", f"HEAD:{path}").strip() == pre, f"{name}: stale index line for {path}"
        git(clone, "am", "-q", str(tdir / name),
            env={"GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@x", "GIT_CONFIG_GLOBAL": os.devnull})


# ------------------------------------------------------------------------------------ forward
def forward_flow(carry) -> dict:
    """The forward move as a maintainer does it, without the checks (for tests of what follows)."""
    rb = carry["rb"]
    wt = Path(rb("--source", carry["up"], "--onto", "upstream-next", "--json").json["session"]["worktree"])
    assert rb("--skip", SLUG[cf.ADD_CHUNK]).code == 1
    resolve(wt, "forward", restore=["src/carry.c"])
    assert rb("--continue").code == 1
    assert rb("--skip", SLUG[cf.FREE]).code == 1  # the limit fix: upstream took it (u0), then rewrote it (u1)
    r = rb("--skip", SLUG[cf.LIMIT], "--json")
    assert r.code == 0, r.err
    return r.json


@pytest.mark.skipif(not (shutil.which("cmake") and shutil.which("gcc") and os.path.isfile("/usr/local/cuda/include/cuda.h")),
                    reason="no-tool: needs gcc, cmake and /usr/local/cuda/include/cuda.h")
def test_forward_result_on_the_simulated_driver(carry):
    """The human decisions of the forward move, checked by behaviour: upstream-next still crashes
    in add_chunk_async (the resolved patch fixes it) and no longer in what was skipped."""
    forward_flow(carry)
    r = carry["cli"]("--workspace", carry["ws"], "verify", "--reproducer", "carry", "--source", carry["up"],
                     "--driver", "fake", "--fixed", "--runs", "3", "--json")
    assert r.code in (0, 1), r.err
    ev = r.json["evidence"]
    sc = {s["scenario"]: s for s in ev["scenarios"]}
    assert ev["simulated"] is True and ev["upstream"]["base"] == carry["c"]["u2"]
    async_ = sc["carry:ctxless-async-alloc"]
    assert async_["baseline"]["failures"] == 3 and async_["patched"]["failures"] == 0
    for name in ("ctxless-alloc", "ctxless-async-free", "cumulative-limit"):
        s = sc[f"carry:{name}"]
        assert s["baseline"]["failures"] == 0 and s["patched"]["failures"] == 0, name


def test_forward_session_skips_resolves_absorbs_then_writes_once(carry, tmp_path):
    up, c, rb, tdir = carry["up"], carry["c"], carry["rb"], carry["tdir"]
    src_before, ws_before = checkout_state(up), snapshot(carry["ws"])
    r = rb("--source", up, "--onto", "upstream-next", "--json")
    assert r.code == 1, r.err
    doc = r.json
    assert doc["direction"] == "forward" and doc["phase"] == "conflict" and doc["onto"] == c["u2"]
    assert doc["session"]["current"] == cf.ADD_CHUNK and doc["conflicts"] == [cf.ADD_CHUNK]
    assert actions(doc) == [("exact", "carried"), ("conflict", "stopped"), (None, "pending"), (None, "pending"),
                            (None, "pending")]
    # upstream took the limit fix byte for byte (u0) and rewrote those lines when it moved them (u1):
    # REF's tree does not have the patch's change, so it is not absorbed by its patch-id (issue 39)
    lim = rows(doc)[cf.LIMIT]
    assert lim["signal"] is None and lim["absorption"]["took"] == c["u0"] and lim["absorption"]["undone_by"] == c["u1"]
    assert f"upstream took it in {c['u0'][:12]} (patch-id) but changed its lines in {c['u1'][:12]}" in lim["detail"]
    assert all(p["needed"]["needed"] == "not-judged" and p["needed"]["simulated"] is None for p in doc["patches"])
    wt = Path(doc["session"]["worktree"])
    text = (wt / "src/carry.c").read_text()
    assert re.search(r"^<<<<<<< ours$", text, re.M) and re.search(r"^>>>>>>> theirs$", text, re.M)
    assert git(wt, "status", "--porcelain").startswith("UU src/carry.c")
    assert snapshot(carry["ws"]) == ws_before and checkout_state(up) == src_before

    r = rb("--continue")
    assert r.code == 1 and "src/carry.c" in r.err and "unresolved" in r.err
    # upstream fixed add_chunk its own way (u1): not ours to carry any more
    r = rb("--skip", SLUG[cf.ADD_CHUNK], "--json")
    assert r.code == 1 and r.json["session"]["current"] == cf.ASYNC
    # add_chunk_async moved to src/chunks.c and is still broken there: port the fix
    resolve(wt, "forward", restore=["src/carry.c"])
    r = rb("--continue", "--json")
    assert r.code == 1, r.err
    assert r.json["session"]["current"] == cf.FREE and rows(r.json)[cf.ASYNC]["action"] == "resolved"
    assert snapshot(carry["ws"]) == ws_before
    r = rb("--skip", SLUG[cf.FREE], "--json")
    assert r.code == 1 and r.json["session"]["current"] == cf.LIMIT  # its line is not in src/carry.c any more
    assert f"changed its lines in {c['u1'][:12]}" in rows(r.json)[cf.LIMIT]["detail"]
    r = rb("--skip", SLUG[cf.LIMIT], "--json")
    assert r.code == 0, r.err
    doc = r.json
    assert doc["written"] is True and doc["bump"] == "major" and doc["new_version"] == "2.0.0"
    assert actions(doc) == [("exact", "carried"), ("conflict", "skipped"), ("conflict", "resolved"),
                            ("conflict", "skipped"), ("conflict", "skipped")]
    assert checkout_state(up) == src_before  # the user's checkout was only ever read

    assert (tdir / "series").read_text().split() == [cf.BUILD_PATCH, cf.ASYNC]
    assert f'base = "{c["u2"]}"' in (tdir / "target.toml").read_text()
    # a person's skips, not upstream's code: dropped/, never recorded as applied upstream (issue 41)
    assert not (tdir / "absorbed").exists()
    assert sorted(p.name for p in (tdir / "dropped").iterdir()) == sorted([cf.ADD_CHUNK, cf.FREE, cf.LIMIT])
    for name in (cf.ADD_CHUNK, cf.FREE, cf.LIMIT):
        sk = (tdir / "dropped" / name).read_text()
        assert "Applied-Upstream" not in sk and f"Dropped-At: {c['u2']}" in sk
        assert "Dropped-Why: " in sk and "rebase --skip by a person" in sk and "(not verified)" in sk
    assert f"took it in {c['u0'][:12]}" in (tdir / "dropped" / cf.LIMIT).read_text()
    ported = (tdir / cf.ASYNC).read_text()
    assert "diff --git a/src/chunks.c b/src/chunks.c" in ported and "src/carry.c" not in ported.split("---\n", 1)[1]
    assert "Reproducer: carry:ctxless-async-alloc" in ported  # the message is kept byte for byte
    orig = (FIXTURES / "carry/patches" / cf.ASYNC).read_text()
    assert ported.split("\n---\n")[0] == orig.split("\n---\n")[0]

    # what the rebased series is worth: lint, check, plain git am, apply + export --check
    cli = carry["cli"]
    assert cli("--workspace", carry["ws"], "lint", "carry").code == 0
    assert cli("--workspace", carry["ws"], "check", "carry", "--source", up).code == 0
    am_cleanly(up, c["u2"], tdir, tmp_path / "am")
    mine = fresh_clone(up, c["u2"], tmp_path / "mine")
    git(mine, "checkout", "-q", "-B", "main")
    assert cli("--workspace", carry["ws"], "apply", "carry", "--source", mine).code == 0
    r = cli("--workspace", carry["ws"], "export", "carry", "--source", mine, "--check")
    assert r.code == 0, r.err
    assert not any((Path(os.environ["LUCEPATCH_CACHE"]) / "rebase").glob("carry-*/state.json"))


# --------------------------------------------------------------------------------------- back
def test_back_session_onto_an_older_release_where_most_patches_conflict(carry, tmp_path):
    up, c, rb, tdir = carry["up"], carry["c"], carry["rb"], carry["tdir"]
    r = rb("--source", up, "--onto", "v0.9", "--json")
    assert r.code == 1 and r.json["direction"] == "back" and r.json["session"]["current"] == cf.ADD_CHUNK
    wt = Path(r.json["session"]["worktree"])
    resolve(wt, "back")  # v0.9's add_chunk reads an `int dev`: the fix ported by hand
    r = rb("--continue", "--json")
    assert r.code == 1 and r.json["session"]["current"] == cf.ASYNC
    # stream-ordered allocations do not exist at v0.9: nothing to fix there
    assert "add_chunk_async" not in git(up, "show", "v0.9:src/carry.c")
    assert rb("--skip", SLUG[cf.ASYNC]).code == 1
    r = rb("--skip", SLUG[cf.FREE], "--json")
    assert r.code == 0, r.err
    assert actions(r.json) == [("exact", "carried"), ("conflict", "resolved"), ("conflict", "skipped"),
                               ("conflict", "skipped"), ("exact", "carried")]
    assert r.json["direction"] == "back" and r.json["new_version"] == "2.0.0"
    assert (tdir / "series").read_text().split() == [cf.BUILD_PATCH, cf.ADD_CHUNK, cf.LIMIT]
    assert carry["cli"]("--workspace", carry["ws"], "check", "carry", "--source", up).code == 0
    am_cleanly(up, c["c0"], tdir, tmp_path / "am")


# ----------------------------------------------------------------------------------- sideways
def test_sideways_session_onto_a_candidate_fix_branch(carry, tmp_path):
    up, c, rb, tdir = carry["up"], carry["c"], carry["rb"], carry["tdir"]
    r = rb("--source", up, "--onto", "pr-7", "--json")
    assert r.code == 1 and r.json["direction"] == "sideways" and r.json["session"]["current"] == cf.ASYNC
    assert actions(r.json)[:2] == [("exact", "carried"), ("exact", "carried")]
    wt = Path(r.json["session"]["worktree"])
    # the candidate returns success without allocating; ours asks the stream: ours wins
    resolve(wt, "sideways")
    r = rb("--continue", "--json")
    assert r.code == 0, r.err
    # patch 4's context is patch 3's text: after the resolution it applies exactly again
    assert actions(r.json) == [("exact", "carried"), ("exact", "carried"), ("conflict", "resolved"),
                               ("exact", "carried"), ("exact", "carried")]
    assert (tdir / "series").read_text().split() == cf.SERIES and not (tdir / "absorbed").exists()
    assert f'base = "{c["pr7"]}"' in (tdir / "target.toml").read_text()
    am_cleanly(up, c["pr7"], tdir, tmp_path / "am")


def test_dry_run_walks_everything_and_keeps_nothing(carry):
    up, rb = carry["up"], carry["rb"]
    before = snapshot(carry["ws"])
    r = rb("--source", up, "--onto", "v0.9", "--dry-run", "--json")
    assert r.code == 1 and "session" not in r.json
    assert [p["applies"] for p in r.json["patches"]] == ["exact", "conflict", "conflict", "conflict", "exact"]
    assert [p["action"] for p in r.json["patches"] if p["applies"] == "conflict"] == ["would stop"] * 3
    assert snapshot(carry["ws"]) == before and rb("--status", "--json").json == {"schema_version": 1, "verb": "rebase",
                                                                                 "session": None}


# ------------------------------------------------------------------------------ abort, status
def test_abort_leaves_workspace_and_checkout_identical(carry):
    up, rb = carry["up"], carry["rb"]
    src_before, ws_before = checkout_state(up), snapshot(carry["ws"])
    r = rb("--source", up, "--onto", "upstream-next", "--json")
    wt = Path(r.json["session"]["worktree"])
    (wt / "src/carry.c").write_text("half-edited\n")
    (wt / "notes.txt").write_text("scratch\n")
    r = rb("--status", "--json")
    assert r.code == 0 and r.json["phase"] == "conflict" and "stopped at patch 2" in r.err
    r = carry["cli"]("--workspace", carry["ws"], "status", "carry", "--source", up)
    assert "note: a rebase session of carry is stopped at patch 2" in r.err
    r = rb("--abort")
    assert r.code == 0 and "aborted" in r.err
    assert snapshot(carry["ws"]) == ws_before and checkout_state(up) == src_before
    assert not wt.exists()
    assert "no rebase session of carry is open" in rb("--status").err


# --------------------------------------------------------------------------------- bad input
def test_bad_input(carry):
    up, rb = carry["up"], carry["rb"]
    for args in (["--continue"], ["--skip", "x"], ["--abort"]):
        r = rb(*args)
        assert r.code == 2 and "no rebase session of carry is open" in r.err and len(r.err.strip().splitlines()) == 1
    r = rb("--source", up, "--onto", "no-such-ref")
    # the fetch is in that checkout, by path (git -C), whatever directory the user stands in
    assert r.code == 3 and f"git -C {up} fetch" in r.err and len(r.err.strip().splitlines()) == 1
    assert rb("--continue", "--abort").code == 2 and rb().code == 2
    assert rb("--source", up, "--onto", "upstream-next").code == 1
    r = rb("--source", up, "--onto", "pr-7")
    assert r.code == 2 and "one session per target" in r.err and "--continue" in r.err
    assert rb("--skip", "no-such-patch").code == 2
    r = rb("--skip", SLUG[cf.BUILD_PATCH])
    assert r.code == 2 and "already carried" in r.err
    wt = Path(rb("--status", "--json").json["session"]["worktree"])
    git(wt, "checkout", "HEAD", "--", "src/carry.c")  # "resolved" to nothing at all
    r = rb("--continue")
    assert r.code == 1 and "nothing to commit" in r.err and "--skip" in r.err
    (wt / "src/carry.c.rej").write_text("@@ -1 +1 @@\n")
    r = rb("--continue")
    assert r.code == 1 and "src/carry.c.rej" in r.err
    assert rb("--abort").code == 0


def test_workspace_edited_during_the_session_is_never_overwritten(carry):
    up, rb, tdir = carry["up"], carry["rb"], carry["tdir"]
    r = rb("--source", up, "--onto", "pr-7", "--json")
    resolve(Path(r.json["session"]["worktree"]), "sideways")
    edited = tdir / cf.LIMIT
    edited.write_bytes(edited.read_bytes() + b"\n")
    mine = snapshot(carry["ws"])
    r = rb("--continue")
    assert r.code == 1 and "changed since the rebase session started" in r.err
    assert snapshot(carry["ws"]) == mine
    edited.write_bytes(edited.read_bytes()[:-1])
    r = rb("--continue", "--json")
    assert r.code == 0 and r.json["written"] is True


# ---------------------------------------------------------------------------- needed: judge
CODE = {"signal": "3-way", "commit": None, "detail": "test judge"}


def _judge(target, source, ref, patches, **where):
    # superseded with a code signal under the invariant (the only kind --drop-superseded drops)
    verdicts = {cf.ADD_CHUNK: needed.SUPERSEDED, cf.FREE: needed.SUPERSEDED, cf.ASYNC: needed.STILL_NEEDED}
    return {p.name: needed.Judgement(verdicts[p.name], "test judge", f"carry:{p.name[:12]}", "fake",
                                     CODE if verdicts[p.name] == needed.SUPERSEDED else None, retirement.INVARIANT)
            for p in patches if p.name in verdicts}


@pytest.fixture
def judge(monkeypatch):
    # the judge services/rebase.py hands every session (the retirement rule's), replaced for the test
    from lucepatch.upstream import retire

    monkeypatch.setattr(retire, "judge", _judge)
    yield _judge


def test_needed_labels_never_drop_a_patch_by_themselves(carry, judge):
    up, rb = carry["up"], carry["rb"]
    r = rb("--source", up, "--onto", "upstream-next", "--json")
    assert r.code == 1 and r.json["session"]["current"] == cf.ADD_CHUNK  # superseded, still walked
    by = rows(r.json)
    assert by[cf.ADD_CHUNK]["needed"] == {"needed": "superseded", "reason": "test judge", "scenario": "carry:fix-alloc-ad",
                                         "driver": "fake", "simulated": True, "code_signal": CODE,
                                         "invariant": retirement.INVARIANT, "measured": ""}
    assert by[cf.BUILD_PATCH]["needed"]["needed"] == "not-judged"
    # the human report (stdout; --json replaces it) says a simulated driver decided
    assert "superseded (simulated driver)" in " ".join(rb("--status").out.split())
    assert rb("--abort").code == 0
    r = rb("--source", up, "--onto", "upstream-next", "--no-behaviour", "--json")
    assert {p["needed"]["needed"] for p in r.json["patches"]} == {"not-judged"}
    assert rb("--abort").code == 0


def test_drop_superseded_moves_judged_patches_to_absorbed(carry, judge):
    up, rb, tdir = carry["up"], carry["rb"], carry["tdir"]
    r = rb("--source", up, "--onto", "upstream-next", "--drop-superseded", "--json")
    assert r.code == 1 and r.json["session"]["current"] == cf.ASYNC
    assert [p["action"] for p in r.json["patches"]] == ["carried", "dropped", "stopped", "dropped", "pending"]
    resolve(Path(r.json["session"]["worktree"]), "forward", restore=["src/carry.c"])
    assert rb("--continue").code == 1  # the limit fix: taken upstream, then rewritten there (not absorbed)
    r = rb("--skip", SLUG[cf.LIMIT], "--json")
    assert r.code == 0, r.err
    text = (tdir / "absorbed" / cf.FREE).read_text()
    assert "Applied-Upstream-Signal: superseded (simulated driver), code signal 3-way" in text


def _behaviour_only(target, source, ref, patches, **where):
    """What a judge may say without a code signal: a retire-candidate, or superseded from a report
    made before the invariant (no code signal, no invariant) — neither may drop a patch."""
    return {cf.ADD_CHUNK: needed.Judgement(needed.RETIRE_CANDIDATE, "behaviour alone", None, "fake"),
            cf.FREE: needed.Judgement(needed.SUPERSEDED, "an old report", None, "fake")}


def test_drop_superseded_never_drops_on_behaviour_alone(carry, monkeypatch):
    from lucepatch.upstream import retire

    up, rb = carry["up"], carry["rb"]
    monkeypatch.setattr(retire, "judge", _behaviour_only)
    r = rb("--source", up, "--onto", "upstream-next", "--drop-superseded", "--json")
    by = rows(r.json)
    assert by[cf.ADD_CHUNK]["needed"]["needed"] == "retire-candidate" and by[cf.ADD_CHUNK]["action"] != "dropped"
    assert by[cf.FREE]["needed"]["needed"] == "superseded" and by[cf.FREE]["action"] != "dropped"
    assert "dropped" not in {p["action"] for p in r.json["patches"]}
    assert rb("--abort").code == 0


def test_interactive_mode_asks_on_a_terminal(carry, tmp_path):
    """On a terminal (no --no-interactive) a stop asks what to do; `skip` then `abort` answered on
    the terminal skip the stopped patch, walk on to the next stop, and throw the session away."""
    import pty
    import subprocess
    import sys

    from conftest import REPO_ROOT

    master, slave = pty.openpty()
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    proc = subprocess.Popen([sys.executable, "-m", "lucepatch", "--workspace", str(carry["ws"]), "rebase", "carry",
                             "--source", str(carry["up"]), "--onto", "upstream-next"],
                            stdin=slave, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    os.close(slave)
    before = snapshot(carry["ws"])
    try:
        os.write(master, b"skip\nabort\n")  # typed ahead: read at the first and second stop
        out, err = proc.communicate(timeout=120)
    finally:
        os.close(master)
        if proc.poll() is None:
            proc.kill()
    err = err.decode()
    assert proc.returncode == 0, err
    assert err.count("continue, skip, abort or quit") == 2
    assert "stopped at patch 2" in err and "stopped at patch 3" in err and "aborted" in err
    assert snapshot(carry["ws"]) == before
    assert carry["rb"]("--status").err.strip().endswith("no rebase session of carry is open")
