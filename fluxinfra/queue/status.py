"""The FluxJob status writer and the queue's Events.

Mirrors Kueue's workload status updates (``pkg/workload``: ``ApplyAdmissionStatus``,
``UpdateStatus``) and its event recorder. The state machine (:mod:`~fluxinfra.queue.states`)
changes a unit's ``status`` in memory and marks it dirty; once per cycle :meth:`StatusWriter.
flush` sends every changed status as one merge patch (a removed field written as null), at most
one write per FluxJob in flight (a change made meanwhile goes in the next), none while its Job's
un-suspend is out (so a FluxJob placed at once gets one write, ``Admitted``, not one per cycle);
failures are written again next cycle. The Events of the cycle go out then too: in place, or
through one sender thread (bounded at 10,000; dropped and counted past that).
"""

from __future__ import annotations

import contextlib
import queue
import threading
import time
from collections.abc import Callable
from typing import Any

from fluxinfra.kube import fluxjob as q
from fluxinfra.queue.metrics import QueueMetrics
from fluxinfra.queue.workload import QueueConfig, Unit, Workloads, log
from fluxinfra.queue.writes import Writes
from fluxinfra.scheduler.events import WARNING_REASONS, micro_time
from fluxinfra.scheduler.kube import ApiError

__all__ = ["StatusWriter"]

#: reasons of a FluxJob whose Event is a Warning (besides the scheduler's and any Failed)
_WARNING_REASONS = ("QuotaExceeded", "QueueNotFound")


class StatusWriter:
    def __init__(self, api: Any, books: Workloads, writes: Writes, config: QueueConfig,
                 metrics: QueueMetrics, wall: Callable[[], float]) -> None:
        self.api = api
        self.books = books
        self.writes = writes
        self.config = config
        self.metrics = metrics
        self.wall = wall
        self.dirty: set[str] = set()        # units whose status may need a write
        self.writing: set[str] = set()      # FluxJobs whose status is being written
        self.pending_events: list[dict[str, Any]] = []
        self._evented: dict[str, str] = {}  # unit -> state of its Event this cycle
        self._event_queue: queue.Queue[dict[str, Any] | None] | None = None
        self._event_sender: threading.Thread | None = None
        if config.async_events:
            self._event_queue = queue.Queue(maxsize=10_000)
            self._event_sender = threading.Thread(target=self._send_events,
                                                  name="queue-events", daemon=True)
            self._event_sender.start()

    # ==== Events =================================================================================
    def event(self, unit: Unit, state: str, reason: str, message: str) -> None:
        """The Event of a new state or reason of ``unit`` (sent with the cycle's writes)."""
        if not unit.uid:
            return
        warning = state == "Failed" or reason in WARNING_REASONS or reason in _WARNING_REASONS
        if not warning and self._evented.get(unit.key) == state:
            # a second reason in the same state within one cycle (Created, then handed to
            # Fluxion): one Event says it; what it waits for next gets its own
            return
        self._evented[unit.key] = state
        self.pending_events.append(self.event_body(
            {"apiVersion": q.API_VERSION, "kind": q.KIND, "namespace": unit.namespace,
             "name": unit.name, "uid": unit.uid},
            state, reason, "Warning" if warning else "Normal", f"{state}: {message}"))

    def event_body(self, regarding: dict[str, str], action: str, reason: str, kind: str,
                   note: str) -> dict[str, Any]:
        """An ``events.k8s.io/v1`` Event by the queue about ``regarding``."""
        return {
            "apiVersion": "events.k8s.io/v1", "kind": "Event",
            "metadata": {"name": f"{regarding['name']}.{int(self.wall() * 1e9):x}"[:253],
                         "namespace": regarding["namespace"]},
            "eventTime": micro_time(self.wall()),
            "reportingController": f"fluxinfra.io/{self.config.scheduler_name}-queue",
            "reportingInstance": self.config.instance,
            "action": action, "reason": reason, "type": kind,
            "regarding": regarding, "note": note[:1024],
        }

    def _send_event(self, event: dict[str, Any]) -> None:
        try:
            self.api.create_event(event["metadata"]["namespace"], event)
        except ApiError as exc:
            log.debug("event about %s failed: %s", event["regarding"]["name"], exc)
            self.metrics.errors.inc(source="event")

    def _send_events(self) -> None:
        assert self._event_queue is not None
        while (event := self._event_queue.get()) is not None:
            self._send_event(event)

    # ==== status =================================================================================
    def flush(self) -> None:
        """Every changed FluxJob status (one write per FluxJob in flight; a change made
        meanwhile goes in the next), and queued Events; failures retried. A Job being
        un-suspended waits for the answer: its next state is known then, so a FluxJob placed
        as soon as it was made gets one status write (Admitted), not one per cycle it took."""
        for key in list(self.dirty):  # the units whose status changed since
            unit = self.books.units.get(key)
            if unit is None or unit.status == unit.written:
                self.dirty.discard(key)
                continue
            if not unit.uid or unit.admitting or key in self.writing:
                continue  # kept: written once its uid, its admission, its last write is in
            self.dirty.discard(key)
            status = dict(unit.status)
            patch = dict(status)
            for k in unit.written:
                patch.setdefault(k, None)  # merge patch: a removed field is null
            self.writing.add(unit.key)
            self.writes.write(lambda unit=unit, patch=patch: self.api.patch_fluxjob_status(
                unit.namespace, unit.name, patch),
                lambda error, unit=unit, status=status: self._written(unit, status, error))
        events, self.pending_events = self.pending_events, []
        self._evented.clear()
        for event in events:
            if self._event_queue is None:
                self._send_event(event)
                continue
            try:
                self._event_queue.put_nowait(event)
            except queue.Full:
                self.metrics.errors.inc(source="event_dropped")

    def _written(self, unit: Unit, status: dict[str, Any], error: Any) -> None:
        self.writing.discard(unit.key)
        if error is None or (isinstance(error, ApiError) and error.not_found):
            unit.written = status  # (404: the FluxJob is gone; its DELETED event follows)
        else:
            self.metrics.errors.inc(source="status")
            self.dirty.add(unit.key)  # written again next cycle

    # ==== shutdown ===============================================================================
    def settle(self, deadline: float) -> int:
        """The Events queued by now sent until ``deadline`` (``time.monotonic()``); returns
        how many were not. From then on an Event is sent at once."""
        if self._event_queue is None or self._event_sender is None:
            return 0
        with contextlib.suppress(queue.Full):
            self._event_queue.put(None, timeout=max(0.0, deadline - time.monotonic()))
        self._event_sender.join(max(0.0, deadline - time.monotonic()))
        unsent = 0
        while True:
            try:
                unsent += self._event_queue.get_nowait() is not None
            except queue.Empty:
                break
        if unsent:
            log.warning("shutdown: %d FluxJob Events not sent within the grace period", unsent)
        self._event_queue = None  # from now on an Event is sent at once
        return unsent

    def close(self) -> None:
        if self._event_queue is not None:
            self._event_queue.put(None)
