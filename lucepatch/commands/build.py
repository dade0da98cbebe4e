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
@json_option
@click.pass_context
def command(ctx, target, source, baseline, both, jobs, as_image, profile, repo, save, push, dry_run, no_preflight,
            builder_image, runtime_image, out_dir, as_json):
    """Build TARGET's artifacts (e.g. libvgpu.so) or, with --image, its container image."""
    ws = workspace(ctx)
    t = load_target(ws, target)
    if as_image or dry_run:
        return _image(ctx, ws, t, source, baseline, jobs, profile, repo, save, push, dry_run, no_preflight,
                      builder_image, runtime_image, out_dir, as_json)
    from lucepatch.build.native import build_variant

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


def _image(ctx, ws, t, source, baseline, jobs, profile, repo, save, push, dry_run, no_preflight,
           builder_image, runtime_image, out_dir, as_json):
    from lucepatch.build import image as img

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
        from lucepatch.build.probe import preflight

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
