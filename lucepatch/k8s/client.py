"""Live cluster calls (kubernetes client, imported lazily). Needs LUCEPATCH_KUBECONFIG.

NOT exercised against a real API server in this repository's tests (none can run on the
development or CI machines): only ``swap_status_rows`` (pure parsing) is tested, on recorded data.
"""

from __future__ import annotations

import os
import time

from lucepatch.errors import CheckFailed, EnvironmentMissing
from lucepatch.k8s import swap

SWAP_SELECTOR = "app.kubernetes.io/name=lucepatch-hami-core-swap"


def kubeconfig_path(explicit: str | None = None) -> str | None:
    """--kubeconfig when given, else $LUCEPATCH_KUBECONFIG (never the user's ~/.kube/config)."""
    return explicit or os.environ.get("LUCEPATCH_KUBECONFIG") or None


def load(context: str | None = None, kubeconfig: str | None = None):
    try:
        from kubernetes import client, config  # optional: the k8s extra
    except ModuleNotFoundError:
        raise EnvironmentMissing("the kubernetes client is missing: pip install 'lucepatch[k8s]'")
    path = kubeconfig_path(kubeconfig)
    if not path:
        raise EnvironmentMissing("no cluster: set LUCEPATCH_KUBECONFIG to a kubeconfig file (or use --dry-run)")
    if not os.path.isfile(path):
        raise EnvironmentMissing(f"LUCEPATCH_KUBECONFIG={path} does not exist: point it at a kubeconfig file")
    config.load_kube_config(config_file=path, context=context)
    return client


def apply(objs: list[dict], context: str | None = None, kubeconfig: str | None = None) -> list[str]:
    """Create each object, or replace it when it exists (server-side create-or-replace)."""
    client = load(context, kubeconfig)
    from kubernetes import utils  # optional: the k8s extra
    from kubernetes.client.rest import ApiException  # optional: the k8s extra

    api = client.ApiClient()
    done = []
    for o in objs:
        what = f"{o['kind']}/{o['metadata']['name']}"
        try:
            utils.create_from_dict(api, o)
            done.append(f"created {what}")
        except utils.FailToCreateError as e:
            if all(getattr(x, "status", None) == 409 for x in e.api_exceptions):
                _replace(client, o)
                done.append(f"replaced {what}")
            else:
                raise CheckFailed(f"creating {what} failed: {e}")
        except ApiException as e:
            raise CheckFailed(f"creating {what} failed: HTTP {e.status} {e.reason}")
    return done


def _replace(client, o: dict) -> None:
    ns, name, kind = o["metadata"].get("namespace"), o["metadata"]["name"], o["kind"]
    if kind == "DaemonSet":
        client.AppsV1Api().replace_namespaced_daemon_set(name, ns, o)
    elif kind == "ConfigMap":
        client.CoreV1Api().replace_namespaced_config_map(name, ns, o)
    else:
        raise CheckFailed(f"{kind}/{name} exists already; delete it first (kubectl delete {kind.lower()} {name})")


def swap_pod_logs(namespace: str, context: str | None = None, wait_s: float = 300) -> dict[str, str]:
    """node -> log text of each swap DaemonSet pod, waiting until each printed its result."""
    from kubernetes.client.rest import ApiException  # optional: the k8s extra

    client = load(context)
    core = client.CoreV1Api()
    deadline = time.monotonic() + wait_s
    while True:
        pods = core.list_namespaced_pod(namespace, label_selector=SWAP_SELECTOR).items
        logs = {}
        for p in pods:
            if p.status.phase != "Running":
                continue
            try:
                logs[p.spec.node_name] = core.read_namespaced_pod_log(p.metadata.name, namespace, container="swap")
            except ApiException:  # a pod not ready yet: its log is not there to read
                continue
        if pods and all(swap.parse_swap_result(t) for t in logs.values()) and len(logs) == len(pods):
            return logs
        if time.monotonic() > deadline:
            return logs
        time.sleep(3)


def swap_status_rows(expected_sha: str | None, logs: dict[str, str]) -> list[dict]:
    """Per node: last swap result from its pod log vs the expected sha256 (pure; tested on recorded logs)."""
    rows = []
    for node in sorted(logs):
        res = swap.parse_swap_result(logs[node]) or {}
        cur = res.get("current_sha256")
        outcome = res.get("outcome", "no-result")
        if outcome == "refused":
            state = "refused"
        elif not cur:
            state = "unknown"
        elif expected_sha and cur == expected_sha:
            state = "ok"
        else:
            state = "drift"  # e.g. a HAMi update overwrote the fix
        rows.append({"node": node, "state": state, "outcome": outcome, "current_sha256": cur,
                     "expected_sha256": expected_sha, "message": res.get("message", "")})
    return rows


def pod_exec(pod: str, *, namespace: str = "default", container: str | None = None, command: list[str],
             context: str | None = None, kubeconfig: str | None = None) -> str:
    """The output (stdout and stderr) of `command` run in a running pod through the exec API
    (node --pod runs lucepatch/lines/pod.py's script this way; lines sits a floor below and gets
    this function from the caller)."""
    k8s = load(context=context, kubeconfig=kubeconfig)
    from kubernetes.client.rest import ApiException  # optional: the k8s extra
    from kubernetes.stream import stream  # optional: the k8s extra

    kw = {"container": container} if container else {}
    try:
        return stream(k8s.CoreV1Api().connect_get_namespaced_pod_exec, pod, namespace, command=command,
                      stderr=True, stdin=False, stdout=True, tty=False, **kw) or ""
    except ApiException as exc:
        raise CheckFailed(f"cannot exec into pod {namespace}/{pod}: {exc.status} {exc.reason}")
