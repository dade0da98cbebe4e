"""`pr` upstream checks and conventions on small toy upstreams (no build, no reproducer)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from conftest import commit_all, format_patches, git, init_repo, make_target, write

from lucepatch.upstream.checks import touched_lines
from lucepatch.upstream.conventions import conventions_for, repo_slug
from lucepatch.upstream.scrub import Scrubber


def _target_with(tmp_path, commits: list[tuple[dict, str]], *, upstream: str, extra: str = "",
                 base_files: dict | None = None, author_env: dict | None = None) -> dict:
    up = init_repo(tmp_path / "up")
    for rel, text in (base_files or {"src/a.c": "int a(void) {\n  return 1;\n}\n"}).items():
        write(up, rel, text)
    base = commit_all(up, "base")
    git(up, "checkout", "-q", "-b", "work")
    for files, msg in commits:
        for rel, text in files.items():
            write(up, rel, text)
        git(up, "add", "-A")
        git(up, "commit", "-q", "-m", msg, env=author_env)
    pf = format_patches(up, f"{base}..work", tmp_path / "fp")
    git(up, "checkout", "-q", "main")
    ws = tmp_path / "ws"
    tdir = make_target(ws, "toy", base, pf, extra=f"{extra}\n")
    t = tdir / "target.toml"
    t.write_text(t.read_text().replace('upstream = "https://example.invalid/toy"', f'upstream = "{upstream}"'))
    return {"up": up, "base": base, "ws": ws}


def _pr(cli, fx, out, *extra):
    return cli("--workspace", fx["ws"], "pr", "toy", "--source", fx["up"], "--out", out, "--no-evidence", *extra)


AUTHOR = {"GIT_AUTHOR_NAME": "Fixer", "GIT_AUTHOR_EMAIL": "fixer@example.invalid"}


def test_dco_needs_the_authors_signoff(cli, toy, tmp_path):
    # toy: authored by Upstream Dev, signed off by Fixer -> the DCO app would fail it
    r = cli("--workspace", toy["ws"], "pr", "toy", "--source", toy["upstream"], "--out", tmp_path / "o", "--no-evidence")
    assert r.code == 1 and "dco" in r.err and "dev@upstream.invalid" in r.err
    assert not (tmp_path / "o").exists()


def test_signoff_comes_from_git_config_never_invented(cli, toy, tmp_path):
    # the checkout's git config names Upstream Dev, the author: --signoff makes DCO pass
    r = cli("--workspace", toy["ws"], "pr", "toy", "--source", toy["upstream"], "--out", tmp_path / "o",
            "--no-evidence", "--signoff", "--json")
    assert r.code == 0, r.err
    text = "".join(p.read_text() for p in sorted((tmp_path / "o").glob("*.patch")))
    assert text.count("Signed-off-by: Upstream Dev <dev@upstream.invalid>") == 2
    # without an identity, --signoff refuses instead of inventing one
    git(toy["upstream"], "config", "--unset", "user.name")
    git(toy["upstream"], "config", "--unset", "user.email")
    env_home = tmp_path / "h"
    env_home.mkdir()
    os.environ["HOME"] = str(env_home)  # no global config either (restored by monkeypatch-less reset below)
    try:
        os.environ["GIT_CONFIG_NOSYSTEM"] = "1"
        r = cli("--workspace", toy["ws"], "pr", "toy", "--source", toy["upstream"], "--out", tmp_path / "o2",
                "--no-evidence", "--signoff")
        assert r.code == 2 and "never invents" in r.err
    finally:
        del os.environ["GIT_CONFIG_NOSYSTEM"]


@pytest.fixture(autouse=True)
def _home(monkeypatch):
    monkeypatch.setenv("HOME", os.environ.get("HOME", "/root"))


BAD_C = "int a(void) {\n  return 1;\n}\nint b(void){ int x=1;return x; }\n"
GOOD_C = "int a(void) {\n  return 2;\n}\n"
OLD_BAD = "int a(void){ int y=1;return y; }\n"


@pytest.mark.needs("cpplint")
def test_cpplint_refuses_only_errors_the_series_adds(cli, tmp_path):
    msg = "fix(a): change\n\nSigned-off-by: Fixer <fixer@example.invalid>"
    # pre-existing errors elsewhere in the file, clean touched lines -> ok
    fx = _target_with(tmp_path / "ok", [({"src/a.c": "// Copyright x\n" + OLD_BAD + GOOD_C.replace("a(", "c(")}, msg)],
                      upstream="https://github.com/Project-HAMi/HAMi-core", author_env=AUTHOR,
                      base_files={"src/a.c": "// Copyright x\n" + OLD_BAD + "int c(void) {\n  return 1;\n}\n"})
    r = _pr(cli, fx, tmp_path / "ok" / "out", "--json")
    assert r.code == 0, r.err
    cp = [c for c in r.json["checks"] if c["name"] == "cpplint"][0]
    assert cp["ok"] and "pre-existing" in cp["summary"]
    # a new error on a touched line -> refused, naming file:line
    fx = _target_with(tmp_path / "bad", [({"src/a.c": "// Copyright x\n" + BAD_C}, msg)],
                      upstream="https://github.com/Project-HAMi/HAMi-core", author_env=AUTHOR,
                      base_files={"src/a.c": "// Copyright x\n" + GOOD_C})
    r = _pr(cli, fx, tmp_path / "bad" / "out")
    assert r.code == 1 and "cpplint" in r.err and "src/a.c:5" in r.err


def test_hook_consistency_script_must_pass(cli, tmp_path):
    msg = "fix(a): change\n\nSigned-off-by: Fixer <fixer@example.invalid>"
    script = "import sys\nprint('[ERROR] Missing in enum: cuFoo')\nsys.exit(1)\n"
    fx = _target_with(tmp_path, [({"src/a.txt": "x\n"}, msg)], upstream="https://github.com/Project-HAMi/HAMi-core",
                      author_env=AUTHOR, base_files={"hack/check_cuda_hook_consistency.py": script})
    r = _pr(cli, fx, tmp_path / "out")
    assert r.code == 1 and "hook-consistency" in r.err and "cuFoo" in r.err


def test_hami_template_and_fixes(cli, tmp_path):
    msg = ("fix(a): return two\n\nBecause.\n\nBug: https://github.com/Project-HAMi/HAMi-core/issues/289\n"
           "Bug: https://github.com/other/repo/issues/3\nSigned-off-by: Fixer <fixer@example.invalid>")
    fx = _target_with(tmp_path, [({"src/a.c": GOOD_C}, msg)], upstream="https://github.com/Project-HAMi/HAMi-core",
                      author_env=AUTHOR, extra='[pr]\nrelease_note = "Fix a."\n')
    r = _pr(cli, fx, tmp_path / "out", "--draft")
    assert r.code == 0, r.err
    body = (tmp_path / "out" / "pr-body.md").read_text()
    for needle in ("**What type of PR is this?**", "/kind bug", "**What this PR does / why we need it**",
                   "Fixes #289", "Fixes other/repo#3", "**Does this PR introduce a user-facing change?**",
                   "```release-note\nFix a.\n```", "No lucepatch evidence accompanies this PR", "- dco:"):
        assert needle in body, needle
    assert json.loads((tmp_path / "out" / "pr.json").read_text())["draft"] is True


def test_lucebox_needs_conventional_commits(cli, tmp_path):
    fx = _target_with(tmp_path, [({"src/a.c": GOOD_C}, "Return two from a")], upstream="https://github.com/Luce-Org/lucebox-hub",
                      author_env=AUTHOR)
    r = _pr(cli, fx, tmp_path / "out")
    assert r.code == 1 and "conventional" in r.err
    fx = _target_with(tmp_path / "ok", [({"src/a.c": GOOD_C}, "fix(a): return two")],
                      upstream="https://github.com/Luce-Org/lucebox-hub", author_env=AUTHOR)
    r = _pr(cli, fx, tmp_path / "ok" / "out")
    assert r.code == 0, r.err
    assert "conventional commits" in (tmp_path / "ok" / "out" / "pr-body.md").read_text()


def test_llamacpp_requires_ai_use_disclosure(cli, tmp_path):
    fx = _target_with(tmp_path, [({"src/a.c": GOOD_C}, "ggml: return two")], upstream="https://github.com/ggml-org/llama.cpp",
                      author_env=AUTHOR)
    r = _pr(cli, fx, tmp_path / "out")
    assert r.code == 2 and "--ai-use" in r.err
    r = _pr(cli, fx, tmp_path / "out", "--ai-use", "No AI tools were used to write this patch.")
    assert r.code == 0, r.err
    body = (tmp_path / "out" / "pr-body.md").read_text()
    assert "### AI usage disclosure\n\nNo AI tools were used" in body


def test_patches_subset_keeps_series_order(cli, tmp_path):
    fx = _target_with(tmp_path, [({"src/a.c": GOOD_C}, "fix(a): one\n\nSigned-off-by: Fixer <fixer@example.invalid>"),
                                 ({"src/b.c": "int b;\n"}, "fix(b): two\n\nSigned-off-by: Fixer <fixer@example.invalid>")],
                      upstream="https://example.invalid/toy", author_env=AUTHOR)
    r = _pr(cli, fx, tmp_path / "out", "--patches", "fix-b-two.patch")
    assert r.code == 0, r.err
    assert [p.name for p in (tmp_path / "out").glob("*.patch")] == ["0001-fix-b-two.patch"]
    assert _pr(cli, fx, tmp_path / "o2", "--patches", "nope").code == 2


def test_out_dir_must_be_new(cli, toy, tmp_path):
    (tmp_path / "o").mkdir()
    (tmp_path / "o" / "x").write_text("x")
    r = cli("--workspace", toy["ws"], "pr", "toy", "--source", toy["upstream"], "--out", tmp_path / "o", "--no-evidence")
    assert r.code == 2


def test_conventions_data():
    c = conventions_for("https://github.com/Project-HAMi/HAMi-core.git", {"template": "generic"})
    assert c["template"] == "generic" and "cpplint" in c["checks"] and c["cpplint_args"] == ["--linelength=120"]
    assert conventions_for("git@github.com:ggml-org/llama.cpp.git")["ai_use_required"]
    assert conventions_for("https://example.invalid/x")["checks"] == ["dco"]
    assert repo_slug("https://github.com/Project-HAMi/HAMi-core") == "Project-HAMi/HAMi-core"


def test_scrubber(tmp_path):
    s = Scrubber(cache=tmp_path / "c", workspace=tmp_path / "w",
                 env={"HOME": str(tmp_path), "HF_TOKEN": "hf_abcdefgh", "PATH": "/usr/bin"})
    t = s.text(f"{tmp_path}/c/builds/0123456789abcdef/artifacts/libvgpu.so {tmp_path}/w/x {tmp_path}/y hf_abcdefgh")
    assert str(tmp_path) not in t and "hf_abcdefgh" not in t
    assert "$LUCEPATCH_CACHE/builds/0123456789abcdef/artifacts/libvgpu.so" in t and "~/y" in t
    assert s.leaks(b"token hf_abcdefgh") == ["$HF_TOKEN"]
    assert s.leaks(f"{tmp_path}/x".encode()) == ["$HOME"]


def test_touched_lines(tmp_path):
    up = init_repo(tmp_path / "r")
    write(up, "f.c", "a\nb\nc\nd\n")
    base = commit_all(up, "base")
    write(up, "f.c", "a\nB\nc\nd\ne\n")
    commit_all(up, "change")
    assert touched_lines(Path(up), base, "f.c") == {2, 5}


def _hami(tmp_path, n=1):
    msgs = [(f"fix(a): return {i + 2}\n\nBecause lucepatch's notes say so.\n\n"
             "Bug: https://github.com/Project-HAMi/HAMi-core/issues/333\n"
             "Upstream-Status: Pending\nSigned-off-by: Fixer <fixer@example.invalid>") for i in range(n)]
    files = [{"src/a.c": GOOD_C.replace("2", str(i + 2))} for i in range(n)]
    return _target_with(tmp_path, list(zip(files, msgs)), upstream="https://github.com/Project-HAMi/HAMi-core",
                        author_env=AUTHOR)


def test_hami_body_follows_hami_cores_template(cli, tmp_path):
    """HAMi-core's PULL_REQUEST_TEMPLATE.md sections in order, the AI Disclosure left for the submitter
    (a comment, not text lucepatch made up), and, without real-GPU evidence, the validation line asks for
    the device and driver instead of claiming any."""
    fx = _hami(tmp_path)
    r = _pr(cli, fx, tmp_path / "out")
    assert r.code == 0, r.err
    body = (tmp_path / "out" / "pr-body.md").read_text()
    sections = ["**What type of PR is this?**", "**What this PR does / why we need it**:",
                "**Which issue(s) this PR fixes**:", "**Special notes for your reviewer**:",
                "**Does this PR introduce a user-facing change?**:", "**AI Disclosure**"]
    assert [body.index(s) for s in sections] == sorted(body.index(s) for s in sections)
    ai = body[body.index("**AI Disclosure**"):]
    assert "<!-- Submitter: briefly disclose, truthfully, any AI assistance" in ai
    assert "Do not add AI co-author or assistance trailers to commits" in ai
    assert "Validated on: <!-- Submitter: no real-GPU evidence" in body and "state the device and driver" in body
    assert "AI Disclosure: left for you to fill truthfully" in r.out
    r = _pr(cli, fx, tmp_path / "out2", "--ai-use", "None: written by hand.")
    assert r.code == 0 and "None: written by hand." in (tmp_path / "out2" / "pr-body.md").read_text()
    assert "AI Disclosure: left" not in r.out


def test_hami_commits_carry_no_message_lucepatch_wrote(cli, tmp_path):
    fx = _hami(tmp_path, n=2)
    out = tmp_path / "out"
    r = _pr(cli, fx, out, "--json")
    assert r.code == 0, r.err
    assert len(r.json["placeholder_messages"]) == 2
    meta = json.loads((out / "lucepatch.json").read_text())
    assert meta["commit_messages"] == "author" and len(meta["placeholder_messages"]) == 2
    text = "".join(p.read_text() for p in sorted(out.glob("*.patch")))
    assert text.count("Subject: [PATCH 1/2] TODO(submitter): write this commit's message yourself") == 1
    # the code's DCO sign-off stays; none of lucepatch's prose or trailers does
    assert text.count("Signed-off-by: Fixer <fixer@example.invalid>") == 2
    for gone in ("Because lucepatch's notes", "fix(a): return", "Upstream-Status", "Bug:"):
        assert gone not in text, gone
    # lucepatch's notes are beside the body (notes.md), for the submitter to read, not to sign
    assert "Because lucepatch's notes say so." in (out / "notes.md").read_text()
    r = _pr(cli, fx, tmp_path / "o2")
    assert "commit messages: 2 placeholder(s)" in r.out and "write yours" in r.out


def test_hami_messages_dir_gives_the_submitters_own(cli, tmp_path):
    fx = _hami(tmp_path, n=2)
    names = sorted(p.name[:-6] for p in (fx["ws"] / "patches" / "toy").glob("*.patch"))
    msgs = tmp_path / "msgs"
    msgs.mkdir()
    (msgs / f"{names[0]}.txt").write_text("fix(a): my first\n\nMine.\n\nSigned-off-by: Fixer <fixer@example.invalid>\n")
    r = _pr(cli, fx, tmp_path / "o0", "--messages", msgs)
    assert r.code == 2 and f"no message for {names[1]}" in r.err
    (msgs / f"{names[1]}.txt").write_text("fix(a): my second\n\nAlso mine.\n\nSigned-off-by: Fixer <fixer@example.invalid>\n")
    (msgs / "typo.txt").write_text("x\n")
    r = _pr(cli, fx, tmp_path / "o1", "--messages", msgs)
    assert r.code == 2 and "typo.txt names no selected patch" in r.err
    (msgs / "typo.txt").unlink()
    out = tmp_path / "out"
    r = _pr(cli, fx, out, "--messages", msgs, "--json")
    assert r.code == 0, r.err
    assert r.json["placeholder_messages"] == []
    text = "".join(p.read_text() for p in sorted(out.glob("*.patch")))
    assert "fix(a): my first" in text and "Also mine." in text and "TODO(submitter)" not in text


def test_hami_placeholders_are_never_pushed(cli, tmp_path):
    fx = _hami(tmp_path)
    fork = tmp_path / "fork.git"
    git(tmp_path, "init", "-q", "--bare", str(fork))
    r = _pr(cli, fx, tmp_path / "out", "--push", str(fork), "--branch", "fix")
    assert r.code == 2 and "refusing to push commits whose messages are lucepatch's placeholders" in r.err
    assert not (tmp_path / "out").exists()
    assert git(fork, "for-each-ref").strip() == ""


def test_messages_are_only_for_author_message_upstreams(cli, tmp_path):
    msg = "fix(a): change\n\nSigned-off-by: Fixer <fixer@example.invalid>"
    fx = _target_with(tmp_path, [({"src/a.c": GOOD_C}, msg)], upstream="https://github.com/Luce-Org/lucebox-hub",
                      author_env=AUTHOR)
    r = _pr(cli, fx, tmp_path / "out", "--messages", tmp_path)
    assert r.code == 2 and "takes the series' own" in r.err
