"""The exact per-node ledger (kube-scheduler's ``NodeInfo``): what every node has and what every
pod holding resources on it requests, whoever placed it.

Per node: allocatable amounts by resource name in base units (millicores, bytes, counts, the
``pods`` count), the sum of the requests of the pods bound to it and not finished, those pods
(for inter-pod affinity and topology spread), and the host ports they use. Pods bound to a node
the ledger has not seen (or has seen deleted) are kept under that name and count again when the
node (re)appears, as kube-scheduler's cache does.

The invariant the scheduler keeps (tested, and exported as the metric
``fluxinfra_scheduler_overcommitted``): for every node and resource, the sum of requests is at
most allocatable. :meth:`Ledger.overcommitted` lists where it does not hold (pods another
scheduler or a user bound by ``nodeName`` can break it; this scheduler never does).

>>> from fluxinfra.scheduler.pods import PodInfo, Request
>>> led = Ledger()
>>> led.upsert_node({"metadata": {"name": "n1"}, "status": {"allocatable": {
...     "cpu": "1", "memory": "1Gi", "pods": "2"}}})
>>> pod = PodInfo("u1", "ns", "p1", "fluxion", "n1", "Running", Request.of({"cpu": 600}))
>>> led.add(pod, "n1")
>>> led.insufficient(Request.of({"cpu": 500}), "n1")
['Insufficient cpu']
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from fluxinfra.kube.resources import node_allocatable
from fluxinfra.kube.selectors import Taint
from fluxinfra.scheduler.pods import PodInfo, Request

__all__ = ["Ledger", "NodeState", "node_state"]

BIND_ALL = "0.0.0.0"


@dataclass
class NodeState:
    """One node as the filters see it (``framework.NodeInfo``)."""

    name: str
    labels: dict[str, str] = field(default_factory=dict)
    taints: tuple[Taint, ...] = ()
    unschedulable: bool = False
    allocatable: dict[str, int] = field(default_factory=dict)
    requested: dict[str, int] = field(default_factory=dict)
    pods: dict[str, PodInfo] = field(default_factory=dict)
    ports: Counter = field(default_factory=Counter)
    exists: bool = True   #: False: pods are bound to it but the Node object is gone / unseen

    def free(self, resource: str) -> int:
        return self.allocatable.get(resource, 0) - self.requested.get(resource, 0)

    def port_conflict(self, ip: str, protocol: str, port: int) -> bool:
        """``HostPortInfo.CheckConflict``: 0.0.0.0 conflicts with every IP on that port."""
        if ip == BIND_ALL:
            return any(p == port and proto == protocol and n > 0
                       for (_, proto, p), n in self.ports.items())
        return self.ports.get((BIND_ALL, protocol, port), 0) > 0 or \
            self.ports.get((ip, protocol, port), 0) > 0


def node_state(node: Mapping[str, Any]) -> NodeState:
    """A NodeState (no pods) from a Node object."""
    meta = node.get("metadata") or {}
    spec = node.get("spec") or {}
    return NodeState(
        name=meta["name"],
        labels=dict(meta.get("labels") or {}),
        taints=tuple(Taint.parse(t, f"node {meta['name']}: spec.taints[{i}]")
                     for i, t in enumerate(spec.get("taints") or [])),
        unschedulable=bool(spec.get("unschedulable")),
        allocatable=node_allocatable(node),
    )


class Ledger:
    """Every node and every pod holding resources on it (see the module docstring)."""

    def __init__(self) -> None:
        self.nodes: dict[str, NodeState] = {}
        self.where: dict[str, str] = {}              #: pod uid -> node name
        #: bound pods with required anti-affinity terms (InterPodAffinity reads them for
        #: every incoming pod)
        self.anti_affinity: dict[str, PodInfo] = {}
        #: bumped on every change (caches keyed by it)
        self.version = 0
        #: (node, resource) pairs whose requests exceed allocatable, kept as pods come and go
        self.over: set[tuple[str, str]] = set()

    def _recheck(self, state: NodeState) -> None:
        """Keep :attr:`over` in step for one node."""
        name = state.name
        for pair in [p for p in self.over if p[0] == name]:
            self.over.discard(pair)
        if not state.exists:
            return
        for resource, amount in state.requested.items():
            if amount > state.allocatable.get(resource, 0):
                self.over.add((name, resource))
        if len(state.pods) > state.allocatable.get("pods", 0):
            self.over.add((name, "pods"))

    # -- nodes ----------------------------------------------------------------------------------
    def upsert_node(self, node: Mapping[str, Any]) -> NodeState:
        fresh = node_state(node)
        old = self.nodes.get(fresh.name)
        if old is not None:
            fresh.requested, fresh.pods, fresh.ports = old.requested, old.pods, old.ports
        self.nodes[fresh.name] = fresh
        self.version += 1
        self._recheck(fresh)
        return fresh

    def remove_node(self, name: str) -> None:
        """The Node object is gone; its pods stay counted under its name until they go."""
        state = self.nodes.get(name)
        if state is None:
            return
        if state.pods:
            self.nodes[name] = NodeState(name, requested=state.requested, pods=state.pods,
                                         ports=state.ports, exists=False)
        else:
            del self.nodes[name]
        self.over = {p for p in self.over if p[0] != name}
        self.version += 1

    def existing(self) -> Iterable[NodeState]:
        return (n for n in self.nodes.values() if n.exists)

    # -- pods -----------------------------------------------------------------------------------
    def add(self, pod: PodInfo, node: str) -> None:
        """``pod`` holds its request on ``node`` (bound, or assumed while its bind runs)."""
        if pod.uid in self.where:
            self.remove(pod.uid)
        state = self.nodes.get(node)
        if state is None:
            state = self.nodes[node] = NodeState(node, exists=False)
        for resource, amount in pod.request.items():
            state.requested[resource] = state.requested.get(resource, 0) + amount
        for port in pod.host_ports:
            state.ports[port] += 1
        state.pods[pod.uid] = pod
        self.where[pod.uid] = node
        if pod.anti_affinity:
            self.anti_affinity[pod.uid] = pod
        self.version += 1
        if self.over or any(state.requested.get(r, 0) > state.allocatable.get(r, 0)
                            for r, _ in pod.request.items()) \
                or len(state.pods) > state.allocatable.get("pods", 0):
            self._recheck(state)

    def remove(self, uid: str) -> str | None:
        """Forget a pod; returns the node it was on."""
        node = self.where.pop(uid, None)
        if node is None:
            return None
        state = self.nodes[node]
        pod = state.pods.pop(uid)
        for resource, amount in pod.request.items():
            left = state.requested.get(resource, 0) - amount
            if left:
                state.requested[resource] = left
            else:
                state.requested.pop(resource, None)
        for port in pod.host_ports:
            state.ports[port] -= 1
            if state.ports[port] <= 0:
                del state.ports[port]
        self.anti_affinity.pop(uid, None)
        if not state.exists and not state.pods:
            del self.nodes[node]
        elif self.over:
            self._recheck(state)
        self.version += 1
        return node

    def pod(self, uid: str) -> PodInfo | None:
        node = self.where.get(uid)
        return self.nodes[node].pods.get(uid) if node is not None else None

    def pods(self) -> Iterable[tuple[PodInfo, NodeState]]:
        for state in self.nodes.values():
            for pod in state.pods.values():
                yield pod, state

    # -- checks ---------------------------------------------------------------------------------
    def insufficient(self, request: Request, node: str, extra_pods: int = 0,
                     extra: Request | None = None) -> list[str]:
        """NodeResourcesFit's reasons (``fitsRequest``) for one more pod of ``request`` on
        ``node`` (after ``extra_pods`` pods requesting ``extra`` in all were added); [] fits."""
        state = self.nodes.get(node)
        if state is None or not state.exists:
            return ["node(s) not found"]
        reasons = []
        if len(state.pods) + extra_pods + 1 > state.allocatable.get("pods", 0):
            reasons.append("Too many pods")
        for resource, amount in request.items():
            more = extra.get(resource) if extra is not None else 0
            if amount > state.allocatable.get(resource, 0) - state.requested.get(resource, 0) \
                    - more:
                reasons.append(f"Insufficient {resource}")
        return reasons

    def overcommitted(self) -> list[tuple[str, str, int, int]]:
        """(node, resource, requested, allocatable) wherever requests exceed allocatable (and
        the pod count as resource ``pods``)."""
        out = []
        for state in self.existing():
            for resource, amount in sorted(state.requested.items()):
                if amount > state.allocatable.get(resource, 0):
                    out.append((state.name, resource, amount, state.allocatable.get(resource, 0)))
            if len(state.pods) > state.allocatable.get("pods", 0):
                out.append((state.name, "pods", len(state.pods), state.allocatable.get("pods", 0)))
        return out

    def free_total(self, exclude_group: str = "") -> dict[str, int]:
        """Free amounts summed over existing nodes (Coscheduling's CheckClusterResource), the
        pods of group ``exclude_group`` counted as free; the pod count as ``pods``."""
        total: dict[str, int] = {}
        for state in self.existing():
            mine = [p for p in state.pods.values() if exclude_group and p.group_key ==
                    exclude_group]
            for resource, amount in state.allocatable.items():
                used = state.requested.get(resource, 0) if resource != "pods" else \
                    len(state.pods)
                if resource != "pods":
                    used -= sum(p.request.get(resource) for p in mine)
                else:
                    used -= len(mine)
                total[resource] = total.get(resource, 0) + amount - used
        return total
