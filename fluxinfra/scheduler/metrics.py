"""Scheduler metrics in the Prometheus text format, and the ``/healthz`` + ``/metrics`` server.

Dependency-free on purpose (the image stays small): counters, gauges and fixed-bucket
histograms, rendered as text exposition format 0.0.4.

>>> m = Metrics()
>>> m.pods_bound.inc(3)
>>> "fluxinfra_scheduler_pods_bound_total 3" in m.render()
True
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Callable, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

__all__ = ["Counter", "Gauge", "Histogram", "Metrics", "serve_http"]

_LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
                    2.5, 5.0, 10.0)


def _fmt(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def _labels(labels: dict[str, str]) -> str:
    if not labels:
        return ""
    inner = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    return "{" + inner + "}"


class Counter:
    def __init__(self, name: str, help_: str) -> None:
        self.name, self.help = name, help_
        self._values: dict[tuple[tuple[str, str], ...], float] = {}
        self._lock = threading.Lock()
        self._fn: Callable[[], float] | None = None

    def inc(self, amount: float = 1, **labels: str) -> None:
        key = tuple(sorted(labels.items()))
        with self._lock:
            self._values[key] = self._values.get(key, 0) + amount

    def set_function(self, fn: Callable[[], float]) -> None:
        """Read the (unlabelled, never decreasing) value at scrape time from its owner."""
        self._fn = fn

    def value(self, **labels: str) -> float:
        if self._fn is not None and not labels:
            return self._fn()
        return self._values.get(tuple(sorted(labels.items())), 0)

    def render(self) -> list[str]:
        lines = [f"# HELP {self.name} {self.help}", f"# TYPE {self.name} counter"]
        values = {(): self._fn()} if self._fn is not None else (self._values or {(): 0})
        lines += [f"{self.name}{_labels(dict(k))} {_fmt(v)}" for k, v in sorted(values.items())]
        return lines


class Gauge:
    def __init__(self, name: str, help_: str) -> None:
        self.name, self.help = name, help_
        self._value = 0.0
        self._fn: Callable[[], float] | None = None

    def set(self, value: float) -> None:
        self._value = value

    def set_function(self, fn: Callable[[], float]) -> None:
        """Read the value at scrape time (e.g. the live queue length)."""
        self._fn = fn

    def value(self) -> float:
        return self._fn() if self._fn else self._value

    def render(self) -> list[str]:
        return [f"# HELP {self.name} {self.help}", f"# TYPE {self.name} gauge",
                f"{self.name} {_fmt(self.value())}"]


class Histogram:
    def __init__(self, name: str, help_: str,
                 buckets: Sequence[float] = _LATENCY_BUCKETS) -> None:
        self.name, self.help = name, help_
        self.buckets = tuple(buckets)
        self._counts = [0] * (len(self.buckets) + 1)
        self._sum = 0.0
        self._lock = threading.Lock()

    def observe(self, value: float) -> None:
        with self._lock:
            self._counts[bisect.bisect_left(self.buckets, value)] += 1
            self._sum += value

    @property
    def count(self) -> int:
        return sum(self._counts)

    def render(self) -> list[str]:
        lines = [f"# HELP {self.name} {self.help}", f"# TYPE {self.name} histogram"]
        running = 0
        for bound, count in zip(self.buckets, self._counts, strict=False):
            running += count
            lines.append(f'{self.name}_bucket{{le="{bound}"}} {running}')
        lines.append(f'{self.name}_bucket{{le="+Inf"}} {self.count}')
        lines.append(f"{self.name}_sum {_fmt(self._sum)}")
        lines.append(f"{self.name}_count {self.count}")
        return lines


class Metrics:
    """Everything the scheduler reports."""

    def __init__(self) -> None:
        p = "fluxinfra_scheduler_"
        self.queue_depth = Gauge(p + "queue_depth", "Pods waiting to be scheduled.")
        self.groups_pending = Gauge(p + "groups_pending", "Groups waiting to be scheduled.")
        self.pods_bound = Counter(p + "pods_bound_total", "Pods bound by this scheduler.")
        self.groups_scheduled = Counter(p + "groups_scheduled_total",
                                        "Groups matched and bound all-or-nothing.")
        self.unschedulable = Counter(p + "unschedulable_total",
                                     "Groups found unsatisfiable or invalid.")
        self.errors = Counter(p + "errors_total", "API and matcher errors, by source.")
        self.match_latency = Histogram(p + "match_duration_seconds",
                                       "Time spent in one matcher call.")
        self.bind_latency = Histogram(p + "bind_duration_seconds",
                                      "Time spent binding one pod.")
        self.e2e_latency = Histogram(p + "scheduling_latency_seconds",
                                     "Pod queued to bind decision.")
        self.matcher_replays = Counter(p + "matcher_replays_total",
                                       "Times every allocation was replayed into a Fluxion "
                                       "service that had lost them (restarted).")
        self.loop_wakeups = Counter(p + "loop_wakeups_total",
                                    "Times the scheduling loop woke (events or timed work).")
        self.healthy = Gauge(p + "healthy", "1 when /healthz answers 200, else 0.")
        self.overcommitted = Gauge(p + "overcommitted",
                                   "(node, resource) pairs whose summed pod requests exceed "
                                   "allocatable (invariant: 0 unless others over-commit).")
        self.preemption_victims = Counter(p + "preemption_victims_total",
                                          "Pods evicted to make room for higher-priority pods.")
        self.graph_rebuilds = Gauge(p + "graph_rebuilds",
                                    "Times the allocator rebuilt its whole graph (node changes "
                                    "are applied node by node; this stays 0 in process).")

    def all(self) -> list[Counter | Gauge | Histogram]:
        return [self.queue_depth, self.groups_pending, self.pods_bound, self.groups_scheduled,
                self.unschedulable, self.errors, self.match_latency, self.bind_latency,
                self.e2e_latency, self.matcher_replays, self.loop_wakeups, self.healthy,
                self.overcommitted, self.preemption_victims, self.graph_rebuilds]

    def render(self) -> str:
        lines: list[str] = []
        for metric in self.all():
            lines += metric.render()
        return "\n".join(lines) + "\n"


def serve_http(metrics: Metrics, healthy: Callable[[], bool | tuple[bool, str]],
               host: str = "0.0.0.0", port: int = 10259) -> ThreadingHTTPServer:
    """Start ``/healthz`` (200 ok / 503 with the reason) and ``/metrics`` in a daemon thread;
    returns the server. ``healthy`` answers a bool or ``(bool, reason)``."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's naming
            if self.path.startswith("/metrics"):
                body = metrics.render().encode()
                self._reply(200, body, "text/plain; version=0.0.4; charset=utf-8")
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
