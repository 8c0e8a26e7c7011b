"""The Fluxion allocator: the scheduler's placement through the matcher, in process or remote.

This module is the one place where the scheduler meets the matcher's API, so every gap between
what the scheduler needs and what the matcher offers is bridged (and documented) here:

- **Per-pod release.** A group is matched once, as one job; pods finish one by one. In process,
  and over gRPC (``PartialCancel{slots}``), a finished pod's slot is released exactly
  (``partial_cancel(jobid, slot_R(jobid, i))``). For amounts registered without slots (running
  pods re-learnt after a restart or a rebuild), ``partial_cancel`` by node frees the job's whole
  share of the node, so the siblings of the same job on that node are re-registered as a new
  matcher job (one ``register_amounts``). Each allocator job is therefore a list of *pieces*.
- **Registering running pods.** ``adopt`` uses the matcher's public
  :meth:`~fluxinfra.matcher.Matcher.register_amounts` (lowest free vertices of the pod's node;
  the service's ``Register`` RPC does the same remotely). It never books a vertex twice: amounts
  the node does not have free (or a node another job holds whole) raise ``Busy`` and hold
  nothing; the core logs and counts that (``errors{source="adopt"}``).
- **Nodes joining and leaving.** In process, a new node is attached with the matcher's
  ``add_subgraph`` (from :func:`fluxinfra.matcher.k8s.node_insertion`) and a deleted one removed
  with ``remove_subgraph``; a node whose capacity or labels change, and every change over gRPC,
  rebuilds the graph and re-registers every piece. Cordon, uncordon and NotReady only flip
  vertex status (``set_status``).
- **Clock.** The matcher's ``now`` is set from the scheduler's clock before every call.

Two backends speak to a matcher: :class:`InProcessBackend` (default) and
:class:`RemoteBackend` (the gRPC Fluxion service, ``--fluxion-service host:port``).

>>> from fluxinfra.scheduler.pods import Shape
>>> a = FluxionAllocator(policy="first")
>>> a.set_nodes([{"metadata": {"name": f"n{i}"}, "status": {"allocatable": {
...     "cpu": "4", "memory": "4Gi"}}} for i in range(2)])
>>> p = a.place(6, Shape(1, 1024, 0), duration=60, now=0, reserve=False)
>>> p.status, len(p.nodes)
('ALLOCATED', 6)
"""

from __future__ import annotations

import contextlib
import copy
import itertools
import logging
from dataclasses import dataclass, field
from typing import Any, Protocol

from fluxinfra.errors import FluxinfraError
from fluxinfra.matcher.errors import Busy, MatcherError, UnknownJob
from fluxinfra.scheduler.allocator import Placement, node_specs
from fluxinfra.scheduler.pods import Shape
from fluxinfra.service.jobspecs import slots_jobspec

__all__ = ["BackendUnavailable", "FluxionAllocator", "InProcessBackend", "MatcherBackend",
           "RemoteBackend"]

log = logging.getLogger(__name__)


