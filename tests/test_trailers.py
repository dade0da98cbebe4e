"""lucepatch/trailers.py reads trailers exactly as `git interpret-trailers --parse` does and edits
patch files without touching their diff."""

from __future__ import annotations

import subprocess

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lucepatch import series, trailers
from lucepatch.errors import UsageError
from lucepatch.series import parse_patch

from conftest import commit_all, format_patches, init_repo, write


def git_parse(message: str) -> list[tuple[str, str]]:
    r = subprocess.run(["git", "-c", "trailer.separators=:", "interpret-trailers", "--parse", "--no-divider"],
                       input=message, capture_output=True, text=True, check=True)
    out = []
    for line in r.stdout.splitlines():
        k, _, v = line.partition(":")
        out.append((k.strip(), v.strip()))
    return out


CASES = [
    "title\n",
    "title\n\nSigned-off-by: A <a@x>\n",
    "title\n\nbody text\n\nSigned-off-by: A <a@x>\nReproducer: async-sched:ctxless\n",
    "title\n\nbody\nKey: not a block because mixed\n",
    "title\n\nbody\n\nsome prose\nSigned-off-by: A <a@x>\n",  # git-generated line, 50 % trailers
    "title\n\nbody\n\nprose one\nprose two\nprose three\nprose four\nSigned-off-by: A <a@x>\n",
    "title\n\nFixes: 123\n  continued here\nSigned-off-by: A <a@x>\n",
    "Key: value\n",  # a title is never a trailer block
    "title\n\nKey : spaced\n",
    "title\n\n\n\nUpstream-Status: Pending\n\n\n",
]


@pytest.mark.parametrize("msg", CASES)
def test_parse_matches_git(msg):
    assert trailers.parse(msg) == git_parse(msg)


_word = st.text(alphabet="abcdefgh XY", min_size=1, max_size=12).map(str.strip).filter(bool)
_key = st.sampled_from(["Signed-off-by", "Upstream-Status", "Reproducer", "Bug", "X-y", "k"])
_line = st.one_of(
    st.builds(lambda k, v: f"{k}: {v}", _key, _word),
    _word,
    st.builds(lambda v: f"  {v}", _word),  # continuation-looking line
    st.just("Signed-off-by: Someone <s@x>"),
)
_para = st.lists(_line, min_size=1, max_size=5).map("\n".join)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_para, min_size=1, max_size=4))
def test_parse_matches_git_on_generated_messages(paras):
    msg = "a title\n\n" + "\n\n".join(paras) + "\n"
    assert trailers.parse(msg) == git_parse(msg)


def test_edit_sets_in_place_appends_and_removes():
    msg = "title\n\nbody\n\nUpstream-Status: Pending\nSigned-off-by: A <a@x>\nPatch-Id: 1\n"
    out = trailers.edit(msg, set_=[("upstream-status", "Submitted [https://x/1]")], remove=["Patch-Id"],
                        add=[("Applied-Upstream", "abc")])
    assert out == ("title\n\nbody\n\nupstream-status: Submitted [https://x/1]\nSigned-off-by: A <a@x>\n"
                   "Applied-Upstream: abc\n")
    assert git_parse(out) == trailers.parse(out)
    # no block yet: one is started after a blank line
    assert trailers.append("title\n\nprose\n", [("Bug", "1")]) == "title\n\nprose\n\nBug: 1\n"
    assert trailers.append("title\n", [("Bug", "1")]) == "title\n\nBug: 1\n"


def test_edit_patch_keeps_diff_and_patch_id(tmp_path):
    up = init_repo(tmp_path / "up")
    write(up, "a.c", "int a;\n")
    base = commit_all(up, "base")
    write(up, "a.c", "int a = 1;\n")
    commit_all(up, "fix: a\n\nLonger explanation.\n\nSigned-off-by: A <a@x.invalid>")
    pf = format_patches(up, f"{base}..HEAD", tmp_path / "out")[0]
    p = parse_patch(pf)
    raw = trailers.edit_patch(p.raw, set_=[("Upstream-Status", "Pending")])
    assert raw.split(b"\n---\n", 1)[1] == p.raw.split(b"\n---\n", 1)[1]
    after = series.rewrite_patch_file(p, raw, check={"Upstream-Status": "Pending"})
    assert after.patch_id == p.patch_id
    assert after.trailers == [("Signed-off-by", "A <a@x.invalid>"), ("Upstream-Status", "Pending")]
    assert pf.read_bytes() == raw
    # the message as `git am` would commit it has the same trailers
    am = subprocess.run(["git", "mailinfo", "/dev/null", "/dev/null"], input=raw, capture_output=True, check=True)
    assert b"Subject: fix: a" in am.stdout


def test_rewrite_refuses_a_changed_diff(tmp_path):
    up = init_repo(tmp_path / "up")
    write(up, "a.c", "int a;\n")
    base = commit_all(up, "base")
    write(up, "a.c", "int a = 1;\n")
    commit_all(up, "fix: a")
    pf = format_patches(up, f"{base}..HEAD", tmp_path / "out")[0]
    p = parse_patch(pf)
    before = pf.read_bytes()
    with pytest.raises(UsageError, match="patch id"):
        series.rewrite_patch_file(p, before.replace(b"+int a = 1;", b"+int a = 2;"))
    assert pf.read_bytes() == before


