"""A fakehami workspace (target + async-sched reproducer) with real verify evidence on the simulated
driver; `pr` on it end to end. Other test modules (ci, bisect) import `make_fakehami_ws` from here.
"""

from __future__ import annotations

import html
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import FIXTURES, GIT_ENV, REPO_ROOT, commit_all, git, init_repo

from lucepatch.main import main
from lucepatch.upstream.pr import BODY_COLUMNS, driver_display, parse_verdict_table

FAKEHAMI = FIXTURES / "fakehami"

pytestmark = pytest.mark.needs("gcc", "cmake", "/usr/local/cuda/include/cuda.h")  # to build the fixture (not a GPU: CI has them)


def make_fakehami_ws(root: Path, *, name: str = "fakehami", patches: list[Path] | None = None,
                     extra_toml: str = "") -> dict:
    """Upstream repo (fakehami sources at one commit) + a workspace with target `name` and async-sched."""
    up = init_repo(root / f"{name}-upstream")
    shutil.copy(FAKEHAMI / "CMakeLists.txt", up / "CMakeLists.txt")
    shutil.copytree(FAKEHAMI / "src", up / "src")
    base = commit_all(up, "fakehami: base")
    ws = root / "ws"
    tdir = ws / "patches" / name
    tdir.mkdir(parents=True, exist_ok=True)
    (ws / "lucepatch.toml").write_text("schema_version = 1\n")
    patches = patches if patches is not None else [FAKEHAMI / "patches" / "0001-fix-allocator-use-stream-device.patch"]
    names = []
    for p in patches:
        slug = p.name.split("-", 1)[1] if p.name[:4].isdigit() else p.name
        shutil.copy(p, tdir / slug)
        names.append(slug)
    (tdir / "series").write_text("".join(n + "\n" for n in names))
    (tdir / "target.toml").write_text(
        f'name = "{name}"\nupstream = "https://example.invalid/{name}"\nbranch = "main"\nbase = "{base}"\n'
        f'version = "1.0.0"\ndescription = "fakehami fixture"\n{extra_toml}\n'
        '[build]\nsystem = "cmake"\nconfigure_args = []\ntargets = ["vgpu"]\n'
        '[build.artifacts]\n"libvgpu.so" = "libvgpu.so"\n'
    )
    rdir = ws / "reproducers"
    if not (rdir / "async-sched").exists():
        rdir.mkdir(parents=True, exist_ok=True)
        shutil.copytree(REPO_ROOT / "reproducers" / "async-sched", rdir / "async-sched")
        shutil.copytree(REPO_ROOT / "reproducers" / "common", rdir / "common")
    toml = rdir / "async-sched" / "reproducer.toml"
    toml.write_text(toml.read_text().replace('target = "hami-core"', f'target = "{name}"'))
    return {"ws": ws, "up": up, "base": base, "tdir": tdir, "root": root}


def run_cli(*args) -> int:
    return main([str(a) for a in args])


def verify(fx: dict, evidence: Path, cache: Path, runs: int = 5) -> int:
    return run_cli("--workspace", fx["ws"], "--cache-dir", cache, "verify", "--reproducer", "async-sched",
                   "--source", fx["up"], "--driver", "fake", "--runs", runs, "--evidence", evidence)


@pytest.fixture(scope="module")
def proven(tmp_path_factory):
    root = tmp_path_factory.mktemp("fh")
    fx = make_fakehami_ws(root)
    ev = root / "evidence.json"
    assert verify(fx, ev, root / "cache") == 0
    fx["evidence"] = ev
    fx["doc"] = json.loads(ev.read_text())
    return fx


def pr(cli, fx, out, *extra):
    return cli("--workspace", fx["ws"], "pr", "fakehami", "--source", fx["up"], "--out", out, *extra)


