"""Reproducible native builds: the same source tree + configuration + toolchain give the same bytes,
wherever and whenever they are built, by lucepatch or by a maintainer with plain `git am`.

What would otherwise make the bytes differ, and what neutralises it:
- the absolute source and build folders (lucepatch's are random work areas) in debug info,
  `__FILE__` and assertion strings: `-ffile-prefix-map` (it implies `-fdebug-prefix-map` and
  `-fmacro-prefix-map`) maps them to `src` and `build`; GCC does not record these options in
  DW_AT_producer, so the mapping itself leaves no trace;
- the toolchain's include folders outside the system's, which the debug line table names too: the
  NVML headers pip installed into a venv (`.../site-packages/nvidia/cu13/include`, a different path
  in every venv and prefix) and CUDA_HOME (`/usr/local/cuda` or `/usr/local/cuda-13.0`): mapped
  to `nvml` and `cuda` (`Recipe.toolchain_maps`), so two venvs give the same bytes;
- build-tree RPATHs naming the build folder: `CMAKE_BUILD_RPATH_USE_ORIGIN`;
- `__DATE__`/`__TIME__`: `SOURCE_DATE_EPOCH` = the committer time of the upstream base commit
  (the same for every build of that base, whoever commits the patches on top);
- an upstream's own build stamps, e.g. HAMi-core's CMakeLists writes `git log -1 %h` and the
  branch name into config/static_config.h (`GIT_HASH_*`/`GIT_BRANCH_*`): per target, data in
  `[build.reproducible]` of target.toml — `configure_args` and `unset_env` that neutralise them,
  and `stamp_files` (generated files, relative to the build folder) that are checked after
  configure never to name the commit being built (lucepatch's commit ids differ from anyone
  else's `git am` of the same patches).

The recipe is recorded (`Recipe.to_json`, `Recipe.shell`) so anyone can rebuild the same bytes:
docs/verbs.md "Rebuild the bytes yourself" runs it.
"""

from __future__ import annotations

import os
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from lucepatch.errors import CheckFailed
from lucepatch.target_sections import BuildConfig

SRC, BUILD = "$SRC", "$BUILD"  # placeholders in the recorded recipe
RECIPE_VERSION = 3  # part of the build cache key: builds made by an older recipe are not reused


@dataclass
class Recipe:
    """The cmake commands and environment of one native build, independent of where it runs."""
    configure_args: list[str]  # the target's, then the stamp neutralisers
    c_flags: list[str] = field(default_factory=list)  # include folders of the toolchain (nvml.h)
    link_dirs: list[str] = field(default_factory=list)  # libcuda/libnvidia-ml stubs to link against
    targets: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)  # CUDA_HOME, SOURCE_DATE_EPOCH
    unset_env: list[str] = field(default_factory=list)
    ld_flags: list[str] = field(default_factory=list)  # extra linker flags (coverage builds: --coverage)
    # toolchain folders the compiler reads headers from -> the name debug info gives them instead
    toolchain_maps: dict[str, str] = field(default_factory=dict)

    def prefix_maps(self, src: str, build: str) -> list[str]:
        # GCC checks the last -ffile-prefix-map first, so a build folder inside the source folder
        # (the usual `cmake -B build`) still maps to `build`, not `src/build`, and the source and
        # build folders win over a toolchain folder that would contain them.
        tool = [f"-ffile-prefix-map={path}={name}" for path, name in self.toolchain_maps.items()]
        return [*tool, f"-ffile-prefix-map={src}=src", f"-ffile-prefix-map={build}=build"]

    def configure(self, src: str, build: str) -> list[str]:
        flags = " ".join([*self.c_flags, *self.prefix_maps(src, build)])
        link = " ".join([*(f"-L{d}" for d in self.link_dirs), *self.ld_flags])
        return ["cmake", "-S", src, "-B", build, *self.configure_args,
                f"-DCMAKE_C_FLAGS={flags}", f"-DCMAKE_CXX_FLAGS={flags}", "-DCMAKE_BUILD_RPATH_USE_ORIGIN=ON",
                f"-DCMAKE_SHARED_LINKER_FLAGS={link}", f"-DCMAKE_EXE_LINKER_FLAGS={link}"]

    def build(self, build: str, jobs: int | None = None) -> list[str]:
        cmd = ["cmake", "--build", build]
        if jobs:
            cmd += ["-j", str(jobs)]
        for t in self.targets:
            cmd += ["--target", t]
        return cmd

    def environ(self, base: dict | None = None) -> dict[str, str]:
        env = {k: v for k, v in (os.environ if base is None else base).items() if k not in self.unset_env}
        env.update(self.env)
        return env

    def to_json(self) -> dict:
        return {"version": RECIPE_VERSION, "env": dict(self.env), "unset_env": list(self.unset_env),
                "configure": self.configure(SRC, BUILD), "build": self.build(BUILD)}

    def shell(self) -> str:
        """A POSIX sh rendering: set SRC (the patched checkout) and BUILD (an empty folder) first."""
        return shell_from_json(self.to_json())


def shell_from_json(doc: dict) -> str:
    """A recorded recipe (`Recipe.to_json`, as evidence and `build --json` carry it) as POSIX sh:
    set SRC (the patched checkout) and BUILD (an empty folder) first (`lucepatch show E --recipe V`)."""
    def q(cmd: list[str]) -> str:
        # keep $SRC/$BUILD expandable: double-quote words that hold them
        return " ".join(f'"{w}"' if ("$SRC" in w or "$BUILD" in w) and not set(w) & set('"`\\')
                        else shlex.quote(w) for w in cmd)
    lines = [f"unset {' '.join(doc['unset_env'])}"] if doc.get("unset_env") else []
    lines += [f"export {k}={shlex.quote(v)}" for k, v in doc.get("env", {}).items()]
    lines += [q(doc["configure"]), q(doc["build"])]
    return "\n".join(lines) + "\n"


def recipe_for(build_cfg: BuildConfig, *, c_flags: list[str], link_dirs: list[str], env: dict[str, str],
               ld_flags: list[str] | None = None, toolchain_maps: dict[str, str] | None = None,
               extra_configure: list[str] | None = None) -> Recipe:
    """extra_configure: after the target's own arguments (a Build-Only patch's [build.instead_of])."""
    rep = build_cfg.reproducible
    return Recipe(configure_args=[*build_cfg.configure_args, *(extra_configure or []), *rep.configure_args],
                  c_flags=c_flags,
                  link_dirs=link_dirs, targets=list(build_cfg.targets), env=env, unset_env=list(rep.unset_env),
                  ld_flags=list(ld_flags or []), toolchain_maps=dict(toolchain_maps or {}))


def check_stamps(build_cfg: BuildConfig, build_dir: Path, commit: str, *, where: str) -> None:
    """After configure: no declared stamp file may name the commit being built."""
    for rel in build_cfg.reproducible.stamp_files:
        f = build_dir / rel
        if not f.is_file():
            raise CheckFailed(f"{where}: configure did not generate the stamp file {rel} that [build.reproducible] "
                              "names; fix stamp_files")
        if commit[:7] in f.read_text(errors="replace"):
            raise CheckFailed(f"{where}: the generated {rel} names the commit being built ({commit[:7]}), so the "
                              "bytes would depend on lucepatch's commit ids; neutralise the stamp in "
                              "[build.reproducible] (configure_args / unset_env)")
