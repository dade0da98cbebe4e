"""[[submodule]] sub-targets in the engine: check, apply, status and matrix handle a superproject
and its submodules natively — each applied in its own submodule checkout, reported per
sub-target, switched all together or not at all — with faults injected across two sub-targets
(a failing hook in the second submodule, SIGINT/SIGKILL in the middle of the group switch)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO_ROOT, commit_all, git, init_repo, write
from sigint import POPEN
from test_fault_injection import _diff, relaxed_state

BRANCH = "lucepatch/super/1.0.0"
SUBENV = {"GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": "protocol.file.allow", "GIT_CONFIG_VALUE_0": "always"}


def _patch_of(repo: Path, rel: str, old: str, new: str, msg: str) -> str:
    """A format-patch text changing `old` to `new` in `rel` (made on a throwaway branch)."""
    git(repo, "checkout", "-q", "-b", "tmp-series")
    write(repo, rel, (repo / rel).read_text().replace(old, new))
    commit_all(repo, f"{msg}\n\nUpstream-Status: Pending\nSigned-off-by: F <f@x.invalid>")
    text = git(repo, "format-patch", "--zero-commit", "--no-signature", "--full-index", "-N", "-1", "--stdout", "HEAD")
    git(repo, "checkout", "-q", "-")
    git(repo, "branch", "-q", "-D", "tmp-series")
    return text


@pytest.fixture
def sup(tmp_path):
    """A superproject with two submodules (deps/a, deps/b), a one-patch series for each of the
    three, and a workspace whose target `super` names them as [[submodule]]s."""
    subs = {}
    for name in ("a", "b"):
        r = init_repo(tmp_path / f"up-{name}")
        write(r, f"{name}.c", "".join(f"int {name}{i} = {i};\n" for i in range(12)))
        subs[name] = (r, commit_all(r, f"{name} base"))
    top = init_repo(tmp_path / "super")
    write(top, "main.c", "int main(void) { return 0; }\n")
    for name, (r, _) in subs.items():
        git(top, "submodule", "add", "-q", str(r), f"deps/{name}", env=SUBENV)
    base = commit_all(top, "super base with submodules")
    ws = tmp_path / "ws"
    tdir = ws / "patches" / "super"
    (ws / "lucepatch.toml").parent.mkdir(parents=True, exist_ok=True)
    (ws / "lucepatch.toml").write_text("schema_version = 1\n")
    tdir.mkdir(parents=True)
    (tdir / "fix-main.patch").write_text(_patch_of(top, "main.c", "return 0", "return 1", "main returns one"))
    (tdir / "series").write_text("fix-main.patch\n")
    toml = (f'name = "super"\nupstream = "https://example.invalid/super"\nbase = "{base}"\nversion = "1.0.0"\n')
    for name, (r, sbase) in subs.items():
        sdir = tdir / "submodules" / name
        sdir.mkdir(parents=True)
        checkout = top / "deps" / name
        (sdir / f"fix-{name}.patch").write_text(_patch_of(checkout, f"{name}.c", f"int {name}5 = 5;",
                                                          f"int {name}5 = 50;", f"{name}5 is fifty"))
        (sdir / "series").write_text(f"fix-{name}.patch\n")
        toml += (f'\n[[submodule]]\nname = "{name}"\npath = "deps/{name}"\nbase = "{sbase}"\n'
                 f'series_dir = "submodules/{name}"\n')
    (tdir / "target.toml").write_text(toml)
    return {"top": top, "ws": ws, "tdir": tdir, "subs": subs, "base": base, "tmp": tmp_path}


def checkouts(s):
    return [s["top"], s["top"] / "deps/a", s["top"] / "deps/b"]


def states(s):
    """Each checkout as its user sees it; the superproject's .git/modules/ (the submodules' git
    dirs) is compared through the submodules' own states, objects and index stat cache excepted."""
    out = [relaxed_state(c) for c in checkouts(s)]
    out[0]["files"] = {k: v for k, v in out[0]["files"].items()
                       if not (k.startswith(".git/modules/") and ("/objects" in k or k.endswith("/index")))}
    return out