def expected_rows(doc: dict) -> list[dict]:
    """Independently of the renderer: what the table must say for this evidence (one row per scenario)."""
    return [{"scenario": s["scenario"], "baseline failed": f"{s['baseline']['failures']}/{s['baseline']['runs']}",
             "patched failed": f"{s['patched']['failures']}/{s['patched']['runs']}", "p-value": s["p_value"],
             "verdict": s["verdict"]} for s in doc["scenarios"] if not s["control"]]


def test_table_parses_back_to_the_evidence(cli, proven, tmp_path):
    r = pr(cli, proven, tmp_path / "pr", "--evidence", proven["evidence"])
    assert r.code == 0, r.err
    body = (tmp_path / "pr" / "pr-body.md").read_text()
    rows = parse_verdict_table(body)
    assert list(rows[0]) == BODY_COLUMNS
    exp = expected_rows(proven["doc"])
    assert len(rows) == len(exp) == 3
    for got, want in zip(rows, exp):
        assert got["scenario"] == want["scenario"] and got["verdict"] == want["verdict"]
        assert (got["baseline failed"], got["patched failed"]) == (want["baseline failed"], want["patched failed"])
        assert float(got["p-value"]) == pytest.approx(want["p-value"], rel=1e-2)
    # the GPU and driver, said once above the table
    d = driver_display(proven["doc"])
    assert f"— {d['gpu']}, driver {d['driver']};" in body
    # simulated-only evidence is called out, and the payload matches the body
    assert "Simulated driver only" in body
    payload = json.loads((tmp_path / "pr" / "pr.json").read_text())
    assert payload["body"] == body and payload["draft"] is False and payload["base"] == "main"
    assert payload["title"].startswith("fix(allocator):")


def test_pr_carries_the_evidence_page_with_every_run(cli, proven, tmp_path):
    """The body (what maintainers read in two minutes) has the table and points to the page; the
    directory has the self-contained page `lucepatch show --html` writes, every run of both variants in
    launch order (issue 35: the per-run strip left the body)."""
    out = tmp_path / "pr"
    assert pr(cli, proven, out, "--evidence", proven["evidence"]).code == 0
    body = (out / "pr-body.md").read_text()
    doc = proven["doc"]
    assert "<details>" not in body and "`evidence.html`, attached" in body
    page = (out / "evidence.html").read_text()
    runs = {}
    for r in doc["runs"]:
        runs.setdefault((r["scenario"], r["variant"]), []).append(r)
    total = 0
    for (scen, v), rs in runs.items():
        svg = re.search(rf'<svg class="strip" data-scenario="{re.escape(scen)}" data-variant="{v}".*?</svg>', page, re.S)
        assert svg, (scen, v)
        got = re.findall(r'data-outcome="([^"]+)"', svg.group(0))
        assert got == [r["outcome"] for r in sorted(rs, key=lambda r: r["index"])], (scen, v)
        total += len(got)
    assert total == len(doc["runs"]) == sum(s[v]["runs"] for s in doc["scenarios"] for v in ("baseline", "patched"))
    assert page.count('class="run ') == total and "<script" not in page
    # well formed: scrubbing never cuts across tags (paths are scrubbed before rendering)
    for tag in ("dt", "dd", "tr", "td", "table", "details", "pre", "svg"):
        assert page.count(f"<{tag}") == page.count(f"</{tag}>"), tag
    assert "async-sched" in page and "cuMemAllocAsync" in page  # the reproducer source


