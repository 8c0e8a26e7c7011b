"""The scheduler's hands on the cluster: :class:`KubeBinder` implements the core's ``Binder``
over :class:`~fluxinfra.scheduler.kube.KubeApi`.

- Binds go through the ``pods/binding`` subresource (a v1 Binding carrying the pod's uid, so a
  pod recreated under the same name is never bound by mistake). A group's binds run in parallel
  on a small thread pool (``workers``); the core gets one result per pod and rolls back the
  matcher's share of every pod whose bind failed.
- Events (``events.k8s.io/v1``) and status patches are best effort: a failure is logged and
  counted in ``fluxinfra_scheduler_errors_total{source="event"}``, never raised into the loop.
  With ``async_events`` they are sent by ``senders`` background threads through bounded
  queues, so a slow API server does not slow scheduling (kube-scheduler's event broadcaster
  does the same); writes about one object always go through the same thread, in order (a
  PodGroup's ``scheduled: 3`` is never written after its ``scheduled: 5``). When a queue is
  full the write is dropped and counted (``source="event_dropped"``).
- **Shutdown drains** (:meth:`KubeBinder.drain`): the binds already started finish, then every
  queued Event and status patch is sent, until a deadline (``--shutdown-grace``); what is
  still unsent then is logged with its count and counted (``source="event_unsent"``).
"""

from __future__ import annotations

import contextlib
import logging
import queue
import socket
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from fluxinfra.scheduler.events import (
    disruption_condition_patch,
    node_event,
    pod_event,
    podgroup_event,
    scheduled_condition_patch,
)
from fluxinfra.scheduler.kube import ApiError, KubeApi
from fluxinfra.scheduler.metrics import Metrics
from fluxinfra.scheduler.pods import PodInfo

__all__ = ["KubeBinder", "done"]

log = logging.getLogger(__name__)


#: the background threads that send Events and status patches (``async_events``)
EVENT_SENDERS = 8


