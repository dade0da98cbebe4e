"""Every command in README.md and docs/*.md runs as written (issue 24; the rules are
docs/design.md "Commands in the documentation").

The fenced blocks are read by .ci/readme_commands.py. A ```sh block is commands: it runs here, verbatim,
with `bash -e -o pipefail`, in the order the documents give, as one reader's session — a fresh clone of
this tree at ~/lucepatch (HEAD plus the working tree's changes), `~` a scratch home, no LUCEPATCH_*
variables, and a venv per install line: a document runs where its own `pip install ...` line puts it
(README.md: `pip install .`; a document without one is read after the README, in the README's venv),
and that venv sees exactly the distributions that install brings (tests/venvs.make_exact: the running
environment's copies, nothing of `[test]` or another extra), so a command that needs more fails here. The one thing replaced is the
network: git's `url.<local>.insteadOf` makes `git clone https://github.com/Project-HAMi/HAMi-core` clone
the checkout LUCEPATCH_SRC_HAMI_CORE names (CI: the clone of ../shared/upstream/hami-core.bundle), so
the clone line runs as written. A ```python block (docs/api.md's example) runs the same way.

A block that needs what this machine lacks says so above its fence (`<!-- commands: needs=gpu -->`) and
skips with the prefix of the gap (no-gpu:, no-cluster:, no-upstream:, no-docker:, no-tool:); where the
machine has it, it runs. A block a CI stage runs verbatim says which (`run-by=.ci/newcomer`). Usage lines
are ```text blocks marked `synopsis`; they are not run, but every verb and option they name must exist,
as must those of every command above. Any other block that holds a `lucepatch` command fails here.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import click
import pytest

import needs
import venvs
from conftest import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / ".ci"))
import readme_commands as rc  # noqa: E402

sys.path.pop(0)

DOCS = [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").glob("*.md"))]
BLOCKS = [b for d in DOCS for b in rc.blocks(d)]
RUN = [b for b in BLOCKS if b.info in ("sh", "python") and not b.run_by]  # run_by: the stage runs it
HAMI_URL = "https://github.com/Project-HAMi/HAMi-core"
_LUCEPATCH_LINE = re.compile(r"^\s*(\$ )?lucepatch\s")
# what a runnable block must not hold: a placeholder the reader has to fill in
_PLACEHOLDER = re.compile(r"<[A-Za-z][^>]*>|\[--|\s\.\.\.(\s|$)|\b[A-Z]+\.(json|so)\b")


def _ids(bs):
    return [b.where for b in bs]


# ---- what every block is -----------------------------------------------------------------------

def test_every_command_block_is_run_or_a_checked_synopsis():
    bad = []
    for b in BLOCKS:
        has_cli = any(_LUCEPATCH_LINE.match(line) for line in b.text.splitlines())
        if b.info in ("sh", "python"):
            if b.synopsis:
                bad.append(f"{b.where}: a ```{b.info} block cannot be a synopsis (make it ```text)")
            for v in b.vars:
                if f'"${v}"' not in b.text and f"${{{v}}}" not in b.text:
                    bad.append(f"{b.where}: vars={v} but the block never reads \"${v}\"")
            if b.vars and not set(b.needs) & {"gpu", "cluster", "lucebox"}:
                bad.append(f"{b.where}: a block this machine can run takes no inputs (vars=)")
            for line in b.commands():
                if b.info == "sh" and _PLACEHOLDER.search(line.split("  #", 1)[0]):
                    bad.append(f"{b.where}: a placeholder in a command: {line[:100]}")
        elif has_cli and not (b.info == "text" and b.synopsis):
            bad.append(f"{b.where}: a lucepatch command in a ```{b.info or '(no info)'} block: make it ```sh (run) "
                       "or a ```text block under <!-- commands: synopsis --> (usage, checked against --help)")
        if b.run_by and b.info != "sh":
            bad.append(f"{b.where}: run-by= is for ```sh blocks")
    assert not bad, "\n".join(bad)


def _cli_words(line: str) -> list[str] | None:
    """The words of a `lucepatch ...` command in a line (after `$ `, env assignments or `&&`)."""
    code = line.split("  #", 1)[0]
    code = re.sub(r"[\[\]|]", " ", code)  # a synopsis' [optional] and a|b parts are options all the same
    try:
        words = shlex.split(code, comments=True)
    except ValueError:
        words = code.split()
    if "lucepatch" not in words:
        return None
    words = words[words.index("lucepatch") + 1:]
    for stop in ("&&", "||", "|", ";", ">", "2>"):
        if stop in words:
            words = words[:words.index(stop)]
    return words


def _check_cli(words: list[str]) -> list[str]:
    from lucepatch.main import cli

    problems = []
    ctx = click.Context(cli)
    cmd: click.Command = cli
    params = {o for p in cli.params for o in p.opts + p.secondary_opts}
    rest = list(words)
    while rest:
        w = rest.pop(0)
        if w.startswith("--"):
            name = w.split("=", 1)[0]
            if name not in params | {"--help"}:
                problems.append(f"{' '.join(words)[:90]}: {cmd.name} has no option {name}")
            opt = next((p for p in cmd.params if name in p.opts), None)
            if opt is not None and not getattr(opt, "is_flag", False) and "=" not in w and rest and opt.nargs == 1:
                rest.pop(0)  # its value
            continue
        if isinstance(cmd, click.Group):
            sub = cmd.get_command(ctx, w)
            if sub is None:
                problems.append(f"{' '.join(words)[:90]}: no verb {w!r}")
                break
            cmd = sub
            params = {o for p in cmd.params for o in p.opts + p.secondary_opts}
    return problems


def test_every_lucepatch_command_in_the_docs_names_real_verbs_and_options():
    problems = []
    for b in BLOCKS:
        if b.info not in ("sh",) and not b.synopsis:
            continue
        for line in b.commands():
            for part in re.split(r"\$\(|\)", line):  # a command substitution is a command too
                words = _cli_words(part)
                if words:
                    problems += [f"{b.where}: {p}" for p in _check_cli(words)]
    assert not problems, "\n".join(problems)


def test_the_checks_can_fail(tmp_path):
    """The two checks above on a document that breaks them."""
    assert _check_cli(["verify", "--reproducer", "x", "--nosuch"]) == ["verify --reproducer x --nosuch: verify has no option --nosuch"]
    assert _check_cli(["render", "k8s", "lucebox", "--out", "k8s/"]) == []
    assert "no verb 'frobnicate'" in _check_cli(["frobnicate"])[0]
    assert _check_cli(_cli_words("LUCEPATCH_X=1 lucepatch --workspace ws ci --all --junit r.xml  # gate")) == []
    doc = tmp_path / "doc.md"
    doc.write_text("# T\n\n```\nlucepatch list\n```\n\n```sh\nlucepatch verify --lib <built libvgpu.so>\n```\n"
                   "\n<!-- commands: needs=gpu vars=LIB -->\n```sh\nlucepatch list\n```\n")
    bs = rc.blocks(doc)
    assert [(b.info, b.needs, b.vars) for b in bs] == [("", [], []), ("sh", [], []), ("sh", ["gpu"], ["LIB"])]
    assert _PLACEHOLDER.search(bs[1].commands()[0]) and not _PLACEHOLDER.search("lucepatch show E.JSON2 --wide")


def test_run_by_blocks_are_what_their_stage_runs():
    """A block a CI stage runs verbatim: the stage reads it from the document (no copy to drift)."""
    claimed = [b for b in BLOCKS if b.run_by]
    assert claimed, "the README's Install and test block is run by .ci/newcomer"
    for b in claimed:
        stage = REPO_ROOT / b.run_by
        assert stage.is_file(), f"{b.where}: run-by={b.run_by} names no file"
        text = stage.read_text()
        assert "readme_commands.py" in text, f"{b.run_by} does not read the README's commands"
        if b.heading == "Install and test":
            assert rc.commands(REPO_ROOT / "README.md") == [c.split("  #", 1)[0].strip() for c in b.commands()]
    main = rc.block_under(REPO_ROOT / "README.md", "The main job: prove the HAMi-core fix")
    assert "--block" in (REPO_ROOT / ".ci" / "main-job").read_text() and main.commands()[0].startswith("pip install .")


# ---- the session ----------------------------------------------------------------------------------

def _fresh_clone(dest: Path) -> None:
    """This tree as a newcomer gets it: HEAD, then the working tree's changes and untracked files."""
    subprocess.run(["git", "clone", "-q", str(REPO_ROOT), str(dest)], check=True)
    diff = subprocess.run(["git", "-C", str(REPO_ROOT), "diff", "--binary", "HEAD"], capture_output=True, check=True).stdout
    if diff:
        subprocess.run(["git", "-C", str(dest), "apply", "--binary", "-"], input=diff, check=True)
    untracked = subprocess.run(["git", "-C", str(REPO_ROOT), "ls-files", "-z", "--others", "--exclude-standard"],
                               capture_output=True, check=True).stdout.split(b"\0")
    for rel in (u.decode() for u in untracked if u):
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO_ROOT / rel, dest / rel)


