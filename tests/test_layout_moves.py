"""A sub-target whose place changes upstream (issue 37): a submodule vendored into a folder (what
Luce-Org/lucebox did with llama.cpp in 2026-07), a folder that becomes a submodule again, a submodule
that moves or disappears — for check, status, matrix, rebase --dry-run and a rebase session
(continue / skip / abort, a SIGKILL at a step). Every upstream here is built on the fly: a library
repository `lib` and a superproject `up` that holds it at deps/lib, with one branch per case."""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from unittest import mock

import pytest

from conftest import REPO_ROOT, git, init_repo, write
from sigint import POPEN
from lucepatch.engine.transaction import snapshot

SUBENV = {"GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": "protocol.file.allow", "GIT_CONFIG_VALUE_0": "always"}
LIB = "".join(f"int lib{i} = {i};\n" for i in range(12))
VENDORED = "/* vendored from lib */\n" + LIB


def _commit(repo: Path, msg: str) -> str:
    # gitlinks of this index have no checkout here: `add -A` must not take them for deletions
    links = [ln.split("\t", 1)[1] for ln in git(repo, "ls-files", "-s").splitlines() if ln.startswith("160000")]
    git(repo, "add", "-A", "--", ".", *[f":(exclude){x}" for x in links])
    git(repo, "commit", "-q", "--allow-empty", "-m", msg)
    return git(repo, "rev-parse", "HEAD").strip()


def _branch(up: Path, name: str, start: str) -> None:
    git(up, "checkout", "-q", "-f", "-B", name, start)
    git(up, "clean", "-fdxq")


def _vendor(up: Path, text: str, msg: str) -> str:
    """deps/lib stops being a submodule: its files become a folder of the superproject."""
    git(up, "rm", "-q", "--cached", "deps/lib")
    git(up, "config", "-f", ".gitmodules", "--remove-section", "submodule.deps/lib")
    write(up, "deps/lib/lib.c", text)
    write(up, "deps/lib/VENDOR.md", "lib, vendored\n")
    return _commit(up, msg)


def _gitlink(up: Path, path: str, commit: str, url: str) -> None:
    git(up, "update-index", "--add", "--cacheinfo", f"160000,{commit},{path}")
    git(up, "config", "-f", ".gitmodules", f"submodule.{path}.path", path)
    git(up, "config", "-f", ".gitmodules", f"submodule.{path}.url", url)
    git(up, "add", ".gitmodules")


