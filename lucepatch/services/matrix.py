"""`matrix` as a service: the series' cells at every commit of a range (engine/matrix.py), timed."""

from __future__ import annotations

import time
from pathlib import Path

from lucepatch.engine.checkout import open_checkout
from lucepatch.engine.matrix import SYMBOL, MatrixResult, SubMatrix, matrix_of  # noqa: F401  (SYMBOL: the cells' letters)
from lucepatch.target import Target


def matrix(t: Target, src: Path, cache: Path, rev_range: str, *, independent: bool = False,
           first_parent: bool = False, jobs: int | None = None) -> tuple[MatrixResult, list[SubMatrix], float]:
    """(the target's cells, each sub-target's, the seconds it took) over `rev_range`."""
    open_checkout(src)
    t0 = time.monotonic()
    res, subs = matrix_of(t, src, cache, rev_range, independent=independent, first_parent=first_parent, jobs=jobs)
    return res, subs, time.monotonic() - t0
