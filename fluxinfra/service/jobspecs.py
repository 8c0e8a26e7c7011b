"""Jobspecs for "N pods, each wholly on one node, pods may share nodes" (pure; no gRPC here).

Both the service (a Fluence ``PodSpec`` times ``count``) and the scheduler (a pod group) ask the
matcher for the same thing: ``count`` slots of identical shape, each slot inside one node, any
number of slots per node. The shape is a top-level ``slot[count]`` (no ``node`` level): the
matcher places each slot instance within one node and lets slots share nodes (pinned by
``tests/unit/scheduler/test_fluxion_allocator.py``). Memory is in MiB and should be a multiple
of the graph's memory chunk (:mod:`fluxinfra.kube.graph`).

>>> js = slots_jobspec(2, cores=4, memory_mib=1024, gpus=0, duration=60)
>>> js["resources"][0]["count"], js["resources"][0]["with"]
(2, [{'type': 'core', 'count': 4}, {'type': 'memory', 'count': 1024}])
"""

from __future__ import annotations

from typing import Any

__all__ = ["slots_jobspec"]


def slots_jobspec(count: int, *, cores: int, memory_mib: int = 0, gpus: int = 0,
                  duration: int = 0, label: str = "task") -> dict[str, Any]:
    """A canonical (RFC 14 v1) jobspec of ``count`` one-node slots (``cores`` >= 1)."""
    slot: list[dict[str, Any]] = [{"type": "core", "count": max(1, cores)}]
    if memory_mib > 0:
        slot.append({"type": "memory", "count": memory_mib})
    if gpus > 0:
        slot.append({"type": "gpu", "count": gpus})
    return {
        "version": 1,
        "resources": [{"type": "slot", "count": count, "label": label, "with": slot}],
        "attributes": {"system": {"duration": int(duration)}},
        "tasks": [{"command": ["pod"], "slot": label, "count": {"per_slot": 1}}],
    }
