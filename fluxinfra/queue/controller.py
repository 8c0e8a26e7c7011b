"""The queue controller, hosted by the scheduler: one set of Fluxion books for queued work too.

Mirrors Kueue's ``jobframework`` reconciler and its manager: the piece that owns the FluxJobs
(Kueue's Workloads), routes every watched object to the integration it belongs to, and wires
the other pieces together; it decides nothing about a kind of work itself:

============================================  ==================================================
:mod:`~fluxinfra.queue.workload`              what a queued workload is: ``Unit`` (Kueue's
                                              Workload), the ``Integration`` interface (Kueue's
                                              GenericJob), the books of units and pods
:mod:`~fluxinfra.queue.context`               what every integration is given
:mod:`~fluxinfra.queue.jobs`                  integration: suspended batch/v1 Jobs (slot pods)
:mod:`~fluxinfra.queue.gated`                 integration: pods held by the scheduling gate
:mod:`~fluxinfra.queue.admission`             when a unit enters the core (limits, serve order)
                                              and the reservations the core made
:mod:`~fluxinfra.queue.states`                the FluxJob state machine
:mod:`~fluxinfra.queue.status`                the status writer and the queue's Events
:mod:`~fluxinfra.queue.writes`                the pool of API writes off the loop
:mod:`~fluxinfra.queue.binding`               the core's binder with the queue's pods taken out
============================================  ==================================================

:class:`QueueCore` takes the place of the scheduler's
:class:`~fluxinfra.scheduler.core.SchedulerCore` in the runner (``fluxinfra scheduler
--queue``): the runner feeds it nodes, pods and PodGroups as before, and the queue's own kinds
(Jobs, FluxJobs, FluxJobQueues, PriorityClasses) through ``on_object``; what it does not handle
itself it passes to the core by name. Everything that is placed is placed by the core, through
its allocator and its books; the queue only decides *when* a unit of work enters the core's
queue and what happens around the placement. Its coupling to the scheduler is the core's public
surface: API-JSON pod objects in (``on_pod``, ``load``), decisions out through the ``Binder``
protocol (the :class:`~fluxinfra.queue.binding.QueueBinder` the host gives the core when it
builds it), and the reservations of a cycle (``CycleReport.reservations``).

A cycle (:meth:`QueueCore.schedule`): apply the answers of writes that are back, create the
FluxJobs new work needs, hand the core what its queue has room for, run the core's cycle, read
its reservations, un-suspend the Jobs whose slots were placed, bind the pods of admitted Jobs,
write the statuses that changed. Each step looks only at what changed since.

Releasing (no leaked allocation): a finished pod of a gated unit releases its share at once;
a Job's slots go as :mod:`~fluxinfra.queue.jobs` says; a FluxJob deleted by hand releases
everything and its running pods stay counted as what they are, pods running on their nodes.

Restart: FluxJobs, Jobs and pods are the durable queue: :meth:`QueueCore.load` rebuilds from
them (admitted Jobs from their ``fluxinfra.io/admitted-nodes``) before the core rebuilds its
books from all of it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from concurrent.futures import Future
from typing import Any

from fluxinfra.kube import fluxjob as q
from fluxinfra.queue import objects
from fluxinfra.queue.admission import Admission
from fluxinfra.queue.binding import QueueBinder
from fluxinfra.queue.context import QueueContext
from fluxinfra.queue.gated import GatedPods
from fluxinfra.queue.jobs import SLOT_PREFIX, SuspendedJobs, job_pods, slot_uid, still_needed
from fluxinfra.queue.kube import QueueApi
from fluxinfra.queue.metrics import QueueMetrics
from fluxinfra.queue.states import FluxJobStates
from fluxinfra.queue.status import StatusWriter
from fluxinfra.queue.workload import (
    CoreFeed,
    QueueConfig,
    Slot,
    Unit,
    Workloads,
    controller_ref,
    gated,
    key_of,
    log,
    meta,
)
from fluxinfra.queue.writes import Writes
from fluxinfra.scheduler.events import micro_time, parse_time
from fluxinfra.scheduler.kube import ApiError
from fluxinfra.scheduler.pods import PodInfo, PodSpecError

__all__ = ["SLOT_PREFIX", "QueueConfig", "QueueCore", "Slot", "Unit", "job_pods",
           "still_needed"]


class QueueCore:
    """The scheduler core with the queue in front of it; see the module docstring.

    ``binder`` is the :class:`~fluxinfra.queue.binding.QueueBinder` that ``core`` was built
    with: the controller attaches itself to it."""

    def __init__(self, core: Any, api: QueueApi, config: QueueConfig | None = None,
                 metrics: QueueMetrics | None = None,
                 wall: Callable[[], float] = time.time, *, binder: QueueBinder) -> None:
        binder.attach(self)  # first: a binder already serving a controller starts nothing
        self.binder = binder
        self.core = core
        self.api = api
        self.config = config or QueueConfig()
        self.metrics = metrics or QueueMetrics()
        self.wall = wall
        self.books = Workloads()
        self.units = self.books.units                 # FluxJob key -> unit
        self.by_owner = self.books.by_owner           # Job uid / gated group key -> FluxJob key
        self.pods = self.books.pods                   # every pod seen, by uid
        self.writes = Writes(self.config.workers)
        self._done = self.writes.done                 # answers of writes not applied yet
        self.status = StatusWriter(api, self.books, self.writes, self.config, self.metrics, wall)
        self.states = FluxJobStates(self.status, self.metrics, wall)
        self.feed = CoreFeed(core)
        self.queues: dict[str, dict[str, Any]] = {}   # ns/name -> FluxJobQueue
        self.priorities: dict[str, int] = {}          # PriorityClass -> value
        ctx = QueueContext(core=self.feed, books=self.books, states=self.states,
                           writes=self.writes, api=api, config=self.config,
                           metrics=self.metrics, priorities=self.priorities, wall=wall)
        self.suspended = SuspendedJobs(ctx)
        self.gated = GatedPods(ctx)
        ctx.integrations.update({self.suspended.kind: self.suspended,
                                 self.gated.kind: self.gated})
        self.ctx = ctx
        self.admission = Admission(ctx, self.queues)
        self.shown = self.suspended.shown             # real pod uid -> uid the core knows it by
        self.creating: set[str] = set()               # owners whose FluxJob is being created
        self._unreadable: dict[tuple[str, str], str] = {}  # (kind, object) -> why skipped
        self._last_queued = 0.0
        self.metrics.depth.set_function(lambda: sum(
            1 for u in self.units.values() if u.state in ("Queued", "Reserved")))

    # ==== the core, by name (the runner reads these of what it drives) ==========================
    @property
    def ready(self) -> bool:
        return self.core.ready

    @property
    def nodes(self) -> dict[str, Any]:
        return self.core.nodes

    @property
    def podgroups(self) -> dict[str, Any]:
        return self.core.podgroups

    def pending_pods(self) -> int:
        return self.core.pending_pods()

    @property
    def loaded(self) -> bool:
        return self.feed.loaded

    # ==== plumbing ================================================================================
    def set_waker(self, waker: Callable[[], None] | None) -> None:
        """The daemon loop's waker (the runner sets it): the core's, and the queue's for the
        answers of its writes."""
        self.writes.waker = waker
        self.core.set_waker(waker)

    def next_due(self, now: int) -> float | None:
        """The core's timed work; and, with writes out and no waker to say when they are
        back, a short poll for their answers."""
        due = self.core.next_due(now)
        poll = self.writes.due()
        if poll is not None:
            due = poll if due is None else min(due, poll)
        return due

    def collect(self, wait: float = 0.0) -> int:
        """Apply the results of the writes that are back (waiting up to ``wait`` seconds for
        every write in flight to return); returns how many are still in flight."""
        return self.writes.collect(wait)

    def settle(self, deadline: float) -> int:
        """Shutdown (the runner stopped): the core's binds in flight, then the queue's own
        writes, are taken in until ``deadline`` (``time.monotonic()``), and the FluxJob
        Events queued by then are sent; returns how many binds, writes and Events are left."""
        left = self.core.settle(deadline)
        left += self.collect(wait=max(0.0, deadline - time.monotonic()))
        return left + self.status.settle(deadline)

    def close(self) -> None:
        self.status.close()
        self.writes.close()

    # ==== what the queue's binder asks (BindRoutes) =============================================
    def slot_placed(self, slot_uid: str, node: str) -> None:
        self.suspended.slot_placed(slot_uid, node)

    def handed_gated(self, uid: str) -> bool:
        return self.gated.handed(uid)

    def ungate_and_bind(self, pod: PodInfo, node: str) -> Exception | None:
        return self.gated.ungate_and_bind(pod, node)

    def submit(self, fn: Callable[..., Any], *args: Any) -> Future:
        return self.writes.submit(fn, *args)

    def map(self, fn: Callable[[Any], Any], items: list[Any]) -> list[Any]:
        return self.writes.map(fn, items)

    def unplaceable(self, uid: str, reason: str, note: str) -> None:
        unit = self.unit_of_pod(uid)
        if unit is not None:
            self.states.fail(unit, "Unsatisfiable" if reason == "Unschedulable"
                             else "InvalidPod", note)

    def unit_of_pod(self, uid: str) -> Unit | None:
        if uid in self.suspended.slot_pods:
            return self.suspended.unit_of_slot(uid)
        key = self.books.pod_unit.get(uid)
        return self.units.get(key) if key else None

    def _slot_uid(self, unit: Unit, index: int) -> str:
        """The uid the core knows slot ``index`` of ``unit`` by."""
        return slot_uid(unit, index)

    # ==== the runner's side ======================================================================
    def load(self, nodes: Iterable[dict[str, Any]], podgroups: Iterable[dict[str, Any]],
             pods: Iterable[dict[str, Any]], now: int = 0) -> None:
        """Start-up: the queue's kinds arrived through ``on_object``; route every pod, rebuild
        each admitted Job's slots, then let the core rebuild its books from all of it."""
        self.feed.begin_startup()
        for unit in self.units.values():
            if unit.kind == "job":
                self.suspended.restore(unit)
        for pod in pods:
            self.on_pod("ADDED", pod, now)
        self._feed(now)
        startup = self.feed.take_startup()
        self.core.load(nodes, podgroups, startup, now=now)

    def on_node(self, etype: str, node: dict[str, Any], now: int = 0) -> None:
        self.core.on_node(etype, node, now)

    def on_podgroup(self, etype: str, obj: dict[str, Any]) -> None:
        self.core.on_podgroup(etype, obj)

    def on_object(self, kind: str, etype: str, obj: dict[str, Any], now: int = 0) -> None:
        if kind in objects.KINDS and not self._readable(kind, etype, obj):
            return
        if kind == "jobs":
            self.suspended.on_job(etype, obj, now)
        elif kind == "fluxjobs":
            self._on_fluxjob(etype, obj, now)
        elif kind == "fluxjobqueues":
            if etype == "DELETED":
                self.queues.pop(key_of(obj), None)
            else:
                self.queues[key_of(obj)] = obj
        elif kind == "priorityclasses":
            name = meta(obj).get("name", "")
            if etype == "DELETED":
                self.priorities.pop(name, None)
            else:
                self.priorities[name] = int(obj.get("value") or 0)
        else:  # the scheduler core's own (namespaces, PodDisruptionBudgets)
            self.core.on_object(kind, etype, obj, now)

    def schedule(self, now: int) -> Any:
        self.collect()
        self._create_fluxjobs(now)
        self._feed(now)
        report = self.core.schedule(now)
        self.admission.reservations(report, now)
        self.suspended.admit(now)
        self.suspended.bind_pods(now)
        self.status.flush()
        return report

    def _feed(self, now: int) -> None:
        self.suspended.hold_restored(now)
        self.admission.feed(now)

    # ==== FluxJobs ===============================================================================
    def _on_fluxjob(self, etype: str, obj: dict[str, Any], now: int) -> None:
        key = key_of(obj)
        if etype == "DELETED":
            unit = self.units.pop(key, None)
            if unit is not None:
                self._drop_unit(unit, now)
            return
        unit = self.units.get(key)
        ours = False  # a FluxJob this controller just created
        if unit is None:
            unit = self._unit_from(obj)
            if unit is None:
                return
            self.units[key] = unit
            self.by_owner[unit.owner_uid] = key
            self.states.unfed.add(key)
            ours = unit.owner_uid in self.creating
            self.creating.discard(unit.owner_uid)
            self.ctx.integration(unit).adopt(unit)
        else:
            unit.uid = unit.uid or str(meta(obj).get("uid", ""))
        status = obj.get("status") or {}
        if not unit.status and status:
            unit.status = dict(status)
            unit.written = dict(status)
            self.states.track(unit)
        elif ours and not unit.status:
            self.states.created(unit)

    def _unit_from(self, obj: dict[str, Any]) -> Unit | None:
        m, spec = meta(obj), obj.get("spec") or {}
        owner = spec.get("owner") or {}
        pod_sets = spec.get("podSets") or [{}]
        if not owner.get("uid"):
            return None
        return Unit(namespace=m.get("namespace", ""), name=m.get("name", ""),
                    kind="job" if owner.get("kind") == "Job" else "pods",
                    owner_uid=str(owner["uid"]), queue=spec.get("queueName") or q.DEFAULT_QUEUE,
                    priority=int(spec.get("priority") or 0),
                    duration=int(spec.get("duration") or self.config.default_duration),
                    count=sum(int(p.get("count") or 0) for p in pod_sets),
                    requests=_amounts(pod_sets[0].get("requests") or {}),
                    uid=str(m.get("uid", "")),
                    created=parse_time(spec.get("queuedAt") or m.get("creationTimestamp")))

    def _create_fluxjobs(self, now: int) -> None:
        """A FluxJob for every queued Job and gated group that has none (the created object
        is taken as soon as the create returns, or from the watch if that is first)."""
        def busy(owner: str) -> bool:
            return owner in self.by_owner or owner in self.creating

        todo: list[dict[str, Any]] = []
        for integration in (self.suspended, self.gated):
            bodies = integration.new_fluxjobs(busy, self._queued_at)
            self.creating.update(body["spec"]["owner"]["uid"] for body in bodies)
            todo += bodies
        for body in todo:
            self.writes.write(lambda body=body: self._create(body),
                              lambda created, body=body: self._created(body, created, now))

    def _created(self, body: dict[str, Any], created: Any, now: int) -> None:
        if isinstance(created, dict):
            self._on_fluxjob("ADDED", created, now)
        elif isinstance(created, Exception) and not getattr(created, "conflict", False):
            owner = body["spec"]["owner"]  # try again next cycle
            self.creating.discard(owner["uid"])
            (self.suspended if owner["kind"] == "Job" else self.gated).create_failed(
                owner["uid"])
        # 409: it exists; the watch brings it

    def _create(self, body: dict[str, Any]) -> dict[str, Any] | ApiError:
        try:
            return self.api.create_fluxjob(body["metadata"]["namespace"], body)
        except ApiError as exc:
            if not exc.conflict:
                log.warning("creating FluxJob %s failed: %s", key_of(body), exc)
                self.metrics.errors.inc(source="create")
            return exc

    def _queued_at(self) -> str:
        """Now, to the microsecond, strictly after the last one (FCFS within one second)."""
        self._last_queued = max(self.wall(), self._last_queued + 1e-6)
        return micro_time(self._last_queued)

    def _drop_unit(self, unit: Unit, now: int) -> None:
        """A FluxJob deleted (by hand, or with its work): release all it holds."""
        integration = self.ctx.integration(unit)
        integration.release_all(unit, now)
        self.by_owner.pop(unit.owner_uid, None)
        integration.forget(unit, now)
        unit.fed = False

    def _readable(self, kind: str, etype: str, obj: Any) -> bool:
        """Whether the controller can read ``obj``; if not, it is reported once per object and
        message (a log line, and a Warning Event on a namespaced object with a uid) and the
        update is skipped: what was read of the object before stays."""
        why = objects.problem(kind, etype, obj)
        try:
            namespace, name, uid = objects.identity(kind, obj)
            what = f"{objects.KINDS[kind]} {namespace + '/' if namespace else ''}{name}"
        except PodSpecError:
            namespace = name = uid = ""
            what = f"{objects.KINDS[kind]} without a readable name"
        if not why:
            self._unreadable.pop((kind, what), None)
            return True
        if self._unreadable.get((kind, what)) == why:
            return False
        self._unreadable[(kind, what)] = why
        log.warning("cannot read %s, skipped: %s", what, why.removeprefix(f"{what}: "))
        self.metrics.errors.inc(source="invalid_object")
        if namespace and uid:
            regarding = {"apiVersion": objects.API_VERSIONS[kind],
                         "kind": objects.KINDS[kind], "namespace": namespace, "name": name,
                         "uid": uid}
            self.status.pending_events.append(self.status.event_body(
                regarding, "Reading", f"Invalid{objects.KINDS[kind]}", "Warning",
                f"skipped by the queue: {why}"))
        return False

    # ==== pods ====================================================================================
    def on_pod(self, etype: str, obj: dict[str, Any], now: int = 0) -> None:
        if objects.pod_problem(obj):
            # the core reports it (log line; an InvalidPod Event on a pod of ours)
            self.core.on_pod(etype, obj, now)
            return
        uid = str(meta(obj).get("uid") or key_of(obj))
        if etype == "DELETED":
            self.pods.pop(uid, None)
        else:
            self.pods[uid] = obj
        unit = self._unit_for_pod(uid, obj)
        self.gated.index(uid, etype, obj)
        if unit is None:
            if etype == "DELETED" or not gated(obj):
                self.feed.pod(etype, obj, now)
            # a gated pod waits for its FluxJob (made next cycle) before the core sees it
            return
        self.ctx.integration(unit).on_pod(unit, uid, etype, obj, now)

    def _unit_for_pod(self, uid: str, pod: dict[str, Any]) -> Unit | None:
        key = self.books.pod_unit.get(uid)
        if key is not None:
            return self.units.get(key)
        owner = controller_ref(pod)
        if owner.get("kind") == "Job" and owner.get("uid") in self.by_owner:
            return self.suspended.claim(uid, pod)
        if gated(pod):
            return self.gated.claim(uid, pod)
        return None


def _amounts(requests: dict[str, Any]) -> dict[str, int]:
    from fluxinfra.kube.resources import pod_requests as amounts_of

    pod = {"spec": {"containers": [{"name": "x", "resources": {"requests": requests}}]}}
    try:
        return amounts_of(pod)
    except Exception:  # noqa: BLE001 - what the CRD let through but we cannot read counts 0
        return {}

