"""Native cmake builds of a target's artifacts for one variant (baseline or patched).

baseline = upstream base + the Build-Only patches (what it takes to build upstream here at all);
patched  = upstream base + the whole series.
Builds are cached under <cache>/builds/<key>/, where key hashes the exact source tree (git tree
id), the build configuration, the recipe and the toolchain (compiler and cmake versions, the cuda.h
and nvml.h in use), so a rebuild happens only when an input changed. Builds are reproducible
(builders/reproducible.py): the same key gives the same bytes in any cache folder, and the
recorded recipe (<cache>/builds/<key>/recipe.sh) rebuilds them outside lucepatch.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import subprocess
import uuid
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from lucepatch import children, git, report
from lucepatch.builders import build_only
from lucepatch.builders.reproducible import check_stamps, recipe_for
from lucepatch.engine.apply import WorkArea, apply_series
from lucepatch.engine.core import APPLIED
from lucepatch.errors import CheckFailed, UsageError
from lucepatch.faults import pause
from lucepatch.files import sha256_file
from lucepatch.native import objcache, toolchain
from lucepatch.native.fakecuda import build_fakecuda
from lucepatch.target import Target

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
    recipe: dict = field(default_factory=dict)  # Recipe.to_json(): how to rebuild the same bytes
    label: str = ""  # the name it was built and logged under
    coverage: dict | None = None  # coverage builds: {"build_dir": .gcno tree, "strip": GCOV_PREFIX_STRIP}
    carried: dict = field(default_factory=dict)  # Build-Only patch -> how it is carried here (build_only.py)

    def to_json(self) -> dict:
        return {
            "variant": self.variant, "target": self.target, "base": self.base, "commit": self.commit,
            "tree": self.tree, "patches": self.patches, "key": self.key, "cached": self.cached, "recipe": self.recipe,
            "artifacts": {n: {"path": str(p), "sha256": self.sha256[n]} for n, p in self.artifacts.items()},
            **({"carried": self.carried} if self.carried else {}),
        }


def _first_error(log: str) -> str:
    lines = log.splitlines()
    for i, line in enumerate(lines):
        low = line.lower()
        if "error" in low and "-werror" not in low and "warning" not in low:
            # CMake says where on one line and what on the next ("CMake Error at CMakeLists.txt:1
            # (cmake_minimum_required):" / "  Compatibility with CMake < 3.5 has been removed ...")
            what = next((x.strip() for x in lines[i + 1:i + 3] if x.strip()), "") if line.rstrip().endswith(":") else ""
            return f"{line.strip()} {what}".strip()[:240]
    tail = [l for l in log.splitlines() if l.strip()]
    return tail[-1][:240] if tail else "no output"


def build_variant(target: Target, source: Path, variant: str, cache: Path, *, jobs: int | None = None,
                  base: str | None = None, patches: list | None = None, label: str | None = None,
                  coverage: bool = False) -> BuildResult:
    """`variant` of `target` built from `source` at `base` (default: the pinned base), reproducibly
    (builders/reproducible.py) and cached by content: a second call with the same inputs returns
    the cached artifacts, and a build in another cache folder gives the same bytes.

    patches: build exactly these patches instead of the variant's (retirement's add-one and
    leave-one-out builds); label: the name the build is logged under (default: the variant);
    coverage: compile and link with gcc --coverage and keep the build folder (the .gcno files) next
    to the artifacts; the manifest's "coverage" says how a run redirects its .gcda files there.
    A Build-Only patch that does not apply exactly at `base` is carried the ways
    builders/build_only.py lists (declared flags, 3-way, a line's resolution), each tried only when
    the one before could not be built; the result records the way (`carried`)."""
    cfg = target.build
    if cfg is None:
        raise UsageError(f"target {target.name} has no [build] table in {target.toml_path}; it cannot be built natively")
    if cfg.system != "cmake":
        raise UsageError(f"target {target.name}: build system {cfg.system!r} is not supported by `build` (cmake only)")
    if not cfg.artifacts:
        raise UsageError(f"target {target.name}: [build.artifacts] is empty in {target.toml_path}")
    toolchain.require("cmake", "install cmake (apt-get install cmake)")
    toolchain.require("cc", "install a C compiler (apt-get install gcc)")
    patches = target.variant_patches(variant) if patches is None else list(patches)
    job = _Job(target, Path(source), variant, Path(cache), label or variant, coverage, jobs,
               build_fakecuda(cache / "fakecuda"))
    try:
        return _build_once(job, patches, base, strict=True)
    except build_only.Moved as moved:
        tried = [moved.describe()]
        for way in build_only.ways(target, moved, patches):
            try:
                return _build_once(job, list(way.patches), base, way=way)
            except CheckFailed as exc:
                tried.append(f"{way.name} ({way.describe()}): {exc}")
        raise CheckFailed(f"{target.name} {job.label}: {moved.base[:12]} does not build here: " + "; ".join(tried))


@dataclass(frozen=True)
class _Job:
    """What every attempt of one build_variant call shares."""
    target: Target
    source: Path
    variant: str
    cache: Path
    label: str
    coverage: bool
    jobs: int | None
    stubs: Path


def _build_once(job: _Job, patches: list, base: str | None, *, strict: bool = False,
                way: build_only.Way | None = None) -> BuildResult:
    """One build of `patches` at `base`. strict: raise build_only.Moved, before building, when a
    Build-Only patch does not apply exactly; way: how the Build-Only patches are carried (its
    configure arguments follow the target's and enter the recipe and the key)."""
    target, cache, cfg, label, variant, coverage = job.target, job.cache, job.target.build, job.label, job.variant, job.coverage
    needs = list(cfg.needs)
    stubs = job.stubs
    with WorkArea(cache, f"build-{target.name}-{variant}") as work:
        series = apply_series(target, job.source, patches, work, base=base)
        if strict and any(o.patch.build_only and o.status != APPLIED for o in series.outcomes):
            raise build_only.Moved(series.base, series.outcomes)
        if series.conflicts:
            names = ", ".join(o.patch.name for o in series.conflicts)
            raise CheckFailed(f"{target.name} {label}: patch(es) {names} do not apply on {series.base[:12]}; run lucepatch check")
        nvml = str(toolchain.nvml_include()) if "nvml.h" in needs else None
        c_flags = [f"-I{nvml}"] if nvml else []
        cuda = str(toolchain.cuda_home())
        # every include folder outside the system's gets a fixed name in the debug info: the NVML
        # headers' path differs in every venv, CUDA_HOME between machines (reproducible.py)
        maps = {**({nvml: "nvml"} if nvml else {}), cuda: "cuda"}
        recipe = recipe_for(cfg, c_flags=c_flags + (["--coverage"] if coverage else []),
                            link_dirs=[str(stubs)], ld_flags=["--coverage"] if coverage else [],
                            env={"CUDA_HOME": cuda, "SOURCE_DATE_EPOCH": git.commit_time(work.repo, series.base)},
                            toolchain_maps=maps, extra_configure=list(way.configure_args) if way else [])
        key_doc = {
            # the stubs enter by content (their folder name is their hash), not by where the cache is
            "target": target.name, "tree": series.tree, "build": cfg.key_json(),
            "recipe": dataclasses.replace(recipe, link_dirs=["$STUBS"]).to_json(),
            "toolchain": toolchain.fingerprint(needs), "stubs": stubs.name,
        }
        key = hashlib.sha256(json.dumps(key_doc, sort_keys=True).encode()).hexdigest()[:24]
        out = cache / "builds" / key
        carried = dict(way.how) if way else {}
        result = partial(BuildResult, variant, target.name, series.base, series.head, series.tree,
                         [p.name for p in patches], key=key, recipe=recipe.to_json(), label=label, carried=carried)
        cached = _cached(out)
        if cached is not None:
            return result(*cached, cached=True, coverage=_coverage_of(out))
        report.progress(f"building {target.name} {label} (tree {series.tree[:12]}) in {out}"
                        + (f"; {way.describe()}" if way else ""))
        # a private staging folder per build (never shared by two concurrent builds, even threads
        # of one process); the finished one is renamed into place. An interrupted build removes its
        # own (finally below); one killed outright is swept by the next build of the key (its pid is gone).
        _sweep_stale_staging(out)
        staging = out.with_name(f"{out.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:12]}")
        bdir = staging / "build"
        bdir.mkdir(parents=True)
        # the compilers' temporary files in the staging folder, which the `finally` removes even when a
        # Ctrl-C killed them mid-file (they would be left in $TMPDIR)
        (staging / "tmp").mkdir()
        build_env = {**recipe.environ(), "TMPDIR": str(staging / "tmp")}
        # compiled objects reused across variants (native/objcache.py): on the command run here,
        # never in the recipe — the bytes are the same with and without it (tests/test_objcache.py)
        launch = objcache.configure_args() if objcache.enabled() and not coverage else []
        if launch:
            build_env.update({objcache.DIR_ENV: str(cache / "objcache"), objcache.LOG_ENV: str(staging / "objcache.log")})
        try:
            log_path = staging / "build.log"
            pause("build-steps")  # test-only (lucepatch.faults): cmake is about to start
            with open(log_path, "w") as log:
                steps = [recipe.configure(str(work.repo), str(bdir)) + launch,
                         recipe.build(str(bdir), job.jobs or os.cpu_count() or 2)]
                for n, cmd in enumerate(steps):
                    log.write("$ " + " ".join(cmd) + "\n")
                    log.flush()
                    # its own process group, killed whole on Ctrl-C (make's compilers too): lucepatch.children
                    rc = children.run(cmd, stdout=log, stderr=subprocess.STDOUT, env=build_env).returncode
                    if rc != 0:
                        kept = cache / "logs" / f"build-{target.name}-{variant}-{key}.log"
                        kept.parent.mkdir(parents=True, exist_ok=True)
                        shutil.copy(log_path, kept)
                        raise CheckFailed(f"{target.name} {label} build failed: {_first_error(kept.read_text())} (log: {kept})")
                    if n == 0:
                        check_stamps(cfg, bdir, series.head, where=f"{target.name} {label}")
            objects = objcache.count(staging / "objcache.log") if launch else {}
            if objects.get("hit"):
                report.progress(f"{target.name} {label}: {objects['hit']} of {objects['hit'] + objects['miss']} "
                                "compiled objects reused from the object cache")
            shas = {}
            art_dir = staging / "artifacts"
            art_dir.mkdir()
            for name, rel in cfg.artifacts.items():
                src = bdir / rel
                if not src.is_file():
                    raise CheckFailed(f"{target.name} {variant}: the build did not produce {rel}")
                shutil.copyfile(src, art_dir / name)
                os.chmod(art_dir / name, 0o755)
                shas[name] = sha256_file(art_dir / name)
            cov = None
            if coverage:
                # a run's .gcda files land in $GCOV_PREFIX/<path under the build folder> when
                # GCOV_PREFIX_STRIP drops the (staging) build folder's own components
                cov = {"build_dir": str(out / "build"), "strip": len(bdir.resolve().parts) - 1}
                for f in bdir.rglob("*"):  # only the notes files are kept
                    if f.is_file() and f.suffix != ".gcno":
                        f.unlink()
            else:
                shutil.rmtree(bdir)
            arts = {name: out / "artifacts" / name for name in cfg.artifacts}
            (staging / "recipe.sh").write_text(recipe.shell())
            (staging / "manifest.json").write_text(json.dumps({
                "key": key, "inputs": key_doc, "variant": variant, "commit": series.head,
                "artifacts": {n: {"path": str(arts[n]), "sha256": shas[n]} for n in arts},
                **({"coverage": cov} if cov else {}), **({"objects": objects} if objects else {}),
            }, indent=2))
            if not _publish(staging, out):
                cached = _cached(out)  # a concurrent build of the same key finished first: same bytes
                if cached is not None:
                    return result(*cached, cached=True, coverage=_coverage_of(out))
                raise CheckFailed(f"{target.name} {variant}: could not publish the build into {out}; remove it and retry")
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        return result(arts, shas, cached=False, coverage=cov)


def _sweep_stale_staging(out: Path) -> None:
    """Remove `<key>.tmp-<pid>-*` folders whose process no longer runs (a build killed by SIGKILL)."""
    for d in out.parent.glob(f"{out.name}.tmp-*"):
        pid = d.name[len(out.name) + 5:].split("-", 1)[0]
        if not pid.isdigit():
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            shutil.rmtree(d, ignore_errors=True)
        except PermissionError:
            pass  # another user's live process


def _cached(out: Path) -> tuple[dict[str, Path], dict[str, str]] | None:
    """(artifacts, sha256s) of a finished build whose files still hold the recorded bytes."""
    manifest = out / "manifest.json"
    if not manifest.is_file():
        return None
    m = json.loads(manifest.read_text())
    arts = {n: Path(a["path"]) for n, a in m["artifacts"].items()}
    if all(p.is_file() and sha256_file(p) == m["artifacts"][n]["sha256"] for n, p in arts.items()):
        if "coverage" in m and not any(Path(m["coverage"]["build_dir"]).rglob("*.gcno")):
            return None  # a coverage build without its notes files is of no use
        return arts, {n: m["artifacts"][n]["sha256"] for n in arts}
    return None


def _coverage_of(out: Path) -> dict | None:
    return json.loads((out / "manifest.json").read_text()).get("coverage")


def _publish(staging: Path, out: Path) -> bool:
    """Rename the finished staging folder to `out`; False when another build already holds `out`
    with valid artifacts (a stale or broken `out` is replaced)."""
    for _ in range(2):
        try:
            os.rename(staging, out)
            return True
        except OSError:
            if _cached(out) is not None:
                return False
            shutil.rmtree(out, ignore_errors=True)
    return False
