"""The scheduler core: cluster state, accounting, the queue and the scheduling cycle.

The core is single-threaded and knows nothing of HTTP: it is fed API-JSON objects
(:meth:`SchedulerCore.on_node`, :meth:`~SchedulerCore.on_pod`, :meth:`~SchedulerCore.on_podgroup`)
and acts through two narrow interfaces, an :class:`~fluxinfra.scheduler.allocator.Allocator`
(where pods go) and a :class:`Binder` (bind, Events, conditions). The Kubernetes runner
(:mod:`fluxinfra.scheduler.runner`), the simulator and the tests drive the same code.

Accounting (the cluster is the source of truth):

- every bound, non-finished pod holds its request on its node, whoever placed it: pods we did
  not bind in this run (another scheduler's, or ours from before a restart) are *resident*:
  each node's resident pods are registered as one allocation of their summed requests
  (re-registered at the start of the next cycle when they change; summing before rounding to
  whole cores keeps ten 100m pods at one core);
- a pod we bound that finishes or is deleted releases its own share (``release``), never its
  group's;
- nodes joining, changing (cordon, NotReady) and leaving update the allocator; resident pods
  seen before their node are registered when it arrives;
- jobs whose pods outlive their declared duration are extended, so the allocator never thinks
  their resources are free while the pods still run.

The queue: groups (PodGroups, label groups, and single pods as groups of one) ordered by pod
priority (high first), then creation time (FCFS, stable across restarts), then arrival. Each
cycle walks the queue; the first group that does not fit now gets a reservation
(``allocate_orelse_reserve``), later groups are placed only where they do not delay it (EASY
backfill); reservations are dropped at the end of the cycle and recomputed on the next, as
Fluxion's queue manager does. A group is matched once, as ``count`` identical slots, and bound
all-or-nothing; lone pods next in line with identical requests are matched together (one
traversal) and still release one by one. A group that can never fit is marked Unschedulable (an
Event and ``PodScheduled=False``), not retried until the cluster or the group changes.
"""

from __future__ import annotations

import contextlib
import heapq
import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

from fluxinfra.matcher.errors import Busy, MatcherError, UnknownJob, Unsatisfiable
from fluxinfra.scheduler.allocator import Allocator, Placement
from fluxinfra.scheduler.kube import ApiError
from fluxinfra.scheduler.metrics import Metrics
from fluxinfra.scheduler.pods import PodInfo, PodSpecError, Request, Shape, pod_info

__all__ = ["Binder", "CycleReport", "Group", "Job", "SchedulerConfig", "SchedulerCore"]

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
    #: seconds a pod waits after a failed bind before it is tried again
    bind_retry_after: float = 5.0
    #: lone pods with identical requests matched together (1 disables batching)
    batch_size: int = 64


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


@dataclass
class Group:
    """Pods matched together; a lone pod is a group of one."""

    key: str
    namespace: str
    name: str
    kind: str                                   #: "podgroup" | "label" | "single"
    arrival: float
    pending: dict[str, PodInfo] = field(default_factory=dict)
    bound: set[str] = field(default_factory=set)
    min_member: int | None = 1                  #: None: PodGroup object not seen yet
    podgroup_uid: str = ""
    unschedulable: str = ""                     #: set when it can never fit (until a change)
    invalid: str = ""                           #: set when the group itself is malformed
    last_note: str = ""                         #: last waiting Event, to avoid repeating it
    created: float = float("inf")               #: earliest creationTimestamp of a member

    @property
    def priority(self) -> int:
        return max((p.priority for p in self.pending.values()), default=0)

    def shape(self) -> Shape:
        """Every slot asks for the largest request among the pending members."""
        shapes = [p.request.shape() for p in self.pending.values()]
        return Shape(max(s.cores for s in shapes), max(s.memory_mib for s in shapes),
                     max(s.gpus for s in shapes))

    def duration(self, default: int) -> int:
        return max((p.duration or default for p in self.pending.values()), default=default)

    def ready(self) -> bool:
        if not self.pending or self.invalid or self.unschedulable or self.min_member is None:
            return False
        return len(self.pending) + len(self.bound) >= self.min_member


@dataclass
class Job:
    """An allocation the allocator holds: who holds which share where."""

    jobid: int
    group_key: str
    end: int
    shares: dict[str, tuple[str, Shape]] = field(default_factory=dict)  # uid -> (node, shape)


