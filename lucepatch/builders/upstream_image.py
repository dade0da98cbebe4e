"""`build --image` for a target whose upstream ships its own Dockerfile ([build] dockerfile; Luce-Org/lucebox
since 2026-06, issue 37): that file, as the series leaves it, built on the applied tree with build arguments
only — lucepatch renders nothing.

plan()     what a profile asks of the image, as the Dockerfile's build arguments: the profile's `build_args`,
           the arch list as [build] arch_build_arg, the profile's cmake_args as the words of [build]
           cmake_args_build_arg (an ARG the configure RUN appends: patches/lucebox-vendored/
           build-docker-dflash-cmake-args.patch gives upstream's file one). Each setting of the profile either
           reaches the image or is refused in one line (UsageError, exit 2) before anything is built: a name no
           ARG declares (Docker would ignore it), cmake arguments where no ARG takes them, an ARG that does not
           reach the configure RUN or that the RUN overrides after it, a word the shell would split or glob, a
           base image the FROM lines do not resolve to, a key only lucepatch's own template reads. The one
           exception is data: [build.image_leaves] names the cmake variables whose value upstream's Dockerfile
           decides (each with why); their -D is not passed, and every plan says so.
dry_run()  the plan from the applied tree, nothing built: file, build args, tag, bases, the configure command.
build_upstream_image()  docker build of the applied tree, lucepatch's labels one LABEL instruction after upstream's
           last line (with_labels); then the CMakeCache.txt of the configure step's layer
           is read back: every -D the plan passed must be there with its value, or the tag is removed and the
           build fails (exit 1).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

from lucepatch import report
from lucepatch.builders import dockerfile as dockerfile_recipe
from lucepatch.builders import image as img
from lucepatch.builders.tree import prepare_tree
from lucepatch.errors import CheckFailed, EnvironmentMissing, UsageError
from lucepatch.target import Target
from lucepatch.target_sections import TEMPLATE_ONLY_PROFILE_KEYS

# words the shell changes when it expands an unquoted ${ARG} in a RUN: split at blanks, globbed at these
_SHELL_CHANGES = re.compile(r"[\s*?\[]")
_DEFINE = re.compile(r"^-D([A-Za-z_][A-Za-z0-9_.+-]*)(?::[A-Za-z]+)?=(.*)$", re.S)


@dataclass
class ImageOptions:
    """How `build --image` builds upstream's Dockerfile (the command's options, as data)."""
    profile: str | None = None
    repo: str | None = None
    variant: str = "patched"
    cuda_archs: str | list[str] | None = None
    evidence: dict | None = None
    log_dir: Path | None = None
    nocache: bool = False
    network_mode: str | None = None
    closure: bool = True


@dataclass
class UpstreamPlan:
    """What an upstream-Dockerfile image build does, before it does it."""
    profile: dict
    dockerfile: str  # the path in the tree ([build] dockerfile)
    text: str  # the file as the series leaves it
    build_args: dict[str, str]
    tag: str
    images: list[str]  # each stage's FROM image, build args substituted
    configure: list[str]  # the cmake configure command as the RUN will run it
    build: list[str]
    cmake_args: list[str]  # the profile's cmake arguments the build arguments carry
    defines: dict[str, str]  # NAME -> value the image's cmake cache must hold (the passed -D and the arch list)
    left: dict[str, str] = field(default_factory=dict)  # -D the image leaves to upstream -> why
    bases: list[dict] = field(default_factory=list)  # img.base_images, or [] where no daemon answered

    def base_lines(self) -> list[str]:
        """What each FROM image is here (a local stand-in, present, absent, or not checked)."""
        return [base_line(b) for b in self.bases]

    def notes(self) -> list[str]:
        """One line per cmake argument of the profile the image does not take (never silent)."""
        return [f"not passed to the image: {a} ([build.image_leaves]: {why})" for a, why in self.left.items()]

    def to_json(self) -> dict:
        return {"profile": self.profile["name"], "dockerfile": self.dockerfile, "build_args": self.build_args,
                "tag": self.tag, "images": self.images, "configure": self.configure, "build": self.build,
                "cmake_args": self.cmake_args, "cmake_cache_expects": self.defines, "left_to_upstream": self.left,
                "bases": self.bases}


def _define(arg: str) -> tuple[str, str] | None:
    m = _DEFINE.match(arg)
    return (m.group(1), m.group(2)) if m else None


def _last_define(argv: list[str], name: str) -> str | None:
    found = None
    for a in argv:
        d = _define(a)
        if d and d[0] == name:
            found = a
    return found


def _cmake_args(target: Target, profile: dict, archs: list[str] | None) -> tuple[list[str], dict[str, str]]:
    """The profile's cmake arguments the image takes, and those it leaves to upstream (arg -> why).
    The arch variable's -D is the arch build argument's (it is dropped here: `--cuda-archs` replaces the
    list, as in the native plan), unless the target has no such argument."""
    b = target.build
    var = b.arch_variable
    want = ";".join(archs or [str(a) for a in profile.get("cuda_archs") or []])
    out, left = [], {}
    for a in profile.get("cmake_args") or []:
        d = _define(a)
        if d and d[0] == var and b.arch_build_arg:
            if archs is None and d[1] != want:
                raise UsageError(f"profile {profile['name']} of {target.name}: {a} disagrees with its cuda_archs "
                                 f"{want!r}, which the image takes as {b.arch_build_arg}: make them one list")
            continue
        if d and d[0] in b.image_leaves:
            left[a] = b.image_leaves[d[0]]
            continue
        out.append(a)
    return out, left


def _refuse_template_keys(target: Target, profile: dict) -> None:
    keys = [k for k in TEMPLATE_ONLY_PROFILE_KEYS if profile.get(k) is not None]
    if keys:
        raise UsageError(f"profile {profile['name']} of {target.name} sets {', '.join(keys)}, which only lucepatch's "
                         f"own Dockerfile template reads; the image is upstream's {target.build.dockerfile}: "
                         "remove them from target.toml")


def _check_bases(target: Target, profile: dict, recipe, args: dict[str, str], images: list[str]) -> None:
    """A profile's builder_image / runtime_image is what the FROM lines resolve to, or it is refused."""
    stage = recipe.stages.index(recipe.stage_of_cmake())
    for key, got in (("builder_image", images[stage]), ("runtime_image", images[-1])):
        want = profile.get(key)
        if want and want != got:
            raise UsageError(f"profile {profile['name']} of {target.name}: {key} {want} is not what upstream's "
                             f"{target.build.dockerfile} starts from with build args "
                             f"{', '.join(f'{k}={v}' for k, v in args.items()) or '(none)'}: {got}; set the "
                             "profile's build_args (CUDA_VERSION, ...) so that they agree, or drop the key")


