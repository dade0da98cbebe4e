"""lucepatch as a library: the public face of the use cases in lucepatch/services/.

Every `lucepatch` command calls the library through this module and nothing else (it only adds
option parsing and printing; tests/test_layers.py and tests/test_api_surface.py hold it to that),
so a program gets exactly what the CLI does: the same builds, the same runs, the same typed
evidence. A name here is the service's own function, not a wrapper: `SERVICES` says where each one
lives, and it is imported on first use, so `import lucepatch.api` costs nothing a caller does not
use (`lucepatch --help` and `lucepatch list` pay only for their own verb). Everything outside this
module (and the types its functions return) is internal and may change without notice. Errors are
`lucepatch.errors.LucepatchError` subclasses with an `exit_code` (UsageError 2, CheckFailed 1,
EnvironmentMissing 3); see docs/api.md.

    from lucepatch import api
    ws = api.open_workspace("path/to/workspace")
    t = api.target(ws, "hami-core")
    src = api.source(t, "~/src/HAMi-core")
    cache = api.cache_dir()
    ev = api.verify(ws, t, ["async-sched"], source=src, cache=cache, driver="fake")
    ev.verdict, [s.verdict for s in ev.scenarios], ev.variants["patched"].artifact.sha256
"""

from __future__ import annotations

import importlib

from lucepatch.errors import CheckFailed, EnvironmentMissing, LucepatchError, UsageError

# Where each public name lives: module -> its names ("public=attribute" where the service's own name
# would be ambiguous here). Only services/ modules: the use cases live there, each named once.
SERVICES: dict[str, str] = {
    "lucepatch.services.workspace": "open_workspace cache_dir target source Workspace Target",
    "lucepatch.services.series": "listing load_checked check apply status has_conflicts export import_patches mark "
                                 "CONFLICT SeriesResult",
    "lucepatch.services.matrix": "matrix MATRIX_SYMBOL=SYMBOL",
    "lucepatch.services.lint": "lint LINT_ERROR=ERROR",
    "lucepatch.services.rebase": "rebase rebase_prepare=prepare rebase_start=start rebase_run=run "
                                 "rebase_open=open_session rebase_status=session_status rebase_table=table "
                                 "rebase_ask=ask_human rebase_ask_absorbed=ask_absorbed RebaseOptions=Options "
                                 "RebaseOutcome=Outcome",
    "lucepatch.services.builds": "build build_profiles builds_per_profile build_image render_image plan_upstream_image "
                                 "ImagePlanRequest image_from_upstream build_device_plugin image_provenance probe",
    "lucepatch.services.verify": "verify selection reproducers cluster_backend print_verdicts retire retire_or_map "
                                 "bisect BISECT_FOUND=FOUND build_variants write_evidence load_evidence clock Evidence",
    "lucepatch.services.show": "read_document evidence_view write_html print_view one_field report_table server_matrix "
                               "EVIDENCE",
    "lucepatch.services.pr": "write_pr PrResult",
    "lucepatch.services.gate": "gate=gate_target gate_all write_gate_reports=write_reports junit_xml GATE_WARN=WARN",
    "lucepatch.services.doctor": "diagnose blocking DOCTOR_VERBS=VERBS",
    "lucepatch.services.line_fit": "which_line family_of_checkout",
    "lucepatch.services.nodes": "identify_library node_report=load_node_report inspect_node_library what_a_line_drops "
                                "report_lines drops_lines identity_lines Identity NodeReport",
    "lucepatch.services.cluster": "render_set render_helm render_olares set_values real_clients deploy_hami_core "
                                  "cluster_status K8S_SETS=SETS K8S_SET_ALIASES=SET_ALIASES LUCEBOX_APPS=APPS",
    "lucepatch.services.bench": "bench=run bench_rows=table_rows write_bench_page=write_page BenchRequest "
                                "BENCH_COLUMNS=COLUMNS",
}
NAMES: dict[str, tuple[str, str]] = {  # public name -> (module, attribute)
    pub: (module, attr or pub) for module, names in SERVICES.items()
    for pub, _, attr in (n.partition("=") for n in names.split())}

__all__ = [*NAMES, "LucepatchError", "UsageError", "CheckFailed", "EnvironmentMissing"]


def __getattr__(name: str):
    if name not in NAMES:
        raise AttributeError(f"module 'lucepatch.api' has no attribute {name!r}")
    module, attr = NAMES[name]
    # not cached in this module's globals: a lookup changes no state (tests/test_import_effects.py)
    return getattr(importlib.import_module(module), attr)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
