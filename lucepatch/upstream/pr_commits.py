"""The PR's commits as the submitter sends them (upstream/pr.py makes the PR around them): who authors
and signs each — the patch's author, or the submitter's git identity where the series holds lucepatch's
placeholder (upstream/conventions.PLACEHOLDER_DOMAIN), which is nobody and is never sent — what each
message is — the series' own, or for an upstream that takes no generated ones the submitter's own
(`pr --messages DIR`) or a placeholder they must replace — and the files named after what they change."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from lucepatch import git, odb, trailers
from lucepatch.errors import CheckFailed, UsageError
from lucepatch.series import Patch
from lucepatch.upstream.checks import signed_off_by
from lucepatch.upstream.conventions import is_placeholder


# The commit message lucepatch leaves where the submitter must write one (an upstream that takes no
# generated messages, HAMi). It is not a message: its subject says so, and nothing in it is lucepatch's
# account of the change (that is in pr-body.md, for the submitter to read, not to sign).
PLACEHOLDER_SUBJECT = "TODO(submitter): write this commit's message yourself"
PLACEHOLDER_BODY = """\
{upstream} takes no generated commit messages, and lucepatch writes none
for you to sign as your own. Replace this text with your own account of
the change (git rebase -i, reword; or pr --messages DIR with <patch>.txt)
before opening the PR. The patch was {patch}.
"""


def read_messages(d: Path, patches: list[Patch]) -> dict[str, str]:
    """--messages DIR: the submitter's own message for each patch, DIR/<patch name without .patch>.txt
    (subject, blank line, body; trailers such as their Signed-off-by included). Every selected patch
    needs one; a file that names no patch is a typo and refused too."""
    if not d.is_dir():
        raise UsageError(f"--messages {d} is not a directory (one <patch>.txt per patch)")
    want = {p.name[:-6] if p.name.endswith(".patch") else p.name: p for p in patches}
    have = {f.stem: f for f in d.glob("*.txt")}
    stray = sorted(set(have) - set(want))
    if stray:
        raise UsageError(f"--messages {d}: {', '.join(s + '.txt' for s in stray)} names no selected patch")
    missing = sorted(set(want) - set(have))
    if missing:
        raise UsageError(f"--messages {d}: no message for {', '.join(missing)} (write {missing[0]}.txt, ...)")
    out = {}
    for stem, p in want.items():
        text = have[stem].read_text(encoding="utf-8").strip()
        subject = text.splitlines()[0].strip() if text else ""
        if not subject or subject.startswith("TODO(submitter)"):
            raise UsageError(f"--messages {have[stem]}: the first line must be your subject, not empty or the placeholder")
        out[p.name] = text + "\n"
    return out


@dataclass
class Sender:
    """Who sends the commits and how: the submitter's git identity (None: unset), whether they sign off,
    whether the upstream takes only its authors' own messages, and its name for the placeholder."""
    submitter: tuple[str, str] | None
    signoff: bool
    author_messages: bool
    upstream: str


def finish_commits(repo: Path, base: str, patches: list[Patch], own: dict[str, str], sender: Sender) -> list[str]:
    """Each commit of base..HEAD (one per patch, in order) as the PR sends it: its message — the
    series' own, or where the upstream takes no generated ones (`author_messages`) the submitter's
    (`own`) or the placeholder — without lucepatch's placeholder sign-offs, with the submitter's when
    `signoff`; authored by the patch's author, or by the submitter where that was lucepatch's
    placeholder; committed by the submitter. The patch's own Signed-off-by lines from people stay
    (they certify the code, DCO). Returns the patches left with a placeholder message."""
    submitter, signoff, author_messages, upstream = sender.submitter, sender.signoff, sender.author_messages, sender.upstream
    commits = git.run(repo, "rev-list", "--reverse", f"{base}..HEAD").stdout.split()
    if len(commits) != len(patches):
        raise CheckFailed(f"{len(commits)} commits for {len(patches)} patches on {base[:12]}; cannot give each its message")
    placeholders = []
    parent = base
    for sha, p in zip(commits, patches):
        fields = dict(zip(("an", "ae", "ad", "cn", "ce", "cd"), git.run(
            repo, "log", "-1", "--format=%an%x00%ae%x00%aD%x00%cn%x00%ce%x00%cD", sha).stdout.strip().split("\x00")))
        if not author_messages:
            msg = git.run(repo, "log", "-1", "--format=%B", sha).stdout
        elif p.name in own:
            msg = own[p.name]
        else:
            placeholders.append(p.name)
            signoffs = "".join(f"Signed-off-by: {s}\n" for s in p.trailer_all("Signed-off-by"))
            msg = (f"{PLACEHOLDER_SUBJECT}\n\n" + PLACEHOLDER_BODY.format(upstream=upstream, patch=p.name)
                   + (f"\n{signoffs}" if signoffs else ""))
        people = [s for s in signed_off_by(msg) if not is_placeholder(s)]
        me = f"{submitter[0]} <{submitter[1]}>" if submitter else None
        if signoff and me and me not in people:
            people.append(me)
        msg = trailers.edit(msg, remove=["Signed-off-by"], add=[("Signed-off-by", s) for s in people])
        author = (submitter[0], submitter[1]) if is_placeholder(fields["ae"]) and submitter else (fields["an"], fields["ae"])
        committer = submitter or (fields["cn"], fields["ce"])
        env = {"GIT_AUTHOR_NAME": author[0], "GIT_AUTHOR_EMAIL": author[1], "GIT_AUTHOR_DATE": fields["ad"],
               "GIT_COMMITTER_NAME": committer[0], "GIT_COMMITTER_EMAIL": committer[1], "GIT_COMMITTER_DATE": fields["cd"]}
        tree = git.run(repo, "rev-parse", f"{sha}^{{tree}}").stdout.strip()
        parent = odb.commit_tree(repo, tree, parent, msg, env=env)
    git.run(repo, "reset", "-q", "--soft", parent)
    return placeholders


def name_after_patches(folder: Path, patches: list[Patch]) -> None:
    """format-patch names a file after its commit's subject — for a placeholder message, the placeholder
    (`0001-TODO-submitter-write-this-...`): each file is named after the patch, what it changes
    (`0001-fix-allocator-....patch`), the revision prefix (`v2-`) kept."""
    files = sorted(folder.glob("*.patch"))
    for f, p in zip(files, patches):
        prefix = f.name[:f.name.index("-") + 1] if f.name.startswith("v") else ""
        number = f.name[len(prefix):len(prefix) + 4]
        slug = p.name[:-6] if p.name.endswith(".patch") else p.name
        f.rename(folder / f"{prefix}{number}-{slug.replace('/', '-')}.patch")
