"""The scheduling queue: groups of pods waiting to be placed, in the order they are served.

kube-scheduler's ``internal/queue`` (``PriorityQueue``: ``Add``/``Update``/``Delete`` from the
informers, pods popped by priority then age, its ``nominator`` of preemptors' nodes), with
Coscheduling's unit of work: a *group* (a PodGroup's pods, a label group, or a lone pod as a
group of one) is queued, tried and bound together.

Order: priority (the highest of the group's pending pods), then the earliest creation time of a
member, then arrival in this process, then the key. A group that failed records the cache's
generation of its attempt (:attr:`Group.failed_gen`); the cycle skips it until the generation
moves (kube-scheduler's unschedulable pods moved back on a cluster event), and any change of
membership resets it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from fluxinfra.scheduler.pods import PodGroupSpec, PodInfo

__all__ = ["Group", "SchedulingQueue"]


@dataclass
class Group:
    """Pods placed together; a lone pod is a group of one."""

    key: str
    namespace: str
    name: str
    kind: str                                   #: "podgroup" | "label" | "single"
    arrival: float
    pending: dict[str, PodInfo] = field(default_factory=dict)  #: ours, unbound (gated too)
    bound: set[str] = field(default_factory=set)  #: members holding resources
    min_member: int = 1
    spec: PodGroupSpec | None = None
    podgroup_uid: str = ""
    missing: bool = False                       #: its PodGroup object does not exist
    invalid: str = ""                           #: set when the group itself is malformed
    created: float = float("inf")               #: earliest creationTimestamp of a member
    failed_gen: int = -1                        #: generation of its last failed attempt
    last_state: str = ""                        #: last state reported on the PodGroup
    preempting: set[str] = field(default_factory=set)  #: victims not gone yet

    @property
    def priority(self) -> int:
        return max((p.priority for p in self.pending.values()), default=0)

    def members(self) -> list[PodInfo]:
        """Pending, ungated members in the order they are placed and bound."""
        return sorted((p for p in self.pending.values() if not p.gated),
                      key=lambda p: (p.created, p.name))

    def duration(self, default: int) -> int:
        return max((p.duration or default for p in self.pending.values()), default=default)

    @property
    def topology(self) -> tuple[str, str]:
        if self.spec is not None:
            return self.spec.topology
        for p in self.pending.values():
            if p.topology[0]:
                return p.topology
        return ("", "")


class SchedulingQueue:
    """Groups by key, with their pending and bound members; see the module docstring.

    ``on_new_podgroup(group)`` is called when a PodGroup's group is first made, to read its
    PodGroup (Coscheduling's spec, :mod:`~fluxinfra.scheduler.gangs`).
    """

    def __init__(self, clock: Callable[[], float],
                 on_new_podgroup: Callable[[Group], Any]) -> None:
        self.clock = clock
        self.on_new_podgroup = on_new_podgroup
        self.groups: dict[str, Group] = {}
        #: keys of the groups a pod was queued in since they were last seen with none: the
        #: cycle reads these, not every group (a busy cluster's groups are mostly running,
        #: and a burst's are mostly binding); a key whose group has nothing pending is dropped
        #: when :meth:`ordered` next reads it
        self.waiting: set[str] = set()
        #: pod uid -> when it entered the queue (its end-to-end latency starts there)
        self.enqueued_at: dict[str, float] = {}
        #: preemptor uid -> (nominated node, priority)
        self.nominated: dict[str, tuple[str, int]] = {}

    def group_for(self, info: PodInfo) -> Group:
        """The group ``info`` belongs to, made when it is the first member seen."""
        key = info.group_key
        group = self.groups.get(key)
        if group is None:
            kind = info.group_kind or "single"
            group = Group(key, info.namespace, info.group_name or info.name, kind,
                          arrival=self.clock())
            self.groups[key] = group
            if kind == "podgroup":
                self.on_new_podgroup(group)
        if group.kind == "label":
            group.min_member = max(group.min_member, info.group_size)
        return group

    def add(self, info: PodInfo, previous: PodInfo | None) -> None:
        """A pending pod of ours, new or changed (``previous``: its last version)."""
        group = self.group_for(info)
        if info.uid not in group.pending or (previous is not None and previous.gated and
                                             not info.gated):
            self.enqueued_at.setdefault(info.uid, self.clock())
            group.failed_gen = -1  # membership changed: worth another try
            if info.nominated_node and info.uid not in self.nominated:
                self.nominated[info.uid] = (info.nominated_node, info.priority)
        group.pending[info.uid] = info
        self.waiting.add(group.key)
        group.created = min(group.created, info.created)

    def remove(self, uid: str, info: PodInfo) -> None:
        """The pod is no longer pending (bound, finished, deleted)."""
        group = self.groups.get(info.group_key)
        if group is None:
            return
        if group.pending.pop(uid, None) is not None:
            group.failed_gen = -1
        self.enqueued_at.pop(uid, None)
        if not group.pending and not group.bound:
            del self.groups[info.group_key]

    def released(self, uid: str, group_key: str) -> None:
        """A member no longer holds resources; a group with no member left goes."""
        group = self.groups.get(group_key)
        if group is not None and uid in group.bound:
            group.bound.discard(uid)
            if not group.pending and not group.bound:
                del self.groups[group.key]

    def ordered(self) -> list[Group]:
        """Groups with a pod to place, in the order they are served: priority, then age."""
        groups, waiting = self.groups, self.waiting
        ready = []
        for key in list(waiting):
            group = groups.get(key)
            if group is None or not group.pending:
                waiting.discard(key)  # placed, gone, or left the queue: until a pod comes
            elif any(not p.gated for p in group.pending.values()):
                ready.append(group)
        ready.sort(key=lambda g: (-g.priority, g.created, g.arrival, g.key))
        return ready

    def pending_pods(self) -> int:
        return sum(len(g.pending) for g in self.groups.values())
