"""Scenario parameters (reproducer.toml [params] / [scenario.params]): typed declarations, checked
when the reproducer loads, always set by the runner (defaults or given values, validated), and
recorded with the scenario in the evidence (docs/design.md "Contracts")."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from lucepatch.errors import UsageError
from lucepatch.verify.reproducer import list_reproducers, load_reproducer_dir, parse_bytes, scenario_env
from lucepatch.workspace import Workspace

ROOT = Path(__file__).resolve().parent.parent

HEAD = """\
name = "p"
target = "hami-core"
artifact = "libvgpu.so"
sources = ["p.c"]
"""


def _repro(tmp_path: Path, body: str):
    d = tmp_path / "p"
    d.mkdir(exist_ok=True)
    (d / "p.c").write_text("int main(void) { return 0; }\n")
    (d / "reproducer.toml").write_text(HEAD + textwrap.dedent(body))
    return load_reproducer_dir(d)


BASIC = """
[env]
CUDA_DEVICE_MEMORY_LIMIT = "1g"

[params.block]
type = "bytes"
default = "64m"
min = "2m"
max = "1g"
points = ["2m", "1g"]

[params.order]
type = "choice"
choices = ["a", "b"]
default = "a"

[[scenario]]
name = "control"
control = true

[[scenario]]
name = "second-device"
[scenario.params.device]
type = "device"
default = 1
max = 3
[scenario.params.block]
type = "bytes"
default = "4m"
min = "2m"
max = "8m"
"""


def test_params_are_typed_inherited_and_set(tmp_path):
    r = _repro(tmp_path, BASIC)
    control, second = r.scenarios
    assert list(control.params) == ["block", "order"]
    assert control.params["block"].default == 64 << 20 and control.params["block"].points == (2 << 20, 1 << 30)
    assert scenario_env(r, control) == {"CUDA_DEVICE_MEMORY_LIMIT": "1g", "LP_PARAM_BLOCK": str(64 << 20),
                                        "LP_PARAM_ORDER": "a"}
    # the scenario's declaration replaces the reproducer's; a device starts at 0
    assert second.params["block"].max == 8 << 20 and second.params["device"].min == 0
    assert second.param_env({"device": 3, "block": "8m"})["LP_PARAM_BLOCK"] == str(8 << 20)
    assert second.to_json()["params"]["device"] == {"type": "device", "default": 1, "env": "LP_PARAM_DEVICE",
                                                     "min": 0, "max": 3}


@pytest.mark.parametrize("values, msg", [
    ({"block": "16m"}, "above the maximum"),
    ({"block": "1m"}, "below the minimum"),
    ({"block": "lots"}, "not a number of bytes"),
    ({"device": -1}, "negative"),
    ({"device": "x"}, "not an integer"),
    ({"order": "c"}, "not one of a, b"),
    ({"nope": 1}, "has no parameter nope"),
])
def test_given_values_are_validated(tmp_path, values, msg):
    r = _repro(tmp_path, BASIC)
    with pytest.raises(UsageError, match=msg):
        r.scenarios[1].param_env(values)


@pytest.mark.parametrize("body, msg", [
    ('[params.x]\ntype = "float"\ndefault = 1\n', "type must be one of"),
    ('[params.x]\ntype = "int"\n', "lacks a default"),
    ('[params.x]\ntype = "int"\ndefault = 5\nmax = 4\n', "above the maximum"),
    ('[params.x]\ntype = "int"\ndefault = 1\nmin = 3\nmax = 2\n', "min 3 is above max 2"),
    ('[params.x]\ntype = "int"\ndefault = 1\nstep = 2\n', "unknown key step"),
    ('[params.x]\ntype = "choice"\ndefault = "a"\n', "needs choices"),
    ('[params.x]\ntype = "bytes"\ndefault = "1q"\n', "not a number of bytes"),
    ('[params.x]\ntype = "int"\ndefault = 1\npoints = [1, 1]\n', "must not repeat"),
    ('[params.X]\ntype = "int"\ndefault = 1\n', "lower-case"),
    ('[params.x]\ntype = "int"\ndefault = 1\nenv = "CUDA_DEVICE_MEMORY_LIMIT"\n', "both a parameter's variable and set in \\[env\\]"),
])
def test_bad_declarations_are_one_clear_error(tmp_path, body, msg):
    with pytest.raises(UsageError, match=msg):
        _repro(tmp_path, '[env]\nCUDA_DEVICE_MEMORY_LIMIT = "1g"\n' + body + '\n[[scenario]]\nname = "c"\ncontrol = true\n')


def test_bytes_read_like_hami_limits():
    assert parse_bytes("1g", "x") == 1 << 30 and parse_bytes("64M", "x") == 64 << 20 and parse_bytes(4096, "x") == 4096
    for bad in ("", "1.5g", True, -1, "g"):
        with pytest.raises(UsageError):
            parse_bytes(bad, "x")


def test_every_shipped_parameter_is_valid_and_set():
    """The workspace's reproducers: each declared parameter's default (and every point) passes its
    own check, and the runner's environment carries all of them."""
    declared = 0
    for r in list_reproducers(Workspace(ROOT, "flag")):
        for s in r.scenarios:
            env = scenario_env(r, s)
            for p in s.params.values():
                declared += 1
                assert env[p.env] == str(p.default)
                for v in p.points:
                    assert p.check(v) == v
    assert declared > 0