def lp(s, *args, cache=None, env=None):
    e = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "LUCEPATCH_CACHE": str(cache or s["tmp"] / "cache"), **(env or {})}
    return subprocess.run([sys.executable, "-m", "lucepatch", "--workspace", str(s["ws"]), *map(str, args)],
                          env=e, capture_output=True, text=True)


def test_check_reports_each_sub_target(sup, cli):
    r = cli("--workspace", sup["ws"], "check", "super", "--source", sup["top"], "--json")
    assert r.code == 0, r.err
    doc = r.json
    assert [p["status"] for p in doc["patches"]] == ["applied"]
    assert [(m["name"], m["path"], [p["status"] for p in m["patches"]]) for m in doc["submodules"]] == \
        [("a", "deps/a", ["applied"]), ("b", "deps/b", ["applied"])]
    r = cli("--workspace", sup["ws"], "check", "super", "--source", sup["top"])  # the result: a table per sub-target
    assert r.code == 0 and "submodule deps/a (a) onto" in r.out and "submodule deps/b (b) onto" in r.out, r.out
    # a submodule patch that no longer applies fails the check, the others are still reported
    sdir = sup["tdir"] / "submodules/b"
    p = sdir / "fix-b.patch"
    p.write_text(p.read_text().replace("-int b5 = 5;", "-int b5 = 7;"))
    r = cli("--workspace", sup["ws"], "check", "super", "--source", sup["top"], "--json")
    assert r.code == 1
    assert [m["patches"][0]["status"] for m in r.json["submodules"]] == ["applied", "conflict"]


@pytest.mark.parametrize("recurse", [False, True], ids=["plain", "submodule.recurse"])
def test_apply_switches_every_checkout(sup, recurse):
    if recurse:  # the superproject's checkout must not put the submodules back at their gitlinks
        git(sup["top"], "config", "submodule.recurse", "true")
    r = lp(sup, "apply", "super", "--source", sup["top"], "--json")
    assert r.returncode == 0, r.stderr
    for c in checkouts(sup):
        assert git(c, "symbolic-ref", "--short", "HEAD").strip() == BRANCH, c
    assert "return 1" in (sup["top"] / "main.c").read_text()
    assert "int a5 = 50;" in (sup["top"] / "deps/a/a.c").read_text()
    assert "int b5 = 50;" in (sup["top"] / "deps/b/b.c").read_text()
    import json

    doc = json.loads(r.stdout)
    assert doc["switched"] and len(doc["submodules"]) == 2


def test_apply_is_all_or_nothing(sup):
    p = sup["tdir"] / "submodules/b/fix-b.patch"
    p.write_text(p.read_text().replace("-int b5 = 5;", "-int b5 = 7;"))
    before = states(sup)
    r = lp(sup, "apply", "super", "--source", sup["top"])
    assert r.returncode == 1, r.stderr
    assert all(not _diff(a, b) for a, b in zip(states(sup), before))


@pytest.mark.parametrize("recurse", [False, True], ids=["plain", "submodule.recurse"])
def test_failing_hook_in_the_second_submodule_restores_all_three(sup, recurse):
    """deps/b (the second sub-target) refuses its checkout after the superproject and deps/a were
    switched: all three come back as they were — heads, branches, index, work trees — also with
    the user's submodule.recurse=true (which must not let one member's checkout move another)."""
    if recurse:
        git(sup["top"], "config", "submodule.recurse", "true")
    gd = Path(git(sup["top"] / "deps/b", "rev-parse", "--absolute-git-dir").strip())
    h = gd / "hooks" / "post-checkout"
    h.parent.mkdir(exist_ok=True)
    h.write_text("#!/bin/sh\necho 'b: hook refuses' >&2\nexit 1\n")
    h.chmod(0o755)
    before = states(sup)
    r = lp(sup, "apply", "super", "--source", sup["top"])
    assert r.returncode == 3, r.stderr
    lines = [l for l in r.stderr.splitlines() if l.strip()]
    assert len(lines) == 1 and "b: hook refuses" in lines[0] and "restored" in lines[0], r.stderr
    for a, b in zip(states(sup), before):
        assert not _diff(a, b), _diff(a, b)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGKILL], ids=lambda s: s.name)