def test_find_patch_by_name_or_slug_lists_the_names(toy):
    from lucepatch.target import load_target_dir

    t = load_target_dir(toy["ws"] / "patches" / "toy")
    first = t.patches[0]
    assert series.find_patch(t.patches, first.name, where="toy") is first
    assert series.find_patch(t.patches, first.slug, where="toy") is first
    with pytest.raises(UsageError, match=first.slug):
        series.find_patch(t.patches, "nope", where="toy's series")


# ---- one parser: every reader of trailers in lucepatch answers as trailers.parse (and git) ----------
PID = "0123456789abcdef0123456789abcdef01234567"
TRICKY = [
    # a sign-off quoted in the body is not a trailer (the old DCO regex counted it)
    "fix: x\n\nAs the docs say:\nSigned-off-by: Quoted <q@x>\nmeans you certify.\n\nReviewed-by: R <r@x>\n",
    "fix: x\n\nSigned-off-by: Early <e@x>\n\nprose after it\n",
    # a Patch-Id outside the trailer block (the old apply.py regex counted it)
    f"fix: x\n\nPatch-Id: {PID}\n\nthe real block:\nLucepatch-Series: toy 1.0.0\n",
    f"fix: x\n\nbody\n\nLucepatch-Series: toy 1.0.0\nPatch-Id: {PID}\n",
    # keys compare case-insensitively; spaces before the colon; continuation lines
    "fix: x\n\nbody\n\nsigned-off-by: Lower <l@x>\n",
    "fix: x\n\nbody\n\nSigned-off-by : Spaced <s@x>\n",
    "fix: x\n\nbody\n\nSigned-off-by: Long Name\n  <folded@x>\n",
    f"fix: x\n\nbody\n\nPatch-Id : {PID}\n",
    # a block that is one only by git's 25 % rule (a git-generated line among prose)
    "fix: x\n\nbody\n\nsome prose\nmore prose\nSigned-off-by: A <a@x>\n",
    "fix: x\n\nbody\n\nprose\nprose\nprose\nprose\nSigned-off-by: A <a@x>\n",
    # a Patch-Id that is not an id
    "fix: x\n\nbody\n\nPatch-Id: not-hex\n",
    "Signed-off-by: Title Only <t@x>\n",
]


def _old_dco_regex(m):  # what upstream/checks.py used to do
    import re
    return re.findall(r"^Signed-off-by:\s*(.+)$", m, re.M)


@pytest.mark.parametrize("msg", TRICKY)
def test_every_trailer_reader_answers_as_git(msg):
    from lucepatch.engine.commits import patch_id_trailer
    from lucepatch.upstream.checks import signed_off_by

    theirs = git_parse(msg)
    assert trailers.parse(msg) == theirs
    assert signed_off_by(msg) == [v for k, v in theirs if k.lower() == "signed-off-by"]
    ids = [v for k, v in theirs if k.lower() == "patch-id"]
    assert patch_id_trailer(msg) == (ids[0] if ids and len(ids[0]) == 40 and set(ids[0]) <= set("0123456789abcdef")
                                     else None)


def test_the_tricky_messages_are_tricky():
    """The old regexes answer differently on some of them: the test above can tell."""
    from lucepatch.upstream.checks import signed_off_by

    assert any(_old_dco_regex(m) != signed_off_by(m) for m in TRICKY)


def test_patch_files_read_their_trailers_as_git(tmp_path):
    """series.parse_patch (what every verb reads) answers as git on a format-patch of each message."""
    from conftest import git

    up = init_repo(tmp_path / "up")
    write(up, "a.c", "int a;\n")
    base = commit_all(up, "base")
    kept = [m for m in TRICKY if not m.startswith("Signed-off-by")]  # git refuses a message of a sign-off alone
    for i, msg in enumerate(kept):
        write(up, "a.c", f"int a = {i};\n")
        commit_all(up, msg)
    shas = git(up, "rev-list", "--reverse", f"{base}..HEAD").split()
    for f, sha in zip(format_patches(up, f"{base}..HEAD", tmp_path / "fp"), shas):
        assert parse_patch(f).trailers == git_parse(git(up, "log", "-1", "--format=%B", sha)), f.name


def test_no_other_module_parses_trailers_with_a_regex():
    """Trailer keys appear in patterns only in trailers.py (a `git log --grep` prefilter aside)."""
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent / "lucepatch"
    keys = ("Signed-off-by", "Patch-Id", "Upstream-Status", "Applied-Upstream", "Reproducer", "Lucepatch-Series",
            "Build-Only")
    bad = []
    for f in sorted(root.rglob("*.py")):
        if f.name == "trailers.py":
            continue
        for node in ast.walk(ast.parse(f.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith("^") \
                    and any(k + ":" in node.value or k + r"\s*:" in node.value for k in keys):
                bad.append(f"{f.relative_to(root.parent)}:{node.lineno}: {node.value[:60]!r}")
    assert not bad, f"trailers parsed with a regex outside lucepatch/trailers.py: {bad}"
