"""`lucepatch mark`: Upstream-Status changes, the patch id does not."""

from __future__ import annotations

from lucepatch.series import parse_patch


def test_mark_submitted_keeps_patch_id(cli, toy):
    tdir = toy["ws"] / "patches" / "toy"
    name = (tdir / "series").read_text().split()[0]
    before = parse_patch(tdir / name, name)
    assert before.trailer("Upstream-Status") == "Pending"
    url = "https://github.com/Project-HAMi/HAMi-core/pull/999"
    r = cli("--workspace", toy["ws"], "mark", "toy", name, "--submitted", url, "--json")
    assert r.code == 0, r.err
    after = parse_patch(tdir / name, name)
    assert after.trailer("Upstream-Status") == f"Submitted [{url}]"
    assert after.patch_id == before.patch_id and after.diff == before.diff
    assert r.json["before"] == "Pending"
    # the other patch is untouched; a second mark replaces, never duplicates
    r = cli("--workspace", toy["ws"], "mark", "toy", name, "--status", "Denied")
    text = (tdir / name).read_text()
    assert r.code == 0 and text.count("Upstream-Status:") == 1 and "Upstream-Status: Denied" in text


def test_mark_adds_missing_trailer(cli, toy):
    tdir = toy["ws"] / "patches" / "toy"
    name = (tdir / "series").read_text().split()[1]
    p = tdir / name
    p.write_text(p.read_text().replace("Upstream-Status: Pending\n", ""))
    pid = parse_patch(p, name).patch_id
    assert cli("--workspace", toy["ws"], "mark", "toy", name, "--status", "Inactive-Upstream").code == 0
    after = parse_patch(p, name)
    assert after.trailer("Upstream-Status") == "Inactive-Upstream" and after.patch_id == pid
    assert after.trailer("Signed-off-by")  # still in the same trailer block


def test_mark_usage(cli, toy):
    ws = toy["ws"]
    assert cli("--workspace", ws, "mark", "toy", "nope.patch", "--status", "Pending").code == 2
    name = (ws / "patches" / "toy" / "series").read_text().split()[0]
    assert cli("--workspace", ws, "mark", "toy", name).code == 2
    assert cli("--workspace", ws, "mark", "toy", name, "--submitted", "not a url").code == 2
    assert cli("--workspace", ws, "mark", "toy", name, "--status", "Maybe").code == 2
