"""Probes: prove each build fix of a series by the content of what a small build produces.

A full Lucebox CUDA build takes 35-45 min on 2 cores and the field failure (F6) only shows at its
very end. A probe configures the real (patched or baseline) tree with the profile, then builds
only what a fix touches: one translation unit (`compile`: which SASS the object carries), the real
link commands of one executable against one-TU stand-ins (`link`), the same after copying into a
runtime-like folder (`runpath`), or the generated target list (`targets`). Probes are data
(patches/<target>/probes.toml); a patch names its probe with a `Probe:` trailer.

The tree a probe configures is the patched (or baseline) superproject with its submodules
(builders/tree.py, shared with the image and superproject builds).

Long: one runner for the four kinds of probe (compile, link, runpath, targets): they share the
configured build tree, the stand-ins, the compile commands read from it and the error summary;
the tree is builders/tree.py's, the stand-ins builders/standins.py's.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import os
import re
import shlex
import shutil
import subprocess
import tempfile
import time
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from lucepatch import git, report
from lucepatch.builders import driverless
from lucepatch.builders.standins import StandIns, make_stand_ins
from lucepatch.builders.tree import AppliedTree, prepare_tree
from lucepatch.engine.apply import WorkArea
from lucepatch.errors import CheckFailed, EnvironmentMissing, UsageError
from lucepatch.native import elf, toolchain
from lucepatch.native.elf import GpuCode, is_elf
from lucepatch.target import Target, sub_target

KINDS = ("compile", "link", "runpath", "targets", "commands")
PASS, FAIL, ERROR, NA = "pass", "fail", "error", "n/a"



def find_cuobjdump() -> str | None:
    cands = [shutil.which("cuobjdump")]
    for home in (os.environ.get("CUDA_HOME"), "/usr/local/cuda"):
        if home:
            cands.append(str(Path(home) / "bin" / "cuobjdump"))
    spec = importlib.util.find_spec("nvidia")
    if spec and spec.submodule_search_locations:
        for root in spec.submodule_search_locations:
            cands += [str(p) for p in sorted(Path(root).glob("cu*/bin/cuobjdump"), reverse=True)]
    for c in cands:
        if c and os.path.isfile(c) and os.access(c, os.X_OK):
            return c
    return None


def cuobjdump_list(path: Path, tool: str | None = None) -> GpuCode | None:
    """cuobjdump's own --list-elf/--list-ptx of a file (a cross-check of lucepatch.native.elf), or None."""
    tool = tool or find_cuobjdump()
    if not tool:
        return None
    code = GpuCode(tool=tool)
    for flag, dest, rx in (("--list-elf", code.sass, r"\.(sm_\d+[a-z]?)\.cubin"),
                           ("--list-ptx", code.ptx, r"\.(sm_\d+[a-z]?)\.ptx")):
        r = subprocess.run([tool, flag, str(path)], capture_output=True, text=True)
        for m in re.finditer(rx, r.stdout):
            v = m.group(1) if dest is code.sass else m.group(1).replace("sm_", "compute_")
            if v not in dest:
                dest.append(v)
    return code


def list_gpu_code(path: Path) -> GpuCode:
    """SASS/PTX of an object, read from its fatbin entry headers (lucepatch.native.elf)."""
    try:
        return elf.gpu_code(path)
    except UsageError as exc:
        # what the compiler wrote is not an ELF64 object (or a truncated one): the probe fails
        # with that, it is not a lucepatch bug
        raise _ProbeFail(f"{Path(path).name} is not a readable ELF64 object ({exc})")


# ---------------------------------------------------------------------------------- data model
@dataclass
class ProbeSpec:
    name: str
    fix: str
    title: str
    kind: str
    data: dict
    signature: str
    patches: list[str] = field(default_factory=list)  # patch names carrying `Probe: <name>`

    def to_json(self) -> dict:
        return {"name": self.name, "fix": self.fix, "title": self.title, "kind": self.kind,
                "signature": self.signature, "patches": self.patches}


