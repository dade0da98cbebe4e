"""Random SIGKILLs against `apply`, `apply --stash` and `rebase`, and what each run printed.

The paused tests (test_fault_injection.py, test_rebase_session_faults.py) stop a run at a named
step; these kill it at a random moment instead — anywhere, including inside a git command the
switch runs — either lucepatch alone (its git child finishes as an orphan: `kill -9 PID`, the
OOM killer) or its whole process group (git dies with it: a container stopped, `kill -9 -PGID`).
Then the next lucepatch command runs at once (it recovers what a killed switch left), and the
user's checkout — HEAD, refs, index, work tree, stash list, reflogs, lock files — is compared
with the state before the run and with the state an uninterrupted run leaves, and with what
lucepatch printed:

  printed "restored to <branch>"          -> exactly the state before (every byte the user sees)
  printed "had completed"                 -> exactly the state an uninterrupted run leaves
  printed "kept in `git stash list`"      -> the state before, the user's changes at stash@{0}
  (printed "removed ... a killed git left" -> those lock files were the killed git's: any of the above)
  printed nothing about it                -> before or completed, nothing in between
and never a *.lock file, a temporary object file or a journal left behind. For `rebase` the
user's checkout never changes and the workspace's target folder is the old one or the new one,
never a mix; an open session finishes (--continue) with exactly an uninterrupted run's result.

Beside the random kills, test_a_group_kill_at_every_commit_point_... kills the group right after
each file git or the switch creates in .git and the journal folder, and right before and after
each rename onto them (the run's commit points, numbered by tests/fixtures/killpoint/killpoint.c):
the same kills every run.

LUCEPATCH_KILL_SEED=N reproduces a run; LUCEPATCH_KILLS=N (per mode) scales it (CI: the defaults,
>= 200 kills in all, a few minutes on 2 cores). `python3 tests/test_switch_kill.py` prints the
table of outcomes x what was printed.
"""

from __future__ import annotations

import collections
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import needs  # noqa: E402
from conftest import REPO_ROOT, commit_all, format_patches, git, init_repo, make_target, write  # noqa: E402
from lucepatch.engine.transaction import snapshot  # noqa: E402

RO = {"GIT_OPTIONAL_LOCKS": "0"}
SEED = int(os.environ.get("LUCEPATCH_KILL_SEED", "23"))
KILLS = {"apply": 70, "stash": 80, "rebase": 50}
if os.environ.get("LUCEPATCH_KILLS"):
    KILLS = {k: int(os.environ["LUCEPATCH_KILLS"]) for k in KILLS}
BRANCH = "lucepatch/toy/1.0.0"


# ---- the fixture: an upstream checkout, a three-patch series (one adds a folder) -----------------
def make_world(root: Path, older_stash: bool = True) -> dict:
    up = init_repo(root / "pristine" / "up")
    write(up, "src/a.c", "int a(void) {\n    return 1;\n}\n")
    write(up, "src/b.c", "int b(void) {\n    return 2;\n}\n")
    write(up, "notes.txt", "base\n")
    write(up, "staged.txt", "one\n")
    base = commit_all(up, "base")
    git(up, "checkout", "-q", "-b", "work")
    write(up, "src/a.c", "int a(void) {\n    return 10;\n}\n")
    commit_all(up, "fix(a): return ten\n\nUpstream-Status: Pending\nSigned-off-by: F <f@x.invalid>")
    write(up, "src/b.c", "int b(void) {\n    return 20;\n}\n")
    commit_all(up, "fix(b): return twenty\n\nUpstream-Status: Pending\nSigned-off-by: F <f@x.invalid>")
    write(up, "src/new/deep/c.c", "int c(void) { return 3; }\n")
    commit_all(up, "add c\n\nUpstream-Status: Pending\nSigned-off-by: F <f@x.invalid>")
    pfiles = format_patches(up, f"{base}..work", root / "fp")
    git(up, "checkout", "-q", "main")
    git(up, "branch", "-q", "-D", "work")
    # upstream moves on (for rebase): an unrelated file, so the whole series carries over
    write(up, "README", "upstream moved\n")
    git(up, "checkout", "-q", "-b", "next")
    commit_all(up, "upstream: a readme")
    git(up, "checkout", "-q", "main")
    if older_stash:  # the user's own older stash, which every outcome must keep
        write(up, "notes.txt", "an older change the user stashed\n")
        git(up, "stash", "push", "-q", "-m", "the user's own older stash")
    ws = root / "pristine" / "ws"
    make_target(ws, "toy", base, pfiles)
    return {"root": root, "pristine": root / "pristine"}


