"""Gangs: PodGroup membership, the PodGroup's spec, when a gang may be tried, and its status.

scheduler-plugins' Coscheduling (``pkg/coscheduling/core``: the ``PodGroupManager``'s
``PreFilter`` checks, a gang tried only when ``minMember`` pods exist and ``minResources`` are
free in the cluster) and its PodGroup controller (``pkg/controllers/podgroup_controller.go``:
the PodGroup's ``status`` from its members' phases). The framework glue (when a group is tried,
bound, reported) stays with the scheduling cycle and binding.
"""

from __future__ import annotations

from collections.abc import Container, Iterable, Iterator
from typing import Any

from fluxinfra.scheduler.ledger import Ledger
from fluxinfra.scheduler.metrics import Metrics
from fluxinfra.scheduler.podgroup_status import podgroup_status, status_differs
from fluxinfra.scheduler.pods import PodInfo, PodSpecError, Request, podgroup_spec
from fluxinfra.scheduler.scheduling_queue import Group

__all__ = ["Gangs", "podgroup_signature", "waiting_reason"]


class Gangs:
    """The PodGroups' members (any phase) and the status last written for each."""

    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics
        #: PodGroup key -> its member pods (any phase), whose phases make the PodGroup's status
        self.members: dict[str, dict[str, PodInfo]] = {}
        #: PodGroup key -> (PodGroup uid, the status last written), so nothing is sent twice
        self.status: dict[str, tuple[str, dict[str, Any]]] = {}
        #: PodGroups whose members changed since their status was last written
        self.dirty: set[str] = set()
        #: PodGroup key -> when this scheduler last wrote its status (the core's clock)
        self.written_at: dict[str, float] = {}
        #: when the earliest status held back by the interval falls due (None: none is)
        self.due_at: float | None = None

    def track(self, uid: str, info: PodInfo | None, previous: PodInfo | None) -> None:
        """Keep :attr:`members` (PodGroup key -> members) as pod ``uid`` changes from
        ``previous`` to ``info`` (None: gone)."""
        if previous is not None and previous.group_kind == "podgroup" and (
                info is None or info.group_key != previous.group_key):
            members = self.members.get(previous.group_key, {})
            if members.pop(uid, None) is not None:
                self.dirty.add(previous.group_key)
                if not members:
                    self.members.pop(previous.group_key, None)
        if info is not None and info.group_kind == "podgroup":
            self.members.setdefault(info.group_key, {})[uid] = info
            if previous is None or (previous.phase, previous.node_name) != \
                    (info.phase, info.node_name):
                self.dirty.add(info.group_key)

    def forget(self, key: str) -> None:
        """The PodGroup was deleted: what was written to it goes."""
        self.status.pop(key, None)
        self.written_at.pop(key, None)

    def podgroup_changed(self, key: str) -> None:
        """The PodGroup object changed: its status is worked out again when it has members."""
        if key in self.members:
            self.dirty.add(key)

    def refresh(self, group: Group, obj: dict[str, Any] | None) -> bool:
        """Read the group's PodGroup ``obj`` (None: it does not exist) into ``group``; True
        when its spec cannot be read (``group.invalid`` says why)."""
        group.failed_gen = -1
        if obj is None:
            group.missing, group.spec, group.invalid = True, None, ""
            return False
        group.missing = False
        group.podgroup_uid = str((obj.get("metadata") or {}).get("uid") or "")
        try:
            group.spec = podgroup_spec(obj)
        except PodSpecError as exc:
            group.spec, group.invalid = None, str(exc)
            return True
        group.invalid = ""
        group.min_member = group.spec.min_member
        return False

    def progress(self, group: Group, binding: dict[str, Any]) -> None:
        """After binds: a gang whose members are all bound (none still retried) is
        scheduled."""
        if group.kind == "podgroup" and group.bound and not any(
                uid in binding for uid in group.bound):
            scheduled = len(group.bound)
            self.dirty.add(group.key)
            if group.last_state != f"scheduled:{scheduled}":
                group.last_state = f"scheduled:{scheduled}"
                self.metrics.groups_scheduled.inc()
        elif group.kind == "label" and group.bound and not group.pending:
            self.metrics.groups_scheduled.inc()

    def statuses(self, podgroups: dict[str, dict[str, Any]], groups: dict[str, Group],
                 binding: Container[str], running: Iterable[str], now: float = 0.0,
                 interval: float = 0.0) -> Iterator[tuple[str, str, dict[str, Any]]]:
        """(namespace, name, status) of each PodGroup whose members changed, from their phases
        (:func:`~fluxinfra.scheduler.podgroup_status.podgroup_status`), when it differs from
        what the PodGroup has; a member in ``binding`` (a failed bind retried) does not count
        as bound yet. A PodGroup in ``running`` (a member's bind is running) is left for a
        later call, still changed: its status now would be a step on the way (a gang bound at once
        gets one write, when its binds are done, not one before them as well). A member whose
        bind this scheduler saw succeed counts as bound before the watch brings its
        ``nodeName`` (kube-scheduler's assumed pods), so that write does not wait for the
        watch, nor is a partial count written meanwhile. A status whose phase is the one the
        PodGroup has (only its counts moved: members turning Running one by one) is written
        at most once per ``interval`` seconds of ``now``; :attr:`due_at` says when the
        earliest held back falls due. A new phase is written at once. Each is recorded as
        sent when it is yielded; the changes are cleared once all are."""
        # the gangs with binds out wait, still changed (a set difference, not a pass over
        # them: in a burst, most changed gangs are binding)
        later = self.dirty.intersection(running)
        self.due_at = None
        for key in sorted(self.dirty.difference(later)):
            obj = podgroups.get(key)
            group = groups.get(key)
            if obj is None or (group is not None and group.invalid):
                continue
            members = self.members.get(key, {}).values()
            if group is not None and group.spec is not None:
                min_member = group.spec.min_member  # read from this object (on_podgroup)
            else:
                try:
                    min_member = podgroup_spec(obj).min_member
                except PodSpecError:
                    continue  # reported with its group
            uid = str((obj.get("metadata") or {}).get("uid") or "")
            sent = self.status.get(key)
            current = sent[1] if sent is not None and sent[0] == uid else \
                (obj.get("status") if isinstance(obj.get("status"), dict) else {})
            # a member this scheduler bound counts before the watch shows its nodeName
            ours = group.bound if group is not None else ()
            status = podgroup_status(
                min_member, [(p.phase, (bool(p.node_name) or p.uid in ours)
                              and p.uid not in binding) for p in members],
                str(current.get("phase") or ""))
            if status is None or not status_differs(status, current):
                continue
            last = self.written_at.get(key)
            if last is not None and now < last + interval and \
                    status["phase"] == current.get("phase"):
                later.add(key)
                due = last + interval
                self.due_at = due if self.due_at is None else min(self.due_at, due)
                continue
            self.written_at[key] = now
            self.status[key] = (uid, status)
            namespace, _, name = key.partition("/")
            yield namespace, name, status
        self.dirty = later


