"""The Fluxion allocator: the scheduler's placement through the matcher, in process or remote.

This module is the one place where the scheduler meets the matcher's API, so every gap between
what the scheduler needs and what the matcher offers is bridged (and documented) here:

- **The graph** is the exact pool graph of :func:`fluxinfra.kube.pools.pool_graph`: per node,
  one pool per resource name (millicores, KiB, counts, the pod count), under the configured
  topology levels; matched with ``exact_pools`` so a pod takes exactly its request.
- **Candidates** (the filters' verdict: which nodes a pod may use) travel as an RFC 31
  ``ranks`` constraint (each node's rank is fixed when it first joins); one constraint document
  per distinct candidate set, reused, so the matcher parses it once.
- **Per-pod release.** A group is matched once, as one job; pods finish one by one. A finished
  pod's slot is released exactly (``partial_cancel(jobid, slot_R(jobid, i))``; over gRPC
  ``PartialCancel{slots}``). Amounts registered for running pods (re-learnt after a restart, or
  placed by others) are one matcher job per node; releasing one of them frees that job and
  registers the siblings again. Each allocator job is therefore a list of *pieces*.
- **Registering running pods** (``adopt``, and re-registering after a node changed or a job
  overran) is ``update_allocate`` with an R naming the node's pools and amounts
  (:func:`~fluxinfra.kube.pools.pool_hold_jgf`): what a one-slot match would hold, without a
  traversal, all or nothing: amounts the node does not have free raise ``Busy`` and hold
  nothing; the node is then listed in :attr:`FluxionAllocator.unsynced` until its pods fit
  again, and the scheduler keeps new pods off it.
- **Nodes joining, changing and leaving** change the live graph node by node: a new node is
  attached with ``add_subgraph`` (under its topology vertices, created when new), a deleted one
  removed with ``remove_subgraph``; a node whose allocatable amounts or topology labels change
  is removed and attached again with the same rank, and only its own pieces are registered
  again. Labels, taints and cordons do not touch the graph at all: they change candidate sets.
- **Clock.** The matcher's ``now`` is set from the scheduler's clock before every call.

Two backends speak to a matcher: :class:`InProcessBackend` (default) and
:class:`RemoteBackend` (the gRPC Fluxion service, ``--fluxion-service host:port``).

>>> from fluxinfra.scheduler.pods import Request
>>> a = FluxionAllocator(policy="first")
>>> a.set_nodes([{"metadata": {"name": f"n{i}"}, "status": {"allocatable": {
...     "cpu": "4", "memory": "4Gi", "pods": "110"}}} for i in range(2)])
>>> p = a.place(16, Request.of({"cpu": 500}), candidates=None, duration=60, now=0,
...             reserve=False)
>>> p.status, len(p.nodes)
('ALLOCATED', 16)
"""

from __future__ import annotations

import contextlib
import itertools
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from fluxinfra.errors import FluxinfraError
from fluxinfra.idset import encode as format_idset
from fluxinfra.kube.pools import (
    TopologyLevel,
    node_domains,
    node_pools,
    parse_topology,
    pool_jobspec,
)
from fluxinfra.matcher.errors import Busy, MatcherError, UnknownJob, Unsatisfiable
from fluxinfra.scheduler.allocator import Candidates, Placement, domain_map
from fluxinfra.scheduler.pods import Request

__all__ = ["BackendUnavailable", "FluxionAllocator", "InProcessBackend", "MatcherBackend",
           "RemoteBackend", "slim_node"]

log = logging.getLogger(__name__)

#: the matcher's pruning types for the pool graph (``first`` ranks children by the last)
PRUNE_FILTERS = "ALL:memory,ALL:pods,ALL:cpu"


