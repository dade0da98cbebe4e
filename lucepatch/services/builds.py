"""Build orchestration behind `lucepatch build` and the API: native variants, container images
(probes first as a preflight), and HAMi's device-plugin image rebuilt with the patched library.
Commands parse options, call these, and print what comes back."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from lucepatch import git
from lucepatch.builders.native import build_variant
from lucepatch.builders.probe import preflight as run_preflight, run_probes
from lucepatch.builders.superbuild import build_superproject
from lucepatch.errors import UsageError
from lucepatch.node import driver as drv
from lucepatch.node import report as noderep
from lucepatch.node.report import load_node_report
from lucepatch.target import Target, load_target
from lucepatch.workspace import Workspace, resolve_source

__all__ = ["build", "build_profiles", "builds_per_profile", "build_image", "render_image", "plan_upstream_image",
           "ImagePlanRequest", "image_from_upstream", "build_device_plugin", "image_provenance", "probe"]


def build(t: Target, src: Path, cache: Path, variants=("patched",), *, jobs: int | None = None) -> list:
    """Native builds of the variants ("baseline", "patched"), cached by content and reproducible:
    each BuildResult has artifacts (path), sha256 and the recipe that rebuilds the same bytes."""
    git.open_repo(src)
    return [build_variant(t, src, v, cache, jobs=jobs) for v in variants]


def plugin_tag(from_image: str, repo: str | None) -> str:
    """REPO:<tag of --from>-lucepatch (REPO defaults to --from's repository)."""
    name, _, tag = from_image.rpartition(":") if ":" in from_image.split("/")[-1] else (from_image, "", "latest")
    return f"{repo or name}:{tag}-lucepatch"


def build_device_plugin(ws: Workspace, cache: Path, *, from_image: str | None, source: str | None = None,
                        lib: str | None = None, evidence_path: str | None = None, repo: str | None = None,
                        save: str | None = None):
    """HAMi's device-plugin image `from_image` with the patched libvgpu.so (built from hami-core's
    series when `lib` is not given); `save` also writes it as a docker-save tar."""
    from lucepatch.k8s.plugin_image import build_plugin_image  # lazy: the device-plugin image, 23 ms

    if not from_image:
        raise UsageError("build hami-device-plugin needs --from IMAGE (the HAMi device-plugin image in use)")
    if lib is None:
        t = load_target(ws, "hami-core")
        src = resolve_source(source, t.name, family=t.family)
        git.open_repo(src)
        b = build_variant(t, src, "patched", cache)
        lib = b.artifacts["libvgpu.so"]
    ev_sha = hashlib.sha256(Path(evidence_path).read_bytes()).hexdigest() if evidence_path else ""
    res = build_plugin_image(from_image, Path(lib), plugin_tag(from_image, repo), evidence_sha256=ev_sha)
    if save:
        from lucepatch.builders.image import docker_client  # lazy: the image builder, 24 ms

        with open(save, "wb") as f:
            for chunk in docker_client().images.get(res.tag).save(named=True):
                f.write(chunk)
    return res


@dataclass
class Rendered:
    """`build --image --dry-run`: the files an image build would use, nothing built. `plan`: for an image
    built from upstream's Dockerfile, what that build would do (builders/upstream_image.UpstreamPlan)."""
    profile: dict
    tag: str
    files: dict[str, str]
    node_library: dict | None = None
    plan: object | None = None


def image_from_upstream(t: Target) -> bool:
    """Is `t`'s image upstream's own Dockerfile ([build] dockerfile), not lucepatch's template?"""
    return bool(t.build and t.build.dockerfile)


def _write_files(out_dir: str | None, files: dict[str, str]) -> None:
    if out_dir:
        Path(out_dir).mkdir(parents=True, exist_ok=True)
        for name, text in files.items():
            (Path(out_dir) / name).write_text(text)


def render_image(t: Target, profile: str | None, *, repo: str | None = None, builder_image: str | None = None,
                 runtime_image: str | None = None, jobs: int | None = None, out_dir: str | None = None,
                 cuda_archs: str | None = None, node_report: str | None = None) -> Rendered:
    from lucepatch.builders import image as img  # lazy: the image builder, 24 ms

    if image_from_upstream(t):
        raise UsageError(f"{t.name}'s image is upstream's {t.build.dockerfile}, read from the applied tree: "
                         "plan it with plan_upstream_image (build --image --dry-run --source CHECKOUT)")
    prof, files = img.render_profile(t, profile, builder_image=builder_image, runtime_image=runtime_image, jobs=jobs,
                                     cuda_archs=cuda_archs)
    _write_files(out_dir, files)
    r = Rendered(prof, img.image_tag(t, prof["name"], repo, img.image_cuda_archs(t, prof, cuda_archs)), files)
    if node_report:
        r.node_library = base_runs_node_library(runtime_image or prof.get("runtime_image"), node_report)
    return r


@dataclass
class ImagePlanRequest:
    """`build --image --dry-run` of a target built from upstream's Dockerfile, as data."""
    profile: str | None = None
    repo: str | None = None
    cuda_archs: str | None = None
    out_dir: str | None = None  # the Dockerfile as the series leaves it and build-args.json are written here
    node_report: str | None = None  # the runtime base's glibc against the library the node report found


def plan_upstream_image(t: Target, src: Path, cache: Path, req: ImagePlanRequest) -> Rendered:
    """What `build --image` would build from upstream's Dockerfile (`plan`: builders/upstream_image.UpstreamPlan,
    read on the applied tree in a private work area), nothing built."""
    import json  # lazy: the files of a dry run, 1 ms

    from lucepatch.builders import upstream_image  # lazy: the image builder, 24 ms

    git.open_repo(src)
    opts = upstream_image.ImageOptions(profile=req.profile, repo=req.repo, cuda_archs=req.cuda_archs)
    p = upstream_image.dry_run(t, src, cache, opts)
    files = {"Dockerfile": p.text, "build-args.json": json.dumps(p.build_args, indent=1, sort_keys=True) + "\n"}
    _write_files(req.out_dir, files)
    r = Rendered(p.profile, p.tag, files, plan=p)
    if req.node_report:
        r.node_library = base_runs_node_library(p.images[-1], req.node_report)
    return r


def base_runs_node_library(base: str | None, node_report: str) -> dict:
    """The runtime base image against the node report's library (the base's glibc is the image's)."""
    from lucepatch.builders import image as img  # lazy: the image builder, 24 ms

    report = load_node_report(node_report)
    client = img.docker_client()
    if not img.image_present(client, base):
        return {"ok": None, "image": base, "problems": [],
                "message": f"the runtime base {base} is not present locally: docker load it to check it before the "
                           "build (the built image is checked after a build)"}
    return img.node_library_check(client, base, report)


def _require_driver(img, runtime: str, node_driver, progress) -> None:
    """The node's driver runs `runtime`'s CUDA (its tag names it), or the build is refused (CheckFailed)."""
    cuda = img.cuda_version_of(runtime)
    if not cuda:
        raise UsageError(f"--node-driver: the CUDA version of {runtime} is not readable from its tag "
                         "(nvidia/cuda:<X.Y>...)")
    progress(drv.require(cuda, node_driver).message)


def build_image(t: Target, src: Path, cache: Path, *, profile: str | None = None, variant: str = "patched",
                preflight: bool = True, repo: str | None = None, builder_image: str | None = None,
                runtime_image: str | None = None, jobs: int | None = None, save: str | None = None,
                push: bool = False, progress=lambda _m: None, cuda_archs: str | None = None,
                node_driver=None, node_report: str | None = None):
    """The target's container image; for the patched variant the target's probes run first and a
    build known to fail is refused (preflight=False skips them). `node_driver`: a DriverVersion, or
    `--node-driver VER` as given (None: the driver `node_report` names, if any)."""
    from lucepatch.builders import image as img  # lazy: the image builder, 24 ms
    from lucepatch.builders import upstream_image  # lazy: the image builder, 24 ms

    if node_driver is None or isinstance(node_driver, str):
        node_driver = noderep.node_driver(node_driver, node_report)

    pname, prof = img.image_profile(t, profile)
    img.image_cuda_archs(t, prof, cuda_archs)  # a list the target cannot honour: exit 2 before any work
    upstream = image_from_upstream(t)
    if upstream and (builder_image or runtime_image or jobs):
        raise UsageError(f"{t.name} builds upstream's {t.build.dockerfile}: --builder-image, --runtime-image and "
                         "--jobs belong to lucepatch's template; set the Dockerfile's ARGs through the profile's "
                         "build_args instead")
    # the runtime image whose CUDA the node's driver must run: known before any work from the options or the
    # profile (upstream's route refuses a profile whose runtime_image its FROM lines do not resolve to), else
    # read from upstream's Dockerfile on the applied tree
    runtime = runtime_image or prof.get("runtime_image") or (None if upstream else prof.get("builder_image"))
    if node_driver is not None and runtime:  # an image the node's driver cannot start is not built
        _require_driver(img, runtime, node_driver, progress)
    git.open_repo(src)
    img.docker_client()  # docker down -> exit 3 before any work
    opts = upstream_image.ImageOptions(profile=profile, repo=repo, variant=variant, cuda_archs=cuda_archs)
    plan = upstream_image.dry_run(t, src, cache, opts) if upstream else None  # a setting the image cannot take: exit 2
    if node_driver is not None and not runtime:
        _require_driver(img, plan.images[-1], node_driver, progress)
    evidence = None
    if preflight and variant == "patched" and not (t.dir / "probes.toml").is_file():
        progress(f"preflight: {t.name} defines no probes ({t.dir / 'probes.toml'}); building without")
    elif preflight and variant == "patched":
        run = run_preflight(t, src, profile, cache)
        evidence = run.to_json()
        progress(f"preflight: {len(run.results)} probe(s) proven in {run.seconds:.0f}s")
    report = None
    if node_report:  # read it first: a bad report is a usage error before an hour of building
        report = load_node_report(node_report)
    if plan is not None:
        opts.evidence = evidence
        res = upstream_image.build_upstream_image(t, src, cache, opts)
        if save:
            res.saved = img.save_image(img.docker_client(), res.tag, Path(save))
        if push:
            res.pushed = img.push_image(img.docker_client(), res.tag)
    else:
        res = img.build_image(t, src, profile, cache, repo=repo, variant=variant, evidence=evidence,
                              builder_image=builder_image, runtime_image=runtime_image, jobs=jobs,
                              save=Path(save) if save else None, push=push, cuda_archs=cuda_archs)
    if report is not None:
        res.node_library = img.node_library_check(img.docker_client(), res.tag, report)
        progress(res.node_library["message"])
    return res


def image_provenance(image: str) -> dict:
    """`inspect IMAGE`: what an image was built from, by its labels (lucepatch's and the OCI ones):
    id, tags, labels, user, healthcheck, patch ids; `lucepatch`: built by `build --image`."""
    from lucepatch.builders.image import LABEL_PREFIX, docker_client, inspect_labels  # lazy: the image builder, 17 ms

    info = inspect_labels(docker_client(), image)
    labels = info["labels"]
    return {**info, "labels": {k: v for k, v in labels.items()
                               if k.startswith(LABEL_PREFIX) or k.startswith("org.opencontainers.")},
            "patch_ids_label": LABEL_PREFIX + "patch-ids",
            "patch_ids": [p for p in (labels.get(LABEL_PREFIX + "patch-ids") or "").split(",") if p],
            "lucepatch": bool(labels.get(LABEL_PREFIX + "target"))}


def probe(t: Target, src: Path, variants: list[str], cache: Path, *, profile: str | None = None,
          only: list[str] | None = None) -> list:
    """`probe`: each variant's compile/link probes (a ProbeRun per variant)."""
    return [run_probes(t, src, profile, v, cache, only or None) for v in variants]


def build_profiles(t: Target, src: Path, cache: Path, variants: list[str], *, profile: str | None = None,
                   jobs: int | None = None, keep_build: bool = False, cuda_archs: str | None = None) -> list:
    """A superproject with profiles (Lucebox): each variant's native build of a profile
    (`cuda_archs`: "120;90" or "120,90" instead of the profile's)."""
    archs = [a for a in cuda_archs.replace(",", ";").split(";") if a] if cuda_archs else None
    return [build_superproject(t, src, profile, cache, variant=v, jobs=jobs, keep_build=keep_build, cuda_archs=archs)
            for v in variants]


def builds_per_profile(t: Target) -> bool:
    """Is `t` a superproject built per profile (Lucebox), not by its [build.artifacts]?"""
    return bool(t.profiles and not t.build.artifacts)
