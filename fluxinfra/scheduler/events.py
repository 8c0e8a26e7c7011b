"""The objects the scheduler writes besides Bindings: ``events.k8s.io/v1`` Events and the
``PodScheduled`` condition patch. Pure builders; every shape is checked against the Kubernetes
schemas in the tests (``kubernetes-validate``, strict).

>>> ev = pod_event("ns", "p", "uid-1", "Scheduled", "Bound ns/p to node0", "fluxion", "fluxion-0",
...                now=0.0, seq=1)
>>> ev["regarding"]["kind"], ev["type"], ev["eventTime"]
('Pod', 'Normal', '1970-01-01T00:00:00.000000Z')
"""

from __future__ import annotations

import itertools
import time
from datetime import UTC, datetime
from typing import Any

__all__ = ["WARNING_REASONS", "disruption_condition_patch", "lease_event", "micro_time",
           "node_event", "parse_time", "pod_event", "podgroup_event",
           "scheduled_condition_patch", "scheduled_note", "series_patch"]

#: Reasons that are warnings (everything else is Normal).
WARNING_REASONS = frozenset({"FailedScheduling", "Unschedulable", "InvalidPod", "FailedBinding",
                             "InvalidPodGroup", "InvalidNode"})

_seq = itertools.count(1)


def scheduled_note(pod_key: str, node: str) -> str:
    """The note of a pod's ``Scheduled`` Event, kube-scheduler's words."""
    return f"Successfully assigned {pod_key} to {node}"


def micro_time(now: float) -> str:
    """A Kubernetes MicroTime (``2026-01-01T00:00:00.000000Z``)."""
    return datetime.fromtimestamp(now, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_time(value: Any) -> float:
    """Epoch seconds of a Kubernetes Time or MicroTime; 0.0 when absent or unreadable."""
    if not value:
        return 0.0
    try:
        return datetime.fromisoformat(str(value).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return 0.0


def _time(now: float) -> str:
    return datetime.fromtimestamp(now, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _event(namespace: str, regarding: dict[str, Any], reason: str, note: str, controller: str,
           instance: str, action: str, now: float | None, seq: int | None) -> dict[str, Any]:
    now = time.time() if now is None else now
    seq = next(_seq) if seq is None else seq
    # Event names only need to be unique; kube-scheduler uses <object>.<hex nanoseconds>.
    name = f"{regarding['name']}.{int(now * 1e9):x}{seq:x}"[:253]
    return {
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": {"name": name, "namespace": namespace},
        "eventTime": micro_time(now),
        "reportingController": controller,
        "reportingInstance": instance,
        "action": action,
        "reason": reason,
        "type": "Warning" if reason in WARNING_REASONS else "Normal",
        "regarding": regarding,
        "note": note[:1024],
    }


def pod_event(namespace: str, pod: str, uid: str, reason: str, note: str, controller: str,
              instance: str, *, action: str = "Scheduling", now: float | None = None,
              seq: int | None = None) -> dict[str, Any]:
    """An Event about a pod (``kubectl describe pod`` shows it)."""
    regarding = {"apiVersion": "v1", "kind": "Pod", "namespace": namespace, "name": pod}
    if uid:
        regarding["uid"] = uid
    return _event(namespace, regarding, reason, note, controller, instance, action, now, seq)


def podgroup_event(namespace: str, name: str, uid: str, reason: str, note: str,
                   controller: str, instance: str, *, now: float | None = None,
                   seq: int | None = None) -> dict[str, Any]:
    """An Event about a scheduler-plugins PodGroup."""
    regarding = {"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
                 "namespace": namespace, "name": name}
    if uid:
        regarding["uid"] = uid
    return _event(namespace, regarding, reason, note, controller, instance, "Scheduling",
                  now, seq)


def node_event(name: str, uid: str, reason: str, note: str, controller: str, instance: str, *,
               now: float | None = None, seq: int | None = None) -> dict[str, Any]:
    """An Event about a Node (cluster-scoped: the Event lives in ``default``, as the
    kubelet's and kube-scheduler's do)."""
    regarding = {"apiVersion": "v1", "kind": "Node", "name": name, **({"uid": uid} if uid else {})}
    return _event("default", regarding, reason, note, controller, instance, "Scheduling", now,
                  seq)


def lease_event(namespace: str, name: str, uid: str, reason: str, note: str, controller: str,
                instance: str, *, now: float | None = None,
                seq: int | None = None) -> dict[str, Any]:
    """An Event about a ``coordination.k8s.io/v1`` Lease (leader election)."""
    regarding = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                 "namespace": namespace, "name": name, **({"uid": uid} if uid else {})}
    return _event(namespace, regarding, reason, note, controller, instance, "LeaderElection",
                  now, seq)


def series_patch(count: int, last_observed: float) -> dict[str, Any]:
    """The patch that makes an Event a series of ``count`` observations (``events.k8s.io/v1``:
    ``series.count`` >= 2, ``series.lastObservedTime`` a MicroTime).

    >>> series_patch(3, 0.0)
    {'series': {'count': 3, 'lastObservedTime': '1970-01-01T00:00:00.000000Z'}}
    """
    return {"series": {"count": count, "lastObservedTime": micro_time(last_observed)}}


def disruption_condition_patch(message: str, *, now: float | None = None) -> dict[str, Any]:
    """``DisruptionTarget=True, reason=PreemptionByScheduler`` on a preemption victim."""
    now = time.time() if now is None else now
    return {"status": {"conditions": [{
        "type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler",
        "message": message[:1024], "lastTransitionTime": _time(now), "lastProbeTime": None,
    }]}}


def scheduled_condition_patch(reason: str, message: str, *,
                              now: float | None = None) -> dict[str, Any]:
    """``PodScheduled=False`` with ``reason`` (``Unschedulable`` as kube-scheduler writes it)."""
    now = time.time() if now is None else now
    return {"status": {"conditions": [{
        "type": "PodScheduled", "status": "False", "reason": reason,
        "message": message[:1024], "lastTransitionTime": _time(now),
        "lastProbeTime": None,
    }]}}
