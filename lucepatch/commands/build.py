"""`lucepatch build TARGET [--baseline]` (native artifacts, cached by content) or
`lucepatch build TARGET --image [--profile P] [--tag REPO] [--save FILE.tar] [--push] [--dry-run]`."""

from __future__ import annotations

import json
from pathlib import Path

import click

from lucepatch import git, report
from lucepatch.commands._common import cache, json_option, require_source, source_option, workspace
from lucepatch.target import load_target


@click.command("build")
@click.argument("target", required=False)
@source_option
@click.option("--baseline", is_flag=True, help="Build upstream + Build-Only patches instead of the whole series.")
@click.option("--both", is_flag=True, help="Build baseline and patched (native builds).")
@click.option("-j", "--jobs", type=int, default=None, help="Parallel build jobs (default: CPU count).")
@click.option("--image", "as_image", is_flag=True, help="Build a container image (docker SDK) instead of native artifacts.")
@click.option("--profile", default=None, help="Build profile from target.toml (default: the first one).")
@click.option("--tag", "repo", default=None, metavar="REPO", help="Image repository; the tag is REPO:<profile>-<series-version> (default lucepatch/TARGET).")
@click.option("--save", type=click.Path(dir_okay=False), default=None, help="Also write the image as a tar (docker save) for clusters without a registry.")
@click.option("--push", is_flag=True, help="Push REPO:<profile>-<version> after the checks pass.")
@click.option("--dry-run", is_flag=True, help="Render the Dockerfile and entrypoint and print them; no docker, no build.")
@click.option("--no-preflight", is_flag=True, help="Skip the probes that otherwise run first and refuse a build known to fail.")
@click.option("--builder-image", default=None, help="Override the profile's builder base image.")
@click.option("--runtime-image", default=None, help="Override the profile's runtime base image.")
@click.option("--out", "out_dir", type=click.Path(file_okay=False), default=None, help="With --dry-run: write the rendered files here.")
@click.option("--from", "from_image", default=None, metavar="IMAGE",
              help="build hami-device-plugin: the HAMi device-plugin image to rebuild with the patched libvgpu.so.")
@click.option("--lib", "lib", type=click.Path(dir_okay=False), default=None,
              help="build hami-device-plugin: the patched libvgpu.so (default: build hami-core's series from --source).")
@click.option("--evidence", "evidence_path", type=click.Path(dir_okay=False), default=None,
              help="build hami-device-plugin: evidence JSON whose sha256 the image label records.")
@json_option
@click.pass_context
def command(ctx, target, source, baseline, both, jobs, as_image, profile, repo, save, push, dry_run, no_preflight,
            builder_image, runtime_image, out_dir, from_image, lib, evidence_path, as_json):
    """Build TARGET's artifacts (e.g. libvgpu.so) or, with --image, its container image.

    `build hami-device-plugin --from IMAGE` rebuilds HAMi's device-plugin image with the patched
    libvgpu.so, so a plugin restart re-installs the fix instead of the upstream library."""
    ws = workspace(ctx)
    if target == "hami-device-plugin":
        return _device_plugin(ctx, ws, source, from_image, lib, evidence_path, repo, save, as_json)
    t = load_target(ws, target)
    if as_image or dry_run:
        return _image(ctx, ws, t, source, baseline, jobs, profile, repo, save, push, dry_run, no_preflight,
                      builder_image, runtime_image, out_dir, as_json)
    from lucepatch.builders.native import build_variant

    src = require_source(source, t.name)
    git.open_repo(src)
    variants = ["baseline", "patched"] if both else (["baseline"] if baseline else ["patched"])
    results = [build_variant(t, src, v, cache(ctx), jobs=jobs) for v in variants]
    if as_json:
        report.emit_json("build", {"workspace": ws.to_json(), "target": t.name, "version": t.version,
                                    "builds": [r.to_json() for r in results]})
    rows = []
    for r in results:
        for name, path in r.artifacts.items():
            rows.append([r.variant, name, r.sha256[name], str(path), "cached" if r.cached else "built"])
    report.table(f"build {t.name} {t.version}", ["variant", "artifact", "sha256", "path", ""], rows,
                 to_stdout=not as_json)
    return 0