def dirty(up: Path) -> None:
    """Staged and unstaged changes outside the series, and an untracked file (for --stash)."""
    write(up, "staged.txt", "one\ntwo, staged\n")
    git(up, "add", "staged.txt")
    write(up, "staged.txt", "one\ntwo, staged\nthree, not staged\n")
    write(up, "notes.txt", "base\r\nmine, with CRLF and no newline at end")
    write(up, "README.local", "untracked\n")


def copy_world(world: dict, dest: Path, mode: str) -> tuple[Path, Path, Path]:
    shutil.copytree(world["pristine"], dest, symlinks=True)
    up, ws, cache = dest / "up", dest / "ws", dest / "cache"
    if mode == "stash":
        dirty(up)
    return up, ws, cache


# ---- what the user sees of a checkout -------------------------------------------------------------
def files(root: Path) -> dict:
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        if Path(dirpath) == root and ".git" in dirnames:
            dirnames.remove(".git")
        for f in filenames:
            p = Path(dirpath) / f
            out[str(p.relative_to(root))] = p.read_bytes()
    return out


def leftovers(up: Path, cache: Path) -> list[str]:
    gd = up / ".git"
    out = [str(p.relative_to(up)) for p in gd.rglob("*.lock")]
    out += [str(p.relative_to(up)) for p in (gd / "objects").rglob("*") if "lucepatch" in p.name]
    out += [str(p) for p in (cache / "switch").glob("*")] if (cache / "switch").is_dir() else []
    return out


def checkout_state(up: Path) -> dict:
    def g(*args):
        return git(up, *args, env=RO, check=False)
    return {
        "HEAD": g("symbolic-ref", "-q", "HEAD") + g("rev-parse", "HEAD"),
        "refs": g("for-each-ref", "--format=%(refname) %(objectname)"),
        "index": g("ls-files", "-s"),
        "staged": g("diff", "--cached", "--binary"),
        "worktree": files(up),
        "stash": g("stash", "list", "--format=%gs"),
        "stash-content": [g("diff", "--binary", f"stash@{{{i}}}^1", f"stash@{{{i}}}")
                          for i in range(len(g("stash", "list").splitlines()))],
        # `git stash` (push, apply --index) logs a HEAD "reset: moving to HEAD" that moves nothing;
        # whether a recovery repeats that no-op is not a difference a user can see
        "reflogs": {ref: "".join(line for line in g("reflog", "show", "--format=%H %gs", ref, "--").splitlines(True)
                                 if not line.endswith(" reset: moving to HEAD\n"))
                    for ref in ("HEAD", "refs/heads/main", f"refs/heads/{BRANCH}", "refs/stash")},
    }


def diff_keys(a: dict, b: dict) -> list[str]:
    out = [k for k in a if k not in ("worktree", "reflogs") and a[k] != b[k]]
    out += [f"reflog {r}" for r in a["reflogs"] if a["reflogs"][r] != b["reflogs"][r]]
    wa, wb = a["worktree"], b["worktree"]
    out += [f"file {k}" for k in sorted(set(wa) | set(wb)) if wa.get(k) != wb.get(k)]
    return out


# ---- running lucepatch ------------------------------------------------------------------------------
def env(cache: Path) -> dict:
    e = {**os.environ, "LUCEPATCH_CACHE": str(cache), "PYTHONPATH": str(REPO_ROOT)}
    e.pop("LUCEPATCH_TEST_PAUSE_AT_PATCH", None)
    return e


def argv(mode: str, up: Path, ws: Path) -> list[str]:
    base = [sys.executable, "-m", "lucepatch", "--workspace", str(ws)]
    if mode == "rebase":
        return base + ["rebase", "toy", "--source", str(up), "--onto", "next", "--no-interactive"]
    return base + ["apply", "toy", "--source", str(up)] + (["--stash"] if mode == "stash" else [])


def run(cmd: list[str], cache: Path) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, env=env(cache), capture_output=True, text=True, timeout=120)