def test_patches_am_cleanly_and_give_the_branch_tree(cli, proven, tmp_path):
    out = tmp_path / "pr"
    assert pr(cli, proven, out, "--evidence", proven["evidence"]).code == 0
    meta = json.loads((out / "lucepatch.json").read_text())
    patches = sorted(out.glob("*.patch"))
    assert patches and all(f"base-commit: {proven['base']}" in p.read_text() for p in patches)
    fresh = tmp_path / "fresh"
    git(tmp_path, "clone", "-q", str(proven["up"]), str(fresh))
    git(fresh, "checkout", "-q", "--detach", proven["base"])
    git(fresh, "am", "-q", *[str(p) for p in patches])
    assert git(fresh, "rev-parse", "HEAD^{tree}").strip() == meta["tree"]
    # the bundle carries the same branch
    git(fresh, "fetch", "-q", str(out / "branch.bundle"), f"{meta['branch']}:refs/heads/from-bundle")
    assert git(fresh, "rev-parse", "from-bundle").strip() == meta["head"]
    assert git(fresh, "rev-parse", "from-bundle^{tree}").strip() == meta["tree"]
    # no lucepatch-internal trailers leak into the upstream commits
    log = git(fresh, "log", "--format=%B", f"{proven['base']}..HEAD")
    assert "Lucepatch-Series" not in log and "Patch-Id:" not in log
    assert meta["checks"][0]["name"] == "dco" and meta["checks"][0]["ok"]


def test_no_token_or_home_anywhere_under_dir(cli, tmp_path, monkeypatch):
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("HF_TOKEN", "hf_plantedSECRETvalue123")
    monkeypatch.setenv("GITHUB_TOKEN", "ghp_plantedSECRETvalue456")
    cache = home / ".cache" / "lucepatch"
    monkeypatch.setenv("LUCEPATCH_CACHE", str(cache))
    fx = make_fakehami_ws(home / "work")  # workspace, upstream and cache all under $HOME
    ev = home / "evidence.json"
    assert verify(fx, ev, cache) == 0
    assert str(home) in ev.read_text()  # the evidence itself names paths under $HOME ...
    out = tmp_path / "out"
    r = pr(cli, fx, out, "--evidence", ev)
    assert r.code == 0, r.err
    # ... what pr writes does not
    needles = [b"hf_plantedSECRETvalue123", b"ghp_plantedSECRETvalue456", str(home).encode()]
    files = [p for p in out.rglob("*") if p.is_file()]
    assert len(files) >= 6
    for f in files:
        data = f.read_bytes()
        for n in needles:
            assert n not in data, f"{n!r} found in {f.name}"
    # the bundle's commits, unpacked
    clone = tmp_path / "unbundled"
    git(tmp_path, "clone", "-q", str(out / "branch.bundle"), str(clone), check=False)
    text = git(clone, "log", "--all", "-p", "--format=fuller") if (clone / ".git").exists() else ""
    for n in needles:
        assert n.decode() not in text


def test_patch_holding_a_secret_is_refused(cli, tmp_path, monkeypatch):
    monkeypatch.setenv("GITHUB_TOKEN", "ghp_leakedINTOpatch789")
    src = tmp_path / "p"
    src.mkdir()
    orig = (FAKEHAMI / "patches" / "0001-fix-allocator-use-stream-device.patch").read_text()
    (src / "0001-leak.patch").write_text(orig.replace("Upstream-Status: Pending", "Upstream-Status: Pending\nX-Token: ghp_leakedINTOpatch789"))
    fx = make_fakehami_ws(tmp_path, patches=[src / "0001-leak.patch"])
    r = pr(cli, fx, tmp_path / "out", "--no-evidence")
    assert r.code == 1 and "$GITHUB_TOKEN" in r.err and "ghp_" not in r.err
    assert not (tmp_path / "out").exists()


def test_push_to_a_local_bare_fork(cli, proven, tmp_path):
    fork = tmp_path / "fork.git"
    git(tmp_path, "init", "-q", "--bare", str(fork))
    out = tmp_path / "pr"
    r = pr(cli, proven, out, "--evidence", proven["evidence"], "--push", fork, "--branch", "fix/ctxless", "--draft")
    assert r.code == 0, r.err
    meta = json.loads((out / "lucepatch.json").read_text())
    assert git(fork, "rev-parse", "refs/heads/fix/ctxless").strip() == meta["head"]
    payload = json.loads((out / "pr.json").read_text())
    assert payload["head"] == "fix/ctxless" and payload["draft"] is True
    # without --push nothing leaves
    fork2 = tmp_path / "fork2.git"
    git(tmp_path, "init", "-q", "--bare", str(fork2))
    assert pr(cli, proven, tmp_path / "pr2", "--evidence", proven["evidence"], "--branch", "x").code == 0
    assert git(fork2, "for-each-ref").strip() == ""
    # --push without --branch is a usage error
    assert pr(cli, proven, tmp_path / "pr3", "--evidence", proven["evidence"], "--push", fork).code == 2