@dataclass
class ProbeResult:
    spec: ProbeSpec
    variant: str
    status: str  # pass / fail / error
    detail: str = ""
    first_error: str = ""
    error_count: int = 0
    seconds: float = 0.0
    evidence: dict = field(default_factory=dict)

    @property
    def substituted(self) -> bool:
        return bool(self.evidence.get("tu_substituted"))

    @property
    def signature_matched(self) -> bool:
        text = "\n".join([self.detail, self.first_error, self.evidence.get("log_excerpt", "")])
        return bool(self.spec.signature and re.search(self.spec.signature, text))

    @property
    def as_declared(self) -> bool:
        """patched: passes; baseline: fails with the declared signature; n/a: the configuration
        cannot exhibit the failure (e.g. no driver library linked), on both variants."""
        if self.status == NA:
            return True
        if self.variant == "patched" or self.spec.data.get("guard"):  # a guard holds on both variants
            return self.status == PASS
        return self.status == FAIL and self.signature_matched

    def to_json(self) -> dict:
        return {"probe": self.spec.name, "fix": self.spec.fix, "kind": self.spec.kind, "variant": self.variant,
                "status": self.status, "as_declared": self.as_declared,
                "signature": self.spec.signature, "signature_matched": self.signature_matched,
                "detail": self.detail, "first_error": self.first_error, "error_count": self.error_count,
                "seconds": round(self.seconds, 2), "substituted": self.substituted, "evidence": self.evidence,
                "patches": self.spec.patches}


def load_probes(target: Target) -> tuple[list[ProbeSpec], dict]:
    path = target.dir / "probes.toml"
    if not path.is_file():
        raise UsageError(f"target {target.name} has no probes: write {path}")
    try:
        doc = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"{path} is not valid TOML: {exc}")
    by_probe: dict[str, list[str]] = {}
    for sub_t in [target] + [sub_target(target, s) for s in target.submodules]:
        for p in sub_t.patches:
            for name in p.trailer_all("Probe"):
                by_probe.setdefault(name.strip(), []).append(p.name)
    specs = []
    for name, d in (doc.get("probe") or {}).items():
        kind = d.get("kind")
        if kind not in KINDS:
            raise UsageError(f"{path}: probe {name}: kind {kind!r} must be one of {', '.join(KINDS)}")
        specs.append(ProbeSpec(name, d.get("fix", ""), d.get("title", name), kind, d, d.get("signature", ""),
                               by_probe.get(name, [])))
    known = {s.name for s in specs}
    for name, pnames in by_probe.items():
        if name not in known:
            raise UsageError(f"patch {pnames[0]} names probe {name!r}, which {path} does not define")
    return specs, doc.get("stand_ins", {})


def resolve_profile(target: Target, name: str | None) -> tuple[str, dict]:
    profiles = target.profiles
    if not profiles:
        raise UsageError(f"target {target.name} defines no [profiles.*] in {target.toml_path}")
    if name is None:
        name = next(iter(profiles))
    if name not in profiles:
        raise UsageError(f"unknown profile {name!r} of {target.name}; known: {', '.join(profiles)}")
    chain, cur = [], name
    while cur:
        if cur in chain:
            raise UsageError(f"profile {name!r} of {target.name}: inherits loops through {cur!r}")
        if cur not in profiles:
            raise UsageError(f"profile {chain[-1]!r} inherits unknown profile {cur!r}")
        chain.append(cur)
        cur = profiles[cur].inherits
    merged: dict = {}
    for pname in reversed(chain):
        for k, v in profiles[pname].settings().items():
            if k == "cmake_args":
                merged["cmake_args"] = merged.get("cmake_args", []) + list(v)
            elif k != "inherits":
                merged[k] = v
    merged["name"] = name
    merged["hash"] = hashlib.sha256(repr(sorted((k, repr(v)) for k, v in merged.items())).encode()).hexdigest()[:16]
    return name, merged


# ---------------------------------------------------------------------------------- stand-ins
def _run(cmd, cwd=None, env=None, timeout=1800, shell=False) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, cwd=cwd, env=env, timeout=timeout, shell=shell, capture_output=True, text=True,
                          errors="replace", executable="/bin/bash" if shell else None)


