"""Per-node infrastructure as node overhead: what a node offers to workload.

Every node of a real cluster runs pods that belong to the node rather than to any workload:
DaemonSet pods (kube-proxy, the CNI agent, log shippers, the Flux installer) and the mirror
pods of the kubelet's static pods. The scheduler counts them the way the kubelet counts its
``system-reserved``: their requests are taken out of what the node *offers* (the pools of its
graph), and they never allocate anything in the graph. So a node-exclusive match policy
(``lonodex``, ``hinodex``, ``firstnodex``, ``node_exclusive=true``) still finds a node that
runs only infrastructure idle, while any other pod on it (a Deployment's, a Job's, one of
ours) is an allocation and keeps exclusive placements off that node.

The ledger (the exact check before every bind) still holds these pods like any other, so a
node is never over-committed by them.

>>> from fluxinfra.scheduler.pods import Request
>>> books = NodeOverhead()
>>> books.add("ds-a", "n1", Request.of({"cpu": 50, "memory": 64 * 2**20}))
True
>>> node = {"metadata": {"name": "n1"}, "status": {"allocatable": {
...     "cpu": "4", "memory": "16Gi", "pods": "110"}}}
>>> books.offered(node)["status"]["allocatable"]
{'cpu': '3950m', 'memory': '17112760320', 'pods': '109'}
"""

from __future__ import annotations

from typing import Any

from fluxinfra.kube.resources import node_allocatable
from fluxinfra.scheduler.pods import Request

__all__ = ["NodeOverhead", "offered_node"]


def offered_node(node: dict[str, Any], overhead: Request, pods: int) -> dict[str, Any]:
    """``node`` with ``overhead`` (and ``pods`` pods) taken out of its allocatable amounts,
    none below zero: the Node object the graph is built from. ``node`` itself is not changed;
    without overhead it is returned as is."""
    if not pods and not overhead.amounts:
        return node
    amounts = node_allocatable(node)
    taken = overhead.slot(pods) if pods else overhead.as_dict()
    offered: dict[str, str] = {}
    for name, amount in amounts.items():
        left = max(0, amount - taken.get(name, 0))
        offered[name] = f"{left}m" if name == "cpu" else str(left)
    status = {**(node.get("status") or {}), "allocatable": offered}
    return {**node, "status": status}


class NodeOverhead:
    """The node-overhead pods on each node, and what each node offers without them."""

    def __init__(self) -> None:
        #: node -> uid -> request of each overhead pod running there
        self.pods: dict[str, dict[str, Request]] = {}
        self.node_of: dict[str, str] = {}   #: uid -> its node

    def add(self, uid: str, node: str, request: Request) -> bool:
        """Count pod ``uid`` on ``node``; True when the node's offer changes."""
        if self.node_of.get(uid) == node and self.pods[node][uid] == request:
            return False
        self.remove(uid)
        self.pods.setdefault(node, {})[uid] = request
        self.node_of[uid] = node
        return True

    def remove(self, uid: str) -> str | None:
        """Stop counting pod ``uid``; the node whose offer changes, or None."""
        node = self.node_of.pop(uid, None)
        if node is None:
            return None
        pods = self.pods[node]
        del pods[uid]
        if not pods:
            del self.pods[node]
        return node

    def total(self, node: str) -> tuple[Request, int]:
        """The summed requests and the number of overhead pods on ``node``."""
        pods = self.pods.get(node, {})
        total = Request()
        for request in pods.values():
            total = total + request
        return total, len(pods)

    def offered(self, node: dict[str, Any]) -> dict[str, Any]:
        """The Node object as the graph sees it: its overhead taken out."""
        total, pods = self.total(node["metadata"]["name"])
        return offered_node(node, total, pods)