def test_refuses_missing_stale_and_unproven_evidence(cli, proven, tmp_path):
    assert pr(cli, proven, tmp_path / "a").code == 2  # neither --evidence nor --no-evidence
    doc = json.loads(proven["evidence"].read_text())
    stale = dict(doc, series=dict(doc["series"], patch_ids=["0" * 40]))
    (tmp_path / "stale.json").write_text(json.dumps(stale))
    r = pr(cli, proven, tmp_path / "b", "--evidence", tmp_path / "stale.json")
    assert r.code == 1 and "stale" in r.err
    bad = dict(doc, verdict="not-proven")
    (tmp_path / "bad.json").write_text(json.dumps(bad))
    r = pr(cli, proven, tmp_path / "c", "--evidence", tmp_path / "bad.json")
    assert r.code == 1 and "not proven" in r.err
    r = pr(cli, proven, tmp_path / "d", "--evidence", tmp_path / "nope.json")
    assert r.code == 2
    r = pr(cli, proven, tmp_path / "e", "--no-evidence")
    assert r.code == 0
    body = (tmp_path / "e" / "pr-body.md").read_text()
    assert "No lucepatch evidence accompanies this PR" in body and not parse_verdict_table(body)
    assert not (tmp_path / "e" / "evidence.json").exists()


def test_revise_makes_v2_with_range_diff(cli, proven, tmp_path):
    v1 = tmp_path / "v1"
    assert pr(cli, proven, v1, "--no-evidence").code == 0
    # reword the patch (message only) and add a second patch
    tdir = proven["tdir"]
    ws_copy = tmp_path / "ws2"
    shutil.copytree(proven["ws"], ws_copy)
    t2 = ws_copy / "patches" / "fakehami"
    p = t2 / "fix-allocator-use-stream-device.patch"
    p.write_text(p.read_text().replace("Take the device of stream-ordered", "Always take the device of stream-ordered"))
    fx2 = dict(proven, ws=ws_copy, tdir=t2)
    v2 = tmp_path / "v2"
    r = cli("--workspace", ws_copy, "pr", "fakehami", "--source", proven["up"], "--out", v2, "--no-evidence",
            "--revise", v1, "--json")
    assert r.code == 0, r.err
    assert r.json["revision"] == 2
    body = (v2 / "pr-body.md").read_text()
    assert "### Changes since v1" in body and "Always take the device" in body
    assert all(f.name.startswith("v2-") for f in v2.glob("*.patch"))
    assert "[PATCH v2]" in next(v2.glob("*.patch")).read_text()
    assert json.loads((v2 / "lucepatch.json").read_text())["revision"] == 2
    assert tdir.exists() and fx2
    # not a PR directory
    assert cli("--workspace", ws_copy, "pr", "fakehami", "--source", proven["up"], "--out", tmp_path / "v3",
               "--no-evidence", "--revise", tmp_path).code == 2


def test_json_and_upstream_ref(cli, proven, tmp_path):
    git(proven["up"], "checkout", "-q", "-b", "later")
    (proven["up"] / "NEWS").write_text("news\n")
    later = commit_all(proven["up"], "docs: news")
    git(proven["up"], "checkout", "-q", "main")
    r = cli("--workspace", proven["ws"], "pr", "fakehami", "--source", proven["up"], "--out", tmp_path / "o",
            "--no-evidence", "--upstream-ref", "later", "--json")
    assert r.code == 0, r.err
    assert r.json["schema_version"] == 1 and r.json["base"] == later
    # evidence taken on the pinned base is stale for another upstream ref
    r = cli("--workspace", proven["ws"], "pr", "fakehami", "--source", proven["up"], "--out", tmp_path / "o2",
            "--evidence", proven["evidence"], "--upstream-ref", "later")
    assert r.code == 1 and "stale" in r.err
    git(proven["up"], "branch", "-q", "-D", "later")


