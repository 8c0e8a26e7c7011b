"""The scheduler's exact graph model (``fluxinfra.kube.pools.pool_graph``): one pool per
resource name per node, requests taken exactly (``Matcher(exact_pools=True)``), topology levels
between the cluster and the nodes."""

from __future__ import annotations

import pytest

from fluxinfra.kube.pools import parse_topology, pool_graph, pool_jobspec, pool_node_jgf
from fluxinfra.kube.resources import K8sInputError, pod_requests
from fluxinfra.matcher import Busy, Matcher, Unsatisfiable

ZONE, RACK = "topology.kubernetes.io/zone", "example.com/rack"
LEVELS = parse_topology(f"zone={ZONE},rack={RACK}")


#: short keyword names for the resources these tests use
NAMES = {"nvidia": "nvidia.com/gpu", "amd": "amd.com/gpu", "storage": "ephemeral-storage",
         "hugepages": "hugepages-2Mi"}


def node(name: str, labels: dict | None = None, **alloc: str) -> dict:
    amounts = {"cpu": "4", "memory": "8Gi", "pods": "110"}
    amounts.update({NAMES.get(k, k): v for k, v in alloc.items()})
    return {"metadata": {"name": name, "labels": labels or {}},
            "status": {"allocatable": amounts}}


def matcher(nodes, levels=(), policy="first") -> Matcher:
    graph, _ = pool_graph(nodes, levels)
    return Matcher(graph, policy=policy, exact_pools=True,
                   prune_filters="ALL:memory,ALL:pods,ALL:cpu")


def place(m: Matcher, count: int, **amounts: int):
    amounts = {NAMES.get(k, k): v for k, v in amounts.items()}
    return m.match(pool_jobspec(count, {"pods": 1, **amounts}, duration=60))


def test_every_allocatable_resource_is_its_own_pool() -> None:
    g, ranks = pool_graph([node("w", nvidia="2", amd="1", storage="50Gi",
                                hugepages="1Gi")])
    pools = {g.type[v]: (g.name[v], g.size[v], g.unit[v]) for v in range(len(g))
             if g.type[v] not in ("cluster", "node")}
    assert pools == {  # bytes in KiB, plus one KiB per pod the node holds (see pool_request)
        "cpu": ("cpu", 4000, "m"), "memory": ("memory", 8 * 2**20 + 110, "KiB"),
        "pods": ("pods", 110, ""), "nvidia.com/gpu": ("nvidia.com_gpu", 2, ""),
        "amd.com/gpu": ("amd.com_gpu", 1, ""), "ephemeral-storage":
        ("ephemeral-storage", 50 * 2**20 + 110, "KiB"),
        "hugepages-2Mi": ("hugepages-2Mi", 2**20 + 110, "KiB"),
    }
    assert ranks == {"w": 0}


def test_the_kib_pools_never_refuse_what_fits_in_bytes() -> None:
    """Three pods of 1,000,000,001 bytes (977 KiB each, rounded up) on a node of exactly three
    times that: the pool's slack (one KiB per pod the node can hold) lets all three in."""
    m = matcher([node("w", memory=str(3 * 1_000_000_001), pods="3")])
    assert len(place(m, 3, memory=1_000_000_001).slots) == 3


def test_half_cores_are_shared_exactly() -> None:
    m = matcher([node("a", cpu="1"), node("b", cpu="1")])
    assert sorted(place(m, 4, cpu=500).nodes) == ["a", "b"]
    with pytest.raises(Busy):
        place(m, 1, cpu=1)


@pytest.mark.parametrize("policy", ["first", "high", "lonode"])
@pytest.mark.parametrize("amounts", [{}, {"cpu": 1}])
def test_a_pod_of_ones_takes_one_unit_of_each_pool(policy: str, amounts: dict) -> None:
    """A BestEffort pod asks for one of the node's pods and nothing else (and a 1m pod for one
    millicore too): every count is 1, which must be one unit of each pool, never the pool."""
    m = matcher([node("w", pods="3")], policy=policy)
    assert [len(place(m, 1, **amounts).slots) for _ in range(3)] == [1, 1, 1]
    with pytest.raises(Busy):
        place(m, 1, **amounts)


