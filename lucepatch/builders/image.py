"""Container images of a patched target, through the docker SDK.

render()   the multi-stage Dockerfile (templates/docker/<template>.Dockerfile.j2) and entrypoint
           for one profile; base images are build arguments (profile data, overridable)
context    the series already applied: src/ (superproject, no .git) + submodules/<name>/ per
           sub-target, Dockerfile, entrypoint.sh; nothing secret is ever written there
labels     OCI labels + org.lucepatch.*: source, upstream revision, series version/hash, patch ids
           per repository, profile, evidence sha256 (the preflight probe run)
checks     runtime closure: `ld.so --list` on every ELF under /app, every NEEDED resolves except
           the driver's (libcuda.so.1, provided by the host at run time)

upstream   a target whose upstream ships its own Dockerfile ([build] dockerfile) builds that file instead
           (builders/upstream_image.py, with this module's labels, closure check and docker helpers)

Long: one recipe read four ways — render, context, labels and the closure checks (and the node's
library check after a build) read the same profile and target fields and the same docker client;
each is its own section below.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import re
import shutil
import tarfile
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import jinja2

from lucepatch import __version__, report
from lucepatch.builders.probe import resolve_profile
from lucepatch.builders.standins import make_stand_ins
from lucepatch.builders.superbuild import plan_for
from lucepatch.builders.tree import AppliedTree, prepare_tree
from lucepatch.errors import CheckFailed, EnvironmentMissing, UsageError
from lucepatch.native import elf
from lucepatch.target import Target
from lucepatch.target import sub_target
from lucepatch.target_sections import BuildConfig

TEMPLATES = Path(__file__).resolve().parent.parent / "templates" / "docker"
LABEL_PREFIX = "org.lucepatch."
DEFAULT_BUILDER_PACKAGES = ["cmake", "ninja-build", "git", "ca-certificates", "nlohmann-json3-dev"]
DEFAULT_RUNTIME_PACKAGES = ["libgomp1", "curl", "ca-certificates"]
ALLOWED_MISSING = ["libcuda.so.1", "libnvidia-ml.so.1"]
# the static copier a FROM scratch library image carries for the init containers that take its library
COPIER = "lucepatch-copy.c"
LIB_COPIER_PATH = "/lucepatch/bin/lucepatch-copy"
LIB_DIR_IN_IMAGE = "/lucepatch/lib"


# ---------------------------------------------------------------------------------- docker
def docker_client():
    """A docker SDK client whose daemon answers; else EnvironmentMissing (one line, exit 3)."""
    try:
        import docker  # optional: the docker extra  # noqa: PLC0415
        import requests  # optional: the docker extra (the SDK's transport)  # noqa: PLC0415
    except ImportError:
        raise EnvironmentMissing("the docker SDK is not installed: pip install 'lucepatch[docker]'")
    try:
        client = docker.from_env(timeout=int(os.environ.get("LUCEPATCH_DOCKER_TIMEOUT", "600")))
        client.ping()
    except (docker.errors.DockerException, requests.exceptions.RequestException, OSError) as exc:  # no daemon answers
        reason = str(exc).splitlines()[0][:160] if str(exc) else type(exc).__name__
        raise EnvironmentMissing(f"no Docker daemon answers at {os.environ.get('DOCKER_HOST', 'unix:///var/run/docker.sock')} "
                                 f"({reason}): start dockerd or set DOCKER_HOST")
    return client


# ---------------------------------------------------------------------------------- render
def image_tag(target: Target, profile: str, repo: str | None, cuda_archs: list[str] | None = None) -> str:
    """REPO:<profile>-<series version>; an arch list other than the profile's adds -sm<a>-<b> (the
    image is then not the profile's, and must not take its tag)."""
    repo = repo or f"lucepatch/{target.name}"
    if ":" in repo.rsplit("/", 1)[-1]:
        raise UsageError("--tag takes a repository (REPO), not REPO:TAG; the tag is <profile>-<series-version>")
    tag = f"{repo}:{profile}-{target.version}"
    if cuda_archs:
        tag += "-sm" + "-".join(cuda_archs)
    return tag


