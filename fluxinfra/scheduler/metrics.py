"""Scheduler metrics (``prometheus_client``), and the ``/healthz`` + ``/metrics`` server.

Each component keeps its metrics in its own :class:`~prometheus_client.CollectorRegistry`
(never the library's global default one), so two schedulers, or a scheduler and the queue, in
one process (the tests, the simulator) never collide; ``/metrics`` serves
``generate_latest(registry)``. :class:`Counter`, :class:`Gauge` and :class:`Histogram` are
prometheus_client's metrics with the few reads the scheduler and its tests make (``value``,
``count``) and, for a counter its owner already keeps, ``set_function``.

>>> m = Metrics()
>>> m.pods_bound.inc(3)
>>> "fluxinfra_scheduler_pods_bound_total 3.0" in m.render()
True
>>> m.errors.inc(source="bind")
>>> m.errors.value(source="bind"), m.errors.value(source="apply")
(1.0, 0.0)
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import prometheus_client
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily
from prometheus_client.metrics_core import Metric

__all__ = ["Counter", "Gauge", "Histogram", "Metrics", "serve_http"]

_LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
                    2.5, 5.0, 10.0)

#: what ``/metrics`` answers with: the text exposition format ``generate_latest`` writes (every
#: metric name here is a classic one, so its 0.0.4 and 1.0.0 forms are the same text)
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class _Registered:
    """A prometheus_client metric registered in ``registry`` through this wrapper (the
    registry collects the wrapper, which may answer for the metric)."""

    def __init__(self, metric: Any, registry: CollectorRegistry) -> None:
        self._metric = metric
        registry.register(self)

    def describe(self) -> Iterable[Metric]:
        return self._metric.describe()

    def collect(self) -> Iterable[Metric]:
        return self._metric.collect()

    def _sample(self, name: str, labels: dict[str, str]) -> float:
        """The value of sample ``name`` with exactly ``labels`` (0 when there is none yet)."""
        for family in self.collect():
            for sample in family.samples:
                if sample.name == name and sample.labels == labels:
                    return sample.value
        return 0.0


class Counter(_Registered):
    """A counter, by the label values ``inc`` is given (``labelnames`` declares them)."""

    def __init__(self, name: str, help_: str, registry: CollectorRegistry,
                 labelnames: Sequence[str] = ()) -> None:
        self.name, self.help = name, help_
        self._fn: Callable[[], float] | None = None
        #: label values as ``inc`` is given them -> the child counter (``labels()`` checks
        #: and sorts them at every call: three times the cost of an increment)
        self._children: dict[tuple, Any] = {}
        super().__init__(prometheus_client.Counter(name, help_, labelnames, registry=None),
                         registry)

    def inc(self, amount: float = 1, **labels: str) -> None:
        if not labels:
            self._metric.inc(amount)
            return
        key = tuple(labels.items())
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = self._metric.labels(**labels)
        child.inc(amount)

    def set_function(self, fn: Callable[[], float]) -> None:
        """Read the (unlabelled, never decreasing) value at scrape time from its owner."""
        self._fn = fn

    def collect(self) -> Iterable[Metric]:
        if self._fn is None:
            return self._metric.collect()
        return [CounterMetricFamily(self.name, self.help, value=self._fn())]

    def value(self, **labels: str) -> float:
        return self._sample(self.name, labels)


class Gauge(_Registered):
    def __init__(self, name: str, help_: str, registry: CollectorRegistry) -> None:
        super().__init__(prometheus_client.Gauge(name, help_, registry=None), registry)
        self.name = name

    def set(self, value: float) -> None:
        self._metric.set(value)

    def set_function(self, fn: Callable[[], float]) -> None:
        """Read the value at scrape time (e.g. the live queue length)."""
        self._metric.set_function(fn)

    def value(self) -> float:
        return self._sample(self.name, {})


class Histogram(_Registered):
    def __init__(self, name: str, help_: str, registry: CollectorRegistry,
                 buckets: Sequence[float] = _LATENCY_BUCKETS) -> None:
        super().__init__(prometheus_client.Histogram(name, help_, buckets=buckets,
                                                     registry=None), registry)
        self.name = name
        self.observe = self._metric.observe

    @property
    def count(self) -> int:
        return int(self._sample(self.name + "_count", {}))

    @property
    def sum(self) -> float:
        return self._sample(self.name + "_sum", {})


class Metrics:
    """Everything the scheduler reports, in its own registry (``registry``)."""

    def __init__(self) -> None:
        p = "fluxinfra_scheduler_"
        self.registry = r = CollectorRegistry()
        self.queue_depth = Gauge(p + "queue_depth", "Pods waiting to be scheduled.", r)
        self.groups_pending = Gauge(p + "groups_pending", "Groups waiting to be scheduled.", r)
        self.pods_bound = Counter(p + "pods_bound_total", "Pods bound by this scheduler.", r)
        self.groups_scheduled = Counter(p + "groups_scheduled_total",
                                        "Groups matched and bound all-or-nothing.", r)
        self.unschedulable = Counter(p + "unschedulable_total",
                                     "Groups found unsatisfiable or invalid.", r, ["reason"])
        self.errors = Counter(p + "errors_total", "API and matcher errors, by source.", r,
                              ["source"])
        self.match_latency = Histogram(p + "match_duration_seconds",
                                       "Time spent in one matcher call.", r)
        self.bind_latency = Histogram(p + "bind_duration_seconds",
                                      "Time spent binding one pod.", r)
        self.e2e_latency = Histogram(p + "scheduling_latency_seconds",
                                     "Pod queued to bind decision.", r)
        self.matcher_replays = Counter(p + "matcher_replays_total",
                                       "Times every allocation was replayed into a Fluxion "
                                       "service that had lost them (restarted).", r)
        self.status_coalesced = Counter(p + "podgroup_status_coalesced_total",
                                        "PodGroup statuses folded into a write of the same "
                                        "PodGroup still queued (one patch sent the newest).", r)
        self.loop_wakeups = Counter(p + "loop_wakeups_total",
                                    "Times the scheduling loop woke (events or timed work).", r)
        self.healthy = Gauge(p + "healthy", "1 when /healthz answers 200, else 0.", r)
        self.overcommitted = Gauge(p + "overcommitted",
                                   "(node, resource) pairs whose summed pod requests exceed "
                                   "allocatable (invariant: 0 unless others over-commit).", r)
        self.preemption_victims = Counter(p + "preemption_victims_total",
                                          "Pods evicted to make room for higher-priority pods.",
                                          r)
        self.graph_rebuilds = Gauge(p + "graph_rebuilds",
                                    "Times the allocator rebuilt its whole graph (node changes "
                                    "are applied node by node; this stays 0 in process).", r)

    def render(self) -> str:
        """The text ``/metrics`` serves."""
        return generate_latest(self.registry).decode()


def serve_http(metrics: Any, healthy: Callable[[], bool | tuple[bool, str]],
               host: str = "0.0.0.0", port: int = 10259) -> ThreadingHTTPServer:
    """Start ``/healthz`` (200 ok / 503 with the reason) and ``/metrics`` in a daemon thread;
    returns the server. ``metrics``: what has the ``registry`` to serve (:class:`Metrics`,
    or the queue's ``combined`` page). ``healthy`` answers a bool or ``(bool, reason)``."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's naming
            if self.path.startswith("/metrics"):
                self._reply(200, generate_latest(metrics.registry), CONTENT_TYPE)
            elif self.path.startswith(("/healthz", "/readyz", "/livez")):
                answer = healthy()
                ok, why = answer if isinstance(answer, tuple) else (answer, "")
                why = why or ("ok" if ok else "not ready")
                self._reply(200 if ok else 503, f"{why}\n".encode(),
                            "text/plain; charset=utf-8")
            else:
                self._reply(404, b"not found\n", "text/plain; charset=utf-8")

        def _reply(self, code: int, body: bytes, ctype: str) -> None:
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002
            pass

    server = ThreadingHTTPServer((host, port), Handler)
    threading.Thread(target=server.serve_forever, name="scheduler-http", daemon=True).start()
    return server
