"""May this library replace the node's? The one judge `node --lib` and deploy's gates both call,
so the two verbs cannot disagree about the same pair of libraries.

`judge(node, candidate)` compares what a replacement would take away and whether it can load where
the node's library loads:
- symbols: every name the node's library exports and the candidate does not, grouped. A vendor's
  machinery (its scheduler client, websocket client, event loop: data/fork_groups.toml, vendor =
  true) is never accepted as lost — no flag of any verb overrides it; hooks the candidate exports
  under another CUDA entry-point version (cuMemAdvise vs cuMemAdvise_v2: other cuda.h) are named
  as such, since a program built against the node library's headers would bypass the candidate;
- environment: variables the node's library reads (and the device plugin sets for it) that the
  candidate ignores;
- shared region: a different MAJOR.MINOR cannot share the node's region file;
- loader: the candidate's glibc needs against the pods' glibc (a node report says it) or against
  where the node's library loads (a library that resolves _dl_sym@GLIBC_PRIVATE when it loads runs
  only on glibc < 2.34; a candidate that needs GLIBC_2.34 runs only on >= 2.34: no pod runs both).
  A reference bound lazily (a PLT call, as the beclab fork's _dl_sym is) does not stop a pod's
  process from loading the library: it is named, not counted against it.
A fork on the node gets the routes instead (`routes`), in order.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from lucepatch.lines.history import family, is_hook
from lucepatch.lines.identity import FORK, Group, Identity, LineBuild, group_rules, grouped
from lucepatch.native import elf

DROP_IN, REFUSED = "drop-in", "refused"
HAMI_PROFILE = "sm120-cuda13-hami"


@dataclass
class Side:
    """One library as the judge sees it: its names, what it reads, what it needs of the loader."""
    name: str  # how it is called in messages ("the node's library", "--lib X", "line v2.5's build")
    exports: set[str]
    env: set[str]
    shrreg: str | None
    loader: elf.LoaderNeeds | None
    kind: str = ""
    foreign: list[Group] = field(default_factory=list)
    glibc_newest: str | None = None  # the newest GLIBC_x.y it references (loader.newest_glibc, or the data's)

    @classmethod
    def of(cls, ident: Identity, name: str) -> "Side":
        return cls(name, set(ident.exports), set(ident.env), ident.shrreg, ident.loader, ident.kind, ident.foreign,
                   ident.loader.newest_glibc)

    @classmethod
    def of_line_build(cls, ref: LineBuild, shrreg: str | None) -> "Side":
        return cls(f"line {ref.target}'s build", set(ref.exports), set(ref.env), shrreg, None, "line-build", [],
                   ref.newest_glibc)


@dataclass
class Finding:
    part: str  # symbols | env | shrreg | loader
    ok: bool
    vendor: bool  # a loss of the vendor's machinery: never accepted
    message: str

    def to_json(self) -> dict:
        return {"part": self.part, "ok": self.ok, "vendor": self.vendor, "message": self.message}


@dataclass
class Judgement:
    verdict: str  # drop-in | refused
    findings: list[Finding]
    lost: list[Group]  # the node's exports the candidate lacks, grouped

    @property
    def vendor_loss(self) -> bool:
        return any(f.vendor and not f.ok for f in self.findings)

    def part(self, name: str) -> Finding:
        return next(f for f in self.findings if f.part == name)

    def to_json(self) -> dict:
        return {"verdict": self.verdict, "vendor_loss": self.vendor_loss,
                "findings": [f.to_json() for f in self.findings], "lost": [g.to_json() for g in self.lost]}


def _names(ns, n: int = 6) -> str:
    ns = sorted(ns)
    return ", ".join(ns[:n]) + (f", … (+{len(ns) - n})" if len(ns) > n else "")


def _glibc(v: str | None) -> tuple[int, ...]:
    return tuple(int(x) for x in v.split(".")) if v else ()


def judge(node: Side, cand: Side, *, pod_glibc: str | None = None) -> Judgement:
    findings: list[Finding] = []
    # -- symbols
    lost_names = node.exports - cand.exports
    foreign = {n: g for g in node.foreign for n in g.names}
    renamed = {n for n in lost_names if is_hook(n) and any(family(c) == family(n) for c in cand.exports if is_hook(c))}
    lost: list[Group] = []
    by_group: dict[str, Group] = {}
    for n in sorted(lost_names):
        if n in foreign:
            g = foreign[n]
            key, vendor, why = g.group, g.vendor, g.why
        elif n in renamed:
            key, vendor, why = "CUDA hooks under other entry-point versions", False, (
                "the same hooks, named by other CUDA headers (cuda.h 13.0: cuMemAdvise -> cuMemAdvise_v2); a program "
                "built against the node library's headers calls these names and would bypass the candidate")
        elif is_hook(n):
            key, vendor, why = "CUDA hooks", False, "driver entry points the candidate does not hook"
        else:
            key, vendor, why = "HAMi-core internals", False, "functions and variables of the node's HAMi-core"
        if key not in by_group:
            by_group[key] = Group(key, vendor, [], why)
            lost.append(by_group[key])
        by_group[key].names.append(n)
    # the vendor's machinery first, in the order data/fork_groups.toml lists it
    order = [g.group for g in node.foreign]
    lost.sort(key=lambda g: (not g.vendor, order.index(g.group) if g.group in order else len(order)))
    if not lost:
        findings.append(Finding("symbols", True, False, f"{cand.name} exports every symbol of {node.name}"))
    else:
        vendor_groups = [g for g in lost if g.vendor]
        parts = "; ".join(f"{g.group} {len(g.names)} ({_names(g.names, 4)})" for g in lost)
        msg = f"{cand.name} lacks {len(lost_names)} symbol(s) of {node.name}: {parts}"
        if vendor_groups:
            msg += (f" — replacing it would drop the vendor's {', '.join(g.group for g in vendor_groups)} from the "
                    "node; no flag accepts that")
        findings.append(Finding("symbols", False, bool(vendor_groups), msg))
    # -- environment
    env_lost = node.env - cand.env
    if not env_lost:
        findings.append(Finding("env", True, False, f"{cand.name} reads every environment variable {node.name} reads"))
    else:
        groups = grouped(env_lost, group_rules("env"), other="other")
        vendor = any(g.vendor for g in groups)
        findings.append(Finding("env", False, vendor,
                                f"{cand.name} ignores {len(env_lost)} environment variable(s) {node.name} reads: "
                                + "; ".join(f"{g.group}: {', '.join(g.names)}" for g in groups)
                                + (" (the vendor's device plugin sets them for its library)" if vendor else "")))
    # -- shared region
    if node.shrreg and cand.shrreg:
        ok = node.shrreg == cand.shrreg
        findings.append(Finding("shrreg", ok, False, f"shared region {cand.shrreg} vs the node's {node.shrreg}" + (
            "" if ok else ": HAMi-core logs the version mismatch and a library of the other version does not share "
                          "the node's region file (measured: a 1.1 library hung on a 1.2 file)")))
    else:
        findings.append(Finding("shrreg", True, False, "shared-region version not in both libraries; not compared"))
    # -- loader
    findings.append(_loader(node, cand, pod_glibc))
    bad = [f for f in findings if not f.ok]
    return Judgement(REFUSED if bad else DROP_IN, findings, lost)


def _loader(node: Side, cand: Side, pod_glibc: str | None) -> Finding:
    need = _glibc(cand.glibc_newest)
    cand_private = [r for r in (cand.loader.private if cand.loader else [])]
    limits = elf.private_symbol_limits()
    if pod_glibc:
        problems, lazy = [], []
        if need and _glibc(pod_glibc) < need:
            problems.append(f"{cand.name} needs GLIBC_{cand.glibc_newest}, the pods have glibc {pod_glibc}")
        for r in cand_private:
            lim = limits.get(r.name)
            if lim and _glibc(pod_glibc) >= _glibc(lim["removed_in"]):
                if r.fails_at_load():
                    problems.append(f"{cand.name} needs {r}, which glibc {pod_glibc} does not export")
                elif r.binding == elf.LAZY:
                    lazy.append(f"{cand.name}'s {elf.lazy_note(r)}")
        if problems:
            return Finding("loader", False, False, "; ".join(problems) + ": it cannot load in the pods")
        return Finding("loader", True, False, f"{cand.name} can load on the pods' glibc {pod_glibc}"
                       + (f" ({'; '.join(lazy)})" if lazy else ""))
    # no pod glibc known: compare with where the node's library loads (a lazily bound reference sets no
    # ceiling: the pods' processes bind lazily and load it on any glibc)
    node_private = node.loader.private if node.loader else []
    at_load = [r for r in node_private if r.name in limits and r.fails_at_load()]
    ceilings = [_glibc(limits[r.name]["removed_in"]) for r in at_load]
    if ceilings and need and need >= min(ceilings):
        below = elf.glibc_str(min(ceilings))
        return Finding("loader", False, False,
                       f"{node.name} loads only on glibc < {below} ({', '.join(str(r) for r in at_load)}), "
                       f"{cand.name} only on glibc >= {cand.glibc_newest} (GLIBC_{cand.glibc_newest}): no pod loads both; "
                       "build the candidate on the pods' glibc or pass a node report with the pods' glibc")
    lazy = [r for r in node_private if r.name in limits and r.binding == elf.LAZY]
    return Finding("loader", True, False, "no glibc conflict between the two libraries' needs"
                   + ("" if need else " (the candidate's needs are not known)")
                   + (f"; {node.name} binds {', '.join(str(r) for r in lazy)} lazily, which sets no glibc ceiling "
                      "(a process dies only if it calls it or runs with LD_BIND_NOW=1)" if lazy else ""))


# ----------------------------------------------------------------------------------- routes
@dataclass
class Route:
    name: str
    what: str
    commands: list[str]

    def to_json(self) -> dict:
        return {"name": self.name, "what": self.what, "commands": self.commands}


def routes(node: Identity, *, node_lib: str = "<the node's libvgpu.so>", line: str | None = None,
           checkout: str = "~/src/HAMi-core") -> list[Route]:
    """What to do on a node whose library is a vendor's fork, in order; never a swap."""
    line = line or node.line or "hami-core-v2.5"
    ev = "node-affected.evidence.json"
    return [
        Route("exclusive mode",
              "give the app's container a GPU of its own in exclusive mode: Olares 1.12.6+ then injects no libvgpu.so "
              "(beclab/Olares#3135), so none of HAMi-core's hooks, the fork's or a fix's, are in the app's process "
              "(Olares: Settings > GPU > mode 'App exclusive'; the device plugin sets CUDA_DEVICE_GPU_MODE_0=0); "
              "costs GPU sharing on that card",
              ["lucepatch node --pod <app pod> --save-report node.json   # then: injection not-injected-exclusive"]),
        Route("the -hami Lucebox image",
              f"profile {HAMI_PROFILE} builds llama.cpp with GGML_CUDA_NO_VMM=ON: it never calls cuMemCreate/cuMemMap, "
              "so the fork's VMM hooks (where #169/#187 crash) are never exercised, whatever library the node has",
              [f"lucepatch build lucebox --image --source ~/src/lucebox-hub --profile {HAMI_PROFILE} --tag REG/lucebox "
               "--node-report node.json"]),
        Route("a vendor bug report with black-box evidence",
              "run the reproducers against the node's own library (baseline) and the line's build: what the node "
              "does wrong is measured on its bytes, without its source; attach the evidence and its page",
              [f"lucepatch build {line} --source {checkout}",
               f"lucepatch verify --all --target {line} --baseline-lib {node_lib} --lib <built libvgpu.so> "
               f"--driver real --evidence {ev}",
               f"lucepatch show {ev} --html node-affected.html   # file it with the vendor (beclab/Olares)"]),
        Route("a line of the series on the vendor's source",
              "once the fork's HAMi-core (beclab/HAMi-core, branch feat/nvshare) can be had: carry the line onto it, "
              "so the fixes ship inside the vendor's library with its scheduler client intact",
              [f"lucepatch rebase {line} --line beclab --onto <fork ref> --source <beclab/HAMi-core checkout>"]),
    ]


def fork_on_node(node: Identity) -> bool:
    return node.kind == FORK
