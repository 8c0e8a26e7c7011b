"""The queue controller, hosted by the scheduler: one set of Fluxion books for queued work too.

:class:`QueueCore` wraps the scheduler's :class:`~fluxinfra.scheduler.core.SchedulerCore` and
takes its place in the runner (``fluxinfra scheduler --queue``): the runner feeds it nodes, pods
and PodGroups as before, and the queue's own kinds (Jobs, FluxJobs, FluxJobQueues,
PriorityClasses) through ``on_object``. Everything that is placed is placed by the core, through
its allocator and its books; the queue only decides *when* a unit of work enters the core's
queue and what happens around the placement. Its coupling to the scheduler is the core's public
surface: API-JSON pod objects in (``on_pod``, ``load``), decisions out through the ``Binder``
protocol, and the reservations of a cycle (``CycleReport.reservations``).

Two kinds of unit (one ``FluxJob`` each, named ``job-<name>``, ``podgroup-<name>``,
``group-<name>`` or ``pod-<name>``):

- **A suspended Job** has no pods yet. The queue hands the core ``count`` *slot pods* (the Job's
  pod template, one label group of ``count``), so the core matches the Job whole, with the
  scheduler's own conversion of every request, its filters, priorities, FCFS and EASY backfill.
  "Binding" a slot pod only records its node. When every slot has one, the Job is admitted: one
  merge patch sets ``suspend: false``, pins the pod template to the chosen nodes (required node
  affinity on ``metadata.name``, allowed on a suspended Job that never ran) and records the
  nodes (``fluxinfra.io/admitted-nodes``). The Job controller then makes the pods; the queue
  binds each to a free slot's node and from then on shows it to the core *as* that slot (same
  uid, same node, same request): the allocation Fluxion made at admission is the one the pod
  holds, never a second one.
- **Gated pods** (a bare pod, a PodGroup's members, a label group, the pods of JobSet and the
  like) exist already. They are shown to the core with the queue's gate left out; when the core
  binds them, the queue removes the gate (a JSON patch guarded by a ``test`` op) and binds the pod
  to the node the core chose.

Limits (:mod:`fluxinfra.queue.policy`): a unit is handed to the core only when its namespace
queue has room; until then it is ``Queued`` with the reason ``QuotaExceeded``.

Releasing (no leaked allocation): a finished pod of a gated unit releases its share at once (the
core's partial cancel). A finished pod of a Job releases its slot unless the Job will start
another pod in its place (``min(parallelism, completions - succeeded)`` still to run); a Job that
completes, fails or is deleted releases every slot; a FluxJob deleted by hand releases every
slot and its running pods stay counted as what they are, pods running on their nodes.

Restart: FluxJobs, Jobs and pods are the durable queue. An admitted Job's slots are rebuilt from
its ``fluxinfra.io/admitted-nodes`` (written together with ``suspend: false``) as running slot
pods on those nodes, its running pods shown as those slots, nothing matched again.
"""

from __future__ import annotations

import contextlib
import copy
import itertools
import logging
import queue
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from fluxinfra.kube.resources import pod_requests
from fluxinfra.queue import api as q
from fluxinfra.queue import objects
from fluxinfra.queue.kube import QueueApi
from fluxinfra.queue.metrics import QueueMetrics
from fluxinfra.queue.placement import jobspec_text
from fluxinfra.queue.policy import Usage, demand, limits_of, order_key, over
from fluxinfra.scheduler.binder import done
from fluxinfra.scheduler.events import micro_time, parse_time
from fluxinfra.scheduler.kube import ApiError
from fluxinfra.scheduler.pods import (
    ANNOT_DURATION,
    LABEL_GROUP,
    LABEL_GROUP_SIZE,
    LABEL_PODGROUP,
    PodInfo,
    PodSpecError,
    parse_duration,
    pod_info,
)

__all__ = ["QueueConfig", "QueueCore", "Unit"]

log = logging.getLogger(__name__)

SLOT_PREFIX = "fluxjob-slot:"
_TERMINAL = ("Succeeded", "Failed")


@dataclass
class QueueConfig:
    scheduler_name: str = "fluxion"
    #: seconds a FluxJob is expected to run without ``fluxinfra.io/duration``
    default_duration: int = 3600
    #: API writes in flight at once (FluxJob creates and status patches, Job patches, pod
    #: binds). Above 1 the loop never waits for them: each is handed to a pool of this many
    #: threads and its result applied in a later cycle. 1: each made in place, in order.
    workers: int = 16
    #: who reports (Events' reportingController / reportingInstance)
    instance: str = "fluxion-queue"
    #: send Events from a background thread (bounded; dropped and counted when full), so a
    #: slow API server does not slow admission, as the scheduler's binder does
    async_events: bool = False


@dataclass
class Slot:
    index: int
    node: str = ""        #: where Fluxion placed it ("" until placed)
    pod: str = ""         #: uid of the real pod shown to the core as this slot
    released: bool = False


@dataclass
class Unit:
    """One FluxJob and what the queue knows of its work."""

    namespace: str
    name: str
    kind: str                      #: "job" | "pods"
    owner_uid: str                 #: the Job's uid, or the group key of gated pods
    queue: str
    priority: int
    duration: int
    count: int
    requests: dict[str, int]
    uid: str = ""
    created: float = 0.0
    status: dict[str, Any] = field(default_factory=dict)
    written: dict[str, Any] = field(default_factory=dict)
    fed: bool = False              #: handed to the core (counts against the queue's limits)
    slots: list[Slot] = field(default_factory=list)
    members: set[str] = field(default_factory=set)   #: pods (gated units)
    attached: set[str] = field(default_factory=set)  #: every pod filed under it (pod_unit)
    admitting: bool = False
    core_group: str = ""           #: the key of its group in the scheduler core
    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def state(self) -> str:
        return self.status.get("state", "Queued")

    @property
    def group(self) -> str:
        """The label group of its slot pods (a label value: at most 63 characters)."""
        return f"fluxjob-{self.uid}"[:63]

    @property
    def placed(self) -> bool:
        return bool(self.slots) and all(s.node for s in self.slots if not s.released)


def _meta(obj: dict[str, Any]) -> dict[str, Any]:
    return obj.get("metadata") or {}


def _key(obj: dict[str, Any]) -> str:
    meta = _meta(obj)
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


def _controller(obj: dict[str, Any]) -> dict[str, Any]:
    return next((o for o in _meta(obj).get("ownerReferences") or [] if o.get("controller")), {})


def _gated(pod: dict[str, Any]) -> bool:
    return any(g.get("name") == q.GATE for g in (pod.get("spec") or {}).get("schedulingGates")
               or [])


def _condition(job: dict[str, Any], kind: str) -> bool:
    return any(c.get("type") == kind and c.get("status") == "True"
               for c in (job.get("status") or {}).get("conditions") or [])


def job_pods(job: dict[str, Any]) -> int:
    """How many pods a Job runs at once: its ``parallelism``, at most its ``completions``."""
    spec = job.get("spec") or {}
    parallelism = spec.get("parallelism")
    parallelism = 1 if parallelism is None else int(parallelism)
    completions = spec.get("completions")
    return parallelism if completions is None else min(parallelism, int(completions))


def still_needed(job: dict[str, Any]) -> int:
    """Pods the Job may still start at once (its pods holding a slot included)."""
    spec, status = job.get("spec") or {}, job.get("status") or {}
    if _condition(job, "Complete") or _condition(job, "Failed"):
        return 0
    parallelism = 1 if spec.get("parallelism") is None else int(spec["parallelism"])
    succeeded = int(status.get("succeeded") or 0)
    completions = spec.get("completions")
    if completions is None:  # a work queue: no new pods once one succeeded
        return parallelism if succeeded == 0 else 0
    return max(0, min(parallelism, int(completions) - succeeded))


def _now_text() -> str:
    return micro_time(time.time())[:19] + "Z"


