"""Wires informers, the core and the binder into the running scheduler.

Start-up is the restart-safety boundary: the three informers LIST synchronously (nodes,
PodGroups, pods), the core builds its graph from the nodes and registers every running pod
(:meth:`SchedulerCore.load`), and only then do the watches start and the first cycle run. From
then on informer threads put changes on one queue; the loop applies a batch of them to the core
(single-threaded: no locks in the core), then runs a scheduling cycle. Batching is what lets one
cycle place thousands of pods that arrived together.

**No work when idle.** The loop sleeps until an event arrives or until the next timed piece of
work falls due (:meth:`SchedulerCore.next_due`: a job's declared end, a bind retry after its
cool-down; and a cycle at least every ``resync_seconds``, as the informers relist), never on a
one-second tick. A scheduler with nothing to do wakes once per resync period. While a burst's
binds finish one by one and no pod waits to be placed, the loop sleeps out the burst gap and
takes in together what the binds and the watches brought meanwhile: one wake-up and one cycle
per gap (:meth:`SchedulerCore.cycle_can_wait`). The last bind out is taken in at once.

**The watchdog** (:meth:`Runner.health`, served as ``/healthz`` and so the liveness probe):
unhealthy when the loop has been inside one batch-and-cycle for more than ``stall_seconds``
(a call that never returns, a deadlock), or when an informer has not heard from the API server
for longer than a watch may last plus ``stall_seconds`` (a view that can no longer be
refreshed). Every API call has a client timeout (:mod:`fluxinfra.scheduler.client`), so
neither should happen while the API server answers; when it does, the kubelet restarts the
scheduler, and the leader stops renewing its Lease (:mod:`fluxinfra.scheduler.leader`), so a
standby takes over instead of a stuck leader keeping the Lease alive.

**A remote matcher that lost its books** (a restarted Fluxion service): ``sync_backend`` (the
allocator's :meth:`~fluxinfra.scheduler.fluxion.FluxionAllocator.sync_backend`) runs before each
batch and cycle and replays every allocation; while the service is unreachable the loop retries
with backoff and matches nothing.

:meth:`Runner.pump` does one step synchronously (watch each kind once, apply, schedule); the
tests and the benchmarks use it. :meth:`Runner.run` is the daemon loop.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from typing import Any

from fluxinfra.errors import FluxinfraError
from fluxinfra.scheduler.core import CycleReport, SchedulerCore
from fluxinfra.scheduler.fluxion import BackendUnavailable
from fluxinfra.scheduler.informer import Backoff, Informer
from fluxinfra.scheduler.kube import KINDS, ApiError, Kind, KubeApi
from fluxinfra.scheduler.metrics import Metrics

__all__ = ["Runner", "StartupError"]

log = logging.getLogger(__name__)

#: Shortest gap between two cycles while a burst of events is still arriving.
BURST_GAP = 0.05
_STOP = ("", "", {})  # wakes the loop on stop()
_WAKE = ("", "wake", {})  # wakes the loop for work no watch event announces (a bind's result)


class StartupError(FluxinfraError):
    """The initial LIST failed for a reason retrying will not fix (names the kind and the fix)."""


class Runner:
    def __init__(self, api: KubeApi, core: SchedulerCore, *, resync_seconds: float = 300.0,
                 watch_timeout: int = 300, batch: int = 5000, stall_seconds: float = 120.0,
                 sync_backend: Callable[[int], bool] | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 hosted_kinds: tuple[str, ...] = (), metrics: Metrics | None = None,
                 burst_gap: float = BURST_GAP) -> None:
        self.api = api
        self.core = core
        #: the scheduler's metrics (``core`` may be a component hosting the core, with metrics
        #: of its own: the queue)
        own = getattr(core, "metrics", None)
        self.metrics = metrics or (own if isinstance(own, Metrics) else Metrics())
        self.clock = clock
        self.t0 = clock()
        self.batch = batch
        self.resync_seconds = resync_seconds
        #: shortest gap between two cycles while a burst arrives or binds finish one by one
        self.burst_gap = burst_gap
        self.stall_seconds = stall_seconds
        self.watch_timeout = watch_timeout
        self.sync_backend = sync_backend
        self.events: queue.Queue[tuple[Kind, str, dict[str, Any]]] = queue.Queue()
        self.informers = {
            kind: Informer(api, kind, self._ignore, watch_timeout=watch_timeout,
                           resync_seconds=resync_seconds, on_error=self._api_error,
                           clock=clock)
            for kind in (*KINDS, *hosted_kinds)
        }
        #: kinds a component hosted by the core watches (the queue's Jobs, FluxJobs, ...): their
        #: changes go to ``core.on_object(kind, event_type, obj, now)``
        self.hosted_kinds = hosted_kinds
        self.stopped = threading.Event()
        self.last_cycle: CycleReport | None = None
        #: when the loop began its current batch-and-cycle; None while it waits (the watchdog)
        self.busy_since: float | None = None
        #: how often the daemon loop woke up and how many cycles it ran (idle means neither grows)
        self.wakeups = 0
        self.cycles = 0
        self._last_cycle = clock()
        self.metrics.loop_wakeups.set_function(lambda: self.wakeups)
        self._backend_backoff = Backoff(initial=1.0, cap=30.0)
        self._backend_retry_at: float | None = None
        #: a wake marker is queued and not yet taken: a burst of finished binds queues one
        self._wake_queued = False
        #: the loop sleeps out a burst gap (binds finishing, nothing to place); the last bind
        #: out, or stop(), ends the nap early
        self._napping = False
        self._nap_over = threading.Event()
        #: whether the core's next cycle may wait for the burst gap (a core without the
        #: method: never)
        self._can_wait: Callable[[], bool] = getattr(core, "cycle_can_wait", lambda: False)
        set_waker = getattr(core, "set_waker", None)  # a hosting component passes it on
        if set_waker is not None:
            set_waker(self.wake)

    def wake(self) -> None:
        """Wake the loop for work no watch event announces (called from the binder's threads
        as binds finish): one marker queued at a time, taken with everything before it."""
        if not self._wake_queued:
            self._wake_queued = True
            self.events.put(_WAKE)  # type: ignore[arg-type]
        # (on a binder thread: the core's answer reads only the lengths of what it keeps)
        if self._napping and not self._can_wait():
            self._nap_over.set()  # the last bind out: taken in now, not at the gap's end

    def now(self) -> int:
        """Seconds since start: the allocator's clock."""
        return int(self.clock() - self.t0)

    @staticmethod
    def _ignore(kind: Kind, etype: str, obj: dict[str, Any]) -> None:
        pass

    def _enqueue(self, kind: Kind, etype: str, obj: dict[str, Any]) -> None:
        self.events.put((kind, etype, obj))

    def _api_error(self, kind: Kind, exc: ApiError) -> None:
        self.metrics.errors.inc(source=f"watch_{kind}")

    # -- lifecycle ------------------------------------------------------------------------------
    def start(self) -> None:
        """Initial LIST of every kind, rebuild, then watch (retries transient failures)."""
        others = ("namespaces", "poddisruptionbudgets", *self.hosted_kinds)
        for kind in ("nodes", "podgroups", *others, "pods"):
            informer = self.informers[kind]  # type: ignore[index]
            while True:
                try:
                    informer.relist()
                    break
                except ApiError as exc:
                    self._api_error(kind, exc)  # type: ignore[arg-type]
                    if not exc.transient:
                        raise StartupError(
                            f"listing {kind} failed: {exc}; check the scheduler's ClusterRole "
                            f"(it needs get/list/watch on {kind})") from None
                    delay = informer.backoff.next()
                    log.warning("initial list of %s failed (%s); retrying in %.1fs",
                                kind, exc, delay)
                    if self.stopped.wait(delay):
                        return
            informer.backoff.reset()
        # what the core (namespaces, PDBs) and a hosted component need before the rebuild
        for kind in others:
            for obj in self.informers[kind].store.values():  # type: ignore[index]
                self.core.on_object(kind, "ADDED", obj, self.now())  # type: ignore[attr-defined]
        self.core.load(self.informers["nodes"].store.values(),
                       self.informers["podgroups"].store.values(),
                       self.informers["pods"].store.values(), now=self.now())
        for informer in self.informers.values():
            informer.sink = self._enqueue
        log.info("synced: %d nodes, %d pods, %d PodGroups; %d pods queued",
                 len(self.core.nodes), len(self.core.pods), len(self.core.podgroups),
                 self.core.pending_pods())

    def stalled(self) -> str:
        """The watchdog: why the running loop is stalled, or "" (see the module docstring)."""
        if not self.core.ready:
            return ""  # still starting: the startup probe, not the watchdog, bounds that
        now = self.clock()
        busy = self.busy_since
        if busy is not None and now - busy > self.stall_seconds:
            return (f"scheduling loop stalled: one batch-and-cycle has run for "
                    f"{now - busy:.0f}s (limit {self.stall_seconds:.0f}s)")
        quiet_limit = self.watch_timeout + self.stall_seconds
        for kind, informer in self.informers.items():
            quiet = now - informer.last_contact
            if quiet > quiet_limit:
                return (f"no answer from the API server for {kind} for {quiet:.0f}s "
                        f"(limit {quiet_limit:.0f}s: watch timeout + stall limit)")
        return ""

    def health(self) -> tuple[bool, str]:
        """``(healthy, why)`` for ``/healthz``: synced, running, and not stalled."""
        if self.stopped.is_set():
            return False, "stopping"
        if not self.core.ready:
            return False, "initial sync not done"
        why = self.stalled()
        return (False, why) if why else (True, "ok")

    def healthy(self) -> bool:
        return self.health()[0]

    def apply_pending(self, first: tuple[Kind, str, dict[str, Any]] | None = None) -> int:
        """Apply queued informer events (after ``first``) to the core; returns how many."""
        n = 0
        now = self.now()
        while n < self.batch:
            if first is not None:
                (kind, etype, obj), first = first, None
            else:
                try:
                    kind, etype, obj = self.events.get_nowait()
                except queue.Empty:
                    break
            if not kind:
                if etype == _WAKE[1]:
                    # cleared before the cycle that takes the finished binds in: a bind that
                    # finishes from now on queues a marker of its own
                    self._wake_queued = False
                continue  # the stop or wake marker
            n += 1
            try:
                if kind == "nodes":
                    self.core.on_node(etype, obj, now)
                elif kind == "pods":
                    self.core.on_pod(etype, obj, now)
                elif kind == "podgroups":
                    self.core.on_podgroup(etype, obj)
                else:
                    self.core.on_object(kind, etype, obj, now)  # type: ignore[attr-defined]
            except Exception:  # noqa: BLE001 - one bad object must not stop the scheduler
                log.exception("applying %s %s failed", etype, kind)
                self.metrics.errors.inc(source="apply")
        return n

    def backend_ready(self) -> bool:
        """Replay the books into a matcher that lost them; False (retry later) while it
        cannot take them."""
        if self.sync_backend is None:
            return True
        if self._backend_retry_at is not None and self.clock() < self._backend_retry_at:
            return False
        try:
            ok = self.sync_backend(self.now())
        except Exception:  # noqa: BLE001 - a replay that fails is retried, never fatal
            log.exception("replaying allocations into the matcher failed")
            ok = False
        if ok:
            if self._backend_retry_at is not None:
                log.info("matcher back in step: every allocation replayed")
            self._backend_retry_at = None
            self._backend_backoff.reset()
            return True
        self.metrics.errors.inc(source="backend")
        self._backend_retry_at = self.clock() + self._backend_backoff.next()
        return False

    def cycle(self) -> CycleReport:
        self.cycles += 1
        self._last_cycle = self.clock()
        self.last_cycle = self.core.schedule(self.now())
        return self.last_cycle

    def pump(self) -> CycleReport:
        """One synchronous step: follow each watch to its end, apply, schedule."""
        for informer in self.informers.values():
            try:
                informer.poll()
            except ApiError as exc:
                self._api_error(informer.kind, exc)
        while self.apply_pending():
            pass
        if not self.backend_ready():
            return CycleReport()
        try:
            return self.cycle()
        except BackendUnavailable as exc:
            self._backend_lost(exc)
            return CycleReport()

    def wait_seconds(self, cycle_owed_at: float | None) -> float:
        """How long the loop may sleep: until the next timed work, a retry of the matcher, an
        owed cycle, or at the latest a resync period after the last cycle (a safety net for
        work a hosted component retries without saying when)."""
        now = self.clock()
        due: list[float] = [self._last_cycle + self.resync_seconds - now]
        if cycle_owed_at is not None:
            due.append(cycle_owed_at - now)
        if self._backend_retry_at is not None:
            due.append(self._backend_retry_at - now)
        if self.core.ready:
            core_due = self.core.next_due(self.now())
            if core_due is not None:
                due.append(core_due)
        return max(0.0, min(due))

    def run(self) -> None:
        """The daemon loop: watches in threads, apply batches, schedule."""
        self.start()
        threads = [threading.Thread(target=inf.run, name=f"informer-{kind}", daemon=True)
                   for kind, inf in self.informers.items()]
        for t in threads:
            t.start()
        next_cycle = 0.0
        cycle_owed_at: float | None = self.clock()  # the pods queued at start-up
        while not self.stopped.is_set():
            if self._napping:  # sleep out the burst gap before taking in what arrives
                self._nap_over.wait(max(0.0, next_cycle - self.clock()))
                self._napping = False
                if self.stopped.is_set():
                    break
            try:
                first = self.events.get(timeout=self.wait_seconds(cycle_owed_at))
            except queue.Empty:
                first = None
            if self.stopped.is_set():
                break
            self.busy_since = self.clock()
            self.wakeups += 1
            try:
                self.apply_pending(first)
                if self.clock() < next_cycle and self.events.qsize():
                    # a burst is still arriving: take it in before matching
                    cycle_owed_at = next_cycle
                    continue
                if self.clock() < next_cycle and self._can_wait():
                    # binds finishing one by one with nothing to place: what they and the
                    # watches bring until the gap ends is taken in together, one wake-up
                    self._nap_over.clear()
                    self._napping = True
                    if self._can_wait():  # again: a bind ending from now on ends the nap
                        cycle_owed_at = next_cycle
                        continue
                    self._napping = False
                cycle_owed_at = None
                if not self.backend_ready():
                    continue
                self._cycle_logged()
                next_cycle = self.clock() + self.burst_gap
            finally:
                self.busy_since = None
        for informer in self.informers.values():
            informer.stop()

    def _cycle_logged(self) -> None:
        try:
            report = self.cycle()
        except BackendUnavailable as exc:
            self._backend_lost(exc)
            return
        except Exception:  # noqa: BLE001
            log.exception("scheduling cycle failed")
            self.metrics.errors.inc(source="cycle")
            return
        if report.tried:
            log.debug("cycle: %s", report)

    def _backend_lost(self, exc: BackendUnavailable) -> None:
        """The matcher lost our books (or went away) mid-cycle: replay at once, then retry."""
        log.warning("cycle stopped: %s", exc)
        self.metrics.errors.inc(source="backend")
        self._backend_retry_at = self.clock()

    def finish(self, deadline: float) -> int:
        """After the loop stopped: the binds still in flight are waited for until
        ``deadline`` (``time.monotonic()``) and taken in (:meth:`SchedulerCore.settle`);
        returns how many are still out."""
        return self.core.settle(deadline)

    def stop(self) -> None:
        self.stopped.set()
        self._nap_over.set()
        self.events.put(_STOP)  # type: ignore[arg-type]
