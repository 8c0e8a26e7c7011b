"""The scheduler core: cluster state, exact accounting, the queue and the scheduling cycle.

The core is single-threaded and knows nothing of HTTP: it is fed API-JSON objects
(:meth:`SchedulerCore.on_node`, :meth:`~SchedulerCore.on_pod`,
:meth:`~SchedulerCore.on_podgroup`, :meth:`~SchedulerCore.on_object` for namespaces and PDBs)
and acts through two narrow interfaces, an :class:`~fluxinfra.scheduler.allocator.Allocator`
(where pods go) and a :class:`Binder` (binds, Events, conditions, evictions). The Kubernetes runner
(:mod:`fluxinfra.scheduler.runner`), the simulator and the tests drive the same code.

Accounting (the cluster is the source of truth):

- the :class:`~fluxinfra.scheduler.ledger.Ledger` holds every pod bound and not finished, exactly,
  whoever placed it, plus the pods whose bind is in flight (assumed, as kube-scheduler does);
- the allocator's graph holds the same pods: a pod we placed holds its slot of the group's match;
  pods we did not place in this run (another scheduler's, or ours from before a restart) are
  *resident*: each node's residents are registered as one allocation of their exact summed
  requests (again at the next cycle when they change);
- per-node infrastructure (DaemonSet pods, static pods' mirrors) is *node overhead*
  (:mod:`~fluxinfra.scheduler.overhead`): taken out of what the node offers in the graph,
  never an allocation, so node-exclusive policies still see such a node as idle;
- a pod that finishes or is deleted releases exactly its own share; nodes joining, changing and
  leaving update the ledger, the static candidate sets and the graph, node by node;
- jobs whose pods outlive their declared duration are extended.

The queue: groups (PodGroups, label groups, and single pods as groups of one) ordered by
priority, then creation time, then arrival. Each cycle walks the queue. A group is placed as one
transaction (:mod:`~fluxinfra.scheduler.placement`) and bound only when its ``minMember`` fit;
the first group that does not fit now gets a reservation (``allocate_orelse_reserve``, EASY
backfill) kept while nothing changes, and a higher-priority group that fits only by evicting
lower-priority pods preempts them (:mod:`~fluxinfra.scheduler.preemption`). A group that failed is
tried again only when something that could change the answer changed (the cluster's
*generation*). Every pod that waits carries ``PodScheduled=False, reason=Unschedulable`` with
the reason (what cluster-autoscaler and Karpenter act on), set once per change of reason.

Binding: everything a bind needs is checked before the first bind of a group (every member
still pending, ungated and alive, every node present, every placement admitted by the exact
ledger); the members are then bound in parallel. A bind that fails after others succeeded keeps
its reservation and is retried to the same node with backoff until the group's
``scheduleTimeoutSeconds`` (default ``bind_timeout``) runs out; then the pod gets one
``FailedBinding`` Event and condition, its share is released and it queues again.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import heapq
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

from fluxinfra.kube.shapes import ShapeError, check_node, node_label
from fluxinfra.matcher.errors import MatcherError, UnknownJob
from fluxinfra.scheduler.allocator import Allocator, Candidates
from fluxinfra.scheduler.filters import Filters
from fluxinfra.scheduler.kube import ApiError
from fluxinfra.scheduler.ledger import Ledger
from fluxinfra.scheduler.metrics import Metrics
from fluxinfra.scheduler.overhead import NodeOverhead
from fluxinfra.scheduler.placement import Outcome, Placer, parts
from fluxinfra.scheduler.podgroup_status import podgroup_status, status_differs
from fluxinfra.scheduler.pods import (
    PodGroupSpec,
    PodInfo,
    PodSpecError,
    Request,
    object_identity,
    object_key,
    pod_info,
    podgroup_spec,
)
from fluxinfra.scheduler.preemption import Plan, Preemptor, budgets

__all__ = ["Binder", "CycleReport", "Group", "SchedulerConfig", "SchedulerCore"]

log = logging.getLogger(__name__)


@dataclass
class SchedulerConfig:
    scheduler_name: str = "fluxion"
    #: seconds a pod is expected to run when it has no ``fluxinfra.io/duration`` annotation
    default_duration: int = 3600
    #: reservations per cycle: 1 is EASY backfill, 0 plain first-fit with skipping
    reserve_depth: int = 1
    #: groups tried per cycle (Fluxion's queue depth), bounding a cycle's cost
    queue_depth: int = 1000
    #: how long to hold an overrunning job's resources each time it is extended
    extension: int = 600
    #: seconds before the first retry of a failed bind (doubling, up to 30 s)
    bind_retry_after: float = 1.0
    #: seconds a failed bind is retried to its reserved node, when the group sets no
    #: ``scheduleTimeoutSeconds``
    bind_timeout: int = 60
    #: lone pods with identical requests matched together (1 disables batching)
    batch_size: int = 64
    #: preempt lower-priority pods (kube-scheduler's DefaultPreemption)
    preemption: bool = True
    #: bind while the loop goes on (when the binder can: ``submit``), the pods assumed
    async_binds: bool = True


class Binder(Protocol):
    """How the core acts on the cluster."""

    def bind(self, assignments: list[tuple[PodInfo, str]]) -> list[Exception | None]:
        """Bind each pod to its node; one result per assignment (None = bound)."""
        ...

    def pod_event(self, pod: PodInfo, reason: str, note: str, action: str) -> None: ...

    def pod_unschedulable(self, pod: PodInfo, message: str) -> None:
        """Set ``PodScheduled=False, reason=Unschedulable`` with ``message``."""
        ...

    def podgroup_event(self, namespace: str, name: str, uid: str, reason: str,
                       note: str) -> None: ...

    def podgroup_status(self, namespace: str, name: str, status: dict[str, Any]) -> None: ...

    def node_event(self, name: str, uid: str, reason: str, note: str) -> None:
        """An Event about a Node (``InvalidNode``: one the scheduler cannot read)."""
        ...

    def preempt(self, victim: PodInfo, preemptor: PodInfo, node: str) -> bool:
        """Mark ``victim`` ``DisruptionTarget`` (PreemptionByScheduler), delete it, and say so
        in a ``Preempted`` Event; False when it could not be evicted."""
        ...

    def nominate(self, pod: PodInfo, node: str) -> None:
        """Set (or, with "", clear) ``status.nominatedNodeName``."""
        ...


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


@dataclass
class _Binding:
    """A bind that failed and is retried to the node its group reserved."""

    pod: PodInfo
    node: str
    group_key: str
    first: float
    deadline: float
    next_at: float
    attempts: int = 1
    error: str = ""


@dataclass
class CycleReport:
    tried: int = 0
    bound: int = 0
    reserved: int = 0
    busy: int = 0
    unschedulable: int = 0
    waiting: int = 0
    skipped: int = 0
    preempted: int = 0
    #: group key -> the start time (allocator clock) of its reservation, for every
    #: reservation held after this cycle (the queue shows them as Reserved)
    reservations: dict[str, int] = field(default_factory=dict)


class SchedulerCore:
    """Cluster state + accounting + queue; see the module docstring."""

    def __init__(self, allocator: Allocator, binder: Binder,
                 config: SchedulerConfig | None = None, metrics: Metrics | None = None,
                 clock: Any = time.perf_counter) -> None:
        self.allocator = allocator
        self.binder = binder
        self.config = config or SchedulerConfig()
        self.metrics = metrics or Metrics()
        self.clock = clock
        self.nodes: dict[str, dict[str, Any]] = {}
        self.pods: dict[str, PodInfo] = {}
        self.podgroups: dict[str, dict[str, Any]] = {}
        self.namespaces: dict[str, dict[str, str]] = {}
        self.pdbs: dict[str, dict[str, Any]] = {}
        self.groups: dict[str, Group] = {}
        self.ledger = Ledger()
        self.filters = Filters(self.ledger, self.namespaces)
        self.placer = Placer(allocator, self.ledger, self.filters,
                             observe=self.metrics.match_latency.observe)
        self.preemptor = Preemptor(self.ledger, self.filters, self._gang_of)
        #: uid -> (allocator job, node, request) of pods we placed (bound or binding)
        self.shares: dict[str, tuple[int, str, Request]] = {}
        self.job_ends: dict[int, int] = {}      #: allocator job -> declared end
        self._ends: list[tuple[int, int]] = []  #: heap of (end, jobid)
        #: pods we did not place in this run, counted per node as one registration
        self.resident: dict[str, dict[str, PodInfo]] = {}
        self.resident_of: dict[str, str] = {}   #: uid -> node of a resident pod
        self.resident_job: dict[str, int] = {}
        self._dirty: set[str] = set()
        #: per-node infrastructure, taken out of what each node offers in the graph
        self.overhead = NodeOverhead()
        self._offer_dirty: set[str] = set()  #: nodes whose overhead changed since the graph saw
        #: PodGroup key -> its member pods (any phase), whose phases make the PodGroup's status
        self.pg_members: dict[str, dict[str, PodInfo]] = {}
        #: PodGroup key -> (PodGroup uid, the status last written), so nothing is sent twice
        self.pg_status: dict[str, tuple[str, dict[str, Any]]] = {}
        self._pg_dirty: set[str] = set()
        self.binding: dict[str, _Binding] = {}
        #: binds running (async binding): (pod, node, future, start)
        self.inflight: list[tuple[PodInfo, str, Any, float]] = []
        #: called (from a binder thread) when an async bind finishes: wakes the daemon loop,
        #: which otherwise sleeps until an event (a failed bind makes none)
        self._waker: Callable[[], None] | None = None
        self.reservations: list[int] = []
        #: group key -> start time of its reservation (held while nothing changes)
        self.reserved_groups: dict[str, int] = {}
        self._reservation_gen = -1
        #: preemptor uid -> (nominated node, priority)
        self.nominated: dict[str, tuple[str, int]] = {}
        #: the last PodScheduled message we set per pod
        self.noted: dict[str, str] = {}
        self.invalid_pods: dict[str, str] = {}
        #: objects skipped because a field cannot be read: (kind, key) -> the message, so each
        #: is logged (and reported) once per change, not at every heartbeat
        self.skipped: dict[tuple[str, str], str] = {}
        self.enqueued_at: dict[str, float] = {}
        #: bumped whenever something that could let a waiting group fit changed
        self.generation = 0
        self._explained: dict[tuple, tuple[int, str]] = {}
        #: groups whose evictions failed this cycle: tried again next cycle
        self._retry_soon: set[str] = set()
        self.ready = False
        self.metrics.queue_depth.set_function(
            lambda: sum(len(g.pending) for g in list(self.groups.values())))
        self.metrics.groups_pending.set_function(
            lambda: sum(1 for g in list(self.groups.values()) if g.pending))
        self.metrics.overcommitted.set_function(lambda: len(self.ledger.over))
        self.metrics.graph_rebuilds.set_function(lambda: getattr(allocator, "rebuilds", 0))

    # ==== informer events =========================================================================
    def load(self, nodes: Iterable[dict[str, Any]], podgroups: Iterable[dict[str, Any]],
             pods: Iterable[dict[str, Any]], now: int = 0) -> None:
        """Start-up (and restart): build from everything the cluster holds, then become ready.

        Nodes first, then PodGroups, then pods (namespaces and PDBs came before, through
        :meth:`on_object`): every running pod is registered before anything new is placed, so a
        restart never double-allocates. An object with a field the scheduler cannot read is
        skipped (logged once, with an Event when it has a name), never the start-up.
        """
        usable: dict[str, dict[str, Any]] = {}
        for node in nodes:
            name = self._readable_node(node, "ADDED")
            if name is not None:
                usable[name] = node
        for name, node in usable.items():
            self.nodes[name] = node
            self.ledger.upsert_node(node)
        for pg in podgroups:
            self.on_podgroup("ADDED", pg)
        for pod in pods:
            self.on_pod("ADDED", pod, now)
        # the graph is built once, after the pods: each node offers what its overhead leaves
        self.allocator.set_nodes([self.overhead.offered(n) for n in usable.values()])
        self._offer_dirty.clear()
        self._register_residents(now)
        self.ready = True

    def on_object(self, kind: str, etype: str, obj: dict[str, Any], now: int = 0) -> None:
        """The other kinds the core reads: namespaces (pod affinity's namespaceSelector) and
        poddisruptionbudgets (preemption); any other kind is none of its business."""
        if kind not in ("namespaces", "poddisruptionbudgets"):
            return
        what = f"{'namespace' if kind == 'namespaces' else 'PodDisruptionBudget'} " \
            f"{object_key(obj)}"
        reason = _unreadable_object(kind, obj, etype)
        if reason:
            self._skip(kind, what, reason)
            return
        meta = obj["metadata"]
        if kind == "namespaces":
            if etype == "DELETED":
                self.namespaces.pop(meta["name"], None)
            else:
                self.namespaces[meta["name"]] = dict(meta.get("labels") or {})
            self.generation += 1
        else:
            key = f"{meta.get('namespace') or 'default'}/{meta['name']}"
            if etype == "DELETED":
                self.pdbs.pop(key, None)
            else:
                self.pdbs[key] = obj
        self._readable(kind, what)

    def on_node(self, etype: str, node: dict[str, Any], now: int = 0) -> None:
        """A Node added, changed or deleted. A Node with a field the scheduler cannot read is
        skipped whole: a new one stays out, a changed one keeps its last readable version
        (in the graph, the ledger and the filters alike)."""
        name = self._readable_node(node, etype)
        if name is None:
            return
        if etype == "DELETED":
            if self.nodes.pop(name, None) is not None:
                self.allocator.remove_node(name)
                self.ledger.remove_node(name)
                self.filters.node_changed(name)
                self.resident_job.pop(name, None)
                self.generation += 1
            return
        old = self.nodes.get(name)
        if old is not None and node_signature(old) == node_signature(node):
            self.nodes[name] = node
            return  # a heartbeat: nothing the graph, the filters or the queue cares about
        try:  # first: it keeps the old node if it fails
            self.allocator.upsert_node(self.overhead.offered(node))
        except MatcherError as exc:
            self._skip("nodes", name, f"the graph refused it: {exc}", node=node)
            return
        self._offer_dirty.discard(name)
        self.nodes[name] = node
        self.ledger.upsert_node(node)
        self.filters.node_changed(name)
        if old is None or self.resident.get(name):
            self._dirty.add(name)  # pods seen before their node, or a resized node
        self.generation += 1

    def _readable_node(self, node: Any, etype: str) -> str | None:
        """The Node's name when every field the scheduler reads is readable; else None, and
        the Node is reported once (log line, and an Event when it has a name)."""
        try:
            name = check_node(node)
        except ShapeError as exc:
            if etype != "DELETED" or node_label(node).startswith("a Node without"):
                self._skip("nodes", node_label(node), str(exc), node=node)
                return None
            name = node["metadata"]["name"]  # a deleted Node needs only its name
        self._readable("nodes", f"node {name}")
        return name

    def _skip(self, kind: str, what: str, message: str, *, node: Any = None) -> None:
        """Report an object that is skipped because it cannot be read (``what``: e.g.
        ``pod ns/name``): one log line (and for a named Node an ``InvalidNode`` Event) per
        object and message."""
        if self.skipped.get((kind, what)) == message:
            return
        self.skipped[(kind, what)] = message
        detail = message.removeprefix(f"{what}: ")
        log.warning("cannot read %s, skipped: %s", what, detail)
        self.metrics.errors.inc(source="invalid_object")
        label = node_label(node) if node is not None else ""
        if label.startswith("node "):
            uid = (node.get("metadata") or {}).get("uid")
            self.binder.node_event(label[5:], uid if isinstance(uid, str) else "",
                                   "InvalidNode", f"skipped by the scheduler: {message}")

    def _readable(self, kind: str, what: str) -> None:
        if self.skipped.pop((kind, what), None) is not None:
            log.info("%s is readable again", what)

    def on_podgroup(self, etype: str, obj: dict[str, Any]) -> None:
        try:
            namespace, name, _ = object_identity(obj, "PodGroup")
        except PodSpecError as exc:
            self._skip("podgroups", f"PodGroup {object_key(obj)}", str(exc))
            return
        key = f"{namespace}/{name}"
        self._readable("podgroups", f"PodGroup {key}")
        if etype == "DELETED":
            self.podgroups.pop(key, None)
            self.pg_status.pop(key, None)
        else:
            old = self.podgroups.get(key)
            self.podgroups[key] = obj  # its spec is read (and reported) with its group
            if key in self.pg_members:
                self._pg_dirty.add(key)
            if old is not None and _podgroup_signature(old) == _podgroup_signature(obj):
                return  # its status changed (our own writes, mostly): nothing to schedule
        group = self.groups.get(key)
        if group is not None and group.kind == "podgroup":
            self._refresh_podgroup(group)
        self.generation += 1

    def on_pod(self, etype: str, obj: dict[str, Any], now: int = 0) -> None:
        meta = obj.get("metadata") if isinstance(obj, dict) else None
        if etype == "DELETED" and isinstance(meta, dict) and isinstance(meta.get("uid"), str) \
                and meta["uid"]:
            self._forget_pod(meta["uid"])  # a deletion needs only the uid
            self.skipped.pop(("pods", f"pod {object_key(obj)}"), None)
            return
        try:
            namespace, name, uid = object_identity(obj, "pod")
        except PodSpecError as exc:
            self._skip("pods", f"pod {object_key(obj)}", str(exc))
            return
        uid = uid or f"{namespace}/{name}"
        if etype == "DELETED":
            self._forget_pod(uid)
            self.skipped.pop(("pods", f"pod {namespace}/{name}"), None)
            return
        try:
            info = pod_info(obj)
        except PodSpecError as exc:
            self._invalid_pod(obj, uid, str(exc))
            return
        self.invalid_pods.pop(uid, None)
        self._readable("pods", f"pod {namespace}/{name}")
        previous = self.pods.get(uid)
        self.pods[uid] = info
        self._track_member(uid, info, previous)
        if info.holds_resources:
            self._dequeue(uid, previous or info)
            self.binding.pop(uid, None)
            self.nominated.pop(uid, None)
            share = self.shares.get(uid)
            if share is not None and share[1] != info.node_name:
                # Our bind lost a race: the pod runs elsewhere. Account where it really is.
                self._release_share(uid)
                share = None
            if share is not None:
                self.ledger.add(info, info.node_name)  # the same pod, maybe new labels
            elif info.node_overhead:
                self._add_overhead(info)
            elif self.resident_of.get(uid) == info.node_name and previous is not None and \
                    previous.request == info.request:
                self.resident[info.node_name][uid] = info  # unchanged amounts: no re-register
                self.ledger.add(info, info.node_name)
            else:
                self._add_resident(info)
            if info.group_kind:
                self._group_for(info).bound.add(uid)
        elif info.bound or info.terminal or (info.deleting and info.scheduler_name ==
                                             self.config.scheduler_name):
            self._release(uid, info.group_key)
            self._dequeue(uid, previous or info)
        elif uid in self.shares:
            pass  # we are binding it; this event is from before the bind
        elif info.scheduler_name == self.config.scheduler_name:
            self._enqueue(info, previous)

    # ==== accounting ==============================================================================
    def _add_overhead(self, info: PodInfo) -> None:
        """A running pod of the node's infrastructure: out of the node's offer (next cycle)."""
        self._drop_resident(info.uid)
        self.ledger.add(info, info.node_name)
        previous = self.overhead.node_of.get(info.uid)
        if self.overhead.add(info.uid, info.node_name, info.request):
            self._offer_dirty.add(info.node_name)
            if previous is not None:
                self._offer_dirty.add(previous)

    def _drop_overhead(self, uid: str) -> bool:
        node = self.overhead.remove(uid)
        if node is None:
            return False
        self._offer_dirty.add(node)
        return True

    def _add_resident(self, info: PodInfo) -> None:
        """A running pod we did not place: count it on its node (registered next cycle)."""
        self._drop_overhead(info.uid)
        self._drop_resident(info.uid)
        self.resident.setdefault(info.node_name, {})[info.uid] = info
        self.resident_of[info.uid] = info.node_name
        self.ledger.add(info, info.node_name)
        self._dirty.add(info.node_name)

    def _drop_resident(self, uid: str) -> bool:
        node = self.resident_of.pop(uid, None)
        if node is None:
            return False
        pods = self.resident.get(node, {})
        pods.pop(uid, None)
        if not pods:
            self.resident.pop(node, None)
        self._dirty.add(node)
        return True

    def _apply_offers(self) -> None:
        """Give the graph the new offer of each node whose overhead changed (the node is
        attached again with its new pools, its pieces registered again; many at once: one
        rebuild). When the graph refuses them together, node by node, skipping the refused."""
        names = [n for n in sorted(self._offer_dirty) if n in self.nodes]
        self._offer_dirty.clear()
        if not names:
            return
        self.generation += 1
        try:
            self.allocator.upsert_nodes([self.overhead.offered(self.nodes[n]) for n in names])
            return
        except MatcherError:
            pass
        for name in names:
            try:
                self.allocator.upsert_node(self.overhead.offered(self.nodes[name]))
            except MatcherError as exc:
                log.warning("cannot take the overhead of node %s out of its offer: %s", name,
                            exc)
                self.metrics.errors.inc(source="adopt")

    def _register_residents(self, now: int) -> None:
        """Apply changed node offers, then re-register each changed node's resident pods as
        one allocation of their sum."""
        if self._offer_dirty:
            self._apply_offers()
        if not self._dirty:
            return
        for node in sorted(self._dirty):
            old = self.resident_job.pop(node, None)
            if old is not None:
                self.job_ends.pop(old, None)
                self._cancel_quietly(old)
            pods = self.resident.get(node)
            if not pods or node not in self.nodes:
                continue
            total = Request()
            for pod in pods.values():
                total = total + pod.request
            duration = self.config.default_duration
            try:
                jobid = self.allocator.adopt(node, total, len(pods), now=now,
                                             duration=duration)
            except MatcherError as exc:
                log.warning("cannot register %d running pods on %s: %s", len(pods), node, exc)
                self.metrics.errors.inc(source="adopt")
                continue
            if node in self.allocator.unsynced:
                self.metrics.errors.inc(source="adopt")
            self.resident_job[node] = jobid
            self._track(jobid, now + duration)
        self._dirty.clear()

    def _track(self, jobid: int, end: int) -> None:
        self.job_ends[jobid] = end
        heapq.heappush(self._ends, (end, jobid))

    def _release_share(self, uid: str) -> None:
        """Give back the allocator share of a pod we placed."""
        share = self.shares.pop(uid, None)
        if share is None:
            return
        jobid, node, request = share
        try:
            empty = self.allocator.release(jobid, node, request)
        except UnknownJob:
            empty = True
        except MatcherError as exc:
            log.error("release of %s from job %d on %s failed: %s", uid, jobid, node, exc)
            self.metrics.errors.inc(source="release")
            empty = False
        if empty:
            self.job_ends.pop(jobid, None)

    def _release(self, uid: str, group_key: str) -> None:
        """The pod no longer holds resources (finished, deleted, or its bind gave up)."""
        group = self.groups.get(group_key)
        if group is not None and uid in group.bound:
            group.bound.discard(uid)
            if not group.pending and not group.bound:
                del self.groups[group.key]
        held = self.ledger.remove(uid) is not None
        self.binding.pop(uid, None)
        if not self._drop_resident(uid) and not self._drop_overhead(uid):
            self._release_share(uid)
        if held:
            self.generation += 1

    def _cancel_quietly(self, jobid: int) -> None:
        with contextlib.suppress(UnknownJob):
            self.allocator.cancel(jobid)

    def _forget_pod(self, uid: str) -> None:
        info = self.pods.pop(uid, None)
        self._track_member(uid, None, info)
        self._release(uid, info.group_key if info else "")
        self.invalid_pods.pop(uid, None)
        self.noted.pop(uid, None)
        self.nominated.pop(uid, None)
        self.enqueued_at.pop(uid, None)
        if info is not None:
            self._dequeue(uid, info)

    def _extend_overdue(self, now: int) -> None:
        """Jobs past their declared end still hold their nodes while their pods run."""
        while self._ends and self._ends[0][0] <= now:
            end, jobid = heapq.heappop(self._ends)
            if self.job_ends.get(jobid) != end:
                continue
            try:
                self.allocator.extend(jobid, now=now, duration=self.config.extension)
            except MatcherError as exc:
                log.error("extending job %d failed: %s", jobid, exc)
                self.metrics.errors.inc(source="extend")
            self._track(jobid, now + self.config.extension)
            self.generation += 1  # a reservation behind it starts later

    # ==== the queue ===============================================================================
    def _group_for(self, info: PodInfo) -> Group:
        key = info.group_key
        group = self.groups.get(key)
        if group is None:
            kind = info.group_kind or "single"
            group = Group(key, info.namespace, info.group_name or info.name, kind,
                          arrival=self.clock())
            self.groups[key] = group
            if kind == "podgroup":
                self._refresh_podgroup(group)
        if group.kind == "label":
            group.min_member = max(group.min_member, info.group_size)
        return group

    def _refresh_podgroup(self, group: Group) -> None:
        obj = self.podgroups.get(group.key)
        group.failed_gen = -1
        if obj is None:
            group.missing, group.spec, group.invalid = True, None, ""
            return
        group.missing = False
        group.podgroup_uid = str((obj.get("metadata") or {}).get("uid") or "")
        try:
            group.spec = podgroup_spec(obj)
        except PodSpecError as exc:
            group.spec, group.invalid = None, str(exc)
            self._report_invalid_group(group)
            return
        group.invalid = ""
        group.min_member = group.spec.min_member

    def _report_invalid_group(self, group: Group) -> None:
        self.metrics.unschedulable.inc(reason="invalid")
        self.binder.podgroup_event(group.namespace, group.name, group.podgroup_uid,
                                   "InvalidPodGroup", group.invalid)
        self._note(group, group.members(), group.invalid)

    def _enqueue(self, info: PodInfo, previous: PodInfo | None) -> None:
        if info.unsupported:
            self._invalid_pod_info(info, info.unsupported)
            return
        group = self._group_for(info)
        if info.uid not in group.pending or (previous is not None and previous.gated and
                                             not info.gated):
            self.enqueued_at.setdefault(info.uid, self.clock())
            group.failed_gen = -1  # membership changed: worth another try
            if info.nominated_node and info.uid not in self.nominated:
                self.nominated[info.uid] = (info.nominated_node, info.priority)
        group.pending[info.uid] = info
        group.created = min(group.created, info.created)

    def _dequeue(self, uid: str, info: PodInfo) -> None:
        group = self.groups.get(info.group_key)
        if group is None:
            return
        if group.pending.pop(uid, None) is not None:
            group.failed_gen = -1
        self.enqueued_at.pop(uid, None)
        if not group.pending and not group.bound:
            del self.groups[info.group_key]

    def _invalid_pod(self, obj: dict[str, Any], uid: str, message: str) -> None:
        """A pod whose spec we cannot read: say so once, never retry until it changes. Ours
        and waiting: an ``InvalidPod`` Event and condition; anyone else's: a log line (the
        last readable version, if any, stays counted)."""
        namespace, name, _ = object_identity(obj, "pod")
        spec = obj.get("spec") if isinstance(obj.get("spec"), dict) else {}
        if spec.get("nodeName") or spec.get("schedulerName") != self.config.scheduler_name:
            self._skip("pods", f"pod {namespace}/{name}", message)
            return
        stub = PodInfo(uid=uid, namespace=namespace, name=name,
                       scheduler_name=self.config.scheduler_name, node_name="",
                       phase="Pending", request=Request())
        if self.invalid_pods.get(uid) != message:
            log.warning("pod %s/%s cannot be scheduled: %s", namespace, name, message)
        self._invalid_pod_info(stub, message)

    def _invalid_pod_info(self, pod: PodInfo, message: str) -> None:
        if self.invalid_pods.get(pod.uid) == message:
            return
        self.invalid_pods[pod.uid] = message
        self.metrics.unschedulable.inc(reason="invalid")
        note = f"cannot schedule: {message}"
        self.binder.pod_event(pod, "InvalidPod", note, "Scheduling")
        self.binder.pod_unschedulable(pod, note)
        self.noted[pod.uid] = note

    def queue(self) -> list[Group]:
        """Groups with a pod to place, in the order they are served: priority, then age."""
        ready = [g for g in self.groups.values() if any(not p.gated for p in g.pending.values())]
        ready.sort(key=lambda g: (-g.priority, g.created, g.arrival, g.key))
        return ready

    # ==== the cycle ===============================================================================
    def schedule(self, now: int) -> CycleReport:
        """One pass over the queue at time ``now`` (integer seconds on the allocator's clock)."""
        report = CycleReport()
        if not self.ready:
            return report
        self.placer.begin_cycle()
        self._collect_binds()
        self._register_residents(now)
        self._extend_overdue(now)
        wall = self.clock()
        self._retry_binds(wall)
        if self.reservations and self._reservation_gen != self.generation:
            self._drop_reservations()
        reserve_left = self.config.reserve_depth - len(self.reserved_groups)
        busy: dict[tuple, str] = {}  # this cycle: request shapes known not to fit now
        done: set[str] = set()
        queue = self.queue()
        for i, group in enumerate(queue):
            if report.tried >= self.config.queue_depth:
                break
            if group.key in done:
                continue
            if group.failed_gen == self.generation:
                report.skipped += 1
                continue
            report.tried += 1
            reserve = reserve_left > 0
            outcome = self._try(group, queue, i, now, wall, reserve, busy, done, report)
            if outcome == "reserved":
                reserve_left -= 1
        report.reservations = dict(self.reserved_groups)
        self._write_podgroup_status()
        return report

    def _try(self, group: Group, queue: list[Group], i: int, now: int, wall: float,
             reserve: bool, busy: dict[tuple, str], done: set[str], report: CycleReport) -> str:
        """Attempt one group (and the lone pods batched with it); returns what happened."""
        members = group.members()
        waiting = self._waiting_reason(group, members)
        if waiting:
            report.waiting += 1
            group.failed_gen = self.generation
            self._note(group, members, waiting)
            return "waiting"
        need = max(0, group.min_member - len(group.bound)) if group.kind != "single" else 1
        duration = group.duration(self.config.default_duration)
        exclude = self._excluded_nodes
        if group.kind == "single":
            batch = self._batch(queue, i, members[0]) if self.config.batch_size > 1 else [group]
            shape = self._shape_key(members[0])
            if shape is not None and shape in busy:
                for g in batch:
                    g.failed_gen = self.generation
                    self._note(g, g.members(), busy[shape])
                report.busy += len(batch)
                done.update(g.key for g in batch)
                return "busy"
            if len(batch) > 1:
                pods = [g.members()[0] for g in batch]
                outcome = self.placer.place(parts(pods, self._candidates, self._is_interpod),
                                            1, duration=duration, now=now, reserve=False,
                                            exclude=exclude)
                done.update(g.key for g in batch)
                if outcome.status == "placed":
                    report.bound += self._commit(outcome, now, duration, wall)
                    placed = {p.uid for p, _, _ in outcome.assignments}
                    # the ones that did not fit are tried next, one by one: the first may get
                    # the reservation (EASY), the rest then meet this cycle's busy shape
                    done.difference_update(g.key for g, p in zip(batch, pods, strict=True)
                                           if p.uid not in placed)
                    return "placed"
                done.difference_update(g.key for g in batch[1:])
        group_parts = parts(members, self._candidates, self._is_interpod)
        outcome = self.placer.place(group_parts, need, duration=duration, now=now,
                                    reserve=reserve, topology=self._topology(group),
                                    exclude=exclude)
        done.add(group.key)
        if outcome.status == "placed":
            report.bound += self._commit(outcome, now, duration, wall)
            if group.members() and self.groups.get(group.key) is group:
                # minMember started; the members that did not fit wait for room
                self._failed(group, "busy", Outcome("busy"), None, busy)
            return "placed"
        shape = self._shape_key(members[0]) if group.kind == "single" else None
        if outcome.status == "reserved" and self.config.preemption and \
                self._preempt(group, members, need, report):
            for jobid in outcome.jobs:  # evicting beats waiting for the reservation
                self._cancel_quietly(jobid)
            group.failed_gen = self.generation
            return "preempting"
        if outcome.status == "reserved" and group.key in self._retry_soon:
            self._retry_soon.discard(group.key)  # evictions failed: no reservation, try again
            for jobid in outcome.jobs:
                self._cancel_quietly(jobid)
            self._note(group, members, "preemption failed (the API refused an eviction); "
                                       "trying again")
            return "busy"
        if outcome.status == "reserved":
            if shape is not None:
                busy[shape] = "reserved"
            self.reservations += outcome.jobs
            self.reserved_groups[group.key] = outcome.at
            self._reservation_gen = self.generation
            report.reserved += 1
            group.failed_gen = self.generation
            self._note(group, members, self._busy_message(group, members, outcome) +
                       f"; resources reserved from t={outcome.at}s (EASY backfill)")
            return "reserved"
        if outcome.status == "unschedulable":
            report.unschedulable += 1
            self.metrics.unschedulable.inc(reason="unsatisfiable")
            self._failed(group, "unschedulable", outcome, shape, busy)
            return "unschedulable"
        report.busy += 1
        if self.config.preemption and self._preempt(group, members, need, report):
            group.failed_gen = self.generation
            return "preempting"
        self._failed(group, "busy", outcome, shape, busy)
        if group.key in self._retry_soon:
            self._retry_soon.discard(group.key)
            group.failed_gen = -1
        return "busy"

    def _failed(self, group: Group, status: str, outcome: Outcome, shape: tuple | None,
                busy: dict[tuple, str]) -> None:
        group.failed_gen = self.generation
        members = group.members()
        if status == "unschedulable":
            message = self._busy_message(group, members, outcome, never=True)
        else:
            message = self._busy_message(group, members, outcome)
        if shape is not None:
            busy[shape] = message
        # an Event reason of its own for "never": what the queue (and users) look for
        self._note(group, members, message,
                   "Unschedulable" if status == "unschedulable" else "FailedScheduling")
        if group.kind == "podgroup" and group.last_state != message and not group.missing:
            group.last_state = message
            self.binder.podgroup_event(group.namespace, group.name, group.podgroup_uid,
                                       "Unschedulable" if status == "unschedulable" else
                                       "FailedScheduling", message)

    def _waiting_reason(self, group: Group, members: list[PodInfo]) -> str:
        """Why ``group`` cannot be tried at all yet, or ""."""
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
            free = self.ledger.free_total(group.key)
            want = spec.min_resources.as_dict()
            want["pods"] = spec.min_member
            gap = {r: n - free.get(r, 0) for r, n in want.items() if n > free.get(r, 0)}
            if gap:
                return (f"PodGroup {group.key}: minResources not available in the cluster "
                        f"(resource gap: {Request.of(gap)})")
        return ""

    def _batch(self, queue: list[Group], start: int, head: PodInfo) -> list[Group]:
        """Lone pods next in line with the same request, candidates, duration and priority:
        matched as one request of up to ``batch_size`` slots; each pod still binds and
        releases alone."""
        key = self._shape_key(head)
        if key is None:
            return [queue[start]]
        batch = [queue[start]]
        duration = queue[start].duration(self.config.default_duration)
        for k in range(start + 1, min(len(queue), start + self.config.batch_size)):
            g = queue[k]
            members = g.members()
            if (g.kind != "single" or len(members) != 1 or g.failed_gen == self.generation
                    or self._shape_key(members[0]) != key
                    or g.duration(self.config.default_duration) != duration):
                break
            batch.append(g)
        return batch

    def _shape_key(self, pod: PodInfo) -> tuple | None:
        """Lone pods with equal keys are interchangeable for placement (None: not batchable)."""
        if self._is_interpod(pod):
            return None
        return (pod.request, pod.static_key, pod.priority)

    def _is_interpod(self, pod: PodInfo) -> bool:
        return self.filters.needs_interpod(pod)

    def _candidates(self, pod: PodInfo) -> Candidates:
        return self.filters.static_candidates(pod)

    def _excluded_nodes(self, pod: PodInfo) -> frozenset[str]:
        """Nodes ``pod`` must not take now: nodes whose running pods the graph could not all
        register, and nodes nominated for a higher-priority pod that preempted there."""
        out = set(self.allocator.unsynced)
        for uid, (node, prio) in self.nominated.items():
            if prio > pod.priority and uid != pod.uid:
                out.add(node)
        return frozenset(out)

    def _topology(self, group: Group) -> tuple[str, str]:
        mode, level = group.topology
        if not mode:
            return ("", "")
        if level not in {lvl.name for lvl in self.allocator.levels}:
            return ("required", f"<unknown level {level!r}>") if mode == "required" else ("", "")
        return (mode, level)

    def _busy_message(self, group: Group, members: list[PodInfo], outcome: Outcome,
                      never: bool = False) -> str:
        """kube-scheduler's FitError text for the group's first member, saying what is
        group-specific: how many must fit at once, in which topology, and that nodes which fit
        one pod may be held for others (a reservation, a nomination)."""
        pod = members[0]
        fit, explained = self._explain(pod)
        head = "can never fit: " if never else ""
        mode, level = group.topology
        if group.kind == "single":
            text = f"{head}{explained}"
            if fit and not never:
                text += (" The nodes that fit are held for a higher-priority pod (a "
                         "reservation or a nomination).")
            return text
        text = f"{group.kind} {group.key}: {len(members)} pod(s) to place"
        if mode:
            text += f", {mode} in one {level}"
        if outcome.fit:
            text += f", only {outcome.fit} fit now"
        text += f"; {head}"
        if fit:
            text += f"they do not fit all at once ({explained})"
        else:
            text += explained
        if outcome.why and ("topology" in outcome.why or "single" in outcome.why):
            text += f" ({outcome.why})"
        if outcome.siblings_why:
            text += f" ({outcome.siblings_why})"
        return text

    def _explain(self, pod: PodInfo) -> tuple[int, str]:
        interpod = self._is_interpod(pod)
        key = (pod.request, pod.static_key, self.ledger.version) if not interpod else None
        if key is not None and key in self._explained:
            return self._explained[key]
        state = self.filters.interpod(pod) if interpod else None
        got = self.filters.explain(pod, state)
        if key is not None:
            if len(self._explained) > 1024:
                self._explained.clear()
            self._explained[key] = got
        return got

    def _note(self, group: Group, members: Iterable[PodInfo], message: str,
              event: str = "FailedScheduling") -> None:
        """``PodScheduled=False, reason=Unschedulable`` with ``message`` and one
        ``FailedScheduling`` Event (``Unschedulable`` when it can never fit), on every waiting
        pod whose reason changed."""
        for pod in members:
            if pod.gated or self.noted.get(pod.uid) == message:
                continue
            self.noted[pod.uid] = message
            self.binder.pod_unschedulable(pod, message)
            self.binder.pod_event(pod, event, message, "Scheduling")

    # ==== binding =================================================================================
    def _commit(self, outcome: Outcome, now: int, duration: int, wall: float) -> int:
        """Check everything the binds need, then bind the outcome's assignments."""
        for pod, node, _ in outcome.assignments:
            current = self.pods.get(pod.uid)
            state = self.ledger.nodes.get(node)
            if (current is None or current.bound or current.deleting or current.gated
                    or state is None or not state.exists):
                log.info("placement of %s to %s dropped before binding: the pod or node "
                         "changed", pod.key, node)
                for jobid in outcome.jobs:
                    self._cancel_quietly(jobid)
                return 0
        for jobid in outcome.jobs:
            self._track(jobid, now + duration)
        assignments = []
        for pod, node, jobid in outcome.assignments:
            self.shares[pod.uid] = (jobid, node, pod.request)
            self.ledger.add(pod, node)  # assumed until the informer says it is bound
            group = self.groups.get(pod.group_key)
            if group is not None:
                group.pending.pop(pod.uid, None)
                group.bound.add(pod.uid)
            pod.node_name = node
            self.nominated.pop(pod.uid, None)
            assignments.append((pod, node))
        t0 = time.perf_counter()
        submit = getattr(self.binder, "submit", None) if self.config.async_binds else None
        if submit is not None:
            # as kube-scheduler's binding cycle: the pods are assumed (ledger, graph), the
            # binds run while the loop goes on; their results are taken in by _collect_binds
            futures = submit(assignments)
            self.inflight += [(pod, node, future, t0)
                              for (pod, node), future in zip(assignments, futures, strict=True)]
            if self._waker is not None:
                for future in futures:
                    if not future.done():
                        future.add_done_callback(self._wake)
            self._collect_binds()  # those already done (a binder without a pool: all)
            return len(assignments)
        results = self.binder.bind(assignments)
        elapsed = (time.perf_counter() - t0) / max(1, len(assignments))
        return self._bind_results(assignments, results, [elapsed] * len(assignments))

    def settle(self, deadline: float) -> int:
        """Shutdown: wait (until ``deadline``, ``time.monotonic()``) for the binds already
        started and take in their results, so their ``Scheduled`` Events and PodGroup status
        go out with the rest; returns how many binds are still out. Nothing new is placed."""
        futures = [future for _, _, future, _ in self.inflight]
        if futures:
            concurrent.futures.wait(futures, timeout=max(0.0, deadline - time.monotonic()))
        self._collect_binds()
        self._write_podgroup_status()
        return len(self.inflight)

    def _collect_binds(self) -> int:
        """Take in the results of the binds that finished (async binding)."""
        if not self.inflight:
            return 0
        done, waiting = [], []
        for entry in self.inflight:
            (done if entry[2].done() else waiting).append(entry)
        self.inflight = waiting
        if not done:
            return 0
        now = time.perf_counter()
        results = []
        for _, _, future, _ in done:
            try:
                results.append(future.result())
            except Exception as exc:  # noqa: BLE001 - the bind itself raised
                results.append(exc)
        return self._bind_results([(p, n) for p, n, _, _ in done], results,
                                  [now - t0 for _, _, _, t0 in done])

    def _bind_results(self, assignments: list[tuple[PodInfo, str]],
                      results: list[Exception | None], elapsed: list[float]) -> int:
        bound = 0
        wall = self.clock()
        groups: dict[str, Group] = {}
        for (pod, node), error, took in zip(assignments, results, elapsed, strict=True):
            self.metrics.bind_latency.observe(took)
            if self.shares.get(pod.uid, (0, ""))[1] != node:
                continue  # the pod went (deleted, or bound elsewhere) while its bind ran
            group = self.groups.get(pod.group_key)
            if group is not None:
                groups[group.key] = group
            if error is None:
                bound += 1
                self._bound(pod, node, wall)
                continue
            self.metrics.errors.inc(source="bind")
            if isinstance(error, ApiError) and error.not_found:
                self._release(pod.uid, pod.group_key)
                continue
            timeout = self.config.bind_timeout
            if group is not None and group.spec is not None and group.spec.schedule_timeout:
                timeout = group.spec.schedule_timeout
            self.binding[pod.uid] = _Binding(pod, node, pod.group_key, wall, wall + timeout,
                                             wall + self.config.bind_retry_after,
                                             error=str(error))
            self.binder.pod_event(pod, "FailedBinding",
                                  f"binding {pod.key} to {node} failed: {error}; retrying to "
                                  f"the same node for up to {timeout}s", "Binding")
        if bound:
            self.metrics.pods_bound.inc(bound)
        for group in groups.values():
            self._group_progress(group)
        return bound

    def _bound(self, pod: PodInfo, node: str, wall: float) -> None:
        started = self.enqueued_at.pop(pod.uid, None)
        if started is not None:
            self.metrics.e2e_latency.observe(wall - started)
        self.noted.pop(pod.uid, None)
        self.binder.pod_event(pod, "Scheduled", f"Successfully assigned {pod.key} to {node}",
                              "Binding")

    def _group_progress(self, group: Group) -> None:
        if group.kind == "podgroup" and group.bound and not any(
                uid in self.binding for uid in group.bound):
            scheduled = len(group.bound)
            self._pg_dirty.add(group.key)
            if group.last_state != f"scheduled:{scheduled}":
                group.last_state = f"scheduled:{scheduled}"
                self.metrics.groups_scheduled.inc()
        elif group.kind == "label" and group.bound and not group.pending:
            self.metrics.groups_scheduled.inc()
        if group.kind == "single" and not group.pending and not any(
                uid in self.binding for uid in group.bound):
            self.groups.pop(group.key, None)  # a lone pod needs no group once bound

    # ==== PodGroup status ========================================================================
    def _track_member(self, uid: str, info: PodInfo | None, previous: PodInfo | None) -> None:
        """Keep :attr:`pg_members` (PodGroup key -> members) as pod ``uid`` changes from
        ``previous`` to ``info`` (None: gone)."""
        if previous is not None and previous.group_kind == "podgroup" and (
                info is None or info.group_key != previous.group_key):
            members = self.pg_members.get(previous.group_key, {})
            if members.pop(uid, None) is not None:
                self._pg_dirty.add(previous.group_key)
                if not members:
                    self.pg_members.pop(previous.group_key, None)
        if info is not None and info.group_kind == "podgroup":
            self.pg_members.setdefault(info.group_key, {})[uid] = info
            if previous is None or (previous.phase, previous.node_name) != \
                    (info.phase, info.node_name):
                self._pg_dirty.add(info.group_key)

    def _write_podgroup_status(self) -> None:
        """Write the status of each PodGroup whose members changed, from their phases
        (:func:`~fluxinfra.scheduler.podgroup_status.podgroup_status`), when it differs from
        what the PodGroup has."""
        if not self._pg_dirty:
            return
        binding = set(self.binding)
        binding.update(pod.uid for pod, _, _, _ in self.inflight)
        for key in sorted(self._pg_dirty):
            obj = self.podgroups.get(key)
            group = self.groups.get(key)
            if obj is None or (group is not None and group.invalid):
                continue
            try:
                min_member = podgroup_spec(obj).min_member
            except PodSpecError:
                continue  # reported with its group
            uid = str((obj.get("metadata") or {}).get("uid") or "")
            sent = self.pg_status.get(key)
            current = sent[1] if sent is not None and sent[0] == uid else \
                (obj.get("status") if isinstance(obj.get("status"), dict) else {})
            members = self.pg_members.get(key, {}).values()
            status = podgroup_status(
                min_member, [(p.phase, bool(p.node_name) and p.uid not in binding)
                             for p in members], str(current.get("phase") or ""))
            if status is None or not status_differs(status, current):
                continue
            self.pg_status[key] = (uid, status)
            namespace, _, name = key.partition("/")
            self.binder.podgroup_status(namespace, name, status)
        self._pg_dirty.clear()

    def _retry_binds(self, wall: float) -> None:
        """Bind again, to the same node, the pods whose bind failed; give up at the deadline."""
        due = [b for b in self.binding.values() if b.next_at <= wall]
        if not due:
            return
        retry, gave_up = [], []
        for b in due:
            current = self.pods.get(b.pod.uid)
            if current is None:
                self.binding.pop(b.pod.uid, None)
                continue
            (gave_up if wall >= b.deadline else retry).append(b)
        for b in gave_up:
            self._give_up(b)
        if not retry:
            return
        results = self.binder.bind([(b.pod, b.node) for b in retry])
        for b, error in zip(retry, results, strict=True):
            if error is None or (isinstance(error, ApiError) and error.conflict and
                                 self._bound_there(b)):
                self.binding.pop(b.pod.uid, None)
                self.metrics.pods_bound.inc()
                self._bound(b.pod, b.node, wall)
                group = self.groups.get(b.group_key)
                if group is not None:
                    self._group_progress(group)
                continue
            if isinstance(error, ApiError) and error.not_found:
                self._release(b.pod.uid, b.group_key)
                continue
            b.attempts += 1
            b.error = str(error)
            b.next_at = wall + min(30.0, self.config.bind_retry_after * 2 ** (b.attempts - 1))

    def _bound_there(self, b: _Binding) -> bool:
        current = self.pods.get(b.pod.uid)
        return current is not None and current.node_name == b.node

    def _give_up(self, b: _Binding) -> None:
        pod = b.pod
        seconds = int(b.deadline - b.first)
        message = (f"binding {pod.key} to its reserved node {b.node} failed {b.attempts} "
                   f"time(s) over {seconds}s (last error: {b.error}); its reservation is "
                   "released and it is queued again")
        self.binding.pop(pod.uid, None)
        self.metrics.errors.inc(source="bind_gave_up")
        group = self.groups.get(b.group_key)
        self._release(pod.uid, b.group_key)
        current = self.pods.get(pod.uid)
        if current is not None and not current.bound:
            self._enqueue(current, None)
            group = self.groups.get(b.group_key)
        self.binder.pod_event(pod, "FailedBinding", message, "Binding")
        self.binder.pod_unschedulable(pod, message)
        self.noted[pod.uid] = message
        if group is not None and group.kind == "podgroup":
            self.binder.podgroup_event(group.namespace, group.name, group.podgroup_uid,
                                       "FailedBinding", message)

    def _drop_reservations(self) -> None:
        for jobid in self.reservations:
            self._cancel_quietly(jobid)
        self.reservations = []
        self.reserved_groups = {}

    # ==== preemption ==============================================================================
    def _gang_of(self, pod: PodInfo) -> list[PodInfo]:
        """A running pod and the running members of its gang (evicted together or not at all)."""
        group = self.groups.get(pod.group_key) if pod.group_kind else None
        if group is None or len(group.bound) <= 1:
            return [pod]
        out = [p for uid in group.bound if (p := self.ledger.pod(uid)) is not None]
        return out or [pod]

    def _preempt(self, group: Group, members: list[PodInfo], need: int,
                 report: CycleReport) -> bool:
        """DefaultPreemption for the group's members; True when victims are being evicted."""
        if group.preempting:
            group.preempting = {uid for uid in group.preempting if uid in self.ledger.where}
            if group.preempting:
                return True  # victims still terminating: wait for them
        if not members or any(m.preempt_never for m in members):
            return False
        lowest = min((p.priority for p, _ in self.ledger.pods()), default=None)
        if lowest is None or lowest >= group.priority:
            return False
        count = max(1, need) if group.kind != "single" else 1
        mode, level = self._topology(group)
        domains = None
        if mode == "required" and not level.startswith("<"):
            domains = [nodes for _, nodes in self.allocator.domains(level)]
        plan = self.preemptor.plan(members[:count], budgets(self.pdbs.values()), domains,
                                   frozenset(self.allocator.unsynced))
        if plan is None:
            return False
        report.preempted += len(plan.victims)
        if self._carry_out(group, plan):
            return True
        self._retry_soon.add(group.key)  # the evictions failed (API errors): try again
        return False

    def _carry_out(self, group: Group, plan: Plan) -> bool:
        """Evict the plan's victims and nominate its pods; False when no victim could be
        evicted (the group then waits as any busy group does)."""
        nodes = sorted({n for _, n in plan.nominations})
        preemptor = plan.nominations[0][0]
        evicted = set()
        for victim in plan.victims:
            node = self.ledger.where.get(victim.uid, "")
            if self.binder.preempt(victim, preemptor, node):
                evicted.add(victim.uid)
        if not evicted:
            return False
        group.preempting = evicted
        for pod, node in plan.nominations:
            self.nominated[pod.uid] = (node, pod.priority)
            self.binder.nominate(pod, node)
            for uid, (other_node, prio) in list(self.nominated.items()):
                if other_node == node and prio < pod.priority and uid in self.pods:
                    del self.nominated[uid]
                    self.binder.nominate(self.pods[uid], "")
        message = (f"preempting {len(plan.victims)} lower-priority pod(s) on "
                   f"{', '.join(nodes)}; waiting for them to terminate")
        self._note(group, group.members(), message)
        self.metrics.preemption_victims.inc(len(evicted))
        return True

    # ==== the daemon loop's timing ================================================================
    def set_waker(self, waker: Callable[[], None] | None) -> None:
        """``waker()`` is called when work appears that no watch event announces (an async
        bind finished: a failed one changes nothing in the API)."""
        self._waker = waker

    def _wake(self, _future: Any = None) -> None:
        waker = self._waker
        if waker is not None:
            waker()

    def next_due(self, now: int) -> float | None:
        """Seconds until timed work falls due, None when only a cluster change can bring any.

        Timed work: an overrunning job's extension (a job's declared end, which is also when a
        reservation behind it may start), a failed bind's retry to its reserved node (and its
        give-up deadline), a group whose evictions failed, and async binds still running when
        no waker is set. The daemon loop sleeps until then or until an event arrives, so an
        idle scheduler does nothing.
        """
        due: list[float] = []
        if self._ends:
            due.append(self._ends[0][0] - now)
        if self.binding:
            wall = self.clock()
            due.append(min(min(b.next_at, b.deadline) for b in self.binding.values()) - wall)
        if self._retry_soon:
            due.append(self.config.bind_retry_after)
        if self.inflight and self._waker is None:
            due.append(0.05)
        return max(0.0, min(due)) if due else None

    # ==== introspection (tests, simulator, metrics) ===============================================

    def pending_pods(self) -> int:
        return sum(len(g.pending) for g in self.groups.values())

    def held(self) -> dict[str, list[tuple[str, Request]]]:
        """node -> (uid, request) of every pod the core counts as holding resources there."""
        out: dict[str, list[tuple[str, Request]]] = {}
        for pod, state in self.ledger.pods():
            out.setdefault(state.name, []).append((pod.uid, pod.request))
        return out


def _unreadable_object(kind: str, obj: Any, etype: str) -> str:
    """Why a Namespace or PodDisruptionBudget cannot be read ("" when it can)."""
    from fluxinfra.kube import shapes

    what = "namespace" if kind == "namespaces" else "PodDisruptionBudget"
    try:
        namespace, name, _ = object_identity(obj, what)
        if etype == "DELETED":
            return ""
        meta = obj["metadata"]
        shapes.string_map(meta.get("labels"), f"{what} {name}: metadata.labels")
        if kind == "poddisruptionbudgets":
            at = f"{what} {namespace}/{name}"
            spec = shapes.mapping(obj.get("spec"), f"{at}: spec")
            shapes.mapping(spec.get("selector"), f"{at}: spec.selector")
            status = shapes.mapping(obj.get("status"), f"{at}: status")
            shapes.integer(status.get("disruptionsAllowed"), f"{at}: status.disruptionsAllowed",
                           low=0)
            shapes.mapping(status.get("disruptedPods"), f"{at}: status.disruptedPods")
    except (PodSpecError, shapes.ShapeError) as exc:
        return str(exc)
    return ""


def _podgroup_signature(obj: dict[str, Any]) -> tuple[Any, ...]:
    """What the scheduler reads of a PodGroup to place its pods (everything but its status)."""
    meta = obj.get("metadata") if isinstance(obj.get("metadata"), dict) else {}
    return (repr(obj.get("spec")), repr(meta.get("labels")), repr(meta.get("annotations")),
            meta.get("uid"))


def node_signature(node: dict[str, Any]) -> tuple[Any, ...]:
    """What about a node matters to placement: amounts, labels, cordon, taints. Status
    heartbeats (conditions' times, images, addresses) leave it unchanged."""
    meta, spec, status = (node.get(k) or {} for k in ("metadata", "spec", "status"))
    return (sorted((status.get("allocatable") or status.get("capacity") or {}).items()),
            sorted((meta.get("labels") or {}).items()), bool(spec.get("unschedulable")),
            repr(spec.get("taints")))