def calibrate(world: dict, tmp: Path, mode: str, runs: int = 3) -> dict:
    """Uninterrupted runs: the state one leaves, and how long the fastest takes and when its
    switch starts. The fastest: on a loaded machine one slow run stretches the window, and kills
    aimed into it land after most runs have finished."""
    cals = [_calibrate_once(world, tmp / f"calibrate-{mode}-{k}", mode) for k in range(runs)]
    fastest = min(cals, key=lambda c: c["end"] - c["start"])
    return {**cals[0], **{k: min(c[k] for c in cals) for k in ("total", "start")},
            "end": min(c["start"] for c in cals) + fastest["end"] - fastest["start"]}


def _calibrate_once(world: dict, dest: Path, mode: str) -> dict:
    up, ws, cache = copy_world(world, dest, mode)
    before = checkout_state(up)
    ws_before = snapshot(ws / "patches" / "toy")
    t0 = time.monotonic()
    proc = subprocess.Popen(argv(mode, up, ws), env=env(cache), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True)
    # the window in which the checkout (the workspace, for rebase) is being written: while the
    # switch's journal (the session's state) exists
    pattern = ("switch", "*.json") if mode != "rebase" else ("rebase", "toy-*/state.json")
    start = end = None
    while proc.poll() is None:
        there = any((cache / pattern[0]).glob(pattern[1]))
        now = time.monotonic() - t0
        if there and start is None:
            start = now
        if start is not None and not there and end is None:
            end = now
        time.sleep(0.001)
    total = time.monotonic() - t0
    _out, err = proc.communicate()
    assert proc.returncode == 0, err.decode()
    start = total * 0.6 if start is None else start
    return {"before": before, "done": checkout_state(up), "ws_before": ws_before,
            "ws_done": snapshot(ws / "patches" / "toy"), "total": total, "start": start, "end": end or total}


PRINTED = (("restored", "restored to main"), ("unchanged", "was not changed"), ("completed", "had completed"),
           ("stash kept", "kept in `git stash list`"), ("stale locks removed", "a killed git left"))


def printed(text: str) -> str:
    said = [name for name, needle in PRINTED if needle in text]
    return "+".join(said) or "nothing"