def image_cuda_archs(target: Target, profile: dict, cuda_archs: str | list[str] | None) -> list[str] | None:
    """`--cuda-archs '90;120'` for an image: checked, and None when it is the profile's own list.
    A target without a CUDA arch build variable cannot honour it: refused, never ignored."""
    if cuda_archs is None:
        return None
    archs = [a.strip() for a in (cuda_archs.split(";") if isinstance(cuda_archs, str) else cuda_archs) if a.strip()]
    if not (target.build and target.build.arch_variable):
        raise UsageError(f"--cuda-archs: target {target.name} has no CUDA arch list to set ([build] arch_variable "
                         f"in {target.toml_path}); drop --cuda-archs")
    bad = [a for a in archs if not re.fullmatch(r"\d{2,3}[a-z]?", a)]
    if not archs or bad:
        raise UsageError(f"--cuda-archs {cuda_archs!r}: give SM numbers separated by ';', e.g. '120' or '90;120'")
    return None if archs == [str(a) for a in profile.get("cuda_archs") or []] else archs


def _cut_words(text: str, limit: int) -> str:
    """At most `limit` characters, cut at a word boundary with an ellipsis (OCI labels are shown whole)."""
    text = " ".join(text.split())
    if len(text) <= limit:
        return text
    cut = text[: limit - 1]
    if " " in cut:
        cut = cut[: cut.rindex(" ")]
    return cut.rstrip(",;:") + "…"


def cuda_version_of(image_ref: str | None) -> str:
    """'13.0' from nvidia/cuda:13.0.0-runtime-ubuntu22.04 (the CUDA NVIDIA_REQUIRE_CUDA will demand); '' else."""
    m = re.search(r"(?:^|/)cuda:(\d+)\.(\d+)", image_ref or "")
    return f"{m.group(1)}.{m.group(2)}" if m else ""


def patch_labels(target: Target, variant: str = "patched") -> dict[str, str]:
    repos = [target] + [sub_target(target, s) for s in target.submodules]
    ids = []
    for t in repos:
        for p in t.variant_patches(variant):
            ids.append(f"{t.name}:{p.slug}={p.patch_id[:12]}")
    subs = [f"{s.path}@{s.base[:12]}" for s in target.submodules]
    return {"patches": ",".join(ids), "submodules": ",".join(subs)}


def labels_for(target: Target, profile: dict, *, revision: str | None = None, evidence_sha256: str = "none",
               variant: str = "patched", cuda_archs: list[str] | None = None,
               runtime_image: str | None = None) -> dict[str, str]:
    pl = patch_labels(target, variant)
    archs = cuda_archs if cuda_archs is not None else [str(a) for a in profile.get("cuda_archs") or []]
    extra = {}
    if target.build and target.build.arch_variable:
        extra[f"{LABEL_PREFIX}cuda-archs"] = ";".join(archs)
    cuda = cuda_version_of(runtime_image or profile.get("runtime_image") or profile.get("builder_image"))
    if cuda:  # what `--node-driver` and the manifests' image_cuda check against the node's driver
        extra[f"{LABEL_PREFIX}cuda-version"] = cuda
    return {
        "org.opencontainers.image.source": target.upstream,
        "org.opencontainers.image.revision": revision or target.base,
        "org.opencontainers.image.version": f"{target.version}",
        "org.opencontainers.image.title": f"{target.name} ({profile['name']})",
        "org.opencontainers.image.description": _cut_words(target.description or target.name, 200),
        f"{LABEL_PREFIX}target": target.name,
        f"{LABEL_PREFIX}variant": variant,
        f"{LABEL_PREFIX}profile": profile["name"],
        f"{LABEL_PREFIX}profile-hash": profile["hash"],
        f"{LABEL_PREFIX}series-version": target.version,
        f"{LABEL_PREFIX}series-hash": target.series_hash,
        f"{LABEL_PREFIX}patch-ids": pl["patches"],
        f"{LABEL_PREFIX}submodules": pl["submodules"],
        f"{LABEL_PREFIX}evidence-sha256": evidence_sha256,
        f"{LABEL_PREFIX}version": __version__,
        **extra,
    }


