"""Binding: a placement committed to the books, handed to the binder, its result taken in.

kube-scheduler's binding cycle (``schedule_one.go``: ``assume``, then ``bindingCycle`` on its
own goroutine, ``handleBindingCycleError`` forgetting the assumed pod) and the hand-off to the
``DefaultBinder`` plugin: here the :class:`Binder` protocol (binds, Events, conditions,
evictions), implemented over the API by :class:`~fluxinfra.scheduler.binder.KubeBinder`.

Everything a bind needs is checked before the first bind of a group (every member still
pending, ungated and alive, every node present); the members are then *assumed* (in the ledger
and the graph) and bound, in parallel and while the loop goes on when the binder can
(``submit``). A bind that fails after others succeeded keeps its reservation and is retried to
the same node with backoff until the group's ``scheduleTimeoutSeconds`` (default
``bind_timeout``) runs out; then the pod gets one ``FailedBinding`` Event and condition, its
share is released and it queues again.

:class:`BindingCycle` holds the scheduler core's methods for this (the core inherits it, as
kube-scheduler's ``Scheduler`` keeps its binding cycle in a file of its own).
"""

from __future__ import annotations

import collections
import concurrent.futures
import functools
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from fluxinfra.scheduler.cache import Cache
from fluxinfra.scheduler.config import SchedulerConfig
from fluxinfra.scheduler.events import scheduled_note
from fluxinfra.scheduler.gangs import Gangs
from fluxinfra.scheduler.kube import ApiError
from fluxinfra.scheduler.metrics import Metrics
from fluxinfra.scheduler.placement import Outcome
from fluxinfra.scheduler.pods import PodInfo
from fluxinfra.scheduler.scheduling_queue import Group

__all__ = ["Binder", "BindingCycle", "FailedBind"]

log = logging.getLogger(__name__)


class Binder(Protocol):
    """How the core acts on the cluster.

    A binder with ``scheduled_events = True`` writes each pod's ``Scheduled`` Event itself as
    its bind succeeds (from the thread that bound it, as kube-scheduler's binding goroutine
    does), so the Event follows its bind at once rather than waiting for the loop to take the
    result in; for any other binder the core writes it then."""

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
class FailedBind:
    """A bind that failed and is retried to the node its group reserved."""

    pod: PodInfo
    node: str
    group_key: str
    first: float
    deadline: float
    next_at: float
    attempts: int = 1
    error: str = ""


