"""When a FluxJob enters Fluxion's queue, and what Fluxion says of the ones waiting in it.

Mirrors Kueue's scheduler (``pkg/scheduler``: workloads taken in queue order, admitted when
their ClusterQueue's quota has room, BestEffortFIFO) for the first half: :meth:`Admission.feed`
hands the core every unit its namespace queue (:mod:`~fluxinfra.queue.policy`) has room for, in
serve order (priority, then FCFS); the limits count every unit already handed over, so they hold
however many are placed in one cycle. Placing is the core's (Fluxion's): the second half,
:meth:`Admission.reservations`, reads the start times the core's cycle reserved
(``CycleReport.reservations``) into ``Reserved`` and back to ``Queued`` when a reservation goes.
"""

from __future__ import annotations

from typing import Any

from fluxinfra.kube import fluxjob as q
from fluxinfra.queue.context import QueueContext
from fluxinfra.queue.policy import Usage, demand, limits_of, order_key, over
from fluxinfra.queue.workload import Unit
from fluxinfra.scheduler.events import micro_time

__all__ = ["Admission"]


class Admission:
    def __init__(self, ctx: QueueContext, queues: dict[str, dict[str, Any]]) -> None:
        self.ctx = ctx
        self.books = ctx.books
        self.states = ctx.states
        self.queues = queues  # ns/name -> FluxJobQueue

    def _usage(self) -> dict[str, Usage]:
        used: dict[str, Usage] = {}
        for unit in self.books.units.values():
            if unit.fed and unit.state not in ("Finished", "Failed"):
                used.setdefault(f"{unit.namespace}/{unit.queue}", Usage()).add(
                    demand(unit.requests, unit.count))
        return used

    def feed(self, now: int) -> None:
        """Hand the core every unit its queue has room for, in serve order."""
        waiting = []
        for key in list(self.states.unfed):
            unit = self.books.units.get(key)
            if unit is None or unit.fed or unit.state not in ("Queued", "Reserved"):
                self.states.unfed.discard(key)  # a unit going back to waiting is added again
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
                self.states.waits(unit, "QueueNotFound",
                                  f"no FluxJobQueue {unit.queue!r} in namespace "
                                  f"{unit.namespace!r}; create it or use the default queue")
                continue
            if unit.count < 1:
                self.states.waits(unit, "NoPods", "the Job runs no pods (parallelism 0)")
                continue
            ask = demand(unit.requests, unit.count)
            if queue is not None:  # a FluxJobQueue: its limits count what is fed already
                used = self._usage() if used is None else used
                problem = over(limits_of(queue), used.get(queue_key, Usage()), ask)
                if problem is not None:
                    self.states.waits(unit, "QuotaExceeded", f"queue {unit.queue!r}: {problem}")
                    continue
            if not self._hand_over(unit, now):
                continue
            if used is not None:
                used.setdefault(queue_key, Usage()).add(ask)
            self.states.waits(unit, "WaitingForResources", "waiting for Fluxion to place it")

    def _hand_over(self, unit: Unit, now: int) -> bool:
        integration = self.ctx.integration(unit)
        if not integration.hand_over(unit, now):
            return False
        self.states.unfed.discard(unit.key)
        self.books.by_group[integration.core_group(unit)] = unit.key
        return True

    def reservations(self, report: Any, now: int) -> None:
        """The start times the core's cycle reserved: ``Reserved`` with the estimate, and back
        to ``Queued`` for a unit whose reservation went."""
        reservations = getattr(report, "reservations", {}) or {}
        for group_key, at in reservations.items():
            unit = self._unit_of_group(group_key)
            if unit is None or unit.state not in ("Queued", "Reserved"):
                continue
            start = micro_time(self.ctx.wall() + max(0, at - now))[:19] + "Z"
            if unit.status.get("estimatedStart") != start or unit.state != "Reserved":
                self.states.reserve(unit, start)
        for key in list(self.states.reserved):
            unit = self.books.units.get(key)
            if unit is None:
                self.states.reserved.discard(key)
            elif (unit.state == "Reserved"
                  and self.ctx.integration(unit).core_group(unit) not in reservations):
                self.states.waits(unit, "WaitingForResources",
                                  "waiting for Fluxion to place it", estimatedStart=None)

    def _unit_of_group(self, group_key: str) -> Unit | None:
        """The fed unit whose pods the core files under ``group_key``."""
        unit = self.books.units.get(self.books.by_group.get(group_key, ""))
        if unit is not None and unit.fed and self.ctx.integration(unit).core_group(unit) \
                == group_key:
            return unit
        for unit in self.books.units.values():  # a gated unit whose members came after
            if unit.fed and self.ctx.integration(unit).core_group(unit) == group_key:
                self.books.by_group[group_key] = unit.key
                return unit
        return None
