"""The retirement report's schema is data (lucepatch/data/retire.schema.json, beside the evidence
schema) so that `show` validates reports without importing the retirement rule (docs/design.md
"Layers": show sits below upstream). The file and the rule must not drift apart: every constant
the schema spells out is the rule's own."""

from __future__ import annotations

import json

import jsonschema
import pytest

from conftest import REPO_ROOT
from lucepatch.engine import retirement
from lucepatch.files import data_schema
from lucepatch.show.documents import RETIRE, read_document
from lucepatch.upstream import retire as rt

FILE = REPO_ROOT / "lucepatch" / "data" / "retire.schema.json"


def test_the_schema_file_is_the_rules_schema():
    s = json.loads(FILE.read_text())
    assert rt.RETIRE_SCHEMA == s == data_schema("retire")
    jsonschema.Draft202012Validator.check_schema(s)
    props = s["properties"]
    assert props["schema_version"]["const"] == rt.SCHEMA_VERSION
    assert props["kind"]["const"] == rt.KIND == RETIRE
    assert props["runs"]["minimum"] == rt.MIN_RUNS
    # reports of every rule are read (show), the newest is the rule's own; only it is acted on
    assert props["invariant"]["enum"] == list(range(1, retirement.INVARIANT + 1))
    row = props["patches"]["items"]["properties"]
    assert row["status"]["enum"] == list(rt.STATUSES)
    assert row["needed"]["enum"] == sorted(set(rt.NEEDED.values()))
    signal = next(o for o in row["code_signal"]["oneOf"] if o.get("type") == "object")
    assert signal["properties"]["signal"]["enum"] == list(retirement.CODE_SIGNALS)


def test_show_rejects_a_report_the_schema_rejects(tmp_path):
    doc = {"schema_version": 2, "kind": RETIRE, "target": "t"}  # most required keys missing
    f = tmp_path / "r.json"
    f.write_text(json.dumps(doc))
    with pytest.raises(Exception, match="not a valid retirement report"):
        read_document(f)
