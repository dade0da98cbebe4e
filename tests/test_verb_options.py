"""Every verb refuses what it does not use (issue 35 item 2). lucepatch/data/verb_modes.toml says which
options each mode of each verb takes; the commands refuse by it (commands/_common.refuse_unused) and
this file walks it: for every verb, every mode and every option of the verb, the option either changes
what the verb does — the calls it makes into lucepatch.api, what it prints, its exit code or the files
it writes — or is refused with one line naming the mode that would use it (exit 2).

The walk runs the real commands in-process with every function of lucepatch.api replaced by a
recorder (each call is kept; what it returns absorbs whatever the command does with it), so it needs
no checkout, no build and no cluster, and takes seconds. At 38ae54e, e.g., `verify --retire REF`
accepted 20 options it ignored and `build hami-core --lib ... --evidence ... --from ...` exited 0.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from types import SimpleNamespace

import click
import pytest

from lucepatch import api
from lucepatch.commands import _common
from lucepatch.main import VERBS, main

TABLE = _common.verb_modes()


def commands() -> dict[str, click.Command]:
    """{table key ("verify", "render k8s"): the click command}."""
    out = {}
    for verb, mod in VERBS.items():
        cmd = importlib.import_module(f"lucepatch.commands.{mod}").command
        if isinstance(cmd, click.Group):
            out.update({f"{verb} {n}": c for n, c in cmd.commands.items()})
        else:
            out[verb] = cmd
    return out


COMMANDS = commands()


def options(cmd: click.Command) -> dict[str, click.Option]:
    return {_common.flag_of(p): p for p in cmd.params if isinstance(p, click.Option) and not p.hidden}


def test_the_table_names_every_option_of_every_verb_and_nothing_else():
    assert set(TABLE) == set(COMMANDS)
    for key, cmd in COMMANDS.items():
        t = TABLE[key]
        named = set(t.get("common", [])) | {f for m in t["mode"] for f in m.get("takes", []) + m.get("when", [])}
        assert named == set(options(cmd)), (key, sorted(named ^ set(options(cmd))))
        defaults = [m["name"] for m in t["mode"] if not m.get("when") and not m.get("chosen")]
        assert len(defaults) <= 1, (key, defaults)
        assert len({m["name"] for m in t["mode"]}) == len(t["mode"]), key


# ---- the walk ----------------------------------------------------------------------------------------
class Got(dict):
    """What a faked api function returns: absorbs attribute access, calls, indexing, iteration (empty),
    formatting and arithmetic, so a command runs to its end; serialises as {}."""

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return Got()

    def __call__(self, *a, **k):
        return Got()

    def __getitem__(self, key):
        return Got()

    def __iter__(self):
        return iter(())

    def __bool__(self):
        return False

    def __format__(self, spec):
        return "0"

    def __str__(self):
        return ""

    __repr__ = __str__

    def __int__(self):
        return 0

    def _zero(self, other):
        return 0

    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = __truediv__ = _zero
    __lt__ = __le__ = __gt__ = __ge__ = lambda self, other: False
    __eq__ = lambda self, other: self is other  # noqa: E731
    __hash__ = object.__hash__


def _shown(v) -> str:
    if isinstance(v, Got):
        return "<got>"
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_shown(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{k}: {_shown(x)}" for k, x in sorted(v.items())) + "}"
    if callable(v):
        return f"<fn {getattr(v, '__name__', '?')}>"
    return repr(v)


# the api functions that return a tuple, and its length (a command unpacks them)
SHAPES = {"load_checked": 2, "gate_all": 3, "cluster_status": 2, "export": 2, "listing": 2, "matrix": 3,
          "rebase_prepare": 2, "rebase_table": 3, "report_table": 3, "selection": 3, "server_matrix": 4}


@pytest.fixture
def recorded(monkeypatch):
    """Every function of lucepatch.api replaced by a recorder; `facts` set what some of them answer."""
    calls: list[str] = []
    facts: dict = {}

    def fake(name):
        def f(*args, **kwargs):
            calls.append(f"{name}({', '.join(_shown(a) for a in args)}; {_shown(kwargs)})")
            if name in facts:
                return facts[name](*args, **kwargs)
            return tuple(Got() for _ in range(SHAPES[name])) if name in SHAPES else Got()
        return f

    for name in api.NAMES:
        if callable(getattr(api, name)) and not isinstance(getattr(api, name), type):
            monkeypatch.setattr(api, name, fake(name), raising=False)
    return calls, facts


class Doc:
    def __init__(self, kind):
        self.kind, self.doc = kind, {}


class Findings(list):
    targets = ["t"]


def judged(*a, **k):
    return SimpleNamespace(kind="verify-retire", doc={}, table=("t", ["c"], []), code=0, review=[])


def findings(*a, **k):
    return Findings([SimpleNamespace(level="warning", target="t", patch="p", check="c", message="m",
                                     to_json=lambda: {})])


# positional arguments each verb needs (no option is walked here)
ARGS = {"bisect": ["A..B"], "import": ["t"], "mark": ["t", "p"], "show": ["e.json"], "inspect": ["img"],
        "render k8s": ["lucebox"], "render helm": ["lucebox"], "render olares": ["lucebox"]}
TARGETED = {"apply", "check", "status", "export", "probe", "pr", "matrix", "build", "lint", "ci", "rebase"}
# what a mode a command chooses from what it reads needs the faked api to answer
FACTS = {
    ("build", "build hami-device-plugin"): ({}, ["hami-device-plugin"]),
    ("build", "build (a target built per profile)"): ({"builds_per_profile": lambda t: True}, None),
    ("build", "build --image --dry-run of upstream's Dockerfile"): ({"image_from_upstream": lambda t: True}, None),
    ("build", "build --image of upstream's Dockerfile"): ({"image_from_upstream": lambda t: True}, None),
    ("show", "show (a retirement report or a coverage map)"): (
        {"read_document": lambda p: Doc("retire"), "report_table": lambda d: ("t", ["c"], [])}, None),
    ("show", "show (several server runs side by side)"): (
        {"server_matrix": lambda paths: ("t", ["c"], [], [])}, ["a.json", "b.json"]),
    ("lint", "lint"): ({"lint": findings}, None),  # a warning: --strict makes it an error
    ("verify", "verify --retire"): ({"retire_or_map": judged}, None),
    ("verify", "verify --coverage-map"): ({"retire_or_map": judged}, None),
}


def value(p: click.Option, tmp: Path, alt: bool = False) -> list[str]:
    """The option on a command line: a flag alone, else the flag and a valid value (`alt`: another one)."""
    flag = _common.flag_of(p)
    if p.is_flag:
        return [flag]
    t = p.type
    if isinstance(t, click.Choice):
        choices = [c for c in t.choices if c != p.default]
        v = choices[-1 if alt else 0]
    elif isinstance(t, (click.IntRange,)) or t is click.INT:
        lo = getattr(t, "min", None) or 0
        v = str(max(lo, 1) + (6 if alt else 2))
    elif isinstance(t, click.Path):
        v = str(tmp / f"{flag.strip('-')}{'-2' if alt else ''}")
    else:
        v = f"{flag.strip('-')}-{'b' if alt else 'a'}" + ("=1" if flag == "--set" else "")
        if flag in ("--range",):
            v = "a..b" if not alt else "a..c"
    return [flag, v]


def run(argv: list[str], calls: list, capsys, tmp: Path):
    calls.clear()
    before = set(tmp.rglob("*"))
    code = main(argv)
    cap = capsys.readouterr()
    made = sorted(str(p.relative_to(tmp)) for p in set(tmp.rglob("*")) - before)
    for p in sorted(set(tmp.rglob("*")) - before, reverse=True):  # leave the folder as it was
        p.unlink() if p.is_file() else p.rmdir()
    return code, cap.out, cap.err, list(calls), made


def cases():
    for key, t in TABLE.items():
        for m in t["mode"]:
            yield pytest.param(key, m["name"], id=f"{key}/{m['name']}")


@pytest.mark.parametrize("key,mode", list(cases()))
def test_every_option_changes_the_mode_or_is_refused(key, mode, recorded, capsys, tmp_path, monkeypatch):
    calls, facts = recorded
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("sys.stdin.isatty", lambda: True)  # as on a terminal (rebase asks there)
    work = tmp_path / "w"
    work.mkdir()
    cmd, t = COMMANDS[key], TABLE[key]
    m = next(x for x in t["mode"] if x["name"] == mode)
    opts = options(cmd)
    fact, args = FACTS.get((key, mode), ({}, None))
    if key == "show" and not m.get("chosen"):
        fact = {"read_document": lambda p: Doc(api.EVIDENCE)}
    facts.update(fact)
    args = args or ARGS.get(key) or (["t"] if key in TARGETED else [])
    required = [f for f, p in opts.items() if p.required]
    base = [*key.split(), *args]
    for f in m.get("when", []) + required:
        base += value(opts[f], work)
    takes = set(t.get("common", [])) | set(m.get("takes", [])) | set(m.get("when", []))
    selectors = {f for x in t["mode"] for f in x.get("when", [])}  # an option that picks another mode
    ref = run(base, calls, capsys, work)
    assert ref[0] not in (2, 70), (base, ref[2][-2000:])  # the mode itself runs
    walked = 0
    for flag, p in opts.items():
        if flag in m.get("when", []):
            continue
        if flag in required:  # the verb cannot run without it: another value must change what it does
            argv = [*base[:-2], *value(p, work, alt=True)] if base[-2] == flag else None
            if argv is None:
                continue
            got = run(argv, calls, capsys, work)
        else:
            got = run([*base, *value(p, work)], calls, capsys, work)
        walked += 1
        if flag in takes:
            assert got != ref, f"{mode}: {flag} changes nothing it does (calls, output, exit code, files)"
        elif flag in selectors:  # another mode, or refused (one line)
            assert got != ref and (got[0] != 2 or len(got[2].strip().splitlines()) == 1), (mode, flag, got[2])
        else:
            assert got[0] == 2, f"{mode}: {flag} is accepted though the table says the mode does not use it"
            lines = got[2].strip().splitlines()
            assert len(lines) == 1 and flag in lines[0] and mode in lines[0], (mode, flag, got[2])
    assert walked or len(opts) == len(m.get("when", [])) + len(required), (mode, "nothing walked")


def test_the_cases_named_in_the_issue_are_refused(cli):
    r = cli("verify", "--retire", "HEAD", "--in-cluster", "--evidence", "f", "--scenario", "no-such", "--lib", "/nonexistent")
    assert r.code == 2 and len(r.err.strip().splitlines()) == 1
    assert "verify --retire does not use" in r.err and all(f in r.err for f in ("--in-cluster", "--evidence", "--lib"))
    r = cli("build", "hami-core", "--lib", "/nonexistent.so", "--evidence", "/nonexistent.json", "--from", "no/such:image")
    assert r.code == 2 and "build does not use --from, --lib, --evidence (used by build hami-device-plugin)" in r.err


def test_old_spellings_say_where_the_job_went(cli):
    r = cli("doctor", "--hami-version", "v2.5.1")
    assert r.code == 0 and "HAMi release   v2.5.1" in r.out
    assert "`lucepatch doctor --hami-version` is `lucepatch node --hami-version` now" in r.err
    r = cli("inspect", "--lib", "/nonexistent.so")
    assert r.code == 2 and "`lucepatch inspect --lib` is `lucepatch node --lib` now" in r.err
    r = cli("-q", "doctor", "--lib", "/nonexistent.so")  # quiet: the error alone
    assert r.code == 2 and r.err.count("\n") == 1 and "not found" in r.err
    # one --quiet: the verb's old one is the global -q
    assert "--quiet" not in options(COMMANDS["verify"])
    r = cli("verify", "--quiet", "--retire", "HEAD", "--wide")
    assert r.code == 2 and r.err.startswith("lucepatch: error: verify --retire does not use --wide")


def test_fetch_is_declared_once():
    helps = {COMMANDS[v].params[[_common.flag_of(p) for p in COMMANDS[v].params].index("--fetch")].help
             for v in ("apply", "check", "status", "rebase")}
    assert len(helps) == 1
    src = (Path(_common.__file__).parent).glob("*.py")
    assert sum(f.read_text().count('"--fetch"') for f in src) == 1


def test_every_command_refuses_by_the_table():
    for key, cmd in COMMANDS.items():
        src = Path(importlib.import_module(cmd.callback.__module__).__file__).read_text()
        assert 'refuse_unused(' in src and f'"{key}"' in src, key