def graph_nodes(nodes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Node objects as the graph should see them: cordoned nodes stay in (marked down later)."""
    out = []
    for node in nodes:
        if (node.get("spec") or {}).get("unschedulable"):
            node = copy.copy(node)
            node["spec"] = {k: v for k, v in node["spec"].items() if k != "unschedulable"}
        out.append(node)
    return out


def desired_status(node: dict[str, Any]) -> str:
    """``down`` when cordoned or not Ready (or otherwise excluded), else ``up``."""
    specs, _ = node_specs([node])
    return specs[0].status if specs else "down"


class MatcherBackend(Protocol):
    def load(self, nodes: list[dict[str, Any]]) -> None: ...
    def has_node(self, name: str) -> bool: ...
    def match(self, jobspec: dict[str, Any], op: str, jobid: int,
              now: int) -> tuple[str, int, list[str]]: ...
    def cancel(self, jobid: int) -> None: ...
    def partial_cancel(self, jobid: int, nodes: list[str]) -> bool: ...
    def release_slot(self, jobid: int, index: int) -> bool | None:
        """Free one slot of a matched job; True when the job is empty, None if unsupported."""
        ...
    def register(self, jobid: int, node: str, shape: Shape, now: int, duration: int) -> None: ...
    def set_status(self, node: str, status: str) -> None: ...
    def add_node(self, node: dict[str, Any]) -> bool:
        """Attach one node to the live graph; False when the backend cannot (rebuild)."""
        ...
    def remove_node(self, name: str) -> bool:
        """Remove one node from the live graph; False when the backend cannot (rebuild)."""
        ...


def _slot_nodes(slots: list[dict[str, Any]], count: int) -> list[str]:
    nodes = []
    for slot in slots:
        if len(slot) != 1:
            raise MatcherError(f"a slot spans nodes {sorted(slot)}; a pod needs one node")
        nodes.append(next(iter(slot)))
    if len(nodes) != count:
        raise MatcherError(f"the matcher returned {len(nodes)} slots for {count} pods")
    return nodes


class InProcessBackend:
    """A :class:`~fluxinfra.matcher.Matcher` in this process."""

    def __init__(self, policy: str = "first") -> None:
        self.policy = policy
        self.matcher: Any = None
        self.names: set[str] = set()

    def load(self, nodes: list[dict[str, Any]]) -> None:
        from fluxinfra.matcher import Matcher
        from fluxinfra.matcher.k8s import graph_from_k8s

        graph = graph_from_k8s(graph_nodes(nodes), [], subtract_pods=False)
        self.matcher = Matcher(graph, policy=self.policy)
        self.names = {graph.name[v] for v, t in enumerate(graph.type) if t == "node"}

    def has_node(self, name: str) -> bool:
        return name in self.names

    def match(self, jobspec: dict[str, Any], op: str, jobid: int,
              now: int) -> tuple[str, int, list[str]]:
        self.matcher.now = now
        result = self.matcher.match(jobspec, op=op, jobid=jobid, now=now)
        count = jobspec["resources"][0]["count"]
        return result.status, result.at, _slot_nodes(result.slots, count)

    def cancel(self, jobid: int) -> None:
        self.matcher.cancel(jobid)

    def partial_cancel(self, jobid: int, nodes: list[str]) -> bool:
        return bool(self.matcher.partial_cancel(jobid, nodes))

    def release_slot(self, jobid: int, index: int) -> bool | None:
        slot_r = getattr(self.matcher, "slot_R", None)
        if slot_r is None:
            return None
        return bool(self.matcher.partial_cancel(jobid, slot_r(jobid, index)))

    def register(self, jobid: int, node: str, shape: Shape, now: int, duration: int) -> None:
        self.matcher.register_amounts(
            jobid, node, {"core": shape.cores, "memory": shape.memory_mib, "gpu": shape.gpus},
            at=now, duration=duration)

    def set_status(self, node: str, status: str) -> None:
        self.matcher.set_status(node, status)

    def add_node(self, node: dict[str, Any]) -> bool:
        from fluxinfra.matcher.k8s import node_insertion

        if not hasattr(self.matcher, "add_subgraph"):
            return False
        specs, _ = node_specs(graph_nodes([node]))
        if not specs:
            return True  # stays out of the graph
        graph = self.matcher.graph
        plan = node_insertion(graph, specs[0])
        self.matcher.add_subgraph(insertion_jgf(graph, plan))
        self.names.add(specs[0].name)
        return True

    def remove_node(self, name: str) -> bool:
        if not hasattr(self.matcher, "remove_subgraph"):
            return False
        if name in self.names:
            self.matcher.remove_subgraph(name)
            self.names.discard(name)
        return True


def insertion_jgf(graph: Any, plan: dict[str, Any]) -> dict[str, Any]:
    """JGF for ``Matcher.add_subgraph`` from :func:`fluxinfra.matcher.k8s.node_insertion`'s plan:
    the existing parent (matched by its path, so reused) and the new vertices under it."""
    parent = graph.resolve(plan["parent"])
    next_uniq = max(graph.uniq_id) + 1
    nodes = [{"id": "parent", "metadata": {"type": graph.type[parent],
                                           "uniq_id": graph.uniq_id[parent],
                                           "paths": {"containment": plan["parent"]}}}]
    paths: dict[int, str] = {}
    parent_of = {child: pos for pos, child in plan["edges"]}
    edges = []
    for i, v in enumerate(plan["vertices"]):
        above = paths[parent_of[i]] if i in parent_of else plan["parent"]
        paths[i] = f"{above}/{v['name']}"
        md = {k: v[k] for k in ("type", "basename", "name", "id", "rank", "size", "unit")}
        md.update(uniq_id=next_uniq + i, status=0 if v["status"] == "up" else 1,
                  paths={"containment": paths[i]})
        if v.get("properties"):
            md["properties"] = dict(v["properties"])
        nodes.append({"id": f"new{i}", "metadata": md})
        source = f"new{parent_of[i]}" if i in parent_of else "parent"
        edges.append({"source": source, "target": f"new{i}",
                      "metadata": {"subsystem": "containment"}})
    return {"graph": {"nodes": nodes, "edges": edges}}


#: Parts of a Node object no graph is built from, and most of its bytes (a node's image list
#: alone is kilobytes): left out of what is sent to the service.
_BULK_METADATA = ("managedFields",)
_BULK_STATUS = ("images", "nodeInfo", "addresses", "daemonEndpoints", "volumesInUse",
                "volumesAttached", "config")


def slim_node(node: dict[str, Any]) -> dict[str, Any]:
    """``node`` without its bulk (see ``_BULK_*``) and with its conditions reduced to type and
    status; everything the graph reads (labels, annotations, spec, capacity) is kept."""
    meta = {k: v for k, v in (node.get("metadata") or {}).items() if k not in _BULK_METADATA}
    status = {k: v for k, v in (node.get("status") or {}).items() if k not in _BULK_STATUS}
    if "conditions" in status:
        status["conditions"] = [{"type": c.get("type"), "status": c.get("status")}
                                for c in status["conditions"] or []]
    return {**node, "metadata": meta, "status": status}


class BackendUnavailable(FluxinfraError):
    """The remote matcher restarted (a new epoch) or cannot be reached: nothing can be matched
    until the allocator has replayed its books into it (:meth:`FluxionAllocator.sync_backend`).
    Not a :class:`~fluxinfra.matcher.errors.MatcherError`: the request itself is fine."""


class RemoteBackend:
    """The gRPC Fluxion service (``fluxinfra service``); the scheduler owns its graph and books.

    The service is a cache of the allocator's books, never their only copy. Every answer
    carries the service's epoch; :meth:`load` (which replaces the service's graph and forgets
    its jobs) records it. An answer from another epoch (the service restarted and forgot every
    job), or no answer at all (unreachable, deadline exceeded: the outcome is unknown), marks
    the backend ``stale``. While stale, changes to the books (cancel, release, register,
    status) are not sent, only kept in the allocator, and a match raises
    :class:`BackendUnavailable` before anything is booked; the allocator's
    :meth:`~FluxionAllocator.sync_backend` then replays everything (``load`` + one
    ``register`` per piece) and the backend is fresh again. So a restarted service never
    answers a match from an empty (or half-known) graph, and nothing is placed twice.
    """

    def __init__(self, target: str, timeout: float = 30.0, *, tls: Any = None,
                 client: Any = None) -> None:
        if client is None:
            from fluxinfra.service.client import FluxionClient

            client = FluxionClient(target, timeout=timeout, tls=tls)
        self.client = client
        self.names: set[str] = set()
        #: the service epoch our books were loaded into ("" before the first load)
        self.epoch = ""
        #: True when the service may not hold our books: replay before the next match
        self.stale = True
        #: why it is stale now, and why it last went stale after being in step (for reports)
        self.reason = "not loaded yet"
        self.last_reset = ""
        self.resets = 0

    def _went_stale(self, why: str) -> None:
        if not self.stale:
            self.resets += 1
            self.last_reset = why
            log.warning("Fluxion service %s: %s; replaying every allocation before the next "
                        "match", self.client.target, why)
        self.stale, self.reason = True, why

    def _rpc(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """Call the client; an unknown outcome or a new epoch marks the backend stale and
        raises :class:`BackendUnavailable`. Matcher errors of our own epoch pass through."""
        from fluxinfra.service.client import ServiceError

        if self.stale:
            raise BackendUnavailable(f"Fluxion service {self.client.target}: {self.reason}")
        try:
            result = getattr(self.client, method)(*args, **kwargs)
        except ServiceError as exc:
            self._check_epoch()
            self._went_stale(f"{method} failed ({exc})")
            raise BackendUnavailable(str(exc)) from None
        except MatcherError:
            self._check_epoch()
            if self.stale:  # the error came from a service that does not know our jobs
                raise BackendUnavailable(
                    f"Fluxion service {self.client.target}: {self.reason}") from None
            raise
        self._check_epoch()
        if self.stale:
            raise BackendUnavailable(f"Fluxion service {self.client.target}: {self.reason}")
        return result

    def _check_epoch(self) -> None:
        seen = self.client.epoch
        if seen and self.epoch and seen != self.epoch:
            self._went_stale(f"restarted (epoch {self.epoch} -> {seen})")

    def _quietly(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """A change to the books: sent when the service is in step, else kept for the replay."""
        try:
            return self._rpc(method, *args, **kwargs)
        except BackendUnavailable:
            return None

    def load(self, nodes: list[dict[str, Any]]) -> None:
        """Replace the service's graph (forgetting its jobs). Never raises for an unreachable
        service: the backend stays stale and the next :meth:`FluxionAllocator.sync_backend`
        loads again."""
        from fluxinfra.service.client import ServiceError

        self.names = {s.name for s in node_specs(graph_nodes(nodes))[0]}
        try:
            self.client.load_nodes([slim_node(n) for n in graph_nodes(nodes)])
        except (ServiceError, MatcherError) as exc:
            log.warning("Fluxion service %s: load_nodes failed (%s); will retry",
                        self.client.target, exc)
            self._went_stale(f"load_nodes failed ({exc})")
            return
        self.epoch = self.client.epoch
        self.stale, self.reason = False, ""

    def has_node(self, name: str) -> bool:
        return name in self.names

    def match(self, jobspec: dict[str, Any], op: str, jobid: int,
              now: int) -> tuple[str, int, list[str]]:
        result = self._rpc("match", jobspec, op=op, jobid=jobid, now=now)
        count = jobspec["resources"][0]["count"]
        return result.status, result.at, _slot_nodes(result.slots, count)

    def cancel(self, jobid: int) -> None:
        self._quietly("cancel", jobid)

    def partial_cancel(self, jobid: int, nodes: list[str]) -> bool:
        # Unknown (stale): "not fully released", so the allocator keeps the job's other shares.
        return bool(self._quietly("partial_cancel", jobid, nodes))

    def release_slot(self, jobid: int, index: int) -> bool | None:
        # None (stale) makes the allocator release by node, which the replay then settles.
        return self._quietly("partial_cancel", jobid, slots=[index])

    def register(self, jobid: int, node: str, shape: Shape, now: int, duration: int) -> None:
        self._quietly("register", jobid, node, cores=shape.cores, memory_mib=shape.memory_mib,
                      gpus=shape.gpus, at=now, duration=duration)

    def set_status(self, node: str, status: str) -> None:
        self._quietly("set_status", node, status)

    def add_node(self, node: dict[str, Any]) -> bool:
        return False  # the scheduler reloads the service's graph instead

    def remove_node(self, name: str) -> bool:
        if name in self.names:
            self._quietly("remove_subgraph", name)
            self.names.discard(name)
        return True


@dataclass
class Piece:
    """One matcher job holding some of an allocator job's shares."""

    mjobid: int
    end: int
    shares: list[tuple[str, Shape]] = field(default_factory=list)
    reserved: bool = False
    #: the matcher's slot index of each share (a matched group), or None (registered amounts)
    slots: list[int] | None = None


