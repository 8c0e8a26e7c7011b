"""Queue policy: per-namespace limits (FluxJobQueue) and the order work is served in.

Order is the scheduler's own: priority (high first), then creation time (FCFS), then name. A
FluxJob enters Fluxion's queue (its pods are handed to the scheduler's core, where EASY backfill
and reservations happen) only once its namespace queue has room for it: the queue's limits
count every FluxJob already handed over, admitted or running (Kueue calls that reserving quota),
so the limits hold however many are placed in one cycle. A FluxJob that does not fit its queue's
limits waits with the reason ``QuotaExceeded``; later, smaller ones of the same queue may go
first (best-effort FIFO within the limits, as Kueue's BestEffortFIFO).

>>> limits = limits_of({"spec": {"maxRunning": 2, "maxCores": "4", "maxGPUs": 1}})
>>> used = Usage(running=1, cpu_milli=3000)
>>> over(limits, used, Usage(running=1, cpu_milli=2000))
'maxCores 4: 3 in use + 2 asked'
>>> over(limits, used, Usage(running=1, cpu_milli=1000)) is None
True
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fluxinfra.kube.graph import DEFAULT_GPU_RESOURCES
from fluxinfra.kube.quantity import QuantityError, cpu_millicores, memory_bytes

__all__ = ["Limits", "Usage", "demand", "limits_of", "order_key", "over"]


@dataclass(frozen=True)
class Limits:
    """None means unlimited."""

    max_running: int | None = None
    max_cpu_milli: int | None = None
    max_memory: int | None = None
    max_gpus: int | None = None


@dataclass
class Usage:
    running: int = 0
    cpu_milli: int = 0
    memory: int = 0
    gpus: int = 0

    def add(self, other: Usage, sign: int = 1) -> None:
        self.running += sign * other.running
        self.cpu_milli += sign * other.cpu_milli
        self.memory += sign * other.memory
        self.gpus += sign * other.gpus


def _quantity(spec: dict[str, Any], key: str, parse: Any) -> int | None:
    value = spec.get(key)
    if value is None:
        return None
    try:
        return int(parse(str(value)))
    except (QuantityError, ValueError):
        return 0  # the CRD's pattern refuses these; an unreadable limit admits nothing


def limits_of(queue: dict[str, Any] | None) -> Limits:
    """The limits of a FluxJobQueue object (None: no object, no limits)."""
    if queue is None:
        return Limits()
    spec = queue.get("spec") or {}

    def count(key: str) -> int | None:
        value = spec.get(key)
        return None if value is None else max(0, int(value))

    return Limits(count("maxRunning"), _quantity(spec, "maxCores", cpu_millicores),
                  _quantity(spec, "maxMemory", memory_bytes), count("maxGPUs"))


def demand(requests: dict[str, int], pods: int) -> Usage:
    """What a FluxJob of ``pods`` pods, each requesting ``requests``, counts against limits."""
    gpus = sum(requests.get(name, 0) for name in DEFAULT_GPU_RESOURCES)
    return Usage(1, pods * requests.get("cpu", 0), pods * requests.get("memory", 0),
                 pods * gpus)


def _cores(milli: int) -> str:
    return f"{milli // 1000}" if milli % 1000 == 0 else f"{milli}m"


def over(limits: Limits, used: Usage, asked: Usage) -> str | None:
    """Which limit ``asked`` on top of ``used`` exceeds (a sentence), or None."""
    checks = [("maxRunning", limits.max_running, used.running, asked.running, str),
              ("maxCores", limits.max_cpu_milli, used.cpu_milli, asked.cpu_milli, _cores),
              ("maxMemory", limits.max_memory, used.memory, asked.memory, str),
              ("maxGPUs", limits.max_gpus, used.gpus, asked.gpus, str)]
    for name, limit, now, more, show in checks:
        if limit is not None and more and now + more > limit:
            return f"{name} {show(limit)}: {show(now)} in use + {show(more)} asked"
    return None


def order_key(priority: int, created: float, name: str) -> tuple[int, float, str]:
    """Serve order: priority (high first), creation time, name."""
    return (-priority, created, name)