def test_body_states_the_rule_and_the_page_its_bounds(cli, tmp_path):
    # default verify = the sequential rule: the body says so in one line; the page holds the bounds
    fx = make_fakehami_ws(tmp_path)
    ev = tmp_path / "evidence.json"
    assert verify(fx, ev, tmp_path / "cache", runs=20) == 0
    doc = json.loads(ev.read_text())
    r = pr(cli, fx, tmp_path / "pr", "--evidence", ev)
    assert r.code == 0, r.err
    body = (tmp_path / "pr" / "pr-body.md").read_text()
    assert "sequential rule, at most 20 runs per variant and scenario" in body
    page = html.unescape((tmp_path / "pr" / "evidence.html").read_text())
    proven = [s for s in doc["scenarios"] if s["verdict"] == "proven"]
    assert proven
    for s in proven:
        assert s["patched"]["runs"] == 10 and s["theta"] <= 0.37
        assert f"{s['scenario']} 0/10 ⇒ failure rate < 0.37 at 99 %" in page
    b = doc["run_policy"]["bounds"]
    assert f"P(proven | no effect) ≤ {b['proven_if_no_effect']:.2g}" in page
    assert "P(proven | patched failure rate ≥ 0.37) ≤ 0.01" in page
    rows = parse_verdict_table(body)
    assert {r["patched failed"] for r in rows} == {"0/10"}


def test_pr_out_relative_to_the_callers_directory(cli, proven, tmp_path, monkeypatch):
    """`pr --out pr/` (relative, as the README writes it) and `api.write_pr(..., "pr/")`: the patch
    files and branch.bundle land in the caller's ./pr/, not in the private clone git format-patch
    runs in (they exited 0 with neither)."""
    from lucepatch import api

    monkeypatch.chdir(tmp_path)
    r = pr(cli, proven, "pr/", "--evidence", proven["evidence"])
    assert r.code == 0, r.err
    names = sorted(p.name for p in (tmp_path / "pr").iterdir())
    assert any(n.endswith(".patch") for n in names) and "branch.bundle" in names, names
    ws = api.open_workspace(proven["ws"])
    t = api.target(ws, "fakehami")
    res = api.write_pr(ws, t, proven["up"], api.cache_dir(tmp_path / "cache"), "pr-api/", evidence=[proven["evidence"]])
    names = sorted(p.name for p in (tmp_path / "pr-api").iterdir())
    assert any(n.endswith(".patch") for n in names) and "branch.bundle" in names, names
    assert res.out_dir == tmp_path / "pr-api"


def test_home_in_paths_is_expanded_where_they_enter(cli, proven, tmp_path, monkeypatch):
    """`~` the shell left alone (`--out=~/x`, a quoted "~/x", an API string) is the user's home."""
    from lucepatch import api
    from lucepatch.main import expand_home

    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    (tmp_path / "home").mkdir()
    assert expand_home(["--out=~/pr", "~/x", "~", "a~/b", "--set", "k=~/v", "~user/x"]) == \
        [f"--out={tmp_path}/home/pr", f"{tmp_path}/home/x", f"{tmp_path}/home", "a~/b", "--set", "k=~/v", "~user/x"]
    shutil.copy(proven["evidence"], tmp_path / "home" / "ev.json")
    r = cli("--workspace", proven["ws"], "pr", "fakehami", "--source", proven["up"], "--out=~/pr", "--evidence", "~/ev.json")
    assert r.code == 0, r.err
    assert any(p.suffix == ".patch" for p in (tmp_path / "home" / "pr").iterdir())
    ev = api.load_evidence("~/ev.json")
    assert ev.verdict == "proven"
    api.write_evidence("~/copy.json", ev)
    assert (tmp_path / "home" / "copy.json").is_file()