_INSTALL = re.compile(r"^pip install (?:-e )?['\"]?\.(?:\[([\w,-]+)\])?['\"]?(?:\s|$)")


def install_line(doc: Path) -> str:
    """The `pip install` line a document's reader runs: its own (the first in its blocks), else the README's."""
    for b in rc.blocks(doc):
        for line in b.commands():
            if _INSTALL.match(line.strip()):
                return line.split("  #", 1)[0].strip()
    return install_line(REPO_ROOT / "README.md") if doc.name != "README.md" or doc.parent != REPO_ROOT else "pip install ."


def install_extras(line: str) -> tuple[str, ...]:
    m = _INSTALL.match(line)
    return tuple(e for e in (m.group(1) or "").split(",") if e) if m else ()


class Session:
    def __init__(self, root: Path, upstream: Path):
        self.home = root / "home"
        self.home.mkdir()
        self.checkout = self.home / "lucepatch"
        _fresh_clone(self.checkout)
        cfg = self.home / ".gitconfig"
        for key, value in (("user.name", "Doc Reader"), ("user.email", "reader@example.invalid"),
                           (f"url.{upstream}.insteadOf", HAMI_URL)):
            subprocess.run(["git", "config", "--file", str(cfg), key, value], check=True)
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("LUCEPATCH_", "PYTHON", "XDG_", "GIT_", "VIRTUAL_ENV", "PIP_"))}
        real_home = os.environ.get("HOME", "")
        env.update(HOME=str(self.home), PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_CACHE_DIR=os.environ.get("PIP_CACHE_DIR") or
                   str(Path(real_home, ".cache", "pip")), PYTHONDONTWRITEBYTECODE="1")
        for k in ("LUCEPATCH_BASE_IMAGE", "DOCKER_HOST"):  # where the machine's services are, not the reader's choice
            if os.environ.get(k):
                env[k] = os.environ[k]
        self.env = env
        self.venvs: dict[str, Path] = {}  # install line -> its venv, made once
        self.results: dict[str, subprocess.CompletedProcess] = {}

    def venv(self, line: str) -> Path:
        """The venv of an install line: exactly the distributions it brings (its lucepatch comes when the
        document's own `pip install` line runs in it)."""
        if line not in self.venvs:
            where = self.home / f"venv{len(self.venvs) or ''}"
            venvs.make_exact(where, self.checkout / "pyproject.toml", install_extras(line), with_pip=True)
            self.venvs[line] = where
        return self.venvs[line]

    @property
    def python(self) -> Path:  # the README's reader's
        return self.venv(install_line(REPO_ROOT / "README.md")) / "bin" / "python"

    def run(self, b: rc.Block, extra_env: dict) -> subprocess.CompletedProcess:
        venv = self.venv(install_line(b.path))
        env = {**self.env, "PATH": f"{venv / 'bin'}:{os.environ['PATH']}", "VIRTUAL_ENV": str(venv), **extra_env}
        cmd = (["bash", "-e", "-o", "pipefail", "-c", b.text] if b.info == "sh" else
               [str(venv / "bin" / "python"), "-c", b.text])
        r = subprocess.run(cmd, cwd=self.checkout, env=env, capture_output=True, text=True, timeout=1500)
        self.results[b.where] = r
        return r


