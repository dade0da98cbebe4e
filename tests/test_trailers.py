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