def _format_patch(repo: Path, rel: str, old: str, new: str, msg: str) -> str:
    """A format-patch file changing `old` to `new` in `rel` (on a throwaway branch)."""
    head = git(repo, "rev-parse", "HEAD").strip()
    git(repo, "checkout", "-q", "--detach")
    write(repo, rel, (repo / rel).read_text().replace(old, new))
    _commit(repo, f"{msg}\n\nUpstream-Status: Pending\nSigned-off-by: F <f@x.invalid>")
    text = git(repo, "format-patch", "--zero-commit", "--no-signature", "--full-index", "-N", "-1", "--stdout", "HEAD")
    git(repo, "checkout", "-q", "-f", head)
    return text


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """lib (L0), up (S0: deps/lib a submodule at L0, then one branch per case) and a checkout of up
    at S0 with its submodule initialised (what a user has)."""
    root = tmp_path_factory.mktemp("layout")
    lib = init_repo(root / "lib")
    write(lib, "lib.c", LIB)
    l0 = _commit(lib, "lib base")
    up = init_repo(root / "up")
    write(up, "main.c", "int main(void) { return 0; }\n")
    _gitlink(up, "deps/lib", l0, str(lib))
    c = {"L0": l0, "S0": _commit(up, "superproject with lib as a submodule")}
    write(up, "README", "moves on\n")
    c["S1"] = _commit(up, "superproject moves on")
    # vendored with a header line: lib.c at L0 (the patch's preimage) is a blob of lib's objects only
    c["V1"] = _vendor(up, VENDORED, "vendor lib (a folder now)")
    fixed = LIB.replace("int lib5 = 5;", "int lib5 = 50;")
    write(up, "deps/lib/lib.c", VENDORED.replace("int lib5 = 5;", "int lib5 = 50;"))
    c["V2"] = _commit(up, "lib5 is fifty")  # the same change as the series' patch: patch-id
    git(up, "branch", "-q", "line", "HEAD")
    for name, text in (("vend-3way", LIB.replace("int lib3 = 3;", "int lib3 = 33;")),
                       ("vend-conflict", LIB.replace("int lib5 = 5;", "int lib5 = 7;")),
                       ("vend-fixed", fixed.replace("int lib1 = 1;", "int lib1 = 11;"))):
        _branch(up, name, c["S0"])
        c[name] = _vendor(up, text, f"vendor lib ({name})")
    _branch(up, "moved", c["S0"])
    git(up, "rm", "-q", "--cached", "deps/lib")
    git(up, "config", "-f", ".gitmodules", "--remove-section", "submodule.deps/lib")
    _gitlink(up, "third_party/lib", l0, str(lib))
    c["moved"] = _commit(up, "lib moves to third_party/")
    _branch(up, "gone", c["S0"])
    git(up, "rm", "-q", "--cached", "deps/lib")
    git(up, "config", "-f", ".gitmodules", "--remove-section", "submodule.deps/lib")
    c["gone"] = _commit(up, "drop lib")
    _branch(up, "back", c["V1"])  # the folder becomes a submodule again
    git(up, "rm", "-q", "-r", "deps/lib")
    _gitlink(up, "deps/lib", l0, str(lib))
    c["back"] = _commit(up, "lib is a submodule again")
    _branch(up, "main", c["S0"])
    src = root / "src"
    git(root, "clone", "-q", str(up), str(src))
    git(src, "checkout", "-q", c["S0"])
    git(src, "submodule", "update", "--init", "-q", env=SUBENV)
    for name in ("line", "vend-3way", "vend-conflict", "vend-fixed", "moved", "gone", "back"):
        git(src, "branch", "-q", "-f", name, f"origin/{name}")
    patches = {"main": _format_patch(src, "main.c", "return 0", "return 1", "main returns one"),
               "lib": _format_patch(src / "deps/lib", "lib.c", "int lib5 = 5;", "int lib5 = 50;", "lib5 is fifty")}
    return {"root": root, "lib": lib, "up": up, "src": src, "c": c, "patches": patches}


def workspace(world, tmp: Path, *, base: str | None = None, layout: str = "submodule") -> Path:
    """A workspace whose target `super` carries fix-main.patch and, as [[submodule]] lib, fix-lib.patch."""
    ws = tmp / "ws"
    tdir = ws / "patches" / "super"
    (tdir / "submodules/lib").mkdir(parents=True)
    (ws / "lucepatch.toml").write_text("schema_version = 1\n")
    (tdir / "fix-main.patch").write_text(world["patches"]["main"])
    (tdir / "series").write_text("fix-main.patch\n")
    (tdir / "submodules/lib/fix-lib.patch").write_text(world["patches"]["lib"])
    (tdir / "submodules/lib/series").write_text("fix-lib.patch\n")
    sub = (f'base = "{world["c"]["L0"]}"\n' if layout == "submodule" else 'layout = "folder"\n')
    (tdir / "target.toml").write_text(
        f'name = "super"\nupstream = "https://example.invalid/super"\nbase = "{base or world["c"]["S0"]}"\n'
        f'version = "1.0.0"\n\n[[submodule]]\nname = "lib"\npath = "deps/lib"\nurl = "{world["lib"]}"\n{sub}'
        'series_dir = "submodules/lib"\n')
    return ws


def lp(ws: Path, *args, cache: Path, pause: Path | None = None, popen: bool = False):
    """`lucepatch --workspace WS ARGS` with its own cache: in this process (main(), as the cli fixture runs it: a
    process start costs ~1 s on a busy 2-core CI machine, and this module makes ~35 calls), or, with `popen`, as a
    process of its own that the SIGKILL tests can pause and kill."""
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "LUCEPATCH_CACHE": str(cache)}
    env.pop("LUCEPATCH_TEST_PAUSE_AT_PATCH", None)
    cmd = ["--workspace", str(ws), *map(str, args)]
    if not popen:
        from lucepatch.main import main

        out, err = io.StringIO(), io.StringIO()
        with mock.patch.dict(os.environ, env, clear=True), contextlib.redirect_stdout(out), \
                contextlib.redirect_stderr(err):
            code = main(cmd)
        return subprocess.CompletedProcess(cmd, code, out.getvalue(), err.getvalue())
    if pause:
        env["LUCEPATCH_TEST_PAUSE_AT_PATCH"] = str(pause)
    return subprocess.Popen([sys.executable, "-m", "lucepatch", *cmd], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, start_new_session=True, **POPEN)