def waiting_reason(group: Group, members: list[PodInfo], ledger: Ledger) -> str:
    """Why ``group`` cannot be tried at all yet, or "" (Coscheduling's PreFilter): its PodGroup
    is missing or invalid, fewer than ``minMember`` pods exist (or are ungated), or its
    ``minResources`` are not free in the cluster."""
    if group.kind == "single":
        return ""
    if group.missing:
        return (f"PodGroup {group.key} not found: create it, or remove the label "
                f"scheduling.x-k8s.io/pod-group from the pod")
    if group.invalid:
        return group.invalid
    gated = sum(1 for p in group.pending.values() if p.gated)
    have = len(group.bound) + len(members)
    if have < group.min_member:
        what = "PodGroup" if group.kind == "podgroup" else "group"
        extra = f", {gated} gated by schedulingGates" if gated else ""
        return (f"{what} {group.key}: {have} of minMember {group.min_member} pods can be "
                f"scheduled ({len(group.bound)} running, {len(members)} pending{extra}); "
                "waiting for the rest")
    spec = group.spec
    if spec is not None and spec.min_resources.amounts and len(group.bound) < spec.min_member:
        free = ledger.free_total(group.key)
        want = spec.min_resources.as_dict()
        want["pods"] = spec.min_member
        gap = {r: n - free.get(r, 0) for r, n in want.items() if n > free.get(r, 0)}
        if gap:
            return (f"PodGroup {group.key}: minResources not available in the cluster "
                    f"(resource gap: {Request.of(gap)})")
    return ""


def podgroup_signature(obj: dict[str, Any]) -> tuple[Any, ...]:
    """What the scheduler reads of a PodGroup to place its pods (everything but its status)."""
    meta = obj.get("metadata") if isinstance(obj.get("metadata"), dict) else {}
    return (repr(obj.get("spec")), repr(meta.get("labels")), repr(meta.get("annotations")),
            meta.get("uid"))
