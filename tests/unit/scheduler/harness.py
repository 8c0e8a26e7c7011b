"""A scheduler wired to the API double, stepped by hand, and the invariants every test checks."""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any

from fluxinfra.matcher.k8s import node_allocatable
from fluxinfra.scheduler.allocator import Allocator
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
    """No node over-committed (real requests vs allocatable); the core counts exactly the running
    pods, each on the node it runs on; the allocator's books match the core's jobs; the API
    server refused nothing the scheduler sent."""
    assert not h.api.rejected, f"the API server would refuse: {h.api.rejected}"
    nodes = {n["metadata"]["name"]: n for n in h.api.objects["nodes"].values()}
    used: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
    running: dict[str, str] = {}
    for pod in h.api.objects["pods"].values():
        if not pod["spec"].get("nodeName"):
            continue
        info = pod_info(pod)
        if not info.holds_resources:
            continue
        running[info.uid] = info.node_name
        u = used[info.node_name]
        u[0] += info.request.cpu_milli
        u[1] += info.request.memory
        u[2] += info.request.gpu
    for node, (cpu, mem, gpus) in used.items():
        if node not in nodes:
            continue
        alloc = node_allocatable(nodes[node])
        assert cpu <= alloc.get("cpu", 0), f"{node}: {cpu}m cpu requested of {alloc}"
        assert mem <= alloc.get("memory", 0), f"{node}: {mem} bytes requested of {alloc}"
        assert gpus <= alloc.get("nvidia.com/gpu", 0), f"{node}: {gpus} GPUs of {alloc}"
    held = {uid: node for node, shares in h.core.held().items() for uid, _ in shares}
    assert held == running, f"core holds {held}, cluster runs {running}"
    counts: dict[str, int] = defaultdict(int)
    for job in h.core.jobs.values():
        for uid in job.shares:
            counts[uid] += 1
    assert all(c == 1 for c in counts.values()), f"a pod is held twice: {dict(counts)}"
    ledger = getattr(h.core.allocator, "ledger", None)
    if ledger is not None:  # the Fluxion allocator's fast pre-check agrees with the core's jobs
        books: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
        for job in h.core.jobs.values():
            for node, shape in job.shares.values():
                b = books[node]
                b[0], b[1], b[2] = b[0] + shape.cores, b[1] + shape.memory_mib, b[2] + shape.gpus
        for node, used_here in ledger.used.items():
            assert used_here == books.get(node, [0, 0, 0]), \
                f"ledger {node}: {used_here} vs {books[node]}"
    assert math.isfinite(h.core.metrics.match_latency.count)