# ---------------------------------------------------------------------------------- helpers
_ERR = re.compile(r"(\berror\b|fatal|undefined reference|not found \(try using|cannot find -l)", re.I)
_NOT_ERR = re.compile(r"-Werror|warning #|Wno-error", re.I)


def summarize_errors(log: str) -> tuple[str, int]:
    """The first error line and how many error lines there are (not 10,000 lines)."""
    lines = [l.strip() for l in log.splitlines() if _ERR.search(l) and not _NOT_ERR.search(l)]
    return (lines[0][:300] if lines else ""), len(lines)


def excerpt(log: str, n: int = 12) -> str:
    lines = [l for l in log.splitlines() if _ERR.search(l) and not _NOT_ERR.search(l)]
    return "\n".join(l[:300] for l in lines[:n])


def _ld_so() -> str:
    for p in ("/lib64/ld-linux-x86-64.so.2", "/lib/ld-linux-aarch64.so.1", "/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2"):
        if os.path.exists(p):
            return p
    raise EnvironmentMissing("no ld.so found (expected /lib64/ld-linux-x86-64.so.2)")


def loader_list(path: Path, si: "StandIns", allowed: list[str]) -> dict:
    """`ld.so --list` with stub libraries for the allowed-missing names on LD_LIBRARY_PATH.

    Without them the loader stops at the first library it cannot open (the driver, on a build
    machine) and never lists the rest; with them it lists the whole closure when everything else
    resolves, or stops at the first really missing library. A second implementation beside
    resolve_closure: the two must agree."""
    stubs = [n for n in allowed if (si.driver / n).is_file()]
    if len(stubs) != len(allowed):
        return {"ran": False, "lines": [], "missing": []}
    env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
    with tempfile.TemporaryDirectory(prefix="lp-ldlist-") as d:
        for n in stubs:
            os.symlink(si.driver / n, Path(d) / n)
        env["LD_LIBRARY_PATH"] = d
        r = _run([_ld_so(), "--list", str(path)], env=env)
    text = r.stdout + r.stderr
    missing = set(re.findall(r"^\s*(\S+) => not found", text, re.M))
    missing |= set(re.findall(r"error while loading shared libraries: (\S+): cannot open", text))
    return {"ran": True, "lines": text.strip().splitlines(), "missing": sorted(missing)}


