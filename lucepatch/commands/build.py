"""`lucepatch build TARGET [--baseline]` (native artifacts, cached by content) or
`lucepatch build TARGET --image [--profile P] [--tag REPO] [--save FILE.tar] [--push] [--dry-run]`."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import click

from lucepatch import api, report
from lucepatch.commands._common import cache, json_option, refuse_unused, source_option, workspace
from lucepatch.errors import EXIT_CHECK_FAILED

# the modes build picks from what it reads (lucepatch/data/verb_modes.toml)
PLUGIN, PROFILES = "build hami-device-plugin", "build (a target built per profile)"
UPSTREAM, UPSTREAM_DRY = "build --image of upstream's Dockerfile", "build --image --dry-run of upstream's Dockerfile"


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
@click.option("--keep-build", is_flag=True, help="Profile builds: keep the build tree and its sources (a later re-link there).")
@click.option("--cuda-archs", default=None, metavar="LIST", help="CUDA arch list instead of the profile's (e.g. '120;90'): profile builds and --image (which then tags REPO:<profile>-<version>-sm<archs>).")
@click.option("--node-driver", default=None, metavar="VER", help="--image: refuse a base whose CUDA the node's NVIDIA driver (e.g. 595.84) cannot start.")
@click.option("--node-report", default=None, type=click.Path(dir_okay=False), help="--image: the node report JSON (node --pod --save-report): the base's CUDA against its driver_version, the image's glibc against the library it found in the node's pods.")
@click.option("--summary", type=click.Path(dir_okay=False), default=None, help="Profile builds: write the build summary JSON here.")
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
            builder_image, runtime_image, keep_build, cuda_archs, node_driver, node_report, summary, out_dir, from_image,
            lib, evidence_path, as_json):
    """Build TARGET's artifacts (e.g. libvgpu.so) or, with --image, its container image.

    `build hami-device-plugin --from IMAGE` rebuilds HAMi's device-plugin image with the patched
    libvgpu.so, so a plugin restart re-installs the fix instead of the upstream library."""
    ws = workspace(ctx)
    if target == "hami-device-plugin":
        refuse_unused(ctx, "build", chosen=PLUGIN)
        res = api.build_device_plugin(ws, cache(ctx), from_image=from_image, source=source, lib=lib,
                                          evidence_path=evidence_path, repo=repo, save=save)
        if as_json:
            report.emit_json("build", {"workspace": ws.to_json(), "device_plugin": res.to_json(),
                                        "helm_values": res.values_yaml, "saved": save})
        else:
            click.echo(res.values_yaml)
        report.progress(f"{res.tag}: {res.lib_path} = patched libvgpu.so {res.lib_sha256[:16]} "
                        f"(replaced {res.replaced_sha256[:16]}); Helm values above")
        return 0
    t = api.target(ws, target)
    upstream = as_image and api.image_from_upstream(t)
    refuse_unused(ctx, "build", chosen=(UPSTREAM_DRY if dry_run else UPSTREAM) if upstream else
                  PROFILES if not as_image and api.builds_per_profile(t) else None)
    if dry_run and upstream:
        r = api.plan_upstream_image(t, api.source(t, source), cache(ctx), api.ImagePlanRequest(
            profile=profile, repo=repo, cuda_archs=cuda_archs, out_dir=out_dir, node_report=node_report))
        return _report_upstream_plan(ws, t, r, no_preflight, as_json)
    if dry_run:
        r = api.render_image(t, profile, repo=repo, builder_image=builder_image, runtime_image=runtime_image,
                             jobs=jobs, out_dir=out_dir, cuda_archs=cuda_archs, node_report=node_report)
        if as_json:
            report.emit_json("build", {"workspace": ws.to_json(), "target": t.name, "version": t.version,
                                        "image": {"tag": r.tag, "dry_run": True, "profile": r.profile["name"],
                                                  "files": r.files, "node_library": r.node_library}})
        else:
            click.echo(f"# would build {r.tag} (profile {r.profile['name']}, preflight {'off' if no_preflight else 'on'})")
            click.echo(r.files["Dockerfile"])
        if r.node_library is not None:
            report.progress(r.node_library["message"])
        return 1 if r.node_library is not None and r.node_library["ok"] is False else 0
    src = api.source(t, source)
    if as_image:
        res = api.build_image(t, src, cache(ctx), profile=profile, variant="baseline" if baseline else "patched",
                                  preflight=not no_preflight, repo=repo, builder_image=builder_image,
                                  runtime_image=runtime_image, jobs=jobs, save=save, push=push,
                                  progress=report.progress, cuda_archs=cuda_archs,
                                  node_driver=node_driver, node_report=node_report)
        if as_json:
            report.emit_json("build", {"workspace": ws.to_json(), "target": t.name, "version": t.version,
                                        "image": res.to_json()})
        closure = (f"{res.closure.get('elf_count', 0)} ELF, all resolve" if res.closure.get("ok")
                   else json.dumps(res.closure)[:100])
        rows = [["tag", res.tag], ["id", res.image_id[:19]], ["closure", closure],
                ["evidence sha256", res.labels.get("org.lucepatch.evidence-sha256", "")], ["saved", res.saved or "-"],
                ["pushed", res.pushed or "-"], ["time", f"{res.seconds:.0f}s"]]
        if res.cmake_cache is not None:  # upstream's Dockerfile: what its configure step's CMakeCache.txt holds
            rows.append(["cmake cache", "holds " + " ".join(f"{k}={v}" for k, v in res.cmake_cache["holds"].items())])
        if res.node_library is not None:
            rows.append(["node library", res.node_library["message"]])
        report.table(f"build {t.name} {t.version} --image", ["", ""], rows, as_json=as_json)
        return 1 if res.node_library is not None and res.node_library["ok"] is False else 0
    variants = ["baseline", "patched"] if both else (["baseline"] if baseline else ["patched"])
    if api.builds_per_profile(t):  # a superproject built per profile (Lucebox)
        results = api.build_profiles(t, src, cache(ctx), variants, profile=profile, jobs=jobs, keep_build=keep_build,
                                     cuda_archs=cuda_archs)
        return _report_profiles(ws, t, results, summary, as_json)
    results = api.build(t, src, cache(ctx), variants, jobs=jobs)
    if as_json:
        report.emit_json("build", {"workspace": ws.to_json(), "target": t.name, "version": t.version,
                                    "builds": [r.to_json() for r in results]})
    rows = [[r.variant, name, r.sha256[name], str(path), "cached" if r.cached else "built"]
            for r in results for name, path in r.artifacts.items()]
    report.table(f"build {t.name} {t.version}", ["variant", "artifact", "sha256", "path", ""], rows,
                 as_json=as_json)
    return 0


def _report_upstream_plan(ws, t, r, no_preflight: bool, as_json: bool) -> int:
    """`build --image --dry-run` of upstream's Dockerfile: what would be built, from what, with which arguments."""
    p = r.plan
    if as_json:
        report.emit_json("build", {"workspace": ws.to_json(), "target": t.name, "version": t.version,
                                    "image": {"tag": r.tag, "dry_run": True, "profile": r.profile["name"],
                                              "plan": p.to_json(), "files": r.files, "node_library": r.node_library}})
    else:
        click.echo(f"# would build {r.tag} from upstream's {p.dockerfile} as the series leaves it (profile "
                   f"{r.profile['name']}, preflight {'off' if no_preflight else 'on'}); nothing built")
        click.echo("# build args: " + " ".join(f"{k}={shlex.quote(v)}" for k, v in p.build_args.items()))
        for line in (*p.base_lines(), *p.notes()):
            click.echo(f"# {line}")
        click.echo("# configure: " + " ".join(p.configure))
        click.echo("# build: " + " ".join(p.build))
        click.echo(r.files["Dockerfile"])
    if r.node_library is not None:
        report.progress(r.node_library["message"])
    return 1 if r.node_library is not None and r.node_library["ok"] is False else 0


