"""Node-exclusive policies on nodes that run per-node infrastructure.

Every node of a real cluster runs DaemonSet pods (kube-proxy, the CNI agent, the Flux
installer) and static pods' mirrors. They are node overhead: taken out of what the node offers,
never an allocation, so an exclusive gang still finds such a node idle; any other pod on a node
(a Deployment's) keeps exclusive placements off it. Each test ends with
:func:`check_invariants` (books, graph and ledger agree; the offer is allocatable less overhead).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from fluxinfra.kube.pools import node_pools
from fluxinfra.scheduler.core import SchedulerCore
from fluxinfra.scheduler.fluxion import FluxionAllocator, InProcessBackend, RemoteBackend
from fluxinfra.scheduler.pods import ANNOT_MIRROR, LABEL_PODGROUP

from .harness import Harness, check_invariants
from .kube_double import KubeApiDouble, make_node, make_pod, make_podgroup

EXCLUSIVE = ("lonodex", "hinodex", "firstnodex", "policy=low node_exclusive=true")


def daemonset_pod(name: str, node: str, cpu: str = "50m", memory: str = "64Mi",
                  daemonset: str = "kube-proxy") -> dict[str, Any]:
    """A DaemonSet's pod as the DaemonSet controller makes it, bound and running."""
    pod = make_pod(name, "kube-system", cpu=cpu, memory=memory, scheduler="default-scheduler",
                   node=node, phase="Running")
    pod["metadata"]["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "DaemonSet",
                                           "name": daemonset, "uid": f"ds-{daemonset}",
                                           "controller": True, "blockOwnerDeletion": True}]
    return pod


def mirror_pod(name: str, node: str, cpu: str = "250m") -> dict[str, Any]:
    """The mirror of a static pod (what the kubelet creates for kube-apiserver, etcd ...)."""
    pod = make_pod(name, "kube-system", cpu=cpu, memory="", scheduler="default-scheduler",
                   node=node, phase="Running", annotations={ANNOT_MIRROR: "0123abcd"})
    pod["metadata"]["ownerReferences"] = [{"apiVersion": "v1", "kind": "Node", "name": node,
                                           "uid": f"node-{node}", "controller": True}]
    return pod


def deployment_pod(name: str, node: str, cpu: str = "100m") -> dict[str, Any]:
    """A Deployment's pod placed by kube-scheduler."""
    pod = make_pod(name, cpu=cpu, memory="", scheduler="default-scheduler", node=node,
                   phase="Running")
    pod["metadata"]["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                                           "name": "web-7d9f", "uid": "rs-web",
                                           "controller": True}]
    return pod


def exclusive_gang(api: KubeApiDouble, name: str, size: int, cpu: str = "") -> None:
    """A PodGroup of ``size`` pods, one per node (required anti-affinity on the hostname), as a
    MiniCluster renders its brokers (BestEffort by default)."""
    api.create("podgroups", make_podgroup(name, size))
    anti = {"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {LABEL_PODGROUP: name}},
         "topologyKey": "kubernetes.io/hostname"}]}}}
    for i in range(size):
        api.create("pods", make_pod(f"{name}-{i}", cpu=cpu, memory="",
                                    labels={LABEL_PODGROUP: name}, spec=anti))


def bed(nodes: int = 4, *, cpu: str = "4") -> KubeApiDouble:
    """``nodes`` nodes, each running a kube-proxy pod (50m) as a real cluster's do."""
    api = KubeApiDouble()
    for i in range(nodes):
        api.create("nodes", make_node(f"n{i}", cpu=cpu, memory="16Gi"))
        api.create("pods", daemonset_pod(f"kube-proxy-{i}", f"n{i}"))
    return api


@pytest.fixture(scope="module")
def lonodex_service() -> Iterator[str]:
    """A real gRPC Fluxion service on loopback whose matcher runs ``lonodex``."""
    from fluxinfra.kube.graph import graph_from_k8s
    from fluxinfra.matcher import Matcher
    from fluxinfra.service.server import serve

    server, port = serve(Matcher(graph_from_k8s([make_node("bootstrap")], [],
                                                subtract_pods=False)),
                         host="127.0.0.1", port=0, workers=2, policy="lonodex")
    yield f"127.0.0.1:{port}"
    server.stop(grace=None)


@pytest.fixture(params=["in-process", "grpc"])
def allocator(request: pytest.FixtureRequest) -> Callable[[str], FluxionAllocator]:
    """Build a Fluxion allocator with a policy (``lonodex`` or ``first``), in process or over
    a real gRPC service running that policy."""
    def build(policy: str) -> FluxionAllocator:
        if request.param == "in-process":
            return FluxionAllocator(policy=policy)
        service = {"lonodex": "lonodex_service", "first": "fluxion_service"}[policy]
        target = request.getfixturevalue(service)
        return FluxionAllocator(policy, backend=RemoteBackend(target, timeout=10))
    return build


def placed(h: Harness, prefix: str, size: int, namespace: str = "default") -> list[str]:
    return [h.node_of(f"{prefix}-{i}", namespace) for i in range(size)]


