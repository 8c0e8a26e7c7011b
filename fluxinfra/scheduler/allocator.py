"""Where pods go: the :class:`Allocator` interface, and the kube-scheduler-like spread baseline.

The scheduler core asks an allocator to place ``count`` identical slots (one pod each, each slot
wholly on one node, slots may share nodes) for a duration, possibly as a reservation in the
future, and tells it about nodes and about pods it did not place. Two implementations:

- :class:`~fluxinfra.scheduler.fluxion.FluxionAllocator` - Fluxion's matcher (in process or over
  the gRPC service): policies, reservations (EASY backfill), the graph;
- :class:`SpreadAllocator` here - what kube-scheduler's default profile does (filter nodes that
  fit, score a sample by least-allocated, take the best), made all-or-nothing for groups like
  the coscheduling plugin. It never reserves. The simulator's baseline.

Amounts are in the graph's units (:class:`~fluxinfra.scheduler.pods.Shape`: whole cores, MiB,
GPUs); node capacity comes from :func:`fluxinfra.matcher.k8s.k8s_inventory`, so both allocators
see the same cluster.

>>> from fluxinfra.scheduler.pods import Shape
>>> a = SpreadAllocator()
>>> a.set_nodes([{"metadata": {"name": f"n{i}"}, "status": {"allocatable": {
...     "cpu": "4", "memory": "4Gi"}}} for i in range(2)])
>>> p = a.place(2, Shape(2, 1024, 0), duration=60, now=0, reserve=False)
>>> p.status, sorted(p.nodes)
('ALLOCATED', ['n0', 'n1'])
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

from fluxinfra.matcher.errors import Busy, UnknownJob, Unsatisfiable
from fluxinfra.matcher.k8s import NodeSpec, k8s_inventory
from fluxinfra.scheduler.pods import Shape

__all__ = ["Allocator", "NodeCapacity", "Placement", "SpreadAllocator", "node_specs"]


@dataclass
class Placement:
    """The answer to :meth:`Allocator.place`: one node per slot, in slot order."""

    jobid: int
    status: str                   #: "ALLOCATED" or "RESERVED"
    at: int                       #: start time (== now when ALLOCATED)
    nodes: list[str] = field(default_factory=list)
    overhead: float = 0.0         #: seconds spent matching


class Allocator(Protocol):
    """What the scheduler core needs from a placement engine."""

    name: str

    def set_nodes(self, nodes: list[dict[str, Any]]) -> None:
        """(Re)build from every Node object; forgets all jobs."""
        ...

    def upsert_node(self, node: dict[str, Any]) -> None:
        """A node joined or changed (cordon, NotReady, capacity)."""
        ...

    def remove_node(self, name: str) -> None:
        """A node left; shares held there are forgotten."""
        ...

    def place(self, count: int, shape: Shape, *, duration: int, now: int,
              reserve: bool) -> Placement:
        """Place ``count`` slots now, or (``reserve``) at the earliest time they fit.

        Raises ``Busy`` (not now, and no reservation asked or possible) or ``Unsatisfiable``
        (never, on this cluster).
        """
        ...

    def adopt(self, node: str, shape: Shape, *, now: int, duration: int) -> int:
        """Register a pod that is already running on ``node``; returns its job id."""
        ...

    def release(self, jobid: int, node: str, shape: Shape) -> bool:
        """Free one pod's share of a job; True when the job holds nothing more."""
        ...

    def cancel(self, jobid: int) -> None:
        """Free a whole job (or drop a reservation)."""
        ...

    def extend(self, jobid: int, *, now: int, duration: int) -> None:
        """The job's pods still run past its end: hold its resources for ``duration`` more."""
        ...


def node_specs(nodes: Iterable[dict[str, Any]]) -> tuple[list[NodeSpec], dict[str, str]]:
    """Nodes in the graph (full allocatable capacity) and the ones left out, with the reason."""
    inv = k8s_inventory(list(nodes), [], subtract_pods=False)
    return inv.nodes, inv.skipped


