"""Where pods go: the :class:`Allocator` interface, and the kube-scheduler-like spread baseline.

The scheduler core decides which nodes a pod may use (its candidate set, from
:mod:`~fluxinfra.scheduler.filters`) and asks an allocator to place ``count`` pods of one
request (resource name -> base units) among those candidates, each pod wholly on one node,
several pods per node allowed, for a duration, possibly as a reservation in the future, possibly
all below one vertex of a topology level. Two implementations:

- :class:`~fluxinfra.scheduler.fluxion.FluxionAllocator` - Fluxion's matcher (in process or over
  the gRPC service): policies, reservations (EASY backfill), the exact pool graph;
- :class:`SpreadAllocator` here - what kube-scheduler's default profile does (of the nodes that
  fit, score a sample by least-allocated, take the best), all-or-nothing per call. It never
  reserves. The simulator's baseline.

Both count every resource by its exact name in base units, like the scheduler's ledger.

>>> from fluxinfra.scheduler.pods import Request
>>> a = SpreadAllocator()
>>> a.set_nodes([{"metadata": {"name": f"n{i}"}, "status": {"allocatable": {
...     "cpu": "4", "memory": "4Gi", "pods": "110"}}} for i in range(2)])
>>> p = a.place(2, Request.of({"cpu": 2000}), candidates=None, duration=60, now=0,
...             reserve=False)
>>> p.status, sorted(p.nodes)
('ALLOCATED', ['n0', 'n1'])
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

from fluxinfra.kube.pools import TopologyLevel, node_domains
from fluxinfra.kube.resources import node_allocatable
from fluxinfra.matcher.errors import Busy, UnknownJob, Unsatisfiable
from fluxinfra.scheduler.pods import Request

__all__ = ["Allocator", "Candidates", "Placement", "SpreadAllocator"]

#: a pod's candidate nodes (None: every node)
Candidates = frozenset[str] | None


@dataclass
class Placement:
    """The answer to :meth:`Allocator.place`: one node per pod, in slot order."""

    jobid: int
    status: str                   #: "ALLOCATED" or "RESERVED"
    at: int                       #: start time (== now when ALLOCATED)
    nodes: list[str] = field(default_factory=list)


class Allocator(Protocol):
    """What the scheduler core needs from a placement engine."""

    name: str
    #: the topology levels its graph carries, outermost first
    levels: tuple[TopologyLevel, ...]
    #: nodes whose running pods it could not all register (it undercounts them)
    unsynced: set[str]

    def set_nodes(self, nodes: list[dict[str, Any]]) -> None:
        """(Re)build from every Node object; forgets all jobs."""
        ...

    def upsert_node(self, node: dict[str, Any]) -> None:
        """A node joined or changed (capacity, topology labels)."""
        ...

    def upsert_nodes(self, nodes: list[dict[str, Any]]) -> None:
        """Several nodes changed at once (as :meth:`upsert_node` each, maybe cheaper)."""
        ...

    def remove_node(self, name: str) -> None:
        """A node left; shares held there are forgotten."""
        ...

    def place(self, count: int, request: Request, *, candidates: Candidates, duration: int,
              now: int, reserve: bool, within: str | None = None,
              count_min: int | None = None) -> Placement:
        """Place ``count`` pods of ``request`` on ``candidates`` now, or (``reserve``) at the
        earliest time they fit; ``within`` a topology level: all below one vertex of it;
        ``count_min``: any number from ``count_min`` to ``count`` (as many as fit).

        Raises ``Busy`` (not now, and no reservation asked or possible) or ``Unsatisfiable``
        (never, on these candidates).
        """
        ...

    def adopt(self, node: str, request: Request, pods: int, *, now: int, duration: int) -> int:
        """Register ``pods`` pods already running on ``node`` (``request`` in all); a job id.
        When the node has not that much free (an over-commit by others), the allocator keeps
        the books but lists the node in ``unsynced`` (the scheduler then avoids it)."""
        ...

    def release(self, jobid: int, node: str, request: Request) -> bool:
        """Free one pod's share of a job; True when the job holds nothing more."""
        ...

    def cancel(self, jobid: int) -> None:
        """Free a whole job (or drop a reservation)."""
        ...

    def extend(self, jobid: int, *, now: int, duration: int) -> None:
        """The job's pods still run past its end: hold its resources for ``duration`` more."""
        ...

    def domains(self, level: str) -> list[tuple[str, frozenset[str]]]:
        """The vertices of topology ``level`` (their paths) and the nodes below each, in the
        order the allocator's policy prefers them."""
        ...


def domain_map(nodes: Iterable[dict[str, Any]], levels: tuple[TopologyLevel, ...],
               level: str) -> dict[str, set[str]]:
    """Domain path (``zone-a/rack-3``) of ``level`` -> its node names."""
    out: dict[str, set[str]] = {}
    for node in nodes:
        meta = node.get("metadata") or {}
        path = node_domains(meta.get("labels") or {}, levels)
        for depth, (name, _) in enumerate(path):
            if name == level:
                out.setdefault("/".join(v for _, v in path[:depth + 1]), set()).add(meta["name"])
    return out


