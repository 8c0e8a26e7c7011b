"""Flex containers: ``container`` vertices over the nodes of the containment tree.

Model: a second subsystem, ``flex``, rooted at the cluster vertex, holds ``cluster0 -> container{i}
-> node -> core`` edges over the *same* node and core vertices as ``containment``. A matcher made
with ``Matcher(graph, subsystem="flex")`` walks that subsystem, so a jobspec can ask for
``container[1]{node[2]{slot{core}}}``; the R it writes names both paths of every vertex
(``/cluster0/node0/core0`` and ``/cluster0/container0/node0/core0``). Containers may share
nodes: ``flex`` is then a DAG (a node has one parent per container), and an allocation through
one container holds the shared node's cores for every container. A matcher made on
``containment`` ignores containers. (Each matcher keeps its own allocations.)
"""

from __future__ import annotations

import pytest

from fluxinfra.matcher import Busy, Matcher, ResourceGraph, Unsatisfiable

FLEX = "flex"


def flex_graph(nodes: int, cores: int, containers: list[list[int]]) -> ResourceGraph:
    """cluster0 -> node{n} -> core{c} (containment) plus containers over node lists (flex)."""
    g = ResourceGraph()
    root = g.add_vertex(type="cluster", basename="cluster", id=0)
    node_vertices, core_vertices = [], []
    for n in range(nodes):
        node = g.add_vertex(type="node", id=n, rank=n)
        g.add_edge(root, node)
        node_vertices.append(node)
        mine = [g.add_vertex(type="core", id=c) for c in range(cores)]
        for core in mine:
            g.add_edge(node, core)
        core_vertices.append(mine)
    linked: set[int] = set()
    for i, members in enumerate(containers):
        container = g.add_vertex(type="container", id=i)
        g.add_edge(root, container, FLEX)
        for n in members:
            g.add_edge(container, node_vertices[n], FLEX)
            if n not in linked:  # a node's own subtree is the same in every container
                linked.add(n)
                for core in core_vertices[n]:
                    g.add_edge(node_vertices[n], core, FLEX)
    g.finalize()
    return g


def container_job(containers: int, nodes: int, cores: int) -> dict:
    return {"version": 1,
            "resources": [{"type": "container", "count": containers, "with": [
                {"type": "node", "count": nodes, "with": [
                    {"type": "slot", "count": 1, "label": "task",
                     "with": [{"type": "core", "count": cores}]}]}]}],
            "attributes": {"system": {"duration": 3600}},
            "tasks": [{"command": ["app"], "slot": "task", "count": {"per_slot": 1}}]}


def flex_paths(result) -> set[str]:
    return {node["metadata"]["paths"].get(FLEX, "")
            for node in result.R["scheduling"]["graph"]["nodes"]}


def test_one_container_with_two_nodes_matches_through_the_container():
    g = flex_graph(nodes=2, cores=4, containers=[[0, 1]])
    m = Matcher(g, policy="low", subsystem=FLEX)
    result = m.match(container_job(1, 2, 1))
    assert result.nodes == ["node0", "node1"]
    assert result.slots == [{"node0": {"core": 1}}, {"node1": {"core": 1}}]
    paths = flex_paths(result)
    assert "/cluster0/container0" in paths
    assert {"/cluster0/container0/node0", "/cluster0/container0/node1"} <= paths
    containment = {n["metadata"]["paths"]["containment"]
                   for n in result.R["scheduling"]["graph"]["nodes"]}
    assert "/cluster0/node1" in containment


def test_container_jobs_fill_the_containers_nodes_then_busy():
    g = flex_graph(nodes=2, cores=4, containers=[[0, 1]])
    m = Matcher(g, policy="first", subsystem=FLEX)
    jobs = [m.match(container_job(1, 2, 1)) for _ in range(4)]
    assert len({j.jobid for j in jobs}) == 4
    with pytest.raises(Busy):
        m.match(container_job(1, 2, 1))
    m.cancel(jobs[0].jobid)
    assert m.match(container_job(1, 2, 1)).nodes == ["node0", "node1"]


def test_two_containers_over_disjoint_nodes():
    g = flex_graph(nodes=4, cores=2, containers=[[0, 1], [2, 3]])
    m = Matcher(g, policy="low", subsystem=FLEX)
    both = m.match(container_job(2, 2, 2))
    assert sorted(both.nodes) == ["node0", "node1", "node2", "node3"]
    assert {"/cluster0/container0", "/cluster0/container1"} <= flex_paths(both)
    with pytest.raises(Busy):  # every core of both containers is held
        m.match(container_job(1, 1, 1))


def test_the_containment_view_of_the_same_graph_ignores_containers():
    g = flex_graph(nodes=2, cores=4, containers=[[0, 1]])
    m = Matcher(g, policy="low")
    result = m.match({"version": 1, "resources": [{"type": "node", "count": 2, "with": [
        {"type": "slot", "count": 1, "label": "task", "with": [{"type": "core", "count": 4}]}]}],
        "tasks": [{"command": ["app"], "slot": "task", "count": {"per_slot": 1}}]})
    assert result.nodes == ["node0", "node1"]
    with pytest.raises(Unsatisfiable):  # no container vertex in containment
        Matcher(g, policy="low").match(container_job(1, 1, 1), op="allocate_with_satisfiability")


def test_two_containers_sharing_the_same_nodes():
    g = flex_graph(nodes=2, cores=4, containers=[[0, 1], [0, 1]])
    m = Matcher(g, policy="low", subsystem=FLEX)
    first = m.match(container_job(1, 2, 3))
    # The nodes are shared: 3 of 4 cores per node are held whichever container is used.
    with pytest.raises(Busy):
        m.match(container_job(1, 2, 3))
    second = m.match(container_job(1, 2, 1))
    assert first.nodes == second.nodes == ["node0", "node1"]
    assert any(p.startswith("/cluster0/container") for p in flex_paths(second))
    with pytest.raises(Busy):  # 3 + 1 cores of each shared node are held
        m.match(container_job(1, 1, 1))


def test_one_job_over_two_containers_sharing_nodes_does_not_double_count():
    g = flex_graph(nodes=2, cores=4, containers=[[0, 1], [0, 1]])
    m = Matcher(g, policy="low", subsystem=FLEX)
    with pytest.raises((Busy, Unsatisfiable)):  # 2 x 2 x 3 = 12 cores; the nodes have 8
        m.match(container_job(2, 2, 3))


def test_one_job_over_two_containers_sharing_nodes_takes_disjoint_nodes():
    g = flex_graph(nodes=2, cores=4, containers=[[0, 1], [0, 1]])
    m = Matcher(g, policy="first", subsystem=FLEX)
    both = m.match(container_job(2, 1, 3))  # 3 cores on one node per container: both nodes
    assert sorted(both.nodes) == ["node0", "node1"]
    assert sorted(n for slot in both.slots for n in slot) == ["node0", "node1"]


def test_a_full_walk_claims_every_shared_node_for_the_first_container():
    # Fluxion visits a vertex once per traversal: ranking policies walk every child, so the
    # first container's walk claims both shared nodes and the second finds none (first-fit
    # policies stop at one node per container, above)
    g = flex_graph(nodes=2, cores=4, containers=[[0, 1], [0, 1]])
    with pytest.raises(Busy):
        Matcher(g, policy="low", subsystem=FLEX).match(container_job(2, 1, 3))