@pytest.fixture(scope="module")
def session(tmp_path_factory):
    src = os.environ.get("LUCEPATCH_SRC_HAMI_CORE")
    if not src or not Path(src, ".git").exists():
        pytest.skip("no-upstream: set LUCEPATCH_SRC_HAMI_CORE to a HAMi-core checkout (the docs clone it as "
                    f"{HAMI_URL}; CI: the clone of ../shared/upstream/hami-core.bundle)")
    base = tomllib.loads((REPO_ROOT / "patches" / "hami-core" / "target.toml").read_text())["base"]  # the README's pin
    if subprocess.run(["git", "-C", src, "cat-file", "-e", f"{base}^{{commit}}"]).returncode:
        pytest.skip(f"no-upstream: the HAMi-core checkout in LUCEPATCH_SRC_HAMI_CORE lacks the pinned base {base[:7]} "
                    "(git fetch ../shared/upstream/hami-core-main-2026-07-23.bundle main-2026-07-23:main-2026-07-23)")
    return Session(tmp_path_factory.mktemp("docs"), Path(src).resolve())


def test_each_document_runs_where_its_own_install_puts_it(session):
    """The README's reader has `pip install .` and nothing else: what `[test]` brings (pytest, the
    kubernetes client) is not there, what the base install brings (PyYAML, cpplint, nvml.h) is."""
    assert install_line(REPO_ROOT / "README.md") == "pip install ."
    assert install_extras("pip install -e '.[test,k8s]'") == ("test", "k8s")
    py = str(session.python)
    assert subprocess.run([py, "-c", "import yaml, cpplint, jinja2, git, nvidia"], capture_output=True).returncode == 0
    for extra in ("pytest", "hypothesis", "kubernetes", "docker"):
        assert subprocess.run([py, "-c", f"import {extra}"], capture_output=True).returncode != 0, extra


