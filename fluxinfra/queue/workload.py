"""What a queued workload is: the FluxJob's unit of work, its pod sets, and the one interface
both integrations (suspended Jobs, gated pods) implement.

Mirrors Kueue's ``pkg/controller/jobframework``: :class:`Integration` is its ``GenericJob``
(what a queued workload is, how it runs with the placement it was given, how it gives its
resources back), :class:`Unit` is its ``Workload`` (the FluxJob as the controller knows it:
owner, pod set, priority, queue, status), and :class:`Workloads` is the part of Kueue's cache
that files workloads and their pods. Kueue has one folder per integration; here one module
each: :mod:`~fluxinfra.queue.jobs` (batch/v1 Jobs, suspended) and
:mod:`~fluxinfra.queue.gated` (pods held by the scheduling gate).

Where Kueue admits on quota and lets kube-scheduler place the pods, here the scheduler's core
places them: "running" a unit means showing its pods to the core (:meth:`Integration.hand_over`),
and the placement comes back through the core's binder (:mod:`~fluxinfra.queue.binding`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from fluxinfra.kube import fluxjob as q
from fluxinfra.scheduler.events import micro_time

__all__ = ["CoreFeed", "Integration", "QueueConfig", "Slot", "Unit",
           "Workloads", "controller_ref", "gated", "key_of", "meta", "now_text"]

#: One logger for every piece of the controller (operators and tests filter on it).
log = logging.getLogger("fluxinfra.queue.controller")

#: pod phases after which a pod holds nothing
TERMINAL_PHASES = ("Succeeded", "Failed")


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


class Workloads:
    """The controller's books: every FluxJob's unit, the pods it has seen, and which pod is
    filed under which unit."""

    def __init__(self) -> None:
        self.units: dict[str, Unit] = {}              # FluxJob key -> unit
        self.by_owner: dict[str, str] = {}            # Job uid / gated group key -> FluxJob key
        self.pods: dict[str, dict[str, Any]] = {}     # every pod seen, by uid
        self.pod_unit: dict[str, str] = {}            # pod uid -> FluxJob key
        self.by_group: dict[str, str] = {}            # core group key -> unit key (fed units)

    def owned_by(self, owner: str) -> Unit | None:
        return self.units.get(self.by_owner.get(owner, ""))

    def attach(self, uid: str, unit: Unit) -> None:
        self.pod_unit[uid] = unit.key
        unit.attached.add(uid)

    def detach(self, uid: str) -> None:
        key = self.pod_unit.pop(uid, None)
        unit = self.units.get(key) if key is not None else None
        if unit is not None:
            unit.attached.discard(uid)

    def phase(self, uid: str) -> str | None:
        return (self.pods.get(uid) or {}).get("status", {}).get("phase")


class CoreFeed:
    """The scheduler core as the integrations show it pods: at once once it is loaded; before
    that kept for its start-up rebuild (:meth:`take_startup`)."""

    def __init__(self, core: Any) -> None:
        self.core = core
        self.loaded = False
        self._startup: dict[str, dict[str, Any]] = {}

    def pod(self, etype: str, obj: dict[str, Any], now: int) -> None:
        if self.loaded:
            self.core.on_pod(etype, obj, now)
        elif etype != "DELETED":
            self._startup[meta(obj).get("uid", key_of(obj))] = obj

    def begin_startup(self) -> None:
        self._startup = {}

    def take_startup(self) -> list[dict[str, Any]]:
        """The pods kept for the core's rebuild; from now on pods go to the core at once."""
        pods, self._startup = list(self._startup.values()), {}
        self.loaded = True
        return pods


class Integration(Protocol):
    """One kind of queued work (Kueue's ``GenericJob``), kept by kind, not per object: the
    integration holds what it needs of its owners (Jobs, gated pods) and answers for each of
    its units. The controller calls these in this order over a unit's life."""

    #: the :attr:`Unit.kind` it serves
    kind: str

    def new_fluxjobs(self, busy: Callable[[str], bool],
                     queued_at: Callable[[], str]) -> list[dict[str, Any]]:
        """The FluxJob objects for the work that arrived since and has none (``busy(owner)``:
        one exists or is being created), in arrival order: the workload and its pod sets."""
        ...

    def create_failed(self, owner: str) -> None:
        """A FluxJob create for ``owner`` failed: asked for again next cycle."""
        ...

    def adopt(self, unit: Unit) -> None:
        """A FluxJob of this kind appeared (made by the controller, or seen on start-up)."""
        ...

    def claim(self, uid: str, pod: dict[str, Any]) -> Unit | None:
        """The unit a pod not filed yet belongs to, filing it (None: not one of ours)."""
        ...

    def on_pod(self, unit: Unit, uid: str, etype: str, obj: dict[str, Any], now: int) -> None:
        """A change to a pod filed under ``unit``."""
        ...

    def hand_over(self, unit: Unit, now: int) -> bool:
        """Show the unit's pods to the core, which places them (Kueue: run with pod sets);
        False when it cannot be shown yet."""
        ...

    def core_group(self, unit: Unit) -> str:
        """The key the core files the unit's pods under (its own rule)."""
        ...

    def release_all(self, unit: Unit, now: int) -> None:
        """Give back everything the unit holds in the core (Kueue: stop)."""
        ...

    def forget(self, unit: Unit, now: int) -> None:
        """Its FluxJob was deleted (after :meth:`release_all`): unfile its pods; work still
        waiting gets a new FluxJob at the back of the queue."""
        ...


def meta(obj: dict[str, Any]) -> dict[str, Any]:
    return obj.get("metadata") or {}


def key_of(obj: dict[str, Any]) -> str:
    m = meta(obj)
    return f"{m.get('namespace', '')}/{m.get('name', '')}"


def controller_ref(obj: dict[str, Any]) -> dict[str, Any]:
    return next((o for o in meta(obj).get("ownerReferences") or [] if o.get("controller")), {})


def gated(pod: dict[str, Any]) -> bool:
    """Whether the pod carries the queue's scheduling gate."""
    return any(g.get("name") == q.GATE for g in (pod.get("spec") or {}).get("schedulingGates")
               or [])


def now_text() -> str:
    return micro_time(time.time())[:19] + "Z"


def quantities(requests: dict[str, int]) -> dict[str, str]:
    """A pod set's requests as the FluxJob writes them (cpu in millicores)."""
    out = {}
    for name, value in sorted(requests.items()):
        out[name] = f"{value}m" if name == "cpu" else str(value)
    return out


def short(nodes: list[str]) -> str:
    names = sorted(set(nodes))
    return ", ".join(names[:8]) + (f" and {len(names) - 8} more" if len(names) > 8 else "")
