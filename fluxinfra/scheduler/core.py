"""The scheduler core: the cluster as read, and the scheduler that acts on it.

The core is single-threaded and knows nothing of HTTP: it is fed API-JSON objects
(:meth:`SchedulerCore.on_node`, :meth:`~SchedulerCore.on_pod`,
:meth:`~SchedulerCore.on_podgroup`, :meth:`~SchedulerCore.on_object` for namespaces and PDBs)
and acts through two narrow interfaces, an :class:`~fluxinfra.scheduler.allocator.Allocator`
(where pods go) and a :class:`~fluxinfra.scheduler.binding.Binder` (binds, Events, conditions,
evictions). The Kubernetes runner (:mod:`fluxinfra.scheduler.runner`), the simulator and the
tests drive the same code.

Laid out as kube-scheduler lays out its scheduler:

- this module: the ``Scheduler`` itself and its informers' event handlers (kube-scheduler's
  ``scheduler.go`` and ``eventhandlers.go``): each object read (an unreadable one skipped and
  reported once), then handed to the pieces below;
- :mod:`~fluxinfra.scheduler.cache` - the cache (``internal/cache``): nodes, pods, the exact
  ledger, the allocator's registrations and shares, node overhead, the generation;
- :mod:`~fluxinfra.scheduler.scheduling_queue` - the scheduling queue (``internal/queue``):
  groups of pods in the order they are served, the nominated nodes;
- :mod:`~fluxinfra.scheduler.cycle` - one scheduling cycle (``schedule_one.go``), a typed
  :class:`~fluxinfra.scheduler.cycle.Result` per group tried, preemption as PostFilter;
- :mod:`~fluxinfra.scheduler.binding` - the binding cycle and the :class:`Binder` hand-off;
- :mod:`~fluxinfra.scheduler.gangs` - Coscheduling: PodGroups' specs, when a gang may be tried,
  their status.

:class:`SchedulerCore` inherits the cycle's and the binding's methods and keeps the state they
share; the cache, the queue and the gangs are objects of their own, whose books it also shows
under its own names (``core.nodes``, ``core.groups``, ``core.ledger``, ...).
"""

from __future__ import annotations

import collections
import logging
import time
from collections.abc import Callable, Iterable
from typing import Any

from fluxinfra.kube.shapes import ShapeError, check_node, node_label
from fluxinfra.matcher.errors import MatcherError
from fluxinfra.scheduler.allocator import Allocator
from fluxinfra.scheduler.binding import Binder, BindingCycle, FailedBind
from fluxinfra.scheduler.cache import Cache
from fluxinfra.scheduler.config import SchedulerConfig
from fluxinfra.scheduler.cycle import CycleReport, SchedulingCycle
from fluxinfra.scheduler.filters import Filters
from fluxinfra.scheduler.gangs import Gangs, podgroup_signature
from fluxinfra.scheduler.metrics import Metrics
from fluxinfra.scheduler.placement import Placer
from fluxinfra.scheduler.pods import (
    PodInfo,
    PodSpecError,
    Request,
    object_identity,
    object_key,
    pod_info_update,
)
from fluxinfra.scheduler.preemption import Preemptor
from fluxinfra.scheduler.scheduling_queue import Group, SchedulingQueue

__all__ = ["Binder", "CycleReport", "Group", "SchedulerConfig", "SchedulerCore"]

log = logging.getLogger(__name__)


