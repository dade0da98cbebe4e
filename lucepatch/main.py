"""Argument wiring only: every verb lives in lucepatch/commands/<verb>.py and returns an exit code.

A command module exposes ``command``, a click.Command whose callback returns an int exit code.
Modules are imported lazily so `lucepatch list` does not pay for docker/kubernetes imports.
"""

from __future__ import annotations

import difflib
import importlib
import os
import sys
import traceback

import click

from lucepatch import __version__
from lucepatch import report, signals
from lucepatch.engine import checkout
from lucepatch.errors import EXIT_USAGE, LucepatchError, from_exception
from lucepatch.workspace import cache_location

# verb name -> module under lucepatch.commands
VERBS = {
    "list": "list_",
    "apply": "apply",
    "check": "check",
    "status": "status",
    "export": "export",
    "build": "build",
    "verify": "verify",
    "bisect": "bisect",
    "pr": "pr",
    "mark": "mark",
    "lint": "lint",
    "doctor": "doctor",
    "node": "node",
    "ci": "ci",
    "render": "render",
    "deploy": "deploy",
    "cluster": "cluster",
    "inspect": "inspect",
    "show": "show",
    "probe": "probe",
    "rebase": "rebase",
    "matrix": "matrix",
    "import": "import_",
    "bench": "bench",
}


# `lucepatch --help` lists these without importing any verb module (each pulls in its engine,
# docker or kubernetes code); tests/test_packaging.py keeps them equal to the commands' own help.
SUMMARY = {
    "list": "List targets, their series and patches, and the reproducers.",
    "apply": "Apply TARGET's series to an upstream checkout, on branch lucepatch/<target>/<version>.",
    "check": "Report, patch by patch, whether TARGET's series applies; the checkout is not touched.",
    "status": "Per patch at the checkout's HEAD: applied / not-applied / already-upstream (signal) / conflicts.",
    "export": "Write TARGET's patch files from the commits of its lucepatch branch (base..branch).",
    "build": "Build TARGET's artifacts (e.g. libvgpu.so) or, with --image, its container image.",
    "verify": "Run reproducers against the baseline and the patched build and decide whether the fix is proven.",
    "bisect": "Find the first upstream commit in A..B (first parent) where R's scenario flips (fixed or broke), "
              "judged on unpatched upstream (+ Build-Only patches) built in a private clone.",
    "pr": "Write DIR/*.patch (with base-commit), DIR/pr-body.md and DIR/pr.json for TARGET's series.",
    "mark": "Set PATCH's Upstream-Status (e.g. after opening its PR).",
    "lint": "Check series files, patch headers, trailers, whitespace and paths.",
    "doctor": "Show which tools lucepatch can use here (git, cmake, nvcc, nvml.h, docker, GPU/driver, valgrind, "
              "quilt); with --checkout, which line of a series fits an upstream checkout; what a node runs is "
              "`lucepatch node`.",
    "node": "What a node runs (--lib FILE, --image IMAGE, --pod NAME, --pod-root DIR, --node-report FILE) and what "
            "may replace it, or with --hami-version alone what the line serving that release would drop.",
    "ci": "The gate: lint, check on the pinned base, canary on --upstream-head, build, verify, probes.",
    "render": "Render files lucepatch produces for other tools (Kubernetes manifests, the real-clients table).",
    "deploy": "Roll a proven fix out to a cluster (needs LUCEPATCH_KUBECONFIG unless --dry-run).",
    "cluster": "Inspect what lucepatch put on a cluster (needs LUCEPATCH_KUBECONFIG).",
    "show": "Show what EVIDENCE (from lucepatch verify --evidence) proves: verdicts, what was built from which "
            "commit, the driver and GPU, and every run of both variants.",
    "inspect": "Print what IMAGE was built from (upstream revision, series version/hash, patch ids, evidence).",
    "probe": "Compile/link probes proving TARGET's build fixes (minutes, not a full build).",
    "rebase": "Carry TARGET's series from its base to --onto REF, stopping for a human on conflicts.",
    "matrix": "Which patches apply (exact / 3-way / already upstream / conflict) at every commit of A..B.",
    "import": "Import patches into TARGET from a quilt folder, a format-patch/mbox folder or file, or a branch.",
    "bench": "What the vGPU layer costs a workload on this node, and whether its limits hold.",
}


