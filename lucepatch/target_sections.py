"""The typed tables of target.toml: [build] (+ [build.artifacts], [build.reproducible]),
[profiles.*], [[submodule]], [pr] and [model]. Each is checked when the target loads — a key of
the wrong type or an unknown key (usually a typo) is one UsageError naming the file and the key —
so no consumer indexes a dict by string and finds out at build time."""

from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path

from lucepatch.errors import UsageError


def _ok(value, hint) -> bool:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is type(None):
        return value is None
    if origin in (typing.Union, types.UnionType):
        return any(_ok(value, a) for a in args)
    if origin is list:
        return isinstance(value, list) and all(_ok(v, args[0]) for v in value)
    if origin is dict:
        return isinstance(value, dict) and all(isinstance(k, str) and _ok(v, args[1]) for k, v in value.items())
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, hint)


def _describe(hint) -> str:
    text = hint.__name__ if isinstance(hint, type) else str(hint)
    return text.replace("typing.", "").replace("NoneType", "none")


def parse_table(cls, data, where: str, **fixed):
    """An instance of dataclass `cls` from a TOML table, every key checked against its type."""
    if not isinstance(data, dict):
        raise UsageError(f"{where} must be a table")
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls) if f.name not in fixed]
    unknown = sorted(set(data) - set(names))
    if unknown:
        raise UsageError(f"{where}: unknown key(s) {', '.join(unknown)}; known: {', '.join(names)}")
    kwargs = dict(fixed)
    for key, value in data.items():
        hint = hints[key]
        if dataclasses.is_dataclass(hint):
            kwargs[key] = parse_table(hint, value, f"{where}.{key}")
            continue
        if not _ok(value, hint):
            raise UsageError(f"{where}: {key} must be {_describe(hint)}, not {value!r}")
        kwargs[key] = value
    missing = [f.name for f in dataclasses.fields(cls)
               if f.name not in kwargs and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
    if missing:
        raise UsageError(f"{where} lacks required key(s) {', '.join(missing)}")
    return cls(**kwargs)


def _as_json(obj) -> dict:
    return {k: v for k, v in dataclasses.asdict(obj).items() if v is not None}


@dataclass
class Reproducible:
    """[build.reproducible]: what neutralises the upstream's own build stamps (builders/reproducible.py)."""
    configure_args: list[str] = field(default_factory=list)
    unset_env: list[str] = field(default_factory=list)
    stamp_files: list[str] = field(default_factory=list)  # generated, relative to the build folder


@dataclass
class BuildConfig:
    """[build]: how the target builds (native cmake builds, images, probes)."""
    system: str = "cmake"
    configure_args: list[str] = field(default_factory=list)
    targets: list[str] = field(default_factory=list)
    artifacts: dict[str, str] = field(default_factory=dict)  # name -> path in the build folder
    needs: list[str] = field(default_factory=list)  # headers the build needs: cuda.h, nvml.h
    source_dir: str = "."  # where the CMake project is, relative to the checkout
    binaries: list[str] = field(default_factory=list)  # runtime files an image copies from the build
    health_path: str = "/health"
    port: int = 8080
    image_template: str | None = None
    server_draft_flag: str = "--draft"
    share: list[str] = field(default_factory=list)  # folders copied beside bin/ (Lucebox's share/model_cards)
    arch_variable: str = ""  # the cmake variable holding the CUDA arch list (an image build argument)
    needs_headers: list[str] = field(default_factory=list)  # toolkit headers a full build needs (cublas_v2.h)
    reproducible: Reproducible = field(default_factory=Reproducible)
    # upstream ships its own Dockerfile (path in the tree): `build --image` builds it with the series
    # applied to the context instead of lucepatch's template, the arch list as the ARG `arch_build_arg`
    dockerfile: str | None = None
    arch_build_arg: str = ""
    image_roots: list[str] = field(default_factory=list)  # where that image holds the binaries (closure check)
    # the ARG whose words that Dockerfile's cmake configure RUN appends: a profile's cmake_args reach the image
    # through it (builders/upstream_image.py); a profile with cmake_args and no such ARG is refused
    cmake_args_build_arg: str = ""
    # [build.image_leaves]: cmake variable -> why upstream's Dockerfile decides its value; a profile's -D of one
    # is not passed to that image, and every image build and dry run says so
    image_leaves: dict[str, str] = field(default_factory=dict)
    # [build.instead_of]: Build-Only patch -> the configure arguments that build upstream as it ships
    # where that patch no longer applies (builders/build_only.py). Not part of a build's key: the
    # arguments enter the recipe (and so the key) of the builds that use them.
    instead_of: dict[str, list[str]] = field(default_factory=dict)

    def to_json(self) -> dict:
        return _as_json(self)

    def key_json(self) -> dict:
        """What of [build] a build's key hashes: all but `instead_of` and what only the upstream-Dockerfile image
        reads (builders/native.py; a native build does not change with them, so its cache stays)."""
        return {k: v for k, v in self.to_json().items() if k not in ("instead_of", "cmake_args_build_arg", "image_leaves")}


@dataclass
class Profile:
    """[profiles.NAME]: one build configuration (cmake arguments, arch list, base images)."""
    name: str
    description: str = ""
    inherits: str | None = None
    cuda_archs: list[str] | None = None
    cmake_args: list[str] | None = None
    builder_image: str | None = None
    runtime_image: str | None = None
    builder_packages: list[str] | None = None
    runtime_packages: list[str] | None = None
    cuda_stub: bool | None = None
    generator: str | None = None
    uid: int | None = None
    user: str | None = None
    model_dir: str | None = None
    health_start_period: str | None = None
    build_args: dict | None = None  # upstream Dockerfile's ARGs this profile sets (CUDA_VERSION = "13.0.0")

    def settings(self) -> dict:
        """The keys this table sets (not its name), as written."""
        return {k: v for k, v in _as_json(self).items() if k != "name"}


# [profiles.*] keys only lucepatch's own Dockerfile template reads (builders/image.py template_vars): a target whose
# image is upstream's Dockerfile ([build] dockerfile) has no place for them (builders/upstream_image.py refuses them,
# lint names them)
TEMPLATE_ONLY_PROFILE_KEYS = ("builder_packages", "runtime_packages", "cuda_stub", "uid", "user", "model_dir",
                              "health_start_period")


@dataclass
class Submodule:
    """[[submodule]]: code inside the target carrying its own series under series_dir (paths in its
    patches are relative to its root). `layout` says what the pinned base holds at `path`: a
    submodule (its checkout at `base`) or a folder of the superproject (vendored: no `base`; the
    series applies there re-rooted). Other commits are read as they are (engine/layout.py)."""
    path: str
    series_dir: str
    base: str = ""
    name: str | None = None
    url: str = ""
    branch: str = "main"
    layout: str = "submodule"

    @property
    def label(self) -> str:
        return self.name or Path(self.path).name

    def to_json(self) -> dict:
        return _as_json(self)


@dataclass
class PrConfig:
    """[pr]: overrides of the upstream's PR conventions (upstream/conventions.py)."""
    template: str | None = None
    checks: list[str] | None = None
    cpplint_args: list[str] | None = None
    subject_style: str | None = None
    ai_use_required: bool | None = None
    ai_use: str | None = None
    kind: str | None = None
    summary: str | None = None
    release_note: str | None = None
    overhead: str | None = None
    commit_messages: str | None = None  # "series" | "author" (upstream/conventions.py)
    validation: bool | None = None

    def overrides(self) -> dict:
        return _as_json(self)


@dataclass
class ModelConfig:
    """[model]: the model an image's entrypoint fetches when absent."""
    target_repo: str = ""
    target_file: str = ""
    draft_repo: str = ""


def parse_sections(data: dict, where: str) -> dict:
    """The typed sections of a target.toml document (keyword arguments of Target)."""
    profiles = data.get("profiles", {})
    if not isinstance(profiles, dict):
        raise UsageError(f"{where}: [profiles] must be a table of [profiles.NAME] tables")
    subs = data.get("submodule", [])
    if not isinstance(subs, list):
        raise UsageError(f"{where}: submodule must be an array of [[submodule]] tables")
    return {
        "build": parse_table(BuildConfig, data["build"], f"{where}: [build]") if "build" in data else None,
        "profiles": {n: parse_table(Profile, p, f"{where}: [profiles.{n}]", name=n) for n, p in profiles.items()},
        "submodules": [parse_table(Submodule, s, f"{where}: [[submodule]] #{i}") for i, s in enumerate(subs, 1)],
        "pr": parse_table(PrConfig, data.get("pr", {}), f"{where}: [pr]"),
        "model": parse_table(ModelConfig, data.get("model", {}), f"{where}: [model]"),
    }
