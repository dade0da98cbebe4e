"""CI stage: `lucepatch ci` gating the fakehami fixture target, as a consuming project would run it.

Builds the fixture upstream + workspace (tests/test_pr_fakehami.make_fakehami_ws) in a temporary
directory, then runs `lucepatch ci fakehami --no-cache --driver fake --junit FILE` and checks that
the JUnit report is well formed. Exit status: lucepatch ci's, or 1 on a malformed report.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from test_pr_fakehami import make_fakehami_ws  # noqa: E402


def main() -> int:
    junit = Path(sys.argv[1] if len(sys.argv) > 1 else "lucepatch-ci.xml").resolve()
    with tempfile.TemporaryDirectory(prefix="lucepatch-ci-gate-") as d:
        fx = make_fakehami_ws(Path(d))
        env = dict(os.environ, LUCEPATCH_SRC_FAKEHAMI=str(fx["up"]), LUCEPATCH_CACHE=str(Path(d) / "cache"))
        cmd = [sys.executable, "-m", "lucepatch", "--workspace", str(fx["ws"]), "ci", "fakehami", "--no-cache",
               "--driver", "fake", "--junit", str(junit)]
        print("$ " + " ".join(cmd[2:]), flush=True)
        rc = subprocess.run(cmd, env=env).returncode
    root = ET.parse(junit).getroot()
    cases = list(root.iter("testcase"))
    failures = [c for c in cases if c.find("failure") is not None]
    print(f"lucepatch ci: exit {rc}; JUnit {junit}: {len(cases)} cases, {len(failures)} failures")
    if not cases:
        print("ci gate: the JUnit report has no test cases", file=sys.stderr)
        return 1
    return rc


if __name__ == "__main__":
    sys.exit(main())