# ---------------------------------------------------------------------------------- the runner
class ProbeRunner:
    def __init__(self, target: Target, tree: AppliedTree, profile: dict, stand_ins: StandIns, stand_cfg: dict,
                 work: Path, *, jobs: int | None = None):
        self.target, self.tree, self.profile, self.si, self.cfg = target, tree, profile, stand_ins, stand_cfg
        self.work = work
        self.src = tree.root / (target.build.source_dir if target.build else ".")
        self.configured: dict[tuple, tuple[Path, str, int]] = {}
        self.env = {k: v for k, v in os.environ.items() if k not in ("CUDAARCHS", "CMAKE_CUDA_ARCHITECTURES")}
        # devel images export LIBRARY_PATH=<cuda>/lib64/stubs; it does not resolve indirect NEEDED entries
        self.env["LIBRARY_PATH"] = str(stand_ins.stubs)

    # -- configure -----------------------------------------------------------------------
    def args_for(self, spec: ProbeSpec) -> list[str]:
        args = list(self.profile.get("cmake_args", []))
        for prefix in spec.data.get("drop", []):
            args = [a for a in args if not a.startswith(prefix + "=") and a != prefix]
        args += list(spec.data.get("cmake_args", []))
        return args

    def configure(self, args: list[str]) -> tuple[Path, str, int]:
        key = tuple(args)
        if key in self.configured:
            return self.configured[key]
        bdir = self.work / ("b-" + hashlib.sha256("\0".join(key).encode()).hexdigest()[:10])
        nvcc = shutil.which("nvcc") or str(toolchain.cuda_home() / "bin" / "nvcc")
        cmd = ["cmake", "-G", "Ninja", "-S", str(self.src), "-B", str(bdir), f"-DCMAKE_CUDA_COMPILER={nvcc}",
               *self.si.cmake_args(), *args]
        r = _run(cmd, env=self.env)
        log = "$ " + shlex.join(cmd) + "\n" + r.stdout + r.stderr
        self.configured[key] = (bdir, log, r.returncode)
        return self.configured[key]

    def commands(self, bdir: Path, target_name: str) -> list[str]:
        r = _run(["ninja", "-C", str(bdir), "-t", "commands", target_name])
        if r.returncode != 0:
            raise _ProbeFail(f"target {target_name} is not in the generated build ({r.stderr.strip()[:160]})")
        return [l for l in r.stdout.splitlines() if l.strip()]

    # -- kinds ---------------------------------------------------------------------------
    def run(self, spec: ProbeSpec) -> ProbeResult:
        t0 = time.monotonic()
        res = ProbeResult(spec, self.tree.variant, ERROR)
        only = spec.data.get("only_on")
        if only and only != self.tree.variant:  # e.g. a retired fix: its probe on the line that dropped it
            res.status = NA
            res.detail = f"not run on the {self.tree.variant} variant: {spec.data.get('why', 'only_on ' + only)}"
            return res
        try:
            args = self.args_for(spec)
            bdir, log, rc = self.configure(args)
            res.evidence["cmake_args"] = args
            if rc != 0:
                res.status = FAIL
                res.first_error, res.error_count = summarize_errors(log)
                res.detail = "cmake configure failed"
                res.evidence["log_excerpt"] = excerpt(log)
            else:
                getattr(self, f"_probe_{spec.kind}")(spec, bdir, res)
        except _ProbeFail as exc:
            res.status, res.detail = FAIL, str(exc)
        except _NotApplicable as exc:
            res.status, res.detail = NA, str(exc)
        except subprocess.TimeoutExpired as exc:
            res.status, res.detail = ERROR, f"timed out: {str(exc.cmd)[:120]}"
        except (EnvironmentMissing, OSError) as exc:
            res.status, res.detail = ERROR, str(exc)
        res.seconds = time.monotonic() - t0
        return res

    def _probe_targets(self, spec, bdir, res):
        r = _run(["ninja", "-C", str(bdir), "-t", "targets", "all"])
        present = {l.split(":", 1)[0].strip() for l in r.stdout.splitlines() if ":" in l}
        want = spec.data.get("expect", {}).get("targets", [])
        missing = [t for t in want if t not in present]
        res.evidence["targets_checked"] = {t: (t in present) for t in want}
        res.evidence["generated_targets"] = len(present)
        if missing:
            res.status = FAIL
            res.detail = f"missing target{'s' if len(missing) > 1 else ''}: {', '.join(missing)}"
            res.first_error, res.error_count = res.detail, len(missing)
        else:
            res.status, res.detail = PASS, f"all {len(want)} targets generated"

    def _probe_commands(self, spec, bdir, res):
        """What CMake generated, nothing built: the commands of `target` (only the one compiling
        `tu`, when named) must match every `expect.present` regex and none of `expect.absent` —
        arch flags, -march, defines and which TUs are built are the generator's decisions."""
        cmds = self.commands(bdir, spec.data.get("target", "all"))
        tu = spec.data.get("tu")
        if tu:
            cmd = self._find_compile(cmds, tu)
            if cmd is None:
                raise _ProbeFail(f"{tu} is not compiled for {spec.data.get('target')} in this configuration")
            cmds = [cmd]
            res.evidence["arch_flags"] = re.findall(r"--generate-code=\S+|-arch[= ]\S+|-gencode[= ]\S+", cmd)
        exp = spec.data.get("expect", {})
        lines = "\n".join(cmds)
        missing = [rx for rx in exp.get("present", []) if not re.search(rx, lines)]
        found = {rx: next(c for c in cmds if re.search(rx, c))[:300] for rx in exp.get("absent", []) if re.search(rx, lines)}
        res.evidence["commands_read"] = len(cmds)
        res.evidence["matched_absent"] = found
        problems = [f"no command matches /{rx}/" for rx in missing] + [f"a command matches /{rx}/" for rx in found]
        if problems:
            res.status, res.detail = FAIL, "; ".join(problems)
            res.first_error, res.error_count = problems[0], len(problems)
        else:
            res.status = PASS
            res.detail = (f"{len(cmds)} command(s) of {spec.data.get('target', 'all')}{' for ' + tu if tu else ''}: "
                          f"{len(exp.get('present', []))} pattern(s) present, {len(exp.get('absent', []))} absent")

    def _find_compile(self, cmds: list[str], tu: str) -> str | None:
        for c in cmds:
            if " -c " in c and (f"/{tu} " in c + " " or c.rstrip().endswith(tu)):
                return c
        return None

    def _probe_compile(self, spec, bdir, res):
        tu = spec.data["tu"]
        cmds = self.commands(bdir, spec.data.get("target", "all"))
        cmd = self._find_compile(cmds, tu)
        if cmd is None:
            raise _ProbeFail(f"{tu} is not compiled for {spec.data.get('target')} in this configuration")
        m = re.search(r"\s-o\s+(\S+)", cmd)
        obj = bdir / m.group(1)
        obj.parent.mkdir(parents=True, exist_ok=True)
        res.evidence["compile_command"] = cmd
        res.evidence["arch_flags"] = re.findall(r"--generate-code=\S+|-arch[= ]\S+|-gencode[= ]\S+", cmd)
        r = _run(cmd, cwd=bdir, env=self.env, shell=True)
        out = r.stdout + r.stderr
        missing_hdr = re.search(r"fatal error: (\S+): No such file or directory", out)
        allowed_hdrs = set(self.cfg.get("substitute_for", []))
        if r.returncode != 0 and missing_hdr and self.cfg.get("substitute_kernel") \
                and os.path.basename(missing_hdr.group(1)) in allowed_hdrs:
            # This machine lacks a header the toolkit ships outside the compiler (cuBLAS on a
            # PyPI-only CUDA, named in [stand_ins] substitute_for): compile the same command line
            # with a substitute kernel. Which SASS is emitted depends on the command line only,
            # which is what an arch fix changes. Any other missing header is the tree's fault (a
            # patch that breaks an include) and fails the probe.
            # first: with empty stand-ins for exactly the named headers, the real TU must
            # preprocess, so every other include it has (the tree's own) still resolves
            stub_inc = bdir / "lucepatch-probe-headers"
            stub_inc.mkdir(exist_ok=True)
            for h in sorted(allowed_hdrs):
                (stub_inc / h).write_text(f"/* lucepatch probe: empty stand-in for {h} (preprocessing check only) */\n")
            pre = re.sub(r"\s-o\s+\S+", f" -o {shlex.quote(str(bdir / ('lucepatch-probe-' + spec.name + '.ii')))}", cmd, count=1)
            pre = re.sub(r"\s-c\s", " -E ", pre, count=1)
            pre = re.sub(r"\s-(MD|MMD)(?=\s)|\s-M[TF]\s+\S+", "", pre)  # nvcc refuses -MD with -E
            src_tok = next(t for t in shlex.split(cmd) if t.endswith(tu))
            pre = pre.replace(src_tok, f"-I{shlex.quote(str(stub_inc))} {src_tok}", 1)
            rp = _run(pre, cwd=bdir, env=self.env, shell=True)
            if rp.returncode != 0:
                res.status = FAIL
                res.first_error, res.error_count = summarize_errors(rp.stdout + rp.stderr)
                res.detail = (f"{tu} does not preprocess even with {', '.join(sorted(allowed_hdrs))} stood in: "
                              f"{res.first_error or 'preprocessor failed'}")
                res.evidence["log_excerpt"] = excerpt(rp.stdout + rp.stderr)
                return
            sub = bdir / f"lucepatch-probe-{spec.name}.cu"
            sub.write_text(self.cfg["substitute_kernel"])
            src_tok = next(t for t in shlex.split(cmd) if t.endswith(tu))
            cmd = cmd.replace(src_tok, str(sub))
            res.evidence["tu_substituted"] = {"tu": tu, "missing_header": missing_hdr.group(1),
                                              "stood_in": sorted(allowed_hdrs), "preprocessed": True,
                                              "why": "absent from this toolkit; the real TU preprocesses with empty "
                                                     "stand-ins for these headers; SASS from the same command line "
                                                     "with a substitute kernel"}
            r = _run(cmd, cwd=bdir, env=self.env, shell=True)
            out = r.stdout + r.stderr
        if r.returncode != 0:
            res.status = FAIL
            res.first_error, res.error_count = summarize_errors(out)
            res.detail = f"compile of {tu} failed"
            res.evidence["log_excerpt"] = excerpt(out)
            return
        code = list_gpu_code(obj)
        res.evidence["gpu_code"] = code.to_json()
        have = code.sass_numbers()
        exp = spec.data.get("expect", {})
        problems = []
        if exp.get("sass") == "profile":
            want = sorted(int(re.sub(r"\D", "", str(a))) for a in self.profile.get("cuda_archs", []))
            miss = [w for w in want if w not in have]
            extra = [h for h in have if h not in want]
            if miss:
                problems.append(f"missing SASS {', '.join(f'sm_{w}' for w in miss)} (object has SASS "
                                f"{', '.join(f'sm_{h}' for h in have) or 'none'} only)")
            if extra:
                problems.append(f"unexpected SASS {', '.join(f'sm_{h}' for h in extra)}")
        if "min_sm" in exp:
            low = [h for h in have if h < int(exp["min_sm"])]
            if low:
                problems.append(f"SASS below sm_{exp['min_sm']}: {', '.join(f'sm_{h}' for h in low)}")
        for inc in exp.get("includes", []):
            if int(inc) not in have:
                problems.append(f"missing SASS sm_{inc}")
        if problems:
            res.status, res.detail = FAIL, "; ".join(problems)
            res.first_error, res.error_count = problems[0], len(problems)
        else:
            res.status = PASS
            res.detail = f"{obj.name}: SASS {', '.join(code.sass)}; PTX {', '.join(code.ptx) or 'none'}"

    def _link(self, spec, bdir, res, extra_flags: list[str]) -> tuple[bool, str]:
        target_name = spec.data["target"]
        cmds = self.commands(bdir, target_name)
        src = self.si.src
        driver_tu = self.cfg.get("driver_tu", "")
        compiles = [c for c in cmds if " -c " in c and re.search(r"\s-o\s+\S+", c)]
        others = [c for c in cmds if c not in compiles]
        requires = spec.data.get("requires_link")
        if requires and driver_tu:
            owner = [c for c in others if driver_tu in c]
            if not owner or not re.search(requires, owner[0]):
                raise _NotApplicable(f"the library built from {driver_tu} does not link /{requires}/ in this "
                                     f"configuration, so its objects reference no driver symbol: the failure cannot occur")
        for c in compiles:
            obj = bdir / re.search(r"\s-o\s+(\S+)", c).group(1)
            obj.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(src / ("uses_driver.o" if driver_tu and str(obj).endswith(driver_tu) else "empty.o"), obj)
        final = None
        for i, c in enumerate(others):
            is_exe_link = " -o " in c and " -shared" not in c and " ar " not in c and "/ar " not in c \
                and "cmake_symlink" not in c and re.search(r"(c\+\+|g\+\+|gcc|clang\+?\+?|cc)\s", c)
            if is_exe_link:
                objs = [t for t in shlex.split(c) if t.endswith(".o")]
                if objs:
                    shutil.copy(src / "main.o", bdir / objs[0])
                if i == len(others) - 1 or target_name in c.split(" -o ", 1)[1].split()[0]:
                    final = i
        if final is None:
            final = len(others) - 1
        for i, c in enumerate(others):
            # Stand-in objects reference (almost) nothing, so a toolchain defaulting to --as-needed
            # would drop every library and never look at libggml-cuda's NEEDED entries; the real
            # objects reference them all. --no-as-needed restores that (and the real NEEDED lists).
            flags = ["-Wl,--no-as-needed"] + (list(extra_flags) if i == final else [])
            if re.match(r"^(:\s*&&\s*)?\S*(c\+\+|g\+\+|gcc|clang\+*|cc)\s", c):
                c = re.sub(r"^(:\s*&&\s*)?(\S+)", lambda m: (m.group(1) or "") + m.group(2) + " " + " ".join(flags), c, count=1)
            if i == final:
                # the link a devel-image builder makes: on a GPU host the real libcuda.so.1 (ld.so.cache,
                # LD_LIBRARY_PATH) would satisfy libggml-cuda's NEEDED and hide F6 (driverless.py)
                libs = driverless.driver_libraries(self.env)
                if libs and not driverless.can_mask():
                    res.evidence["driver_visible"] = libs
                    libs = []
                r = _run(driverless.masked(c, libs), cwd=bdir, env=driverless.masked_env(c, self.env))
                res.evidence["link_command"] = c
                res.evidence["driver_masked"] = libs
                return r.returncode == 0, r.stdout + r.stderr
            r = _run(c, cwd=bdir, env=self.env, shell=True)
            out = r.stdout + r.stderr
            if r.returncode != 0:
                raise _ProbeFail(f"stand-in step failed before the link: {summarize_errors(out)[0] or c[:120]}")
        return False, "no link command"

    def _probe_link(self, spec, bdir, res):
        ok, out = self._link(spec, bdir, res, list(spec.data.get("link_flags", [])))
        first, count = summarize_errors(out)
        res.evidence["log_excerpt"] = excerpt(out)
        res.evidence["layout"] = {"stubs": str(self.si.stubs), "files": sorted(p.name for p in self.si.stubs.iterdir()),
                                  "LIBRARY_PATH": self.env["LIBRARY_PATH"]}
        res.first_error, res.error_count = first, count
        if ok and "not found" not in out:
            res.status, res.detail = PASS, f"{spec.data['target']} linked with only stubs/libcuda.so (no libcuda.so.1) in the layout"
            if res.evidence.get("driver_visible"):
                res.detail += (f"; but this host's {', '.join(res.evidence['driver_visible'])} could not be masked "
                               "(needs root and unshare): a pass here does not show a driver-less builder's link")
        else:
            res.status = FAIL
            res.detail = f"link of {spec.data['target']} failed: {count} error line(s)"

    def copy_runtime(self, bdir: Path, binary: Path, app: Path) -> list[str]:
        """What a runtime stage does: the binary and every *.so* of the build tree in one folder."""
        shutil.copy2(binary, app / binary.name)
        copied = []
        for p in sorted(bdir.rglob("*.so*")):
            if p.is_file() and is_elf(p) and not (app / p.name).exists():
                shutil.copy2(p, app / p.name, follow_symlinks=True)
                copied.append(p.name)
        return copied

    def _probe_runpath(self, spec, bdir, res):
        ok, out = self._link(spec, bdir, res, list(spec.data.get("link_flags", [])))
        if not ok:
            res.first_error, res.error_count = summarize_errors(out)
            raise _ProbeFail(f"link of {spec.data['target']} failed even with {spec.data.get('link_flags')}")
        binary = bdir / spec.data.get("binary", spec.data["target"])
        app = self.work / f"copied-{spec.name}-{bdir.name}" / "app"
        shutil.rmtree(app.parent, ignore_errors=True)
        app.mkdir(parents=True)
        res.evidence["copied"] = self.copy_runtime(bdir, binary, app)
        dyn = elf.dynamic(app / binary.name)
        res.evidence["dynamic"] = dyn.to_json()
        allowed = list(spec.data.get("allowed_missing", []))
        # the build tree must not help: move it away while the closure is resolved
        moved = bdir.with_name(bdir.name + ".moved")
        os.rename(bdir, moved)
        try:
            closure = elf.resolve_closure([app / binary.name], allowed_missing=allowed)
            loader = loader_list(app / binary.name, self.si, allowed)
        finally:
            os.rename(moved, bdir)
        res.evidence["closure"] = closure.to_json()
        res.evidence["ld_so_list"] = loader["lines"][:60]
        walk_missing = sorted({n for names in closure.missing.values() for n in names})
        # the loader still stops at the first library it cannot open (now a real one): it must
        # name one the walk found missing, and find nothing missing exactly when the walk does
        if loader["ran"] and (not set(loader["missing"]) <= set(walk_missing)
                              or bool(loader["missing"]) != bool(walk_missing)):
            raise _ProbeFail(f"the closure walk ({', '.join(walk_missing) or 'nothing missing'}) and ld.so with stub "
                             f"driver libraries ({', '.join(loader['missing']) or 'nothing missing'}) disagree")
        runpath = dyn.runpath or dyn.rpath or "(none)"
        if closure.missing:
            res.status = FAIL
            lines = closure.lines()
            res.detail = f"after copy, RUNPATH {runpath}: " + "; ".join(lines)
            res.first_error, res.error_count = lines[0], len(lines)
        else:
            res.status = PASS
            res.detail = (f"after copy, all {len(closure.objects)} objects of the closure resolve "
                          f"({len(closure.to_json()['needed_names'])} NEEDED names; RUNPATH {runpath}; "
                          f"absent as allowed: {', '.join(closure.absent_allowed) or 'none'})")