def offer(core: SchedulerCore, node: str) -> dict[str, int]:
    """The pools node ``node`` offers in the allocator's graph (graph units)."""
    alloc = core.allocator
    assert isinstance(alloc, FluxionAllocator)
    return node_pools(alloc.nodes[node])


def graph_pools(core: SchedulerCore, node: str) -> dict[str, int]:
    """The pool sizes of ``node`` in the in-process matcher's graph itself."""
    backend = core.allocator.backend  # type: ignore[attr-defined]
    assert isinstance(backend, InProcessBackend)
    g = backend.matcher.graph
    found = [v for v in g.by_name(node) if g.type[v] == "node" and not g.removed[v]]
    return {g.type[c]: g.size[c] for c in g.children["containment"][found[0]]}


@pytest.mark.parametrize("policy", EXCLUSIVE)
def test_an_exclusive_gang_fits_beside_daemonset_pods(policy: str) -> None:
    api = bed()
    api.create("pods", mirror_pod("etcd-n0", "n0"))
    exclusive_gang(api, "mc", 2)
    h = Harness(api, FluxionAllocator(policy=policy)).start()
    h.step()
    nodes = placed(h, "mc", 2)
    assert all(nodes) and len(set(nodes)) == 2, h.events()
    check_invariants(h)
    # each node holds one exclusive placement: a second gang of 2 takes the other two nodes
    # and a third finds none
    exclusive_gang(api, "mc2", 2)
    exclusive_gang(api, "mc3", 2)
    h.step()
    second = placed(h, "mc2", 2)
    assert all(second) and set(second).isdisjoint(nodes)
    assert placed(h, "mc3", 2) == ["", ""]
    check_invariants(h)


def test_an_exclusive_gang_fits_beside_daemonset_pods_over_grpc(
        allocator: Callable[[str], FluxionAllocator]) -> None:
    api = bed()
    exclusive_gang(api, "mc", 4, cpu="500m")
    h = Harness(api, allocator("lonodex")).start()
    h.step()
    assert sorted(placed(h, "mc", 4)) == ["n0", "n1", "n2", "n3"], h.events()
    check_invariants(h)


@pytest.mark.parametrize("policy", EXCLUSIVE)
def test_a_deployments_pod_keeps_exclusive_gangs_off_its_node(policy: str) -> None:
    api = bed()
    api.create("pods", deployment_pod("web-1", "n1"))
    exclusive_gang(api, "mc", 3)
    h = Harness(api, FluxionAllocator(policy=policy)).start()
    h.step()
    assert sorted(placed(h, "mc", 3)) == ["n0", "n2", "n3"], h.events()
    check_invariants(h)
    exclusive_gang(api, "big", 4)
    h.step()
    assert placed(h, "big", 4) == [""] * 4, "no node is idle: the gang of 4 waits"
    api.delete("pods", "default/web-1")  # the Deployment scales down
    h.step()
    assert placed(h, "big", 4) == [""] * 4, "3 nodes still hold the first gang"
    check_invariants(h)


def test_pods_of_ours_under_an_exclusive_policy_take_the_node() -> None:
    api = bed(2)
    for name, cpu in (("a", "100m"), ("b", "200m"), ("c", "300m")):  # three jobs
        api.create("pods", make_pod(name, cpu=cpu, memory=""))
    h = Harness(api, FluxionAllocator(policy="lonodex")).start()
    h.step()
    assert sorted(filter(None, [h.node_of(p) for p in "abc"])) == ["n0", "n1"], \
        "one job per node; the third waits"
    check_invariants(h)


def test_a_daemonset_pod_arriving_leaving_and_resizing_changes_the_offer() -> None:
    api = KubeApiDouble()
    api.create("nodes", make_node("n0", cpu="4", memory="16Gi"))
    h = Harness(api, FluxionAllocator(policy="lonode")).start()
    h.step()
    full = offer(h.core, "n0")
    assert full["cpu"] == 4000 and graph_pools(h.core, "n0") == full
    api.create("pods", daemonset_pod("fluxinstall-0", "n0", cpu="500m", memory="1Gi",
                                     daemonset="flux-installer"))
    h.step()
    assert offer(h.core, "n0")["cpu"] == 3500
    assert offer(h.core, "n0")["memory"] == full["memory"] - 2**20 - 1  # KiB, and a pod's slack
    assert offer(h.core, "n0")["pods"] == full["pods"] - 1
    assert graph_pools(h.core, "n0") == offer(h.core, "n0")
    check_invariants(h)
    # a pod asking for what is left fits; one asking for more waits
    api.create("pods", make_pod("big", cpu="3600m", memory=""))
    h.step()
    assert h.node_of("big") == ""
    check_invariants(h)
    # the DaemonSet's pod asks for less (its template changed, the pod was updated)
    smaller = daemonset_pod("fluxinstall-0", "n0", cpu="300m", memory="1Gi",
                            daemonset="flux-installer")
    smaller["metadata"]["uid"] = api.get("pods", "kube-system/fluxinstall-0")["metadata"]["uid"]
    api.update("pods", smaller)
    h.step()
    assert offer(h.core, "n0")["cpu"] == 3700
    assert h.node_of("big") == "n0", "the larger offer lets the waiting pod in"
    check_invariants(h)
    api.delete("pods", "kube-system/fluxinstall-0")
    h.step()
    assert offer(h.core, "n0") == full and graph_pools(h.core, "n0") == full
    assert h.core.allocator.rebuilds == 0  # type: ignore[attr-defined]
    check_invariants(h)


