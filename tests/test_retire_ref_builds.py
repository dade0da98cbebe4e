"""REF is measured as it is, or nothing is said about it (issue 36, item 2), on the twobugs fixture.

The fixture's upstream gains a guard in its CMakeLists that refuses to configure (as CMake 4 refuses
HAMi-core's `cmake_minimum_required(2.8.11)`), a Build-Only patch that removes it, and a REF where
upstream rewrote the guarded line, so the Build-Only patch no longer applies (52f33fc's
2.8.11 -> 2.8.12). Before issue 36 nothing at REF was built and the retirement report still said
how REF behaves. Now a build carries the Build-Only patch the ways builders/build_only.py lists —
upstream as it ships with [build.instead_of]'s arguments, 3-way, a line's resolution — and when no
way builds, every verdict says "not measured: REF does not build: ..." and nothing else. Every
report here keeps the invariant (retire_report.check_reasons).
"""

from __future__ import annotations

import importlib.util
import shutil
import subprocess

import jsonschema
import pytest

from conftest import FIXTURES
from lucepatch.builders.native import build_variant
from lucepatch.errors import CheckFailed
from lucepatch.target import load_target
from lucepatch.upstream import retire as rt
from lucepatch.upstream.retire_report import check_reasons
from lucepatch.verify.service import build_variants
from lucepatch.workspace import resolve_workspace

pytestmark = pytest.mark.needs("gcc", "cmake", "/usr/local/cuda/include/cuda.h")

_spec = importlib.util.spec_from_file_location("twobugs_fixture", FIXTURES / "twobugs" / "fixture.py")
tb = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(tb)

GUARD = "if(NOT LP_ACCEPT_OLD_MINIMUM)\n  message(FATAL_ERROR \"this CMake refuses the project's minimum\")\nendif()\n"
BO = "build-accept-new-cmake.patch"
FLAG = "-DLP_ACCEPT_OLD_MINIMUM=ON"


def _write(repo, rel, text):
    (repo / rel).write_text(text)
    return tb._commit(repo, f"edit {rel}")


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """(upstream repo, base, ref, broken ref, the Build-Only patch file)."""
    root = tmp_path_factory.mktemp("refbuilds")
    repo, commits = tb.upstream(root, [])
    cm = repo / "CMakeLists.txt"
    text = cm.read_text().replace("project(twobugs C)\n", "project(twobugs C)\n" + GUARD)
    base = _write(repo, "CMakeLists.txt", text)
    # the Build-Only patch, made as a maintainer would (format-patch of a commit on a scratch branch)
    tb.git(repo, "checkout", "-q", "-b", "bo", base)
    _write(repo, "CMakeLists.txt", text.replace("if(NOT LP_ACCEPT_OLD_MINIMUM)", "if(FALSE)  # accepted"))
    tb.git(repo, "commit", "-q", "--amend", "-m", "build: accept the newer CMake\n\nUpstream-Status: Pending\n"
           "Build-Only: yes\nSigned-off-by: Fixture Author <fixture@example.invalid>")
    out = root / "bo"
    name = tb.git(repo, "format-patch", "--zero-commit", "--no-signature", "--full-index", "-N", "-1", "-o", str(out)
                  ).strip()
    patch = root / BO
    shutil.copy(name, patch)
    tb.git(repo, "checkout", "-q", "main")
    # REF: upstream rewrote the guarded line (the Build-Only patch conflicts) and fixed bug 1
    ref_text = text.replace("if(NOT LP_ACCEPT_OLD_MINIMUM)", "if(NOT LP_ACCEPT_OLD_MINIMUM)  # still refused")
    _write(repo, "CMakeLists.txt", ref_text)
    tb.git(repo, "apply", str(FIXTURES / "twobugs" / "upstream" / "fix-limit-upstream.diff"))
    ref = tb._commit(repo, "allocator: count memory in use against the limit")
    src = repo / "src" / "twobugs.c"
    broken = _write(repo, "src/twobugs.c", src.read_text() + "#error half-merged refactor\n")
    return {"root": root, "repo": repo, "base": base, "ref": ref, "broken": broken, "patch": patch}


def _workspace(world, name, *, flags=True):
    ws = tb.workspace(world["root"], world["base"], name=name)
    tdir = ws / "patches" / "twobugs"
    shutil.copy(world["patch"], tdir / BO)
    (tdir / "series").write_text(f"{BO}\n" + (tdir / "series").read_text())
    if flags:
        with open(tdir / "target.toml", "a") as f:
            f.write(f'\n[build.instead_of]\n"{BO}" = ["{FLAG}"]\n')
    return load_target(resolve_workspace(ws), "twobugs")


def _retire(world, t, ref):
    doc = rt.retire_report(t, world["repo"], ref, world["root"] / "cache", "fake", 10, coverage=False, sweep=False)
    jsonschema.validate(doc, rt.RETIRE_SCHEMA)
    assert check_reasons(doc) == []
    return doc, {p["name"]: p for p in doc["patches"]}