def test_ephemeral_storage_pods_count_and_vendors_are_honoured() -> None:
    m = matcher([node("disk", storage="50Gi", pods="3")])
    place(m, 1, storage=40 * 2**30)
    with pytest.raises(Busy):
        place(m, 1, storage=40 * 2**30)
    place(m, 2, cpu=1)
    with pytest.raises(Busy):  # pods: 3
        place(m, 1, cpu=1)
    g = matcher([node("nv", nvidia="8")])
    with pytest.raises(Unsatisfiable):  # an AMD pod never lands on an NVIDIA-only node
        g.match(pool_jobspec(1, {"pods": 1, "amd.com/gpu": 1}),
                op="allocate_with_satisfiability")


def test_topology_levels_and_a_gang_in_one_rack() -> None:
    nodes = [node(f"n{i}", {ZONE: "z1" if i < 4 else "z2", RACK: f"r{i // 2}"}, cpu="2")
             for i in range(8)] + [node("loose", cpu="8")]
    g, ranks = pool_graph(nodes, LEVELS)
    paths = {g.name[v]: g.path(v) for v in range(len(g)) if g.type[v] == "node"}
    assert paths["n5"] == "/cluster0/z2/r2/n5" and paths["loose"] == "/cluster0/loose"
    m = Matcher(g, policy="first", exact_pools=True)
    r = m.match(pool_jobspec(4, {"cpu": 1000, "pods": 1}, within="rack", duration=60))
    racks = {paths[n].rsplit("/", 2)[1] for n in r.nodes}
    assert len(racks) == 1 and len(r.slots) == 4
    with pytest.raises(Unsatisfiable):  # no rack has 5 cores
        m.match(pool_jobspec(5, {"cpu": 1000, "pods": 1}, within="rack"),
                op="allocate_with_satisfiability")


def test_a_count_range_takes_as_many_as_fit() -> None:
    m = matcher([node("a", cpu="1"), node("b", cpu="1")])
    r = m.match(pool_jobspec(4, {"cpu": 600, "pods": 1}, count_min=2, duration=60))
    assert len(r.slots) == 2
    with pytest.raises(Busy):
        m.match(pool_jobspec(4, {"cpu": 600, "pods": 1}, count_min=1, duration=60))


def test_a_node_joins_under_its_new_zone() -> None:
    m = matcher([node("a", {ZONE: "z1"})], LEVELS)
    m.add_subgraph(pool_node_jgf(m.graph, node("b", {ZONE: "z9", RACK: "r1"}, cpu="2"),
                                 LEVELS, rank=7))
    v = m.graph.resolve("b")
    assert m.graph.path(v) == "/cluster0/z9/r1/b" and m.graph.rank[v] == 7
    r = m.match(pool_jobspec(1, {"cpu": 2000, "pods": 1}, constraint={"ranks": ["7"]}))
    assert r.nodes == ["b"]
    expected, _ = pool_graph([node("a", {ZONE: "z1"}), node("b", {ZONE: "z9", RACK: "r1"},
                                                            cpu="2")], LEVELS,
                             ranks={"a": 0, "b": 7})
    assert sorted(expected.path(v) for v in range(len(expected))) == sorted(
        m.graph.path(v) for v in range(len(m.graph)))


def test_topology_spec_errors_name_the_fix() -> None:
    assert parse_topology("") == ()
    for bad in ("zone", "node=x", "Zone=x", "zone=a,zone=b", "zone=a,rack=a"):
        with pytest.raises(K8sInputError, match="topology"):
            parse_topology(bad)


def test_requests_are_summed_exactly_then_rounded() -> None:
    pod = {"spec": {"containers": [{"resources": {"requests": {"cpu": "0.0005",
                                                                "memory": "0.5"}}}] * 2}}
    assert pod_requests(pod) == {"cpu": 1, "memory": 1}
    sidecar = {"spec": {
        "initContainers": [
            {"resources": {"requests": {"cpu": "200m"}}, "restartPolicy": "Always"},
            {"resources": {"requests": {"cpu": "1"}}}],
        "containers": [{"resources": {"requests": {"cpu": "500m"}}}],
        "overhead": {"cpu": "100m"}}}
    # max(500 + 200 (sidecar), 1000 + 200 (init runs beside the earlier sidecar)) + 100
    assert pod_requests(sidecar) == {"cpu": 1300}