START_HERE = ("Start here: lucepatch verify --reproducer async-sched --source ~/src/HAMi-core --evidence async-sched.json "
              "(the README's main job), then lucepatch show async-sched.json.")


class LazyGroup(click.Group):
    def list_commands(self, ctx):
        return sorted(VERBS)

    def format_commands(self, ctx, formatter):
        """Each verb with its whole description (wrapped, never cut), from SUMMARY: no verb module is
        imported to print the list."""
        names = self.list_commands(ctx)
        if not names:
            return
        with formatter.section("Commands"):
            formatter.write_dl([(n, SUMMARY.get(n, "")) for n in names])

    def format_epilog(self, ctx, formatter):
        formatter.write_paragraph()
        formatter.write_text(START_HERE)

    def resolve_command(self, ctx, args):
        """A verb that is none: one line with the verbs it is closest to (a typo: `verfy`)."""
        name = args[0] if args else ""
        if name and not name.startswith("-") and name not in VERBS:
            close = difflib.get_close_matches(name, list(VERBS), n=3, cutoff=0.6)
            hint = f"; did you mean {' or '.join(close)}?" if close else "; lucepatch --help lists the verbs"
            raise click.UsageError(f"no verb {name!r}{hint}", ctx)
        return super().resolve_command(ctx, args)

    def get_command(self, ctx, name):
        module = self._module(name)
        return getattr(module, "command", None) if module else None

    @staticmethod
    def _module(name):
        modname = VERBS.get(name)
        if modname is None:
            return None
        try:
            return importlib.import_module(f"lucepatch.commands.{modname}")
        except ModuleNotFoundError as exc:
            # A verb whose module is not written yet is simply absent; a missing
            # dependency *inside* a verb module is a real error.
            if exc.name == f"lucepatch.commands.{modname}":
                return None
            raise


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="lucepatch")
@click.option("--workspace", type=click.Path(file_okay=False), default=None,
              help="Folder holding lucepatch.toml, patches/ and reproducers/ "
                   "(default: $LUCEPATCH_WORKSPACE, nearest ancestor with lucepatch.toml, packaged copy).")
@click.option("--cache-dir", type=click.Path(file_okay=False), default=None,
              help="Cache for worktrees, builds and runs (default: $LUCEPATCH_CACHE, $XDG_CACHE_HOME/lucepatch).")
@click.option("-q", "--quiet", is_flag=True,
              help="No progress or notes on stderr: the result, errors and the line a verb ends with.")
@click.pass_context
def cli(ctx, workspace, cache_dir, quiet):
    """lucepatch: carry, prove and upstream fixes for HAMi-core, Lucebox and friends."""
    report.set_quiet(quiet)  # set on every invocation: an in-process caller runs many
    ctx.ensure_object(dict)
    ctx.obj["workspace"] = workspace
    ctx.obj["cache_dir"] = cache_dir
    _CACHE[0] = cache_location(cache_dir)  # the error path names a full disk under it as the cache's
    _recover_interrupted_switches(cache_dir)


def _recover_interrupted_switches(cache_dir) -> None:
    """A checkout switch killed half-way (SIGKILL, power loss) left a journal in the cache: the
    next lucepatch command, whatever it is, puts that checkout back (engine/checkout.py)."""
    jdir = cache_location(cache_dir) / "switch"
    if jdir.is_dir() and any(jdir.glob("*.json*")):
        checkout.recover_all(jdir)


_CACHE: list = [None]


def _bug() -> int:
    traceback.print_exc()
    click.echo("lucepatch: internal error (a bug); the traceback above says where", err=True)
    return 70