class KubeBinder:
    """Binds pods and reports decisions through a :class:`KubeApi`."""

    def __init__(self, api: KubeApi, *, scheduler_name: str = "fluxion",
                 instance: str | None = None, metrics: Metrics | None = None,
                 workers: int = 0, async_events: bool = False,
                 event_queue: int = 10_000, senders: int = EVENT_SENDERS) -> None:
        self.api = api
        self.controller = scheduler_name
        self.instance = instance or f"{scheduler_name}-{socket.gethostname()}"
        self.metrics = metrics or Metrics()
        self._pool = ThreadPoolExecutor(workers, thread_name_prefix="bind") if workers else None
        #: one queue and one thread per sender; an object's writes always take the same one
        self._queues: list[queue.Queue[Callable[[], None] | None]] = []
        self._senders: list[threading.Thread] = []
        self._lock = threading.Lock()
        self._in_flight = 0     #: writes a sender has taken and not finished
        self.sent = 0           #: writes made (answered, or failed and counted)
        if async_events:
            for i in range(max(1, senders)):
                q: queue.Queue[Callable[[], None] | None] = queue.Queue(
                    maxsize=max(1, event_queue // max(1, senders)))
                thread = threading.Thread(target=self._send_loop, args=(q,),
                                          name=f"events-{i}", daemon=True)
                self._queues.append(q)
                self._senders.append(thread)
                thread.start()

    # -- binding --------------------------------------------------------------------------------
    def _bind_one(self, assignment: tuple[PodInfo, str]) -> Exception | None:
        pod, node = assignment
        try:
            self.api.bind(pod.namespace, pod.name, pod.uid, node)
        except ApiError as exc:
            log.warning("bind %s -> %s failed: %s", pod.key, node, exc)
            return exc
        return None

    def bind(self, assignments: list[tuple[PodInfo, str]]) -> list[Exception | None]:
        if self._pool is None or len(assignments) == 1:
            return [self._bind_one(a) for a in assignments]
        return list(self._pool.map(self._bind_one, assignments))

    def submit(self, assignments: list[tuple[PodInfo, str]]) -> list[Future]:
        """The binds started on the pool (done at once without one): one future per pod,
        whose result is None (bound) or the error."""
        if self._pool is not None:
            return [self._pool.submit(self._bind_one, a) for a in assignments]
        return [done(self._bind_one(a)) for a in assignments]

    # -- reporting ------------------------------------------------------------------------------
    def _submit(self, key: str, send: Callable[[], None]) -> None:
        """Send now, or queue for the sender that owns ``key`` (the object written about)."""
        if not self._queues:
            self._safely(send)
            return
        try:
            self._queues[hash(key) % len(self._queues)].put_nowait(send)
        except queue.Full:
            self.metrics.errors.inc(source="event_dropped")

    def _safely(self, send: Callable[[], None]) -> None:
        try:
            send()
        except ApiError as exc:
            log.warning("reporting to the API failed: %s", exc)
            self.metrics.errors.inc(source="event")

    def _send_loop(self, q: queue.Queue[Callable[[], None] | None]) -> None:
        while (send := q.get()) is not None:
            with self._lock:
                self._in_flight += 1
            try:
                self._safely(send)
            finally:
                with self._lock:
                    self._in_flight -= 1
                    self.sent += 1

    def pending(self) -> int:
        """Writes queued or being sent."""
        return sum(q.qsize() for q in self._queues) + self._in_flight

    def flush(self, timeout: float = 10.0) -> None:
        """Wait for the writes queued so far to be sent (tests)."""
        marks = []
        for q in self._queues:
            mark = threading.Event()
            q.put(mark.set, timeout=timeout)
            marks.append(mark)
        deadline = time.monotonic() + timeout
        for mark in marks:
            mark.wait(max(0.0, deadline - time.monotonic()))

    def drain(self, deadline: float) -> int:
        """Shutdown: no write is taken after this; the binds already started and every queued
        write are given until ``deadline`` (``time.monotonic()``); returns how many writes were
        left unsent, which are logged and counted."""
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)  # binds the loop never saw
        t0, before, queued = time.monotonic(), self.sent, self.pending()
        for q in self._queues:
            # a sender stuck in a call leaves its queue full: what it holds counts as left below
            with contextlib.suppress(queue.Full):
                q.put(None, timeout=max(0.0, deadline - time.monotonic()))
        for thread in self._senders:
            thread.join(max(0.0, deadline - time.monotonic()))
        left = self._in_flight
        for q in self._queues:
            while True:
                try:
                    left += q.get_nowait() is not None
                except queue.Empty:
                    break
        self._queues = []  # anything reported from now on is sent at once, in this thread
        written = self.sent - before
        if left:
            log.warning("shutdown: %d Events and status writes not sent within the grace "
                        "period (%d of %d sent in %.1f s)", left, written, queued,
                        time.monotonic() - t0)
            self.metrics.errors.inc(left, source="event_unsent")
        elif queued:
            log.info("shutdown: %d pending Events and status writes sent in %.2f s", written,
                     time.monotonic() - t0)
        return left

    def close(self, grace: float = 10.0) -> None:
        """:meth:`drain` with ``grace`` seconds from now."""
        self.drain(time.monotonic() + grace)

    def pod_event(self, pod: PodInfo, reason: str, note: str, action: str) -> None:
        event = pod_event(pod.namespace, pod.name, pod.uid, reason, note, self.controller,
                          self.instance, action=action)
        self._submit(pod.key, lambda: self.api.create_event(pod.namespace, event))

    def pod_unschedulable(self, pod: PodInfo, message: str) -> None:
        patch = scheduled_condition_patch("Unschedulable", message)
        self._submit(pod.key, lambda: self.api.patch_pod_status(pod.namespace, pod.name, patch))

    def preempt(self, victim: PodInfo, preemptor: PodInfo, node: str) -> bool:
        """kube-scheduler's prepareCandidate: DisruptionTarget condition, delete (only this
        uid), then a ``Preempted`` Event. Synchronous, so the victims are on their way out
        before the preemptor is nominated. False when the victim could not be evicted."""
        patch = disruption_condition_patch(
            f"{self.controller}: preempting to accommodate a higher priority pod")
        try:
            self.api.patch_pod_status(victim.namespace, victim.name, patch)
            self.api.delete_pod(victim.namespace, victim.name, victim.uid)
        except ApiError as exc:
            if exc.not_found:
                return True  # gone already
            log.warning("preempting %s failed: %s", victim.key, exc)
            self.metrics.errors.inc(source="preempt")
            return False
        self.pod_event(victim, "Preempted",
                       f"Preempted by {preemptor.key} on node {node}", "Preempting")
        return True

    def nominate(self, pod: PodInfo, node: str) -> None:
        patch = {"status": {"nominatedNodeName": node or None}}
        self._submit(pod.key, lambda: self.api.patch_pod_status(pod.namespace, pod.name, patch))

    def podgroup_event(self, namespace: str, name: str, uid: str, reason: str,
                       note: str) -> None:
        event = podgroup_event(namespace, name, uid, reason, note, self.controller,
                               self.instance)
        self._submit(f"{namespace}/{name}", lambda: self.api.create_event(namespace, event))

    def podgroup_status(self, namespace: str, name: str, status: dict[str, Any]) -> None:
        self._submit(f"{namespace}/{name}", lambda: self.api.patch_podgroup_status(
            namespace, name, {"status": status}))

    def node_event(self, name: str, uid: str, reason: str, note: str) -> None:
        event = node_event(name, uid, reason, note, self.controller, self.instance)
        self._submit(f"node/{name}", lambda: self.api.create_event("default", event))


def done(result: Any) -> Future:
    """A future already holding ``result`` (work done at once, where a caller takes futures)."""
    future: Future = Future()
    future.set_result(result)
    return future