def test_overhead_on_a_node_full_of_our_pods_keeps_the_books(
        allocator: Callable[[str], FluxionAllocator]) -> None:
    """A DaemonSet pod admitted onto a node our pods fill (the kubelet admits what the exact
    amounts allow): the node is re-offered smaller and our pods stay registered on it."""
    api = KubeApiDouble()
    api.create("nodes", make_node("n0", cpu="4", memory="16Gi"))
    for i in range(3):
        api.create("pods", make_pod(f"w{i}", cpu="1", memory="1Gi"))
    h = Harness(api, allocator("first")).start()
    h.step()
    assert all(h.node_of(f"w{i}") == "n0" for i in range(3))
    api.create("pods", daemonset_pod("kube-proxy-0", "n0", cpu="900m"))
    h.step()
    check_invariants(h)
    api.create("pods", make_pod("late", cpu="200m", memory=""))
    h.step()
    assert h.node_of("late") == "", "3000m + 900m of 4000m taken: 100m left"
    api.set_phase("default/w0", "Succeeded")
    h.step()
    assert h.node_of("late") == "n0"
    check_invariants(h)


def books(core: SchedulerCore) -> dict[str, Any]:
    """What the allocator holds per node (summed amounts, nodes held whole) and offers."""
    alloc = core.allocator
    assert isinstance(alloc, FluxionAllocator)
    held: dict[str, dict[str, int]] = {}
    for jobid, pieces in alloc.jobs.items():
        if jobid in core.reservations:
            continue
        for piece in pieces:
            for i, (node, request) in enumerate(piece.shares):
                slot = request.slot(piece.pods[i] if piece.pods else 1)
                for r, n in slot.items():
                    held.setdefault(node, {}).setdefault(r, 0)
                    held[node][r] += n
    backend = alloc.backend
    assert isinstance(backend, InProcessBackend)
    g, trav = backend.matcher.graph, backend.matcher.trav
    whole = sorted(g.name[v] for v in range(len(g))
                   if g.type[v] == "node" and not g.removed[v] and trav.avail(v, alloc.now, 1) == 0)
    return {"held": held, "offers": {n: node_pools(alloc.nodes[n]) for n in sorted(alloc.nodes)},
            "whole": whole, "unsynced": sorted(alloc.unsynced)}


@pytest.mark.parametrize("policy", ["lonodex", "lonode"])
def test_a_restart_rebuilds_the_same_books(policy: str) -> None:
    api = bed()
    api.create("pods", mirror_pod("kube-apiserver-n3", "n3"))
    api.create("pods", deployment_pod("web-1", "n1"))
    exclusive_gang(api, "mc", 2, cpu="1")
    h = Harness(api, FluxionAllocator(policy=policy)).start()
    h.step()
    assert all(placed(h, "mc", 2))
    api.create("pods", daemonset_pod("logs-2", "n2", cpu="100m", daemonset="logs"))
    api.delete("pods", "kube-system/kube-proxy-0")
    h.step()
    check_invariants(h)
    before = books(h.core)
    again = Harness(api, FluxionAllocator(policy=policy)).start()
    again.step()
    after = books(again.core)
    assert after == before
    check_invariants(again)


def test_a_daemonset_rolled_out_over_many_nodes_rebuilds_the_graph_once(
        allocator: Callable[[str], FluxionAllocator]) -> None:
    """A new DaemonSet puts a pod on every node in one go: past ``REBUILD_AFTER`` nodes the
    new offers are applied by one rebuild, not one re-attachment (a re-index) per node."""
    api = KubeApiDouble()
    nodes = FluxionAllocator.REBUILD_AFTER + 4
    for i in range(nodes):
        api.create("nodes", make_node(f"n{i}", cpu="4", memory="16Gi"))
    exclusive_gang(api, "mc", 2, cpu="1")
    h = Harness(api, allocator("lonodex")).start()
    h.step()
    assert all(placed(h, "mc", 2))
    alloc = h.core.allocator
    assert isinstance(alloc, FluxionAllocator)
    rebuilds = alloc.rebuilds
    for i in range(nodes):
        api.create("pods", daemonset_pod(f"logs-{i}", f"n{i}", cpu="100m", daemonset="logs"))
    h.step()
    assert alloc.rebuilds == rebuilds + 1
    assert all(offer(h.core, f"n{i}")["cpu"] == 3900 for i in range(nodes))
    check_invariants(h)
    exclusive_gang(api, "mc2", nodes - 2)
    h.step()
    assert all(placed(h, "mc2", nodes - 2)), "every other node is idle for exclusive use"
    check_invariants(h)
