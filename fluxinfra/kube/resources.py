"""Resource amounts of Kubernetes Pods and Nodes: what a pod requests, what a node offers.

Input is API JSON (the dicts ``kubectl get nodes,pods -A -o json`` prints, or what the python
client's ``ApiClient().sanitize_for_serialization(obj)`` returns); amounts come back as integers
in base units: cpu in millicores, memory and other byte-valued resources in bytes, the rest as
counts, each rounded up as Kubernetes rounds (``Quantity.MilliValue`` / ``Value``).

A pod's request follows the Kubernetes rule (``resource.PodRequests``)
``max(sum(containers) + sum(sidecars), max over init containers) + overhead``: sidecars are init
containers with ``restartPolicy: Always``; a limit without a request counts as the request; a
pod-level ``spec.resources.requests`` replaces the container sum. Quantities are summed exactly
and rounded once. Both graph models (:mod:`fluxinfra.kube.graph`, :mod:`fluxinfra.kube.pools`),
the scheduler's ledger and the queue read pods and nodes through these functions.

>>> pod_requests({"spec": {"containers": [
...     {"resources": {"requests": {"cpu": "250m", "memory": "64Mi"}}},
...     {"resources": {"limits": {"cpu": "1", "nvidia.com/gpu": "1"}}}]}})
{'cpu': 1250, 'memory': 67108864, 'nvidia.com/gpu': 1}
>>> node_allocatable({"metadata": {"name": "n1"}, "status": {"allocatable": {"cpu": "3900m"}}})
{'cpu': 3900}
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from fractions import Fraction
from typing import Any

from fluxinfra.errors import FluxinfraError
from fluxinfra.inputs import shown
from fluxinfra.kube.quantity import parse_quantity

__all__ = [
    "K8sInputError",
    "TERMINATED_PHASES",
    "node_allocatable",
    "pod_is_active",
    "pod_name",
    "pod_requests",
    "resource_amounts",
]

TERMINATED_PHASES = frozenset({"Succeeded", "Failed"})


class K8sInputError(FluxinfraError, ValueError):
    """A Node or Pod object that cannot be read (names the object, the field and the fix)."""


# ----------------------------------------------------------------------------------------------
# Resource amounts: dicts of resource name -> integer (cpu in millicores, the rest rounded up).
# ----------------------------------------------------------------------------------------------


def resource_amounts(resources: Mapping[str, Any] | None, where: str) -> dict[str, int]:
    """Resource quantities in base units (cpu: millicores, the rest: Value(), rounded up)."""
    return {name: _base_units(name, q) for name, q in _exact(resources, where).items()}


def _base_units(name: str, quantity: Fraction) -> int:
    return math.ceil(quantity * 1000) if name == "cpu" else math.ceil(quantity)


def _exact(resources: Mapping[str, Any] | None, where: str) -> dict[str, Fraction]:
    """Resource quantities as exact numbers (Kubernetes adds Quantities, then rounds)."""
    if not resources:
        return {}
    if not isinstance(resources, Mapping):
        raise K8sInputError(f"{where}: {shown(resources)} is not a mapping of resource name to "
                            "quantity")
    out: dict[str, Fraction] = {}
    for name, value in resources.items():
        field_name = f"{where}.{name}"
        amount = parse_quantity(value, field_name)
        if amount < 0:
            raise K8sInputError(f"{field_name}: {shown(value)} is negative; resource quantities "
                                "must be >= 0")
        out[name] = amount
    return out


def _add(total: dict, more: Mapping) -> dict:
    for name, value in more.items():
        total[name] = total.get(name, 0) + value
    return total


def _max(total: dict, more: Mapping) -> dict:
    for name, value in more.items():
        total[name] = max(total.get(name, 0), value)
    return total


def _container_requests(container: Mapping[str, Any], where: str) -> dict[str, Fraction]:
    resources = container.get("resources") or {}
    limits = _exact(resources.get("limits"), f"{where}.resources.limits")
    requests = _exact(resources.get("requests"), f"{where}.resources.requests")
    # The API server defaults a missing request to the limit; do the same for raw manifests.
    return {**limits, **requests}


def pod_name(pod: Mapping[str, Any]) -> str:
    """``namespace/name`` of a pod, as messages and inventories name it."""
    meta = pod.get("metadata") or {}
    return f"{meta.get('namespace', 'default')}/{meta.get('name', '?')}"


def pod_requests(pod: Mapping[str, Any]) -> dict[str, int]:
    """The effective request of a pod: cpu in millicores, memory in bytes, others as integers.

    >>> pod_requests({"spec": {"containers": [
    ...     {"resources": {"requests": {"cpu": "250m", "memory": "64Mi"}}},
    ...     {"resources": {"limits": {"cpu": "1", "nvidia.com/gpu": "1"}}}]}})
    {'cpu': 1250, 'memory': 67108864, 'nvidia.com/gpu': 1}
    """
    spec = pod.get("spec") or {}
    key = _request_key(spec)
    if key is not None:
        cached = _REQUESTS.get(key)
        if cached is not None:
            return dict(cached)
    name = pod_name(pod)
    apps: dict[str, Fraction] = {}
    for i, container in enumerate(spec.get("containers") or []):
        _add(apps, _container_requests(container, f"pod {name}: spec.containers[{i}]"))
    sidecars: dict[str, Fraction] = {}
    init_peak: dict[str, Fraction] = {}
    for i, container in enumerate(spec.get("initContainers") or []):
        request = _container_requests(container, f"pod {name}: spec.initContainers[{i}]")
        if container.get("restartPolicy") == "Always":
            _add(sidecars, request)
            _max(init_peak, sidecars)
        else:
            _max(init_peak, _add(dict(request), sidecars))
    total = _max(_add(apps, sidecars), init_peak)
    # Pod-level resources (KEP 2837) replace the per-container figures they name (cpu, memory).
    total.update(
        _exact(
            (spec.get("resources") or {}).get("requests"), f"pod {name}: spec.resources.requests"
        )
    )
    _add(total, _exact(spec.get("overhead"), f"pod {name}: spec.overhead"))
    # summed exactly, rounded once (resource.PodRequests adds Quantities; MilliValue/Value)
    out = {k: _base_units(k, v) for k, v in sorted(total.items()) if v}
    if key is not None:
        if len(_REQUESTS) >= 4096:
            _REQUESTS.clear()
        _REQUESTS[key] = out
    return dict(out)


#: pod requests by what they are computed from: the pods of one workload share their template
_REQUESTS: dict[tuple, dict[str, int]] = {}


def _amounts_key(resources: Any) -> tuple | None:
    if not resources:
        return ()
    if not isinstance(resources, Mapping):
        return None
    try:
        return tuple(sorted((k, str(v)) for k, v in resources.items()))
    except TypeError:
        return None


def _request_key(spec: Mapping[str, Any]) -> tuple | None:
    """Everything :func:`pod_requests` reads from a pod spec, hashable (None: not cacheable,
    e.g. a malformed value, which then fails with its error message)."""
    parts: list[Any] = []
    for field_name in ("containers", "initContainers"):
        for c in spec.get(field_name) or []:
            if not isinstance(c, Mapping):
                return None
            res = c.get("resources") or {}
            if not isinstance(res, Mapping):
                return None
            req, lim = _amounts_key(res.get("requests")), _amounts_key(res.get("limits"))
            if req is None or lim is None:
                return None
            parts.append((field_name, req, lim, c.get("restartPolicy")))
    for field_name in ("resources", "overhead"):
        value = spec.get(field_name)
        sub = (value or {}).get("requests") if field_name == "resources" else value
        if value is not None and not isinstance(value, Mapping):
            return None
        k = _amounts_key(sub)
        if k is None:
            return None
        parts.append((field_name, k))
    return tuple(parts)


def pod_is_active(pod: Mapping[str, Any]) -> bool:
    """True for a pod that holds node resources: bound and not Succeeded/Failed."""
    node_name = (pod.get("spec") or {}).get("nodeName")
    phase = (pod.get("status") or {}).get("phase")
    return bool(node_name) and phase not in TERMINATED_PHASES


def node_allocatable(node: Mapping[str, Any]) -> dict[str, int]:
    """``status.allocatable`` (falling back to ``status.capacity``) as integer amounts."""
    status = node.get("status") or {}
    name = (node.get("metadata") or {}).get("name", "?")
    if status.get("allocatable"):
        return resource_amounts(status["allocatable"], f"node {name}: status.allocatable")
    return resource_amounts(status.get("capacity"), f"node {name}: status.capacity")
