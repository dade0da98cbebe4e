"""What each upstream expects of a PR, as data: template, commit style, checks.

A target picks its conventions by its upstream URL; its `[pr]` table in target.toml overrides any
key (`template`, `checks`, `cpplint_args`, `subject_style`, `ai_use`, ...). A new upstream is a new
entry here (or a `[pr]` table), never an `if` on a target name.
"""

from __future__ import annotations

import copy
import re

# Keys:
#   template       templates/pr/<template>.md.j2
#   checks         names from lucepatch.upstream.checks.CHECKS, run in the PR tree before anything is written
#   cpplint_args   extra cpplint arguments (the upstream's own settings)
#   subject_style  "conventional" -> `type(scope): subject` required on every commit
#   ai_use_required  the body carries an AI-use disclosure; `[pr] ai_use` or `pr --ai-use` must fill it
#   kind           the /kind label for Kubernetes-style templates
#   commit_messages  "series": the commits carry the patches' messages; "author": the submitter writes
#                  every commit message (an upstream that takes no generated ones): lucepatch leaves a
#                  placeholder in each until `pr --messages DIR` gives them, and will not push placeholders
#   validation     the body must say which hardware and driver the fix was validated on
#   commit_types   the conventional-commit types the upstream allows (None: the usual list)
#   benchmark      the upstream asks for before/after numbers with their method (the body leaves the
#                  section for the submitter unless the evidence measured rates)
# lucepatch's series carry this identity where no person has claimed a patch yet (From:, Signed-off-by:).
# It is nobody: a PR never sends it — such a commit is authored by the submitter (git config), its
# placeholder sign-off is dropped, and the DCO check refuses it (issue 35).
PLACEHOLDER_DOMAIN = "lucepatch.invalid"


def is_placeholder(identity: str) -> bool:
    """`Name <x@lucepatch.invalid>` (or the bare email): lucepatch's placeholder, not a person."""
    return f"@{PLACEHOLDER_DOMAIN}" in identity.lower()


DEFAULT = {
    "template": "generic",
    "checks": ["dco"],
    "cpplint_args": [],
    "subject_style": None,
    "ai_use_required": False,
    "kind": "bug",
    "commit_messages": "series",
    "validation": False,
    "commit_types": None,
    "benchmark": False,
}

UPSTREAMS: dict[str, dict] = {
    # HAMi-core's .github/PULL_REQUEST_TEMPLATE.md: the Kubernetes-style sections of HAMi's own
    # template plus "AI Disclosure" (briefly disclose any AI assistance; no AI co-author or assistance
    # trailers on commits). HAMi's CONTRIBUTING asks that a fix be validated on real GPUs, device and
    # driver stated, and takes no AI-generated commit messages. DCO on every commit, cpplint
    # --linelength=120, hack/check_cuda_hook_consistency.py when hooks change (docs/field-notes.md §2, §8).
    "github.com/project-hami/hami-core": {
        "template": "hami",
        "checks": ["dco", "cpplint", "hook-consistency"],
        "cpplint_args": ["--linelength=120"],
        "subject_style": "conventional",
        "commit_messages": "author",
        "validation": True,
    },
    "github.com/project-hami/hami": {
        "template": "hami",
        "checks": ["dco"],
        "subject_style": "conventional",
        "commit_messages": "author",
        "validation": True,
    },
    # Lucebox's CONTRIBUTING.md (Luce-Org/lucebox, read 2026-07): conventional commits with the types
    # feat, fix, refactor, perf, docs, test, bench, chore, ci; one concern per PR (kernel/algorithm,
    # docs and build config in separate commits or PRs); benchmark before and after on the same hardware,
    # power limit and warm-up ("numbers without methodology don't get merged"); the correctness check
    # run; no DCO. The series' own messages go (conventional subjects); the body asks for the numbers.
    "github.com/luce-org/lucebox-hub": {
        "template": "lucebox",
        "checks": ["conventional-commits"],
        "subject_style": "conventional",
        "commit_types": ["feat", "fix", "refactor", "perf", "docs", "test", "bench", "chore", "ci"],
        "benchmark": True,
    },
    "github.com/luce-org/lucebox": {
        "template": "lucebox",
        "checks": ["conventional-commits"],
        "subject_style": "conventional",
        "commit_types": ["feat", "fix", "refactor", "perf", "docs", "test", "bench", "chore", "ci"],
        "benchmark": True,
    },
    # llama.cpp family: AI-use disclosure in every PR.
    "github.com/ggml-org/llama.cpp": {"template": "llamacpp", "checks": [], "ai_use_required": True},
    "github.com/ggerganov/llama.cpp": {"template": "llamacpp", "checks": [], "ai_use_required": True},
    "github.com/luce-org/llama.cpp-dflash-ggml": {"template": "llamacpp", "checks": [], "ai_use_required": True},
}


def _key(url: str) -> str:
    u = url.strip().lower()
    for prefix in ("https://", "http://", "ssh://", "git://"):
        if u.startswith(prefix):
            u = u[len(prefix):]
    if u.startswith("git@"):
        u = u[4:].replace(":", "/", 1)
    u = u.rstrip("/")
    if u.endswith(".git"):
        u = u[:-4]
    return u


def conventions_for(upstream_url: str, pr_table: dict | None = None) -> dict:
    """The upstream's conventions, with the target's `[pr]` table applied on top."""
    conv = copy.deepcopy(DEFAULT)
    conv.update(copy.deepcopy(UPSTREAMS.get(_key(upstream_url), {})))
    for k, v in (pr_table or {}).items():
        conv[k] = v
    return conv


def repo_slug(upstream_url: str) -> str | None:
    """owner/name for a GitHub URL, else None."""
    m = re.search(r"github\.com[/:]([^/\s]+)/([^/\s]+?)(?:\.git)?/?$", upstream_url.strip())
    return f"{m.group(1)}/{m.group(2)}" if m else None
