"""The scheduler's hands on the cluster: :class:`KubeBinder` implements the core's ``Binder``
over :class:`~fluxinfra.scheduler.kube.KubeApi`.

- Binds go through the ``pods/binding`` subresource (a v1 Binding carrying the pod's uid, so a
  pod recreated under the same name is never bound by mistake). A group's binds run in parallel
  on a small thread pool (``workers``); the core gets one result per pod and rolls back the
  matcher's share of every pod whose bind failed.
- Events (``events.k8s.io/v1``) and status patches are best effort: a failure is logged and
  counted in ``fluxinfra_scheduler_errors_total{source="event"}``, never raised into the loop.
  With ``async_events`` they are sent by a background thread through a bounded queue, so a slow
  API server does not slow scheduling (kube-scheduler's event broadcaster does the same); when
  the queue is full the Event is dropped and counted.
"""

from __future__ import annotations

import logging
import queue
import socket
import threading
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


class KubeBinder:
    """Binds pods and reports decisions through a :class:`KubeApi`."""

    def __init__(self, api: KubeApi, *, scheduler_name: str = "fluxion",
                 instance: str | None = None, metrics: Metrics | None = None,
                 workers: int = 0, async_events: bool = False,
                 event_queue: int = 10_000) -> None:
        self.api = api
        self.controller = scheduler_name
        self.instance = instance or f"{scheduler_name}-{socket.gethostname()}"
        self.metrics = metrics or Metrics()
        self._pool = ThreadPoolExecutor(workers, thread_name_prefix="bind") if workers else None
        self._events: queue.Queue[Callable[[], None] | None] | None = None
        self._sender: threading.Thread | None = None
        if async_events:
            self._events = queue.Queue(maxsize=event_queue)
            self._sender = threading.Thread(target=self._send_loop, name="events", daemon=True)
            self._sender.start()

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
    def _submit(self, send: Callable[[], None]) -> None:
        if self._events is None:
            self._safely(send)
            return
        try:
            self._events.put_nowait(send)
        except queue.Full:
            self.metrics.errors.inc(source="event_dropped")

    def _safely(self, send: Callable[[], None]) -> None:
        try:
            send()
        except ApiError as exc:
            log.warning("reporting to the API failed: %s", exc)
            self.metrics.errors.inc(source="event")

    def _send_loop(self) -> None:
        assert self._events is not None
        while (send := self._events.get()) is not None:
            self._safely(send)

    def flush(self, timeout: float = 10.0) -> None:
        """Wait for queued Events to be sent (tests, shutdown)."""
        if self._events is None:
            return
        done = threading.Event()
        self._submit(done.set)
        done.wait(timeout)

    def close(self) -> None:
        if self._events is not None:
            self._events.put(None)
        if self._pool is not None:
            self._pool.shutdown(wait=True)

    def pod_event(self, pod: PodInfo, reason: str, note: str, action: str) -> None:
        event = pod_event(pod.namespace, pod.name, pod.uid, reason, note, self.controller,
                          self.instance, action=action)
        self._submit(lambda: self.api.create_event(pod.namespace, event))

    def pod_unschedulable(self, pod: PodInfo, message: str) -> None:
        patch = scheduled_condition_patch("Unschedulable", message)
        self._submit(lambda: self.api.patch_pod_status(pod.namespace, pod.name, patch))

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
        self._submit(lambda: self.api.patch_pod_status(pod.namespace, pod.name, patch))

    def podgroup_event(self, namespace: str, name: str, uid: str, reason: str,
                       note: str) -> None:
        event = podgroup_event(namespace, name, uid, reason, note, self.controller,
                               self.instance)
        self._submit(lambda: self.api.create_event(namespace, event))

    def podgroup_status(self, namespace: str, name: str, status: dict[str, Any]) -> None:
        self._submit(lambda: self.api.patch_podgroup_status(namespace, name,
                                                            {"status": status}))

    def node_event(self, name: str, uid: str, reason: str, note: str) -> None:
        event = node_event(name, uid, reason, note, self.controller, self.instance)
        self._submit(lambda: self.api.create_event("default", event))


def done(result: Any) -> Future:
    """A future already holding ``result`` (work done at once, where a caller takes futures)."""
    future: Future = Future()
    future.set_result(result)
    return future