def sub_of(doc: dict) -> dict:
    """The one sub-target's part of a verb's --json document, once the document is checked against
    the verb's schema (docs/schema/<verb>.schema.json)."""
    import jsonschema

    schema = json.loads((REPO_ROOT / "docs/schema" / f"{doc['verb']}.schema.json").read_text())
    jsonschema.validate(doc, schema)
    [m] = doc["submodules"]
    return m


# ---------------------------------------------------------------------------------------- check
@pytest.mark.parametrize("ref,status", [("V1", "applied"), ("vend-3way", "applied-3way"), ("vend-conflict", "conflict"),
                                        ("vend-fixed", "already-upstream")])
def test_check_onto_a_vendored_folder_judges_the_sub_targets_patches_there(world, tmp_path, ref, status):
    """`check --onto REF` where deps/lib is a folder: the lib series re-rooted under deps/lib/ and
    judged in the superproject — exact, 3-way (the preimage blob comes from the submodule's objects),
    conflict, or already there (a 3-way no-op); the superproject's own patch beside it."""
    ws = workspace(world, tmp_path)
    r = lp(ws, "check", "super", "--source", world["src"], "--onto", world["c"].get(ref, ref), "--json",
           cache=tmp_path / "c")
    assert r.returncode == (1 if status == "conflict" else 0), r.stderr
    doc = json.loads(r.stdout)
    assert [p["status"] for p in doc["patches"]] == ["applied"]
    m = sub_of(doc)
    assert m["place"]["layout"] == "folder" and m["place"]["at"] == "deps/lib"
    assert [p["status"] for p in m["patches"]] == [status], m["patches"]
    assert m["base"] == doc["base"]  # it applied on the superproject's commit


def test_the_3way_needs_the_submodules_objects(world, tmp_path, monkeypatch):
    """Without the submodule's objects (its checkout not initialised), the vend-3way case has no
    preimage blob: a conflict that says so — the alternates are what makes it a 3-way merge."""
    from lucepatch.engine import layout, subtargets
    from lucepatch.target import load_target_dir

    ws = workspace(world, tmp_path)
    monkeypatch.setattr(layout, "checkout_of", lambda *a, **k: None)
    res = subtargets.check_all(load_target_dir(ws / "patches/super"), world["src"], tmp_path / "c",
                               onto=world["c"]["vend-3way"])
    [(_st, r)] = res.subs
    assert [o.status for o in r.outcomes] == ["conflict"] and "lacks the necessary blob" in r.outcomes[0].detail


def test_check_onto_a_moved_and_a_removed_submodule(world, tmp_path):
    ws = workspace(world, tmp_path)
    r = lp(ws, "check", "super", "--source", world["src"], "--onto", world["c"]["moved"], "--json", cache=tmp_path / "c")
    assert r.returncode == 0, r.stderr
    m = sub_of(json.loads(r.stdout))
    assert m["place"] == {"layout": "submodule", "at": "third_party/lib", "declared": "deps/lib",
                          "commit": world["c"]["L0"], "moved": True}
    assert [p["status"] for p in m["patches"]] == ["applied"]
    r = lp(ws, "check", "super", "--source", world["src"], "--onto", world["c"]["gone"], "--json", cache=tmp_path / "c")
    assert r.returncode == 1, r.stderr
    m = sub_of(json.loads(r.stdout))
    assert m["place"]["layout"] == "absent" and m["patches"][0]["status"] == "conflict"
    assert f"deps/lib is not in {world['c']['gone'][:12]}" in m["patches"][0]["detail"]