def _interrupted(what: str, code: int) -> int:
    note = signals.interrupt_note()
    tail = f"; {note}" if note else ""
    click.echo(f"lucepatch: {what}{tail}", err=True)
    return code


def expand_home(args: list[str]) -> list[str]:
    """A leading `~` expanded where the shell leaves it: the value of `--source=~/src/HAMi-core`
    (bash expands `~` after `=` only in assignments), a quoted "~/x". Only `~` and `~/...` (never
    `~user`): no one names a folder `~`, and paths enter the verbs from here."""
    out = []
    for a in args:
        if a == "~" or a.startswith("~/"):
            a = os.path.expanduser(a)
        elif a.startswith("--") and "=" in a:
            opt, val = a.split("=", 1)
            if val == "~" or val.startswith("~/"):
                a = f"{opt}={os.path.expanduser(val)}"
        out.append(a)
    return out


# Old spellings, rewritten before parsing (issue 35: a second job split off into its own verb, a
# duplicate merged): verb -> (the verb that does it now, the options that mark the old spelling).
MOVED = {
    "doctor": ("node", {"--lib", "--image", "--pod", "--pod-root", "--node-report", "--hami-version", "--candidate",
                        "--namespace", "--container", "--lib-path", "--save", "--save-report", "--context"}),
    "inspect": ("node", {"--lib"}),
}
GLOBAL_WITH_VALUE = ("--workspace", "--cache-dir")


def old_spellings(args: list[str]) -> tuple[list[str], str | None]:
    """(the arguments in today's spelling, the note that says what changed, or None). `verify --quiet`
    is the global -q (`lucepatch -q verify`): moved silently, quiet is what was asked for."""
    i = 0
    while i < len(args) and args[i].startswith("-"):
        i += 2 if args[i] in GLOBAL_WITH_VALUE else 1
    if i >= len(args):
        return args, None
    verb, rest = args[i], args[i + 1:]
    if verb == "verify" and "--quiet" in rest:
        return ["-q", *args[:i + 1], *[a for a in rest if a != "--quiet"]], None
    new, marks = MOVED.get(verb, (None, ()))
    used = [a.split("=", 1)[0] for a in rest if a.split("=", 1)[0] in marks]
    if not used:
        return args, None
    return ([*args[:i], new, *rest],
            f"`lucepatch {verb} {used[0]}` is `lucepatch {new} {used[0]}` now; the old spelling will go")


def main(argv=None) -> int:
    signals.install()
    _CACHE[0] = None
    argv, moved = old_spellings(expand_home(list(sys.argv[1:] if argv is None else argv)))
    if moved and not {"-q", "--quiet"} & set(argv[:argv.index("node") if "node" in argv else 0]):
        click.echo(f"lucepatch: note: {moved}", err=True)
    try:
        rc = cli.main(args=argv, prog_name="lucepatch", standalone_mode=False)
    except LucepatchError as exc:
        click.echo(f"lucepatch: error: {exc}", err=True)
        return exc.exit_code
    except (click.exceptions.Abort, KeyboardInterrupt):
        signals.ignore_further()
        return _interrupted("interrupted", 130)
    except click.ClickException as exc:
        # click's own usage errors: one line, exit 2.
        click.echo(f"lucepatch: error: {exc.format_message()}", err=True)
        return EXIT_USAGE
    except signals.Terminated:
        signals.ignore_further()
        return _interrupted("terminated", 143)
    except Exception as exc:  # environment (OSError, a hung tool) -> one line; anything else is a bug
        err = from_exception(exc, cache=_CACHE[0])
        if err is None:
            return _bug()
        click.echo(f"lucepatch: error: {err}", err=True)
        return err.exit_code
    finally:
        note = signals.completion_note()
        late = signals.finish()
    if late:
        # the work had completed when the signal came: say so and keep the verb's exit code
        click.echo(f"lucepatch: note: {late} arrived after the work completed ({note}); nothing was undone",
                   err=True)
    if isinstance(rc, int):
        return rc
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
