#!/usr/bin/env python3
"""Print the README's install and test commands, one a line: the first ```sh block under
"## Install and test", each line without its trailing comment. .ci/newcomer runs them verbatim,
so the README and the newcomer CI stage cannot drift apart."""

from __future__ import annotations

import re
import sys
from pathlib import Path


def commands(readme: Path) -> list[str]:
    text = readme.read_text(encoding="utf-8")
    if "\n## Install and test" not in text:
        raise SystemExit(f"{readme}: no '## Install and test' section")
    section = text.split("\n## Install and test", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```sh\n(.*?)```", section, re.S)
    if not block:
        raise SystemExit(f"{readme}: no ```sh block under '## Install and test'")
    return [c for c in (line.split("  #", 1)[0].strip() for line in block.group(1).splitlines()) if c]


if __name__ == "__main__":
    for c in commands(Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).resolve().parent.parent / "README.md")):
        print(c)
