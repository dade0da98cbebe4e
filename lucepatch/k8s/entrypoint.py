"""The environment upstream Lucebox's image entrypoint reads (lucepatch/data/lucebox_entrypoint.toml).

The vendored line's image is upstream's own (Luce-Org/lucebox's Dockerfile, ENTRYPOINT
server/scripts/entrypoint.sh), so the chart configures the server only through the variables that
script reads. The data file lists them by role (chart / setting / image / unused / host); the
`dflash` value of the lucebox-vendored set takes the "setting" ones and nothing else, so a
misspelled or inert name is refused instead of being passed to a script that would ignore it.
"""

from __future__ import annotations

import functools
import tomllib
from pathlib import Path

DATA = Path(__file__).resolve().parent.parent / "data" / "lucebox_entrypoint.toml"
ROLES = ("chart", "setting", "image", "unused", "host")


@functools.lru_cache(maxsize=1)
def data() -> dict:
    doc = tomllib.loads(DATA.read_text(encoding="utf-8"))
    bad = {n: v.get("role") for n, v in doc["vars"].items() if v.get("role") not in ROLES}
    if bad:  # a broken data file is a packaging error, said with its names
        raise ValueError(f"{DATA}: unknown role(s) {bad}; roles are {', '.join(ROLES)}")
    return doc


def names(*roles: str) -> list[str]:
    """The variables of these roles (all of them without roles), in the data file's order."""
    return [n for n, v in data()["vars"].items() if not roles or v["role"] in roles]


def settings() -> list[str]:
    """What `dflash.<NAME>` may set: the names the entrypoint turns into server arguments."""
    return names("setting")


def describe(name: str) -> str:
    v = data()["vars"][name]
    return f"{name} ({v['role']}): {v['meaning']}"


WHERE = {"chart": "the chart sets it (port, model_*)", "setting": "set it as dflash.{n}",
         "image": "the image's layout: leave it", "unused": "the entrypoint ignores it",
         "host": "the host wrapper's fact for HOST_INFO"}


def clash(env_names) -> str | None:
    """Why a name of the server's free `env` must not be one the entrypoint reads (None: none is):
    the entrypoint's settings go through `dflash` (checked), the rest are the chart's or the image's."""
    hits = [n for n in env_names if n in data()["vars"]]
    if not hits:
        return None
    n = sorted(hits)[0]
    return f"env.{n}: upstream's entrypoint reads it ({describe(n)}): {WHERE[data()['vars'][n]['role']].format(n=n)}"
