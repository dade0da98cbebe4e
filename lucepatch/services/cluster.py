"""The cluster side as services: `render` (manifests, the Helm chart, the Olares app, the real
clients table), `deploy hami-core` and `cluster status` (docs/cluster.md). Commands parse, call
these, and print what comes back; each verb's Kubernetes code is imported by its own function."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from lucepatch import report
from lucepatch.errors import CheckFailed, UsageError
from lucepatch.node import driver as drv, report as noderep
from lucepatch.verify.reproducer import list_reproducers

SET_ALIASES = {"daemonset": "hami-core-swap", "swap": "hami-core-swap", "verify-jobs": "verify-job", "job": "verify-job",
               "bench": "bench-job"}
SETS = ["lucebox", "lucebox-vendored", "rbac", "verify-job", "hami-core-swap", "bench-job", *SET_ALIASES]
# the Lucebox server, one set / chart / Olares app per line of the series: `lucebox` (8305b6c, lucepatch's image)
# and `lucebox-vendored` (62880e2, upstream's own image and entrypoint); k8s/values.py LUCEBOX_SETS
APPS = ["lucebox", "lucebox-vendored"]


# ---- cluster status -----------------------------------------------------------------------------
def cluster_status(namespace: str, name: str, context: str | None) -> tuple[str | None, list[dict]]:
    """Per node of the swap DaemonSet: the library's sha256 against the one it should hold."""
    from lucepatch.k8s import client  # lazy: a live cluster only, 14 ms

    api = client.load(context)
    ds = api.AppsV1Api().read_namespaced_daemon_set(name, namespace)
    expected = (ds.metadata.annotations or {}).get("lucepatch.dev/lib-sha256") or None
    logs = client.swap_pod_logs(namespace, context=context, wait_s=0)
    return expected, client.swap_status_rows(expected, logs)


# ---- deploy -------------------------------------------------------------------------------------
@dataclass
class Deployed:
    doc: dict
    namespace: str
    manifests: str = ""  # --dry-run: the manifests as one YAML stream
    objects: list = field(default_factory=list)  # --dry-run: the same as objects (for --json)


def deploy_hami_core(*, dry_run: bool, as_objects: bool = False, **options) -> Deployed:
    """`deploy hami-core`: the gates on the library and its evidence, then the DaemonSet that swaps
    it on every HAMi node (or, with `dry_run`, its manifests). `options`: those of
    k8s/deploy.deploy_hami_core (on_gate, on_refused, on_apply report as it goes)."""
    from lucepatch.k8s import manifests  # lazy: `deploy hami-core` only, 36 ms
    from lucepatch.k8s.deploy import deploy_hami_core as deploy  # lazy: `deploy hami-core` only, 36 ms

    doc, docs, namespace = deploy(dry_run=dry_run, **options)
    out = Deployed(doc, namespace)
    if dry_run:
        out.manifests = manifests.join(docs)
        out.objects = manifests.to_objects(docs) if as_objects else None
    return out


# ---- render -------------------------------------------------------------------------------------


def set_values(name: str) -> list[dict]:
    """Every value of a set with its default and meaning (`render k8s SET --show-values`)."""
    from lucepatch.k8s import values  # lazy: `render` only, 18 ms

    return values.describe(name)


def driver_gate(vals: dict, node_driver: str | None, node_report: str | None, *, lucebox: bool, default=None) -> None:
    """Refuse (exit 1) an image whose CUDA the node's driver cannot start; say so when it can."""
    d = noderep.node_driver(node_driver, node_report) or default
    if d is None:
        return
    if not lucebox:
        raise UsageError("--node-driver / --node-report apply to the lucebox sets (their image_cuda)")
    report.progress(f"node driver: {drv.require(str(vals['image_cuda']), d).message}")


@dataclass
class Rendered:
    name: str
    text: str  # the manifests as one YAML stream
    objects: list
    written: list[str]


def render_set(name: str, *, values_file: str | None, sets, node_driver: str | None, node_report: str | None,
               validate_versions: str | None, out: str | None) -> Rendered:
    """`render k8s SET`: the manifests (validated against Kubernetes versions when asked), written
    to `out` as <set>.yaml files and a kustomization.yaml when given — only once everything is
    rendered, parsed and validated: a refusal leaves `out` as it was."""
    from lucepatch.k8s import manifests, validate, values  # lazy: `render k8s` only, 18 ms

    vals = values.resolve(name, values.load_file(values_file) if values_file else {}, values.parse_set(sets))
    driver_gate(vals, node_driver, node_report, lucebox=name in APPS)
    docs = manifests.render_verify_jobs(vals) if name == "verify-job" else manifests.render(name, vals)
    objects = manifests.to_objects(docs)
    if validate_versions:
        problems = validate.strict_validate(objects, [v.strip() for v in validate_versions.split(",")])
        if problems:
            raise CheckFailed(f"{len(problems)} schema problem(s), first: {problems[0]}")
        report.progress(f"validated against Kubernetes {validate_versions}")
    # `kubectl apply -k DIR` / `kubectl kustomize DIR` take the folder as it is
    files = {d.filename: d.text for d in docs} | {"kustomization.yaml": manifests.kustomization(docs)}
    written = []
    if out:
        Path(out).mkdir(parents=True, exist_ok=True)
        for fname, text in files.items():
            p = Path(out) / fname
            p.write_text(text, encoding="utf-8")
            written.append(str(p))
            report.progress(f"wrote {p}")
    return Rendered(name, manifests.join(docs), objects, written)


def render_helm(out: str, *, values_file: str | None, sets, node_driver: str | None, node_report: str | None,
                app: str = "lucebox"):
    """`render helm APP`: the chart of one Lucebox line (its `helm template` = `render k8s APP`)."""
    from lucepatch.k8s import chart, values  # lazy: `render chart` only, 19 ms

    overrides = [values.load_file(values_file) if values_file else {}, values.parse_set(sets)]
    driver_gate(values.resolve(app, *overrides), node_driver, node_report, lucebox=True)
    return chart.render_helm(Path(out), {k: v for o in overrides for k, v in o.items()}, set_name=app)


def render_olares(out: str, *, values_file: str | None, sets, node_driver: str | None, node_report: str | None,
                  app: str = "lucebox"):
    """`render olares APP`: the Olares app of one Lucebox line, gated against the oldest driver Olares
    ships unless the node's is named."""
    from lucepatch.k8s import olares as ol, values  # lazy: `render olares` only, 19 ms

    overrides = {}
    for o in (values.load_file(values_file) if values_file else {}, values.parse_set(sets)):
        overrides.update(o)
    vals = ol.package_values(overrides, set_name=app)
    driver_gate(vals, node_driver, node_report, lucebox=True, default=min(drv.platform_drivers("olares")))
    return ol.render_olares(Path(out), overrides, set_name=app)


def real_clients(ws, paths: list[str], target: str) -> dict:
    """`render real-clients`: the table's markdown, columns, rows and sources from the evidence."""
    from lucepatch.upstream import real_clients as rc  # lazy: `render real-clients` only, 20 ms

    hashes = {r.name: r.hash for r in list_reproducers(ws)}
    docs = rc.load([Path(p) for p in paths], target=target, repro_hashes=hashes)
    return {"markdown": rc.markdown(docs), "columns": rc.COLUMNS, "rows": rc.rows(docs),
            "sources": [rc.source(d) for d in docs]}
