"""A scheduler wired to the API double, stepped by hand, and the invariants every test checks."""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from typing import Any

from fluxinfra.kube.pools import pool_request
from fluxinfra.kube.resources import node_allocatable
from fluxinfra.scheduler.allocator import Allocator
from fluxinfra.scheduler.binder import KubeBinder
from fluxinfra.scheduler.core import SchedulerConfig, SchedulerCore
from fluxinfra.scheduler.fluxion import FluxionAllocator, InProcessBackend
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
    """The whole accounting agrees with the cluster, exactly, and the API server refused
    nothing the scheduler sent:

    1. no node is over-committed: for every node and resource (by its exact name) the running
       pods' requests sum to at most allocatable, and the pod count to at most ``pods``;
    2. the core's ledger holds exactly the running pods, each on its node (plus the pods whose
       bind is being retried to their reserved node), with sums that add up, and the
       ``overcommitted`` metric is 0;
    3. the allocator's books hold, per node, exactly what the ledger holds but the node's
       overhead (DaemonSet and mirror pods), and its nodes offer what that overhead leaves;
    4. (Fluxion in process) the graph's pools hold, per node, exactly what the books say;
    5. every group with a pod to place is among the scheduling queue's waiting groups (the
       cycle reads only those), and the groups counted with binds running are those of the
       binds out.
    """
    assert not h.api.rejected, f"the API server would refuse: {h.api.rejected}"
    nodes = {n["metadata"]["name"]: n for n in h.api.objects["nodes"].values()}
    used: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    count: dict[str, int] = defaultdict(int)
    running: dict[str, str] = {}
    for pod in h.api.objects["pods"].values():
        if not pod["spec"].get("nodeName"):
            continue
        info = pod_info(pod)
        if not info.holds_resources:
            continue
        running[info.uid] = info.node_name
        count[info.node_name] += 1
        for resource, amount in info.request.items():
            used[info.node_name][resource] += amount
    for node, amounts in used.items():
        if node not in nodes:
            continue
        alloc = node_allocatable(nodes[node])
        for resource, amount in amounts.items():
            assert amount <= alloc.get(resource, 0), \
                f"{node}: {amount} {resource} requested of {alloc.get(resource, 0)}"
        assert count[node] <= alloc.get("pods", 0), f"{node}: {count[node]} pods"
    ledger = h.core.ledger
    expected = dict(running)
    expected.update({uid: b.node for uid, b in h.core.binding.items()})
    assert dict(ledger.where) == expected, f"ledger {dict(ledger.where)}, cluster {expected}"
    for state in ledger.nodes.values():
        sums: dict[str, int] = defaultdict(int)
        for pod in state.pods.values():
            for resource, amount in pod.request.items():
                sums[resource] += amount
        assert dict(sums) == {k: v for k, v in state.requested.items() if v}, state.name
    assert h.core.metrics.overcommitted.value() == 0, sorted(ledger.over)
    check_allocator_books(h.core)
    queue = h.core.scheduling_queue
    unseen = [key for key, group in queue.groups.items()
              if group.pending and key not in queue.waiting]
    assert not unseen, f"groups with pods to place the cycle would not read: {unseen}"
    out = Counter(pod.group_key for pod, _, _, _ in h.core.inflight.values())
    assert h.core.inflight_groups == dict(out), (h.core.inflight_groups, out)
    assert math.isfinite(h.core.metrics.match_latency.count)


def check_allocator_books(core: SchedulerCore) -> None:
    """The Fluxion allocator's books hold, per node, what the core's ledger holds but the
    node's overhead pods, and (in process) the graph's pools what the books say; each node in
    the allocator is offered its allocatable amounts less its overhead pods' requests."""
    alloc = core.allocator
    for name, node in core.nodes.items():
        want_offer = dict(node_allocatable(node))
        for uid, request in core.overhead.pods.get(name, {}).items():
            assert core.ledger.where.get(uid) == name, f"overhead pod {uid} not in the ledger"
            for r, n in request.slot().items():
                want_offer[r] = max(0, want_offer.get(r, 0) - n)
        objects = alloc.nodes if isinstance(alloc, FluxionAllocator) else \
            getattr(alloc, "objects", {})
        if name in objects:
            assert node_allocatable(objects[name]) == want_offer, \
                f"{name} offers {node_allocatable(objects[name])}, want {want_offer}"
    if not isinstance(alloc, FluxionAllocator):
        return
    live = set(core.reservations)
    books: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    graph: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for jobid, pieces in alloc.jobs.items():
        if jobid in live:
            continue
        for piece in pieces:
            if piece.reserved:
                continue
            by_node: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
            for i, (node, request) in enumerate(piece.shares):
                pods = piece.pods[i] if piece.pods else 1
                slot = request.slot(pods)
                for r, n in slot.items():
                    books[node][r] += n
                    if piece.slots is not None and not piece.unheld:
                        graph[node][r] += pool_request(r, n)
                    elif not piece.unheld:
                        by_node[node][r] += n
            for node, amounts in by_node.items():
                for r, n in amounts.items():
                    graph[node][r] += pool_request(r, n)
    for state in core.ledger.nodes.values():
        if state.name not in alloc.nodes:
            continue
        want = dict(state.requested)
        want["pods"] = len(state.pods)
        for request in core.overhead.pods.get(state.name, {}).values():
            for r, n in request.slot().items():
                want[r] = want.get(r, 0) - n
        want = {k: v for k, v in want.items() if v}
        got = {k: v for k, v in books.get(state.name, {}).items() if v}
        assert got == want, f"books of {state.name}: {got}, ledger {want}"
    backend = alloc.backend
    if not isinstance(backend, InProcessBackend) or not backend.matcher:
        return
    m = backend.matcher
    g, trav = m.graph, m.trav
    now = alloc.now
    if "node" in m.policy.exclusive_types:
        # a node-exclusive policy holds a node whole (its pools untouched) for every job on
        # it; the part of a group's reservation that could start now holds its node too
        starting = {node for jobid in live for piece in alloc.jobs.get(jobid, [])
                    if not piece.reserved for node, _ in piece.shares}
        for v in range(len(g)):
            if g.removed[v] or g.type[v] != "node" or g.name[v] in alloc.unsynced:
                continue
            held = trav.avail(v, now, 1) == 0
            assert held == (bool(graph.get(g.name[v])) or g.name[v] in starting), \
                f"graph {g.name[v]}: held {held}, books say {graph.get(g.name[v], {})}"
        return
    for v in range(len(g)):
        if g.removed[v] or g.type[v] in ("cluster", "node") or g.parent["containment"][v] == -1:
            continue
        parent = g.parent["containment"][v]
        if g.type[parent] != "node":
            continue
        node = g.name[parent]
        if node in alloc.unsynced:
            continue
        held = g.size[v] - trav.avail(v, now, 1)
        assert held == graph.get(node, {}).get(g.type[v], 0), \
            f"graph {node}/{g.name[v]}: {held} held, books say {graph.get(node, {})}"