def test_and_back_a_folder_target_checked_where_it_is_a_submodule_again(world, tmp_path):
    """A line whose base holds lib as a folder (layout = "folder"): check at its base applies the
    lib series in the superproject; --onto a commit where lib is a submodule again applies it in
    the submodule's checkout at the gitlink."""
    ws = workspace(world, tmp_path, base=world["c"]["V1"], layout="folder")
    r = lp(ws, "check", "super", "--source", world["src"], "--json", cache=tmp_path / "c")
    assert r.returncode == 0, r.stderr
    m = sub_of(json.loads(r.stdout))
    assert m["place"]["layout"] == "folder" and [p["status"] for p in m["patches"]] == ["applied"]
    r = lp(ws, "check", "super", "--source", world["src"], "--onto", world["c"]["back"], "--json", cache=tmp_path / "c")
    assert r.returncode == 0, r.stderr
    m = sub_of(json.loads(r.stdout))
    assert m["place"]["layout"] == "submodule" and m["base"] == world["c"]["L0"]
    assert [p["status"] for p in m["patches"]] == ["applied"]
    # target.toml that contradicts the base is one line
    bad = workspace(world, tmp_path / "bad", base=world["c"]["S0"], layout="folder")
    r = lp(bad, "check", "super", "--source", world["src"], cache=tmp_path / "c")
    assert r.returncode == 2 and "says layout = 'folder', but the base" in r.stderr, r.stderr


# --------------------------------------------------------------------------------- status, matrix
def test_status_at_a_vendored_head_names_the_upstream_commit(world, tmp_path):
    """A checkout at V2 (lib vendored, then upstream took the fix): the lib patch is
    already-upstream by patch-id, naming V2; at V1 it is not applied yet and would apply exactly."""
    ws = workspace(world, tmp_path)
    for at, want in (("V2", ("already-upstream", "patch-id", "V2")), ("V1", ("not-applied", None, None))):
        src = tmp_path / f"src-{at}"
        git(tmp_path, "clone", "-q", str(world["up"]), str(src))
        git(src, "checkout", "-q", world["c"][at])
        r = lp(ws, "status", "super", "--source", src, "--json", cache=tmp_path / "c")
        assert r.returncode == 0, r.stderr
        m = sub_of(json.loads(r.stdout))
        row = m["patches"][0]
        assert m["place"]["layout"] == "folder"
        assert (row["status"], row["signal"], row["commit"]) == (want[0], want[1], world["c"].get(want[2])), row


def test_matrix_follows_the_sub_target_across_the_vendoring(world, tmp_path):
    ws = workspace(world, tmp_path)
    r = lp(ws, "matrix", "super", "--source", world["src"], "--range", f"{world['c']['S0']}..line", "--json",
           cache=tmp_path / "c")
    assert r.returncode == 0, r.stderr
    m = sub_of(json.loads(r.stdout))
    got = [(c["commit"], c["layout"], c["cells"]) for c in m["commits"]]
    c = world["c"]
    assert got == [(c["S1"], "submodule", ["applied"]), (c["V1"], "folder", ["applied"]),
                   (c["V2"], "folder", ["already-upstream"])], got


# --------------------------------------------------------------------------------- rebase
def _patch_id(text: str) -> str:
    return subprocess.run(["git", "patch-id", "--stable"], input=text.encode(), capture_output=True).stdout.split()[0]


def _files(ws: Path) -> dict:
    return {str(p.relative_to(ws)): p.read_bytes() for p in sorted(ws.rglob("*")) if p.is_file()}


