"""The CI gate (`lucepatch ci`, `lucepatch.api.gate`): per target, lint -> check on the pinned base ->
canary check on an upstream head -> build -> verify every scenario the series names -> probes.

Results are cached under <cache>/ci/<target>-<key>.json, key = sha256 of every input (series and
target.toml bytes, reproducer hashes, upstream commits, driver kind and version, runs, lucepatch
version). Reports: JUnit XML, markdown (reports.py).
"""

from lucepatch.services.gate.reports import junit_xml, markdown, write_reports
from lucepatch.services.gate.result import FAIL, PASS, SKIP, WARN, Step, TargetResult
from lucepatch.services.gate.run import (cache_key, exit_code, failed_target, find_checkout, gate_all, gate_target, missing_base,
                               skipped_target, ungated_lines)
from lucepatch.services.gate.steps import named_scenarios

__all__ = ["FAIL", "PASS", "SKIP", "WARN", "Step", "TargetResult", "cache_key", "exit_code", "failed_target",
           "find_checkout", "gate_all", "gate_target", "junit_xml", "markdown", "missing_base", "named_scenarios", "skipped_target",
           "ungated_lines", "write_reports"]
