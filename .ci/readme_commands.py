#!/usr/bin/env python3
"""The commands the documentation shows, read from the documents themselves, so the docs and the
places that run them (.ci/newcomer, .ci/main-job, tests/test_docs_commands.py) cannot drift apart.

    readme_commands.py [README.md]                    the "## Install and test" block, one command a line
                                                      (trailing comments dropped): what .ci/newcomer runs
    readme_commands.py --block "The main job" [FILE]  the first ```sh block under that heading, verbatim

Every fenced block of a document is a `Block`: its info string (`sh`, `text`, ...), the heading it is
under, its text, and the annotation on the line right above its opening fence, an HTML comment
(invisible on GitHub):

    <!-- commands: needs=gpu,torch -->        runs where the machine has a GPU and PyTorch
    <!-- commands: needs=cluster vars=POD,NS -->  runs where a cluster is configured and POD, NS are set
    <!-- commands: run-by=.ci/newcomer -->     a CI stage runs this block verbatim
    <!-- commands: synopsis -->                a ```text block of usage lines, checked against --help

`needs` names what a block needs beyond this machine's prerequisites and an upstream HAMi-core
checkout: gpu, torch, cluster, docker, lucebox, helm; `vars` the shell variables a block reads as
its inputs (a pod's name, ...). The rules are docs/design.md "Commands in the documentation".
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

_FENCE = re.compile(r"^(```+)\s*([\w+-]*)(.*)$")
_ANNOTATION = re.compile(r"^<!--\s*commands:\s*(.*?)\s*-->\s*$")
NEEDS = ("gpu", "torch", "cluster", "docker", "lucebox", "helm")


@dataclass
class Block:
    path: Path
    line: int  # 1-based line of the opening fence
    info: str  # the info string's first word: sh, text, python, ... ("" when none)
    heading: str  # the nearest heading above it, without its #s
    text: str
    needs: list[str] = field(default_factory=list)
    vars: list[str] = field(default_factory=list)
    run_by: str | None = None
    synopsis: bool = False
    annotated: bool = False

    @property
    def where(self) -> str:
        return f"{self.path.name}:{self.line}"

    def commands(self) -> list[str]:
        """Logical lines (backslash continuations joined), comments and blank lines kept out."""
        out, cur = [], ""
        for raw in self.text.splitlines():
            line = raw.rstrip()
            if line.endswith("\\"):
                cur += line[:-1] + " "
                continue
            cur += line
            if cur.strip() and not cur.strip().startswith("#"):
                out.append(cur.strip())
            cur = ""
        return out


def _parse_annotation(block: Block, text: str) -> None:
    block.annotated = True
    for word in text.split():
        key, _, value = word.partition("=")
        if key == "needs":
            block.needs = [v for v in value.split(",") if v]
            unknown = [v for v in block.needs if v not in NEEDS]
            if unknown:
                raise SystemExit(f"{block.where}: unknown needs {', '.join(unknown)} (known: {', '.join(NEEDS)})")
        elif key == "vars":
            block.vars = [v for v in value.split(",") if v]
        elif key == "run-by":
            block.run_by = value
        elif key == "synopsis":
            block.synopsis = True
        elif word.startswith("(") or block.vars:
            continue  # free text after vars=: what the variables are
        else:
            raise SystemExit(f"{block.where}: unknown annotation {word!r} in '<!-- commands: {text} -->'")


def blocks(path: Path) -> list[Block]:
    lines = Path(path).read_text(encoding="utf-8").splitlines()
    out: list[Block] = []
    heading, i = "", 0
    while i < len(lines):
        line = lines[i]
        if re.match(r"^#+ ", line):  # a heading (code blocks are skipped whole below)
            heading = line.lstrip("#").strip()
        m = _FENCE.match(line)
        if m:
            fence, info = m.group(1), m.group(2)
            j = i + 1
            while j < len(lines) and not lines[j].startswith(fence):
                j += 1
            b = Block(Path(path), i + 1, info, heading, "\n".join(lines[i + 1:j]) + "\n")
            a = _ANNOTATION.match(lines[i - 1]) if i > 0 else None
            if a:
                _parse_annotation(b, a.group(1))
            out.append(b)
            i = j + 1
            continue
        i += 1
    return out


def block_under(path: Path, heading: str) -> Block:
    """The first ```sh block under the heading `heading` (## level or deeper)."""
    for b in blocks(path):
        if b.info == "sh" and b.heading == heading:
            return b
    raise SystemExit(f"{path}: no ```sh block under '{heading}'")


def commands(readme: Path) -> list[str]:
    """The "## Install and test" block, one command a line, without trailing comments."""
    text = readme.read_text(encoding="utf-8")
    if "\n## Install and test" not in text:
        raise SystemExit(f"{readme}: no '## Install and test' section")
    b = block_under(readme, "Install and test")
    return [c for c in (line.split("  #", 1)[0].strip() for line in b.text.splitlines()) if c]


if __name__ == "__main__":
    args = sys.argv[1:]
    default = Path(__file__).resolve().parent.parent / "README.md"
    if args[:1] == ["--block"]:
        print(block_under(Path(args[2]) if len(args) > 2 else default, args[1]).text, end="")
    else:
        for c in commands(Path(args[0]) if args else default):
            print(c)