def test_rebase_across_the_vendoring_writes_the_folder_line(world, tmp_path):
    """--dry-run then a session onto V1: the lib patch is walked in the superproject (row
    lib/fix-lib.patch) and written back in its own coordinates; [[submodule]] lib says
    layout = "folder" and loses its base; `check` on the result applies it in the folder."""
    ws, cache = workspace(world, tmp_path), tmp_path / "c"
    before = _files(ws)
    r = lp(ws, "rebase", "super", "--source", world["src"], "--onto", world["c"]["V1"], "--dry-run", "--no-behaviour",
           "--json", cache=cache)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert [(p["name"], p["applies"]) for p in doc["patches"]] == [("fix-main.patch", "exact"),
                                                                   ("lib/fix-lib.patch", "exact")]
    assert sub_of(doc)["place_onto"]["layout"] == "folder" and _files(ws) == before
    r = lp(ws, "rebase", "super", "--source", world["src"], "--onto", world["c"]["V1"], "--no-interactive",
           "--no-behaviour", cache=cache)
    assert r.returncode == 0, r.stderr
    toml = (ws / "patches/super/target.toml").read_text()
    assert 'layout = "folder"' in toml and world["c"]["L0"] not in toml and f'base = "{world["c"]["V1"]}"' in toml
    new = (ws / "patches/super/submodules/lib/fix-lib.patch").read_text()
    old = world["patches"]["lib"]
    # the same change in lib's own coordinates, re-exported against the vendored file (its blobs, its offset)
    assert "diff --git a/lib.c b/lib.c" in new and "\n lib.c | 2 +-\n" in new and new != old
    assert new.split("\n---\n")[0] == old.split("\n---\n")[0]  # the words are the author's
    assert _patch_id(new) == _patch_id(old)
    r = lp(ws, "check", "super", "--source", world["src"], "--json", cache=cache)
    assert r.returncode == 0, r.stderr
    assert [p["status"] for p in sub_of(json.loads(r.stdout))["patches"]] == ["applied"]


@pytest.mark.parametrize("ref,signal_", [("V2", "patch-id"), ("vend-fixed", "reverse-apply")])
def test_a_session_absorbs_what_the_vendored_folder_has(world, tmp_path, ref, signal_):
    ws, cache = workspace(world, tmp_path), tmp_path / "c"
    onto = world["c"].get(ref) or ref
    r = lp(ws, "rebase", "super", "--source", world["src"], "--onto", onto, "--no-interactive", "--no-behaviour",
           "--json", cache=cache)
    assert r.returncode == 0, r.stderr
    row = next(p for p in json.loads(r.stdout)["patches"] if p["name"] == "lib/fix-lib.patch")
    assert (row["action"], row["signal"]) == ("absorbed", signal_), row
    if signal_ == "patch-id":
        assert row["upstream_commit"] == world["c"]["V2"]
    absorbed = (ws / "patches/super/submodules/lib/absorbed/fix-lib.patch").read_text()
    assert "diff --git a/lib.c b/lib.c" in absorbed and "Applied-Upstream-Signal: " + signal_ in absorbed
    assert (ws / "patches/super/submodules/lib/series").read_text().strip() == ""


def test_a_conflict_in_the_vendored_folder_stops_for_a_human(world, tmp_path):
    """vend-conflict: the session stops at lib/fix-lib.patch with git's markers in deps/lib/lib.c of
    its work tree; --continue after the human's fix writes the patch back in lib's coordinates.
    --skip and --abort on the same stop."""
    onto = world["c"]["vend-conflict"]
    for how in ("continue", "skip", "abort"):
        ws, cache = workspace(world, tmp_path / how), tmp_path / how / "c"
        before = _files(ws)
        r = lp(ws, "rebase", "super", "--source", world["src"], "--onto", onto, "--no-interactive", "--no-behaviour",
               "--json", cache=cache)
        assert r.returncode == 1, r.stderr
        doc = json.loads(r.stdout)
        assert doc["conflicts"] == ["lib/fix-lib.patch"] and _files(ws) == before
        wt = Path(doc["session"]["worktree"])
        assert "<<<<<<<" in (wt / "deps/lib/lib.c").read_text()
        if how == "continue":
            (wt / "deps/lib/lib.c").write_text(LIB.replace("int lib5 = 5;", "int lib5 = 50;"))
            r = lp(ws, "rebase", "super", "--continue", cache=cache)
            assert r.returncode == 0, r.stderr
            new = (ws / "patches/super/submodules/lib/fix-lib.patch").read_text()
            assert "diff --git a/lib.c b/lib.c" in new and "-int lib5 = 7;" in new and "+int lib5 = 50;" in new
            assert 'layout = "folder"' in (ws / "patches/super/target.toml").read_text()
        elif how == "skip":
            r = lp(ws, "rebase", "super", "--skip", "lib/fix-lib", cache=cache)
            assert r.returncode == 0, r.stderr
            # a person's skip, not upstream's code: dropped/ in the sub-target's own folder, never
            # Applied-Upstream (issue 41: only the one judge writes that)
            dropped = (ws / "patches/super/submodules/lib/dropped/fix-lib.patch").read_text()
            assert "Dropped-Why: rebase --skip by a person" in dropped and "Applied-Upstream" not in dropped
            assert "diff --git a/lib.c b/lib.c" in dropped  # in the sub-target's own coordinates
        else:
            r = lp(ws, "rebase", "super", "--abort", cache=cache)
            assert r.returncode == 0 and _files(ws) == before, r.stderr


