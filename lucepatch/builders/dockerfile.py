"""Upstream's own Dockerfile, read as a build recipe (Luce-Org/lucebox ships one since 2026-06).

A target whose upstream ships a Dockerfile builds the way upstream builds: the image is upstream's
Dockerfile (with the series applied to the context, and a series patch where the file itself must
change), configured by build arguments; the native build on a GPU machine runs the same cmake
invocation that file's RUN holds. This module reads what that needs, and nothing else:

  ARG NAME[=default]   per stage (an ARG before the first FROM is global: usable in FROM lines)
  FROM image [AS name] the stages and the images they start from (after ARG substitution)
  RUN ... cmake -S ... the configure command, and the `cmake --build` that follows it

Docker ignores a build argument no ARG declares (`docker build --build-arg DFLASH_CUDA_ARCH=120`
builds the default arches without a word): `check_build_args` refuses such a name in one line,
naming the ARGs the file declares. Variables are substituted as the shell would see them in a RUN
(`$NAME`, `${NAME}`), from the given build args, else the ARG's default.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from lucepatch.errors import UsageError

_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}|\$([A-Za-z_][A-Za-z0-9_]*)")


@dataclass
class Stage:
    name: str
    image: str  # as written (before substitution)
    args: dict[str, str | None] = field(default_factory=dict)  # ARGs declared in the stage
    runs: list[str] = field(default_factory=list)  # RUN instructions, continuation lines joined


@dataclass
class Recipe:
    path: Path
    global_args: dict[str, str | None]
    stages: list[Stage]

    @property
    def arg_names(self) -> list[str]:
        names = list(self.global_args)
        for s in self.stages:
            names += [a for a in s.args if a not in names]
        return names

    def stage_of_cmake(self) -> Stage:
        for s in self.stages:
            if any(_cmake_configure(r) for r in s.runs):
                return s
        raise UsageError(f"{self.path}: no RUN configures with `cmake -S`; it is not a CMake build recipe lucepatch reads")

    def values(self, build_args: dict[str, str], stage: Stage) -> dict[str, str]:
        """The variables a RUN of `stage` sees: its ARGs (global ones only where re-declared, as
        Docker does), a build arg overriding the default."""
        out = {}
        for name, default in stage.args.items():
            if name in build_args:
                out[name] = build_args[name]
            elif default is not None:
                out[name] = default
            elif name in self.global_args and self.global_args[name] is not None:
                out[name] = self.global_args[name]
        return out

    def images(self, build_args: dict[str, str]) -> list[str]:
        """Each stage's FROM image with the global ARGs substituted (what Docker pulls or finds)."""
        glob = {n: build_args.get(n, d) for n, d in self.global_args.items() if build_args.get(n, d) is not None}
        return [substitute(s.image, glob) for s in self.stages]

    def cmake(self, build_args: dict[str, str]) -> tuple[list[str], list[str]]:
        """(configure argv, build argv) of the cmake RUN, variables substituted."""
        stage = self.stage_of_cmake()
        env = self.values(build_args, stage)
        for run in stage.runs:
            parts = [p.strip() for p in re.split(r"&&", run)]
            conf = next((p for p in parts if _cmake_configure(p)), None)
            if conf is None:
                continue
            build = next((p for p in parts[parts.index(conf) + 1:] if re.match(r"^cmake\s+--build\b", p)), None)
            if build is None:
                raise UsageError(f"{self.path}: the RUN that configures with cmake builds nothing (`cmake --build`)")
            return shlex.split(substitute(conf, env)), shlex.split(substitute(build, env))
        raise UsageError(f"{self.path}: no RUN configures with `cmake -S`")


def _cmake_configure(text: str) -> bool:
    return bool(re.search(r"(^|&&\s*)cmake\s+-S\s", text))


def substitute(text: str, values: dict[str, str]) -> str:
    """`$NAME` / `${NAME}` replaced where `values` has NAME (others are left for a shell)."""
    return _VAR.sub(lambda m: values.get(m.group(1) or m.group(2), m.group(0)), text)


