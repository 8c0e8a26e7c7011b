"""The queue's Prometheus metrics (``prometheus_client``, in the queue's own registry), served
beside the scheduler's on its ``/metrics``.

>>> m = QueueMetrics()
>>> m.admitted.inc(2)
>>> "fluxinfra_queue_admitted_total 2.0" in m.render()
True
"""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, generate_latest

from fluxinfra.scheduler.metrics import Counter, Gauge, Histogram

__all__ = ["QueueMetrics", "combined"]

#: Waits from minutes to days.
_WAIT_BUCKETS = (0.1, 0.5, 1, 5, 15, 60, 300, 900, 3600, 4 * 3600, 86400)


class QueueMetrics:
    def __init__(self) -> None:
        p = "fluxinfra_queue_"
        self.registry = r = CollectorRegistry()
        self.depth = Gauge(p + "depth", "FluxJobs waiting (Queued or Reserved).", r)
        self.admitted = Counter(p + "admitted_total", "FluxJobs admitted (rate: admitted/s).",
                                r)
        self.transitions = Counter(p + "transitions_total", "FluxJob state changes, by state.",
                                   r, ["state"])
        self.wait = Histogram(p + "wait_seconds", "FluxJob creation to admission.", r,
                              buckets=_WAIT_BUCKETS)
        self.errors = Counter(p + "errors_total", "API failures of the queue, by source.", r,
                              ["source"])

    def render(self) -> str:
        return generate_latest(self.registry).decode()


class _Combined:
    def __init__(self, parts: tuple[Any, ...]) -> None:
        self.registry = CollectorRegistry()
        for part in parts:
            self.registry.register(part.registry)  # (a registry collects as one collector)

    def render(self) -> str:
        return generate_latest(self.registry).decode()


def combined(*parts: Any) -> _Combined:
    """One ``/metrics`` page from several components' metrics (the scheduler's and the
    queue's), each kept in its own registry."""
    return _Combined(parts)
