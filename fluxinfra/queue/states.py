"""The FluxJob state machine: its states, the transitions between them, in one place.

Mirrors Kueue's Workload conditions (``QuotaReserved``, ``Admitted``, ``Finished``) as
``pkg/workload`` sets them, as one ``status.state`` with a ``reason`` instead::

    (created) --Created--> Queued
    Queued    --WaitingForResources | QuotaExceeded | QueueNotFound | NoPods--> Queued
    Queued    --Reserved (Fluxion holds a start time)--------------------------> Reserved
    Reserved  --Reserved (the estimate moved)----------------------------------> Reserved
    Reserved  --WaitingForResources (the reservation went)---------------------> Queued
    Queued | Reserved --Admitted (placed: Job un-suspended / pods bound)-------> Admitted
    Queued | Reserved --Unsatisfiable | InvalidPod-----------------------------> Failed
    Failed(Unsatisfiable) --Admitted (the cluster changed and it fits now)----> Admitted
    Admitted  --Running (a pod runs)-------------------------------------------> Running
    any       --JobComplete | Succeeded-----------------------------------------> Finished
    any       --the Job's failure reason | JobDeleted | PodFailed---------------> Failed

:meth:`FluxJobStates.transition` is the one place a status changes: it stamps
``lastTransitionTime`` on a new state, counts it (``fluxinfra_queue_transitions_total``),
records one Event per new state or reason (not one per cycle), marks the status for the
writer (:mod:`~fluxinfra.queue.status`) and files the unit where the next cycle looks for it
(:attr:`~FluxJobStates.reserved`, :attr:`~FluxJobStates.unfed`). :meth:`~FluxJobStates.finish`
is final: a Finished or Failed FluxJob stays so.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fluxinfra.queue.metrics import QueueMetrics
from fluxinfra.queue.status import StatusWriter
from fluxinfra.queue.workload import Unit, now_text, short

__all__ = ["DONE", "WAITING", "FluxJobStates"]

QUEUED, RESERVED, ADMITTED, RUNNING, FINISHED, FAILED = (
    "Queued", "Reserved", "Admitted", "Running", "Finished", "Failed")
#: not handed to Fluxion yet, or handed and not placed
WAITING = (QUEUED, RESERVED)
#: final
DONE = (FINISHED, FAILED)


class FluxJobStates:
    def __init__(self, status: StatusWriter, metrics: QueueMetrics,
                 wall: Callable[[], float]) -> None:
        self.status = status
        self.metrics = metrics
        self.wall = wall
        self.reserved: set[str] = set()   # units in state Reserved
        self.unfed: set[str] = set()      # units not handed to the core yet

    def transition(self, unit: Unit, state: str, reason: str, message: str,
                   **fields: Any) -> None:
        """Set the unit's state, reason, message and ``fields`` (None removes one); nothing
        when none of them changes."""
        old = (unit.state, unit.status.get("reason"), unit.status.get("message"))
        changed = old != (state, reason, message) or any(
            unit.status.get(k) != v for k, v in fields.items())
        if not changed:
            return
        if unit.state != state or not unit.status:
            self.metrics.transitions.inc(state=state)
            unit.status["lastTransitionTime"] = now_text()
        if old[:2] != (state, reason):  # one Event per new state or reason, not per cycle
            self.status.event(unit, state, reason, message)
        unit.status.update(state=state, reason=reason, message=message)
        for k, v in fields.items():
            if v is None:
                unit.status.pop(k, None)
            else:
                unit.status[k] = v
        self.status.dirty.add(unit.key)
        self.track(unit)

    def track(self, unit: Unit) -> None:
        """File the unit by its state where the cycle looks for it."""
        if unit.state == RESERVED:
            self.reserved.add(unit.key)
        else:
            self.reserved.discard(unit.key)
        if not unit.fed and unit.state in WAITING:
            self.unfed.add(unit.key)

    # ==== the transitions, by name ===============================================================
    def created(self, unit: Unit) -> None:
        self.transition(unit, QUEUED, "Created", f"waiting in queue {unit.queue!r}",
                        queuedAt=now_text())

    def waits(self, unit: Unit, reason: str, message: str, **fields: Any) -> None:
        """Queued, for ``reason`` (WaitingForResources, QuotaExceeded, QueueNotFound, NoPods)."""
        self.transition(unit, QUEUED, reason, message, **fields)

    def reserve(self, unit: Unit, start: str) -> None:
        self.transition(unit, RESERVED, "Reserved",
                        f"Fluxion reserved its resources from {start}", estimatedStart=start)

    def admit(self, unit: Unit, nodes: list[str], message: str) -> None:
        """Admitted on ``nodes`` (one per pod): counted and its wait observed."""
        self.transition(unit, ADMITTED, "Admitted", message, nodes=nodes,
                        admittedAt=now_text(), estimatedStart=None)
        self.metrics.admitted.inc()
        self.metrics.wait.observe(max(0.0, self.wall() - unit.created))

    def admitted_before(self, unit: Unit, nodes: list[str]) -> None:
        """Admitted, read back from its Job (the status write was lost)."""
        self.transition(unit, ADMITTED, "Admitted", f"on {short(nodes)} (read back from the "
                        "Job)", nodes=nodes, estimatedStart=None)

    def running(self, unit: Unit) -> None:
        if unit.state == ADMITTED:
            self.transition(unit, RUNNING, "Running", "its pods run", startedAt=now_text())

    def finish(self, unit: Unit, state: str, reason: str, message: str) -> None:
        """Finished or Failed, for good."""
        if unit.state in DONE:
            return
        self.transition(unit, state, reason, message, finishedAt=now_text())

    def fail(self, unit: Unit, reason: str, message: str) -> None:
        """Failed while waiting (Unsatisfiable, InvalidPod): the core tries it again when
        the cluster changes, so it may still be admitted."""
        if unit.state in WAITING:
            self.transition(unit, FAILED, reason, message)

    @staticmethod
    def waiting(unit: Unit) -> bool:
        """Not admitted yet (an Unsatisfiable one too: the core tries it again when the
        cluster changes)."""
        return unit.state in WAITING or (
            unit.state == FAILED and unit.status.get("reason") == "Unsatisfiable")