class MatcherBackend(Protocol):
    def load(self, nodes: list[dict[str, Any]], ranks: dict[str, int],
             levels: tuple[TopologyLevel, ...]) -> dict[str, int]:
        """(Re)build the graph; returns node name -> rank."""
        ...
    def match(self, jobspec: dict[str, Any], op: str, jobid: int,
              now: int) -> tuple[str, int, list[str]]: ...
    def cancel(self, jobid: int) -> None: ...
    def partial_cancel(self, jobid: int, nodes: list[str]) -> bool: ...
    def release_slot(self, jobid: int, index: int) -> bool | None:
        """Free one slot of a matched job; True when the job is empty, None if unsupported."""
        ...
    def add_node(self, node: dict[str, Any], rank: int) -> bool:
        """Attach one node to the live graph; False when the backend cannot (rebuild)."""
        ...
    def remove_node(self, name: str) -> bool:
        """Remove one node from the live graph; False when the backend cannot (rebuild)."""
        ...
    def domain_order(self, level: str, paths: list[str]) -> list[str]:
        """``paths`` (domains of ``level``) in the order the policy visits them."""
        ...
    def register(self, jobid: int, node: dict[str, Any], amounts: dict[str, int], now: int,
                 duration: int) -> None:
        """Hold ``amounts`` of ``node``'s pools as job ``jobid`` (``update_allocate``);
        ``Busy`` when they are not free."""
        ...


def _slot_nodes(slots: list[dict[str, Any]]) -> list[str]:
    nodes = []
    for slot in slots:
        if len(slot) != 1:
            raise MatcherError(f"a slot spans nodes {sorted(slot)}; a pod needs one node")
        nodes.append(next(iter(slot)))
    return nodes