def _pin(nodes: list[str], affinity: dict[str, Any] | None) -> dict[str, Any]:
    """Required node affinity narrowed to ``nodes``: one term per node (a ``metadata.name``
    field requirement takes exactly one value), each carrying the Job's own terms' needs."""
    affinity = copy.deepcopy(affinity or {})
    node_affinity = affinity.setdefault("nodeAffinity", {})
    required = node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
    own = (required or {}).get("nodeSelectorTerms") or [{}]
    terms = []
    for node in sorted(set(nodes)):
        pin = {"key": "metadata.name", "operator": "In", "values": [node]}
        for term in own:
            terms.append({**copy.deepcopy(term),
                          "matchFields": [*(term.get("matchFields") or []), pin]})
    node_affinity["requiredDuringSchedulingIgnoredDuringExecution"] = {"nodeSelectorTerms": terms}
    return affinity


class QueueBinder:
    """The core's Binder with the queue's units intercepted (see the module docstring)."""

    def __init__(self, owner: QueueCore, inner: Any) -> None:
        self.owner, self.inner = owner, inner

    def bind(self, assignments: list[tuple[PodInfo, str]]) -> list[Exception | None]:
        results: list[Exception | None] = [None] * len(assignments)
        plain: list[int] = []
        gated: list[int] = []
        for i, (pod, node) in enumerate(assignments):
            if pod.uid.startswith(SLOT_PREFIX):
                self.owner.slot_placed(pod.uid, node)
            elif pod.uid in self.owner.ungate:
                gated.append(i)
            else:
                plain.append(i)
        if gated:
            done = self.owner.pool_map(lambda i: self.owner.ungate_and_bind(*assignments[i]),
                                       gated)
            for i, result in zip(gated, done, strict=True):
                results[i] = result
        if plain:
            for i, result in zip(plain, self.inner.bind([assignments[i] for i in plain]),
                                 strict=True):
                results[i] = result
        return results

    def submit(self, assignments: list[tuple[PodInfo, str]]) -> list[Future]:
        """The core's asynchronous binding (its loop goes on while binds run): a slot pod's
        "bind" is done at once (its node recorded); a gated pod is un-gated and bound on the
        queue's pool; any other pod goes to the scheduler's binder. One future per pod, its
        result None (bound) or the error, as ``KubeBinder.submit``."""
        futures: list[Future | None] = [None] * len(assignments)
        plain: list[int] = []
        for i, (pod, node) in enumerate(assignments):
            if pod.uid.startswith(SLOT_PREFIX):
                self.owner.slot_placed(pod.uid, node)
                futures[i] = done(None)
            elif pod.uid in self.owner.ungate:
                futures[i] = self.owner.pool_submit(self.owner.ungate_and_bind, pod, node)
            else:
                plain.append(i)
        if plain:
            inner = getattr(self.inner, "submit", None)
            if inner is not None:
                started = inner([assignments[i] for i in plain])
            else:
                started = [done(r) for r in self.inner.bind([assignments[i] for i in plain])]
            for i, future in zip(plain, started, strict=True):
                futures[i] = future
        return futures  # type: ignore[return-value]

    def pod_event(self, pod: PodInfo, reason: str, note: str, action: str) -> None:
        unit = self.owner.unit_of_pod(pod.uid)
        if unit is not None and reason in ("Unschedulable", "InvalidPod"):
            self.owner.fail(unit, "Unsatisfiable" if reason == "Unschedulable" else "InvalidPod",
                            note)
        if not pod.uid.startswith(SLOT_PREFIX):
            self.inner.pod_event(pod, reason, note, action)

    def pod_unschedulable(self, pod: PodInfo, message: str) -> None:
        if not pod.uid.startswith(SLOT_PREFIX):
            self.inner.pod_unschedulable(pod, message)

    def podgroup_event(self, namespace: str, name: str, uid: str, reason: str,
                       note: str) -> None:
        self.inner.podgroup_event(namespace, name, uid, reason, note)

    def podgroup_status(self, namespace: str, name: str, status: dict[str, Any]) -> None:
        self.inner.podgroup_status(namespace, name, status)

    def node_event(self, name: str, uid: str, reason: str, note: str) -> None:
        self.inner.node_event(name, uid, reason, note)

    def preempt(self, victim: PodInfo, preemptor: PodInfo, node: str) -> bool:
        return self.inner.preempt(victim, preemptor, node)

    def nominate(self, pod: PodInfo, node: str) -> None:
        if not pod.uid.startswith(SLOT_PREFIX):
            self.inner.nominate(pod, node)