def kill_once(world: dict, tmp: Path, mode: str, cal: dict, rng: random.Random, i: int) -> dict:
    up, ws, cache = copy_world(world, tmp / f"{mode}-{i}", mode)
    # most kills while the checkout (for rebase: the session) is being written — a random moment
    # after its journal (state file) appears, over a little more than that window lasts — some at
    # a random moment of the whole run
    anchored = rng.random() >= 0.15
    delay = rng.uniform(0.0, (cal["end"] - cal["start"]) * 1.3 + 0.01) if anchored else rng.uniform(0.0, cal["start"])
    group = rng.random() < 0.5
    proc = subprocess.Popen(argv(mode, up, ws), env=env(cache), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True)
    pattern = ("switch", "*.json") if mode != "rebase" else ("rebase", "toy-*/state.json")
    while anchored and proc.poll() is None and not any((cache / pattern[0]).glob(pattern[1])):
        time.sleep(0.002)
    time.sleep(delay)
    try:
        if group:
            os.killpg(proc.pid, signal.SIGKILL)
        else:
            os.kill(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    rec = {"mode": mode, "i": i, "delay": ("+" if anchored else "") + f"{delay:.3f}", "group": group}
    return recover_and_judge(rec, proc, up, ws, cache, cal)


def recover_and_judge(rec: dict, proc: subprocess.Popen, up: Path, ws: Path, cache: Path, cal: dict) -> dict:
    """After the kill: the next command recovers; the checkout is judged against what was printed."""
    mode = rec["mode"]
    out, err = proc.communicate(timeout=120)
    # the next command, at once: it recovers what the killed run left
    nxt = run([sys.executable, "-m", "lucepatch", "--workspace", str(ws), "list"], cache)
    rec.update({"killed": proc.returncode == -signal.SIGKILL, "exit": proc.returncode,
                "run_said": out.decode() + err.decode(), "next_said": nxt.stderr, "next_exit": nxt.returncode,
                "printed": printed(err.decode() + nxt.stderr)})
    if mode == "rebase":
        return judge_rebase(rec, up, ws, cache, cal)
    state = checkout_state(up)
    rec["leftovers"] = leftovers(up, cache)
    if state == cal["before"]:
        rec["outcome"] = "as before"
    elif state == cal["done"]:
        rec["outcome"] = "completed"
    elif mode == "stash" and _stash_kept(state, cal["before"]):
        rec["outcome"] = "as before, changes at stash@{0}"
    else:
        rec["outcome"] = "MIXED: " + ", ".join(diff_keys(state, cal["before"])[:4])
        rec["vs_done"] = diff_keys(state, cal["done"])[:4]
    rec["ok"] = judge(rec)
    return rec


def _stash_kept(state: dict, before: dict) -> bool:
    """The rollback kept the user's changes as stash@{0} (visible in `git stash list`) and left
    everything else as before, the work tree without those changes."""
    if state["stash"].splitlines()[1:] != before["stash"].splitlines() or \
            not state["stash"].startswith("On main: lucepatch apply"):
        return False
    clean = {k: v for k, v in state.items() if k not in ("stash", "stash-content", "worktree", "staged", "index",
                                                         "reflogs", "refs")}
    return clean == {k: v for k, v in before.items() if k in clean} and bool(state["stash-content"][0])


def judge(rec: dict) -> bool:
    if rec["leftovers"] or rec["next_exit"] != 0 or rec["outcome"].startswith("MIXED"):
        return False
    said, outcome = rec["printed"].replace("+stale locks removed", ""), rec["outcome"]
    if said in ("restored", "unchanged"):
        return outcome == "as before"
    if said == "completed":
        return outcome == "completed"
    if said == "restored+stash kept":
        return outcome == "as before, changes at stash@{0}"
    if said == "nothing":
        # no journal was left to act on: the run had not written yet, or had finished; a run that
        # printed its result must have finished
        finished_said = "is now on" in rec["run_said"]
        return outcome == "completed" if finished_said else outcome in ("as before", "completed")
    return False


def judge_rebase(rec: dict, up: Path, ws: Path, cache: Path, cal: dict) -> dict:
    state = checkout_state(up)
    rec["leftovers"] = [p.name for p in (ws / "patches").iterdir() if p.name.startswith(".")]
    now = snapshot(ws / "patches" / "toy")
    rec["outcome"] = "old" if now == cal["ws_before"] else "new" if now == cal["ws_done"] else "MIXED workspace"
    if state != cal["before"]:
        rec["outcome"] += "; the checkout changed: " + ", ".join(diff_keys(state, cal["before"])[:4])
    # an open session finishes with an uninterrupted run's result
    st = run(argv("rebase", up, ws)[:5] + ["rebase", "toy", "--status"], cache)
    if "was interrupted" in st.stderr or "is stopped at" in st.stderr:
        fin = run(argv("rebase", up, ws)[:5] + ["rebase", "toy", "--continue", "--no-interactive"], cache)
        rec["continued"] = fin.returncode
        rec["outcome"] += " -> --continue -> " + ("new" if snapshot(ws / "patches" / "toy") == cal["ws_done"]
                                                  else f"NOT new (exit {fin.returncode}: {fin.stderr.strip()[-200:]})")
    rec["printed"] = "session open" if "continued" in rec else "nothing"
    rec["ok"] = (not rec["leftovers"] and rec["next_exit"] == 0 and "MIXED" not in rec["outcome"]
                 and "changed" not in rec["outcome"] and "NOT" not in rec["outcome"])
    return rec


def run_kills(world: dict, tmp: Path, mode: str, n: int, seed: int) -> list[dict]:
    cal = calibrate(world, tmp, mode)
    rng = random.Random(f"{seed}-{mode}")
    out = []
    for i in range(n):
        rec = kill_once(world, tmp, mode, cal, rng, i)
        out.append(rec)
        shutil.rmtree(tmp / f"{mode}-{i}", ignore_errors=True)
    return out


def table(recs: list[dict]) -> str:
    c = collections.Counter((r["mode"], r["outcome"] if r["ok"] else "BAD " + r["outcome"], r["printed"])
                            for r in recs)
    lines = [f"{'mode':7} {'outcome':50} {'printed':22} runs"]
    lines += [f"{m:7} {o[:50]:50} {p:22} {n}" for (m, o, p), n in sorted(c.items())]
    return "\n".join(lines)


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    return make_world(tmp_path_factory.mktemp("kill-world"))


@pytest.mark.parametrize("mode", list(KILLS))
def test_random_sigkills_leave_what_was_printed(world, tmp_path, mode):
    recs = run_kills(world, tmp_path, mode, KILLS[mode], SEED)
    bad = [r for r in recs if not r["ok"]]
    print(f"\nseed {SEED}\n" + table(recs))
    assert sum(r["killed"] for r in recs) >= KILLS[mode] * 0.8, "most runs must really be killed"
    assert not bad, (f"seed {SEED}: {len(bad)} of {len(recs)} kills left a state that is not what was printed:\n"
                     + "\n".join(f"  #{r['i']} delay {r['delay']}s {'group' if r['group'] else 'pid'}: {r['outcome']} "
                                 f"{r.get('vs_done', '')} | printed {r['printed']} | left {r['leftovers']} | "
                                 f"next: {r['next_said'].strip()[-300:]!r}" for r in bad[:8]))


# ---- a kill at every commit point: deterministic --------------------------------------------------
# git makes each change visible with a rename (a lock file onto index, HEAD, a ref, a reflog), the
# file created and written first, and the switch saves its journal the same way: those creations
# and renames are a run's commit points. A shim (tests/fixtures/killpoint/killpoint.c, LD_PRELOAD)
# numbers them across lucepatch and its gits and SIGKILLs the whole group right after a creation,
# or right before or after a rename — every run the same point, where a random kill finds some of
# them once in hundreds of runs (CI found the drop of `git stash pop` cut between its reflog and
# its ref that way: the user's older stash was dropped in its place).
KILLPOINT_C = Path(__file__).resolve().parent / "fixtures" / "killpoint" / "killpoint.c"


@pytest.fixture(scope="module")
def killpoint(tmp_path_factory) -> Path:
    gcc = needs.tool("gcc")
    so = tmp_path_factory.mktemp("killpoint") / "killpoint.so"
    subprocess.run([gcc, "-shared", "-fPIC", "-O2", "-o", str(so), str(KILLPOINT_C), "-ldl"], check=True)
    return so


def killpoint_env(so: Path, up: Path, cache: Path, counter: Path, **more: str) -> dict:
    """Count the renames onto the checkout's git folder and the switch's journal folder."""
    under = f"{up.resolve() / '.git'}/:{cache.resolve() / 'switch'}/"
    return {**env(cache), "LD_PRELOAD": str(so), "KILLPOINT_UNDER": under, "KILLPOINT_COUNTER": str(counter),
            **{f"KILLPOINT_{k.upper()}": v for k, v in more.items()}}


def commit_points(world: dict, tmp: Path, mode: str, so: Path) -> list[str]:
    """An uninterrupted run, its commit points logged: "<rename|create>: <program> -> <file>", in order."""
    d = tmp / f"points-{mode}"
    up, ws, cache = copy_world(world, d, mode)
    proc = subprocess.run(argv(mode, up, ws), env=killpoint_env(so, up, cache, d / "count", log=str(d / "log")),
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    points = []
    for line in (d / "log").read_text().splitlines():
        n, kind, rest = line.split(" ", 2)
        program, _, path = rest.rpartition(" -> ")
        assert int(n) == len(points) + 1, line
        where = path.split("/.git/", 1)[1] if "/.git/" in path else f"journal {Path(path).name}"
        points.append(f"{kind}: {' '.join(program.split()[:3]).rsplit('/', 1)[-1]} -> {where}")
    shutil.rmtree(d)
    return points


@pytest.mark.parametrize("mode,older_stash", [("apply", True), ("stash", True), ("stash", False)],
                         ids=["apply", "stash", "stash-no-older-stash"])
def test_a_group_kill_at_every_commit_point_leaves_what_was_printed(killpoint, tmp_path, mode, older_stash):
    world = make_world(tmp_path / "world", older_stash=older_stash)
    cal = calibrate(world, tmp_path, mode, runs=1)  # its states; no timing here
    points = commit_points(world, tmp_path, mode, killpoint)
    assert any(p.startswith("rename: git stash pop") for p in points) == (mode == "stash"), points
    assert any(p.startswith("create: ") and p.endswith(".tmp") for p in points), points  # a journal save
    recs = []
    for n, point in enumerate(points, 1):
        # right before a creation is right after the point before it
        for when in ("before", "after") if point.startswith("rename") else ("after",):
            d = tmp_path / f"{mode}-{n}-{when}"
            up, ws, cache = copy_world(world, d, mode)
            proc = subprocess.Popen(argv(mode, up, ws), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    env=killpoint_env(killpoint, up, cache, d / "count", at=str(n), when=when),
                                    start_new_session=True)
            rec = {"mode": mode, "i": n, "delay": f"{when} #{n} {point}", "group": True}
            recs.append(recover_and_judge(rec, proc, up, ws, cache, cal))
            shutil.rmtree(d, ignore_errors=True)
    print(f"\n{len(points)} commit points\n" + table(recs))
    bad = [r for r in recs if not r["ok"] or not r["killed"]]
    assert not bad, (f"{len(bad)} of {len(recs)} kills at a commit point left a state that is not what was printed:\n"
                     + "\n".join(f"  {r['delay']}: {'' if r['killed'] else 'NOT KILLED '}{r['outcome']} "
                                  f"{r.get('vs_done', '')} | printed {r['printed']} | left {r['leftovers']} | "
                                  f"next: {r['next_said'].strip()[-300:]!r}" for r in bad[:8]))



def test_a_recovery_killed_while_it_finishes_a_cut_drop_is_finished_by_the_next(killpoint, tmp_path):
    """`git stash pop` killed between its reflog and its ref (the window above); then the recovery
    that finishes that drop is killed at each of its own commit points: the command after it
    still leaves exactly an uninterrupted run's state, and says so."""
    world = make_world(tmp_path / "world")
    cal = calibrate(world, tmp_path, "stash", runs=1)
    points = commit_points(world, tmp_path, "stash", killpoint)
    n = points.index("rename: git stash pop -> logs/refs/stash") + 1

    def cut_drop(d: Path) -> tuple[Path, Path, Path]:
        up, ws, cache = copy_world(world, d, "stash")
        proc = subprocess.run(argv("stash", up, ws), env=killpoint_env(killpoint, up, cache, d / "count", at=str(n)),
                              capture_output=True, timeout=120, start_new_session=True, check=False)
        assert proc.returncode == -signal.SIGKILL
        assert git(up, "rev-parse", "refs/stash", env=RO) != git(up, "rev-parse", "refs/stash@{0}", env=RO)
        return up, ws, cache

    # the recovery's own commit points
    up, ws, cache = cut_drop(tmp_path / "probe")
    def recover(ws: Path) -> list[str]:
        return [sys.executable, "-m", "lucepatch", "--workspace", str(ws), "list"]

    res = subprocess.run(recover(ws), env=killpoint_env(killpoint, up, cache, tmp_path / "probe" / "count2",
                                                    log=str(tmp_path / "probe" / "log")), capture_output=True, check=False)
    assert res.returncode == 0 and checkout_state(up) == cal["done"], res.stderr
    mine = (tmp_path / "probe" / "log").read_text().splitlines()
    assert any(" rename " in line and line.endswith("/.git/refs/stash") for line in mine), mine
    recs = []
    for k, line in enumerate(mine, 1):
        for when in ("before", "after") if line.split()[1] == "rename" else ("after",):
            d = tmp_path / f"r-{k}-{when}"
            up, ws, cache = cut_drop(d)
            proc = subprocess.Popen(recover(ws), stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
                                    env=killpoint_env(killpoint, up, cache, d / "count2", at=str(k), when=when))
            rec = {"mode": "stash", "i": k, "delay": f"{when} #{k} of the recovery", "group": True}
            recs.append(recover_and_judge(rec, proc, up, ws, cache, cal))
            shutil.rmtree(d, ignore_errors=True)
    print("\n" + table(recs))
    bad = [r for r in recs if not r["ok"] or not r["killed"] or r["outcome"] != "completed"]
    assert not bad, [(r["delay"], r["killed"], r["outcome"], r.get("vs_done"), r["printed"], r["next_said"][-300:])
                     for r in bad]


if __name__ == "__main__":
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        w = make_world(Path(d) / "world")
        allrecs = []
        for m in (sys.argv[1:] or list(KILLS)):
            allrecs += run_kills(w, Path(d), m, KILLS[m], SEED)
            print(table([r for r in allrecs if r["mode"] == m]), flush=True)
        print(f"\nseed {SEED}, {len(allrecs)} runs, {sum(r['killed'] for r in allrecs)} killed\n" + table(allrecs))
        for r in allrecs:
            if not r["ok"]:
                print(f"#{r['mode']}-{r['i']} delay {r['delay']} {'group' if r['group'] else 'pid'}: {r['outcome']} "
                      f"{r.get('vs_done', '')} | printed {r['printed']} | left {r['leftovers']} | "
                      f"next: {r['next_said'].strip()[-300:]!r}")