@dataclass
class NodeCapacity:
    name: str
    allocatable: dict[str, int]
    used: dict[str, int] = field(default_factory=dict)

    def fits(self, slot: dict[str, int]) -> bool:
        return all(self.allocatable.get(r, 0) - self.used.get(r, 0) >= n for r, n in slot.items())

    def fits_empty(self, slot: dict[str, int]) -> int:
        """How many pods of ``slot`` the empty node holds."""
        return min((self.allocatable.get(r, 0) // n for r, n in slot.items() if n), default=0)

    def take(self, slot: dict[str, int], sign: int = 1) -> None:
        for r, n in slot.items():
            self.used[r] = self.used.get(r, 0) + sign * n

    def score(self) -> float:
        """kube-scheduler's LeastAllocated: the mean free fraction of cpu and memory."""
        parts = [1 - self.used.get(r, 0) / self.allocatable[r] for r in ("cpu", "memory")
                 if self.allocatable.get(r)]
        return sum(parts) / 2


class SpreadAllocator:
    """kube-scheduler's default placement (least-allocated spread), all-or-nothing per call.

    Like kube-scheduler it scores only a sample of the feasible nodes (``sample`` of them, found
    from a rotating start), which is what keeps it fast at 5,000 nodes.
    """

    name = "spread"

    def __init__(self, sample: int = 100, levels: tuple[TopologyLevel, ...] = ()) -> None:
        self.sample = sample
        self.levels = levels
        self.unsynced: set[str] = set()  # it never refuses an adoption
        self.nodes: dict[str, NodeCapacity] = {}
        self.objects: dict[str, dict[str, Any]] = {}
        self.order: list[str] = []
        self.jobs: dict[int, list[tuple[str, dict[str, int]]]] = {}
        self._ids = itertools.count(1)
        self._start = 0

    def set_nodes(self, nodes: list[dict[str, Any]]) -> None:
        self.nodes.clear()
        self.objects.clear()
        self.order.clear()
        self.jobs.clear()
        for node in nodes:
            self.upsert_node(node)

    def upsert_node(self, node: dict[str, Any]) -> None:
        name = node["metadata"]["name"]
        old = self.nodes.get(name)
        cap = NodeCapacity(name, node_allocatable(node), dict(old.used) if old else {})
        if old is None:
            self.order.append(name)
        self.nodes[name] = cap
        self.objects[name] = node

    def upsert_nodes(self, nodes: list[dict[str, Any]]) -> None:
        for node in nodes:
            self.upsert_node(node)

    def remove_node(self, name: str) -> None:
        if self.nodes.pop(name, None) is not None:
            self.order.remove(name)
            self.objects.pop(name, None)
        for shares in self.jobs.values():
            shares[:] = [(n, s) for n, s in shares if n != name]

    def _pick(self, slot: dict[str, int], candidates: Candidates) -> NodeCapacity | None:
        best: NodeCapacity | None = None
        seen = 0
        n = len(self.order)
        for i in range(n):
            name = self.order[(self._start + i) % n]
            if candidates is not None and name not in candidates:
                continue
            cap = self.nodes[name]
            if cap.fits(slot):
                if best is None or cap.score() > best.score():
                    best = cap
                seen += 1
                if seen >= self.sample:
                    self._start = (self._start + i + 1) % n
                    break
        return best

    def place(self, count: int, request: Request, *, candidates: Candidates, duration: int,
              now: int, reserve: bool, within: str | None = None,
              count_min: int | None = None) -> Placement:
        slot = request.slot()
        pools = [c for c in self.nodes.values() if candidates is None or c.name in candidates]
        least = count if count_min is None else min(count, count_min)
        if within is not None:
            groups = [nodes for _, nodes in self.domains(within)]
        else:
            groups = [{c.name for c in pools}]
        if not any(sum(self.nodes[n].fits_empty(slot) for n in g
                       if candidates is None or n in candidates) >= least for g in groups):
            raise Unsatisfiable(f"{least} x ({request}) does not fit the candidate nodes")
        for group in groups:
            allowed: Candidates = None
            if within is not None:
                allowed = frozenset(group) if candidates is None else frozenset(group) & candidates
            elif candidates is not None:
                allowed = candidates
            taken: list[NodeCapacity] = []
            while len(taken) < count:
                cap = self._pick(slot, allowed)
                if cap is None:
                    break
                cap.take(slot)
                taken.append(cap)
            if len(taken) >= least:
                jobid = next(self._ids)
                self.jobs[jobid] = [(c.name, slot) for c in taken]
                return Placement(jobid, "ALLOCATED", now, [c.name for c in taken])
            for t in taken:
                t.take(slot, -1)
        raise Busy(f"{least} x ({request}): no room now")

    def adopt(self, node: str, request: Request, pods: int, *, now: int, duration: int) -> int:
        jobid = next(self._ids)
        slot = request.slot(pods)
        self.jobs[jobid] = [(node, slot)]
        if node in self.nodes:
            self.nodes[node].take(slot)
        return jobid

    def release(self, jobid: int, node: str, request: Request) -> bool:
        shares = self.jobs.get(jobid)
        if shares is None:
            raise UnknownJob(f"job {jobid} is not known")
        slot = request.slot()
        if (node, slot) in shares:
            shares.remove((node, slot))
            if node in self.nodes:
                self.nodes[node].take(slot, -1)
        if not shares:
            del self.jobs[jobid]
            return True
        return False

    def cancel(self, jobid: int) -> None:
        shares = self.jobs.pop(jobid, None)
        if shares is None:
            raise UnknownJob(f"job {jobid} is not known")
        for node, slot in shares:
            if node in self.nodes:
                self.nodes[node].take(slot, -1)

    def extend(self, jobid: int, *, now: int, duration: int) -> None:
        if jobid not in self.jobs:
            raise UnknownJob(f"job {jobid} is not known")

    def domains(self, level: str) -> list[tuple[str, frozenset[str]]]:
        mapping = domain_map(self.objects.values(), self.levels, level)

        def free(nodes: set[str]) -> int:
            return sum(self.nodes[n].allocatable.get("cpu", 0) - self.nodes[n].used.get("cpu", 0)
                       for n in nodes)

        return sorted(((k, frozenset(v)) for k, v in mapping.items()),
                      key=lambda kv: (-free(set(kv[1])), kv[0]))