def template_vars(target: Target, profile: dict, *, labels: dict, builder_image: str | None = None,
                  runtime_image: str | None = None, jobs: int | None = None, ccache: bool = False,
                  verbose: bool = False, cuda_archs: list[str] | None = None) -> dict:
    b = target.build or BuildConfig()
    binaries = list(b.binaries or b.targets)
    if not binaries and not b.artifacts:
        raise UsageError(f"target {target.name}: [build] binaries (or targets) is empty in {target.toml_path}")
    model = target.model
    # the same plan as the native `build TARGET --profile P` (builders/superbuild.py); the arch
    # list becomes the CUDA_ARCHITECTURES build argument, defaulting to the profile's
    plan = plan_for(target, profile, cuda_archs=cuda_archs) if binaries and target.build else None
    arch_arg = bool(plan and plan.arch_variable and any(a.startswith(f"-D{plan.arch_variable}=") for a in plan.cmake_args))
    cmake_args = plan.args("${CUDA_ARCHITECTURES}") if arch_arg else list(profile.get("cmake_args") or [])
    return {
        "lucepatch_version": __version__, "target": target.name, "version": target.version,
        "profile": profile["name"],
        "builder_image": builder_image or profile.get("builder_image") or "nvidia/cuda:13.0.0-devel-ubuntu22.04",
        "runtime_image": runtime_image or profile.get("runtime_image") or "nvidia/cuda:13.0.0-runtime-ubuntu22.04",
        "builder_packages": profile.get("builder_packages", DEFAULT_BUILDER_PACKAGES),
        "runtime_packages": profile.get("runtime_packages", DEFAULT_RUNTIME_PACKAGES),
        "cuda_stub": profile.get("cuda_stub", True),
        "generator": profile.get("generator", "Ninja"),
        "cmake_args": cmake_args,
        "cuda_archs": ";".join(plan.cuda_archs) if arch_arg else "",
        "build_targets": list(b.targets or binaries),
        "binaries": binaries, "share": list(b.share),
        "artifacts": dict(b.artifacts),
        "source_dir": b.source_dir.strip("/") or ".",
        "submodules": [{"name": s.label, "path": s.path} for s in target.submodules],
        "jobs": jobs,  # None: the builder's nproc at build time (BUILD_JOBS overrides)
        "uid": int(profile.get("uid", 10001)), "user": profile.get("user", target.name.replace(".", "-")),
        "model_dir": profile.get("model_dir", "/models"),
        "port": b.port, "health_path": b.health_path,
        "health_start_period": profile.get("health_start_period", "30m"),
        "model": {"target_repo": model.target_repo, "target_file": model.target_file,
                  "draft_repo": model.draft_repo},
        "server_draft_flag": b.server_draft_flag,
        "labels": labels, "ccache": ccache, "verbose": verbose,
    }


def _env() -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATES)), undefined=jinja2.StrictUndefined,
                             keep_trailing_newline=True, trim_blocks=False, lstrip_blocks=False)
    # a Dockerfile double-quoted word: backslash and quote escaped, no newlines
    # a shell word in a RUN line: bare when safe, else double-quoted (so ${BUILD_ARG}s still expand)
    env.filters["sh"] = lambda v: str(v) if re.fullmatch(r"[A-Za-z0-9_@%+=:,./-]+", str(v)) else \
        '"' + str(v).replace("\\", "\\\\").replace('"', '\\"').replace("`", "\\`") + '"'
    env.filters["dq"] = lambda v: '"' + " ".join(str(v).split()).replace("\\", "\\\\").replace('"', '\\"').replace("$", "\\$") + '"'
    return env


def render(target: Target, vars_: dict) -> dict[str, str]:
    name = (target.build.image_template if target.build else None) or target.name
    path = TEMPLATES / f"{name}.Dockerfile.j2"
    if not path.is_file():
        known = sorted(p.name.split(".")[0] for p in TEMPLATES.glob("*.Dockerfile.j2"))
        raise UsageError(f"no image template {path.name} for {target.name}; set [build] image_template to one of {', '.join(known)}")
    env = _env()
    out = {"Dockerfile": env.get_template(path.name).render(**vars_)}
    if "entrypoint.sh" in out["Dockerfile"]:
        out["entrypoint.sh"] = env.get_template("entrypoint.sh.j2").render(**vars_)
    if COPIER in out["Dockerfile"]:  # the library image's static copier (no shell in FROM scratch)
        out[COPIER] = (TEMPLATES / COPIER).read_text()
    return out


def image_profile(target: Target, name: str | None) -> tuple[str, dict]:
    """The target's profile; a target without [profiles] gets `default` from its [build] table."""
    if target.profiles:
        return resolve_profile(target, name)
    if name not in (None, "default"):
        raise UsageError(f"target {target.name} has no profiles; drop --profile or use default")
    prof = {"name": "default", "cmake_args": list(target.build.configure_args if target.build else []),
            "builder_packages": ["cmake", "make", "ca-certificates"], "generator": "'Unix Makefiles'"}
    prof["hash"] = hashlib.sha256(repr(sorted((k, repr(v)) for k, v in prof.items())).encode()).hexdigest()[:16]
    return "default", prof


