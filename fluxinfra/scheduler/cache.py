"""The scheduler's cache: the cluster's objects as last read, and exact accounting of them.

kube-scheduler's ``internal/cache`` (``cacheImpl``: nodes and the pods on them, pods *assumed*
while their bind runs, a generation bumped at every change that matters), joined to the books
Fluxion keeps: the allocator's graph and the jobs registered in it.

- The :class:`~fluxinfra.scheduler.ledger.Ledger` holds every pod bound and not finished,
  exactly, whoever placed it, plus the pods whose bind is in flight (assumed).
- The allocator's graph holds the same pods: a pod the core placed holds its slot of its
  group's match (:attr:`Cache.shares`); pods it did not place in this run (another scheduler's,
  or its own from before a restart) are *resident*: each node's residents are registered as one
  allocation of their exact summed requests, again at the next cycle when they change.
- Per-node infrastructure (DaemonSet pods, static pods' mirrors) is *node overhead*
  (:mod:`~fluxinfra.scheduler.overhead`): taken out of what the node offers in the graph, never
  an allocation, so node-exclusive policies still see such a node as idle.
- A job whose pods outlive its declared end is extended (:meth:`Cache.extend_overdue`).

:attr:`Cache.generation` is bumped whenever something changed that could let a waiting group
fit: the scheduling cycle tries a group that failed again only after it moved.
"""

from __future__ import annotations

import contextlib
import heapq
import logging
from collections.abc import Iterable
from typing import Any

from fluxinfra.matcher.errors import MatcherError, UnknownJob
from fluxinfra.scheduler.allocator import Allocator
from fluxinfra.scheduler.config import SchedulerConfig
from fluxinfra.scheduler.ledger import Ledger
from fluxinfra.scheduler.metrics import Metrics
from fluxinfra.scheduler.overhead import NodeOverhead
from fluxinfra.scheduler.pods import PodInfo, Request

__all__ = ["Cache"]

log = logging.getLogger(__name__)