@pytest.mark.parametrize("where", ["switch2-branch", "switch2-checkout"])
def test_signal_across_two_sub_targets(sup, sig, where):
    """The superproject and deps/a are switched, deps/b half-way: all three come back."""
    before = states(sup)
    pause, cache = sup["tmp"] / "pause", sup["tmp"] / "cache"
    pause.mkdir()
    env = {**os.environ, "LUCEPATCH_TEST_PAUSE_AT_PATCH": str(pause), "LUCEPATCH_CACHE": str(cache),
           "PYTHONPATH": str(REPO_ROOT)}
    proc = subprocess.Popen([sys.executable, "-m", "lucepatch", "--workspace", str(sup["ws"]), "apply", "super",
                             "--source", str(sup["top"])], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True, **POPEN)
    while True:  # release every pause point before `where`
        marks = [m for m in pause.iterdir() if not m.name.endswith(".tmp")] if pause.exists() else []
        hit = [m for m in marks if m.name == where]
        if hit:
            break
        for m in marks:
            m.unlink()
        if proc.poll() is not None:
            raise AssertionError(proc.stderr.read().decode())
    assert git(sup["top"] / "deps/a", "symbolic-ref", "--short", "HEAD").strip() == BRANCH  # really half-way
    os.kill(proc.pid, sig)
    proc.wait(timeout=60)
    err = proc.stderr.read().decode()
    if sig == signal.SIGKILL:
        assert len(list((cache / "switch").glob("*.json"))) == 3
        r = lp(sup, "list", cache=cache)
        assert r.returncode == 0, r.stderr
        assert r.stderr.count("restored") == 3, r.stderr
    else:
        assert proc.returncode == 130, err
        assert err.count("restored") == 3 and len(err.strip().splitlines()) == 1, err
    for a, b in zip(states(sup), before):
        assert not _diff(a, b), _diff(a, b)
    assert not list((cache / "switch").glob("*.json"))