def _device_plugin(ctx, ws, source, from_image, lib, evidence_path, repo, save, as_json):
    import hashlib

    from lucepatch.builders.native import build_variant
    from lucepatch.errors import UsageError
    from lucepatch.k8s.plugin_image import build_plugin_image

    if not from_image:
        raise UsageError("build hami-device-plugin needs --from IMAGE (the HAMi device-plugin image in use)")
    if lib is None:
        t = load_target(ws, "hami-core")
        src = require_source(source, t.name)
        git.open_repo(src)
        b = build_variant(t, src, "patched", cache(ctx))
        lib = b.artifacts["libvgpu.so"]
    ev_sha = hashlib.sha256(Path(evidence_path).read_bytes()).hexdigest() if evidence_path else ""
    name, _, tag = from_image.rpartition(":") if ":" in from_image.split("/")[-1] else (from_image, "", "latest")
    new_tag = f"{repo or name}:{tag}-lucepatch"
    res = build_plugin_image(from_image, Path(lib), new_tag, evidence_sha256=ev_sha)
    if save:
        from lucepatch.k8s.plugin_image import docker_client

        with open(save, "wb") as f:
            for chunk in docker_client().images.get(res.tag).save(named=True):
                f.write(chunk)
    if as_json:
        report.emit_json("build", {"workspace": ws.to_json(), "device_plugin": res.to_json(), "helm_values": res.values_yaml,
                                    "saved": save})
    else:
        click.echo(res.values_yaml)
    report.progress(f"{res.tag}: {res.lib_path} = patched libvgpu.so {res.lib_sha256[:16]} "
                    f"(replaced {res.replaced_sha256[:16]}); Helm values above")
    return 0


def _image(ctx, ws, t, source, baseline, jobs, profile, repo, save, push, dry_run, no_preflight,
           builder_image, runtime_image, out_dir, as_json):
    from lucepatch.builders import image as img

    variant = "baseline" if baseline else "patched"
    if dry_run:
        prof, files = img.render_profile(t, profile, builder_image=builder_image, runtime_image=runtime_image, jobs=jobs)
        tag = img.image_tag(t, prof["name"], repo)
        if out_dir:
            Path(out_dir).mkdir(parents=True, exist_ok=True)
            for name, text in files.items():
                (Path(out_dir) / name).write_text(text)
        if as_json:
            report.emit_json("build", {"workspace": ws.to_json(), "target": t.name, "version": t.version,
                                        "image": {"tag": tag, "dry_run": True, "profile": prof["name"], "files": files}})
        else:
            click.echo(f"# would build {tag} (profile {prof['name']}, preflight {'off' if no_preflight else 'on'})")
            click.echo(files["Dockerfile"])
        return 0
    src = require_source(source, t.name)
    git.open_repo(src)
    img.docker_client()  # docker down -> exit 3 before any work
    evidence = None
    if not no_preflight and variant == "patched" and not (t.dir / "probes.toml").is_file():
        report.progress(f"preflight: {t.name} defines no probes ({t.dir / 'probes.toml'}); building without")
    elif not no_preflight and variant == "patched":
        from lucepatch.builders.probe import preflight

        run = preflight(t, src, profile, cache(ctx))
        evidence = run.to_json()
        report.progress(f"preflight: {len(run.results)} probe(s) proven in {run.seconds:.0f}s")
    res = img.build_image(t, src, profile, cache(ctx), repo=repo, variant=variant, evidence=evidence,
                          builder_image=builder_image, runtime_image=runtime_image, jobs=jobs,
                          save=Path(save) if save else None, push=push)
    if as_json:
        report.emit_json("build", {"workspace": ws.to_json(), "target": t.name, "version": t.version,
                                    "image": res.to_json()})
    rows = [["tag", res.tag], ["id", res.image_id[:19]], ["closure", f"{res.closure.get('elf_count', 0)} ELF, all resolve"
                                                            if res.closure.get("ok") else json.dumps(res.closure)[:100]],
            ["evidence sha256", res.labels.get("org.lucepatch.evidence-sha256", "")], ["saved", res.saved or "-"],
            ["pushed", res.pushed or "-"], ["time", f"{res.seconds:.0f}s"]]
    report.table(f"build {t.name} {t.version} --image", ["", ""], rows, to_stdout=not as_json)
    return 0