class Cache:
    """Nodes, pods, PodGroups, namespaces and PDBs as read, and the books over them."""

    def __init__(self, allocator: Allocator, metrics: Metrics, config: SchedulerConfig) -> None:
        self.allocator = allocator
        self.metrics = metrics
        self.config = config
        self.nodes: dict[str, dict[str, Any]] = {}
        self.pods: dict[str, PodInfo] = {}
        self.podgroups: dict[str, dict[str, Any]] = {}
        self.namespaces: dict[str, dict[str, str]] = {}
        self.pdbs: dict[str, dict[str, Any]] = {}
        self.ledger = Ledger()
        #: uid -> (allocator job, node, request) of pods we placed (bound or binding)
        self.shares: dict[str, tuple[int, str, Request]] = {}
        self.job_ends: dict[int, int] = {}      #: allocator job -> declared end
        self._ends: list[tuple[int, int]] = []  #: heap of (end, jobid)
        #: pods we did not place in this run, counted per node as one registration
        self.resident: dict[str, dict[str, PodInfo]] = {}
        self.resident_of: dict[str, str] = {}   #: uid -> node of a resident pod
        self.resident_job: dict[str, int] = {}
        self._dirty: set[str] = set()           #: nodes whose residents change next cycle
        #: per-node infrastructure, taken out of what each node offers in the graph
        self.overhead = NodeOverhead()
        self._offer_dirty: set[str] = set()  #: nodes whose overhead changed since the graph saw
        #: bumped whenever something that could let a waiting group fit changed
        self.generation = 0

    # ==== nodes ===================================================================================
    def add_nodes(self, nodes: dict[str, dict[str, Any]]) -> None:
        """Start-up: the nodes in the books (the graph is built later, :meth:`build_graph`)."""
        for name, node in nodes.items():
            self.nodes[name] = node
            self.ledger.upsert_node(node)

    def build_graph(self, nodes: Iterable[dict[str, Any]]) -> None:
        """Start-up: the graph built once, after the pods: each node offers what its overhead
        leaves."""
        self.allocator.set_nodes([self.overhead.offered(n) for n in nodes])
        self._offer_dirty.clear()

    def upsert_node(self, name: str, node: dict[str, Any]) -> None:
        """A node added or changed; the graph first: it keeps the old node if it refuses the
        new one (raising :class:`~fluxinfra.matcher.errors.MatcherError`, nothing changed)."""
        old = self.nodes.get(name)
        self.allocator.upsert_node(self.overhead.offered(node))
        self._offer_dirty.discard(name)
        self.nodes[name] = node
        self.ledger.upsert_node(node)
        if old is None or self.resident.get(name):
            self._dirty.add(name)  # pods seen before their node, or a resized node

    def remove_node(self, name: str) -> bool:
        """A node deleted; False when it was not known."""
        if self.nodes.pop(name, None) is None:
            return False
        self.allocator.remove_node(name)
        self.ledger.remove_node(name)
        self.resident_job.pop(name, None)
        return True

    # ==== pods ====================================================================================
    def running(self, info: PodInfo, previous: PodInfo | None) -> None:
        """Account a pod that holds resources on ``info.node_name``: as the share we placed,
        as node overhead, or as a resident."""
        uid = info.uid
        share = self.shares.get(uid)
        if share is not None and share[1] != info.node_name:
            # Our bind lost a race: the pod runs elsewhere. Account where it really is.
            self.release_share(uid)
            share = None
        if share is not None:
            self.ledger.add(info, info.node_name)  # the same pod, maybe new labels
        elif info.node_overhead:
            self._add_overhead(info)
        elif self.resident_of.get(uid) == info.node_name and previous is not None and \
                previous.request == info.request:
            self.resident[info.node_name][uid] = info  # unchanged amounts: no re-register
            self.ledger.add(info, info.node_name)
        else:
            self._add_resident(info)

    def assume(self, pod: PodInfo, node: str, jobid: int) -> None:
        """A pod we placed holds its share on ``node`` until the informer says it is bound
        (kube-scheduler's ``AssumePod``)."""
        self.shares[pod.uid] = (jobid, node, pod.request)
        self.ledger.add(pod, node)

    def release(self, uid: str) -> None:
        """The pod no longer holds resources: out of the ledger, and its share, resident
        registration or overhead given back."""
        held = self.ledger.remove(uid) is not None
        if not self._drop_resident(uid) and not self._drop_overhead(uid):
            self.release_share(uid)
        if held:
            self.generation += 1

    def release_share(self, uid: str) -> None:
        """Give back the allocator share of a pod we placed."""
        share = self.shares.pop(uid, None)
        if share is None:
            return
        jobid, node, request = share
        try:
            empty = self.allocator.release(jobid, node, request)
        except UnknownJob:
            empty = True
        except MatcherError as exc:
            log.error("release of %s from job %d on %s failed: %s", uid, jobid, node, exc)
            self.metrics.errors.inc(source="release")
            empty = False
        if empty:
            self.job_ends.pop(jobid, None)

    def _add_overhead(self, info: PodInfo) -> None:
        """A running pod of the node's infrastructure: out of the node's offer (next cycle)."""
        self._drop_resident(info.uid)
        self.ledger.add(info, info.node_name)
        previous = self.overhead.node_of.get(info.uid)
        if self.overhead.add(info.uid, info.node_name, info.request):
            self._offer_dirty.add(info.node_name)
            if previous is not None:
                self._offer_dirty.add(previous)

    def _drop_overhead(self, uid: str) -> bool:
        node = self.overhead.remove(uid)
        if node is None:
            return False
        self._offer_dirty.add(node)
        return True

    def _add_resident(self, info: PodInfo) -> None:
        """A running pod we did not place: count it on its node (registered next cycle)."""
        self._drop_overhead(info.uid)
        self._drop_resident(info.uid)
        self.resident.setdefault(info.node_name, {})[info.uid] = info
        self.resident_of[info.uid] = info.node_name
        self.ledger.add(info, info.node_name)
        self._dirty.add(info.node_name)

    def _drop_resident(self, uid: str) -> bool:
        node = self.resident_of.pop(uid, None)
        if node is None:
            return False
        pods = self.resident.get(node, {})
        pods.pop(uid, None)
        if not pods:
            self.resident.pop(node, None)
        self._dirty.add(node)
        return True

    # ==== the graph's registrations, each cycle ===================================================
    def _apply_offers(self) -> None:
        """Give the graph the new offer of each node whose overhead changed (the node is
        attached again with its new pools, its pieces registered again; many at once: one
        rebuild). When the graph refuses them together, node by node, skipping the refused."""
        names = [n for n in sorted(self._offer_dirty) if n in self.nodes]
        self._offer_dirty.clear()
        if not names:
            return
        self.generation += 1
        try:
            self.allocator.upsert_nodes([self.overhead.offered(self.nodes[n]) for n in names])
            return
        except MatcherError:
            pass
        for name in names:
            try:
                self.allocator.upsert_node(self.overhead.offered(self.nodes[name]))
            except MatcherError as exc:
                log.warning("cannot take the overhead of node %s out of its offer: %s", name,
                            exc)
                self.metrics.errors.inc(source="adopt")

    def register_residents(self, now: int) -> None:
        """Apply changed node offers, then re-register each changed node's resident pods as
        one allocation of their sum."""
        if self._offer_dirty:
            self._apply_offers()
        if not self._dirty:
            return
        for node in sorted(self._dirty):
            old = self.resident_job.pop(node, None)
            if old is not None:
                self.job_ends.pop(old, None)
                self.cancel_quietly(old)
            pods = self.resident.get(node)
            if not pods or node not in self.nodes:
                continue
            total = Request()
            for pod in pods.values():
                total = total + pod.request
            duration = self.config.default_duration
            try:
                jobid = self.allocator.adopt(node, total, len(pods), now=now,
                                             duration=duration)
            except MatcherError as exc:
                log.warning("cannot register %d running pods on %s: %s", len(pods), node, exc)
                self.metrics.errors.inc(source="adopt")
                continue
            if node in self.allocator.unsynced:
                self.metrics.errors.inc(source="adopt")
            self.resident_job[node] = jobid
            self.track(jobid, now + duration)
        self._dirty.clear()

    def track(self, jobid: int, end: int) -> None:
        """``jobid`` is declared to end at ``end`` (extended then if its pods still run)."""
        self.job_ends[jobid] = end
        heapq.heappush(self._ends, (end, jobid))

    def next_end(self) -> int | None:
        """The earliest declared end still tracked, None when none is."""
        return self._ends[0][0] if self._ends else None

    def extend_overdue(self, now: int) -> None:
        """Jobs past their declared end still hold their nodes while their pods run."""
        while self._ends and self._ends[0][0] <= now:
            end, jobid = heapq.heappop(self._ends)
            if self.job_ends.get(jobid) != end:
                continue
            try:
                self.allocator.extend(jobid, now=now, duration=self.config.extension)
            except MatcherError as exc:
                log.error("extending job %d failed: %s", jobid, exc)
                self.metrics.errors.inc(source="extend")
            self.track(jobid, now + self.config.extension)
            self.generation += 1  # a reservation behind it starts later

    def cancel_quietly(self, jobid: int) -> None:
        """Cancel an allocator job that may be gone already."""
        with contextlib.suppress(UnknownJob):
            self.allocator.cancel(jobid)
