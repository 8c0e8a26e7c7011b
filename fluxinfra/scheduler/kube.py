"""The one narrow interface between the scheduler and the Kubernetes API.

Everything the scheduler does to a cluster goes through :class:`KubeApi`: list and watch three
kinds of object (``nodes``, ``pods``, ``podgroups``), bind a pod, create an Event, patch a
pod's or PodGroup's status, and read/write its leader-election Lease. Objects are plain API-JSON
dicts (camelCase keys, exactly what ``kubectl get -o json`` prints), so the scheduler core,
the tests' ``KubeApiDouble`` and the simulator share one shape.
:mod:`fluxinfra.scheduler.client` implements it over the official ``kubernetes`` client.

Failures surface as :class:`ApiError` carrying the HTTP status code, so callers can tell a
transient failure (5xx, 429, connection lost: retry with backoff) from a permanent one (404, 409,
422: record it and move on) and an expired watch (410 Gone: relist).

>>> err = ApiError(410, "Gone", "too old resource version: 5 (10)")
>>> err.expired, err.transient
(True, False)
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Literal, Protocol

__all__ = [
    "KINDS",
    "PODGROUP_GROUP",
    "PODGROUP_VERSION",
    "PODGROUP_PLURAL",
    "ApiError",
    "Kind",
    "KubeApi",
    "WatchEvent",
    "binding",
]

Kind = Literal["nodes", "pods", "podgroups", "namespaces", "poddisruptionbudgets"]
#: what the scheduler watches: namespaces for pod affinity's namespaceSelector, PDBs for
#: preemption
KINDS: tuple[Kind, ...] = ("nodes", "pods", "podgroups", "namespaces",
                          "poddisruptionbudgets")

#: The scheduler-plugins coscheduling PodGroup custom resource.
PODGROUP_GROUP = "scheduling.x-k8s.io"
PODGROUP_VERSION = "v1alpha1"
PODGROUP_PLURAL = "podgroups"

#: ``{"type": "ADDED"|"MODIFIED"|"DELETED"|"BOOKMARK"|"ERROR", "object": {...}}``
WatchEvent = dict[str, Any]


class ApiError(Exception):
    """A Kubernetes API call failed; ``status`` is the HTTP code (0 when no response arrived)."""

    def __init__(self, status: int, reason: str = "", message: str = "") -> None:
        super().__init__(f"{status} {reason}: {message}".strip())
        self.status = status
        self.reason = reason
        self.message = message

    @property
    def transient(self) -> bool:
        """Worth retrying with backoff: no response, throttled, or a server-side failure."""
        return self.status == 0 or self.status == 429 or self.status >= 500

    @property
    def expired(self) -> bool:
        """The watch's resourceVersion is too old: relist, then watch from the new version."""
        return self.status == 410

    @property
    def conflict(self) -> bool:
        """409: e.g. binding a pod that is already bound."""
        return self.status == 409

    @property
    def not_found(self) -> bool:
        return self.status == 404


class KubeApi(Protocol):
    """What the scheduler needs from a cluster, and nothing more."""

    def list_objects(self, kind: Kind) -> tuple[list[dict[str, Any]], str]:
        """All objects of ``kind`` in every namespace, and the list's resourceVersion."""
        ...

    def watch_objects(self, kind: Kind, resource_version: str,
                      timeout_seconds: int) -> Iterator[WatchEvent]:
        """Changes after ``resource_version``; ends after ``timeout_seconds`` (then re-watch).

        An expired version arrives either as an ``ERROR`` event whose object is a Status with
        ``code: 410`` or as ``ApiError(410)``; callers handle both by relisting.
        """
        ...

    def bind(self, namespace: str, pod: str, uid: str, node: str) -> None:
        """POST a v1 Binding to ``pods/<pod>/binding``; 409 when the pod is already bound."""
        ...

    def create_event(self, namespace: str, event: dict[str, Any]) -> None:
        """POST an ``events.k8s.io/v1`` Event."""
        ...

    def patch_event(self, namespace: str, name: str, patch: dict[str, Any]) -> None:
        """Merge patch of an ``events.k8s.io/v1`` Event (its ``series``); 404 when gone."""
        ...

    def patch_pod_status(self, namespace: str, pod: str, patch: dict[str, Any]) -> None:
        """Strategic-merge patch of ``pods/<pod>/status`` (conditions merge by ``type``)."""
        ...

    def patch_podgroup_status(self, namespace: str, name: str, patch: dict[str, Any]) -> None:
        """Merge patch of ``podgroups/<name>/status``."""
        ...

    def delete_pod(self, namespace: str, pod: str, uid: str) -> None:
        """DELETE a pod (graceful), only if its uid is still ``uid`` (409 otherwise)."""
        ...

    def get_lease(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The ``coordination.k8s.io/v1`` Lease, or None when there is none (leader election)."""
        ...

    def create_lease(self, namespace: str, lease: dict[str, Any]) -> None:
        """Create a Lease; 409 when it exists."""
        ...

    def replace_lease(self, namespace: str, name: str, lease: dict[str, Any]) -> None:
        """Replace a Lease; 409 when its ``metadata.resourceVersion`` is stale."""
        ...


def binding(namespace: str, pod: str, uid: str, node: str) -> dict[str, Any]:
    """The v1 Binding the scheduler POSTs to ``pods/<pod>/binding``.

    ``metadata.uid`` makes the API server refuse the bind (409) if the pod was deleted and
    recreated under the same name since we decided.
    """
    meta: dict[str, Any] = {"name": pod, "namespace": namespace}
    if uid:
        meta["uid"] = uid
    return {"apiVersion": "v1", "kind": "Binding", "metadata": meta,
            "target": {"apiVersion": "v1", "kind": "Node", "name": node}}