class InProcessBackend:
    """A :class:`~fluxinfra.matcher.Matcher` over the pool graph, in this process.

    ``on_matcher`` is called with each matcher :meth:`load` builds (the scheduler's command,
    which owns its process, settles the collector there:
    :func:`fluxinfra.matcher.gcpolicy.tune_for`)."""

    def __init__(self, policy: str = "first",
                 on_matcher: Callable[[Any], Any] | None = None) -> None:
        self.policy = policy
        self.on_matcher = on_matcher
        self.matcher: Any = None
        self.levels: tuple[TopologyLevel, ...] = ()

    def load(self, nodes: list[dict[str, Any]], ranks: dict[str, int],
             levels: tuple[TopologyLevel, ...]) -> dict[str, int]:
        from fluxinfra.kube.pools import pool_graph
        from fluxinfra.matcher import Matcher

        self.levels = levels
        graph, ranks = pool_graph(nodes, levels, ranks=ranks)
        self.matcher = Matcher(graph, policy=self.policy, exact_pools=True,
                               prune_filters=PRUNE_FILTERS)
        if self.on_matcher is not None:
            self.on_matcher(self.matcher)
        return ranks

    def match(self, jobspec: dict[str, Any], op: str, jobid: int,
              now: int) -> tuple[str, int, list[str]]:
        self.matcher.now = now
        result = self.matcher.match(jobspec, op=op, jobid=jobid, now=now)
        return result.status, result.at, _slot_nodes(result.slots)

    def cancel(self, jobid: int) -> None:
        self.matcher.cancel(jobid)

    def partial_cancel(self, jobid: int, nodes: list[str]) -> bool:
        return bool(self.matcher.partial_cancel(jobid, nodes))

    def release_slot(self, jobid: int, index: int) -> bool | None:
        return bool(self.matcher.partial_cancel(jobid, self.matcher.slot_R(jobid, index)))

    def add_node(self, node: dict[str, Any], rank: int) -> bool:
        from fluxinfra.kube.pools import pool_node_jgf

        self.matcher.add_subgraph(pool_node_jgf(self.matcher.graph, node, self.levels, rank))
        return True

    def remove_node(self, name: str) -> bool:
        g = self.matcher.graph
        found = [v for v in g.by_name(name) if g.type[v] == "node" and not g.removed[v]]
        if found:
            self.matcher.remove_subgraph(g.path(found[0]))
        return True

    def register(self, jobid: int, node: dict[str, Any], amounts: dict[str, int], now: int,
                 duration: int) -> None:
        from fluxinfra.kube.pools import pool_hold_jgf

        self.matcher.now = now
        jgf = pool_hold_jgf(node, self.levels, amounts, graph=self.matcher.graph)
        self.matcher.update_allocate(jobid, jgf, at=now, duration=duration)

    def domain_order(self, level: str, paths: list[str]) -> list[str]:
        g = self.matcher.graph
        root = g.path(g.roots["containment"])
        ids = {}
        for p in paths:
            with contextlib.suppress(MatcherError):
                ids[p] = g.id[g.resolve(f"{root}/{p}")]
        high = self.matcher.policy.high
        return sorted(paths, key=lambda p: (-ids.get(p, 0) if high else ids.get(p, 0), p))


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
    """The gRPC Fluxion service (``fluxinfra service``); the scheduler owns its graph and books,
    and sends the graph as node objects (the service builds the same pool graph: ``exact_pools``).

    The service is a cache of the allocator's books, never their only copy. Every answer
    carries the service's epoch; :meth:`load` (which replaces the service's graph and forgets
    its jobs) records it. An answer from another epoch (the service restarted and forgot every
    job), or no answer at all (unreachable, deadline exceeded: the outcome is unknown), marks
    the backend ``stale``. While stale, changes to the books (cancel, release, register) are
    not sent, only kept in the allocator, and a match raises :class:`BackendUnavailable` before
    anything is booked; the allocator's :meth:`~FluxionAllocator.sync_backend` then replays
    everything (``load`` + one ``update_allocate`` per piece) and the backend is fresh again.
    So a restarted service never answers a match from an empty (or half-known) graph, and
    nothing is placed twice.
    """

    def __init__(self, target: str, timeout: float = 30.0, *, tls: Any = None,
                 client: Any = None) -> None:
        if client is None:
            from fluxinfra.service.client import FluxionClient

            client = FluxionClient(target, timeout=timeout, tls=tls)
        self.client = client
        self.levels: tuple[TopologyLevel, ...] = ()
        self.graph: Any = None  #: a copy of the service's graph (uniq_ids, paths)
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

    def load(self, nodes: list[dict[str, Any]], ranks: dict[str, int],
             levels: tuple[TopologyLevel, ...]) -> dict[str, int]:
        """Replace the service's graph (forgetting its jobs); returns node name -> rank. Never
        raises for an unreachable service: the backend stays stale and the next
        :meth:`FluxionAllocator.sync_backend` loads again."""
        from fluxinfra.kube.pools import pool_graph
        from fluxinfra.service.client import ServiceError

        self.levels = levels
        # the service builds the same graph from the same input: same ranks and uniq_ids
        self.graph, ranks = pool_graph(nodes, levels, ranks=ranks)
        try:
            self.client.load_nodes({"model": "pools", "nodes": [slim_node(n) for n in nodes],
                                    "ranks": ranks,
                                    "topology": [[lvl.name, lvl.label] for lvl in levels],
                                    "prune_filters": PRUNE_FILTERS})
        except (ServiceError, MatcherError) as exc:
            log.warning("Fluxion service %s: load_nodes failed (%s); will retry",
                        self.client.target, exc)
            self._went_stale(f"load_nodes failed ({exc})")
            return ranks
        self.epoch = self.client.epoch
        self.stale, self.reason = False, ""
        return ranks

    def match(self, jobspec: dict[str, Any], op: str, jobid: int,
              now: int) -> tuple[str, int, list[str]]:
        result = self._rpc("match", jobspec, op=op, jobid=jobid, now=now)
        return result.status, result.at, _slot_nodes(result.slots)

    def cancel(self, jobid: int) -> None:
        self._quietly("cancel", jobid)

    def partial_cancel(self, jobid: int, nodes: list[str]) -> bool:
        # Unknown (stale): "not fully released", so the allocator keeps the job's other shares.
        return bool(self._quietly("partial_cancel", jobid, nodes))

    def release_slot(self, jobid: int, index: int) -> bool | None:
        # None (stale) makes the allocator release by node, which the replay then settles.
        return self._quietly("partial_cancel", jobid, slots=[index])

    def add_node(self, node: dict[str, Any], rank: int) -> bool:
        return False  # the scheduler reloads the service's graph instead

    def remove_node(self, name: str) -> bool:
        """Remove the node's vertices from the service's graph (its path from our copy of
        the graph, which is the service's); our copy keeps them until the next load."""
        g = self.graph
        found = [v for v in g.by_name(name) if g.type[v] == "node" and not g.removed[v]] \
            if g is not None else []
        if found:
            self._quietly("remove_subgraph", g.path(found[0]))
        return True

    def domain_order(self, level: str, paths: list[str]) -> list[str]:
        return sorted(paths)

    def register(self, jobid: int, node: dict[str, Any], amounts: dict[str, int], now: int,
                 duration: int) -> None:
        from fluxinfra.kube.pools import pool_hold_jgf

        jgf = pool_hold_jgf(node, self.levels, amounts, graph=self.graph)
        self._quietly("update_allocate", jobid, jgf, at=now, duration=duration)


