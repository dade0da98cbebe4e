"""The reference the closed form (lucepatch/verify/bounds.py) is checked against: the exact enumeration
lucepatch/verify/rules.py shipped until issue 29, kept here verbatim (only the imports changed).

It walks every launch-order outcome sequence a rule can produce — driven by the rule's own `need`,
so it enumerates any rule, the settling one included — groups the terminal states by counts (runs are
i.i.d., so a sequence's probability depends only on its counts) and judges each with the very `judge`
verify uses. Cost ~N^3 (0.2 s at N = 20, 9 s at 120, minutes at 300): a reference, not a runtime.
"""

from __future__ import annotations

from fractions import Fraction
from functools import lru_cache

from lucepatch.verify.evidence import Tally
from lucepatch.verify.rules import CHECKED, GUARD, Need, Side
from lucepatch.verify.verdict import judge


def _next_variant(nb: int, np_: int, need: Need) -> str | None:
    """The scheduler's interleaving: b0, p0, b1, p1, ... among the runs still needed."""
    wants_b, wants_p = nb < need.baseline, np_ < need.patched
    if wants_b and (nb <= np_ or not wants_p):
        return "baseline"
    if wants_p:
        return "patched"
    return None


@lru_cache(maxsize=256)
def terminal_paths(rule, kind: str = CHECKED) -> tuple[tuple[int, int, int, int, int], ...]:
    """Every state the rule can stop in, as (baseline runs, baseline failures, patched runs, patched
    failures, number of launch-order outcome sequences that end there). Controls assumed passing,
    no invalid or skipped runs (the cases where `proven` is possible at all)."""
    frontier = {(0, 0, 0, 0): 1}
    done: dict[tuple[int, int, int, int], int] = {}
    while frontier:
        nxt: dict[tuple[int, int, int, int], int] = {}
        for (nb, fb, np_, fp), ways in frontier.items():
            need = rule.need(kind, Side(nb, fb), Side(np_, fp))
            v = _next_variant(nb, np_, need)
            if v is None:
                done[(nb, fb, np_, fp)] = done.get((nb, fb, np_, fp), 0) + ways
                continue
            for failed in (0, 1):
                s = (nb + 1, fb + failed, np_, fp) if v == "baseline" else (nb, fb, np_ + 1, fp + failed)
                nxt[s] = nxt.get(s, 0) + ways
        frontier = nxt
    return tuple((*k, w) for k, w in sorted(done.items()))


def verdict_of(rule, kind: str, nb: int, fb: int, np_: int, fp: int) -> str:
    return judge(Tally(runs=nb, passed=nb - fb, failures=fb), Tally(runs=np_, passed=np_ - fp, failures=fp),
                 control=False, control_ok=True, guard=kind == GUARD, alpha=rule.alpha)[0]


@lru_cache(maxsize=512)
def proven_states(rule, kind: str = CHECKED, verdict: str = "proven") -> tuple:
    """The terminal states (with their path counts) whose verdict — computed by the very function
    `verify` uses — is `verdict`."""
    return tuple((nb, fb, np_, fp, ways) for nb, fb, np_, fp, ways in terminal_paths(rule, kind)
                 if verdict_of(rule, kind, nb, fb, np_, fp) == verdict)


def proof_error(rule, q_base, q_patched, kind: str = CHECKED, verdict: str = "proven"):
    """P(verdict) when every baseline run fails with probability q_base and every patched run with
    q_patched, independently. Exact when given Fractions."""
    total = 0
    for nb, fb, np_, fp, ways in proven_states(rule, kind, verdict):
        total += ways * q_base ** fb * (1 - q_base) ** (nb - fb) * q_patched ** fp * (1 - q_patched) ** (np_ - fp)
    return total


def error_bounds(rule, grid: int = 400, kind: str = CHECKED, exact: bool = True) -> dict:
    """Upper bounds of the two errors, from the exact P(proven) on a grid of failure rates
    (exact=True: in rational arithmetic; else in floats, relative error ~1e-15).

    P(proven) grows with q_b and falls with q_p (checked on the grid by the tests), so
    (i)  sup over q_b <= q_p is sup over q_b = q_p = q, and on [q_i, q_i+1] it is at most
         P(q_b = q_i+1, q_p = q_i): the maximum of those brackets bounds it rigorously;
    (ii) sup over q_p >= theta, any q_b, is P(q_b = 1, q_p = theta).
    """
    num = Fraction if exact else (lambda a, b=1: a / b)
    qs = [num(i, grid) for i in range(grid + 1)]
    no_effect = max(proof_error(rule, qs[i + 1], qs[i], kind) for i in range(grid))
    # theta as recorded (4 decimals, rounded up)
    at_theta = proof_error(rule, num(1), num(round(rule.theta * 10 ** 4), 10 ** 4), kind)
    return {"method": "exact enumeration of every launch-order outcome sequence the rule can produce",
            "proven_if_no_effect": float(no_effect), "proven_if_patched_rate_at_least_theta": float(at_theta),
            "theta": rule.theta}