def plan(target: Target, profile: dict, dockerfile: Path, *, repo: str | None = None,
         archs: list[str] | None = None) -> UpstreamPlan:
    """The build of upstream's `dockerfile` (read from the applied tree) for `profile`; every refusal of
    the module's docstring, in one line each."""
    b = target.build
    _refuse_template_keys(target, profile)
    recipe = dockerfile_recipe.read_recipe(dockerfile)
    args = {k: str(v) for k, v in (profile.get("build_args") or {}).items()}
    if b.arch_build_arg:
        args[b.arch_build_arg] = ";".join(archs or [str(a) for a in profile.get("cuda_archs") or []])
    cmake_args, left = _cmake_args(target, profile, archs)
    if cmake_args and not b.cmake_args_build_arg:
        raise UsageError(f"profile {profile['name']} of {target.name} sets cmake arguments ({' '.join(cmake_args)}) "
                         f"but upstream's {b.dockerfile} has no build argument for them ([build] cmake_args_build_arg "
                         "unset): the image would be built without them; give the Dockerfile one through a patch of "
                         "the series and name it there")
    bad = [a for a in cmake_args if _SHELL_CHANGES.search(a)]
    if bad:
        raise UsageError(f"profile {profile['name']} of {target.name}: cmake argument {bad[0]!r} holds a blank or a "
                         f"glob character; {b.cmake_args_build_arg} reaches cmake through the shell's word splitting, "
                         "which would change it")
    if b.cmake_args_build_arg:
        args[b.cmake_args_build_arg] = " ".join(cmake_args)
    dockerfile_recipe.check_build_args(recipe, args)
    configure, build = recipe.cmake(args)
    for a in cmake_args:  # each must be the last word of its kind in the configure command Docker runs
        d = _define(a)
        last = _last_define(configure, d[0]) if d else (a if a in configure else None)
        if last != a:
            why = (f"the command sets {last} after it" if last else
                   f"{b.cmake_args_build_arg} does not reach that RUN (declared in its stage and used in it?)")
            raise UsageError(f"profile {profile['name']} of {target.name}: {a} would not reach the cmake configure "
                             f"RUN of upstream's {b.dockerfile}: {why}")
    images = recipe.images(args)
    _check_bases(target, profile, recipe, args, images)
    gen = profile.get("generator")
    if gen and "-G" in configure and configure[configure.index("-G") + 1] != str(gen).strip("'\""):
        raise UsageError(f"profile {profile['name']} of {target.name}: generator {gen} is not the one upstream's "
                         f"{b.dockerfile} configures with ({configure[configure.index('-G') + 1]}); drop the key")
    defines = dict(_define(a) for a in cmake_args if _define(a))
    if b.arch_variable and b.arch_build_arg:
        defines[b.arch_variable] = args[b.arch_build_arg]
    return UpstreamPlan(profile, b.dockerfile, dockerfile.read_text(encoding="utf-8"), args,
                        img.image_tag(target, profile["name"], repo, archs), images, configure, build,
                        cmake_args, defines, left)