class _ProbeFail(Exception):
    pass


class _NotApplicable(Exception):
    pass


# ---------------------------------------------------------------------------------- entry points
@dataclass
class ProbeRun:
    target: str
    profile: str
    profile_hash: str
    variant: str
    tree: AppliedTree
    results: list[ProbeResult]
    seconds: float

    @property
    def ok(self) -> bool:
        return all(r.as_declared for r in self.results)

    def to_json(self) -> dict:
        return {"target": self.target, "profile": self.profile, "profile_hash": self.profile_hash,
                "variant": self.variant, "tree": self.tree.to_json(), "ok": self.ok,
                "seconds": round(self.seconds, 2), "probes": [r.to_json() for r in self.results]}


def run_probes(target: Target, source: Path, profile_name: str | None, variant: str, cache: Path,
               only: list[str] | None = None) -> ProbeRun:
    # bad input is exit 2 on any machine, so the arguments are checked before the tools
    pname, profile = resolve_profile(target, profile_name)
    specs, stand_cfg = load_probes(target)
    if only:
        unknown = [o for o in only if o not in {s.name for s in specs} | {s.fix for s in specs}]
        if unknown:
            raise UsageError(f"unknown probe(s) {', '.join(unknown)}; known: {', '.join(s.name for s in specs)}")
        specs = [s for s in specs if s.name in only or s.fix in only]
    for tool, remedy in (("cmake", "install cmake"), ("ninja", "install ninja (apt-get install ninja-build)")):
        toolchain.require(tool, remedy)
    if not (shutil.which("nvcc") or os.access(toolchain.cuda_home() / "bin" / "nvcc", os.X_OK)):
        raise EnvironmentMissing("nvcc not found: install the CUDA toolkit (or pip install nvidia-cuda-nvcc) and set CUDA_HOME")
    specs = [s for s in specs if not s.data.get("profiles") or pname in s.data["profiles"]]
    git.open_repo(source)
    si = make_stand_ins(cache, stand_cfg)
    t0 = time.monotonic()
    with contextlib.ExitStack() as stack:
        tree = prepare_tree(target, source, variant, cache, stack)
        work = stack.enter_context(WorkArea(cache, f"probe-build-{target.name}-{variant}")).path
        runner = ProbeRunner(target, tree, profile, si, stand_cfg, work)
        results = []
        for spec in specs:
            report.progress(f"probe {spec.name} ({spec.fix}, {spec.kind}) on {variant} / {pname}")
            r = runner.run(spec)
            report.progress(f"  {r.status} in {r.seconds:.1f}s: {r.detail[:160]}")
            results.append(r)
    return ProbeRun(target.name, pname, profile["hash"], variant, tree, results, time.monotonic() - t0)


def preflight(target: Target, source: Path, profile_name: str | None, cache: Path) -> ProbeRun:
    """Run the patched probes; refuse (CheckFailed) when any fails: a long build known to fail."""
    run = run_probes(target, source, profile_name, "patched", cache)
    bad = [r for r in run.results if not r.as_declared]
    if bad:
        raise CheckFailed(f"preflight: probe(s) {', '.join(r.spec.name for r in bad)} failed for profile {run.profile} "
                          f"({bad[0].detail[:160]}); not starting a build known to fail (--no-preflight to force)")
    return run