class BindingCycle:
    """The scheduler core's binding methods; the state they use is the core's (below)."""

    binder: Binder
    config: SchedulerConfig
    metrics: Metrics
    clock: Callable[[], float]
    cache: Cache
    gangs: Gangs
    pods: dict[str, PodInfo]
    podgroups: dict[str, dict[str, Any]]
    groups: dict[str, Group]
    nominated: dict[str, tuple[str, int]]
    enqueued_at: dict[str, float]
    noted: dict[str, str]
    #: pod uid -> its failed bind, retried to the same node
    binding: dict[str, FailedBind]
    #: binds running (async binding): pod uid -> (pod, node, future, start)
    inflight: dict[str, tuple[PodInfo, str, Any, float]]
    #: group key -> how many of its members' binds are running (the keys of ``inflight``'s pods)
    inflight_groups: dict[str, int]
    #: (pod uid, future) of the binds that finished, not yet taken in
    _finished: collections.deque[tuple[str, Any]]
    _waker: Callable[[], None] | None
    # the core's own: a pod no longer holding resources; a pending pod queued
    _release: Callable[[str, str], None]
    _enqueue: Callable[[PodInfo, PodInfo | None], None]

    def _commit(self, outcome: Outcome, now: int, duration: int, wall: float) -> int:
        """Check everything the binds need, then bind the outcome's assignments; how many pods
        were bound (or are binding)."""
        cache = self.cache
        for pod, node, _ in outcome.assignments:
            current = self.pods.get(pod.uid)
            state = cache.ledger.nodes.get(node)
            if (current is None or current.bound or current.deleting or current.gated
                    or state is None or not state.exists):
                log.info("placement of %s to %s dropped before binding: the pod or node "
                         "changed", pod.key, node)
                for jobid in outcome.jobs:
                    cache.cancel_quietly(jobid)
                return 0
        for jobid in outcome.jobs:
            cache.track(jobid, now + duration)
        assignments = []
        for pod, node, jobid in outcome.assignments:
            cache.assume(pod, node, jobid)  # assumed until the informer says it is bound
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
            running = self.inflight_groups
            for (pod, node), future in zip(assignments, futures, strict=True):
                if pod.uid not in self.inflight:
                    running[pod.group_key] = running.get(pod.group_key, 0) + 1
                self.inflight[pod.uid] = (pod, node, future, t0)
                # run by the binder's thread when the bind ends (at once if it has)
                future.add_done_callback(functools.partial(self._bind_finished, pod.uid))
            self._collect_binds()  # those already done (a binder without a pool: all)
            return len(assignments)
        results = self.binder.bind(assignments)
        elapsed = (time.perf_counter() - t0) / max(1, len(assignments))
        return self._bind_results(assignments, results, [elapsed] * len(assignments))

    def settle(self, deadline: float) -> int:
        """Shutdown: wait (until ``deadline``, ``time.monotonic()``) for the binds already
        started and take in their results, so their ``Scheduled`` Events and PodGroup status
        go out with the rest; returns how many binds are still out. Nothing new is placed."""
        futures = [future for _, _, future, _ in self.inflight.values()]
        if futures:
            concurrent.futures.wait(futures, timeout=max(0.0, deadline - time.monotonic()))
        self._collect_binds()
        self._write_podgroup_status(held_back=False)
        return len(self.inflight)

    def _collect_binds(self) -> int:
        """Take in the results of the binds that finished (async binding), in the order they
        finished."""
        finished = self._finished
        running = self.inflight_groups
        done = []
        while finished:
            uid, future = finished.popleft()
            entry = self.inflight.get(uid)
            if entry is not None and entry[2] is future:
                del self.inflight[uid]
                key = entry[0].group_key
                left = running.get(key, 0) - 1
                if left > 0:
                    running[key] = left
                else:
                    running.pop(key, None)
                done.append(entry)
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
        shares = self.cache.shares
        for (pod, node), error, took in zip(assignments, results, elapsed, strict=True):
            self.metrics.bind_latency.observe(took)
            if shares.get(pod.uid, (0, ""))[1] != node:
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
            self.binding[pod.uid] = FailedBind(pod, node, pod.group_key, wall, wall + timeout,
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
        if not getattr(self.binder, "scheduled_events", False):
            self.binder.pod_event(pod, "Scheduled", scheduled_note(pod.key, node), "Binding")

    def _group_progress(self, group: Group) -> None:
        self.gangs.progress(group, self.binding)
        if group.kind == "single" and not group.pending and not any(
                uid in self.binding for uid in group.bound):
            self.groups.pop(group.key, None)  # a lone pod needs no group once bound

    def _write_podgroup_status(self, held_back: bool = True) -> None:
        """Write the status of each PodGroup whose members changed (see
        :meth:`~fluxinfra.scheduler.gangs.Gangs.statuses`); ``held_back=False`` (shutdown)
        writes the count changes the interval holds back too."""
        if not self.gangs.dirty:
            self.gangs.due_at = None
            return
        interval = self.config.podgroup_status_interval if held_back else 0.0
        # a PodGroup waits while one of its binds runs, so only the binds retried after a
        # failure are left to discount from its members
        for namespace, name, status in self.gangs.statuses(
                self.podgroups, self.groups, self.binding, self.inflight_groups, self.clock(),
                interval):
            self.binder.podgroup_status(namespace, name, status)

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

    def _bound_there(self, b: FailedBind) -> bool:
        current = self.pods.get(b.pod.uid)
        return current is not None and current.node_name == b.node

    def _give_up(self, b: FailedBind) -> None:
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

    # ==== the daemon loop's waker =================================================================
    def set_waker(self, waker: Callable[[], None] | None) -> None:
        """``waker()`` is called when work appears that no watch event announces (an async
        bind finished: a failed one changes nothing in the API)."""
        self._waker = waker

    def _bind_finished(self, uid: str, future: Any) -> None:
        """A bind ended (a binder thread): queue it for :meth:`_collect_binds`, wake the loop."""
        self._finished.append((uid, future))
        waker = self._waker
        if waker is not None:
            waker()