def render_profile(target: Target, profile_name: str | None, **kw) -> tuple[dict, dict[str, str]]:
    pname, profile = image_profile(target, profile_name)
    kw["cuda_archs"] = image_cuda_archs(target, profile, kw.get("cuda_archs"))
    labels = labels_for(target, profile, evidence_sha256=kw.pop("evidence_sha256", "none"),
                        cuda_archs=kw["cuda_archs"], runtime_image=kw.get("runtime_image"))
    v = template_vars(target, profile, labels=labels, **kw)
    return profile, render(target, v)


# ---------------------------------------------------------------------------------- context
def _copy_tree(src: Path, dst: Path, skip: set[str]) -> None:
    def ignore(d, names):
        rel = os.path.relpath(d, src)
        out = {".git"} & set(names)
        for n in names:
            if os.path.normpath(os.path.join(rel, n)) in skip:
                out.add(n)
        return out
    shutil.copytree(src, dst, symlinks=True, ignore=ignore)


def make_context(tree: AppliedTree, target: Target, files: dict[str, str], ctx: Path,
                 ccache_dir: Path | None = None) -> Path:
    shutil.rmtree(ctx, ignore_errors=True)
    ctx.mkdir(parents=True)
    sub_paths = {os.path.normpath(s.path) for s in target.submodules}
    _copy_tree(tree.root, ctx / "src", sub_paths)
    for s in target.submodules:
        name = s.label
        real = (tree.root / s.path).resolve()
        _copy_tree(real, ctx / "submodules" / name, set())
        (ctx / "src" / s.path).mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (ctx / name).write_text(text)
    if "entrypoint.sh" in files:
        os.chmod(ctx / "entrypoint.sh", 0o755)
    (ctx / "ccache").mkdir(exist_ok=True)
    if ccache_dir and ccache_dir.is_dir():
        shutil.rmtree(ctx / "ccache")
        shutil.copytree(ccache_dir, ctx / "ccache", symlinks=True)
    (ctx / ".dockerignore").write_text("**/.git\n")
    return ctx


# ---------------------------------------------------------------------------------- build
@dataclass
class ImageResult:
    tag: str
    image_id: str
    labels: dict
    dockerfile: Path
    log: Path
    seconds: float = 0.0
    closure: dict = field(default_factory=dict)
    saved: str | None = None
    pushed: str | None = None
    node_library: dict | None = None  # node_library_check against a node report, when one was given
    base_images: list = field(default_factory=list)  # upstream's recipe: what each FROM image was here
    build_args: dict = field(default_factory=dict)  # upstream's recipe: the ARGs set
    cmake_cache: dict | None = None  # upstream's recipe: the profile's -D read back from the configure layer

    def to_json(self) -> dict:
        doc = {"tag": self.tag, "image_id": self.image_id, "labels": self.labels, "dockerfile": str(self.dockerfile),
               "log": str(self.log), "seconds": round(self.seconds, 2), "closure": self.closure,
               "saved": self.saved, "pushed": self.pushed, "node_library": self.node_library}
        if self.base_images:
            doc.update(base_images=self.base_images, build_args=self.build_args, cmake_cache=self.cmake_cache)
        return doc


def docker_build(client, ctx: Path, tag: str, log_path: Path, *, target_stage: str | None = None,
                 buildargs: dict | None = None, network_mode: str | None = None, nocache: bool = False,
                 dockerfile: str = "Dockerfile", labels: dict | None = None) -> str:
    """Build through the SDK's low-level API, streaming the log to log_path; returns the image id."""
    image_id = None
    errors = []
    with open(log_path, "a") as log:
        stream = client.api.build(path=str(ctx), dockerfile=dockerfile, tag=tag, rm=True, forcerm=True,
                                  decode=True, buildargs=buildargs or {}, target=target_stage,
                                  network_mode=network_mode, pull=False, nocache=nocache, labels=labels)
        t0 = time.monotonic()
        for chunk in stream:
            if "stream" in chunk:
                text = chunk["stream"]
                if text.startswith("Step "):  # elapsed time per step: where a build spends it
                    text = f"[{time.monotonic() - t0:8.1f}s] {text}"
                log.write(text)
                m = re.search(r"Successfully built ([0-9a-f]+)", chunk["stream"])
                if m:
                    image_id = m.group(1)
            if "aux" in chunk and isinstance(chunk["aux"], dict) and chunk["aux"].get("ID"):
                image_id = chunk["aux"]["ID"]
            if "error" in chunk:
                errors.append(chunk["error"].strip())
                log.write("ERROR: " + chunk["error"] + "\n")
    if errors or not image_id:
        text = log_path.read_text(errors="replace")
        first = next((l.strip() for l in text.splitlines()
                      if re.search(r"\berror\b|fatal|not found|denied", l, re.I) and "ERROR: " not in l[:7]), "")
        raise CheckFailed(f"docker build of {tag} failed: {first[:200] or (errors[0][:200] if errors else 'no image id')} "
                          f"({errors[0][:160] if errors else ''}; log: {log_path})")
    return image_id