@dataclass
class NodeCapacity:
    name: str
    cores: int
    memory_mib: int
    gpus: int
    up: bool = True
    used_cores: int = 0
    used_memory: int = 0
    used_gpus: int = 0

    def fits(self, s: Shape) -> bool:
        return (self.cores - self.used_cores >= s.cores
                and self.memory_mib - self.used_memory >= s.memory_mib
                and self.gpus - self.used_gpus >= s.gpus)

    def fits_empty(self, s: Shape) -> int:
        """How many slots of ``s`` the empty node holds."""
        limits = [self.cores // s.cores]
        if s.memory_mib:
            limits.append(self.memory_mib // s.memory_mib)
        if s.gpus:
            limits.append(self.gpus // s.gpus)
        return min(limits)

    def take(self, s: Shape, sign: int = 1) -> None:
        self.used_cores += sign * s.cores
        self.used_memory += sign * s.memory_mib
        self.used_gpus += sign * s.gpus

    def score(self) -> float:
        """kube-scheduler's LeastAllocated: the mean free fraction of cpu and memory."""
        cpu = 1 - self.used_cores / self.cores if self.cores else 0.0
        mem = 1 - self.used_memory / self.memory_mib if self.memory_mib else 0.0
        return (cpu + mem) / 2


class SpreadAllocator:
    """kube-scheduler's default placement (least-allocated spread), all-or-nothing per group.

    Like kube-scheduler it scores only a sample of the feasible nodes (``sample`` of them, found
    from a rotating start), which is what keeps it fast at 5,000 nodes.
    """

    name = "spread"

    def __init__(self, sample: int = 100) -> None:
        self.sample = sample
        self.nodes: dict[str, NodeCapacity] = {}
        self.order: list[str] = []
        self.jobs: dict[int, list[tuple[str, Shape]]] = {}
        self._ids = itertools.count(1)
        self._start = 0

    def set_nodes(self, nodes: list[dict[str, Any]]) -> None:
        self.nodes.clear()
        self.jobs.clear()
        for node in nodes:
            self.upsert_node(node)

    def upsert_node(self, node: dict[str, Any]) -> None:
        specs, skipped = node_specs([node])
        name = node["metadata"]["name"]
        old = self.nodes.get(name)
        if specs:
            spec = specs[0]
            memory = spec.memory_mib // spec.memory_chunk_mib * spec.memory_chunk_mib
            cap = NodeCapacity(name, spec.cores, memory, len(spec.gpus), up=spec.status == "up")
        elif old is not None:
            cap = NodeCapacity(old.name, old.cores, old.memory_mib, old.gpus, up=False)
        else:
            return  # a node that never joins the graph (control plane, tainted)
        if old is not None:
            cap.used_cores, cap.used_memory, cap.used_gpus = (
                old.used_cores, old.used_memory, old.used_gpus)
        else:
            self.order.append(name)
        self.nodes[name] = cap

    def remove_node(self, name: str) -> None:
        if self.nodes.pop(name, None) is not None:
            self.order.remove(name)
        for shares in self.jobs.values():
            shares[:] = [(n, s) for n, s in shares if n != name]

    def _pick(self, shape: Shape) -> NodeCapacity | None:
        best: NodeCapacity | None = None
        seen = 0
        n = len(self.order)
        for i in range(n):
            cap = self.nodes[self.order[(self._start + i) % n]]
            if cap.up and cap.fits(shape):
                if best is None or cap.score() > best.score():
                    best = cap
                seen += 1
                if seen >= self.sample:
                    self._start = (self._start + i + 1) % n
                    break
        return best

    def place(self, count: int, shape: Shape, *, duration: int, now: int,
              reserve: bool) -> Placement:
        if sum(c.fits_empty(shape) for c in self.nodes.values() if c.up) < count:
            raise Unsatisfiable(f"{count} x {shape} does not fit the cluster's up nodes")
        taken: list[NodeCapacity] = []
        for _ in range(count):
            cap = self._pick(shape)
            if cap is None:
                for t in taken:
                    t.take(shape, -1)
                raise Busy(f"{count} x {shape}: no room now")
            cap.take(shape)
            taken.append(cap)
        jobid = next(self._ids)
        self.jobs[jobid] = [(c.name, shape) for c in taken]
        return Placement(jobid, "ALLOCATED", now, [c.name for c in taken])

    def adopt(self, node: str, shape: Shape, *, now: int, duration: int) -> int:
        jobid = next(self._ids)
        self.jobs[jobid] = [(node, shape)]
        if node in self.nodes:
            self.nodes[node].take(shape)
        return jobid

    def release(self, jobid: int, node: str, shape: Shape) -> bool:
        shares = self.jobs.get(jobid)
        if shares is None:
            raise UnknownJob(f"job {jobid} is not known")
        if (node, shape) in shares:
            shares.remove((node, shape))
            if node in self.nodes:
                self.nodes[node].take(shape, -1)
        if not shares:
            del self.jobs[jobid]
            return True
        return False

    def cancel(self, jobid: int) -> None:
        shares = self.jobs.pop(jobid, None)
        if shares is None:
            raise UnknownJob(f"job {jobid} is not known")
        for node, shape in shares:
            if node in self.nodes:
                self.nodes[node].take(shape, -1)

    def extend(self, jobid: int, *, now: int, duration: int) -> None:
        if jobid not in self.jobs:
            raise UnknownJob(f"job {jobid} is not known")