class SchedulerCore(SchedulingCycle, BindingCycle):
    """Cluster state + accounting + queue + cycle + binding; see the module docstring."""

    def __init__(self, allocator: Allocator, binder: Binder,
                 config: SchedulerConfig | None = None, metrics: Metrics | None = None,
                 clock: Any = time.perf_counter) -> None:
        self.allocator = allocator
        self.binder = binder
        self.config = config or SchedulerConfig()
        self.metrics = metrics or Metrics()
        self.clock = clock
        self.cache = Cache(allocator, self.metrics, self.config)
        self.gangs = Gangs(self.metrics)
        self.scheduling_queue = SchedulingQueue(clock, self._refresh_podgroup)
        # the pieces' books under the core's names (the same objects)
        cache, queue = self.cache, self.scheduling_queue
        self.nodes = cache.nodes
        self.pods = cache.pods
        self.podgroups = cache.podgroups
        self.namespaces = cache.namespaces
        self.pdbs = cache.pdbs
        self.ledger = cache.ledger
        self.shares = cache.shares
        self.job_ends = cache.job_ends
        self.resident = cache.resident
        self.resident_of = cache.resident_of
        self.resident_job = cache.resident_job
        self.overhead = cache.overhead
        self.groups = queue.groups
        self.enqueued_at = queue.enqueued_at
        self.nominated = queue.nominated
        self.filters = Filters(self.ledger, self.namespaces)
        self.placer = Placer(allocator, self.ledger, self.filters,
                             observe=self.metrics.match_latency.observe)
        self.preemptor = Preemptor(self.ledger, self.filters, self._gang_of)
        #: pod uid -> its failed bind, retried to the same node
        self.binding: dict[str, FailedBind] = {}
        #: binds running (async binding): pod uid -> (pod, node, future, start)
        self.inflight: dict[str, tuple[PodInfo, str, Any, float]] = {}
        #: group key -> how many binds of its members are running
        self.inflight_groups: dict[str, int] = {}
        #: (uid, future) of binds that finished, appended by the binder's threads as they
        #: finish; the loop takes in only these (a burst's thousands of binds are not scanned)
        self._finished: collections.deque[tuple[str, Any]] = collections.deque()
        #: called (from a binder thread) when an async bind finishes: wakes the daemon loop,
        #: which otherwise sleeps until an event (a failed bind makes none)
        self._waker: Callable[[], None] | None = None
        self.reservations: list[int] = []
        #: group key -> start time of its reservation (held while nothing changes)
        self.reserved_groups: dict[str, int] = {}
        self._reservation_gen = -1
        #: the last PodScheduled message we set per pod
        self.noted: dict[str, str] = {}
        self.invalid_pods: dict[str, str] = {}
        #: objects skipped because a field cannot be read: (kind, key) -> the message, so each
        #: is logged (and reported) once per change, not at every heartbeat
        self.skipped: dict[tuple[str, str], str] = {}
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

    @property
    def generation(self) -> int:
        """Bumped whenever something that could let a waiting group fit changed (the
        cache's)."""
        return self.cache.generation

    @generation.setter
    def generation(self, value: int) -> None:
        self.cache.generation = value

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
        self.cache.add_nodes(usable)
        for pg in podgroups:
            self.on_podgroup("ADDED", pg)
        for pod in pods:
            self.on_pod("ADDED", pod, now)
        self.cache.build_graph(usable.values())
        self.cache.register_residents(now)
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
            self.cache.generation += 1
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
            if self.cache.remove_node(name):
                self.filters.node_changed(name)
                self.cache.generation += 1
            return
        old = self.nodes.get(name)
        if old is not None and node_signature(old) == node_signature(node):
            self.nodes[name] = node
            return  # a heartbeat: nothing the graph, the filters or the queue cares about
        try:
            self.cache.upsert_node(name, node)
        except MatcherError as exc:
            self._skip("nodes", name, f"the graph refused it: {exc}", node=node)
            return
        self.filters.node_changed(name)
        self.cache.generation += 1

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
            self.gangs.forget(key)
        else:
            old = self.podgroups.get(key)
            self.podgroups[key] = obj  # its spec is read (and reported) with its group
            self.gangs.podgroup_changed(key)
            if old is not None and podgroup_signature(old) == podgroup_signature(obj):
                return  # its status changed (our own writes, mostly): nothing to schedule
        group = self.groups.get(key)
        if group is not None and group.kind == "podgroup":
            self._refresh_podgroup(group)
        self.cache.generation += 1

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
        previous = self.pods.get(uid)
        try:
            info = pod_info_update(obj, previous)
        except PodSpecError as exc:
            self._invalid_pod(obj, uid, str(exc))
            return
        self.invalid_pods.pop(uid, None)
        self._readable("pods", f"pod {namespace}/{name}")
        self.pods[uid] = info
        self.gangs.track(uid, info, previous)
        if info.holds_resources:
            self.scheduling_queue.remove(uid, previous or info)
            self.binding.pop(uid, None)
            self.nominated.pop(uid, None)
            self.cache.running(info, previous)
            if info.group_kind:
                self.scheduling_queue.group_for(info).bound.add(uid)
        elif info.bound or info.terminal or (info.deleting and info.scheduler_name ==
                                             self.config.scheduler_name):
            self._release(uid, info.group_key)
            self.scheduling_queue.remove(uid, previous or info)
        elif uid in self.shares:
            pass  # we are binding it; this event is from before the bind
        elif info.scheduler_name == self.config.scheduler_name:
            self._enqueue(info, previous)

    def _release(self, uid: str, group_key: str) -> None:
        """The pod no longer holds resources (finished, deleted, or its bind gave up)."""
        self.scheduling_queue.released(uid, group_key)
        self.binding.pop(uid, None)
        self.cache.release(uid)

    def _forget_pod(self, uid: str) -> None:
        info = self.pods.pop(uid, None)
        self.gangs.track(uid, None, info)
        self._release(uid, info.group_key if info else "")
        self.invalid_pods.pop(uid, None)
        self.noted.pop(uid, None)
        self.nominated.pop(uid, None)
        self.enqueued_at.pop(uid, None)
        if info is not None:
            self.scheduling_queue.remove(uid, info)

    # ==== what enters the queue ===================================================================
    def _enqueue(self, info: PodInfo, previous: PodInfo | None) -> None:
        if info.unsupported:
            self._invalid_pod_info(info, info.unsupported)
            return
        self.scheduling_queue.add(info, previous)

    def _refresh_podgroup(self, group: Group) -> None:
        """Read the group's PodGroup again; one that cannot be read is reported."""
        if self.gangs.refresh(group, self.podgroups.get(group.key)):
            self.metrics.unschedulable.inc(reason="invalid")
            self.binder.podgroup_event(group.namespace, group.name, group.podgroup_uid,
                                       "InvalidPodGroup", group.invalid)
            self._note(group, group.members(), group.invalid)

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
        return self.scheduling_queue.ordered()

    # ==== the daemon loop's timing ================================================================
    def next_due(self, now: int) -> float | None:
        """Seconds until timed work falls due, None when only a cluster change can bring any.

        Timed work: an overrunning job's extension (a job's declared end, which is also when a
        reservation behind it may start), a failed bind's retry to its reserved node (and its
        give-up deadline), a group whose evictions failed, async binds still running when no
        waker is set, and a PodGroup status held back by its write interval. The daemon loop
        sleeps until then or until an event arrives, so an idle scheduler does nothing.
        """
        due: list[float] = []
        end = self.cache.next_end()
        if end is not None:
            due.append(end - now)
        if self.binding:
            wall = self.clock()
            due.append(min(min(b.next_at, b.deadline) for b in self.binding.values()) - wall)
        if self._retry_soon:
            due.append(self.config.bind_retry_after)
        if self.inflight and self._waker is None:
            due.append(0.05)
        if self.gangs.due_at is not None:
            due.append(self.gangs.due_at - self.clock())
        return max(0.0, min(due)) if due else None

    def cycle_can_wait(self) -> bool:
        """Whether the next cycle may wait for the daemon loop's burst gap: no pod waits to be
        placed and binds are still out, so a cycle now would only take in the binds that
        finished, and the next bind to finish wakes the loop again. The last bind out finds
        none left: its result, and the PodGroup status it completes, are taken in at once."""
        # binds out: started and not yet finished (finished ones wait in ``_finished``)
        return len(self._finished) < len(self.inflight) and not self.scheduling_queue.waiting

    # ==== introspection (tests, simulator, metrics) ===============================================

    def pending_pods(self) -> int:
        return self.scheduling_queue.pending_pods()

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


def node_signature(node: dict[str, Any]) -> tuple[Any, ...]:
    """What about a node matters to placement: amounts, labels, cordon, taints. Status
    heartbeats (conditions' times, images, addresses) leave it unchanged."""
    meta, spec, status = (node.get(k) or {} for k in ("metadata", "spec", "status"))
    return (sorted((status.get("allocatable") or status.get("capacity") or {}).items()),
            sorted((meta.get("labels") or {}).items()), bool(spec.get("unschedulable")),
            repr(spec.get("taints")))