def step_image(log: str, marker: str) -> str | None:
    """The image id the (last) build step whose instruction contains `marker` produced."""
    found = None
    lines = log.splitlines()
    for i, line in enumerate(lines):
        if re.search(r"Step \d+/\d+ : ", line) and marker in line:
            for nxt in lines[i + 1:]:
                if re.search(r"Step \d+/\d+ : ", nxt):
                    break
                m = re.match(r"^ ---> ([0-9a-f]{12,64})\s*$", nxt)
                if m:
                    found = m.group(1)
    return found


def file_in_image(client, image: str, path: str) -> bytes | None:
    """The bytes of one file of `image` (an id or a tag), read through a container that never starts; None when
    the image has no file there."""
    import docker  # optional: the docker extra  # noqa: PLC0415
    c = client.containers.create(image, entrypoint=["/bin/true"])
    try:
        bits, _ = c.get_archive(path)
    except docker.errors.NotFound:
        return None
    finally:
        c.remove(force=True)
    with tarfile.open(fileobj=io.BytesIO(b"".join(bits))) as tf:
        m = next((x for x in tf if x.isfile()), None)
        return tf.extractfile(m).read() if m else None


STUB_DIR = "/lucepatch-closure-stubs"
CLOSURE_SCRIPT = r"""
ld=$(ls /lib64/ld-linux-x86-64.so.2 /lib/ld-linux-aarch64.so.1 /lib/x86_64-linux-gnu/ld-linux-x86-64.so.2 2>/dev/null | head -n 1)
[ -n "$ld" ] || { echo "NO-LOADER"; exit 0; }
find "$@" -type f 2>/dev/null | sort | while read -r f; do
  if [ "$(head -c 4 "$f" 2>/dev/null | tr -d '\177')" = "ELF" ]; then
    echo "== $f"
    LD_LIBRARY_PATH=%(stubs)s "$ld" --list "$f" 2>&1 || true
  fi
done
""" % {"stubs": STUB_DIR}


