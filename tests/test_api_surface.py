"""One front door (issue 35): every command reaches the library through `lucepatch.api` names, the
API's names are the services' own functions (no wrapper in between), and importing the API costs a
caller nothing it does not use. tests/test_layers.py holds the commands' imports to the ```commands
block of docs/design.md; this file holds what they call. At 38ae54e commands imported 13 modules
past the API and only `check` and `pr` used it; 25 of the 70 functions of api.py and services/
were one-line forwarders."""

from __future__ import annotations

import ast
import importlib
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
COMMANDS = ROOT / "lucepatch" / "commands"


def _house_metrics():
    spec = importlib.util.spec_from_file_location("_house_metrics", ROOT / "tools" / "house_metrics.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def api_calls(src: str) -> set[str]:
    """Every `api.<name>` a module reads (ast)."""
    return {n.attr for n in ast.walk(ast.parse(src)) if isinstance(n, ast.Attribute)
            and isinstance(n.value, ast.Name) and n.value.id == "api"}


def test_every_command_calls_the_library_through_api_names():
    from lucepatch import api

    used: dict[str, set[str]] = {}
    for f in sorted(COMMANDS.glob("*.py")):
        for name in api_calls(f.read_text(encoding="utf-8")):
            used.setdefault(name, set()).add(f.name)
    unknown = {n: sorted(fs) for n, fs in used.items() if n not in api.__all__}
    assert not unknown, f"commands call names lucepatch.api does not expose: {unknown}"
    # the verbs that run the main job all go through it (not one or two of them)
    callers = {f for fs in used.values() for f in fs}
    assert len(callers) >= len([f for f in COMMANDS.glob("*.py") if f.name != "__init__.py"]) - 1, sorted(callers)


def test_the_api_names_are_the_services_own_functions():
    from lucepatch import api

    for name, (module, attr) in api.NAMES.items():
        assert module.startswith("lucepatch.services."), f"api.{name} lives in {module}, not a service module"
        # one object, whichever door a caller takes: no wrapper in between
        assert getattr(api, name) is getattr(importlib.import_module(module), attr), name
    assert set(api.__all__) >= set(api.NAMES)


def test_no_one_line_forwarders_in_the_api_or_the_services():
    hm = _house_metrics()
    m = hm.measure(ROOT)
    assert m["forwarders"] == [], m["forwarders"]
    assert m["commands_import_past_the_api"] == [], m["commands_import_past_the_api"]


def test_the_forwarder_rule_sees_a_forwarder():
    hm = _house_metrics()
    fns = ast.parse(
        "def a(t, src, cache, *, onto=None):\n    '''doc'''\n    return check_all(t, src, cache, onto=onto)\n"
        "def b(p):\n    return identify(Path(p))\n"
        "def c(t):\n    return bool(t.profiles and not t.build.artifacts)\n"
        "def d(ws, name):\n    t = load(ws, name)\n    return t\n"
        "def e():\n    return simple('cpplint', 'pip install cpplint')\n").body
    assert [f.name for f in fns if hm.is_forwarder(f)] == ["a", "b"]


def test_importing_the_api_loads_no_service_and_help_loads_neither():
    code = ("import sys, json; import lucepatch.api as a; a.__all__\n"
            "print(json.dumps(sorted(m for m in sys.modules if m.startswith(('lucepatch.services', 'click')))))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                       env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == []
    code = ("import sys, json\nfrom lucepatch.main import main\ntry:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
            "print(json.dumps(sorted(m for m in sys.modules if m.startswith(('lucepatch.services', 'lucepatch.api', "
            "'lucepatch.commands')))))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                       env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout.strip().splitlines()[-1]) == []