class Ledger:
    """Free amounts over the up nodes, kept in step with the pieces: a cheap necessary test
    ("does the cluster hold count x shape at all, now?") that spares the matcher a full
    traversal for requests that cannot fit."""

    def __init__(self) -> None:
        self.capacity: dict[str, tuple[int, int, int]] = {}
        self.used: dict[str, list[int]] = {}
        self.up: dict[str, bool] = {}
        self.free = [0, 0, 0]

    def reset(self, nodes: list[dict[str, Any]], keep: Ledger | None = None) -> None:
        """Capacity from the node objects; usage zero, or carried over from ``keep`` (node by
        node, for nodes still present) when a node joins or leaves without a rebuild."""
        specs, _ = node_specs(graph_nodes(nodes))
        old_used = dict(keep.used) if keep is not None else {}
        old_up = dict(keep.up) if keep is not None else {}
        self.capacity = {s.name: (s.cores, s.memory_mib // s.memory_chunk_mib
                                  * s.memory_chunk_mib, len(s.gpus)) for s in specs}
        self.used = {name: list(old_used.get(name, [0, 0, 0])) for name in self.capacity}
        self.up = {name: old_up.get(name, True) for name in self.capacity}
        self.free = [sum(c[i] - self.used[n][i] for n, c in self.capacity.items() if self.up[n])
                     for i in range(3)]

    def use(self, node: str, shape: Shape, sign: int = 1) -> None:
        used = self.used.get(node)
        if used is None:
            return
        amounts = (shape.cores, shape.memory_mib, shape.gpus)
        for i in range(3):
            used[i] += sign * amounts[i]
            if self.up[node]:
                self.free[i] -= sign * amounts[i]

    def set_up(self, node: str, up: bool) -> None:
        if node not in self.up or self.up[node] == up:
            return
        sign = 1 if up else -1
        for i in range(3):
            self.free[i] += sign * (self.capacity[node][i] - self.used[node][i])
        self.up[node] = up

    def may_fit(self, count: int, shape: Shape) -> bool:
        need = (count * shape.cores, count * shape.memory_mib, count * shape.gpus)
        return all(need[i] <= self.free[i] for i in range(3))