def _bases(refs: list[str]) -> list[dict]:
    """img.base_images where a daemon answers; else each ref with present None (not checked)."""
    try:
        client = img.docker_client()
    except EnvironmentMissing as exc:
        return [{"ref": r, "present": None, "stand_in": None, "note": f"not checked: {exc}"} for r in dict.fromkeys(refs)]
    return img.base_images(client, refs)


def base_line(b: dict) -> str:
    what = (b.get("note") or "") if b.get("present") is None else (
        f"a local stand-in ({b['stand_in']}), not the image its name says" if b.get("stand_in") else
        "present here" if b["present"] else "absent here: the build pulls nothing (pull=False) and fails")
    return f"base {b['ref']}: {what}"


def dry_run(target: Target, source: Path, cache: Path, opts: ImageOptions) -> UpstreamPlan:
    """The plan on the tree the series leaves (applied in private work areas; `source` is not touched)."""
    _pname, profile = img.image_profile(target, opts.profile)
    archs = img.image_cuda_archs(target, profile, opts.cuda_archs)
    with contextlib.ExitStack() as stack:
        tree = prepare_tree(target, source, opts.variant, cache, stack)
        p = plan(target, profile, tree.root / target.build.dockerfile, repo=opts.repo, archs=archs)
    p.bases = _bases(p.images)
    return p


def cmake_cache_of(client, log_text: str, configure: list[str]) -> str | None:
    """CMakeCache.txt as the configure RUN left it: read from that step's layer (the legacy builder keeps
    it), before the Dockerfile's later steps prune the build folder. None when no layer or no file."""
    layer = img.step_image(log_text, "cmake -S")  # the one RUN that configures (Recipe.stage_of_cmake)
    bdir = configure[configure.index("-B") + 1] if "-B" in configure else None
    if not layer or not bdir:
        return None
    data = img.file_in_image(client, layer, f"{bdir}/CMakeCache.txt")
    return None if data is None else data.decode(errors="replace")


def cache_check(text: str | None, defines: dict[str, str]) -> dict:
    """Each NAME=value the plan passed, against the cache entries `NAME:TYPE=value`."""
    if text is None:
        return {"ok": False, "missing": sorted(defines), "differs": {}, "read": False}
    have = {}
    for line in text.splitlines():
        m = re.match(r"^([A-Za-z_][A-Za-z0-9_.+-]*):[A-Z_]+=(.*)$", line)
        if m:
            have[m.group(1)] = m.group(2)
    missing = sorted(n for n in defines if n not in have)
    differs = {n: {"want": v, "cache": have[n]} for n, v in defines.items() if n in have and have[n] != v}
    return {"ok": not missing and not differs, "missing": missing, "differs": differs, "read": True,
            "holds": {n: have[n] for n in defines if n in have}}


def _escape_char(text: str) -> str:
    """The Dockerfile's escape character: its `# escape=` parser directive (only before any other line), else \\."""
    for line in text.splitlines():
        m = re.match(r"^\s*#\s*([A-Za-z]+)\s*=\s*(\S+)\s*$", line)
        if not m:
            break
        if m.group(1).lower() == "escape":
            return m.group(2)
    return "\\"


def with_labels(text: str, labels: dict[str, str]) -> str:
    """`text` and, after its last line, one LABEL instruction holding every label: each key and value in double
    quotes, the escape character, `"` and `$` escaped (LABEL expands variables), so each reads back as given."""
    esc = _escape_char(text)

    def q(s: str) -> str:
        s = s.replace(esc, esc + esc).replace('"', esc + '"').replace("$", esc + "$").replace("\n", " ")
        return f'"{s}"'

    body = " ".join(f"{q(k)}={q(v)}" for k, v in sorted(labels.items()))
    return text + ("" if text.endswith("\n") else "\n") + f"LABEL {body}\n"