@dataclass
class Piece:
    """One matcher job holding some of an allocator job's shares."""

    mjobid: int
    end: int
    shares: list[tuple[str, Request]] = field(default_factory=list)
    reserved: bool = False
    #: the matcher's slot index of each share (a matched group), or None (registered amounts)
    slots: list[int] | None = None
    #: pods per share (registered amounts stand for several pods at once)
    pods: list[int] | None = None
    #: the matcher holds nothing for it (its node had not the room: see ``unsynced``)
    unheld: bool = False


class FluxionAllocator:
    """:class:`~fluxinfra.scheduler.allocator.Allocator` over Fluxion's matcher."""

    #: more nodes than this changing their pools at once are applied by one rebuild: each
    #: re-attached node re-indexes the whole graph, and at 1,000 nodes one rebuild costs what
    #: about seven re-attachments do
    REBUILD_AFTER = 8

    def __init__(self, policy: str = "first", backend: MatcherBackend | None = None,
                 levels: tuple[TopologyLevel, ...] | str | None = None) -> None:
        self.name = f"fluxion:{policy}"
        self.backend = backend or InProcessBackend(policy)
        self.levels = parse_topology(levels) if not isinstance(levels, tuple) else levels
        self.jobs: dict[int, list[Piece]] = {}
        self.nodes: dict[str, dict[str, Any]] = {}
        self.ranks: dict[str, int] = {}
        #: node -> what shapes its vertices (pool sizes, topology path)
        self.shapes: dict[str, tuple] = {}
        #: nodes whose running pods could not all be registered (the graph undercounts them)
        self.unsynced: set[str] = set()
        self.now = 0
        self._ids = itertools.count(1)
        self.rebuilds = 0
        #: times :meth:`sync_backend` replayed the books into a backend that had lost them
        self.replays = 0
        self.resized = 0
        self._satisfiable: set[tuple] = set()
        self._constraints: dict[frozenset[str], dict[str, Any] | None] = {}
        #: (count, request, duration, constraint key, within, count_min) -> jobspec (reused)
        self._jobspecs: dict[tuple, dict] = {}
        self.skipped_matches = 0

    # -- nodes ------------------------------------------------------------------------------
    def _shape(self, node: dict[str, Any]) -> tuple:
        labels = (node.get("metadata") or {}).get("labels") or {}
        return (tuple(node_pools(node).items()), node_domains(labels, self.levels))

    def set_nodes(self, nodes: list[dict[str, Any]]) -> None:
        self.nodes = {n["metadata"]["name"]: n for n in nodes}
        self.jobs.clear()
        self._load()

    def _load(self) -> None:
        self.ranks = self.backend.load(list(self.nodes.values()), self.ranks, self.levels)
        self.shapes = {name: self._shape(n) for name, n in self.nodes.items()}
        self._forget_caches()

    def _forget_caches(self) -> None:
        self._satisfiable.clear()
        self._constraints.clear()
        self._jobspecs.clear()

    def upsert_node(self, node: dict[str, Any]) -> None:
        """Attach a new node, or re-attach a changed one (its pieces registered again). When
        the graph refuses the node (a ``MatcherError``), the node as it was before is put
        back, graph included, and the error raised: never half a change."""
        name = node["metadata"]["name"]
        before, had_rank = self.nodes.get(name), name in self.ranks
        try:
            self._upsert(name, node)
        except MatcherError:
            if before is None:
                self.nodes.pop(name, None)
                self.shapes.pop(name, None)
                if not had_rank:
                    self.ranks.pop(name, None)
            else:
                self.nodes[name] = before
                self.shapes[name] = self._shape(before)
            self._rebuild()
            raise

    def upsert_nodes(self, nodes: list[dict[str, Any]]) -> None:
        """Several nodes changed at once: as :meth:`upsert_node` each, except that when more
        than :attr:`REBUILD_AFTER` known nodes change their pools or topology, those are
        applied by one rebuild (their pieces registered again). When the graph refuses them,
        they are put back as they were and the error raised."""
        resized = [n for n in nodes if n["metadata"]["name"] in self.shapes
                   and self._shape(n) != self.shapes[n["metadata"]["name"]]]
        if len(resized) <= self.REBUILD_AFTER:
            for node in nodes:
                self.upsert_node(node)
            return
        before = {n["metadata"]["name"]: self.nodes[n["metadata"]["name"]] for n in resized}
        for node in resized:
            self.nodes[node["metadata"]["name"]] = node
        try:
            self._rebuild()
        except MatcherError:
            self.nodes.update(before)
            self._rebuild()
            raise
        self.resized += len(resized)
        for node in nodes:
            if node["metadata"]["name"] not in before:
                self.upsert_node(node)

    def _upsert(self, name: str, node: dict[str, Any]) -> None:
        self.nodes[name] = node
        shape = self._shape(node)
        old = self.shapes.get(name)
        if old == shape:
            return  # labels, taints, cordon, heartbeat: nothing the graph holds
        if old is None:
            rank = self.ranks.setdefault(name, max(self.ranks.values(), default=-1) + 1)
            if self.backend.add_node(node, rank):
                self.shapes[name] = shape
                self._forget_caches()
                return
        elif self.backend.remove_node(name) and self.backend.add_node(node, self.ranks[name]):
            self.shapes[name] = shape
            self.resized += 1
            self._reregister(name)
            self._forget_caches()
            return
        self._rebuild()

    def remove_node(self, name: str) -> None:
        if self.nodes.pop(name, None) is None:
            return
        self._drop_shares(name)
        self.shapes.pop(name, None)
        self.unsynced.discard(name)
        if not self.backend.remove_node(name):
            self._rebuild()
        self._forget_caches()

    def _drop_shares(self, name: str) -> list[tuple[int, Piece, list[tuple[str, Request]],
                                                    list[int]]]:
        """Take the shares on node ``name`` out of every piece (the node's vertices are gone
        or going); returns (jobid, piece, shares, pods) of what was there."""
        dropped = []
        for jobid, pieces in self.jobs.items():
            for piece in list(pieces):
                here = [i for i, (n, _) in enumerate(piece.shares) if n == name]
                if not here:
                    continue
                shares = [piece.shares[i] for i in here]
                pods = [piece.pods[i] if piece.pods else 1 for i in here]
                keep = [i for i in range(len(piece.shares)) if i not in here]
                piece.shares = [piece.shares[i] for i in keep]
                if piece.pods is not None:
                    piece.pods = [piece.pods[i] for i in keep]
                piece.slots = None  # shares and slots no longer line up: by node from now on
                if not piece.shares:
                    pieces.remove(piece)
                dropped.append((jobid, piece, shares, pods))
        return dropped

    def _reregister(self, name: str) -> None:
        """Node ``name`` was attached again (resized): register what its pieces held."""
        self.unsynced.discard(name)
        for jobid, piece, shares, pods in self._drop_shares(name):
            if piece.reserved:
                continue
            fresh = self._register(name, shares, pods, piece.end)
            self.jobs.setdefault(jobid, []).extend(fresh)

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
        self.unsynced.clear()
        for jobid, pieces in list(self.jobs.items()):
            fresh: list[Piece] = []
            for piece in pieces:
                if not piece.reserved:
                    fresh += self._register_piece(piece, piece.end)
            self.jobs[jobid] = fresh

    def _register_piece(self, piece: Piece, end: int) -> list[Piece]:
        """The piece's shares registered again, one matcher job per node, until ``end``."""
        by_node: dict[str, tuple[list, list]] = {}
        for i, (node, req) in enumerate(piece.shares):
            entry = by_node.setdefault(node, ([], []))
            entry[0].append((node, req))
            entry[1].append(piece.pods[i] if piece.pods else 1)
        fresh: list[Piece] = []
        for node, (shares, pods) in by_node.items():
            fresh += self._register(node, shares, pods, end)
        return fresh

    def _register(self, node: str, shares: list[tuple[str, Request]], pods: list[int],
                  end: int) -> list[Piece]:
        """One matcher job holding ``shares`` (all on ``node``) until ``end``."""
        if node not in self.ranks or node not in self.nodes:
            return []
        total = Request()
        for _, req in shares:
            total = total + req
        mjobid = next(self._ids)
        try:
            self.backend.register(mjobid, self.nodes[node], total.slot(sum(pods)), self.now,
                                  max(1, end - self.now))
        except MatcherError as exc:
            log.warning("cannot register %d running pods on %s (%s): %s", sum(pods), node,
                        total, exc)
            self.unsynced.add(node)
            return [Piece(mjobid, end, list(shares), pods=list(pods), unheld=True)]
        return [Piece(mjobid, end, list(shares), pods=list(pods))]

    # -- jobs -------------------------------------------------------------------------------
    def _constraint(self, candidates: Candidates) -> dict[str, Any] | None:
        if candidates is None:
            return None
        got = self._constraints.get(candidates, False)
        if got is not False:
            return got  # type: ignore[return-value]
        ranks = self.ranks
        ids = {ranks[n] for n in candidates if n in ranks and n in self.nodes}
        if not ids:
            doc: dict[str, Any] | None = {"hostlist": []}  # nothing matches
        elif len(ids) == len(self.nodes):
            doc = None
        else:
            doc = {"ranks": [format_idset(ids)]}
        if len(self._constraints) >= 4096:
            self._constraints.clear()
        self._constraints[candidates] = doc
        return doc

    def place(self, count: int, request: Request, *, candidates: Candidates, duration: int,
              now: int, reserve: bool, within: str | None = None,
              count_min: int | None = None) -> Placement:
        self.now = now
        constraint = self._constraint(candidates)
        if constraint is not None and constraint.get("hostlist") == []:
            raise Unsatisfiable("no node passes the pod's filters")
        ckey = None if constraint is None else constraint["ranks"][0]
        key = (count, request, ckey, within, count_min)
        known = key in self._satisfiable
        js_key = (key, duration)
        js = self._jobspecs.get(js_key)
        if js is None:
            # one dict per request: the matcher then reuses its parse and what it derived
            if len(self._jobspecs) >= 1024:
                self._jobspecs.clear()
            js = self._jobspecs[js_key] = pool_jobspec(
                count, request.slot(), duration=duration, constraint=constraint,
                within=within, count_min=count_min)
        if reserve:
            op = "allocate_orelse_reserve"
        else:  # satisfiability only changes with the nodes: check it once per request
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
        self.jobs[jobid] = [Piece(jobid, at + duration, [(n, request) for n in nodes], reserved,
                                  list(range(len(nodes))))]
        return Placement(jobid, status, at, nodes)

    def adopt(self, node: str, request: Request, pods: int, *, now: int, duration: int) -> int:
        self.now = now
        if node not in self.ranks or node not in self.nodes:
            raise MatcherError(f"node {node!r} is not in the graph (not yet added)")
        jobid = next(self._ids)
        # a node without the room for them is listed in ``unsynced`` (the books are kept)
        self.jobs[jobid] = self._register(node, [(node, request)], [pods], now + duration)
        return jobid

    def release(self, jobid: int, node: str, request: Request) -> bool:
        pieces = self.jobs.get(jobid)
        if pieces is None:
            raise UnknownJob(f"allocator job {jobid} is not known")
        for piece in pieces:
            if (node, request) in piece.shares:
                break
        else:
            return not pieces  # the share went with its node
        k = piece.shares.index((node, request))
        del piece.shares[k]
        if piece.pods is not None:
            del piece.pods[k]
        if piece.unheld:  # never registered (unsynced node)
            if not piece.shares:
                pieces.remove(piece)
            self._resync(node)
        elif piece.slots is not None:
            slot = piece.slots.pop(k)
            done = self.backend.release_slot(piece.mjobid, slot) \
                if node in self.shapes else None
            if done is None:
                piece.slots = None  # this backend cannot release one slot: by node from now on
                self._release_by_node(pieces, piece, node)
            elif done or not piece.shares:
                if not done:
                    self._cancel_piece(piece)
                pieces.remove(piece)
        else:
            self._release_by_node(pieces, piece, node)
        if not pieces:
            del self.jobs[jobid]
            return True
        return False

    def _release_by_node(self, pieces: list[Piece], piece: Piece, node: str) -> None:
        """Free the piece's whole share of ``node``, then register its other pods there."""
        siblings = [(s, piece.pods[i] if piece.pods else 1)
                    for i, s in enumerate(piece.shares) if s[0] == node]
        gone = True
        if node in self.shapes:
            gone = self.backend.partial_cancel(piece.mjobid, [node])
        keep = [i for i, s in enumerate(piece.shares) if s[0] != node]
        piece.shares = [piece.shares[i] for i in keep]
        if piece.pods is not None:
            piece.pods = [piece.pods[i] for i in keep]
        if gone or not piece.shares:
            if not gone:
                self._cancel_piece(piece)
            pieces.remove(piece)
        if siblings:
            pieces += self._register(node, [s for s, _ in siblings], [n for _, n in siblings],
                                     piece.end)

    def _resync(self, node: str) -> None:
        """A pod left an unsynced node: try again to register what its pieces could not."""
        if node not in self.unsynced:
            return
        self.unsynced.discard(node)
        for pieces in self.jobs.values():
            for piece in [p for p in pieces if p.unheld and p.shares[0][0] == node]:
                pieces.remove(piece)
                pieces += self._register(node, piece.shares, piece.pods or
                                         [1] * len(piece.shares), piece.end)

    def _cancel_piece(self, piece: Piece) -> None:
        if piece.unheld:
            return  # a registration that never took hold
        with contextlib.suppress(UnknownJob):
            self.backend.cancel(piece.mjobid)

    def cancel(self, jobid: int) -> None:
        pieces = self.jobs.pop(jobid, None)
        if pieces is None:
            raise UnknownJob(f"allocator job {jobid} is not known")
        for piece in pieces:
            self._cancel_piece(piece)

    def extend(self, jobid: int, *, now: int, duration: int) -> None:
        pieces = self.jobs.get(jobid)
        if pieces is None:
            raise UnknownJob(f"allocator job {jobid} is not known")
        self.now = now
        fresh: list[Piece] = []
        for piece in pieces:
            self._cancel_piece(piece)
            fresh += self._register_piece(piece, now + duration)
        self.jobs[jobid] = fresh

    def domains(self, level: str) -> list[tuple[str, frozenset[str]]]:
        mapping = domain_map(self.nodes.values(), self.levels, level)
        order = self.backend.domain_order(level, list(mapping))
        return [(p, frozenset(mapping[p])) for p in order]

    def innermost(self, level: str) -> bool:
        """Whether ``level`` sits directly above the nodes (``level[1] -> slot`` reaches them)."""
        return bool(self.levels) and self.levels[-1].name == level
