"""The queue's Prometheus metrics, served beside the scheduler's on its ``/metrics``.

>>> m = QueueMetrics()
>>> m.admitted.inc(2)
>>> "fluxinfra_queue_admitted_total 2" in m.render()
True
"""

from __future__ import annotations

from fluxinfra.scheduler.metrics import Counter, Gauge, Histogram

__all__ = ["QueueMetrics", "combined"]

#: Waits from minutes to days.
_WAIT_BUCKETS = (0.1, 0.5, 1, 5, 15, 60, 300, 900, 3600, 4 * 3600, 86400)


class QueueMetrics:
    def __init__(self) -> None:
        p = "fluxinfra_queue_"
        self.depth = Gauge(p + "depth", "FluxJobs waiting (Queued or Reserved).")
        self.admitted = Counter(p + "admitted_total", "FluxJobs admitted (rate: admitted/s).")
        self.transitions = Counter(p + "transitions_total", "FluxJob state changes, by state.")
        self.wait = Histogram(p + "wait_seconds", "FluxJob creation to admission.",
                              buckets=_WAIT_BUCKETS)
        self.errors = Counter(p + "errors_total", "API failures of the queue, by source.")

    def all(self) -> list[Counter | Gauge | Histogram]:
        return [self.depth, self.admitted, self.transitions, self.wait, self.errors]

    def render(self) -> str:
        lines: list[str] = []
        for metric in self.all():
            lines += metric.render()
        return "\n".join(lines) + "\n"


class _Combined:
    def __init__(self, *parts: object) -> None:
        self.parts = parts

    def render(self) -> str:
        return "".join(part.render() for part in self.parts)  # type: ignore[attr-defined]


def combined(*parts: object) -> _Combined:
    """One ``/metrics`` page from several metric sets (the scheduler's and the queue's)."""
    return _Combined(*parts)
