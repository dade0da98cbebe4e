"""A README a newcomer reads in five minutes, and a --help that helps (issue 35 item 6). At 38ae54e the
README was 45 KB and 546 lines with 200 lines of H200 tables before "Install and test", did not say how
long the tests take, left helm out of the tools that skip tests, and `--help` cut 20 of 22 descriptions
with "...", had no "start here" and no "did you mean"."""

from __future__ import annotations

import re

import needs
from conftest import REPO_ROOT

README = REPO_ROOT / "README.md"
PREREQUISITES = {"gcc", "g++", "make", "cmake", "/usr/local/cuda/include/cuda.h"}


def _section(text: str, heading: str) -> str:
    return text.split(f"## {heading}\n", 1)[1].split("\n## ", 1)[0]


def test_the_readme_is_short_and_says_what_a_newcomer_needs():
    text = README.read_text()
    assert len(text.encode()) <= 12_000, len(text.encode())
    heads = re.findall(r"^## (.+)$", text, re.M)
    assert heads[:3] == ["The main job: prove the HAMi-core fix", "Install and test", "The verbs"], heads
    install = _section(text, "Install and test")
    assert re.search(r"\d+ minutes", install)  # how long the tests take
    for tool in sorted(set(needs.INSTALL) - PREREQUISITES - {"cpplint"}):  # cpplint: `pip install .` brings it
        name = "Docker" if tool == "docker" else tool
        assert name in install, f"the README does not name {tool}, whose absence skips tests"


def test_the_readme_has_a_line_for_every_verb():
    from lucepatch.main import VERBS

    table = _section(README.read_text(), "The verbs")
    named = set(re.findall(r"`([a-z]+)`", "\n".join(line.split("|")[1] for line in table.splitlines()
                                                      if line.startswith("| `"))))
    assert named == set(VERBS), sorted(set(VERBS) ^ named)


def test_help_shows_whole_descriptions_a_start_and_did_you_mean(cli):
    from lucepatch.main import SUMMARY

    r = cli("--help")
    assert r.code == 0 and "..." not in r.out.split("Commands:", 1)[1]  # no description cut
    flat = " ".join(r.out.split())
    for verb, text in SUMMARY.items():
        assert " ".join(text.split()) in flat.replace("- ", "-"), verb
    assert "Start here: lucepatch verify --reproducer async-sched" in flat
    r = cli("verfy", "--reproducer", "async-sched")
    assert r.code == 2 and r.err == "lucepatch: error: no verb 'verfy'; did you mean verify?\n"
    r = cli("xyzzy")
    assert r.code == 2 and "lucepatch --help lists the verbs" in r.err