def _report_profiles(ws, t, results, summary: str | None, as_json: bool) -> int:
    """A superproject's builds per profile (Lucebox): binaries + sha256, SASS per library, closure."""
    doc = {"workspace": ws.to_json(), "target": t.name, "version": t.version, "builds": [r.to_json() for r in results]}
    if summary:
        Path(summary).write_text(json.dumps(doc, indent=1) + "\n")
    if as_json:
        report.emit_json("build", doc)
    for r in results:
        head = (f"build {t.name} {t.version} {r.variant} / {r.profile}: "
                + ("cached" if r.cached else f"configure {r.configure_s:.0f}s, build {r.build_s:.0f}s, "
                   f"{r.steps_done}/{r.steps_total} steps, -j {r.jobs}"))
        if not r.ok:
            f = r.failure
            report.table(head, ["", ""], [["result", "FAILED"], ["phase", f.get("phase", "")],
                                          ["first error", (f.get("first_error") or "")[:200]],
                                          ["error lines", str(f.get("error_lines", ""))], ["log", r.log or "-"]],
                         as_json=as_json)
            continue
        libs = r.sass.get("libraries", {})
        rows = []
        for path, sha in r.files.items():
            s = libs.get(path)
            sass = ", ".join(s["sass"]) if s else ""
            note = "" if not s else "; ".join(x for x in (
                f"missing {', '.join(s['missing'])}" if s["missing"] else "",
                f"unexpected {', '.join(s['unexpected'])}" if s["unexpected"] else "",
                f"arch-specific {', '.join(s['arch_specific'])}" if s["arch_specific"] else "",
                f"{s['fatbins']} fatbins") if x)
            rows.append([path, sha[:16], sass, note])
        cl = r.closure
        rows.append(["closure", "ok" if cl.get("ok") else "FAILED",
                     f"{cl.get('objects')} objects, {len(cl.get('needed_names', []))} NEEDED names",
                     "absent as allowed: " + (", ".join(cl.get("absent_allowed", [])) or "none")
                     + ("" if cl.get("ok") else f"; missing {json.dumps(cl.get('missing'))[:120]}")])
        rows.append(["SASS vs profile", "ok" if r.sass.get("ok") else "MISMATCH", ", ".join(r.sass.get("expected", [])), ""])
        report.table(head, ["file", "sha256", "SASS", "notes"], rows, as_json=as_json)
    return 0 if all(r.ok and r.sass.get("ok", True) for r in results) else EXIT_CHECK_FAILED
