"""What every integration is given: the pieces of the controller it works with.

Kueue's integrations get the same from its ``jobframework`` (a client, an event recorder, the
manager's options); here: the scheduler core's feed, the controller's books, the FluxJob state
machine, the pool of API writes and the API, the configuration, the metrics, the
PriorityClasses seen, and the other integrations by kind (a Job deleted releases whatever unit
it owns).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from fluxinfra.queue.kube import QueueApi
from fluxinfra.queue.metrics import QueueMetrics
from fluxinfra.queue.states import FluxJobStates
from fluxinfra.queue.workload import CoreFeed, Integration, QueueConfig, Unit, Workloads
from fluxinfra.queue.writes import Writes
from fluxinfra.scheduler.pods import ANNOT_DURATION, PodSpecError, parse_duration

__all__ = ["QueueContext"]


@dataclass
class QueueContext:
    """What every integration is given: the core's feed, the books, the state machine, the
    pool of API writes and the API, the configuration and the PriorityClasses seen."""

    core: CoreFeed
    books: Workloads
    states: FluxJobStates
    writes: Writes
    api: QueueApi
    config: QueueConfig
    metrics: QueueMetrics
    priorities: dict[str, int]
    wall: Callable[[], float] = time.time
    #: unit kind -> its integration (the controller registers them)
    integrations: dict[str, Integration] = field(default_factory=dict)

    def integration(self, unit: Unit) -> Integration:
        return self.integrations[unit.kind]

    def release_all(self, unit: Unit, now: int) -> None:
        """Everything ``unit`` holds in the core given back, whichever its kind."""
        self.integration(unit).release_all(unit, now)

    def duration(self, annotations: dict[str, str]) -> int:
        try:
            if ANNOT_DURATION in annotations:
                return parse_duration(annotations[ANNOT_DURATION])
        except PodSpecError:
            pass  # the webhook refused these; a pre-existing one runs with the default
        return self.config.default_duration

    def priority(self, spec: dict[str, Any]) -> int:
        if spec.get("priority") is not None:
            return int(spec["priority"])
        return self.priorities.get(spec.get("priorityClassName") or "", 0)
