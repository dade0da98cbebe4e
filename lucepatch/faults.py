"""Test-only pause points, so the fault-injection tests can signal a run at an exact place.

With LUCEPATCH_TEST_PAUSE_AT_PATCH=<dir>, `pause(name)` creates <dir>/<name> holding the pid and
waits until the test removes it. Names: `boundary-<k>` before patch k+1 of an apply
(k = len(series): all applied, before the checkout moves) and `switch-<step>` inside the
checkout switch (engine/checkout.py). Unset (always, outside tests) it costs one dict lookup.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

PAUSE_ENV = "LUCEPATCH_TEST_PAUSE_AT_PATCH"


def pause(name: str) -> None:
    d = os.environ.get(PAUSE_ENV)
    if not d:
        return
    marker = Path(d) / name
    tmp = marker.with_name(marker.name + ".tmp")
    tmp.write_text(str(os.getpid()))
    os.replace(tmp, marker)
    while marker.exists():
        time.sleep(0.01)
