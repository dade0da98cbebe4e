"""What upstream HAMi-core ever defined, commit by commit: the names a Debug build exports and the
shared-region version, read from the sources of its first-parent history (no build).

Why from the sources: a Debug build of HAMi-core (upstream's build.sh, what HAMi ships) compiles
without -fvisibility=hidden, so every function and variable defined at file scope in a compiled
file is an exported symbol. The scanner below finds those definitions (comments, strings and
preprocessor lines removed; brace depth tracked), which is what the exported symbol table of the
real build holds up to the CUDA headers' renames (cuda.h 13.0 maps `cuMemAdvise` to
`cuMemAdvise_v2`; names are compared by `family` for that reason). tests/test_identity.py checks
the scan against real builds of the lines' bases.

The scan of a checkout is data (lucepatch/data/hami_core_names.toml, written by
tools/hami_core_names.py): every name HAMi-core's sources ever defined (a library exporting a
name outside that set carries code upstream never had), and the hook set and region version per
stretch of first-parent history (which commits an upstream library can be).
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field
from importlib import resources

from lucepatch import git

DATA_NAME = "hami_core_names.toml"
HOOK_PREFIXES = ("cu", "nvml")
_VERSION_SUFFIX = re.compile(r"(?:_v\d+)?(?:_ptsz|_ptds)?$")
_STRIP = re.compile(r'/\*.*?\*/|//[^\n]*|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'', re.S)
_KEYWORDS = {"if", "while", "for", "switch", "return", "sizeof", "defined"}


def family(name: str) -> str:
    """A driver entry point without its version suffix (cuMemAdvise_v2, cuMemAdvise -> cuMemAdvise;
    cuMemcpy_ptds -> cuMemcpy): which name a hook gets depends on the CUDA headers it was built with."""
    return _VERSION_SUFFIX.sub("", name) if name.startswith(HOOK_PREFIXES) else name


def is_hook(name: str) -> bool:
    return name.startswith(HOOK_PREFIXES) and len(name) > 4 and name[len("cu" if name.startswith("cu") else "nvml")].isupper()


def _clean(src: str) -> str:
    src = src.replace("\\\n", " ")
    src = _STRIP.sub(lambda m: " " if m.group(0)[0] == "/" else '""', src)
    return re.sub(r"^[ \t]*#[^\n]*", "", src, flags=re.M)


def _declarator(text: str) -> str | None:
    """The name declared by a file-scope declarator (`int *x[3] = ...`, `T (*fp)(args)`)."""
    text = text.split("=", 1)[0].strip()
    m = re.search(r"\(\s*\*\s*([A-Za-z_]\w*)\s*\)\s*\(", text)  # function pointer variable
    if m:
        return m.group(1)
    if "(" in text:  # a function declaration (prototype): defines nothing
        return None
    m = re.search(r"([A-Za-z_]\w*)\s*(?:\[[^\]]*\]\s*)*$", text)
    return m.group(1) if m else None


def _split_top(text: str) -> list[str]:
    """`int a = f(1, 2), b[3]` -> ["int a = f(1, 2)", " b[3]"]: commas outside brackets only."""
    parts, depth, cur = [], 0, []
    for ch in text:
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur))
    return parts


def defined_names(source: str) -> set[str]:
    """Functions and variables a C file defines at file scope with external linkage."""
    s = _clean(source)
    names: set[str] = set()
    depth, buf, head = 0, [], ""
    after_type_body = False  # `struct X {...} var;` / `typedef struct {...} T;`
    for m in re.finditer(r"[{};]|[^{};]+", s):
        t = m.group(0)
        if t == "{":
            if depth == 0:
                head = " ".join("".join(buf).split())
                buf = []
                fm = re.search(r"([A-Za-z_]\w*)\s*\((?:[^()]|\([^()]*\))*\)\s*(?:__attribute__\s*\(\(.*\)\)\s*)?$", head)
                if fm and fm.group(1) not in _KEYWORDS and not re.match(r"(static|typedef|extern)\b", head) \
                        and "=" not in head:
                    names.add(fm.group(1))
            depth += 1
        elif t == "}":
            depth -= 1
            if depth == 0:
                after_type_body = bool(re.match(r"(typedef\s+)?(struct|union|enum)\b", head)) or "=" in head
                if "=" in head and not re.match(r"(static|typedef|extern)\b", head):
                    name = _declarator(head)  # an initialised aggregate: `entry_t tbl[] = {...};`
                    if name:
                        names.add(name)
                buf = []
        elif t == ";":
            if depth == 0:
                text = " ".join("".join(buf).split())
                buf = []
                if after_type_body:
                    after_type_body = False
                    if text and not head.startswith("typedef") and not re.match(r"(static|extern)\b", head):
                        for part in text.split(","):
                            name = _declarator(part)
                            if name:
                                names.add(name)
                    head = ""
                    continue
                if not text or re.match(r"(static|typedef|extern)\b", text) or re.match(r"(struct|union|enum)\s+\w+$", text):
                    continue
                for part in _split_top(text):  # `int a = 0, b;` defines a and b
                    name = _declarator(part)
                    if name and name not in _KEYWORDS:
                        names.add(name)
        elif depth == 0:
            buf.append(t)
    return names


def region_of(header: str) -> str | None:
    """MAJOR_VERSION.MINOR_VERSION of src/multiprocess/multiprocess_memory_limit.h, or None."""
    ma = re.search(r"#define\s+MAJOR_VERSION\s+(\d+)", header)
    mi = re.search(r"#define\s+MINOR_VERSION\s+(\d+)", header)
    return f"{ma.group(1)}.{mi.group(1)}" if ma and mi else None


# ----------------------------------------------------------------------------------- scanning a checkout
REGION_HEADER = "src/multiprocess/multiprocess_memory_limit.h"
SKIP = ("test", "shrreg_tool.c")  # not linked into libvgpu.so


@dataclass
class Scanned:
    commit: str
    date: str
    region: str | None
    names: set[str]

    @property
    def hooks(self) -> set[str]:
        return {family(n) for n in self.names if is_hook(n)}


def scan_commit(repo, commit) -> Scanned:
    """The names the sources of `commit` (a GitPython commit) define, and its region version."""
    names: set[str] = set()
    region = None
    try:
        src = commit.tree / "src"
    except KeyError:
        src = None
    for blob in (src.traverse() if src is not None else []):
        if blob.type != "blob" or not blob.path.endswith((".c", ".h")):
            continue
        if any(part.startswith(SKIP) for part in blob.path.split("/")[1:]):
            continue
        text = blob.data_stream.read().decode("utf-8", "replace")
        if blob.path == REGION_HEADER:
            region = region_of(text)
        names |= defined_names(text)
    return Scanned(commit.hexsha, commit.committed_datetime.date().isoformat(), region, names)


def scan_history(repo_dir, ref: str) -> list[Scanned]:
    """Every first-parent commit up to `ref`, oldest first; the sources are scanned where src/
    changed and the scan carried over where it did not."""
    out: list[Scanned] = []
    with git.repo_at(repo_dir) as repo:
        prev_tree = None
        for c in reversed(list(repo.iter_commits(ref, first_parent=True))):
            try:
                tree = (c.tree / "src").hexsha
            except KeyError:
                tree = None
            if out and tree == prev_tree:
                last = out[-1]
                out.append(Scanned(c.hexsha, c.committed_datetime.date().isoformat(), last.region, last.names))
            else:
                out.append(scan_commit(repo, c))
            prev_tree = tree
    return out


def to_data(scans: list[Scanned], *, ref: str, source: str) -> dict:
    """The data file's content: the union of names, and one state per change of hooks or region
    (`first`: the first commit with it; `last`: the last first-parent commit before the next
    state; `commits`: all of them)."""
    union = sorted({family(n) for s in scans for n in s.names})
    states: list[dict] = []
    prev: set[str] = set()
    prev_region = object()
    for s in scans:
        hooks = s.hooks
        if hooks != prev or s.region != prev_region:
            states.append({"first": s.commit, "date": s.date, "last": s.commit, "region": s.region or "none",
                           "commits": [s.commit[:12]], "hooks_added": sorted(hooks - prev),
                           "hooks_removed": sorted(prev - hooks)})
            prev, prev_region = hooks, s.region
        else:
            states[-1]["last"] = s.commit
            states[-1]["commits"].append(s.commit[:12])
    return {"schema_version": 1, "source": source, "ref": ref, "commits": len(scans), "names": union, "state": states}


# ----------------------------------------------------------------------------------- reading the data
@dataclass
class State:
    first: str
    last: str
    date: str
    region: str
    hooks: set[str] = field(default_factory=set)
    commits: list[str] = field(default_factory=list)  # the first-parent commits that changed src/, oldest first

    def contains(self, commit: str) -> bool:
        c = commit.lower()[:12]
        return len(c) >= 7 and any(x.startswith(c) or c.startswith(x) for x in self.commits)

    def span(self) -> str:
        return self.first[:7] if self.first == self.last else f"{self.first[:7]}..{self.last[:7]}"


@dataclass
class History:
    ref: str
    commits: int
    names: set[str]  # families of every name upstream ever defined
    states: list[State]

    def never_upstream(self, exported) -> list[str]:
        """Exported names no upstream HAMi-core source ever defined (by family)."""
        return sorted(n for n in exported if family(n) not in self.names)

    def matching(self, hooks: set[str], region: str | None) -> list[State]:
        """The states whose hook families are exactly `hooks` (and whose region is `region`, when known)."""
        return [s for s in self.states if s.hooks == hooks and (region is None or s.region == region)]

    def nearest(self, hooks: set[str], region: str | None, n: int = 2) -> list[tuple[State, set, set]]:
        """The `n` states closest to `hooks` (same region when known): (state, extra, missing)."""
        pool = [s for s in self.states if region is None or s.region == region] or self.states
        ranked = sorted(pool, key=lambda s: (len(hooks ^ s.hooks), s.date))
        return [(s, hooks - s.hooks, s.hooks - hooks) for s in ranked[:n]]

    def state_of(self, commit: str) -> State | None:
        """The state holding a first-parent commit that changed src/ (a prefix of 7+ hex digits)."""
        return next((s for s in self.states if s.contains(commit)), None)


def load_history(data: dict | None = None) -> History:
    if data is None:
        with resources.files("lucepatch").joinpath("data", DATA_NAME).open("rb") as f:
            data = tomllib.load(f)
    states, cur = [], set()
    for st in data.get("state", []):
        cur = (cur - set(st.get("hooks_removed", []))) | set(st.get("hooks_added", []))
        states.append(State(st["first"], st["last"], st.get("date", ""), st.get("region", "none"), set(cur),
                            list(st.get("commits", []))))
    return History(data.get("ref", ""), int(data.get("commits", 0)), set(data.get("names", [])), states)
