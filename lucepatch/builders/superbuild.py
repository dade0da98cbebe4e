"""Native builds of a CMake superproject with sub-targets (Lucebox) for one profile.

plan_for()           what is configured and built: the profile's cmake arguments (arch list from
                     the profile unless overridden), the targets, the runtime payload (binaries,
                     every *.so* of the build tree, [build] share folders). The image's Dockerfile
                     is rendered from the same Plan, so `build --image` builds exactly this.
build_superproject   the patched (or baseline) trees of the superproject and every [[submodule]]
                     (tree.prepare_tree), cmake + ninja with -j = this machine's cores, cached
                     under <cache>/superbuilds/<key> (key: the applied trees, the plan, the
                     toolchain), then the payload in app/{bin,lib,share}, sha256 of every file,
                     SASS per library and per object (lucepatch.native.elf) against the profile's arch
                     list, and the closure of the payload (lucepatch.native.elf.resolve_closure).

Network: configure runs with FETCHCONTENT_FULLY_DISCONNECTED=ON, so a missing nlohmann_json is a
clear configure error instead of a download attempt (F9).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from lucepatch import git, report
from lucepatch.builders import driverless
from lucepatch.builders.probe import resolve_profile, summarize_errors
from lucepatch.builders.tree import prepare_tree
from lucepatch.errors import CheckFailed, EnvironmentMissing, UsageError
from lucepatch.files import sha256_file
from lucepatch.native import elf, toolchain
from lucepatch.target import Target

# part of the key: a payload judged ok by an older closure rule (before the C++-runtime check) is rebuilt
PAYLOAD_RULE = 2
ALLOWED_MISSING = ["libcuda.so.1", "libnvidia-ml.so.1"]  # the host driver's, mounted at run time
DISCONNECTED = "-DFETCHCONTENT_FULLY_DISCONNECTED=ON"


@dataclass
class Plan:
    source_dir: str
    cmake_args: list[str]
    targets: list[str]
    binaries: list[str]
    share: list[str]
    cuda_archs: list[str]
    arch_variable: str = ""
    generator: str = "Ninja"

    def args(self, archs: str | None = None) -> list[str]:
        """cmake arguments; `archs` replaces the arch list (e.g. "${CUDA_ARCHITECTURES}" in a Dockerfile)."""
        if not self.arch_variable or archs is None:
            return list(self.cmake_args)
        pre = f"-D{self.arch_variable}="
        return [f"{pre}{archs}" if a.startswith(pre) else a for a in self.cmake_args]

    def configure(self, src: str, bdir: str, extra: list[str] = ()) -> list[str]:
        return ["cmake", "-G", self.generator, "-S", src, "-B", bdir, *self.args(), *extra]

    def build(self, bdir: str, jobs: int) -> list[str]:
        return ["cmake", "--build", bdir, "-j", str(jobs), "--target", *self.targets]

    def to_json(self) -> dict:
        return {"source_dir": self.source_dir, "cmake_args": self.cmake_args, "targets": self.targets,
                "binaries": self.binaries, "share": self.share, "cuda_archs": self.cuda_archs,
                "generator": self.generator}


def plan_for(target: Target, profile: dict, *, cuda_archs: list[str] | None = None) -> Plan:
    b = target.build
    binaries = list(b.binaries or b.targets)
    if not binaries:
        raise UsageError(f"target {target.name}: [build] binaries (or targets) is empty in {target.toml_path}")
    archs = [str(a) for a in (cuda_archs if cuda_archs is not None else (profile.get("cuda_archs") or []))]
    var = b.arch_variable
    args = list(profile.get("cmake_args") or [])
    if var and cuda_archs is not None:
        pre = f"-D{var}="
        args = [a for a in args if not a.startswith(pre)] + [pre + ";".join(archs)]
    if DISCONNECTED not in args:
        args.append(DISCONNECTED)
    return Plan(b.source_dir.strip("/") or ".", args, list(b.targets or binaries), binaries,
                list(b.share), archs, var, str(profile.get("generator") or "Ninja").strip("'"))


# ---------------------------------------------------------------------------------- reports
def _real_elfs(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file() and not p.is_symlink() and elf.is_elf(p))


def _num(s: str) -> int:
    return int(re.sub(r"\D", "", s))


def sass_report(app: Path, build_dir: Path | None, cuda_archs: list[str]) -> dict:
    """SASS per library of the payload and per object of the build tree, against the arch list.

    A library's SASS set is the union over the fatbins of every object linked into it, so a
    listing such as `cuobjdump --list-elf libggml-cuda.so*` answers "which objects carry what"
    only when read per fatbin / per object: that is what `objects` gives."""
    want = sorted({_num(a) for a in cuda_archs})
    libs = {}
    for p in _real_elfs(app):
        code = elf.gpu_code(p)
        if not code.fatbins:
            continue
        have = code.sass_numbers()
        sets: dict[str, int] = {}
        for entries in code.per_fatbin:
            k = ",".join(sorted({e for e in entries if e.startswith("sm_")}, key=_num)) or "(PTX only)"
            sets[k] = sets.get(k, 0) + 1
        libs[str(p.relative_to(app))] = {
            "sass": code.sass, "ptx": code.ptx, "fatbins": code.fatbins, "fatbins_by_sass": sets,
            "arch_specific": [s for s in code.sass if s.endswith("a")],
            "missing": [f"sm_{w}" for w in want if w not in have],
            "unexpected": [s for s in code.sass if _num(s) not in want] if want else [],
        }
    objects: dict[str, dict[str, int]] = {}
    if build_dir and build_dir.is_dir():
        for o in sorted(build_dir.rglob("*.o")):
            if not o.is_file() or re.search(r"/CMakeFiles/\d[^/]*/", str(o)):  # CMake's compiler checks
                continue
            try:
                code = elf.gpu_code(o)
            except ValueError:
                continue
            if not code.fatbins:
                continue
            m = re.search(r"CMakeFiles/([^/]+)\.dir/", str(o))
            tgt = m.group(1) if m else str(o.parent.relative_to(build_dir))
            k = ",".join(sorted(code.sass, key=_num)) or "(PTX only)"
            objects.setdefault(tgt, {})
            objects[tgt][k] = objects[tgt].get(k, 0) + 1
    ok = all(not v["missing"] and not v["unexpected"] and not v["arch_specific"] for v in libs.values())
    return {"expected": [f"sm_{w}" for w in want], "libraries": libs, "objects": objects, "ok": ok}


def arch_flags_per_target(build_dir: Path, targets: list[str]) -> dict[str, dict[str, int]]:
    """The --generate-code/-arch flags of every CUDA compile in the plan, per CMake target."""
    r = subprocess.run(["ninja", "-C", str(build_dir), "-t", "commands", *targets], capture_output=True, text=True)
    out: dict[str, dict[str, int]] = {}
    for line in r.stdout.splitlines():
        if " -c " not in line or "nvcc" not in line:
            continue
        m = re.search(r"CMakeFiles/([^/]+)\.dir/", line)
        flags = " ".join(sorted(set(re.findall(r"--generate-code=\S+|-arch[= ]\S+|-gencode[= ]\S+", line)))) or "(none)"
        tgt = m.group(1) if m else "?"
        out.setdefault(tgt, {})
        out[tgt][flags] = out[tgt].get(flags, 0) + 1
    return out


# ---------------------------------------------------------------------------------- build
@dataclass
class SuperBuild:
    target: str
    profile: str
    variant: str
    key: str
    plan: Plan
    repos: list[dict]
    ok: bool
    cached: bool = False
    out: Path | None = None
    configure_s: float = 0.0
    build_s: float = 0.0
    steps_total: int = 0
    steps_done: int = 0
    jobs: int = 0
    failure: dict = field(default_factory=dict)
    files: dict[str, str] = field(default_factory=dict)  # payload path -> sha256
    sass: dict = field(default_factory=dict)
    arch_flags: dict = field(default_factory=dict)
    closure: dict = field(default_factory=dict)
    build_dir: str | None = None
    source_root: str | None = None
    log: str | None = None

    def to_json(self) -> dict:
        return {"target": self.target, "profile": self.profile, "variant": self.variant, "key": self.key,
                "ok": self.ok, "cached": self.cached, "out": str(self.out) if self.out else None,
                "plan": self.plan.to_json(), "repos": self.repos, "jobs": self.jobs,
                "configure_s": round(self.configure_s, 1), "build_s": round(self.build_s, 1),
                "total_s": round(self.configure_s + self.build_s, 1),
                "steps_total": self.steps_total, "steps_done": self.steps_done, "failure": self.failure,
                "files": self.files, "sass": self.sass, "arch_flags": self.arch_flags, "closure": self.closure,
                "build_dir": self.build_dir, "source_root": self.source_root, "log": self.log}


def _tree_id(path: Path) -> str:
    return git.tree_of(path)


def _fingerprint(needs: list[str]) -> dict:
    fp = {"cmake": toolchain.version_line("cmake"), "ninja": toolchain.version_line("ninja"),
          "cc": toolchain.version_line("cc")}
    # the compilers CMake picks from the environment: two of one GCC version can link differently (the GPU
    # machine's /opt/gcc wrapper links libstdc++ statically, /usr/bin/g++ shared), so where they live is
    # part of the key, not only the version
    for var, default in (("CC", "cc"), ("CXX", "c++"), ("CUDAHOSTCXX", None), ("CUDACXX", "nvcc")):
        words = shlex.split(os.environ.get(var, "")) or ([default] if default else [])
        if not words:
            continue
        # `CC="ccache gcc"`: the compiler is the first word that is not a launcher; unset, CMake takes PATH's
        tool = next((w for w in words if os.path.basename(w) not in ("ccache", "sccache")), words[0])
        found = shutil.which(tool)
        fp[var] = [os.path.realpath(found) if found else tool, toolchain.version_line(found or tool), words[1:]]
    nvcc = shutil.which("nvcc")
    if nvcc:
        out = subprocess.run([nvcc, "--version"], capture_output=True, text=True).stdout.strip().splitlines()
        fp["nvcc"] = out[-1] if out else "unknown"
    for h in needs:
        p = toolchain.cuda_include() / h
        fp[h] = sha256_file(p) if p.is_file() else "absent"
    return fp


def require_tools(target: Target, plan: Plan) -> None:
    toolchain.require("cmake", "install cmake (apt-get install cmake)")
    toolchain.require("ninja", "install ninja (apt-get install ninja-build)")
    if plan.cuda_archs:
        if not shutil.which("nvcc"):
            raise EnvironmentMissing("nvcc not found: install the CUDA toolkit and put its bin/ on PATH")
        inc = toolchain.cuda_include()
        for h in target.build.needs_headers:
            if not (inc / h).is_file():
                raise EnvironmentMissing(f"{h} not found in {inc}: a full build of {target.name} needs it "
                                         f"(a CUDA devel image or toolkit with cuBLAS; the probes need none)")


def _ninja_progress(log: str) -> tuple[int, int]:
    done = total = 0
    for m in re.finditer(r"^\[(\d+)/(\d+)\]", log, re.M):
        done, total = int(m.group(1)), int(m.group(2))
    return done, total


def _payload(plan: Plan, tree_src: Path, bdir: Path, app: Path) -> None:
    (app / "bin").mkdir(parents=True)
    (app / "lib").mkdir()
    for b in plan.binaries:
        if (bdir / b).is_file():
            shutil.copy2(bdir / b, app / "bin" / b)
    for p in sorted(bdir.rglob("*.so*")):
        if (p.is_file() or p.is_symlink()) and not (app / "lib" / p.name).exists():
            if p.is_symlink():
                os.symlink(os.readlink(p), app / "lib" / p.name)
            elif elf.is_elf(p):
                shutil.copy2(p, app / "lib" / p.name)
    for rel in plan.share:
        src = tree_src / rel
        if src.is_dir():
            shutil.copytree(src, app / rel, symlinks=True)


def build_superproject(target: Target, source: Path, profile_name: str | None, cache: Path, *,
                       variant: str = "patched", jobs: int | None = None, keep_build: bool = False,
                       cuda_archs: list[str] | None = None, extra_cmake_args: list[str] = ()) -> SuperBuild:
    pname, profile = resolve_profile(target, profile_name)
    plan = plan_for(target, profile, cuda_archs=cuda_archs)
    plan.cmake_args += list(extra_cmake_args)
    require_tools(target, plan)
    jobs = jobs or os.cpu_count() or 2
    with contextlib.ExitStack() as stack:
        tree = prepare_tree(target, source, variant, cache, stack, nested=True)
        repos = [dict(r, tree=_tree_id(tree.root / r["path"])) for r in tree.repos]
        key_doc = {"target": target.name, "variant": variant, "rule": PAYLOAD_RULE, "repos": [(r["path"], r["tree"]) for r in repos],
                   "plan": plan.to_json(), "toolchain": _fingerprint(list(target.build.needs_headers))}
        key = hashlib.sha256(json.dumps(key_doc, sort_keys=True).encode()).hexdigest()[:24]
        out = cache / "superbuilds" / key
        res = SuperBuild(target.name, pname, variant, key, plan, repos, ok=False, out=out, jobs=jobs)
        manifest = out / "manifest.json"
        if manifest.is_file() and not keep_build:
            m = json.loads(manifest.read_text())
            if all((out / "app" / f).is_file() and sha256_file(out / "app" / f) == s for f, s in m["files"].items()):
                for k in ("configure_s", "build_s", "steps_total", "steps_done", "files", "sass", "arch_flags", "closure"):
                    setattr(res, k, m[k])
                res.ok, res.cached, res.jobs, res.log = True, True, m["jobs"], m.get("log")
                return res
        staging = out.with_name(out.name + f".tmp{os.getpid()}")
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
        root = tree.root
        if keep_build:
            # a kept build tree must outlive the work areas (reclaimed once this process exits):
            # build from a copy of the applied trees (no .git: `git apply -R` still works there)
            root = out.with_name(out.name + "-src")
            shutil.rmtree(root, ignore_errors=True)
            shutil.copytree(tree.root, root, symlinks=False, ignore=shutil.ignore_patterns(".git"))
            bdir = out.with_name(out.name + "-build")
            shutil.rmtree(bdir, ignore_errors=True)
            res.build_dir, res.source_root = str(bdir), str(root)
        else:
            bdir = staging / "build"
        bdir.mkdir(parents=True)
        log_path = staging / "build.log"
        src = root / plan.source_dir
        env = {k: v for k, v in os.environ.items() if k not in ("CUDAARCHS", "CMAKE_CUDA_ARCHITECTURES")}
        report.progress(f"building {target.name} {variant} / {pname} with -j {jobs} in {bdir}")
        with open(log_path, "w") as log:
            for phase, cmd in (("configure", plan.configure(str(src), str(bdir))), ("build", plan.build(str(bdir), jobs))):
                log.write("$ " + shlex.join(cmd) + "\n")
                log.flush()
                t0 = time.monotonic()
                rc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, env=env).returncode
                setattr(res, f"{phase}_s", time.monotonic() - t0)
                if phase == "configure" and rc == 0:
                    n = subprocess.run(["ninja", "-C", str(bdir), "-t", "commands", *plan.targets],
                                       capture_output=True, text=True).stdout
                    res.steps_total = len([l for l in n.splitlines() if l.strip()])
                    res.arch_flags = arch_flags_per_target(bdir, plan.targets)
                if rc != 0:
                    log.flush()
                    text = log_path.read_text(errors="replace")
                    first, count = summarize_errors(text.split("$ ", 2)[-1] if phase == "build" else text)
                    m = re.search(r"^CMake Error[^\n]*\n((?:[ \t]+[^\n]*\n|\n)+)", text, re.M)
                    if phase == "configure" and m:  # CMake says what is wrong in the indented lines after
                        words = " ".join(l.strip() for l in m.group(1).splitlines() if l.strip())
                        first = f"{first.rstrip(':')}: {words[:240]}"
                    if phase == "configure" and "nlohmann_json" in text:
                        first = (first or "nlohmann_json not found") + " (downloads are off: apt-get install " \
                            "nlohmann-json3-dev, or pass -Dnlohmann_json_DIR=<dpkg -x of nlohmann-json3-dev>/usr/share/cmake/nlohmann_json)"
                    res.steps_done, total = _ninja_progress(text)
                    res.steps_total = total or res.steps_total
                    res.failure = {"phase": phase, "first_error": first, "error_lines": count, "rc": rc}
                    break
        if res.failure:
            kept = cache / "logs" / f"superbuild-{target.name}-{variant}-{pname}-{key}.log"
            kept.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(log_path, kept)
            res.log = str(kept)
            shutil.rmtree(staging, ignore_errors=True)
            return res
        res.steps_done, _ = _ninja_progress(log_path.read_text(errors="replace"))
        app = staging / "app"
        _payload(plan, root, bdir, app)
        missing = [b for b in plan.binaries if not (app / "bin" / b).is_file()]
        res.files = {str(p.relative_to(app)): sha256_file(p)
                     for p in sorted(app.rglob("*")) if p.is_file() and not p.is_symlink()}
        res.sass = sass_report(app, bdir, plan.cuda_archs)
        roots = [app / "bin" / b for b in plan.binaries if (app / "bin" / b).is_file()] + _real_elfs(app / "lib")
        cl = elf.resolve_closure(roots, allowed_missing=ALLOWED_MISSING)
        res.closure = cl.to_json()
        res.closure["missing"] = {str(Path(k).relative_to(staging)) if k.startswith(str(staging)) else k: v
                                  for k, v in cl.missing.items()}
        res.ok = not missing and cl.ok
        if missing:
            res.failure = {"phase": "payload", "first_error": f"the build did not produce {', '.join(missing)}"}
        elif not cl.ok:
            res.failure = {"phase": "closure", "first_error": "; ".join(cl.lines())}
        res.log = str(out / "build.log")
        if not keep_build:
            shutil.rmtree(bdir)
        shutil.rmtree(out, ignore_errors=True)
        os.replace(staging, out)
        if res.ok:
            manifest.write_text(json.dumps(res.to_json() | {"inputs": key_doc}, indent=1))
        res.out = out
        return res


# ---------------------------------------------------------------------------------- drop a fix
def relink_dropping(build_dir: Path, repo_dir: Path, patch: Path, targets: list[str]) -> dict:
    """Revert `patch` in a kept build's sources (`repo_dir`: the repository it applies to), rebuild
    `targets` in the same build tree (only what the change invalidates: re-configure + links),
    then put the patch back. Where the machine has a libcuda.so.1 (a GPU host), the rebuild runs
    in a private mount namespace with each one covered by an empty file: what a driver-less
    builder (a CUDA devel image) sees. Returns the rebuild's verdict and its undefined symbols."""
    # A kept tree is a copy without .git. Inside some other repository (any folder above it, up to /)
    # git apply would take the patch's paths as that repository's, skip every one of them as outside
    # the current folder and exit 0: the re-link would then test the tree with the patch still in.
    # So no repository above repo_dir is looked for, and the revert is checked to have happened.
    env = {"GIT_CEILING_DIRECTORIES": str(Path(repo_dir).resolve().parent)}
    touched = [Path(repo_dir, l.split("\t", 2)[2]) for l in
               git.run(repo_dir, "apply", "--numstat", str(patch), env=env).stdout.splitlines() if l.count("\t") >= 2]
    before = [f.read_bytes() if f.is_file() else None for f in touched]
    r = git.run(repo_dir, "apply", "-R", str(patch), check=False, env=env)
    if r.status != 0:
        raise UsageError(f"cannot revert {patch.name} in {repo_dir}: {r.stderr.strip()[:200]}")
    if [f.read_bytes() if f.is_file() else None for f in touched] == before:
        raise CheckFailed(f"git apply -R {patch.name} in {repo_dir} changed none of its files; "
                          "the re-link would test the tree with the patch still in")
    try:
        build = f"cmake --build {shlex.quote(str(build_dir))} --target {' '.join(shlex.quote(t) for t in targets)}"
        libs = driverless.driver_libraries()
        visible = libs if libs and not driverless.can_mask() else []
        if visible:
            libs = []  # not root / no unshare: the re-link sees the driver, and the result says so
        has_driver = bool(libs)
        t0 = time.monotonic()
        p = subprocess.run(driverless.masked(build, libs), capture_output=True, text=True, env=driverless.masked_env(build))
        seconds = time.monotonic() - t0
    finally:
        git.run(repo_dir, "apply", str(patch), check=False, env=env)
    log = p.stdout + p.stderr
    first, count = summarize_errors(log)
    return {"patch": patch.name, "targets": targets, "rc": p.returncode, "seconds": round(seconds, 1),
            "driver_masked": has_driver, "masked_libraries": libs, "driver_visible": visible, "steps_rerun": len(re.findall(r"^\[\d+/\d+\]", log, re.M)),
            "undefined": sorted(set(re.findall(r"undefined reference to `([A-Za-z_0-9]+)'", log))),
            "not_found_warning": next((l.strip() for l in log.splitlines() if "libcuda.so.1, needed by" in l), ""),
            "first_error": first, "error_lines": count, "log_tail": log.splitlines()[-25:]}