def test_status_per_sub_target(sup):
    import json

    assert lp(sup, "apply", "super", "--source", sup["top"]).returncode == 0
    r = lp(sup, "status", "super", "--source", sup["top"], "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert [p["status"] for p in doc["patches"]] == ["applied"]
    assert [(m["path"], [p["status"] for p in m["patches"]]) for m in doc["submodules"]] == \
        [("deps/a", ["applied"]), ("deps/b", ["applied"])]


def test_matrix_follows_each_submodule_through_the_superproject(sup, cli):
    """Upstream moves deps/b to a commit that already has the fix, then to one that conflicts:
    the submodule's cells follow its gitlink in each superproject commit."""
    top, (rb, _) = sup["top"], sup["subs"]["b"]
    commits = []
    write(rb, "b.c", (rb / "b.c").read_text().replace("int b5 = 5;", "int b5 = 50;"))
    fixed = commit_all(rb, "b takes the fix")
    write(rb, "b.c", (rb / "b.c").read_text().replace("int b4 = 4;\nint b5 = 50;", "int b4 = 44;\nint b5 = 55;"))
    clash = commit_all(rb, "b moves on")
    for sha in (fixed, clash):
        git(top / "deps/b", "fetch", "-q", str(rb), sha, env=SUBENV)
        git(top / "deps/b", "checkout", "-q", "--detach", sha)
        git(top, "add", "deps/b")
        commits.append(commit_all(top, f"bump b to {sha[:7]}"))
    r = cli("--workspace", sup["ws"], "matrix", "super", "--source", top, "--range", f"{sup['base']}~0..HEAD", "--json")
    assert r.code == 0, r.err
    subs = {m["path"]: m for m in r.json["submodules"]}
    cells = {c["commit"]: c["cells"] for c in subs["deps/b"]["commits"]}
    assert cells[commits[0]] == ["already-upstream"] and cells[commits[1]] == ["conflict"]
    assert all(c["cells"] == ["applied"] for c in subs["deps/a"]["commits"])
    assert [c["submodule_commit"] for c in subs["deps/b"]["commits"]] == [fixed, clash]


def _bump(s, name: str, old: str, new: str, msg: str) -> tuple[str, str]:
    """Upstream submodule `name` takes a commit; the superproject pins it (a commit of its own).
    Returns (submodule commit, superproject commit)."""
    top, (r, _) = s["top"], s["subs"][name]
    write(r, f"{name}.c", (r / f"{name}.c").read_text().replace(old, new))
    sha = commit_all(r, msg)
    sub = top / "deps" / name
    git(sub, "fetch", "-q", str(r), sha, env=SUBENV)
    git(sub, "checkout", "-q", "--detach", sha)
    git(top, "add", f"deps/{name}")
    return sha, commit_all(top, f"bump {name} to {sha[:7]}")


def test_check_onto_checks_each_submodule_at_its_pin_there(sup, cli):
    """--onto REF: a submodule is checked at the commit REF pins it to, not at target.toml's base."""
    fixed, bumped = _bump(sup, "b", "int b5 = 5;", "int b5 = 50;", "b takes the fix")
    r = cli("--workspace", sup["ws"], "check", "super", "--source", sup["top"], "--onto", bumped, "--json")
    assert r.code == 0, r.err
    subs = {m["path"]: m for m in r.json["submodules"]}
    assert subs["deps/b"]["base"] == fixed and subs["deps/b"]["patches"][0]["status"] == "already-upstream"
    assert subs["deps/a"]["base"] == sup["subs"]["a"][1] and subs["deps/a"]["patches"][0]["status"] == "applied"
    # a superproject commit without one of the submodules: its series is judged there (issue 37),
    # in the superproject, and conflicts naming why; the others are still checked
    git(sup["top"], "rm", "-q", "--cached", "deps/a")
    git(sup["top"], "commit", "-q", "-m", "drop a")
    gone = git(sup["top"], "rev-parse", "HEAD").strip()
    r = cli("--workspace", sup["ws"], "check", "super", "--source", sup["top"], "--onto", gone, "--json")
    assert r.code == 1, r.err
    subs = {m["path"]: m for m in r.json["submodules"]}
    assert subs["deps/a"]["place"]["layout"] == "absent" and subs["deps/a"]["patches"][0]["status"] == "conflict"
    assert f"deps/a is not in {gone[:12]}" in subs["deps/a"]["patches"][0]["detail"]
    assert subs["deps/b"]["patches"][0]["status"] == "already-upstream"


def test_probe_tree_is_the_engines_sub_targets(sup, tmp_path):
    """builders.tree.prepare_tree applies through engine/subtargets.applied_each: the patched
    superproject with each patched submodule tree at its path; a conflict names the sub-target."""
    import contextlib

    from lucepatch.builders.tree import prepare_tree
    from lucepatch.errors import CheckFailed
    from lucepatch.target import load_target_dir

    t = load_target_dir(sup["tdir"])
    before = states(sup)
    with contextlib.ExitStack() as stack:
        tree = prepare_tree(t, sup["top"], "patched", tmp_path / "c", stack)
        assert "return 1" in (tree.root / "main.c").read_text()
        assert "int a5 = 50;" in (tree.root / "deps/a/a.c").read_text()
        assert "int b5 = 50;" in (tree.root / "deps/b/b.c").read_text()
        assert [(r["name"], r["path"], r["patches"]) for r in tree.repos] == [
            ("super", ".", ["fix-main.patch"]), ("super.a", "deps/a", ["fix-a.patch"]),
            ("super.b", "deps/b", ["fix-b.patch"])]
    p = sup["tdir"] / "submodules/b/fix-b.patch"
    p.write_text(p.read_text().replace("-int b5 = 5;", "-int b5 = 7;"))
    with contextlib.ExitStack() as stack, pytest.raises(CheckFailed, match=r"super\.b patched: fix-b\.patch"):
        prepare_tree(load_target_dir(sup["tdir"]), sup["top"], "patched", tmp_path / "c", stack)
    for a, b in zip(states(sup), before):
        assert not _diff(a, b), _diff(a, b)


def _workspace_files(s):
    return {str(p.relative_to(s["ws"])): p.read_bytes() for p in sorted(s["ws"].rglob("*")) if p.is_file()}


def test_rebase_keeps_submodule_series_when_onto_keeps_their_pins(sup, cli):
    """The superproject moves (a commit that touches only its own files): the session carries its
    series; each submodule stays at its pin, its series and base as they were."""
    top = sup["top"]
    write(top, "README", "super moves on\n")
    onto = commit_all(top, "super moves on")
    subs_before = {k: v for k, v in _workspace_files(sup).items() if k.startswith("patches/super/submodules/")}
    r = cli("--workspace", sup["ws"], "rebase", "super", "--source", top, "--onto", onto, "--no-interactive",
            "--no-behaviour", "--json")
    assert r.code == 0, r.err
    assert r.err.count("stays at") == 2 and "submodule deps/b (b) stays at" in r.err
    toml = (sup["tdir"] / "target.toml").read_text()
    assert f'base = "{onto}"' in toml
    for name, (_, sbase) in sup["subs"].items():
        assert f'base = "{sbase}"' in toml
    assert {k: v for k, v in _workspace_files(sup).items() if k.startswith("patches/super/submodules/")} == subs_before
    r = cli("--workspace", sup["ws"], "check", "super", "--source", top, "--json")
    assert r.code == 0 and r.json["base"] == onto, r.err


def test_rebase_carries_a_submodule_that_moves_in_the_same_session(sup, cli):
    """REF pins deps/b at a commit that took b's fix (issue 37: was refused as 'not supported yet'):
    the dry run walks b's patch with the superproject's, absorbed by the submodule's own history
    (patch-id of the commit in b), and the session writes it to submodules/b/absorbed/ with b's
    new base in target.toml; deps/a stays where it was."""
    fixed, bumped = _bump(sup, "b", "int b5 = 5;", "int b5 = 50;", "b takes the fix")
    before = _workspace_files(sup)
    r = cli("--workspace", sup["ws"], "rebase", "super", "--source", sup["top"], "--onto", bumped, "--dry-run",
            "--no-behaviour", "--json")
    assert r.code == 0, r.err
    subs = {m["path"]: m for m in r.json["submodules"]}
    assert not subs["deps/a"]["moved"] and subs["deps/b"]["moved"] and subs["deps/b"]["onto"] == fixed
    assert [(p["status"], p["action"], p["signal"]) for p in subs["deps/b"]["patches"]] == [
        ("already-upstream", "absorbed", "patch-id")]  # the state, as check says it; the action the session takes
    rows = {row["name"]: row for row in r.json["patches"]}
    assert rows["b/fix-b.patch"]["upstream_commit"] == fixed and rows["fix-main.patch"]["action"] == "carried"
    assert "submodule deps/a (a) stays at" in r.err and "sub-target b (deps/b) moves" in r.err
    assert _workspace_files(sup) == before
    r = cli("--workspace", sup["ws"], "rebase", "super", "--source", sup["top"], "--onto", bumped, "--no-interactive",
            "--no-behaviour")
    assert r.code == 0, r.err
    toml = (sup["tdir"] / "target.toml").read_text()
    assert f'base = "{bumped}"' in toml and f'base = "{fixed}"' in toml and f'base = "{sup["subs"]["a"][1]}"' in toml
    sdir = sup["tdir"] / "submodules/b"
    assert (sdir / "series").read_text().strip() == "" and not (sdir / "fix-b.patch").exists()
    absorbed = (sdir / "absorbed/fix-b.patch").read_text()
    assert f"Applied-Upstream: {fixed}" in absorbed and "diff --git a/b.c b/b.c" in absorbed  # its own coordinates
    r = cli("--workspace", sup["ws"], "check", "super", "--source", sup["top"], "--json")
    assert r.code == 0 and r.json["base"] == bumped, r.err


def test_api_rebase_and_check_know_sub_targets(sup, tmp_path):
    from lucepatch import api
    from lucepatch.target import load_target_dir

    fixed, bumped = _bump(sup, "b", "int b5 = 5;", "int b5 = 50;", "b takes the fix")
    t, cache = load_target_dir(sup["tdir"]), tmp_path / "c"
    doc = api.rebase(t, sup["top"], cache, bumped, dry_run=True, no_behaviour=True)
    assert [(m["path"], m["moved"], m["onto"]) for m in doc["submodules"]] == \
        [("deps/a", False, sup["subs"]["a"][1]), ("deps/b", True, fixed)]
    res = api.check(t, sup["top"], cache, onto=bumped)
    assert [(st.path, [o.status for o in r.outcomes]) for st, r in res.subs] == \
        [("deps/a", ["applied"]), ("deps/b", ["already-upstream"])]


def test_gitlinks_reads_every_commit_in_one_git_process(tmp_path, monkeypatch):
    """gitlinks against git itself (`rev-parse C:path` + the entry's mode from ls-tree), per commit, over
    a history where the path is absent, a gitlink, a folder, a file and a gitlink again; top-level and
    nested paths; and one git process for the whole range however many commits lack the path."""
    from lucepatch import git as lpgit
    from lucepatch.engine.subtargets import gitlinks

    r = init_repo(tmp_path / "hist")
    write(r, "README", "x\n")
    commits = [commit_all(r, "no submodule yet")]

    def commit_index(msg):  # the index as it is: gitlinks to commits this repository does not have
        git(r, "commit", "-q", "-m", msg)
        return git(r, "rev-parse", "HEAD").strip()

    fake = ["1" * 40, "2" * 40, "3" * 40]
    for i, oid in enumerate(fake[:2]):  # a gitlink at deps/mod and at top, moving
        git(r, "update-index", "--add", "--cacheinfo", f"160000,{oid},deps/mod")
        git(r, "update-index", "--add", "--cacheinfo", f"160000,{oid},top")
        commits.append(commit_index(f"link {i}"))
    git(r, "rm", "-q", "--cached", "deps/mod", "top")
    write(r, "deps/mod/file.c", "int f;\n")  # a plain folder at the path
    write(r, "top", "a file\n")
    git(r, "add", "deps/mod/file.c", "top")
    commits.append(commit_index("folder and file"))
    git(r, "rm", "-q", "-r", "--cached", "deps/mod", "top")
    (r / "top").unlink()
    git(r, "update-index", "--add", "--cacheinfo", f"160000,{fake[2]},deps/mod")
    git(r, "update-index", "--add", "--cacheinfo", f"160000,{fake[2]},top")
    commits.append(commit_index("linked again"))
    write(r, "deps/other.c", "int o;\n")
    git(r, "add", "deps/other.c")
    git(r, "rm", "-q", "--cached", "deps/mod")
    commits.append(commit_index("deps without mod"))

    def by_git(c, path):
        out = subprocess.run(["git", "ls-tree", c, "--", path], cwd=r, capture_output=True, text=True).stdout.split()
        return out[2] if out and out[0] == "160000" else None

    calls = []
    real = lpgit.run_bytes
    monkeypatch.setattr(lpgit, "run_bytes", lambda *a, **k: calls.append(a) or real(*a, **k))
    for path in ("deps/mod", "top"):
        want = [by_git(c, path) for c in commits]
        assert gitlinks(r, commits, path) == want
    assert gitlinks(r, commits, "deps/mod") == [None, fake[0], fake[1], None, fake[2], None]
    assert gitlinks(r, commits, "top") == [None, fake[0], fake[1], None, fake[2], fake[2]]
    assert gitlinks(r, commits, "nowhere/mod") == [None] * len(commits)
    assert gitlinks(r, [], "deps/mod") == []
    assert len(calls) == 5  # one process per call, however many commits lack the path


@pytest.mark.upstream
def test_gitlinks_on_lucebox_history_match_git():
    """Over lucebox-hub's whole history (submodules added part-way, early commits without them):
    the one-process reading agrees with git's own answer for every commit."""
    src = os.environ.get("LUCEPATCH_SRC_LUCEBOX")
    if not src:
        pytest.skip("no-upstream: LUCEPATCH_SRC_LUCEBOX is not set (lucebox-hub 8305b6c with submodules)")
    from lucepatch.engine.subtargets import gitlinks

    commits = git(Path(src), "rev-list", "HEAD").split()
    for path in ("server/deps/llama.cpp", "server/deps/Block-Sparse-Attention"):
        want = []
        for c in commits:
            out = subprocess.run(["git", "ls-tree", c, "--", path], cwd=src, capture_output=True, text=True).stdout.split()
            want.append(out[2] if out and out[0] == "160000" else None)
        got = gitlinks(Path(src), commits, path)
        assert got == want
        assert any(w is None for w in want) and any(w for w in want)  # both kinds occur in that history
