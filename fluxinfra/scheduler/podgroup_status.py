"""The PodGroup status lifecycle, computed from the phases of the group's pods.

The scheduler owns the status of the scheduler-plugins PodGroups it schedules (no
scheduler-plugins controller runs beside it), so it keeps the lifecycle that controller keeps
(``scheduling.x-k8s.io/v1alpha1``, the version with ``Scheduled`` and ``scheduled``):

=============  =================================================================
``Pending``    fewer pods than ``minMember`` exist
``Scheduling`` ``minMember`` pods exist; fewer than ``minMember`` are bound
``Scheduled``  at least ``minMember`` pods are bound to nodes
``Running``    running + succeeded pods >= ``minMember``
``Failed``     some pod failed, and failed + running + succeeded >= ``minMember``
``Finished``   succeeded pods >= ``minMember``
=============  =================================================================

``Finished`` and ``Failed`` are final: once reached, the status is never written again (the
controller stops reconciling such a group too). Later rows win, so a group whose pods all
succeeded is ``Finished`` even if it never was seen ``Running``. Besides the phase the status
carries the counts ``scheduled`` (pods bound to a node, finished or not), ``running``,
``succeeded`` and ``failed`` (pods in that phase).

>>> podgroup_status(2, [("Running", True), ("Pending", True)], "")
{'phase': 'Scheduled', 'scheduled': 2, 'running': 1, 'succeeded': 0, 'failed': 0}
>>> podgroup_status(2, [("Succeeded", True), ("Succeeded", True)], "Running")["phase"]
'Finished'
>>> podgroup_status(2, [("Running", True)], "Finished") is None
True
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["FINAL_PHASES", "podgroup_status", "status_differs"]

#: phases after which the status is left as it is
FINAL_PHASES = frozenset({"Finished", "Failed"})
#: the fields this module writes, with the value an absent field stands for
_FIELDS = {"phase": "", "scheduled": 0, "running": 0, "succeeded": 0, "failed": 0}


def podgroup_status(min_member: int, pods: Iterable[tuple[str, bool]],
                    previous_phase: str) -> dict[str, Any] | None:
    """The status to write on a PodGroup whose ``spec.minMember`` is ``min_member``, from its
    ``pods``: every existing pod labelled with the group, finished ones included, each as
    ``(status.phase, bound to a node)``. None when ``previous_phase`` (the phase the PodGroup
    has now, "" for none) is final: nothing is written any more."""
    if previous_phase in FINAL_PHASES:
        return None
    members = scheduled = running = succeeded = failed = 0
    for phase, bound in pods:
        members += 1
        scheduled += bound
        running += phase == "Running"
        succeeded += phase == "Succeeded"
        failed += phase == "Failed"
    if succeeded >= min_member:
        state = "Finished"
    elif failed and failed + running + succeeded >= min_member:
        state = "Failed"
    elif running + succeeded >= min_member:
        state = "Running"
    elif scheduled >= min_member:
        state = "Scheduled"
    elif members >= min_member:
        state = "Scheduling"
    else:
        state = "Pending"
    return {"phase": state, "scheduled": scheduled, "running": running,
            "succeeded": succeeded, "failed": failed}


def status_differs(status: Mapping[str, Any], current: Mapping[str, Any] | None) -> bool:
    """Whether writing ``status`` would change ``current`` (a PodGroup's ``status`` as read,
    where an absent count is 0)."""
    current = current or {}
    return any(current.get(k, default) != status[k] for k, default in _FIELDS.items()
               if k in status)
