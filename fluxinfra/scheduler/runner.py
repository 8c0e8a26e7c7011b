"""Wires informers, the core and the binder into the running scheduler.

Start-up is the restart-safety boundary: the three informers LIST synchronously (nodes,
PodGroups, pods), the core builds its graph from the nodes and registers every running pod
(:meth:`SchedulerCore.load`), and only then do the watches start and the first cycle run. From
then on informer threads put changes on one queue; the loop applies a batch of them to the core
(single-threaded: no locks in the core), then runs a scheduling cycle. Batching is what lets one
cycle place thousands of pods that arrived together.

:meth:`Runner.pump` does one step synchronously (watch each kind once, apply, schedule); the
tests and ``fluxinfra scheduler --once`` use it. :meth:`Runner.run` is the daemon loop.
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
from fluxinfra.scheduler.informer import Informer
from fluxinfra.scheduler.kube import KINDS, ApiError, Kind, KubeApi

__all__ = ["Runner", "StartupError"]

log = logging.getLogger(__name__)


class StartupError(FluxinfraError):
    """The initial LIST failed for a reason retrying will not fix (names the kind and the fix)."""


class Runner:
    def __init__(self, api: KubeApi, core: SchedulerCore, *, resync_seconds: float = 300.0,
                 watch_timeout: int = 300, batch: int = 5000, idle_wait: float = 1.0,
                 clock: Callable[[], float] = time.monotonic,
                 hosted_kinds: tuple[str, ...] = ()) -> None:
        self.api = api
        self.core = core
        self.clock = clock
        self.t0 = clock()
        self.batch = batch
        self.idle_wait = idle_wait
        self.events: queue.Queue[tuple[Kind, str, dict[str, Any]]] = queue.Queue()
        self.informers = {
            kind: Informer(api, kind, self._ignore, watch_timeout=watch_timeout,
                           resync_seconds=resync_seconds, on_error=self._api_error)
            for kind in (*KINDS, *hosted_kinds)
        }
        #: kinds a component hosted by the core watches (the queue's Jobs, FluxJobs, ...): their
        #: changes go to ``core.on_object(kind, event_type, obj, now)``
        self.hosted_kinds = hosted_kinds
        self.stopped = threading.Event()
        self.last_cycle: CycleReport | None = None

    def now(self) -> int:
        """Seconds since start: the allocator's clock."""
        return int(self.clock() - self.t0)

    @staticmethod
    def _ignore(kind: Kind, etype: str, obj: dict[str, Any]) -> None:
        pass

    def _enqueue(self, kind: Kind, etype: str, obj: dict[str, Any]) -> None:
        self.events.put((kind, etype, obj))

    def _api_error(self, kind: Kind, exc: ApiError) -> None:
        self.core.metrics.errors.inc(source=f"watch_{kind}")

    # -- lifecycle ------------------------------------------------------------------------------
    def start(self) -> None:
        """Initial LIST of every kind, rebuild, then watch (retries transient failures)."""
        for kind in ("nodes", "podgroups", *self.hosted_kinds, "pods"):
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
        for kind in self.hosted_kinds:  # what the hosted component needs before the rebuild
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

    def healthy(self) -> bool:
        return self.core.ready and not self.stopped.is_set()

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
                self.core.metrics.errors.inc(source="apply")
        return n

    def cycle(self) -> CycleReport:
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
        return self.cycle()

    def run(self) -> None:
        """The daemon loop: watches in threads, apply batches, schedule."""
        self.start()
        threads = [threading.Thread(target=inf.run, name=f"informer-{kind}", daemon=True)
                   for kind, inf in self.informers.items()]
        for t in threads:
            t.start()
        next_cycle = 0.0
        while not self.stopped.is_set():
            try:
                first = self.events.get(timeout=self.idle_wait)
            except queue.Empty:
                first = None
            self.apply_pending(first)
            if self.events.qsize() and self.clock() < next_cycle:
                continue  # a burst is still arriving: take it in before matching
            try:
                report = self.cycle()
            except Exception:  # noqa: BLE001
                log.exception("scheduling cycle failed")
                self.core.metrics.errors.inc(source="cycle")
                continue
            if report.tried:
                log.debug("cycle: %s", report)
            next_cycle = self.clock() + 0.05
        for informer in self.informers.values():
            informer.stop()

    def stop(self) -> None:
        self.stopped.set()
