"""The scheduler core's binder with the queue's pods taken out: where a placement becomes an
admission.

No Kueue piece does this: Kueue admits on quota and kube-scheduler binds the pods. Here the
scheduler core places the queue's work and tells its :class:`~fluxinfra.scheduler.core.Binder`,
so the queue's binder stands in front of the scheduler's, and is given to the core when the
process that hosts both builds it (``SchedulerCore(allocator, QueueBinder(binder), ...)``; the
controller then attaches itself, :meth:`QueueBinder.attach`). Per pod the core binds:

- a *slot pod* of a suspended Job (uid ``fluxjob-slot:...``): its node is recorded, nothing is
  written; the Job is un-suspended once every slot has one (:mod:`~fluxinfra.queue.jobs`);
- a gated pod the queue showed the core: un-gated, then bound, on the queue's pool
  (:mod:`~fluxinfra.queue.gated`);
- any other pod: the scheduler's own binder.

The core's reports about a slot pod (Events, conditions, nominations) are not passed on: no
such pod exists in the cluster; an ``Unschedulable`` or ``InvalidPod`` of a queued unit fails its
FluxJob with that reason.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any, Protocol

from fluxinfra.queue.jobs import SLOT_PREFIX
from fluxinfra.scheduler.binder import done
from fluxinfra.scheduler.events import scheduled_note
from fluxinfra.scheduler.pods import PodInfo

if TYPE_CHECKING:
    from fluxinfra.scheduler.core import Binder

__all__ = ["BindRoutes", "QueueBinder"]


class BindRoutes(Protocol):
    """What the queue's binder asks of the controller it serves."""

    def slot_placed(self, slot_uid: str, node: str) -> None:
        """The core placed a slot pod on ``node``."""
        ...

    def handed_gated(self, uid: str) -> bool:
        """Whether ``uid`` is a gated pod the queue showed the core."""
        ...

    def ungate_and_bind(self, pod: PodInfo, node: str) -> Exception | None:
        """Remove the queue's gate from ``pod``, then bind it; None or the error."""
        ...

    def submit(self, fn: Callable[..., Any], *args: Any) -> Future:
        """``fn(*args)`` on the queue's pool of API writes."""
        ...

    def map(self, fn: Callable[[Any], Any], items: list[Any]) -> list[Any]:
        """``fn`` over ``items`` on the queue's pool; the results in order."""
        ...

    def unplaceable(self, uid: str, reason: str, note: str) -> None:
        """The core could not place the queued pod ``uid`` (``Unschedulable``,
        ``InvalidPod``)."""
        ...


class QueueBinder:
    """The core's Binder: the queue's pods routed to the controller, the rest to ``inner``."""

    def __init__(self, inner: Binder) -> None:
        self.inner = inner
        self._routes: BindRoutes | None = None

    def attach(self, routes: BindRoutes) -> None:
        """The controller this binder serves (one; it attaches itself when it is built)."""
        if self._routes is not None and self._routes is not routes:
            raise ValueError("this QueueBinder already serves a queue controller; give each "
                             "SchedulerCore a QueueBinder of its own")
        self._routes = routes

    @property
    def scheduled_events(self) -> bool:
        """As the binder it stands in front of (see the core's ``Binder``): when that one
        writes each bound pod's ``Scheduled`` Event as its bind succeeds, this one does so for
        the gated pods the queue binds; a slot pod exists nowhere and gets none."""
        return bool(getattr(self.inner, "scheduled_events", False))

    def _ungate_and_bind(self, pod: PodInfo, node: str) -> Exception | None:
        error = self.routes.ungate_and_bind(pod, node)
        if error is None and self.scheduled_events:
            self.inner.pod_event(pod, "Scheduled", scheduled_note(pod.key, node), "Binding")
        return error

    @property
    def routes(self) -> BindRoutes:
        if self._routes is None:
            raise RuntimeError("QueueBinder used before a queue controller attached to it: "
                               "build the QueueCore with binder=<this binder>")
        return self._routes

    def bind(self, assignments: list[tuple[PodInfo, str]]) -> list[Exception | None]:
        routes = self.routes
        results: list[Exception | None] = [None] * len(assignments)
        plain: list[int] = []
        gated: list[int] = []
        for i, (pod, node) in enumerate(assignments):
            if pod.uid.startswith(SLOT_PREFIX):
                routes.slot_placed(pod.uid, node)
            elif routes.handed_gated(pod.uid):
                gated.append(i)
            else:
                plain.append(i)
        if gated:
            answers = routes.map(lambda i: self._ungate_and_bind(*assignments[i]), gated)
            for i, result in zip(gated, answers, strict=True):
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
        routes = self.routes
        futures: list[Future | None] = [None] * len(assignments)
        plain: list[int] = []
        for i, (pod, node) in enumerate(assignments):
            if pod.uid.startswith(SLOT_PREFIX):
                routes.slot_placed(pod.uid, node)
                futures[i] = done(None)
            elif routes.handed_gated(pod.uid):
                futures[i] = routes.submit(self._ungate_and_bind, pod, node)
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
        if reason in ("Unschedulable", "InvalidPod"):
            self.routes.unplaceable(pod.uid, reason, note)
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