def _logical_lines(text: str) -> list[str]:
    """Instructions with their continuation lines joined; comments and blank lines dropped."""
    out, cur = [], ""
    for raw in text.splitlines():
        line = raw.rstrip()
        if not cur and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if cur and line.lstrip().startswith("#"):  # a comment inside a continued instruction
            continue
        if line.endswith("\\"):
            cur += line[:-1] + " "
            continue
        out.append((cur + line).strip())
        cur = ""
    if cur.strip():
        out.append(cur.strip())
    return out


def _arg(rest: str) -> tuple[str, str | None]:
    name, eq, default = rest.strip().partition("=")
    if not eq:
        return name.strip(), None
    default = default.strip()
    if len(default) >= 2 and default[0] == default[-1] and default[0] in "\"'":
        default = default[1:-1]
    return name.strip(), default


def read_recipe(path: Path) -> Recipe:
    """The ARGs, stages and RUNs of a Dockerfile (see the module's docstring)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"cannot read the upstream Dockerfile {path}: {exc}")
    glob: dict[str, str | None] = {}
    stages: list[Stage] = []
    for line in _logical_lines(text):
        word, _, rest = line.partition(" ")
        word = word.upper()
        if word == "ARG":
            name, default = _arg(rest)
            (stages[-1].args if stages else glob)[name] = default
        elif word == "FROM":
            toks = rest.split()
            toks = [t for t in toks if not t.startswith("--")]
            name = toks[2] if len(toks) >= 3 and toks[1].upper() == "AS" else str(len(stages))
            stages.append(Stage(name, toks[0]))
        elif word == "RUN" and stages:
            stages[-1].runs.append(rest.strip())
    if not stages:
        raise UsageError(f"{path} has no FROM: not a Dockerfile")
    return Recipe(path, glob, stages)


def check_build_args(recipe: Recipe, build_args: dict[str, str]) -> None:
    """Refuse a build argument the Dockerfile declares no ARG for: Docker would ignore it silently."""
    unknown = [n for n in build_args if n not in recipe.arg_names]
    if unknown:
        raise UsageError(f"build argument(s) {', '.join(unknown)} name no ARG of {recipe.path.name}: Docker would "
                         f"ignore them and build its defaults; it declares {', '.join(recipe.arg_names)}")


def native(configure: list[str], build: list[str], *, src_from: str, src_to: Path, build_dir: Path,
           jobs: int | None = None, targets: list[str] | None = None) -> tuple[list[str], list[str]]:
    """The same commands for a native build: the image's source root `src_from` (e.g. /src) moved to
    `src_to`, the build folder to `build_dir`, `--parallel` given `jobs`, `targets` added."""
    def move(tok: str) -> str:
        return str(src_to) + tok[len(src_from):] if tok == src_from or tok.startswith(src_from.rstrip("/") + "/") else tok
    conf = [move(t) for t in configure]
    bld = [move(t) for t in build]
    for argv in (conf, bld):
        for flag in ("-B", "--build"):
            if flag in argv and argv.index(flag) + 1 < len(argv):
                argv[argv.index(flag) + 1] = str(build_dir)
    if jobs is not None and "--parallel" in bld:
        i = bld.index("--parallel")
        if i + 1 < len(bld) and bld[i + 1].isdigit():
            bld[i + 1] = str(jobs)
        else:
            bld.insert(i + 1, str(jobs))
    if targets:
        have = bld[bld.index("--target") + 1:] if "--target" in bld else []
        extra = [t for t in targets if t not in have]
        if extra and "--target" in bld:
            i = bld.index("--target") + 1
            while i < len(bld) and not bld[i].startswith("-"):
                i += 1
            bld[i:i] = extra
        elif extra:
            bld += ["--target", *extra]
    return conf, bld


__all__ = ["Recipe", "Stage", "read_recipe", "check_build_args", "substitute", "native"]