def test_a_session_carries_a_moved_submodule_and_one_that_comes_back(world, tmp_path):
    ws, cache = workspace(world, tmp_path / "moved"), tmp_path / "moved" / "c"
    r = lp(ws, "rebase", "super", "--source", world["src"], "--onto", world["c"]["moved"], "--no-interactive",
           "--no-behaviour", cache=cache)
    assert r.returncode == 0, r.stderr
    toml = (ws / "patches/super/target.toml").read_text()
    assert 'path = "third_party/lib"' in toml and f'base = "{world["c"]["L0"]}"' in toml
    assert (ws / "patches/super/submodules/lib/fix-lib.patch").read_text() == world["patches"]["lib"]
    ws, cache = workspace(world, tmp_path / "back", base=world["c"]["V1"], layout="folder"), tmp_path / "back" / "c"
    r = lp(ws, "rebase", "super", "--source", world["src"], "--onto", world["c"]["back"], "--no-interactive",
           "--no-behaviour", cache=cache)
    assert r.returncode == 0, r.stderr
    toml = (ws / "patches/super/target.toml").read_text()
    assert "layout = " not in toml and f'base = "{world["c"]["L0"]}"' in toml


def test_a_gone_sub_target_is_skipped_and_recorded_absent(world, tmp_path):
    ws, cache = workspace(world, tmp_path), tmp_path / "c"
    r = lp(ws, "rebase", "super", "--source", world["src"], "--onto", world["c"]["gone"], "--no-interactive",
           "--no-behaviour", "--json", cache=cache)
    assert r.returncode == 1, r.stderr
    assert json.loads(r.stdout)["conflicts"] == ["lib/fix-lib.patch"]
    r = lp(ws, "rebase", "super", "--skip", "lib/fix-lib", cache=cache)
    assert r.returncode == 0, r.stderr
    assert 'layout = "absent"' in (ws / "patches/super/target.toml").read_text()


def _wait_at(pause: Path, proc, boundary, timeout=60.0) -> None:
    want = pause / f"boundary-{boundary}"
    t0 = time.monotonic()
    while not want.exists():
        for m in pause.glob("boundary-*"):
            if m != want and not m.name.endswith(".tmp"):
                m.unlink(missing_ok=True)
        if proc.poll() is not None:
            raise AssertionError(f"exited ({proc.returncode}) before boundary {boundary}: {proc.stderr.read().decode()}")
        if time.monotonic() - t0 > timeout:
            raise AssertionError(f"no pause at {want}")
        time.sleep(0.01)


@pytest.mark.parametrize("boundary", [1, 2, "write"])
def test_sigkill_in_a_session_across_the_vendoring_resumes_to_the_same_result(world, tmp_path, boundary):
    """SIGKILL before the lib patch (1), before the write (2) and between staging and the swap
    ("write"): the workspace and the checkout are as they were, and --continue ends exactly where
    an uninterrupted session ends."""
    ref_ws, onto = workspace(world, tmp_path / "ref"), world["c"]["V1"]
    r = lp(ref_ws, "rebase", "super", "--source", world["src"], "--onto", onto, "--no-interactive", "--no-behaviour",
           cache=tmp_path / "ref" / "c")
    assert r.returncode == 0, r.stderr
    ws, cache, pause = workspace(world, tmp_path / "k"), tmp_path / "k" / "c", tmp_path / "pause"
    pause.mkdir()
    before, src_before = snapshot(ws / "patches/super"), git(world["src"], "status", "--porcelain", "--ignored")
    proc = lp(ws, "rebase", "super", "--source", world["src"], "--onto", onto, "--no-interactive", "--no-behaviour",
              cache=cache, pause=pause, popen=True)
    try:
        _wait_at(pause, proc, boundary)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    if boundary != "write":
        assert snapshot(ws / "patches/super") == before
    assert git(world["src"], "status", "--porcelain", "--ignored") == src_before
    r = lp(ws, "rebase", "super", "--continue", cache=cache)
    assert r.returncode == 0, r.stderr
    assert snapshot(ws / "patches/super") == snapshot(ref_ws / "patches/super")


