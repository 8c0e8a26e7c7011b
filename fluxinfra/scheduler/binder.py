"""The scheduler's hands on the cluster: :class:`KubeBinder` implements the core's ``Binder``
over :class:`~fluxinfra.scheduler.kube.KubeApi`.

- Binds go through the ``pods/binding`` subresource (a v1 Binding carrying the pod's uid, so a
  pod recreated under the same name is never bound by mistake). A group's binds run in parallel
  on ``workers`` threads (:class:`BindWorkers`); the core gets one result per pod and rolls
  back the matcher's share of every pod whose bind failed. The worker that bound a pod then
  writes its ``Scheduled`` Event itself (``scheduled_events``), as kube-scheduler's binding
  goroutine records it: the Event follows its bind at once, not after the loop has taken the
  result in and a sender has come to it.
- Events (``events.k8s.io/v1``) and status patches are best effort: a failure is logged and
  counted in ``fluxinfra_scheduler_errors_total{source="event"}``, never raised into the loop.
  With ``async_events`` they are sent by ``senders`` background threads through bounded
  queues, so a slow API server does not slow scheduling (kube-scheduler's event broadcaster
  does the same); writes about one object go out in order, through the sender that has its
  earlier writes while any is queued or being sent (a PodGroup's ``scheduled: 3`` is never
  written after its ``scheduled: 5``), else through the sender with the fewest writes out,
  so a burst's writes spread evenly and none is left with a backlog while the others idle.
  The scheduler runs as many senders as bind workers, so a burst's Events go out as fast as
  its binds. When a queue is full, whoever reports waits for room for up to
  ``backpressure`` seconds (the loop then schedules no faster than the writes are taken);
  only then is the write dropped and counted (``source="event_dropped"``).
- **A PodGroup's status writes coalesce**: while one is queued and not yet taken by its
  sender, a newer status for the same PodGroup replaces it (the sender writes the newest), as a
  controller's work queue holds a key once. A gang bound in several batches while the API
  server is behind then costs one or two status patches instead of one per batch; with the
  senders idle each status goes out as it comes.
- **A repeated Event becomes a series**, as client-go's ``events.k8s.io`` broadcaster (which
  kube-scheduler uses) records it: the first is created; a repeat within
  :data:`SERIES_WINDOW` (same object, reason, action, controller, type and note) patches that
  Event's ``series`` (``count``, ``lastObservedTime``) instead of creating another - at once
  for the first repeat, then at most every :data:`SERIES_REFRESH` seconds (a sender writes
  what grew meanwhile when idle, and shutdown writes the rest). Unlike client-go the note is
  part of what makes a repeat, so no message is lost. At most :data:`SERIES_CAPACITY` series
  are remembered (the least recently seen go first).
- **Shutdown drains** (:meth:`KubeBinder.drain`): the binds already started finish, then every
  queued Event and status patch is sent, until a deadline (``--shutdown-grace``); what is
  still unsent then is logged with its count and counted (``source="event_unsent"``).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import queue
import socket
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

from fluxinfra.scheduler.events import (
    disruption_condition_patch,
    node_event,
    pod_event,
    podgroup_event,
    scheduled_condition_patch,
    scheduled_note,
    series_patch,
)
from fluxinfra.scheduler.kube import ApiError, KubeApi
from fluxinfra.scheduler.metrics import Metrics
from fluxinfra.scheduler.pods import PodInfo

__all__ = ["BindWorkers", "KubeBinder", "done"]

log = logging.getLogger(__name__)


#: the background threads that send Events and status patches (``async_events``)
EVENT_SENDERS = 8
#: seconds within which a repeated Event joins the first one's series (client-go: 6 minutes)
SERIES_WINDOW = 360.0
#: seconds between two writes of a growing series' count (client-go: 30 s)
SERIES_REFRESH = 30.0
#: series remembered at most; the least recently seen are forgotten first
SERIES_CAPACITY = 4096


@dataclass
class _Series:
    """An Event created once and observed ``count`` times since."""

    key: str                #: the object the Event is about (its writes' sender)
    event: dict[str, Any]   #: the Event as first created
    count: int = 1
    last: float = 0.0       #: when last observed (epoch seconds)
    written: int = 1        #: the count the API server holds (or has been sent)
    written_at: float = 0.0


def _series_key(event: dict[str, Any]) -> tuple[Any, ...]:
    """What makes two Events one series: client-go's key (object, reason, action, reporting
    controller, related) plus type and note."""
    regarding = event.get("regarding") or {}
    related = event.get("related") or {}
    return (tuple(sorted(regarding.items())), tuple(sorted(related.items())),
            event.get("reason"), event.get("action"), event.get("reportingController"),
            event.get("type"), event.get("note"))


class BindWorkers:
    """``workers`` threads that run binds: a submit is a :class:`~concurrent.futures.Future`
    and a put on a :class:`queue.SimpleQueue`, nothing else. (A ``ThreadPoolExecutor``'s
    submit also takes its idle-worker semaphore, whose lock the finishing workers hold in
    turn: in a burst the loop waited on it longer than it spent matching.)"""

    def __init__(self, workers: int, name: str = "bind") -> None:
        if workers < 1:
            raise ValueError(f"workers {workers}: use >= 1")
        self._queue: queue.SimpleQueue[tuple[Future, Callable[..., Any], tuple,
                                             Callable[[Any], None] | None] | None] = \
            queue.SimpleQueue()
        self._closed = False
        self._threads = [threading.Thread(target=self._run, name=f"{name}_{i}", daemon=True)
                         for i in range(workers)]
        for thread in self._threads:
            thread.start()

    def submit(self, fn: Callable[..., Any], *args: Any,
               then: Callable[[Any], None] | None = None) -> Future:
        """``fn(*args)`` on a worker; ``then(result)`` runs on the same worker once the result
        is in the future (whoever waits for it goes on meanwhile)."""
        if self._closed:
            raise RuntimeError("bind workers shut down: no new bind is started")
        future: Future = Future()
        self._queue.put((future, fn, args, then))
        return future

    def map(self, fn: Callable[[Any], Any], items: list[Any]) -> list[Any]:
        """``fn`` over ``items`` on the workers; the results in order."""
        return [f.result() for f in [self.submit(fn, item) for item in items]]

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            future, fn, args, then = item
            if not future.set_running_or_notify_cancel():
                continue  # cancelled by shutdown
            try:
                result = fn(*args)
            except BaseException as exc:  # noqa: BLE001 - the caller reads it from the future
                future.set_exception(exc)
                continue
            future.set_result(result)
            if then is not None:
                try:
                    then(result)
                except Exception:  # noqa: BLE001 - a follow-up never ends its worker
                    log.exception("the follow-up of a bind failed")

    def shutdown(self) -> None:
        """Start nothing more: the binds not yet started are cancelled, those running end."""
        self._closed = True
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                break
            if item is not None:
                item[0].cancel()
        for _ in self._threads:
            self._queue.put(None)

    def join(self, deadline: float) -> None:
        """After :meth:`shutdown`: wait until ``deadline`` (``time.monotonic()``) for the
        workers to end (the binds and follow-ups running)."""
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))


class KubeBinder:
    """Binds pods and reports decisions through a :class:`KubeApi`."""

    #: each bound pod's ``Scheduled`` Event is written here as its bind succeeds (on the bind
    #: worker, unless a write about the pod is still out): see the core's ``Binder``
    scheduled_events = True

    def __init__(self, api: KubeApi, *, scheduler_name: str = "fluxion",
                 instance: str | None = None, metrics: Metrics | None = None,
                 workers: int = 0, async_events: bool = False,
                 event_queue: int = 10_000, senders: int = EVENT_SENDERS,
                 backpressure: float = 5.0, clock: Callable[[], float] = time.time) -> None:
        self.api = api
        self.backpressure = backpressure
        self.clock = clock
        #: Event series by :func:`_series_key`, least recently observed first
        self._series: OrderedDict[tuple[Any, ...], _Series] = OrderedDict()
        self.controller = scheduler_name
        self.instance = instance or f"{scheduler_name}-{socket.gethostname()}"
        self.metrics = metrics or Metrics()
        self._pool = BindWorkers(workers) if workers else None
        #: one queue and one thread per sender
        self._queues: list[queue.Queue[tuple[str | None, Callable[[], None]] | None]] = []
        #: key -> [its sender's queue, its writes queued or being sent]: while an object has
        #: writes out, the next goes to the same sender (in order); otherwise to the sender
        #: with the fewest writes out (the next in turn among equals), so a burst's writes
        #: spread evenly and a sender held up by a slow write is passed over
        self._owners: dict[str, list[int]] = {}
        self._load = [0] * max(1, senders) if async_events else []
        self._turn = 0
        self._owner_lock = threading.Lock()
        self._senders: list[threading.Thread] = []
        self._lock = threading.Lock()
        #: PodGroup key -> the newest status not yet taken by its sender (one write queued)
        self._statuses: dict[str, tuple[str, str, dict[str, Any]]] = {}
        self._in_flight = 0     #: writes a sender has taken and not finished
        self._after_bind_out = 0  #: Scheduled Events a bind worker owes or is writing
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

    def _bind_then_report(self, assignment: tuple[PodInfo, str]) -> Exception | None:
        """A bind on a worker; when it succeeds, the worker owes the pod's Scheduled Event
        (counted before the result is out, so a flush or drain that follows waits for it)."""
        error = self._bind_one(assignment)
        if error is None:
            with self._lock:
                self._after_bind_out += 1
        return error

    def _report_bound(self, assignment: tuple[PodInfo, str], error: Exception | None) -> None:
        """On the worker, once the bind's result is out: the Scheduled Event."""
        if error is not None:
            return
        try:
            self._scheduled(*assignment, here=True)
        finally:
            with self._lock:
                self._after_bind_out -= 1

    def _scheduled(self, pod: PodInfo, node: str, *, here: bool) -> None:
        event = pod_event(pod.namespace, pod.name, pod.uid, "Scheduled",
                          scheduled_note(pod.key, node), self.controller, self.instance,
                          action="Binding")
        self._event(pod.key, pod.namespace, event, here=here)

    def _start(self, assignment: tuple[PodInfo, str]) -> Future:
        pool = self._pool
        assert pool is not None
        return pool.submit(self._bind_then_report, assignment,
                           then=functools.partial(self._report_bound, assignment))

    def bind(self, assignments: list[tuple[PodInfo, str]]) -> list[Exception | None]:
        """Bind each pod (in parallel on the workers), each bound pod's Scheduled Event
        written as its bind succeeds; one result per pod."""
        if self._pool is None:
            return [self._bind_here(a) for a in assignments]
        return [future.result() for future in [self._start(a) for a in assignments]]

    def _bind_here(self, assignment: tuple[PodInfo, str]) -> Exception | None:
        error = self._bind_one(assignment)
        if error is None:
            self._scheduled(*assignment, here=False)
        return error

    def submit(self, assignments: list[tuple[PodInfo, str]]) -> list[Future]:
        """The binds started on the workers (done at once without them): one future per pod,
        whose result is None (bound) or the error; each bound pod's Scheduled Event follows
        from the same worker once its result is out."""
        if self._pool is not None:
            return [self._start(a) for a in assignments]
        return [done(self._bind_here(a)) for a in assignments]

    # -- reporting ------------------------------------------------------------------------------
    def _submit(self, key: str, send: Callable[[], None]) -> bool:
        """Send now, or queue for the sender that owns ``key`` (the object written about);
        False when the write was dropped (its queue stayed full)."""
        if not self._queues:
            self._safely(send)
            return True
        # a full queue holds the loop back (up to ``backpressure`` seconds) rather than lose
        # the write: scheduling slows to the rate the API server takes the writes; a sender
        # (writing a series' count) never waits for its own queue
        wait = self.backpressure if threading.current_thread() not in self._senders else 0.0
        with self._owner_lock:
            owner = self._owners.get(key)
            if owner is None:
                load, n = self._load, len(self._load)
                index = min(((self._turn + j) % n for j in range(n)), key=load.__getitem__)
                self._turn = (index + 1) % n
                owner = self._owners[key] = [index, 0]
            owner[1] += 1
            self._load[owner[0]] += 1
        try:
            self._queues[owner[0]].put((key, send), timeout=wait or None, block=wait > 0)
        except queue.Full:
            self._done(key)
            self.metrics.errors.inc(source="event_dropped")
            return False
        return True

    def _writes_out(self, key: str) -> bool:
        """Whether a write about ``key`` is queued or being sent."""
        with self._owner_lock:
            return key in self._owners

    def _write_here(self, send: Callable[[], None]) -> None:
        try:
            self._safely(send)
        finally:
            with self._lock:
                self.sent += 1

    def _done(self, key: str | None) -> None:
        """A write about ``key`` was sent (or dropped): the object's sender is free to change
        once none is left."""
        if key is None:
            return
        with self._owner_lock:
            owner = self._owners.get(key)
            if owner is not None:
                self._load[owner[0]] -= 1
                owner[1] -= 1
                if not owner[1]:
                    del self._owners[key]

    def _safely(self, send: Callable[[], None]) -> None:
        try:
            send()
        except ApiError as exc:
            log.warning("reporting to the API failed: %s", exc)
            self.metrics.errors.inc(source="event")

    def _send_loop(self, q: queue.Queue[Callable[[], None] | None]) -> None:
        while True:
            try:
                item = q.get(timeout=SERIES_REFRESH)
            except queue.Empty:
                if self._queues and q is self._queues[0]:  # one sender writes the series that grew
                    self.refresh_series()
                continue
            if item is None:
                return
            key, send = item
            with self._lock:
                self._in_flight += 1
            try:
                self._safely(send)
            finally:
                self._done(key)
                with self._lock:
                    self._in_flight -= 1
                    self.sent += 1

    def pending(self) -> int:
        """Writes queued or being sent (a bind worker's Scheduled Events too)."""
        return sum(q.qsize() for q in self._queues) + self._in_flight + self._after_bind_out

    def flush(self, timeout: float = 10.0) -> None:
        """Wait for the writes queued so far to be sent (tests)."""
        deadline = time.monotonic() + timeout
        while self._after_bind_out and time.monotonic() < deadline:
            time.sleep(0.001)  # the bind workers' Events first: they may queue writes
        marks = []
        for q in self._queues:
            mark = threading.Event()
            q.put((None, mark.set), timeout=timeout)
            marks.append(mark)
        for mark in marks:
            mark.wait(max(0.0, deadline - time.monotonic()))

    def drain(self, deadline: float) -> int:
        """Shutdown: no write is taken after this; the binds already started and every queued
        write are given until ``deadline`` (``time.monotonic()``); returns how many writes were
        left unsent, which are logged and counted."""
        t0 = time.monotonic()
        if self._pool is not None:
            self._pool.shutdown()  # binds the loop never saw
            # the running binds end and write their Events (some through the senders)
            self._pool.join(deadline)
        self.refresh_series(every=True)  # the counts observed since their last write
        before, queued = self.sent, self.pending()
        for q in self._queues:
            # a sender stuck in a call leaves its queue full: what it holds counts as left below
            with contextlib.suppress(queue.Full):
                q.put(None, timeout=max(0.0, deadline - time.monotonic()))
        for thread in self._senders:
            thread.join(max(0.0, deadline - time.monotonic()))
        left = self._in_flight + self._after_bind_out
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

    # -- Events, as series --------------------------------------------------------------------
    def _event(self, key: str, namespace: str, event: dict[str, Any], *,
               here: bool = False) -> None:
        """Create ``event``, or count it into the series of the same Event seen within
        :data:`SERIES_WINDOW` (written now for the first repeat, else when
        :data:`SERIES_REFRESH` has passed since the last write). ``here``: a new Event is
        created in this thread (a bind worker's) unless a write about ``key`` is out, which
        it then follows through that write's sender."""
        now = self.clock()
        skey = _series_key(event)
        with self._lock:
            series = self._series.get(skey)
            if series is not None and now - series.last > SERIES_WINDOW:
                del self._series[skey]
                series = None
            if series is None:
                self._series[skey] = _Series(key, event, last=now, written_at=now)
                while len(self._series) > SERIES_CAPACITY:
                    self._series.popitem(last=False)
                write = True
            else:
                series.count += 1
                series.last = now
                self._series.move_to_end(skey)
                write = series.written == 1 or now - series.written_at >= SERIES_REFRESH
                if write:
                    series.written, series.written_at = series.count, now
        if series is None:
            if here and not self._writes_out(key):
                self._write_here(lambda: self.api.create_event(namespace, event))
            else:
                self._submit(key, lambda: self.api.create_event(namespace, event))
        elif write:
            self._write_series(series)

    def _write_series(self, series: _Series) -> None:
        event = series.event
        namespace, name = event["metadata"]["namespace"], event["metadata"]["name"]

        def send() -> None:
            with self._lock:
                count, last = series.count, series.last
            patch = series_patch(count, last)
            try:
                self.api.patch_event(namespace, name, patch)
            except ApiError as exc:
                if not exc.not_found:
                    raise
                # the Event is gone (its TTL ran out): created again, with its series
                self.api.create_event(namespace, {**event, **patch})
        self._submit(series.key, send)

    def refresh_series(self, *, every: bool = False) -> int:
        """Write the series whose count grew since its last write, once
        :data:`SERIES_REFRESH` has passed (``every``: all of them, at shutdown); forget those
        not seen for :data:`SERIES_WINDOW`. Returns how many were written."""
        now = self.clock()
        due = []
        with self._lock:
            for skey, series in list(self._series.items()):
                if series.count > series.written and (
                        every or now - series.written_at >= SERIES_REFRESH):
                    series.written, series.written_at = series.count, now
                    due.append(series)
                elif now - series.last > SERIES_WINDOW:
                    del self._series[skey]
        for series in due:
            self._write_series(series)
        return len(due)

    def pod_event(self, pod: PodInfo, reason: str, note: str, action: str) -> None:
        event = pod_event(pod.namespace, pod.name, pod.uid, reason, note, self.controller,
                          self.instance, action=action)
        self._event(pod.key, pod.namespace, event)

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
        self._event(f"{namespace}/{name}", namespace, event)

    def podgroup_status(self, namespace: str, name: str, status: dict[str, Any]) -> None:
        key = f"{namespace}/{name}"
        if not self._queues:
            self._safely(lambda: self.api.patch_podgroup_status(namespace, name,
                                                                {"status": status}))
            return
        with self._lock:
            queued = key in self._statuses
            self._statuses[key] = (namespace, name, status)
        if queued:
            self.metrics.status_coalesced.inc()
            return  # the write already queued sends this newer status

        def send() -> None:
            with self._lock:
                namespace, name, status = self._statuses.pop(key)
            self.api.patch_podgroup_status(namespace, name, {"status": status})
        if not self._submit(key, send):
            with self._lock:  # dropped (counted): the next status is queued afresh
                self._statuses.pop(key, None)

    def node_event(self, name: str, uid: str, reason: str, note: str) -> None:
        event = node_event(name, uid, reason, note, self.controller, self.instance)
        self._event(f"node/{name}", "default", event)


def done(result: Any) -> Future:
    """A future already holding ``result`` (work done at once, where a caller takes futures)."""
    future: Future = Future()
    future.set_result(result)
    return future