def _gap(b: rc.Block) -> str | None:
    """Why this machine cannot run the block (a skip reason with its prefix), or None."""
    if "gpu" in b.needs:
        from lucepatch.verify.driver import real_gpu_available

        ok, note = real_gpu_available()
        if not ok:
            return f"no-gpu: {b.where} needs a GPU ({note})"
    if "cluster" in b.needs and not os.environ.get("LUCEPATCH_KUBECONFIG"):
        return f"no-cluster: {b.where} needs a cluster: set LUCEPATCH_KUBECONFIG"
    if "lucebox" in b.needs and not os.environ.get("LUCEPATCH_SRC_LUCEBOX"):
        return f"no-upstream: {b.where} needs LUCEPATCH_SRC_LUCEBOX (lucebox-hub 8305b6c with submodules)"
    missing = [v for v in b.vars if not os.environ.get(v)]
    if missing:
        prefix = "no-gpu:" if "gpu" in b.needs else "no-cluster:" if "cluster" in b.needs else "no-upstream:"
        return f"{prefix} {b.where} reads {', '.join(missing)} (its inputs from that machine): set them"
    if "torch" in b.needs and importlib.util.find_spec("torch") is None:
        return f"no-tool: {b.where} needs PyTorch (pip install torch)"
    if "helm" in b.needs and not shutil.which("helm"):
        return f"no-tool: {b.where} needs helm (bash .ci/k8s_tools.sh /usr/local/bin)"
    return None


def _after(b: rc.Block, s: Session, r: subprocess.CompletedProcess) -> None:
    """What a block must have done besides exiting 0, where its section says so."""
    here = s.checkout
    if b.heading.startswith("The main job"):
        ev = json.loads((here / "async-sched.json").read_text())
        assert ev["verdict"] == "proven", ev["verdict"]
        assert (here / "async-sched.html").stat().st_size > 10_000
        assert (s.python.parent / "lucepatch").is_file(), "pip install . put no lucepatch in the venv"
    elif b.heading.startswith("Rebuild the bytes yourself"):
        ev = json.loads((here / "async-sched.json").read_text())
        rebuilt = re.search(r"^([0-9a-f]{64})\s+build/libvgpu.so$", r.stdout, re.M)
        assert rebuilt and rebuilt.group(1) == ev["variants"]["patched"]["artifact"]["sha256"], r.stdout[-2000:]
    elif b.heading == "Other verbs" and "verify --retire" in b.text:
        # at the pinned base upstream cannot hold any patch: no code signal, so nothing is superseded
        assert "coverage map at" in r.stdout and "still-needed" in r.stdout, r.stdout[-3000:]
        assert not re.search(r"│\s*superseded\s*│", r.stdout), r.stdout[-3000:]
    elif b.heading == "Other verbs" and "verify --coverage-map" in b.text:
        # the map alone since 776061c (the retirement is a synopsis, run by tests/test_retire_shipped.py)
        assert "coverage map at" in r.stdout, r.stdout[-3000:]
    elif b.heading == "Other verbs":
        pr = here / "hami-core-pr"
        assert any(pr.glob("*.patch")) and (pr / "branch.bundle").is_file()
        assert "fixed by 8c32de6" in r.stdout, r.stdout[-3000:]
    elif b.path.name == "api.md":
        assert any((here / "pr").glob("*.patch")) and (here / "pr" / "branch.bundle").is_file()
        assert "proven on fake" in r.stdout or "proven on real" in r.stdout, r.stdout[-2000:]


@pytest.mark.needs("gcc", "cmake", "make", "/usr/local/cuda/include/cuda.h")
@pytest.mark.parametrize("b", RUN, ids=_ids(RUN))
def test_block_runs_as_written(session, b):
    gap = _gap(b)
    if gap:
        pytest.skip(gap)
    if "docker" in b.needs:
        needs.docker_client()  # no-docker: skip here, a failure under CI=true
    extra = {v: os.environ[v] for v in b.vars}
    if "lucebox" in b.needs:
        (session.home / "src").mkdir(exist_ok=True)
        link = session.home / "src" / "lucebox-hub"
        if not link.exists():
            link.symlink_to(os.environ["LUCEPATCH_SRC_LUCEBOX"])
    if "cluster" in b.needs:
        extra["LUCEPATCH_KUBECONFIG"] = os.environ["LUCEPATCH_KUBECONFIG"]
    r = session.run(b, extra)
    assert r.returncode == 0, (f"{b.where} (under '{b.heading}') exited {r.returncode}\n--- stdout\n{r.stdout[-3000:]}"
                               f"\n--- stderr\n{r.stderr[-3000:]}")
    _after(b, session, r)
