"""A scheduler wired to the API double, stepped by hand, and the invariants every test checks."""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any

from fluxinfra.scheduler.allocator import Allocator, node_specs
from fluxinfra.scheduler.binder import KubeBinder
from fluxinfra.scheduler.core import SchedulerConfig, SchedulerCore
from fluxinfra.scheduler.pods import pod_info
from fluxinfra.scheduler.runner import Runner

from .kube_double import KubeApiDouble


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


class Harness:
    """``api`` (the double) + ``runner`` (informers, core, KubeBinder) on a hand-moved clock."""

    def __init__(self, api: KubeApiDouble, allocator: Allocator,
                 config: SchedulerConfig | None = None) -> None:
        self.api = api
        self.clock = Clock()
        self.binder = KubeBinder(api)
        self.core = SchedulerCore(allocator, self.binder, config or SchedulerConfig(),
                                  clock=self.clock)
        self.runner = Runner(api, self.core, clock=self.clock)
        self.runner.t0 = 0.0

    def start(self) -> Harness:
        self.runner.start()
        return self

    def step(self, seconds: float = 0.0) -> None:
        self.clock.t += seconds
        self.runner.pump()

    def node_of(self, pod: str, namespace: str = "default") -> str:
        return self.api.get("pods", f"{namespace}/{pod}")["spec"].get("nodeName", "")

    def events(self, reason: str | None = None) -> list[dict[str, Any]]:
        return [e for e in self.api.events if reason is None or e["reason"] == reason]

    def conditions(self, pod: str, namespace: str = "default") -> dict[str, dict[str, Any]]:
        status = self.api.get("pods", f"{namespace}/{pod}")["status"]
        return {c["type"]: c for c in status.get("conditions", [])}


def check_invariants(h: Harness) -> None:
    """No node over capacity; the core holds exactly one share per running pod, on its node."""
    capacity = {s.name: s for s in node_specs(h.api.objects["nodes"].values())[0]}
    used: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
    running: dict[str, str] = {}
    for pod in h.api.objects["pods"].values():
        if not pod["spec"].get("nodeName"):
            continue
        info = pod_info(pod)
        if not info.holds_resources:
            continue
        running[info.uid] = info.node_name
        if info.node_name in capacity:
            shape = info.request.shape()
            u = used[info.node_name]
            u[0] += shape.cores
            u[1] += shape.memory_mib
            u[2] += shape.gpus
    for node, (cores, mem, gpus) in used.items():
        spec = capacity[node]
        assert cores <= spec.cores, f"{node}: {cores} cores used of {spec.cores}"
        assert mem <= spec.memory_mib, f"{node}: {mem} MiB used of {spec.memory_mib}"
        assert gpus <= len(spec.gpus), f"{node}: {gpus} GPUs used of {len(spec.gpus)}"
    held = {uid: node for node, shares in h.core.held().items() for uid, _ in shares}
    assert held == running, f"core holds {held}, cluster runs {running}"
    counts: dict[str, int] = defaultdict(int)
    for job in h.core.jobs.values():
        for uid in job.shares:
            counts[uid] += 1
    assert all(c == 1 for c in counts.values()), f"a pod is held twice: {dict(counts)}"
    ledger = getattr(h.core.allocator, "ledger", None)
    if ledger is not None:  # the Fluxion allocator's fast pre-check agrees with the books
        books: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
        for node, shares in h.core.held().items():
            for _, shape in shares:
                b = books[node]
                b[0], b[1], b[2] = b[0] + shape.cores, b[1] + shape.memory_mib, b[2] + shape.gpus
        for node, used in ledger.used.items():
            assert used == books.get(node, [0, 0, 0]), f"ledger {node}: {used} vs {books[node]}"
    assert math.isfinite(h.core.metrics.match_latency.count)
