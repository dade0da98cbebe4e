"""Every verb's --json document has a schema under docs/schema/<verb>.schema.json (docs/design.md
"Output and exit codes"), and what the verbs print validates against it — run here for every verb
this machine can run, against the committed documents for the rest."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import jsonschema
import pytest

from conftest import commit_all, write
from lucepatch.main import VERBS

REPO = Path(__file__).resolve().parent.parent
SCHEMAS = REPO / "docs" / "schema"
EVIDENCE = REPO / "docs" / "evidence"
EXTRA = {"verify-retire", "verify-coverage-map"}  # verify's other documents


def schema(verb: str) -> dict:
    return json.loads((SCHEMAS / f"{verb}.schema.json").read_text())


def check(verb: str, doc: dict) -> None:
    assert doc["verb"] == verb and isinstance(doc["schema_version"], int)
    jsonschema.validate(doc, schema(verb), cls=jsonschema.Draft202012Validator)


def _emitted() -> set[str]:
    """The verb names every report.emit_json("...") call in lucepatch/ passes."""
    names = set()
    for f in (REPO / "lucepatch").rglob("*.py"):
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "emit_json" and node.args \
                    and isinstance(node.args[0], ast.Constant):
                names.add(node.args[0].value)
    return names


def test_every_verb_has_a_valid_schema():
    want = set(VERBS) | EXTRA | _emitted()
    have = {p.name.removesuffix(".schema.json") for p in SCHEMAS.glob("*.schema.json")} - {"evidence"}
    assert want <= have, want - have
    for v in want:
        s = schema(v)
        jsonschema.Draft202012Validator.check_schema(s)
        assert s["properties"]["verb"] == {"const": v} and {"schema_version", "verb"} <= set(s["required"])


def test_a_document_of_another_verb_does_not_validate():
    with pytest.raises(jsonschema.ValidationError):
        check("status", {"schema_version": 1, "verb": "status", "target": "t", "version": "1", "base": "0" * 40,
                         "head": "0" * 40, "patches": [{"name": "p", "patch_id": "x", "status": "sideways",
                                                        "signal": None, "detail": ""}]})


@pytest.fixture
def runs(cli, toy, tmp_path):
    """verb -> its --json document, from the toy target."""
    ws, up, base = toy["ws"], toy["upstream"], toy["base"]
    w = ["--workspace", ws]
    write(up, "src/c.c", "int c;\n")
    head = commit_all(up, "upstream moves on")
    docs = {}

    def run(verb, *args, codes=(0, 1)):
        r = cli(*args, "--json")
        assert r.code in codes and r.out.strip(), (verb, r.code, r.err)
        docs[verb] = json.loads(r.out)

    run("pr", *w, "pr", "toy", "--source", up, "--out", tmp_path / "pr", "--no-evidence", "--signoff")
    run("list", *w, "list")
    run("status", *w, "status", "toy", "--source", up)
    run("check", *w, "check", "toy", "--source", up)
    run("lint", *w, "lint", "toy")
    run("matrix", *w, "matrix", "toy", "--source", up, "--range", f"{base}..{head}")
    run("rebase", *w, "rebase", "toy", "--source", up, "--onto", head, "--dry-run")
    run("mark", *w, "mark", "toy", "fix-a-return-ten.patch", "--status", "Denied")
    run("apply", *w, "apply", "toy", "--source", up)
    run("export", *w, "export", "toy", "--source", up, "--check")
    run("import", *w, "import", "toy2", toy["tmp"] / "fp", "--base", base, "--upstream", "https://example.invalid/t")
    run("doctor", "doctor", codes=(0, 3))
    run("node", "node", "--hami-version", "v2.5.1")
    run("ci", *w, "ci", "toy", "--source", up, "--no-probes", codes=(0, 1))
    run("show", "show", EVIDENCE / "async-sched.h200.json")
    run("render", "render", "k8s", "rbac")
    return docs


def test_every_verb_runnable_here_prints_what_its_schema_says(runs):
    for verb, doc in runs.items():
        check(verb, doc)


@pytest.mark.parametrize("name", ["retire-hami-core-8f3a89c.sim.json", "coverage-map-hami-core-8f3a89c.sim.json"])
def test_show_json_of_a_retirement_report_and_a_coverage_map(cli, name):
    r = cli("show", EVIDENCE / name, "--json")
    assert r.code == 0, r.err
    check("show", r.json)
    # the document `verify --retire/--coverage-map --json` prints is the same one, with its verb
    doc = json.loads((EVIDENCE / name).read_text())
    check("verify-retire" if "retire" in name else "verify-coverage-map", {**doc, "verb": r.json["kind"].replace(
        "lucepatch-retire", "verify-retire").replace("lucepatch-coverage-map", "verify-coverage-map")})


def test_deploy_dry_run_json_matches_its_schema(cli, tmp_path):
    from test_k8s_deploy import _lib
    from conftest import evidence_doc

    base, patched = _lib(tmp_path, "baseline"), _lib(tmp_path, "patched", extra="int cuMemFreeAsync(void) { return 0; }")
    ev = tmp_path / "evidence.json"
    # a v2.9.0 node: the line that serves it (the main line, on upstream main, serves no release)
    ev.write_text(json.dumps(evidence_doc(baseline=base, patched=patched, gpu="H200", schema_version=1,
                                          target="hami-core-v2.9")))
    r = cli("deploy", "hami-core", "--lib", patched, "--evidence", ev, "--hami-version", "v2.9.0", "--dry-run", "--json")
    assert r.code == 0, r.err
    check("deploy", r.json)
    plain = cli("deploy", "hami-core", "--lib", patched, "--evidence", ev, "--hami-version", "v2.9.0", "--dry-run")
    # the gate report is the dry run's result: on stdout, as comments kubectl skips
    gates = [l for l in plain.out.splitlines() if l.startswith("# gate ")]
    assert {g["name"] for g in r.json["gates"]} == {l.split()[3].rstrip(":") for l in gates}
    assert "gate " not in plain.err