def test_a_moved_build_only_patch_is_replaced_by_its_declared_flags_and_ref_is_measured(world):
    t = _workspace(world, "ws-flags")
    doc, by = _retire(world, t, world["ref"])
    bare = next(b for b in doc["builds"] if b["name"] == f"{world['ref'][:12]}+build-only")
    assert bare["built"] and bare["applied"] == [] and FLAG in bare["carried"][BO]
    assert "does not apply at" in bare["carried"][BO] and "upstream as it ships with" in bare["carried"][BO]
    assert any(m["build_key"] == bare["build_key"] and m["runs"] == 10 for m in doc["measured"])
    assert by[BO]["applies"] is False and FLAG in by[BO]["reason"]
    # behaviour at REF measured: upstream fixed bug 1, bug 2 still needs its patch
    assert by["fix-limit-cumulative.patch"]["status"] == rt.RETIRE_CANDIDATE
    assert by["fix-meminfo-limit.patch"]["status"] == rt.STILL_NEEDED
    # ref-vs-ref: both refs build (before: "patch(es) ... do not apply" at REF, nothing built)
    variants = build_variants(t, world["repo"], world["root"] / "cache", "libvgpu.so", baseline_ref=world["base"],
                              patched_ref=world["ref"])
    assert [v.provenance["patches"] for v in variants] == [[BO], []]


def test_without_a_way_to_build_ref_every_verdict_says_so_and_nothing_else(world):
    """No [build.instead_of], no clean 3-way merge, no line on REF: REF does not build. Before: the
    report's four conflicting patches read "without it REF already behaves as ..." with 0 runs."""
    t = _workspace(world, "ws-none", flags=False)
    with pytest.raises(CheckFailed) as exc:
        build_variant(t, world["repo"], "baseline", world["root"] / "cache", base=world["ref"])
    msg = str(exc.value)
    assert f"{world['ref'][:12]} does not build here: {BO} does not apply at {world['ref'][:12]} (conflict in " \
           "CMakeLists.txt)" in msg
    assert "as shipped" in msg and "this CMake refuses the project's minimum" in msg
    doc, by = _retire(world, t, world["ref"])
    assert {p["status"] for p in by.values()} == {rt.INCONCLUSIVE}
    for p in by.values():
        assert p["reason"].startswith("not measured: REF does not build: ") and p["scenarios"] == []
    assert doc["still_failing"] == [] and not any(m["runs"] for m in doc["measured"])
    assert rt.retire_exit_code(doc) == 1


def test_a_ref_that_does_not_compile_is_not_measured(world):
    """The same when upstream itself does not build at REF (before: the coverage build failed and the
    whole retire stopped with exit 3)."""
    t = _workspace(world, "ws-broken")
    doc, by = _retire(world, t, world["broken"])
    assert all(p["reason"].startswith("not measured: REF does not build: ") for p in by.values())
    assert "#error half-merged refactor" in by["fix-meminfo-limit.patch"]["reason"]


def test_a_line_on_ref_lends_its_resolution(world):
    """No flags, but a line of the family on REF carries the Build-Only patch resolved (as the
    rebase session that made the line left it): builds at REF take that resolution."""
    t = _workspace(world, "ws-line", flags=False)
    repo = world["repo"]
    tb.git(repo, "checkout", "-q", "-b", "resolved", world["ref"])
    cm = (repo / "CMakeLists.txt").read_text()
    _write(repo, "CMakeLists.txt", cm.replace("if(NOT LP_ACCEPT_OLD_MINIMUM)  # still refused", "if(FALSE)  # accepted"))
    tb.git(repo, "commit", "-q", "--amend", "-m", "build: accept the newer CMake\n\nUpstream-Status: Pending\n"
           "Build-Only: yes\nSigned-off-by: Fixture Author <fixture@example.invalid>")
    out = world["root"] / "resolved"
    name = tb.git(repo, "format-patch", "--zero-commit", "--no-signature", "--full-index", "-N", "-1", "-o",
                  str(out)).strip()
    tb.git(repo, "checkout", "-q", "main")
    line = t.dir.parent / "twobugs-next"
    line.mkdir()
    shutil.copy(name, line / BO)
    (line / "series").write_text(f"{BO}\n")
    (line / "target.toml").write_text(t.toml_path.read_text().replace('name = "twobugs"', 'name = "twobugs-next"\n'
                                      'line_of = "twobugs"\nline = "next"').replace(world["base"], world["ref"]))
    b = build_variant(t, repo, "baseline", world["root"] / "cache", base=world["ref"])
    assert "the resolution line twobugs-next carries" in b.carried[BO]
    subprocess.run(["git", "-C", str(repo), "branch", "-q", "-D", "resolved"], check=True)
