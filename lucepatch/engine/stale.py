"""Patch messages that an upstream move made untrue (issue 36, item 4).

A patch's message explains the code it changes by citing upstream: its functions ("cuMemAllocFromPoolAsync()
is a bare pass-through"), its literal text ("still ask for 2.8.11"), its commits and pull requests
("Upstream PR #217 (merged after this base)"). A rebase session carries the diff to the new base;
the message goes along untouched, and `pr` would send it. This finds, per kept patch, each sentence
that cites something the move base..onto changed:

  a pull request   `#N` where a commit of base..onto names #N in its subject (merged by the move:
                   "Merge pull request #217", "... (#224)");
  a commit         an id that base..onto made an ancestor of the new base, or that is no longer one;
  code or text     a `name()`, a `backquoted` span or a version-like literal (2.8.11) that occurs in a
                   line base..onto added or removed in a file the patch touches — only for a patch
                   the move touched (merged 3-way or resolved by hand): one that applied exactly
                   kept its code and context, so what its message says of them still holds.

Each finding names the sentence, what it cites and the upstream change. `lint` and `pr` read them
from `review.toml` of the target folder, which the session writes (engine/rebase.py), keyed by the
message's sha256: `pr` refuses a patch whose message is unchanged since (services/review.py).
"""

from __future__ import annotations

import hashlib
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path

import tomlkit

from lucepatch import git, trailers
from lucepatch.errors import CheckFailed
from lucepatch.series import Patch

_PR = re.compile(r"(?<![\w/])#(\d{1,6})\b")
_COMMIT = re.compile(r"(?<![\w/.#-])([0-9a-f]{7,40})(?![\w-])")
_CALL = re.compile(r"\b([A-Za-z_][A-Za-z0-9_]{2,})\(\)")
_QUOTED = re.compile(r"`([^`\n]{3,80})`")
# a C function definition's first line (or git's hunk header naming it): the name before "("
_DEF = re.compile(r"^\s*(?:[A-Za-z_][\w \t\*]*?[\s\*])?([A-Za-z_]\w*)\s*\([^;]*$")
_KEYWORDS = {"if", "for", "while", "switch", "return", "sizeof", "else", "do"}
_VERSION = re.compile(r"(?<![\w.])(\d+\.\d+\.\d+(?:\.\d+)?)(?![\w.]*\w)")


@dataclass(frozen=True)
class Stale:
    """One sentence of a patch message that cites what the move changed."""
    text: str  # the sentence, whitespace folded
    cites: str  # what it cites: "#217", "cuMemAllocFromPoolAsync()", "2.8.11", "833c62c"
    changed_by: str  # the upstream change: a commit and its subject, or where the move changed it

    def to_json(self) -> dict:
        return {"text": self.text, "cites": self.cites, "changed_by": self.changed_by}


def message_text(p: Patch) -> str:
    """The patch's message as a reader reads it: subject and body, without the trailers."""
    items = trailers.parse(p.message())
    body = p.message()
    if items:  # the trailer block is the last paragraph
        paras = body.rstrip("\n").split("\n\n")
        body = "\n\n".join(paras[:-1])
    return body


def message_sha256(p: Patch) -> str:
    """What `pr` compares to know whether a flagged message was edited since (subject + body)."""
    return hashlib.sha256(p.message().encode(errors="surrogateescape")).hexdigest()


def _sentences(text: str) -> list[str]:
    flat = " ".join(text.split())
    return [s.strip() for s in re.split(r"(?<=[.!?:;])\s+(?=[A-Z(`\"'])", flat) if s.strip()]