def test_which_line_fits_a_checkout(world, tmp_path):
    """Two lines of one family, one where lib is a submodule (S0) and one where it is a folder (V1): the
    checkout's HEAD decides (services/line_fit.py, the Lucebox counterpart of doctor's line routes)."""
    from lucepatch.services.line_fit import which_line
    from lucepatch.workspace import resolve_workspace

    ws = workspace(world, tmp_path)
    line = ws / "patches" / "super-vendored"
    folder = workspace(world, tmp_path / "v", base=world["c"]["V1"], layout="folder") / "patches" / "super"
    import shutil
    shutil.copytree(folder, line)
    toml = (line / "target.toml").read_text().replace('name = "super"', 'name = "super-vendored"\nline_of = "super"\nline = "vendored"')
    (line / "target.toml").write_text(toml)
    w = resolve_workspace(ws)
    for at, want in (("S0", "super"), ("V1", "super-vendored")):
        src = tmp_path / f"co-{at}"
        git(tmp_path, "clone", "-q", str(world["up"]), str(src))
        git(src, "checkout", "-q", world["c"][at])
        if at == "S0":
            git(src, "submodule", "update", "--init", "-q", env=SUBENV)
        doc = which_line(w, "super", src, tmp_path / "c")
        assert doc["fits"] == want, doc
        other = next(x for x in doc["lines"] if x["target"] != want)
        assert not other["fits"] and other["why"]
        # the verb: its remote is the upstream's path, not super's URL, so the family is named
        r = lp(ws, "doctor", "--checkout", src, cache=tmp_path / "c")
        assert r.returncode == 2 and "pass --family NAME" in r.stderr, r.stderr
        r = lp(ws, "doctor", "--checkout", src, "--family", "super", cache=tmp_path / "c")
        assert r.returncode == 0 and f"{want} fits {world['c'][at][:12]}" in r.stdout, r.stdout + r.stderr


def test_bisect_record_judges_a_sub_target_patch_where_the_found_commit_holds_it(world, tmp_path):
    """`bisect --record lib/fix-lib.patch`: the code signal at the found commit is read where that commit
    holds lib — V2 (a folder that took the fix): patch-id of V2, written into lib's own patch file;
    V1 (a folder without it): refused, nothing written; a commit where lib is a submodule: in its checkout."""
    from lucepatch.errors import CheckFailed, UsageError
    from lucepatch.target import load_target_dir
    from lucepatch.upstream import bisect

    ws = workspace(world, tmp_path)
    t = load_target_dir(ws / "patches/super")
    patch = bisect.find_patch(t, "lib/fix-lib.patch")
    assert patch.path == ws / "patches/super/submodules/lib/fix-lib.patch"

    def doc(at):  # what bisect_behaviour returns: the state found also holds at REF (here the found commit)
        return {"result": bisect.FOUND, "direction": "fixed", "first": {"commit": world["c"][at], "subject": at},
                "scenarios": ["demo:fixed"], "range": {"spec": "S0..line"}, "reason": f"fixed at {at}",
                "at_ref": {"commit": world["c"][at], "state": bisect.GOOD_PASS}}
    before = patch.path.read_bytes()
    for at in ("V1", "S1"):  # folder without the fix; submodule at L0 (the checkout's commit): no code there
        with pytest.raises(CheckFailed, match="has none of the patch's code"):
            bisect.record_applied_upstream(patch, doc(at), target=t, source=world["src"], cache=tmp_path / "c")
        assert patch.path.read_bytes() == before
    rec = bisect.record_applied_upstream(patch, doc("V2"), target=t, source=world["src"], cache=tmp_path / "c")
    assert rec["code_signal"]["signal"] == "patch-id" and rec["code_signal"]["commit"] == world["c"]["V2"]
    text = patch.path.read_text()
    assert f"Applied-Upstream: {world['c']['V2']}" in text and "diff --git a/lib.c b/lib.c" in text
    with pytest.raises(UsageError, match="no sub-target nope"):
        bisect.find_patch(t, "nope/x.patch")
