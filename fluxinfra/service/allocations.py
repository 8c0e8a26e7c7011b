"""Registering amounts already in use on a node with a matcher (no gRPC here).

Shared by the service's ``Register`` RPC and the scheduler's in-process backend: pick the node's
lowest free vertices (:func:`fluxinfra.matcher.k8s.pod_allocation_R`) and ``update_allocate``
them under a job id. The R's vertices are looked up by ``uniq_id`` rather than by path: the
matcher resolves a path by scanning vertices, which made a 5,000-node restart take minutes.
"""

from __future__ import annotations

from typing import Any

from fluxinfra.service.jobspecs import amounts_pod

__all__ = ["register_amounts"]


def register_amounts(matcher: Any, jobid: int, node: str, *, cores: int, memory_mib: int = 0,
                     gpus: int = 0, at: int = 0, duration: int | None = None) -> Any:
    """``update_allocate`` ``jobid`` holding these amounts on ``node`` from ``at``.

    Raises ``Busy`` when the node lacks them, ``K8sInputError`` when the node is not in the graph.
    """
    from fluxinfra.matcher.k8s import pod_allocation_R

    matcher.now = at
    pod = amounts_pod(node, cores=cores, memory_mib=memory_mib, gpus=gpus)
    rset = pod_allocation_R(pod, matcher, duration=duration)
    for vertex in (rset.get("scheduling") or {}).get("graph", {}).get("nodes", []):
        vertex.get("metadata", {}).pop("paths", None)
    return matcher.update_allocate(jobid, rset, at=at, duration=duration)