@dataclass
class CycleReport:
    tried: int = 0
    bound: int = 0
    reserved: int = 0
    busy: int = 0
    unschedulable: int = 0
    #: group key -> the start time (allocator clock) of its reservation in this cycle
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
        self.groups: dict[str, Group] = {}
        self.jobs: dict[int, Job] = {}
        self.pod_job: dict[str, int] = {}
        self.invalid_pods: dict[str, str] = {}
        self.hold_until: dict[str, float] = {}
        self.enqueued_at: dict[str, float] = {}
        # Pods we did not bind in this run (another scheduler's, or ours before a restart) are
        # "resident": counted per node, as one allocation of their summed requests.
        self.resident: dict[str, dict[str, Request]] = {}   # node -> uid -> request
        self.resident_of: dict[str, str] = {}               # uid -> node
        self.resident_job: dict[str, int] = {}              # node -> allocator job
        self._dirty: set[str] = set()                       # nodes to re-register
        self._ends: list[tuple[int, int]] = []   # heap of (end, jobid)
        self.ready = False
        self.metrics.queue_depth.set_function(
            lambda: sum(len(g.pending) for g in self.groups.values()))
        self.metrics.groups_pending.set_function(
            lambda: sum(1 for g in self.groups.values() if g.pending))

    # ==== informer events =========================================================================
    def load(self, nodes: Iterable[dict[str, Any]], podgroups: Iterable[dict[str, Any]],
             pods: Iterable[dict[str, Any]], now: int = 0) -> None:
        """Start-up (and restart): build from everything the cluster holds, then become ready.

        Nodes first, then PodGroups, then pods: every running pod is registered before anything
        new is placed, so a restart never double-allocates.
        """
        nodes = list(nodes)
        self.allocator.set_nodes(nodes)
        self.nodes = {n["metadata"]["name"]: n for n in nodes}
        for pg in podgroups:
            self.on_podgroup("ADDED", pg)
        for pod in pods:
            self.on_pod("ADDED", pod, now)
        self._register_residents(now)
        self.ready = True

    def on_node(self, etype: str, node: dict[str, Any], now: int = 0) -> None:
        name = node["metadata"]["name"]
        if etype == "DELETED":
            self.nodes.pop(name, None)
            self.allocator.remove_node(name)
            return
        old = self.nodes.get(name)
        self.nodes[name] = node
        if old is not None and node_signature(old) == node_signature(node):
            return  # a heartbeat: nothing the graph or the queue cares about
        self.allocator.upsert_node(node)
        if old is None and self.resident.get(name):
            self._dirty.add(name)  # pods seen before their node: register them now
        # More (or different) capacity: groups found unsatisfiable deserve another look.
        for group in self.groups.values():
            group.unschedulable = ""

    def on_podgroup(self, etype: str, obj: dict[str, Any]) -> None:
        meta = obj.get("metadata") or {}
        key = f"{meta.get('namespace', 'default')}/{meta.get('name', '')}"
        if etype == "DELETED":
            self.podgroups.pop(key, None)
        else:
            self.podgroups[key] = obj
        group = self.groups.get(key)
        if group is not None and group.kind == "podgroup":
            self._refresh_podgroup(group)

    def on_pod(self, etype: str, obj: dict[str, Any], now: int = 0) -> None:
        meta = obj.get("metadata") or {}
        uid = str(meta.get("uid") or f"{meta.get('namespace', 'default')}/{meta.get('name')}")
        if etype == "DELETED":
            self._forget_pod(uid)
            return
        try:
            info = pod_info(obj)
        except PodSpecError as exc:
            self._invalid_pod(obj, uid, str(exc))
            return
        self.invalid_pods.pop(uid, None)
        previous = self.pods.get(uid)
        self.pods[uid] = info
        if info.holds_resources:
            self._dequeue(uid, previous or info)
            share = self._share(uid)
            if share is not None and share[0] != info.node_name:
                # Our bind lost a race: the pod runs elsewhere. Account where it really is.
                self._forget_share(uid, info.group_key)
                share = None
            if share is None:
                self._add_resident(info)
        elif info.bound or info.terminal or info.deleting:
            self._forget_share(uid, info.group_key)
            self._dequeue(uid, previous or info)
        elif uid in self.pod_job:
            pass  # we bound it; this is an event from before the bind
        elif info.scheduler_name == self.config.scheduler_name:
            self._enqueue(info)

    # ==== accounting ==============================================================================
    def _share(self, uid: str) -> tuple[str, Shape] | None:
        jobid = self.pod_job.get(uid)
        if jobid is None:
            return None
        job = self.jobs.get(jobid)
        return job.shares.get(uid) if job else None

    def _add_resident(self, info: PodInfo) -> None:
        """A running pod we did not bind: count it on its node (registered at the next cycle)."""
        node = info.node_name
        pods = self.resident.setdefault(node, {})
        if pods.get(info.uid) != info.request:
            pods[info.uid] = info.request
            self.resident_of[info.uid] = node
            self._dirty.add(node)
        if info.group_kind:
            self._group_for(info).bound.add(info.uid)

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

    def _register_residents(self, now: int) -> None:
        """Re-register each changed node's resident pods as one allocation of their sum.

        Summing before rounding keeps small pods honest: ten 100m pods take one core, not ten.
        """
        for node in sorted(self._dirty):
            old = self.resident_job.pop(node, None)
            if old is not None:
                self.jobs.pop(old, None)
                self._cancel_quietly(old)
            pods = self.resident.get(node)
            if not pods or node not in self.nodes:
                continue
            shape = resident_shape(pods.values())
            if shape.cores == 0 and shape.memory_mib == 0 and shape.gpus == 0:
                continue
            duration = self.config.default_duration
            try:
                jobid = self.allocator.adopt(node, shape, now=now, duration=duration)
            except MatcherError as exc:
                # More in use than the graph has free there (whole-core rounding of our own
                # pods, or a real over-commit): say so and count it.
                log.warning("cannot register %d running pods on %s (%s): %s", len(pods), node,
                            _fmt(shape), exc)
                self.metrics.errors.inc(source="adopt")
                continue
            self.resident_job[node] = jobid
            self._add_job(Job(jobid, "", now + duration, {f"resident:{node}": (node, shape)}))
        self._dirty.clear()

    def _add_job(self, job: Job) -> None:
        self.jobs[job.jobid] = job
        heapq.heappush(self._ends, (job.end, job.jobid))

    def _forget_share(self, uid: str, group_key: str) -> None:
        """The pod no longer holds resources: release its share of its job."""
        group = self.groups.get(group_key)
        if group is not None and uid in group.bound:
            group.bound.discard(uid)
            if not group.pending and not group.bound:
                del self.groups[group.key]
        if self._drop_resident(uid):
            return
        jobid = self.pod_job.pop(uid, None)
        if jobid is None:
            return
        job = self.jobs.get(jobid)
        if job is None or uid not in job.shares:
            return
        node, shape = job.shares.pop(uid)
        try:
            empty = self.allocator.release(jobid, node, shape)
        except UnknownJob:
            empty = True
        except MatcherError as exc:
            log.error("release of %s from job %d on %s failed: %s", uid, jobid, node, exc)
            self.metrics.errors.inc(source="release")
            empty = not job.shares
        if empty or not job.shares:
            self.jobs.pop(jobid, None)
            if not empty:
                self._cancel_quietly(jobid)

    def _cancel_quietly(self, jobid: int) -> None:
        with contextlib.suppress(UnknownJob):
            self.allocator.cancel(jobid)

    def _forget_pod(self, uid: str) -> None:
        info = self.pods.pop(uid, None)
        self._forget_share(uid, info.group_key if info else "")
        self.invalid_pods.pop(uid, None)
        self.hold_until.pop(uid, None)
        if info is not None:
            self._dequeue(uid, info)

    def _extend_overdue(self, now: int) -> None:
        """Jobs past their declared end still hold their nodes while their pods run."""
        while self._ends and self._ends[0][0] <= now:
            end, jobid = heapq.heappop(self._ends)
            job = self.jobs.get(jobid)
            if job is None or job.end != end:
                continue
            try:
                self.allocator.extend(jobid, now=now, duration=self.config.extension)
            except MatcherError as exc:
                log.error("extending job %d failed: %s", jobid, exc)
                self.metrics.errors.inc(source="extend")
            job.end = now + self.config.extension
            heapq.heappush(self._ends, (job.end, jobid))

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
            group.min_member = max(group.min_member or 1, info.group_size)
        return group

    def _refresh_podgroup(self, group: Group) -> None:
        obj = self.podgroups.get(group.key)
        group.unschedulable = ""
        if obj is None:
            group.min_member, group.invalid = None, ""
            return
        group.podgroup_uid = str((obj.get("metadata") or {}).get("uid") or "")
        raw = (obj.get("spec") or {}).get("minMember")
        try:
            value = int(raw)
        except (TypeError, ValueError):
            value = 0
        if value < 1:
            group.min_member = None
            group.invalid = (f"PodGroup {group.key}: spec.minMember is {raw!r}; set it to the "
                             "number of pods that must start together (>= 1)")
            self._report_invalid_group(group)
        else:
            group.min_member, group.invalid = value, ""

    def _report_invalid_group(self, group: Group) -> None:
        self.metrics.unschedulable.inc(reason="invalid")
        self.binder.podgroup_event(group.namespace, group.name, group.podgroup_uid,
                                   "InvalidPodGroup", group.invalid)
        for pod in group.pending.values():
            self.binder.pod_event(pod, "FailedScheduling", group.invalid, "Scheduling")
            self.binder.pod_unschedulable(pod, group.invalid)

    def _enqueue(self, info: PodInfo) -> None:
        group = self._group_for(info)
        if info.uid not in group.pending:
            self.enqueued_at.setdefault(info.uid, self.clock())
            group.unschedulable = ""  # membership changed: worth another try
            if group.invalid:
                self.binder.pod_event(info, "FailedScheduling", group.invalid, "Scheduling")
                self.binder.pod_unschedulable(info, group.invalid)
        group.pending[info.uid] = info
        group.created = min(group.created, info.created)

    def _dequeue(self, uid: str, info: PodInfo) -> None:
        group = self.groups.get(info.group_key)
        if group is None:
            return
        if group.pending.pop(uid, None) is not None:
            group.unschedulable = ""
        self.enqueued_at.pop(uid, None)
        if not group.pending and not group.bound:
            del self.groups[info.group_key]

    def _invalid_pod(self, obj: dict[str, Any], uid: str, message: str) -> None:
        """A pod of ours whose spec we cannot read: say so once, never retry until it changes."""
        meta = obj.get("metadata") or {}
        spec = obj.get("spec") or {}
        if spec.get("nodeName") or spec.get("schedulerName") != self.config.scheduler_name:
            log.warning("ignoring unreadable pod %s/%s: %s", meta.get("namespace"),
                        meta.get("name"), message)
            return
        if self.invalid_pods.get(uid) == message:
            return
        self.invalid_pods[uid] = message
        self.metrics.unschedulable.inc(reason="invalid")
        stub = PodInfo(uid=uid, namespace=meta.get("namespace", "default"),
                       name=meta.get("name", ""), scheduler_name=self.config.scheduler_name,
                       node_name="", phase="Pending", request=Request())
        note = f"cannot schedule: {message}"
        self.binder.pod_event(stub, "InvalidPod", note, "Scheduling")
        self.binder.pod_unschedulable(stub, note)

    def queue(self) -> list[Group]:
        """Ready groups in the order they are served: priority, then arrival."""
        ready = [g for g in self.groups.values() if g.ready()]
        ready.sort(key=lambda g: (-g.priority, g.created, g.arrival, g.key))
        return ready

    # ==== the cycle ===============================================================================
    def schedule(self, now: int) -> CycleReport:
        """One pass over the queue at time ``now`` (integer seconds on the allocator's clock)."""
        report = CycleReport()
        if not self.ready:
            return report
        self._register_residents(now)
        self._extend_overdue(now)
        reservations: list[int] = []
        busy: dict[tuple[int, Shape], int] = {}  # (count, shape) -> shortest busy duration
        wall = self.clock()
        queue = self.queue()
        done: set[str] = set()
        try:
            for i, group in enumerate(queue):
                if report.tried >= self.config.queue_depth:
                    break
                if group.key in done:
                    continue
                if any(self.hold_until.get(uid, 0.0) > wall for uid in group.pending):
                    continue  # a member is cooling down after a failed bind
                count, shape = len(group.pending), group.shape()
                duration = group.duration(self.config.default_duration)
                if busy.get((count, shape), duration + 1) <= duration:
                    report.busy += 1
                    continue
                batch = self._batch(queue, i, shape, duration, wall) if count == 1 else []
                while len(batch) > 1:  # the largest half that fits now
                    report.tried += 1
                    placement = self._place(len(batch), shape, duration, now, False, batch[0])
                    if placement is not None:
                        report.bound += self._bind(batch, placement, shape, duration, now)
                        done.update(g.key for g in batch)
                        break
                    batch = batch[: len(batch) // 2]
                if group.key in done:
                    continue
                reserve = len(reservations) < self.config.reserve_depth
                report.tried += 1
                try:
                    placement = self._place(count, shape, duration, now, reserve, None)
                except Busy:
                    busy[(count, shape)] = min(duration, busy.get((count, shape), duration))
                    report.busy += 1
                    self._note_waiting(group, "busy", f"{count} x {_fmt(shape)} do not fit now")
                    continue
                except MatcherError as exc:  # Unsatisfiable, or a matcher failure
                    report.unschedulable += 1
                    if not isinstance(exc, Unsatisfiable):
                        self.metrics.errors.inc(source="match")
                    self._mark_unschedulable(group, count, shape, str(exc))
                    continue
                assert placement is not None
                if placement.status != "ALLOCATED":
                    reservations.append(placement.jobid)
                    busy[(count, shape)] = min(duration, busy.get((count, shape), duration))
                    report.reserved += 1
                    report.reservations[group.key] = placement.at
                    self._note_waiting(group, "reserved",
                                       f"{count} x {_fmt(shape)} do not fit now; resources "
                                       f"reserved from t={placement.at}s (EASY backfill)")
                    continue
                report.bound += self._bind([group], placement, shape, duration, now)
        finally:
            for jobid in reservations:
                self._cancel_quietly(jobid)
        return report

    def _batch(self, queue: list[Group], start: int, shape: Shape, duration: int,
               wall: float) -> list[Group]:
        """Lone pods next in line with the same request, duration and priority: matched as one
        job (one traversal for up to ``batch_size`` pods); each pod still releases alone."""
        head = queue[start]
        batch = [head]
        if head.kind != "single" or self.config.batch_size <= 1:
            return []
        for k in range(start + 1, min(len(queue), start + self.config.batch_size)):
            group = queue[k]
            if (group.kind != "single" or len(group.pending) != 1
                    or group.priority != head.priority or group.shape() != shape
                    or group.duration(self.config.default_duration) != duration
                    or any(self.hold_until.get(uid, 0.0) > wall for uid in group.pending)):
                break
            batch.append(group)
        return batch

    def _place(self, count: int, shape: Shape, duration: int, now: int, reserve: bool,
               quiet: Group | None) -> Placement | None:
        """One allocator call, timed. With ``quiet`` (a batch) failures return None instead."""
        t0 = time.perf_counter()
        try:
            return self.allocator.place(count, shape, duration=duration, now=now,
                                        reserve=reserve)
        except MatcherError:
            if quiet is None:
                raise
            return None
        finally:
            self.metrics.match_latency.observe(time.perf_counter() - t0)

    def _bind(self, groups: list[Group], placement: Placement, shape: Shape, duration: int,
              now: int) -> int:
        """Bind the pending pods of ``groups`` to the placement's nodes, in order."""
        members = [p for g in groups
                   for p in sorted(g.pending.values(), key=lambda p: (p.created, p.name))]
        assignments = list(zip(members, placement.nodes, strict=True))
        job = Job(placement.jobid, groups[0].key, now + duration,
                  {pod.uid: (node, shape) for pod, node in assignments})
        self._add_job(job)
        t0 = time.perf_counter()
        results = self.binder.bind(assignments)
        per_bind = (time.perf_counter() - t0) / max(1, len(assignments))
        bound = 0
        wall = self.clock()
        by_key = {g.key: g for g in groups}
        for (pod, node), error in zip(assignments, results, strict=True):
            self.metrics.bind_latency.observe(per_bind)
            group = by_key[pod.group_key]
            if error is None:
                bound += 1
                self.pod_job[pod.uid] = job.jobid
                group.pending.pop(pod.uid, None)
                group.bound.add(pod.uid)
                pod.node_name = node
                started = self.enqueued_at.pop(pod.uid, None)
                if started is not None:
                    self.metrics.e2e_latency.observe(wall - started)
                self.binder.pod_event(pod, "Scheduled",
                                      f"Successfully assigned {pod.key} to {node}", "Binding")
                continue
            # Roll back this pod's share; the pod stays queued unless it is gone.
            self.metrics.errors.inc(source="bind")
            node_shape = job.shares.pop(pod.uid)
            with contextlib.suppress(UnknownJob):
                self.allocator.release(job.jobid, *node_shape)
            gone = isinstance(error, ApiError) and error.not_found
            if gone:
                self._dequeue(pod.uid, pod)
            else:
                self.hold_until[pod.uid] = wall + self.config.bind_retry_after
            self.binder.pod_event(pod, "FailedBinding",
                                  f"binding {pod.key} to {node} failed: {error}", "Binding")
        if not job.shares:
            self.jobs.pop(job.jobid, None)
            self._cancel_quietly(job.jobid)
        if bound:
            self.metrics.pods_bound.inc(bound)
        for group in groups:
            if group.bound and not group.pending:
                self.metrics.groups_scheduled.inc()
                group.last_note = ""
                if group.kind == "podgroup":
                    self.binder.podgroup_status(group.namespace, group.name,
                                                {"phase": "Scheduled",
                                                 "scheduled": len(group.bound)})
            if not group.pending and (not group.bound or group.kind == "single"):
                self.groups.pop(group.key, None)  # a lone pod needs no group once bound
        return bound

    def _note_waiting(self, group: Group, state: str, note: str) -> None:
        """One FailedScheduling Event per change of state, not one per cycle."""
        if group.last_note == state:
            return
        group.last_note = state
        for pod in group.pending.values():
            self.binder.pod_event(pod, "FailedScheduling", note, "Scheduling")

    def _mark_unschedulable(self, group: Group, count: int, shape: Shape, why: str) -> None:
        group.unschedulable = (f"{count} x {_fmt(shape)} can never fit this cluster "
                               f"({len(self.nodes)} nodes): {why}")
        self.metrics.unschedulable.inc(reason="unsatisfiable")
        for pod in group.pending.values():
            self.binder.pod_event(pod, "Unschedulable", group.unschedulable, "Scheduling")
            self.binder.pod_unschedulable(pod, group.unschedulable)
        if group.kind == "podgroup" and group.key in self.podgroups:
            self.binder.podgroup_event(group.namespace, group.name, group.podgroup_uid,
                                       "Unschedulable", group.unschedulable)

    # ==== introspection (tests, simulator, metrics) ===============================================
    def pending_pods(self) -> int:
        return sum(len(g.pending) for g in self.groups.values())

    def held(self) -> dict[str, list[tuple[str, Shape]]]:
        """node -> [(pod uid, shape)] for every pod the core counts as holding resources."""
        out: dict[str, list[tuple[str, Shape]]] = {}
        for job in self.jobs.values():
            for uid, (node, shape) in job.shares.items():
                if not uid.startswith("resident:"):
                    out.setdefault(node, []).append((uid, shape))
        for node, pods in self.resident.items():
            for uid, request in pods.items():
                out.setdefault(node, []).append((uid, request.shape()))
        return out


def _fmt(shape: Shape) -> str:
    parts = [f"{shape.cores} cores"]
    if shape.memory_mib:
        parts.append(f"{shape.memory_mib} MiB")
    if shape.gpus:
        parts.append(f"{shape.gpus} GPUs")
    return "(" + ", ".join(parts) + ")"


def resident_shape(requests: Iterable[Request]) -> Shape:
    """The graph amounts of several pods on one node: summed first, then rounded."""
    total = Request(0, 0, 0)
    for r in requests:
        total = Request(total.cpu_milli + r.cpu_milli, total.memory + r.memory, total.gpu + r.gpu)
    shape = total.shape()
    return Shape(0 if total.cpu_milli == 0 else shape.cores, shape.memory_mib, shape.gpus)


def node_signature(node: dict[str, Any]) -> tuple[Any, ...]:
    """What about a node matters to placement: amounts, labels, cordon, taints, readiness.
    Status heartbeats (conditions' times, images, addresses) leave it unchanged."""
    meta, spec, status = (node.get(k) or {} for k in ("metadata", "spec", "status"))
    ready = next((c.get("status") for c in status.get("conditions") or []
                  if c.get("type") == "Ready"), None)
    return (sorted((status.get("allocatable") or status.get("capacity") or {}).items()),
            sorted((meta.get("labels") or {}).items()), bool(spec.get("unschedulable")),
            repr(spec.get("taints")), ready)