class Move:
    """What base..onto changed, read once per session from the private repository."""

    def __init__(self, repo: Path, base: str, onto: str):
        self.repo, self.base, self.onto = Path(repo), base, onto
        log = git.run(self.repo, "log", "--format=%H %s", f"{base}..{onto}", check=False).stdout
        self.commits = [tuple(line.split(" ", 1)) if " " in line else (line, "") for line in log.splitlines() if line]
        self._lines: dict[str, str] = {}
        self._funcs: dict[str, set[str]] = {}

    def pr(self, n: str) -> tuple[str, str] | None:
        """The commit of the move whose subject names pull request #n."""
        pat = re.compile(rf"#{n}\b")
        return next(((c, s) for c, s in self.commits if pat.search(s)), None)

    def commit_moved(self, cid: str) -> str | None:
        """How the move changed what commit `cid` is to the series: brought in, or left behind."""
        full = git.try_resolve(self.repo, cid + "^{commit}")
        if not full:
            return None
        in_base = self._is_ancestor(full, self.base)
        in_onto = self._is_ancestor(full, self.onto)
        if in_onto and not in_base:
            subj = next((s for c, s in self.commits if c == full), "")
            return f"{full[:12]} is part of the move to {self.onto[:12]}" + (f" ({subj})" if subj else "")
        if in_base and not in_onto:
            return f"{full[:12]} is no ancestor of the new base {self.onto[:12]}"
        return None

    def _is_ancestor(self, a: str, b: str) -> bool:
        return git.run(self.repo, "merge-base", "--is-ancestor", a, b, check=False).status == 0

    def changed_functions(self, path: str) -> set[str]:
        """The functions of `path` whose lines base..onto changed: the function each -U0 hunk falls
        in (git's hunk header names it), and any whose definition line was added or removed."""
        if path not in self._funcs:
            diff = git.run(self.repo, "diff", "--no-color", "-U0", self.base, self.onto, "--", path, check=False).stdout
            names: set[str] = set()
            for ln in diff.splitlines():
                if ln.startswith("@@"):
                    ctx = ln.split("@@", 2)[-1]
                    m = _DEF.search(ctx)
                    if m:
                        names.add(m.group(1))
                elif ln[:1] in "+-" and not ln.startswith(("+++", "---")):
                    m = _DEF.match(ln[1:])
                    if m:
                        names.add(m.group(1))
            self._funcs[path] = names - _KEYWORDS
        return self._funcs[path]

    def changed_lines(self, path: str) -> str:
        """The lines base..onto added or removed in `path` (text of the diff's +/- lines)."""
        if path not in self._lines:
            diff = git.run(self.repo, "diff", "--no-color", "-U0", self.base, self.onto, "--", path, check=False).stdout
            self._lines[path] = "\n".join(ln[1:] for ln in diff.splitlines()
                                          if ln[:1] in "+-" and not ln.startswith(("+++", "---")))
        return self._lines[path]


def stale_statements(move: Move, p: Patch, touched: bool) -> list[Stale]:
    """The sentences of `p`'s message that cite what `move` changed (module docstring); `touched`:
    the move merged the patch 3-way or a human resolved it (code citations are checked then only)."""
    out: list[Stale] = []
    seen: set[tuple[str, str]] = set()

    def add(sentence: str, cites: str, why: str) -> None:
        if (sentence, cites) not in seen:
            seen.add((sentence, cites))
            out.append(Stale(sentence, cites, why))

    changed = {f: move.changed_lines(f) for f in p.files} if touched else {}
    funcs = {f: move.changed_functions(f) for f in p.files} if touched else {}
    for sentence in [p.subject, *_sentences(message_text(p)[len(p.subject):])]:
        for n in _PR.findall(sentence):
            hit = move.pr(n)
            if hit:
                add(sentence, f"#{n}", f"{hit[0][:12]} {hit[1]} is part of the move to {move.onto[:12]}")
        for cid in _COMMIT.findall(sentence):
            if not re.search(r"[a-f]", cid):
                continue  # a number, not a commit id
            why = move.commit_moved(cid)
            if why:
                add(sentence, cid, why)
        if not touched:
            continue
        for name in _CALL.findall(sentence):  # a function: cited stale when the move changed it
            where = [f for f, names in funcs.items() if name in names]
            if where:
                add(sentence, f"{name}()", f"the move to {move.onto[:12]} changed {name}() in {', '.join(where)}")
        for tok in _QUOTED.findall(sentence) + _VERSION.findall(sentence):  # literal text: stale when a changed line has it
            where = [f for f, text in changed.items() if re.search(rf"(?<![\w.]){re.escape(tok)}(?![\w])", text)]
            if where:
                add(sentence, tok, f"the move to {move.onto[:12]} changed lines with {tok} in {', '.join(where)}")
    return out