def _tar_of(files: dict[str, Path]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tf:
        d = tarfile.TarInfo(STUB_DIR.strip("/"))
        d.type, d.mode = tarfile.DIRTYPE, 0o755
        tf.addfile(d)
        for name, path in files.items():
            tf.add(str(path), arcname=f"{STUB_DIR.strip('/')}/{name}")
    return buf.getvalue()


def _image_needed(container, roots: list[str]) -> dict[str, list[str]]:
    """NEEDED of every ELF under `roots` in the container's file system (archive API; it need not run),
    read on this side with pyelftools."""
    out: dict[str, list[str]] = {}
    with tempfile.TemporaryDirectory(prefix="lp-closure-") as tmp:
        for root in roots:
            bits, _ = container.get_archive(root)
            with tarfile.open(fileobj=io.BytesIO(b"".join(bits))) as tf:
                for m in tf:
                    if not m.isfile():
                        continue
                    f = tf.extractfile(m)
                    if f.read(4) != b"\x7fELF":
                        continue
                    local = Path(tmp) / "f"
                    f.seek(0)
                    local.write_bytes(f.read())
                    # the archive names entries after the root folder's last component
                    path = str(Path(root).parent / m.name)
                    out[path] = elf.dynamic(local).needed
    return out


def closure_check(client, image: str, roots: list[str], allowed: list[str] | None = None, *,
                  cache: Path | None = None) -> dict:
    """Every NEEDED of every ELF under `roots` resolves in the image, except the driver's.

    The image's own loader lists each ELF with stub libraries for the allowed names (libcuda.so.1,
    libnvidia-ml.so.1: the host driver's, mounted at run time) on LD_LIBRARY_PATH, so it does not
    stop at them and list nothing after; and every NEEDED that pyelftools reads from the ELF must
    appear resolved in that listing (a listing cut short cannot pass)."""
    allowed = list(ALLOWED_MISSING if allowed is None else allowed)
    si = make_stand_ins(cache or Path(os.environ.get("LUCEPATCH_CACHE", "/tmp/lucepatch-cache")), {})
    stubs = {n: si.driver / n for n in allowed if (si.driver / n).is_file()}
    c = client.containers.create(image, entrypoint=["/bin/sh", "-c", CLOSURE_SCRIPT, "closure", *roots],
                                 user="0", network_mode="none")
    try:
        c.put_archive("/", _tar_of(stubs))
        c.start()
        c.wait(timeout=600)
        text = c.logs(stdout=True, stderr=True).decode(errors="replace")
        # the NEEDED cross-check reads the same (stopped) container: the stubs are outside `roots`, and
        # on the vfs storage driver each container is a full copy of the image (3-19 s apiece here)
        needed = _image_needed(c, roots)
    finally:
        c.remove(force=True)
    if "NO-LOADER" in text:
        raise CheckFailed(f"closure check of {image}: no ld.so in the image")
    listing: dict[str, list[str]] = {}
    cur = None
    for line in text.splitlines():
        if line.startswith("== "):
            cur = line[3:].strip()
            listing[cur] = []
        elif cur:
            listing[cur].append(line)
    unresolved: dict[str, list[str]] = {}
    resolved_names: set[str] = set()
    for f, lines in listing.items():
        body = "\n".join(lines)
        if re.search(r"not a dynamic executable|statically linked", body):
            continue
        bad = set(re.findall(r"^\s*(\S+) => not found", body, re.M))
        fatal = set(re.findall(r"error while loading shared libraries: (\S+):", body))
        bad |= fatal
        found = set(re.findall(r"^\s*(\S+) => (/\S+)", body, re.M))
        resolved_names |= {n for n, _ in found}
        have = {n for n, _ in found}
        # every NEEDED of the file itself must be in the listing, resolved or reported missing
        # (unless the loader gave up at a missing library: then what it did not reach is unknown)
        unlisted = [] if fatal else [n for n in needed.get(f, []) if n not in have and n not in bad
                                     and "/" not in n and not n.startswith("ld-linux")]
        miss = sorted(n for n in bad | set(unlisted) if n not in allowed)
        if miss:
            unresolved[f] = miss
    resolved = {n: p for lines in listing.values() for l in lines
                for n, p in re.findall(r"^\s*(\S+) => (/\S+)", l) if not p.startswith(STUB_DIR)}
    stubbed = sorted({n for f, lines in listing.items() for l in lines
                      for n in re.findall(r"^\s*(\S+) => " + re.escape(STUB_DIR), l)})
    return {"elf_count": len(listing), "allowed_missing": allowed, "unresolved": unresolved,
            "needed_names": sorted({n for v in needed.values() for n in v}), "absent_allowed": stubbed,
            "resolved": dict(sorted(resolved.items())),
            "method": "image ld.so --list with stub driver libraries + pyelftools NEEDED cross-check",
            "ok": bool(listing) and not unresolved and set(needed) == set(listing)}


def inspect_labels(client, ref: str) -> dict:
    import docker  # optional: the docker extra  # noqa: PLC0415
    try:
        img = client.images.get(ref)
    except docker.errors.ImageNotFound:
        raise UsageError(f"image {ref} not found in the local Docker engine; build it or docker pull it first")
    cfg = img.attrs.get("Config") or {}
    return {"id": img.id, "tags": img.tags, "labels": cfg.get("Labels") or {}, "env": cfg.get("Env") or [],
            "user": cfg.get("User", ""), "healthcheck": cfg.get("Healthcheck"), "entrypoint": cfg.get("Entrypoint")}


def save_image(client, tag: str, dest: Path) -> str:
    img = client.images.get(tag)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(dest.name + ".part")
    with open(tmp, "wb") as f:
        for chunk in img.save(named=True):
            f.write(chunk)
    os.replace(tmp, dest)
    return str(dest)


def push_image(client, tag: str) -> str:
    repo, _, t = tag.rpartition(":")
    for chunk in client.images.push(repo, tag=t, stream=True, decode=True):
        if "error" in chunk:
            raise CheckFailed(f"docker push {tag} failed: {chunk['error'][:200]}")
    return tag


def base_images(client, refs: list[str]) -> list[dict]:
    """What each FROM image is here: its id, and whether it is a local offline stand-in made by lucepatch
    (label org.lucepatch.base, tests/fixtures/cudaproj/make_base.sh) rather than the image the name says."""
    import docker  # optional: the docker extra  # noqa: PLC0415
    out = []
    for ref in dict.fromkeys(refs):
        try:
            img = client.images.get(ref)
        except (docker.errors.ImageNotFound, docker.errors.NullResource):
            # only "not here" means absent; a daemon that stops answering is an error, not an absent base
            out.append({"ref": ref, "present": False, "stand_in": None})
            continue
        lab = (img.attrs.get("Config") or {}).get("Labels") or {}
        out.append({"ref": ref, "present": True, "id": img.id, "stand_in": lab.get(f"{LABEL_PREFIX}base")})
    return out


def build_image(target: Target, source: Path, profile_name: str | None, cache: Path, *, repo: str | None = None,
                variant: str = "patched", evidence: dict | None = None, builder_image: str | None = None,
                runtime_image: str | None = None, jobs: int | None = None, ccache_dir: Path | None = None,
                save: Path | None = None, push: bool = False, closure: bool = True, network_mode: str | None = None,
                log_dir: Path | None = None, nocache: bool = False,
                cuda_archs: str | list[str] | None = None) -> ImageResult:
    if target.build and target.build.dockerfile:  # upstream's own recipe: builders/upstream_image.py
        raise UsageError(f"{target.name} builds upstream's {target.build.dockerfile}, not lucepatch's template: "
                         "build it with lucepatch.builders.upstream_image.build_upstream_image")
    pname, profile = image_profile(target, profile_name)
    archs = image_cuda_archs(target, profile, cuda_archs)  # refused before Docker is asked anything
    client = docker_client()
    tag = image_tag(target, pname, repo, archs)
    ev_sha = "none"
    if evidence is not None:
        ev_sha = hashlib.sha256(json.dumps(evidence, sort_keys=True).encode()).hexdigest()
    t0 = time.monotonic()
    with contextlib.ExitStack() as stack:
        tree = prepare_tree(target, source, variant, cache, stack, nested=True)
        revision = tree.repos[0]["base"]
        labels = labels_for(target, profile, revision=revision, evidence_sha256=ev_sha, variant=variant,
                            cuda_archs=archs, runtime_image=runtime_image)
        v = template_vars(target, profile, labels=labels, builder_image=builder_image, runtime_image=runtime_image,
                          jobs=jobs, ccache=ccache_dir is not None, verbose=ccache_dir is not None, cuda_archs=archs)
        files = render(target, v)
        out = (log_dir or cache / "images") / f"{target.name}-{pname}-{target.version}"
        out.mkdir(parents=True, exist_ok=True)
        ctx = make_context(tree, target, files, out / "context", ccache_dir=ccache_dir)
        (out / "Dockerfile").write_text(files["Dockerfile"])
        if evidence is not None:
            (out / "evidence.json").write_text(json.dumps(evidence, sort_keys=True))
        log = out / "build.log"
        log.write_text("")
        report.progress(f"docker build {tag} (context {ctx}, log {log})")
        image_id = docker_build(client, ctx, tag, log, network_mode=network_mode, nocache=nocache)
        if ccache_dir is not None:
            # carry the compiler cache to the next build: copy /ccache out of the build-stage layer
            # the compile step produced (the legacy builder keeps it as the final image's parent)
            layer = step_image(log.read_text(errors="replace"), "cmake --build")
            if not layer:
                raise CheckFailed(f"cannot find the compile step's layer in {log} to copy the compiler cache from")
            _export_dir(client, layer, "/ccache", ccache_dir)
    res = ImageResult(tag, image_id, labels, out / "Dockerfile", log, seconds=time.monotonic() - t0)
    if closure and "entrypoint.sh" in files:  # a FROM scratch payload image has no loader to ask
        res.closure = closure_check(client, tag, ["/app"], cache=cache)
        if not res.closure["ok"]:
            bad = next(iter(res.closure["unresolved"].items()), ("(no ELF found under /app)", []))
            raise CheckFailed(f"runtime closure check of {tag} failed: {bad[0]} needs {', '.join(bad[1]) or 'nothing'} "
                              f"that does not resolve in the image")
    if save:
        res.saved = save_image(client, tag, save)
    if push:
        res.pushed = push_image(client, tag)
    return res


def _export_dir(client, image_id: str, path: str, dest: Path) -> None:
    c = client.containers.create(image_id, entrypoint=["/bin/true"])
    try:
        bits, _ = c.get_archive(path)
        buf = io.BytesIO(b"".join(bits))
    finally:
        c.remove(force=True)
    tmp = dest.with_name(dest.name + ".new")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    with tarfile.open(fileobj=buf) as tf:
        tf.extractall(tmp, filter="data") if hasattr(tarfile, "data_filter") else tf.extractall(tmp)
    inner = tmp / Path(path).name
    shutil.rmtree(dest, ignore_errors=True)
    os.replace(inner if inner.is_dir() else tmp, dest)
    shutil.rmtree(tmp, ignore_errors=True)


# ---------------------------------------------------------------------------------- the node's library
LIBC_IN_IMAGE = ("/lib/x86_64-linux-gnu/libc.so.6", "/usr/lib/x86_64-linux-gnu/libc.so.6", "/lib64/libc.so.6",
                 "/usr/lib64/libc.so.6", "/lib/aarch64-linux-gnu/libc.so.6")


def image_present(client, ref: str | None) -> bool:
    """Is `ref` in the local engine (never pulled)?"""
    import docker  # optional: the docker extra  # noqa: PLC0415
    try:
        client.images.get(ref)
        return True
    except (docker.errors.ImageNotFound, docker.errors.NullResource):
        return False


def image_libc(client, image: str, dest_dir: Path) -> Path | None:
    """The image's libc.so.6 copied out (archive API, the image never runs), or None."""
    import docker  # optional: the docker extra  # noqa: PLC0415
    c = client.containers.create(image, entrypoint=["/bin/true"])
    try:
        for p in LIBC_IN_IMAGE:
            try:
                bits, _ = c.get_archive(p)
            except docker.errors.NotFound:
                continue
            with tarfile.open(fileobj=io.BytesIO(b"".join(bits))) as tf:
                for m in tf:
                    if m.issym() or m.islnk():  # libc.so.6 is often a link to libc-2.x.so: follow it once
                        target = m.linkname if m.linkname.startswith("/") else str(Path(p).parent / m.linkname)
                        try:
                            bits2, _ = c.get_archive(target)
                        except docker.errors.NotFound:
                            break
                        with tarfile.open(fileobj=io.BytesIO(b"".join(bits2))) as tf2:
                            m2 = next((x for x in tf2 if x.isfile()), None)
                            if m2 is not None:
                                out = dest_dir / "libc.so.6"
                                out.write_bytes(tf2.extractfile(m2).read())
                                return out
                        break
                    if m.isfile():
                        out = dest_dir / "libc.so.6"
                        out.write_bytes(tf.extractfile(m).read())
                        return out
    finally:
        c.remove(force=True)
    return None


def node_library_check(client, image: str, report) -> dict:
    """Can `image` run the library a node report found preloaded in the node's pods? HAMi injects
    that library into every GPU container, so the image's glibc must provide what it needs
    (lucepatch.native.elf.unmet_needs against the image's own libc.so.6). {"ok": bool | None, ...}."""
    lib = report.library
    if lib is None:
        return {"ok": None, "image": image, "problems": [],
                "message": f"the node report names no libvgpu.so ({report.state}): {report.what_runs}"}
    needs = elf.LoaderNeeds.from_json(lib.identity.get("loader") or {})
    with tempfile.TemporaryDirectory(prefix="lp-image-libc-") as tmp:
        libc = image_libc(client, image, Path(tmp))
        if libc is None:
            return {"ok": None, "image": image, "problems": [], "library": lib.path,
                    "message": f"{image} has no libc.so.6 at {', '.join(LIBC_IN_IMAGE)}: its glibc is unknown"}
        lp = elf.libc_provides(libc)
        problems, lazy = elf.unmet_needs(needs, lp), elf.lazy_notes(needs, lp)
    kind = lib.identity.get("kind", "unknown")
    where = f"the node's {kind} library {lib.path} (sha256 {lib.sha256[:12]})"
    if problems:
        msg = (f"{image} (glibc {lp.glibc}) cannot run {where}: " + "; ".join(p.split(" (")[0] for p in problems)
               + ". HAMi injects it into every GPU container of the node, so the app would not start: give the pod a "
                 "GPU in exclusive mode (no injection, Olares 1.12.6+) or use a base image with an older glibc")
    else:
        msg = f"{image} (glibc {lp.glibc}) can load {where}" + (
            f"; {'; '.join(lazy)}: keep LD_BIND_NOW out of the image's environment" if lazy else "")
    return {"ok": not problems, "image": image, "glibc": lp.glibc, "library": lib.path, "library_sha256": lib.sha256,
            "problems": problems, "lazy": lazy, "message": msg}
