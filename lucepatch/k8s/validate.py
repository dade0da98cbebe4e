"""Prove rendered objects are real Kubernetes objects, offline.

Two independent checks, both used by the tests and by ``render --validate``:

1. ``strict_validate``: JSON-schema validation against the OpenAPI schemas of pinned Kubernetes
   versions shipped by ``kubernetes-validate`` (strict: unknown fields are rejected, which the
   API server itself would silently drop or, with server-side field validation, reject).
   Default versions: 1.29 and 1.31 (k0s lines shipped in Olares releases; see docs/cluster.md)
   and 1.33.
2. ``build_models``: deserialise each object into the ``kubernetes`` client's model classes
   (``ApiClient().deserialize`` on a fake response) and serialise back, proving the client
   that ``deploy`` uses can carry it without losing fields.
"""

from __future__ import annotations

import inspect
import json

from lucepatch.errors import CheckFailed, EnvironmentMissing

DEFAULT_VERSIONS = ("1.29.0", "1.31.0", "1.33.0")


def strict_validate(objs: list[dict], versions=DEFAULT_VERSIONS) -> list[str]:
    """Problems found (empty = valid under every version). Raises EnvironmentMissing without the schemas."""
    try:
        import kubernetes_validate  # optional: kubernetes-validate (the test extra)
        from kubernetes_validate.utils import SchemaNotFoundError  # optional: kubernetes-validate (the test extra)
    except ModuleNotFoundError:
        raise EnvironmentMissing("kubernetes-validate is needed for offline schema checks: pip install kubernetes-validate")
    problems = []
    for ver in versions:
        for o in objs:
            what = f"{o.get('kind')}/{(o.get('metadata') or {}).get('name')} @ {ver}"
            try:
                kubernetes_validate.validate(o, ver, strict=True)
            except kubernetes_validate.ValidationError as e:
                path = ".".join(str(p) for p in e.path)
                problems.append(f"{what}: {path}: {e.message}")
            except SchemaNotFoundError as e:
                problems.append(f"{what}: no schema ({e.message})")
    return problems


class _FakeResponse:
    def __init__(self, obj: dict):
        self.data = json.dumps(obj)


def _deserialize(api, obj: dict, name: str):
    """kubernetes < 35 takes a response object (``.data``); newer clients take the text."""
    params = list(inspect.signature(api.deserialize).parameters)
    if params and params[0] == "response_text":
        return api.deserialize(json.dumps(obj), name, "application/json")
    return api.deserialize(_FakeResponse(obj), name)


def model_class_name(obj: dict) -> str:
    """``apps/v1`` + ``Deployment`` -> ``V1Deployment`` (the kubernetes client's naming)."""
    version = obj["apiVersion"].split("/")[-1]
    return version[0].upper() + version[1:] + obj["kind"]


def build_models(objs: list[dict]) -> list:
    """Deserialise into kubernetes client models; returns them. Raises CheckFailed on loss."""
    try:
        from kubernetes import client  # optional: the k8s extra
    except ModuleNotFoundError:
        raise EnvironmentMissing("the kubernetes client is needed: pip install 'lucepatch[k8s]'")
    api = client.ApiClient()
    models = []
    for o in objs:
        name = model_class_name(o)
        if not hasattr(client, name):
            raise CheckFailed(f"kubernetes client has no model {name} for {o['kind']}")
        model = _deserialize(api, o, name)
        back = api.sanitize_for_serialization(model)
        if _normalise(back) != _normalise(o):
            raise CheckFailed(f"{o['kind']}/{o['metadata']['name']} changed through the client models: "
                              f"{_first_diff(_normalise(o), _normalise(back))}")
        models.append(model)
    return models


def _normalise(x):
    if isinstance(x, dict):
        return {k: _normalise(v) for k, v in x.items() if v is not None}
    if isinstance(x, list):
        return [_normalise(v) for v in x]
    return x


def _first_diff(a, b, path="") -> str:
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b)):
            if a.get(k) != b.get(k):
                return _first_diff(a.get(k), b.get(k), f"{path}.{k}")
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b)):
            if x != y:
                return _first_diff(x, y, f"{path}[{i}]")
    return f"{path or '.'}: {a!r} != {b!r}"
