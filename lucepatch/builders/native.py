"""Native cmake builds of a target's artifacts for one variant (baseline or patched).

baseline = upstream base + the Build-Only patches (what it takes to build upstream here at all);
patched  = upstream base + the whole series.
Builds are cached under <cache>/builds/<key>/, where key hashes the exact source tree (git tree
id), the build configuration and the toolchain, so a rebuild happens only when an input changed.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from lucepatch import report
from lucepatch.builders import toolchain
from lucepatch.engine.apply import WorkArea, apply_series
from lucepatch.errors import CheckFailed, UsageError
from lucepatch.target import Target
from lucepatch.verify.fakecuda import build_fakecuda

VARIANTS = ("baseline", "patched")


@dataclass
class BuildResult:
    variant: str
    target: str
    base: str
    commit: str
    tree: str
    patches: list[str]  # names of the patches in this variant
    artifacts: dict[str, Path]
    sha256: dict[str, str]
    key: str
    cached: bool

    def to_json(self) -> dict:
        return {
            "variant": self.variant, "target": self.target, "base": self.base, "commit": self.commit,
            "tree": self.tree, "patches": self.patches, "key": self.key, "cached": self.cached,
            "artifacts": {n: {"path": str(p), "sha256": self.sha256[n]} for n, p in self.artifacts.items()},
        }


def variant_patches(target: Target, variant: str):
    if variant not in VARIANTS:
        raise UsageError(f"unknown variant {variant!r}; use baseline or patched")
    return target.build_only_patches if variant == "baseline" else target.patches


def _first_error(log: str) -> str:
    for line in log.splitlines():
        low = line.lower()
        if "error" in low and "-werror" not in low and "warning" not in low:
            return line.strip()[:240]
    tail = [l for l in log.splitlines() if l.strip()]
    return tail[-1][:240] if tail else "no output"


def build_variant(target: Target, source: Path, variant: str, cache: Path, *, jobs: int | None = None,
                  base: str | None = None) -> BuildResult:
    cfg = target.build
    if cfg.get("system", "cmake") != "cmake":
        raise UsageError(f"target {target.name}: build system {cfg.get('system')!r} is not supported by `build` (cmake only)")
    if not cfg.get("artifacts"):
        raise UsageError(f"target {target.name}: [build.artifacts] is empty in {target.toml_path}")
    toolchain.require("cmake", "install cmake (apt-get install cmake)")
    toolchain.require("cc", "install a C compiler (apt-get install gcc)")
    needs = list(cfg.get("needs", []))
    patches = variant_patches(target, variant)
    stubs = build_fakecuda(cache / "fakecuda")

    with WorkArea(cache, f"build-{target.name}-{variant}") as work:
        series = apply_series(target, source, patches, work, base=base)
        if series.conflicts:
            names = ", ".join(o.patch.name for o in series.conflicts)
            raise CheckFailed(f"{target.name} {variant}: patch(es) {names} do not apply on {series.base[:12]}; run lucepatch check")
        key_doc = {
            "target": target.name, "tree": series.tree, "build": cfg,
            "toolchain": toolchain.fingerprint(needs), "stubs": stubs.name,
        }
        key = hashlib.sha256(json.dumps(key_doc, sort_keys=True).encode()).hexdigest()[:24]
        out = cache / "builds" / key
        manifest = out / "manifest.json"
        if manifest.is_file():
            m = json.loads(manifest.read_text())
            arts = {n: Path(a["path"]) for n, a in m["artifacts"].items()}
            if all(p.is_file() and toolchain.file_sha256(p) == m["artifacts"][n]["sha256"] for n, p in arts.items()):
                return BuildResult(variant, target.name, series.base, series.head, series.tree,
                                   [p.name for p in patches], arts, {n: m["artifacts"][n]["sha256"] for n in arts},
                                   key, cached=True)
        report.progress(f"building {target.name} {variant} (tree {series.tree[:12]}) in {out}")
        staging = out.with_name(out.name + f".tmp{os.getpid()}")
        shutil.rmtree(staging, ignore_errors=True)
        bdir = staging / "build"
        bdir.mkdir(parents=True)
        cflags = []
        if "nvml.h" in needs:
            cflags.append(f"-I{toolchain.nvml_include()}")
        env = dict(os.environ, CUDA_HOME=str(toolchain.cuda_home()))
        configure = ["cmake", "-S", str(work.repo), "-B", str(bdir), *cfg.get("configure_args", []),
                     f"-DCMAKE_C_FLAGS={' '.join(cflags)}",
                     f"-DCMAKE_SHARED_LINKER_FLAGS=-L{stubs}", f"-DCMAKE_EXE_LINKER_FLAGS=-L{stubs}"]
        build = ["cmake", "--build", str(bdir), "-j", str(jobs or os.cpu_count() or 2)]
        for t in cfg.get("targets", []):
            build += ["--target", t]
        log_path = staging / "build.log"
        with open(log_path, "w") as log:
            for cmd in (configure, build):
                log.write("$ " + " ".join(cmd) + "\n")
                log.flush()
                rc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, env=env).returncode
                if rc != 0:
                    kept = cache / "logs" / f"build-{target.name}-{variant}-{key}.log"
                    kept.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy(log_path, kept)
                    shutil.rmtree(staging, ignore_errors=True)
                    raise CheckFailed(f"{target.name} {variant} build failed: {_first_error(kept.read_text())} (log: {kept})")
        arts, shas = {}, {}
        art_dir = staging / "artifacts"
        art_dir.mkdir()
        for name, rel in cfg["artifacts"].items():
            src = bdir / rel
            if not src.is_file():
                raise CheckFailed(f"{target.name} {variant}: the build did not produce {rel}")
            shutil.copy2(src, art_dir / name)
            shas[name] = toolchain.file_sha256(art_dir / name)
        shutil.rmtree(bdir)
        shutil.rmtree(out, ignore_errors=True)
        os.replace(staging, out)
        for name in cfg["artifacts"]:
            arts[name] = out / "artifacts" / name
        manifest.write_text(json.dumps({
            "key": key, "inputs": key_doc, "variant": variant, "commit": series.head,
            "artifacts": {n: {"path": str(arts[n]), "sha256": shas[n]} for n in arts},
        }, indent=2))
        return BuildResult(variant, target.name, series.base, series.head, series.tree,
                           [p.name for p in patches], arts, shas, key, cached=False)