def build_upstream_image(target: Target, source: Path, cache: Path, opts: ImageOptions) -> img.ImageResult:
    """`build --image` of upstream's Dockerfile (see the module's docstring); its labels are lucepatch's
    (builders/image.py labels_for) plus the recipe, the cmake arguments passed and those left to upstream."""
    pname, profile = img.image_profile(target, opts.profile)
    archs = img.image_cuda_archs(target, profile, opts.cuda_archs)
    ev = opts.evidence
    ev_sha = hashlib.sha256(json.dumps(ev, sort_keys=True).encode()).hexdigest() if ev is not None else "none"
    t0 = time.monotonic()
    with contextlib.ExitStack() as stack:
        tree = prepare_tree(target, source, opts.variant, cache, stack, nested=True)
        p = plan(target, profile, tree.root / target.build.dockerfile, repo=opts.repo, archs=archs)
        labels = img.labels_for(target, profile, revision=tree.repos[0]["base"], evidence_sha256=ev_sha,
                                variant=opts.variant, cuda_archs=archs, runtime_image=p.images[-1])
        labels[f"{img.LABEL_PREFIX}recipe"] = f"upstream {target.build.dockerfile}"
        labels[f"{img.LABEL_PREFIX}cmake-args"] = " ".join(p.cmake_args)
        if p.left:
            labels[f"{img.LABEL_PREFIX}cmake-args-left-to-upstream"] = " ".join(p.left)
        out = (opts.log_dir or cache / "images") / f"{target.name}-{pname}-{target.version}"
        out.mkdir(parents=True, exist_ok=True)
        ctx = out / "context"
        shutil.rmtree(ctx, ignore_errors=True)
        # the submodules are links in the applied tree: the context holds their files (no .git anywhere)
        shutil.copytree(tree.root, ctx, symlinks=False, ignore=shutil.ignore_patterns(".git"))
    (out / "build-args.json").write_text(json.dumps(p.build_args, indent=1, sort_keys=True) + "\n")
    client = img.docker_client()  # asked after the plan: a setting the image cannot take is refused without Docker
    p.bases = img.base_images(client, p.images)
    for line in p.base_lines() + p.notes():
        report.progress(line)
    log = out / "build.log"
    log.write_text("")
    report.progress(f"docker build {p.tag} from upstream's {target.build.dockerfile} (context {ctx}, build args "
                    f"{', '.join(f'{k}={v}' for k, v in p.build_args.items())}, log {log})")
    # the file Docker reads: upstream's + one LABEL instruction, outside the context (whose Dockerfile stays as the
    # series leaves it). Not --label: the classic builder makes each one a step of its own, a container and, on the
    # vfs driver, a copy of the whole runtime image (20 labels: 20 copies of a CUDA runtime image)
    read = out / "Dockerfile.labelled"
    read.write_text(with_labels(p.text, labels), encoding="utf-8")
    image_id = img.docker_build(client, ctx, p.tag, log, buildargs=p.build_args, network_mode=opts.network_mode,
                                nocache=opts.nocache, dockerfile=str(read.resolve()))
    res = img.ImageResult(p.tag, image_id, labels, ctx / target.build.dockerfile, log, seconds=time.monotonic() - t0)
    res.base_images, res.build_args = p.bases, p.build_args
    res.cmake_cache = cache_check(cmake_cache_of(client, log.read_text(errors="replace"), p.configure), p.defines)
    if not res.cmake_cache["ok"]:
        client.images.remove(p.tag, noprune=True)  # an image tagged for settings it lacks is not left behind
        c = res.cmake_cache
        what = ("no CMakeCache.txt in the configure step's layer" if not c["read"] else
                "; ".join([f"{n} absent" for n in c["missing"]] +
                          [f"{n}={d['cache']} (not {d['want']})" for n, d in c["differs"].items()]))
        raise CheckFailed(f"{p.tag}: the image's cmake cache does not hold the profile's settings ({what}); "
                          f"tag removed (log {log})")
    if opts.closure and target.build.image_roots:
        res.closure = img.closure_check(client, p.tag, list(target.build.image_roots), cache=cache)
        if not res.closure["ok"]:
            bad = next(iter(res.closure["unresolved"].items()), ("(no ELF found)", []))
            raise CheckFailed(f"runtime closure check of {p.tag} failed: {bad[0]} needs {', '.join(bad[1]) or 'nothing'} "
                              f"that does not resolve in the image")
    return res


__all__ = ["ImageOptions", "UpstreamPlan", "plan", "dry_run", "build_upstream_image", "cache_check", "base_line",
           "with_labels"]