class QueueCore:
    """The scheduler core with the queue in front of it; see the module docstring."""

    def __init__(self, core: Any, api: QueueApi, config: QueueConfig | None = None,
                 metrics: QueueMetrics | None = None,
                 wall: Callable[[], float] = time.time) -> None:
        self.core = core
        self.api = api
        self.config = config or QueueConfig()
        self.metrics = metrics or QueueMetrics()
        self.wall = wall
        core.binder = QueueBinder(self, core.binder)
        self._pool = ThreadPoolExecutor(self.config.workers, thread_name_prefix="queue") \
            if self.config.workers > 1 else None
        self.units: dict[str, Unit] = {}              # FluxJob key -> unit
        self.by_owner: dict[str, str] = {}            # Job uid / gated group key -> FluxJob key
        self.jobs: dict[str, dict[str, Any]] = {}     # Job uid -> Job
        self.queues: dict[str, dict[str, Any]] = {}   # ns/name -> FluxJobQueue
        self.priorities: dict[str, int] = {}          # PriorityClass -> value
        self.pods: dict[str, dict[str, Any]] = {}     # every pod seen, by uid
        self.pod_unit: dict[str, str] = {}            # pod uid -> FluxJob key
        self.shown: dict[str, str] = {}               # real pod uid -> uid the core knows it by
        self.ungate: set[str] = set()                 # gated pods handed to the core
        self.slot_pods: dict[str, tuple[str, int]] = {}  # slot uid -> (unit key, index)
        self.creating: set[str] = set()               # owners whose FluxJob is being created
        self._pending_restore: set[str] = set()       # admitted units rebuilt at start-up
        self._pending_events: list[dict[str, Any]] = []
        self._evented: dict[str, str] = {}            # unit -> state of its Event this cycle
        self._event_queue: queue.Queue[dict[str, Any] | None] | None = None
        self._event_sender: threading.Thread | None = None
        if self.config.async_events:
            self._event_queue = queue.Queue(maxsize=10_000)
            self._event_sender = threading.Thread(target=self._send_events,
                                                  name="queue-events", daemon=True)
            self._event_sender.start()
        self._startup_pods: dict[str, dict[str, Any]] = {}
        self._unreadable: dict[tuple[str, str], str] = {}  # (kind, object) -> why skipped
        self._last_queued = 0.0
        # API writes in flight: results come back on ``_done`` and are applied by the loop
        self._done: queue.SimpleQueue[tuple[Callable[[Any], None], Any]] = queue.SimpleQueue()
        self._in_flight = 0
        self._binding: dict[str, Slot] = {}           # pod uid -> slot it is being bound to
        self._writing: set[str] = set()               # FluxJobs whose status is being written
        self._waker: Callable[[], None] | None = None
        # What a cycle looks at, kept as it changes, so that a cycle costs what changed and
        # not what the cluster holds (every Job, pod and FluxJob ever seen):
        self._new_jobs: set[str] = set()          # Job uids that may need a FluxJob
        self._new_groups: set[str] = set()        # gated groups that may need one
        self._gated_index: dict[str, set[str]] = {}  # gated group -> pods not in a unit yet
        self._pod_group: dict[str, str] = {}      # pod uid -> its key in _gated_index
        self._unfed: set[str] = set()             # units not handed to the core yet
        self._to_admit: set[str] = set()          # Job units whose slots were placed
        self._unbound: dict[str, None] = {}       # pods of admitted Jobs waiting for a bind
        self._reserved_keys: set[str] = set()     # units in state Reserved
        self._dirty: set[str] = set()             # units whose status may need a write
        self._group_unit: dict[str, str] = {}     # core group key -> unit key (fed units)
        self._seq = itertools.count(1)
        self._seen: dict[str, int] = {}           # Job uid / gated group -> arrival number
        self._wake_lock = threading.Lock()
        self._wake_owed = False                       # a wake sent, the loop not yet collecting
        self.loaded = False
        self.metrics.depth.set_function(lambda: sum(
            1 for u in self.units.values() if u.state in ("Queued", "Reserved")))

    def __getattr__(self, name: str) -> Any:
        return getattr(self.core, name)

    # ==== plumbing ================================================================================
    def pool_submit(self, fn: Callable[..., Any], *args: Any) -> Future:
        """``fn(*args)`` on the queue's pool (at once without one); its Future."""
        if self._pool is None:
            return done(fn(*args))
        return self._pool.submit(fn, *args)

    def pool_map(self, fn: Callable[[Any], Any], items: list[Any]) -> list[Any]:
        if self._pool is None or len(items) < 2:
            return [fn(i) for i in items]
        return list(self._pool.map(fn, items))

    def _write(self, call: Callable[[], Any], then: Callable[[Any], None]) -> None:
        """Make one API write; ``then(result)`` runs on the loop's thread once it is back.

        With a pool the loop does not wait: the write joins the pool's queue (at most
        ``workers`` in flight; the rest wait their turn in submission order) and ``then``
        runs at the start of a later cycle (:meth:`collect`). ``call`` returns its
        ``ApiError`` rather than raising it.
        """
        if self._pool is None:
            then(_guarded(call))
            return
        self._in_flight += 1
        self._pool.submit(self._run_write, call, then)

    def _run_write(self, call: Callable[[], Any], then: Callable[[Any], None]) -> None:
        """On a pool thread: the write, its result handed to the loop, and the loop woken
        (once until it collects): the answer to a write is work no watch event announces
        (a Job's un-suspend answered after its watch event came, the last write of a burst)."""
        self._done.put((then, _guarded(call)))
        with self._wake_lock:
            if self._wake_owed:
                return
            self._wake_owed = True
        waker = self._waker
        if waker is not None:
            waker()

    def set_waker(self, waker: Callable[[], None] | None) -> None:
        """The daemon loop's waker (the runner sets it): the core's, and the queue's for the
        answers of its writes."""
        self._waker = waker
        self.core.set_waker(waker)

    def next_due(self, now: int) -> float | None:
        """The core's timed work; and, with writes out and no waker to say when they are
        back, a short poll for their answers."""
        due = self.core.next_due(now)
        if self._in_flight and self._waker is None:
            due = 0.05 if due is None else min(due, 0.05)
        return due

    def collect(self, wait: float = 0.0) -> int:
        """Apply the results of the writes that are back (waiting up to ``wait`` seconds for
        every write in flight to return); returns how many are still in flight."""
        deadline = time.monotonic() + wait
        with self._wake_lock:
            self._wake_owed = False  # a write answered from now on wakes the loop again
        while self._in_flight:
            try:
                left = deadline - time.monotonic()
                then, result = (self._done.get(timeout=left) if left > 0
                                else self._done.get_nowait())
            except queue.Empty:
                break
            self._in_flight -= 1
            then(result)
        return self._in_flight

    def settle(self, deadline: float) -> int:
        """Shutdown (the runner stopped): the core's binds in flight, then the queue's own
        writes, are taken in until ``deadline`` (``time.monotonic()``), and the FluxJob
        Events queued by then are sent; returns how many binds, writes and Events are left."""
        left = self.core.settle(deadline)
        left += self.collect(wait=max(0.0, deadline - time.monotonic()))
        if self._event_queue is None or self._event_sender is None:
            return left
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
        return left + unsent

    def close(self) -> None:
        if self._event_queue is not None:
            self._event_queue.put(None)
        if self._pool is not None:
            self._pool.shutdown(wait=True)

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

    def unit_of_pod(self, uid: str) -> Unit | None:
        if uid in self.slot_pods:
            return self.units.get(self.slot_pods[uid][0])
        key = self.pod_unit.get(uid)
        return self.units.get(key) if key else None

    def _core_pod(self, etype: str, obj: dict[str, Any], now: int) -> None:
        if self.loaded:
            self.core.on_pod(etype, obj, now)
        elif etype != "DELETED":
            self._startup_pods[_meta(obj).get("uid", _key(obj))] = obj

    # ==== the runner's side ======================================================================
    def load(self, nodes: Iterable[dict[str, Any]], podgroups: Iterable[dict[str, Any]],
             pods: Iterable[dict[str, Any]], now: int = 0) -> None:
        """Start-up: the queue's kinds arrived through ``on_object``; route every pod, rebuild
        each admitted Job's slots, then let the core rebuild its books from all of it."""
        self._startup_pods = {}
        for unit in self.units.values():
            self._restore(unit)
        for pod in pods:
            self.on_pod("ADDED", pod, now)
        self._feed(now)
        startup = list(self._startup_pods.values())
        self.loaded = True
        self.core.load(nodes, podgroups, startup, now=now)
        self._startup_pods = {}

    def on_node(self, etype: str, node: dict[str, Any], now: int = 0) -> None:
        self.core.on_node(etype, node, now)

    def on_podgroup(self, etype: str, obj: dict[str, Any]) -> None:
        self.core.on_podgroup(etype, obj)

    def on_object(self, kind: str, etype: str, obj: dict[str, Any], now: int = 0) -> None:
        if kind in objects.KINDS and not self._readable(kind, etype, obj):
            return
        if kind == "jobs":
            self._on_job(etype, obj, now)
        elif kind == "fluxjobs":
            self._on_fluxjob(etype, obj, now)
        elif kind == "fluxjobqueues":
            if etype == "DELETED":
                self.queues.pop(_key(obj), None)
            else:
                self.queues[_key(obj)] = obj
        elif kind == "priorityclasses":
            name = _meta(obj).get("name", "")
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
        self._reserved(report, now)
        self._admit(now)
        self._bind_job_pods(now)
        self._write_status()
        return report

    # ==== Jobs and FluxJobs =======================================================================
    def _ours(self, job: dict[str, Any]) -> bool:
        """A Job the webhook queued: labelled with a queue, not run by another controller."""
        meta = _meta(job)
        queue = (meta.get("labels") or {}).get(q.LABEL_QUEUE_NAME)
        owner = _controller(job).get("kind")
        return bool(queue) and queue != q.OPT_OUT_VALUE and owner in (None, "CronJob")

    def _on_job(self, etype: str, job: dict[str, Any], now: int) -> None:
        uid = str(_meta(job).get("uid", ""))
        if etype == "DELETED":
            self.jobs.pop(uid, None)
            self._new_jobs.discard(uid)
            self._seen.pop(uid, None)
            unit = self.units.get(self.by_owner.get(uid, ""))
            if unit is not None:
                self._release_all(unit, now)
                self._finish(unit, "Failed" if unit.state not in ("Finished", "Failed")
                             else unit.state, "JobDeleted", "the Job was deleted")
            return
        if uid not in self.jobs:
            self._seen[uid] = next(self._seq)
        self.jobs[uid] = job
        unit = self.units.get(self.by_owner.get(uid, ""))
        if unit is None:
            self._new_jobs.add(uid)  # the next cycle sees whether it needs a FluxJob
            return
        if _condition(job, "Complete"):
            self._release_all(unit, now)
            self._finish(unit, "Finished", "JobComplete", "the Job completed")
        elif _condition(job, "Failed"):
            self._release_all(unit, now)
            reason = next((c.get("reason") for c in job["status"]["conditions"]
                           if c.get("type") == "Failed"), "") or "JobFailed"
            self._finish(unit, "Failed", reason, "the Job failed")
        else:
            self._retain(unit, now)

    def _on_fluxjob(self, etype: str, obj: dict[str, Any], now: int) -> None:
        key = _key(obj)
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
            self._unfed.add(key)
            ours = unit.owner_uid in self.creating
            self.creating.discard(unit.owner_uid)
            if unit.kind == "pods":
                for uid in self._gated_index.pop(unit.owner_uid, set()):
                    self._pod_group.pop(uid, None)
                    if _gated(self.pods.get(uid) or {}):
                        unit.members.add(uid)
                        self._attach(uid, unit)
            if self.loaded:
                self._restore(unit)
        else:
            unit.uid = unit.uid or str(_meta(obj).get("uid", ""))
        status = obj.get("status") or {}
        if not unit.status and status:
            unit.status = dict(status)
            unit.written = dict(status)
            self._track(unit)
        elif ours and not unit.status:
            self._transition(unit, "Queued", "Created", f"waiting in queue {unit.queue!r}",
                             queuedAt=_now_text())

    def _unit_from(self, obj: dict[str, Any]) -> Unit | None:
        meta, spec = _meta(obj), obj.get("spec") or {}
        owner = spec.get("owner") or {}
        pod_sets = spec.get("podSets") or [{}]
        if not owner.get("uid"):
            return None
        unit = Unit(namespace=meta.get("namespace", ""), name=meta.get("name", ""),
                    kind="job" if owner.get("kind") == "Job" else "pods",
                    owner_uid=str(owner["uid"]), queue=spec.get("queueName") or q.DEFAULT_QUEUE,
                    priority=int(spec.get("priority") or 0),
                    duration=int(spec.get("duration") or self.config.default_duration),
                    count=sum(int(p.get("count") or 0) for p in pod_sets),
                    requests=_amounts(pod_sets[0].get("requests") or {}),
                    uid=str(meta.get("uid", "")),
                    created=parse_time(spec.get("queuedAt") or meta.get("creationTimestamp")))
        return unit

    def _duration(self, annotations: dict[str, str]) -> int:
        try:
            if ANNOT_DURATION in annotations:
                return parse_duration(annotations[ANNOT_DURATION])
        except PodSpecError:
            pass  # the webhook refused these; a pre-existing one runs with the default
        return self.config.default_duration

    def _priority(self, spec: dict[str, Any]) -> int:
        if spec.get("priority") is not None:
            return int(spec["priority"])
        return self.priorities.get(spec.get("priorityClassName") or "", 0)

    def _create_fluxjobs(self, now: int) -> None:
        """A FluxJob for every queued Job and gated group that has none (the created object
        is taken as soon as the create returns, or from the watch if that is first)."""
        todo: list[dict[str, Any]] = []
        # only Jobs and groups that changed since (a Job's next event brings it back)
        for uid in sorted(self._new_jobs, key=self._arrived):
            job = self.jobs.get(uid)
            if job is None or uid in self.by_owner or uid in self.creating:
                continue
            spec = job.get("spec") or {}
            annotations = _meta(job).get("annotations") or {}
            if (not self._ours(job) or not spec.get("suspend")
                    or q.ANNOT_ADMITTED_NODES in annotations):
                continue
            todo.append(self._job_fluxjob(job))
            self.creating.add(uid)
        self._new_jobs.clear()
        for group_key in sorted(self._new_groups, key=self._arrived):
            if group_key in self.by_owner or group_key in self.creating:
                continue
            pods = self._gated_group_pods(group_key)
            if pods:
                todo.append(self._pods_fluxjob(group_key, pods))
                self.creating.add(group_key)
        self._new_groups.clear()
        for body in todo:
            self._write(lambda body=body: self._create(body),
                        lambda created, body=body: self._created(body, created, now))

    def _created(self, body: dict[str, Any], created: Any, now: int) -> None:
        if isinstance(created, dict):
            self._on_fluxjob("ADDED", created, now)
        elif isinstance(created, Exception) and not getattr(created, "conflict", False):
            owner = body["spec"]["owner"]  # try again next cycle
            self.creating.discard(owner["uid"])
            (self._new_jobs if owner["kind"] == "Job" else self._new_groups).add(owner["uid"])
        # 409: it exists; the watch brings it

    def _create(self, body: dict[str, Any]) -> dict[str, Any] | ApiError:
        try:
            return self.api.create_fluxjob(body["metadata"]["namespace"], body)
        except ApiError as exc:
            if not exc.conflict:
                log.warning("creating FluxJob %s failed: %s", _key(body), exc)
                self.metrics.errors.inc(source="create")
            return exc

    def _job_fluxjob(self, job: dict[str, Any]) -> dict[str, Any]:
        meta = _meta(job)
        template = (job.get("spec") or {}).get("template") or {}
        pod = self._template_pod(job, "probe")
        count = job_pods(job)
        requests = pod_requests(pod)
        duration = self._duration((template.get("metadata") or {}).get("annotations") or {})
        owner = {"apiVersion": "batch/v1", "kind": "Job", "name": meta["name"],
                 "uid": meta["uid"]}
        body = q.fluxjob_object(
            meta.get("namespace", ""), q.fluxjob_name("Job", meta["name"]),
            owners=[{**owner, "controller": True, "blockOwnerDeletion": False}],
            queue=(meta.get("labels") or {}).get(q.LABEL_QUEUE_NAME, q.DEFAULT_QUEUE),
            pod_sets=[{"name": "main", "count": count, "requests": _quantities(requests)}],
            priority=self._priority(template.get("spec") or {}), duration=duration,
            jobspec=jobspec_text(pod, count, duration), queued_at=self._queued_at())
        body["spec"]["owner"] = owner
        return body

    def _queued_at(self) -> str:
        """Now, to the microsecond, strictly after the last one (FCFS within one second)."""
        self._last_queued = max(self.wall(), self._last_queued + 1e-6)
        return micro_time(self._last_queued)

    def _arrived(self, key: str) -> int:
        """The order in which Jobs and gated groups were first seen: FluxJobs are made (and
        queued) in it."""
        return self._seen.get(key, 0)

    def _index_gated(self, uid: str, etype: str, pod: dict[str, Any]) -> None:
        """Keep ``_gated_index``: gated pods in no unit yet, by their group."""
        old = self._pod_group.pop(uid, None)
        if old is not None:
            members = self._gated_index.get(old)
            if members is not None:
                members.discard(uid)
                if not members:
                    del self._gated_index[old]
                    self._seen.pop(old, None)
        if etype != "DELETED" and uid not in self.pod_unit and _gated(pod):
            group = _gated_group(pod)
            if group not in self._gated_index:
                self._seen[group] = next(self._seq)
            self._gated_index.setdefault(group, set()).add(uid)
            self._pod_group[uid] = group
            self._new_groups.add(group)

    def _gated_group_pods(self, group_key: str) -> list[dict[str, Any]]:
        """The group's gated pods still waiting (not finished, not being deleted)."""
        pods = []
        for uid in self._gated_index.get(group_key, ()):
            pod = self.pods.get(uid)
            if (pod is not None and uid not in self.pod_unit and _gated(pod)
                    and (pod.get("status") or {}).get("phase") not in _TERMINAL
                    and not _meta(pod).get("deletionTimestamp")):
                pods.append(pod)
        return pods

    def _pods_fluxjob(self, group_key: str, pods: list[dict[str, Any]]) -> dict[str, Any]:
        first = min(pods, key=lambda p: (parse_time(_meta(p).get("creationTimestamp")),
                                         _meta(p).get("name", "")))
        meta = _meta(first)
        labels = meta.get("labels") or {}
        kind, name = _group_kind_name(first)
        count = len(pods) if kind == "pod" else max(len(pods), _group_size(first))
        requests = pod_requests(first)
        duration = self._duration(meta.get("annotations") or {})
        owner = {"apiVersion": "v1", "kind": "Pod" if kind == "pod" else "PodGroup"
                 if kind == "podgroup" else "Group", "name": name, "uid": group_key}
        refs = [{"apiVersion": "v1", "kind": "Pod", "name": _meta(p)["name"],
                 "uid": _meta(p)["uid"], "blockOwnerDeletion": False} for p in pods]
        body = q.fluxjob_object(
            meta.get("namespace", ""), q.fluxjob_name(kind, name), owners=refs,
            queue=labels.get(q.LABEL_QUEUE_NAME, q.DEFAULT_QUEUE),
            pod_sets=[{"name": name, "count": count, "requests": _quantities(requests)}],
            priority=self._priority(first.get("spec") or {}), duration=duration,
            jobspec=jobspec_text(first, count, duration), queued_at=self._queued_at())
        body["spec"]["owner"] = owner
        return body

    def _template_pod(self, job: dict[str, Any], name: str) -> dict[str, Any]:
        meta = _meta(job)
        template = (job.get("spec") or {}).get("template") or {}
        tmeta = template.get("metadata") or {}
        # one level deep: the queue sets top-level fields only; the core only reads the rest
        return {"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": name, "namespace": meta.get("namespace", ""),
                             "labels": dict(tmeta.get("labels") or {}),
                             "annotations": dict(tmeta.get("annotations") or {})},
                "spec": dict(template.get("spec") or {}), "status": {"phase": "Pending"}}

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
            self._pending_events.append(self._event_body(
                regarding, "Reading", f"Invalid{objects.KINDS[kind]}", "Warning",
                f"skipped by the queue: {why}"))
        return False

    # ==== pods ====================================================================================
    def on_pod(self, etype: str, obj: dict[str, Any], now: int = 0) -> None:
        if objects.pod_problem(obj):
            # the core reports it (log line; an InvalidPod Event on a pod of ours)
            self.core.on_pod(etype, obj, now)
            return
        meta = _meta(obj)
        uid = str(meta.get("uid") or _key(obj))
        if etype == "DELETED":
            self.pods.pop(uid, None)
        else:
            self.pods[uid] = obj
        unit = self._unit_for_pod(uid, obj)
        self._index_gated(uid, etype, obj)
        if unit is None:
            if etype == "DELETED" or not _gated(obj):
                self._core_pod(etype, obj, now)
            # a gated pod waits for its FluxJob (made next cycle) before the core sees it
            return
        if unit.kind == "pods":
            self._gated_pod(unit, uid, etype, obj, now)
        else:
            self._job_pod(unit, uid, etype, obj, now)

    def _unit_for_pod(self, uid: str, pod: dict[str, Any]) -> Unit | None:
        key = self.pod_unit.get(uid)
        if key is not None:
            return self.units.get(key)
        owner = _controller(pod)
        if owner.get("kind") == "Job" and owner.get("uid") in self.by_owner:
            unit = self.units.get(self.by_owner[owner["uid"]])
            if unit is not None and unit.slots:
                self._attach(uid, unit)
                return unit
            return None
        if _gated(pod):
            key = self.by_owner.get(_gated_group(pod))
            if key is not None and key in self.units:
                self._attach(uid, self.units[key])
                self.units[key].members.add(uid)
                return self.units[key]
        return None

    def _gated_pod(self, unit: Unit, uid: str, etype: str, obj: dict[str, Any],
                   now: int) -> None:
        if etype == "DELETED":
            self._detach(uid)
            unit.members.discard(uid)
            self.ungate.discard(uid)
            self._core_pod(etype, obj, now)
        elif _gated(obj):
            if unit.fed:
                self.ungate.add(uid)
                self._core_pod(etype, _without_gate(obj, unit.created), now)
        else:
            self.ungate.discard(uid)
            self._core_pod(etype, obj, now)
        self._pods_state(unit)

    def _job_pod(self, unit: Unit, uid: str, etype: str, obj: dict[str, Any], now: int) -> None:
        slot = next((s for s in unit.slots if s.pod == uid), None)
        phase = (obj.get("status") or {}).get("phase")
        node = (obj.get("spec") or {}).get("nodeName") or ""
        if etype == "DELETED" or phase in _TERMINAL:
            if etype == "DELETED":
                self._detach(uid)
            self._unbound.pop(uid, None)
            if slot is not None:
                slot.pod = ""
                self._retain(unit, now, finished=slot)
            elif uid in self.shown:
                self._core_pod(etype, obj, now)
            self._job_state(unit)
            return
        if slot is None and node:
            pending = self._binding.get(uid)  # our bind, seen on the watch before it returned
            if pending is not None and pending.node == node and not (pending.pod
                                                                     or pending.released):
                slot = pending
            else:  # bound by someone else: a free slot on its node no bind of ours is taking
                others = {id(s) for u, s in self._binding.items() if u != uid}
                slot = next((s for s in unit.slots if not s.released and not s.pod
                             and s.node == node and id(s) not in others), None)
            if slot is None:  # bound where no slot is: count it as what it is
                if any(not s.released for s in unit.slots):
                    log.warning("pod %s of %s runs on %s outside its slots", _key(obj),
                                unit.key, node)
                # else its Job ended or went, and its slots with it: a pod still ending
                # counts as itself, as the release said
                self.shown[uid] = uid
                self._core_pod(etype, obj, now)
                return
            slot.pod = uid
        if slot is not None:
            self._unbound.pop(uid, None)
            self.shown[uid] = self._slot_uid(unit, slot.index)
            self._core_pod("MODIFIED", self._as_slot(unit, slot, obj), now)
        elif not node:
            self._unbound[uid] = None  # the Job controller's new pod: to a slot's node
        self._job_state(unit)

    # ==== slot pods ===============================================================================
    def _slot_uid(self, unit: Unit, index: int) -> str:
        return f"{SLOT_PREFIX}{unit.uid}:{index}"

    def _slot_labels(self, unit: Unit, labels: dict[str, str]) -> dict[str, str]:
        labels = {k: v for k, v in labels.items() if k not in (LABEL_PODGROUP, LABEL_GROUP,
                                                               LABEL_GROUP_SIZE)}
        labels.update({LABEL_GROUP: unit.group, LABEL_GROUP_SIZE: str(unit.count),
                       q.LABEL_FLUXJOB: unit.name})
        return labels

    def _slot_pod(self, unit: Unit, slot: Slot) -> dict[str, Any] | None:
        """The pod the core sees for an empty slot: the Job's template, placed or not."""
        job = self.jobs.get(unit.owner_uid)
        if job is None:
            return None
        pod = self._template_pod(job, f"{unit.name}-slot-{slot.index}")
        meta, spec = pod["metadata"], pod["spec"]
        meta["uid"] = self._slot_uid(unit, slot.index)
        meta["creationTimestamp"] = micro_time(unit.created)
        meta["labels"] = self._slot_labels(unit, meta["labels"])
        meta["annotations"][ANNOT_DURATION] = f"{unit.duration}s"
        spec["schedulerName"] = self.config.scheduler_name
        spec["priority"] = unit.priority
        spec.pop("schedulingGates", None)
        if slot.node:
            spec["nodeName"] = slot.node
            pod["status"]["phase"] = "Running"
        self.slot_pods[meta["uid"]] = (unit.key, slot.index)
        return pod

    def _as_slot(self, unit: Unit, slot: Slot, pod: dict[str, Any]) -> dict[str, Any]:
        """A real pod shown to the core as the slot it took: same uid and group as the slot."""
        shown = copy.copy(pod)
        meta = dict(_meta(pod))
        meta["uid"] = self._slot_uid(unit, slot.index)
        meta["labels"] = self._slot_labels(unit, dict(meta.get("labels") or {}))
        shown["metadata"] = meta
        return shown

    def slot_placed(self, slot_uid: str, node: str) -> None:
        key, index = self.slot_pods[slot_uid]
        unit = self.units.get(key)
        if unit is not None:
            unit.slots[index].node = node
            self._to_admit.add(key)

    def _restore(self, unit: Unit) -> None:
        """An admitted Job's slots from its annotation (restart, or a FluxJob seen late)."""
        if unit.kind != "job" or unit.slots:
            return
        job = self.jobs.get(unit.owner_uid)
        nodes = ((_meta(job).get("annotations") or {}).get(q.ANNOT_ADMITTED_NODES, "")
                 if job else "")
        if not nodes:
            return
        unit.slots = [Slot(i, n) for i, n in enumerate(nodes.split(","))]
        unit.fed = True
        self._unfed.discard(unit.key)
        self._group_unit[self._core_group(unit)] = unit.key
        if unit.state in ("Queued", "Reserved"):  # admitted, but the status never said so
            placed = [s.node for s in unit.slots]
            self._transition(unit, "Admitted", "Admitted", f"on {_short(placed)} (read back "
                             "from the Job)", nodes=placed, estimatedStart=None)
        for slot in unit.slots:
            self.slot_pods[self._slot_uid(unit, slot.index)] = (unit.key, slot.index)
        # running pods take their slots (on_pod); what no pod took is held as a running slot
        self._pending_restore.add(unit.key)

    # ==== feeding the core ========================================================================
    def _usage(self) -> dict[str, Usage]:
        used: dict[str, Usage] = {}
        for unit in self.units.values():
            if unit.fed and unit.state not in ("Finished", "Failed"):
                used.setdefault(f"{unit.namespace}/{unit.queue}", Usage()).add(
                    demand(unit.requests, unit.count))
        return used

    def _feed(self, now: int) -> None:
        """Hand the core every unit its queue has room for, in serve order."""
        for key in sorted(self._pending_restore):
            unit = self.units.get(key)
            if unit is not None:
                for slot in unit.slots:
                    if not slot.pod and not slot.released:
                        pod = self._slot_pod(unit, slot)
                        if pod is not None:
                            self._core_pod("ADDED", pod, now)
                self._retain(unit, now)
        self._pending_restore = set()
        waiting = []
        for key in list(self._unfed):
            unit = self.units.get(key)
            if unit is None or unit.fed or unit.state not in ("Queued", "Reserved"):
                self._unfed.discard(key)  # a unit going back to waiting is added again
            else:
                waiting.append(unit)
        if not waiting:
            return
        waiting.sort(key=lambda u: order_key(u.priority, u.created, u.key))
        used: dict[str, Usage] | None = None  # counted once a queue with limits asks
        for unit in waiting:
            queue_key = f"{unit.namespace}/{unit.queue}"
            queue = self.queues.get(queue_key)
            if queue is None and unit.queue != q.DEFAULT_QUEUE:
                self._transition(unit, "Queued", "QueueNotFound",
                                 f"no FluxJobQueue {unit.queue!r} in namespace "
                                 f"{unit.namespace!r}; create it or use the default queue")
                continue
            if unit.count < 1:
                self._transition(unit, "Queued", "NoPods", "the Job runs no pods "
                                 "(parallelism 0)")
                continue
            ask = demand(unit.requests, unit.count)
            if queue is not None:  # a FluxJobQueue: its limits count what is fed already
                used = self._usage() if used is None else used
                problem = over(limits_of(queue), used.get(queue_key, Usage()), ask)
                if problem is not None:
                    self._transition(unit, "Queued", "QuotaExceeded",
                                     f"queue {unit.queue!r}: {problem}")
                    continue
            if not self._hand_over(unit, now):
                continue
            if used is not None:
                used.setdefault(queue_key, Usage()).add(ask)
            self._transition(unit, "Queued", "WaitingForResources",
                             "waiting for Fluxion to place it")

    def _hand_over(self, unit: Unit, now: int) -> bool:
        if unit.kind == "job":
            if unit.owner_uid not in self.jobs:
                return False
            unit.slots = [Slot(i) for i in range(unit.count)]
            pods = [self._slot_pod(unit, slot) for slot in unit.slots]
            unit.fed = True
            for pod in pods:
                if pod is not None:
                    self._core_pod("ADDED", pod, now)
        else:
            unit.fed = True
            for uid in list(unit.members):
                pod = self.pods.get(uid)
                if pod is not None and _gated(pod):
                    self.ungate.add(uid)
                    self._core_pod("ADDED", _without_gate(pod, unit.created), now)
        self._unfed.discard(unit.key)
        self._group_unit[self._core_group(unit)] = unit.key
        return True

    # ==== after the core's cycle =================================================================
    def _reserved(self, report: Any, now: int) -> None:
        reservations = getattr(report, "reservations", {}) or {}
        for group_key, at in reservations.items():
            unit = self._unit_of_group(group_key)
            if unit is None or unit.state not in ("Queued", "Reserved"):
                continue
            start = micro_time(self.wall() + max(0, at - now))[:19] + "Z"
            if unit.status.get("estimatedStart") != start or unit.state != "Reserved":
                self._transition(unit, "Reserved", "Reserved",
                                 f"Fluxion reserved its resources from {start}",
                                 estimatedStart=start)
        for key in list(self._reserved_keys):
            unit = self.units.get(key)
            if unit is None:
                self._reserved_keys.discard(key)
            elif unit.state == "Reserved" and self._core_group(unit) not in reservations:
                self._transition(unit, "Queued", "WaitingForResources",
                                 "waiting for Fluxion to place it", estimatedStart=None)

    def _unit_of_group(self, group_key: str) -> Unit | None:
        """The fed unit whose pods the core files under ``group_key``."""
        unit = self.units.get(self._group_unit.get(group_key, ""))
        if unit is not None and unit.fed and self._core_group(unit) == group_key:
            return unit
        for unit in self.units.values():  # a gated unit whose members came after its feed
            if unit.fed and self._core_group(unit) == group_key:
                self._group_unit[group_key] = unit.key
                return unit
        return None

    @staticmethod
    def _waiting(unit: Unit) -> bool:
        """Not admitted yet (an Unsatisfiable one too: the core tries it again when the
        cluster changes)."""
        return unit.state in ("Queued", "Reserved") or (
            unit.state == "Failed" and unit.status.get("reason") == "Unsatisfiable")

    def _core_group(self, unit: Unit) -> str:
        """The key the scheduler core files the unit's pods under (its own rule)."""
        if unit.kind == "job":
            return f"{unit.namespace}/{unit.group}"
        if not unit.core_group and unit.members:
            pod = self.pods.get(next(iter(unit.members)))
            if pod is not None:
                try:
                    unit.core_group = pod_info(pod).group_key
                except PodSpecError:
                    unit.core_group = "-"
        return unit.core_group

    def _admit(self, now: int) -> None:
        """Every Job whose slots are all placed: un-suspend it, pinned to its nodes."""
        ready = []
        for key in sorted(self._to_admit):  # the Jobs whose slots were placed since
            unit = self.units.get(key)
            if (unit is not None and unit.kind == "job" and unit.fed and unit.placed
                    and self._waiting(unit) and not unit.admitting):
                ready.append(unit)
        self._to_admit.clear()
        for unit in ready:
            unit.admitting = True
            self._write(lambda unit=unit: self._unsuspend(unit),
                        lambda error, unit=unit: self._admitted(unit, error, now))

    def _admitted(self, unit: Unit, error: Exception | None, now: int) -> None:
        unit.admitting = False
        if self.units.get(unit.key) is not unit or all(s.released for s in unit.slots):
            return  # released while the patch was out (Job or FluxJob deleted): nothing to do
        if error is None:
            nodes = [s.node for s in unit.slots]
            waited = max(0.0, self.wall() - unit.created)
            self.metrics.admitted.inc()
            self.metrics.wait.observe(waited)
            self._transition(unit, "Admitted", "Admitted",
                             f"{len(nodes)} pods on {len(set(nodes))} nodes: "
                             f"{_short(nodes)}", nodes=nodes, admittedAt=_now_text(),
                             estimatedStart=None)
        elif isinstance(error, ApiError) and error.not_found:
            self._release_all(unit, now)
            self._finish(unit, "Failed", "JobDeleted", "the Job is gone")
        else:  # transient: the slots stay held, admission is tried again next cycle
            self.metrics.errors.inc(source="admit")
            self._to_admit.add(unit.key)

    def _unsuspend(self, unit: Unit) -> Exception | None:
        job = self.jobs.get(unit.owner_uid)
        if job is None:
            return ApiError(404, "NotFound", "job gone")
        nodes = [s.node for s in unit.slots]
        template = (job.get("spec") or {}).get("template") or {}
        affinity = _pin(nodes, (template.get("spec") or {}).get("affinity"))
        patch = {"metadata": {"annotations": {q.ANNOT_ADMITTED_NODES: ",".join(nodes)}},
                 "spec": {"suspend": False, "template": {
                     "metadata": {"labels": {q.LABEL_FLUXJOB: unit.name}},
                     "spec": {"affinity": affinity,
                              "schedulerName": self.config.scheduler_name}}}}
        try:
            self.api.patch_job(unit.namespace, _meta(job)["name"], patch)
        except ApiError as exc:
            log.warning("admitting %s failed: %s", unit.key, exc)
            return exc
        return None

    def _bind_job_pods(self, now: int) -> None:
        """Pods the Job controller made for an admitted Job: each to a free slot's node."""
        todo: list[tuple[Unit, Slot, dict[str, Any]]] = []
        taken = {id(s) for s in self._binding.values()}
        for uid in list(self._unbound):  # pods seen without a node since
            unit = self.units.get(self.pod_unit.get(uid, ""))
            pod = self.pods.get(uid)
            if (unit is None or pod is None or unit.kind != "job"
                    or (pod.get("spec") or {}).get("nodeName")
                    or any(s.pod == uid for s in unit.slots)
                    or (pod.get("status") or {}).get("phase") in _TERMINAL
                    or _meta(pod).get("deletionTimestamp")):
                del self._unbound[uid]
                continue
            if not unit.placed or uid in self._binding:
                continue
            slot = next((s for s in unit.slots if not s.released and not s.pod
                         and id(s) not in taken), None)
            if slot is None:
                continue  # more pods than slots (parallelism raised): they wait
            del self._unbound[uid]
            self._binding[uid] = slot
            taken.add(id(slot))
            todo.append((unit, slot, pod))
        for unit, slot, pod in todo:
            self._write(lambda pod=pod, node=slot.node: self._bind_one(pod, node),
                        lambda error, unit=unit, slot=slot, pod=pod:
                        self._bound(unit, slot, pod, error, now))

    def _bound(self, unit: Unit, slot: Slot, pod: dict[str, Any], error: Exception | None,
               now: int) -> None:
        uid = _meta(pod)["uid"]
        self._binding.pop(uid, None)
        if error is not None:
            self.metrics.errors.inc(source="bind")
            self._unbound[uid] = None  # tried again next cycle
            return
        if slot.released or slot.pod or any(s.pod == uid for s in unit.slots):
            return  # the watch showed it bound first (on_pod gave it a slot) or it is gone
        slot.pod = uid
        bound = copy.deepcopy(pod)
        bound["spec"]["nodeName"] = slot.node
        self.shown[uid] = self._slot_uid(unit, slot.index)
        self._core_pod("MODIFIED", self._as_slot(unit, slot, bound), now)

    def _bind_one(self, pod: dict[str, Any], node: str) -> Exception | None:
        meta = _meta(pod)
        try:
            self.api.bind(meta["namespace"], meta["name"], meta["uid"], node)
        except ApiError as exc:
            return exc
        return None

    def ungate_and_bind(self, pod: PodInfo, node: str) -> Exception | None:
        """A gated pod the core placed: remove the gate (guarded), then bind it."""
        obj = self.pods.get(pod.uid)
        if obj is not None and _gated(obj):
            gates = obj["spec"]["schedulingGates"]
            index = next(i for i, g in enumerate(gates) if g.get("name") == q.GATE)
            ops = [{"op": "test", "path": f"/spec/schedulingGates/{index}/name",
                    "value": q.GATE},
                   {"op": "remove", "path": f"/spec/schedulingGates/{index}"}]
            try:
                self.api.patch_pod(pod.namespace, pod.name, ops)
            except ApiError as exc:
                return exc
        try:
            self.api.bind(pod.namespace, pod.name, pod.uid, node)
        except ApiError as exc:
            return exc
        return None

    # ==== releasing ===============================================================================
    def _retain(self, unit: Unit, now: int, finished: Slot | None = None) -> None:
        """Give back the slots the Job can no longer use; hold the rest for its next pods."""
        if unit.kind != "job" or not unit.slots:
            return
        job = self.jobs.get(unit.owner_uid)
        needed = still_needed(job) if job is not None else 0
        live = [s for s in unit.slots if not s.released]
        spare = len(live) - max(needed, sum(1 for s in live if s.pod))
        free = [s for s in live if not s.pod]
        if finished is not None and finished in free:
            free.remove(finished)
            free.insert(0, finished)
        for slot in free[:max(0, spare)]:
            self._release_slot(unit, slot, now)
        for slot in free[max(0, spare):]:
            if slot is finished and slot.node:  # the slot goes back to being held empty
                pod = self._slot_pod(unit, slot)
                if pod is not None:
                    self._core_pod("MODIFIED", pod, now)

    def _release_slot(self, unit: Unit, slot: Slot, now: int) -> None:
        slot.released = True
        slot_uid = self._slot_uid(unit, slot.index)
        if slot.pod:  # its pod still runs: from now on it counts as itself
            real = self.pods.get(slot.pod)
            self.shown.pop(slot.pod, None)
            self._detach(slot.pod)
            slot.pod = ""
            self._core_pod("DELETED", {"metadata": {"uid": slot_uid}}, now)
            if real is not None:
                self.shown[_meta(real)["uid"]] = _meta(real)["uid"]
                self._core_pod("ADDED", real, now)
        else:
            self._core_pod("DELETED", {"metadata": {"uid": slot_uid}}, now)
        self.slot_pods.pop(slot_uid, None)

    def _release_all(self, unit: Unit, now: int) -> None:
        for slot in unit.slots:
            if not slot.released:
                self._release_slot(unit, slot, now)
        if unit.kind == "pods":
            for uid in list(unit.members):
                if uid in self.ungate:  # handed to the core but never placed
                    self.ungate.discard(uid)
                    pod = self.pods.get(uid)
                    if pod is not None and _gated(pod):
                        self._core_pod("DELETED", pod, now)

    def _drop_unit(self, unit: Unit, now: int) -> None:
        """A FluxJob deleted (by hand, or with its work): release all it holds."""
        self._release_all(unit, now)
        self.by_owner.pop(unit.owner_uid, None)
        for uid in list(unit.attached):
            self._detach(uid)
            pod = self.pods.get(uid)
            if unit.kind == "pods" and pod is not None and _gated(pod):
                if uid in self.ungate:
                    self._core_pod("DELETED", pod, now)
                self.ungate.discard(uid)
                self._index_gated(uid, "MODIFIED", pod)  # a new FluxJob, at the back
        if unit.kind == "job" and unit.owner_uid in self.jobs:
            self._new_jobs.add(unit.owner_uid)  # a new FluxJob if it still waits
        unit.fed = False

    def _attach(self, uid: str, unit: Unit) -> None:
        self.pod_unit[uid] = unit.key
        unit.attached.add(uid)

    def _detach(self, uid: str) -> None:
        key = self.pod_unit.pop(uid, None)
        unit = self.units.get(key) if key is not None else None
        if unit is not None:
            unit.attached.discard(uid)

    # ==== state =================================================================================
    def _transition(self, unit: Unit, state: str, reason: str, message: str,
                    **fields: Any) -> None:
        old = (unit.state, unit.status.get("reason"), unit.status.get("message"))
        changed = old != (state, reason, message) or any(
            unit.status.get(k) != v for k, v in fields.items())
        if not changed:
            return
        if unit.state != state or not unit.status:
            self.metrics.transitions.inc(state=state)
            unit.status["lastTransitionTime"] = _now_text()
        if old[:2] != (state, reason):  # one Event per new state or reason, not per cycle
            self._event(unit, state, reason, message)
        unit.status.update(state=state, reason=reason, message=message)
        for k, v in fields.items():
            if v is None:
                unit.status.pop(k, None)
            else:
                unit.status[k] = v
        self._dirty.add(unit.key)
        self._track(unit)

    def _track(self, unit: Unit) -> None:
        """File the unit by its state where the cycle looks for it."""
        if unit.state == "Reserved":
            self._reserved_keys.add(unit.key)
        else:
            self._reserved_keys.discard(unit.key)
        if not unit.fed and unit.state in ("Queued", "Reserved"):
            self._unfed.add(unit.key)

    def _finish(self, unit: Unit, state: str, reason: str, message: str) -> None:
        if unit.state in ("Finished", "Failed"):
            return
        self._transition(unit, state, reason, message, finishedAt=_now_text())

    def fail(self, unit: Unit, reason: str, message: str) -> None:
        if unit.state in ("Queued", "Reserved"):
            self._transition(unit, "Failed", reason, message)

    def _job_state(self, unit: Unit) -> None:
        if unit.state in ("Finished", "Failed", "Queued", "Reserved") or not unit.placed:
            return
        running = any((self.pods.get(s.pod) or {}).get("status", {}).get("phase") == "Running"
                      for s in unit.slots if s.pod)
        if running and unit.state == "Admitted":
            self._transition(unit, "Running", "Running", "its pods run",
                             startedAt=_now_text())

    def _pods_state(self, unit: Unit) -> None:
        if unit.state in ("Finished", "Failed") and not self._waiting(unit):
            return
        phases = [(self.pods.get(uid) or {}).get("status", {}).get("phase", "Pending")
                  for uid in unit.members]
        placed = [(self.pods.get(uid) or {}).get("spec", {}).get("nodeName", "")
                  for uid in unit.members]
        if not unit.members:
            return
        if all(p in _TERMINAL for p in phases):
            if "Failed" in phases:
                self._finish(unit, "Failed", "PodFailed", "a pod failed")
            else:
                self._finish(unit, "Finished", "Succeeded", "its pods succeeded")
        elif all(placed) and self._waiting(unit):
            self._transition(unit, "Admitted", "Admitted", f"on {_short(placed)}",
                             nodes=placed, admittedAt=_now_text(), estimatedStart=None)
            self.metrics.admitted.inc()
            self.metrics.wait.observe(max(0.0, self.wall() - unit.created))
        if any(p == "Running" for p in phases) and unit.state == "Admitted":
            self._transition(unit, "Running", "Running", "its pods run",
                             startedAt=_now_text())

    def _status_written(self, unit: Unit, status: dict[str, Any], error: Any) -> None:
        self._writing.discard(unit.key)
        if error is None or (isinstance(error, ApiError) and error.not_found):
            unit.written = status  # (404: the FluxJob is gone; its DELETED event follows)
        else:
            self.metrics.errors.inc(source="status")
            self._dirty.add(unit.key)  # written again next cycle

    def _event(self, unit: Unit, state: str, reason: str, message: str) -> None:
        if not unit.uid:
            return
        from fluxinfra.scheduler.events import WARNING_REASONS

        warning = state == "Failed" or reason in WARNING_REASONS or reason in (
            "QuotaExceeded", "QueueNotFound")
        if not warning and self._evented.get(unit.key) == state:
            # a second reason in the same state within one cycle (Created, then handed to
            # Fluxion): one Event says it; what it waits for next gets its own
            return
        self._evented[unit.key] = state
        self._pending_events.append(self._event_body(
            {"apiVersion": q.API_VERSION, "kind": q.KIND, "namespace": unit.namespace,
             "name": unit.name, "uid": unit.uid},
            state, reason, "Warning" if warning else "Normal", f"{state}: {message}"))

    def _event_body(self, regarding: dict[str, str], action: str, reason: str, kind: str,
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

    def _write_status(self) -> None:
        """Every changed FluxJob status (one write per FluxJob in flight; a change made
        meanwhile goes in the next), and queued Events; failures retried. A Job being
        un-suspended waits for the answer: its next state is known then, so a FluxJob placed
        as soon as it was made gets one status write (Admitted), not one per cycle it took."""
        for key in list(self._dirty):  # the units whose status changed since
            unit = self.units.get(key)
            if unit is None or unit.status == unit.written:
                self._dirty.discard(key)
                continue
            if not unit.uid or unit.admitting or key in self._writing:
                continue  # kept: written once its uid, its admission, its last write is in
            self._dirty.discard(key)
            status = dict(unit.status)
            patch = dict(status)
            for k in unit.written:
                patch.setdefault(k, None)  # merge patch: a removed field is null
            self._writing.add(unit.key)
            self._write(lambda unit=unit, patch=patch: self.api.patch_fluxjob_status(
                unit.namespace, unit.name, patch),
                lambda error, unit=unit, status=status: self._status_written(unit, status,
                                                                             error))
        events, self._pending_events = self._pending_events, []
        self._evented.clear()
        for event in events:
            if self._event_queue is None:
                self._send_event(event)
                continue
            try:
                self._event_queue.put_nowait(event)
            except queue.Full:
                self.metrics.errors.inc(source="event_dropped")


def _guarded(call: Callable[[], Any]) -> Any:
    """``call()``, or the exception it raised (a write's failure is its result)."""
    try:
        return call()
    except ApiError as exc:
        return exc
    except Exception as exc:  # noqa: BLE001 - handed to the loop, which counts it
        log.warning("API write failed: %s", exc, exc_info=True)
        return exc


def _amounts(requests: dict[str, Any]) -> dict[str, int]:
    from fluxinfra.kube.resources import pod_requests as amounts_of

    pod = {"spec": {"containers": [{"name": "x", "resources": {"requests": requests}}]}}
    try:
        return amounts_of(pod)
    except Exception:  # noqa: BLE001 - what the CRD let through but we cannot read counts 0
        return {}


def _quantities(requests: dict[str, int]) -> dict[str, str]:
    out = {}
    for name, value in sorted(requests.items()):
        out[name] = f"{value}m" if name == "cpu" else str(value)
    return out


def _short(nodes: list[str]) -> str:
    names = sorted(set(nodes))
    return ", ".join(names[:8]) + (f" and {len(names) - 8} more" if len(names) > 8 else "")


def _without_gate(pod: dict[str, Any], queued: float) -> dict[str, Any]:
    """The pod as the core sees it while queued: without our gate, in the FluxJob's place in
    FCFS order (creationTimestamp counts whole seconds; queuedAt microseconds)."""
    shown = copy.copy(pod)
    shown["metadata"] = {**_meta(pod), "creationTimestamp": micro_time(queued)}
    spec = dict(pod.get("spec") or {})
    spec["schedulingGates"] = [g for g in spec.get("schedulingGates") or []
                               if g.get("name") != q.GATE]
    if not spec["schedulingGates"]:
        del spec["schedulingGates"]
    shown["spec"] = spec
    return shown


def _group_kind_name(pod: dict[str, Any]) -> tuple[str, str]:
    meta = _meta(pod)
    labels = meta.get("labels") or {}
    if labels.get(LABEL_PODGROUP):
        return "podgroup", labels[LABEL_PODGROUP]
    if labels.get(LABEL_GROUP):
        return "group", labels[LABEL_GROUP]
    return "pod", meta.get("name", "")


def _gated_group(pod: dict[str, Any]) -> str:
    kind, name = _group_kind_name(pod)
    return f"{kind}:{_meta(pod).get('namespace', '')}/{name}"


def _group_size(pod: dict[str, Any]) -> int:
    try:
        return int((_meta(pod).get("labels") or {}).get(LABEL_GROUP_SIZE) or 1)
    except ValueError:
        return 1