def _combined(shapes: list[Shape]) -> Shape:
    return Shape(sum(s.cores for s in shapes), sum(s.memory_mib for s in shapes),
                 sum(s.gpus for s in shapes))


class FluxionAllocator:
    """:class:`~fluxinfra.scheduler.allocator.Allocator` over Fluxion's matcher."""

    def __init__(self, policy: str = "first", backend: MatcherBackend | None = None) -> None:
        self.name = f"fluxion:{policy}"
        self.backend = backend or InProcessBackend(policy)
        self.jobs: dict[int, list[Piece]] = {}
        self.nodes: dict[str, dict[str, Any]] = {}
        self.status: dict[str, str] = {}
        self.now = 0
        self._ids = itertools.count(1)
        self.rebuilds = 0
        #: times :meth:`sync_backend` replayed the books into a backend that had lost them
        self.replays = 0
        self.ledger = Ledger()
        self._satisfiable: set[tuple[int, Shape]] = set()
        #: (count, shape, duration) -> the jobspec dict handed to the backend (reused)
        self._jobspecs: dict[tuple, dict] = {}
        self.skipped_matches = 0

    # -- nodes ------------------------------------------------------------------------------
    def set_nodes(self, nodes: list[dict[str, Any]]) -> None:
        self.nodes = {n["metadata"]["name"]: n for n in nodes}
        self.jobs.clear()
        self._load()

    def _load(self) -> None:
        self.backend.load(list(self.nodes.values()))
        self.ledger.reset(list(self.nodes.values()))
        self._satisfiable.clear()
        self.status = {}
        for name, node in self.nodes.items():
            if self.backend.has_node(name):
                self.status[name] = "up"
                self._set_status(name, desired_status(node))

    def _set_status(self, name: str, status: str) -> None:
        if self.status.get(name) != status:
            self.backend.set_status(name, status)
            self.status[name] = status
            self.ledger.set_up(name, status == "up")

    def upsert_node(self, node: dict[str, Any]) -> None:
        name = node["metadata"]["name"]
        old = self.nodes.get(name)
        self.nodes[name] = node
        in_graph = self.backend.has_node(name)
        if in_graph and old is not None and _capacity(old) == _capacity(node):
            self._set_status(name, desired_status(node))  # heartbeat, cordon, NotReady
            return
        if not in_graph and not node_specs(graph_nodes([node]))[0]:
            return  # a node that stays out of the graph (control plane, tainted)
        if old is None and self.backend.add_node(node):
            self.ledger.reset(list(self.nodes.values()), keep=self.ledger)
            if self.backend.has_node(name):
                self.status[name] = "up"
                self._set_status(name, desired_status(node))
            return
        self._rebuild()

    def remove_node(self, name: str) -> None:
        if self.nodes.pop(name, None) is None:
            return
        for pieces in self.jobs.values():
            for piece in pieces:
                if piece.slots is not None and any(n == name for n, _ in piece.shares):
                    piece.slots = None  # shares and slots no longer line up: by node
                piece.shares = [(n, s) for n, s in piece.shares if n != name]
            pieces[:] = [p for p in pieces if p.shares]
        if self.backend.remove_node(name):
            self.status.pop(name, None)
            self.ledger.reset(list(self.nodes.values()), keep=self.ledger)
            self._satisfiable.clear()  # less capacity: what fitted once may never fit again
            return
        self._rebuild()

    def sync_backend(self, now: int) -> bool:
        """Replay every allocation into a backend that lost them (a restarted Fluxion service,
        or one whose answers went missing): the graph from the node objects, then each piece
        registered again, node by node, exactly as a rebuild does. True when the backend holds
        the books (nothing to do, or the replay went through); False while it is unreachable.
        The runner calls this before each batch of events and each cycle."""
        if not getattr(self.backend, "stale", False):  # only a remote backend can lose them
            return True
        self.now = now
        self._rebuild()
        if self.backend.stale:  # type: ignore[attr-defined]
            return False
        self.replays += 1
        log.info("replayed %d allocations into the matcher (%d nodes)",
                 sum(len(p) for p in self.jobs.values()), len(self.nodes))
        return True

    def _rebuild(self) -> None:
        """New graph from the node objects; every piece registered again, node by node."""
        self.rebuilds += 1
        self._load()
        for jobid, pieces in list(self.jobs.items()):
            fresh: list[Piece] = []
            for piece in pieces:
                if piece.reserved:
                    continue
                for node, shape in piece.shares:
                    if self.backend.has_node(node):
                        self.ledger.use(node, shape)
                fresh += self._register_shares(piece.shares, piece.end)
            self.jobs[jobid] = fresh

    def _register_shares(self, shares: list[tuple[str, Shape]], end: int) -> list[Piece]:
        by_node: dict[str, list[Shape]] = {}
        for node, shape in shares:
            by_node.setdefault(node, []).append(shape)
        pieces = []
        for node, shapes in by_node.items():
            if not self.backend.has_node(node):
                continue
            mjobid = next(self._ids)
            self.backend.register(mjobid, node, _combined(shapes), self.now,
                                  max(1, end - self.now))
            pieces.append(Piece(mjobid, end, [(node, s) for s in shapes]))
        return pieces

    # -- jobs -------------------------------------------------------------------------------
    def place(self, count: int, shape: Shape, *, duration: int, now: int,
              reserve: bool) -> Placement:
        self.now = now
        key = (count, shape)
        known = key in self._satisfiable
        if known and not reserve and not self.ledger.may_fit(count, shape):
            self.skipped_matches += 1
            raise Busy(f"{count} x {shape}: the up nodes do not have that much free now")
        js = self._jobspecs.get((key, duration))
        if js is None:
            # one dict per request shape: the matcher then reuses its parse and the facts it
            # derived from it (pods of a workload come in a few shapes)
            if len(self._jobspecs) >= 1024:
                self._jobspecs.clear()
            js = self._jobspecs[(key, duration)] = slots_jobspec(
                count, cores=shape.cores, memory_mib=shape.memory_mib, gpus=shape.gpus,
                duration=duration)
        if reserve:
            op = "allocate_orelse_reserve"
        else:  # satisfiability only changes with the nodes: check it once per shape
            op = "allocate" if known else "allocate_with_satisfiability"
        jobid = next(self._ids)
        try:
            status, at, nodes = self.backend.match(js, op, jobid, now)
        except Busy:
            if op == "allocate_with_satisfiability":
                self._satisfiable.add(key)
            raise
        self._satisfiable.add(key)
        reserved = status != "ALLOCATED"
        self.jobs[jobid] = [Piece(jobid, at + duration, [(n, shape) for n in nodes], reserved,
                                  list(range(len(nodes))))]
        if not reserved:
            for node in nodes:
                self.ledger.use(node, shape)
        return Placement(jobid, status, at, nodes)

    def adopt(self, node: str, shape: Shape, *, now: int, duration: int) -> int:
        self.now = now
        if not self.backend.has_node(node):
            raise MatcherError(f"node {node!r} is not in the graph (not yet added, or skipped)")
        jobid = next(self._ids)
        self.backend.register(jobid, node, shape, now, duration)
        self.jobs[jobid] = [Piece(jobid, now + duration, [(node, shape)])]
        self.ledger.use(node, shape)
        return jobid

    def release(self, jobid: int, node: str, shape: Shape) -> bool:
        pieces = self.jobs.get(jobid)
        if pieces is None:
            raise UnknownJob(f"allocator job {jobid} is not known")
        for piece in pieces:
            if (node, shape) in piece.shares:
                break
        else:
            return not pieces  # the share went with its node
        k = piece.shares.index((node, shape))
        del piece.shares[k]
        if not piece.reserved:
            self.ledger.use(node, shape, -1)
        if piece.slots is not None:
            slot = piece.slots.pop(k)
            done = self.backend.release_slot(piece.mjobid, slot) \
                if self.backend.has_node(node) else None
            if done is not None:  # exactly this pod's slot came back
                if done or not piece.shares:
                    if not done:
                        self._cancel_piece(piece)
                    pieces.remove(piece)
                if not pieces:
                    del self.jobs[jobid]
                    return True
                return False
            piece.slots = None  # this backend cannot release one slot: by node from now on
        siblings = [s for n, s in piece.shares if n == node]
        gone = True
        if self.backend.has_node(node):
            gone = self.backend.partial_cancel(piece.mjobid, [node])
        piece.shares = [(n, s) for n, s in piece.shares if n != node]
        if gone or not piece.shares:
            if not gone:
                self._cancel_piece(piece)
            pieces.remove(piece)
        if siblings:
            pieces += self._register_shares([(node, s) for s in siblings], piece.end)
        if not pieces:
            del self.jobs[jobid]
            return True
        return False

    def _cancel_piece(self, piece: Piece) -> None:
        with contextlib.suppress(UnknownJob):
            self.backend.cancel(piece.mjobid)

    def cancel(self, jobid: int) -> None:
        pieces = self.jobs.pop(jobid, None)
        if pieces is None:
            raise UnknownJob(f"allocator job {jobid} is not known")
        for piece in pieces:
            self._cancel_piece(piece)
            if not piece.reserved:
                for node, shape in piece.shares:
                    self.ledger.use(node, shape, -1)

    def extend(self, jobid: int, *, now: int, duration: int) -> None:
        pieces = self.jobs.get(jobid)
        if pieces is None:
            raise UnknownJob(f"allocator job {jobid} is not known")
        self.now = now
        fresh: list[Piece] = []
        for piece in pieces:
            self._cancel_piece(piece)
            fresh += self._register_shares(piece.shares, now + duration)
        self.jobs[jobid] = fresh


def _capacity(node: dict[str, Any]) -> Any:
    """What shapes a node's vertices: its allocatable amounts and labels (zone)."""
    status = node.get("status") or {}
    labels = (node.get("metadata") or {}).get("labels") or {}
    return (status.get("allocatable") or status.get("capacity") or {}, sorted(labels.items()))