# ---- review.toml: what a session flagged, until the message is edited -----------------------------

REVIEW = "review.toml"


def review_entries(move: Move, kept: list[tuple[Patch, bool]]) -> dict[str, dict]:
    """{patch name: {"message_sha256", "move", "statements"}} for the kept patches (with whether the
    move touched each) whose messages cite what the move changed."""
    out = {}
    for p, touched in kept:
        found = stale_statements(move, p, touched)
        if found:
            out[p.name] = {"message_sha256": message_sha256(p), "move": f"{move.base[:12]}..{move.onto[:12]}",
                           "statements": [f.to_json() for f in found]}
    return out


def read_review(target_dir: Path) -> dict[str, dict]:
    """The entries of a target folder's review.toml ({} when it has none)."""
    f = Path(target_dir) / REVIEW
    if not f.is_file():
        return {}
    try:
        return tomllib.loads(f.read_text()).get("patch", {})
    except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError):
        return {}  # lint names a broken file (services/lint.py)


def write_review(target_dir: Path, entries: dict[str, dict], note: str) -> None:
    """Write review.toml: the new entries, and the earlier ones whose message is still unedited."""
    keep = {n: e for n, e in read_review(target_dir).items() if n not in entries}
    allx = {**keep, **entries}
    f = Path(target_dir) / REVIEW
    if not allx:
        f.unlink(missing_ok=True)
        return
    doc = tomlkit.document()
    doc.add(tomlkit.comment("Patch messages that cite what an upstream move changed (lucepatch rebase, issue 36)."))
    doc.add(tomlkit.comment("`lucepatch pr` refuses each patch below until its message is edited (its sha256"))
    doc.add(tomlkit.comment("changes); then lint says the entry can go. " + note))
    doc.add(tomlkit.nl())
    table = tomlkit.table(is_super_table=True)
    for name in sorted(allx):
        e = allx[name]
        t = tomlkit.table()
        t.add("message_sha256", e["message_sha256"])
        t.add("move", e.get("move", ""))
        arr = tomlkit.array()
        for st in e["statements"]:
            it = tomlkit.inline_table()
            it.update({"text": st["text"], "cites": st["cites"], "changed_by": st["changed_by"]})
            arr.append(it)
        t.add("statements", arr.multiline(True))
        table.add(name, t)
    doc.add("patch", table)
    f.write_text(tomlkit.dumps(doc))


def flagged(target) -> dict[str, list[dict]]:
    """{patch name: its flagged statements} for the patches of `target` whose message is unedited
    since a session flagged it (what `pr` refuses and `lint` warns about)."""
    entries = read_review(target.dir)
    out = {}
    for p in target.patches:
        e = entries.get(p.name)
        if e and e.get("message_sha256") == message_sha256(p):
            out[p.name] = e.get("statements", [])
    return out


def refuse_flagged(target, patches) -> None:
    """`pr`'s refusal (CheckFailed) while a selected patch's flagged message is unedited."""
    found = {n: v for n, v in flagged(target).items() if any(p.name == n for p in patches)}
    if found:
        n, sts = next(iter(found.items()))
        raise CheckFailed(f"{len(found)} patch message(s) cite what an upstream move changed and were not edited "
                          f"since ({', '.join(found)}): {n}: {sts[0]['text'][:160]!r} ({sts[0]['cites']}: "
                          f"{sts[0]['changed_by'][:120]}); edit the message in {target.dir / n} "
                          f"({target.dir / REVIEW} lists every sentence), then run lucepatch pr again")
