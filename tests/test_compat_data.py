"""compatible_hami.toml (issue 27 item 4): every row carries its source and says what is unknown; the
Olares rows are the beclab fork's tags, mapped to no upstream HAMi-core commit; lint checks it."""

from __future__ import annotations

import copy

from conftest import REPO_ROOT

from lucepatch.k8s.gates import compat_data
from lucepatch.main import main
from lucepatch.services.lint import lint_compat_data


def test_the_packaged_rows_are_well_formed():
    data = compat_data()
    assert lint_compat_data(data) == []
    assert all(r["source"] and isinstance(r["unknown"], list) for r in data["release"])
    # the wrong row of before: no upstream release claims to be what Olares runs
    assert not any("olares" in str(r).lower() for r in data["release"])


def test_olares_rows_name_the_fork_and_their_sources():
    rows = {tuple(v["versions"]): v for v in compat_data()["vendor"] if v["distribution"] == "Olares"}
    assert rows[("1.12.5",)]["hami"] == "beclab/hami v2.6.8" and "beclab/Olares#2410" in rows[("1.12.5",)]["source"]
    assert rows[("1.12.6", "1.12.7")]["hami"] == "beclab/hami v2.6.20"
    assert "beclab/Olares#3135" in rows[("1.12.6", "1.12.7")]["source"]
    assert any(v["hami"] == "beclab/hami v2.6.21" and "beclab/Olares#3299" in v["source"] for v in rows.values())
    assert all(v["unknown"] and "hami_core" not in v for v in rows.values())
    assert "2.5.1" in rows[("1.12.5",)]["note"]  # what users self-report, and why it is not upstream v2.5.1


def test_lint_catches_malformed_rows():
    bad = copy.deepcopy(compat_data())
    bad["release"][0].pop("source")
    bad["release"][1]["unknown"] = "nothing"
    bad["release"][2]["hami_core"] = "54b1305"
    bad["vendor"][0]["hami_core"] = "54b13055032577b9487d108fa1b18ccaf56274cc"
    bad["vendor"][1]["unknown"] = []
    bad["series"]["hami-core-v2.5"]["compatible"].append("beclab/hami v2.6.8")
    msgs = [f.patch + ": " + f.message for f in lint_compat_data(bad)]
    assert any("release[0]" in m and "no source" in m for m in msgs)
    assert any("release[1]" in m and "no unknown list" in m for m in msgs)
    assert any("release[2]" in m and "40-hex" in m for m in msgs)
    assert any("vendor[0]" in m and "names no upstream HAMi-core commit" in m for m in msgs)
    assert any("vendor[1]" in m and "no unknown list" in m for m in msgs)
    assert any("series.hami-core-v2.5" in m and "beclab/hami v2.6.8" in m for m in msgs)


def test_lint_verb_checks_the_data(capsys, monkeypatch):
    import json

    import lucepatch.services.lint as lint  # where the lint verb reads the packaged data (lines/fit.compat_data)

    rc = main(["--workspace", str(REPO_ROOT), "lint", "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert rc == 0 and not [f for f in doc["findings"] if f["check"] == "compat"]
    bad = copy.deepcopy(compat_data())
    bad["vendor"][0]["hami_core"] = "0" * 40
    monkeypatch.setattr(lint, "compat_data", lambda: bad)
    rc = main(["--workspace", str(REPO_ROOT), "lint", "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert rc == 1 and [f["target"] for f in doc["findings"] if f["check"] == "compat"] == ["lucepatch/data/compatible_hami.toml"]
