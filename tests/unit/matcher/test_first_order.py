"""``first``'s child order on graphs where a vertex's subtree is not its containment subtree.

``first`` ranks a vertex's children by how much of the last pruning type (``node`` by default)
is free below each child, children no job went through first, ties by higher uniq_id. The
amounts are those of the subsystem the match walks: a pdu of a power subsystem counts the
nodes it feeds, though in containment it is a leaf. A vertex whose children all count below
another parent (a storage pool over the racks' stores) has nothing below it to count, so once
a job went through it, it ranks after every untouched sibling. The expected answers were
checked against Fluxion v0.54.0's resource-query on the same graphs and jobspecs.
"""

from __future__ import annotations

import pytest
from matcher_testlib import TESTDATA

from fluxinfra.matcher import Busy, Matcher, ResourceGraph, Unsatisfiable, load_graph

POWER = "power"


def job(resources: list[dict]) -> dict:
    return {"version": 1, "resources": resources,
            "attributes": {"system": {"duration": 3600}},
            "tasks": [{"command": ["app"], "slot": "task", "count": {"per_slot": 1}}]}


def slot(*with_: dict) -> dict:
    return {"type": "slot", "count": 1, "label": "task", "with": list(with_)}


def res(rtype: str, *with_: dict, exclusive: bool | None = None) -> dict:
    r: dict = {"type": rtype, "count": 1}
    if with_:
        r["with"] = list(with_)
    if exclusive is not None:
        r["exclusive"] = exclusive
    return r


def node_with_cores(g: ResourceGraph, parent: int, n: int) -> int:
    """node{n} -> core{0,1} under ``parent`` (containment)."""
    node = g.add_vertex(type="node", basename="node", id=n)
    g.add_edge(parent, node)
    for c in range(2):
        g.add_edge(node, g.add_vertex(type="core", basename="core", id=c))
    return node


def two_racks(g: ResourceGraph, fill) -> tuple[int, list]:
    """cluster0 -> rack{0,1}; ``fill(rack, r)`` builds inside each rack. Returns the cluster
    and what ``fill`` returned per rack."""
    cluster = g.add_vertex(type="cluster", basename="cluster", id=0)
    built = []
    for r in range(2):
        rack = g.add_vertex(type="rack", basename="rack", id=r)
        g.add_edge(cluster, rack)
        built.append(fill(rack, r))
    return cluster, built


def powered_cluster() -> ResourceGraph:
    """cluster0 -> rack{r} -> pdu{r}, node{2r,2r+1} -> core{0,1} (containment), and
    powerpanel0 -> pdu{r} -> node{2r,2r+1} (power)."""
    g = ResourceGraph()
    add = g.add_vertex

    def rack_with_pdu(rack: int, r: int) -> tuple[int, list[int]]:
        pdu = add(type="pdu", basename="pdu", id=r)
        g.add_edge(rack, pdu)
        return pdu, [node_with_cores(g, rack, n) for n in (2 * r, 2 * r + 1)]

    _, fed = two_racks(g, rack_with_pdu)
    panel = add(type="powerpanel", basename="powerpanel", id=0)
    for pdu, nodes in fed:
        g.add_edge(panel, pdu, POWER)
        for node in nodes:
            g.add_edge(pdu, node, POWER)
    g.finalize()
    return g


@pytest.mark.parametrize("exact", [False, True])
def test_power_walk_ranks_a_pdu_by_the_nodes_it_feeds(exact: bool):
    m = Matcher(powered_cluster(), policy="first", subsystem=POWER, exact=exact)
    one_node = job([slot(res("node", exclusive=True))])
    first = m.match(job([res("pdu", slot(res("node", exclusive=True)))]))
    assert first.nodes == ["node3"]  # pdu1 (higher uniq_id), its last node
    # pdu1 now has 1 node free; pdu0 was never used, so it comes first
    assert m.match(one_node).nodes == ["node1"]
    # both pdus have 1 node free: the tie goes to the higher uniq_id (pdu1)
    assert m.match(one_node).nodes == ["node2"]
    assert m.match(one_node).nodes == ["node0"]


def rack_job() -> dict:
    return job([res("rack", res("node", slot(res("core"))),
                    res("store", res("ssd", exclusive=True)))])


def pool_job() -> dict:
    return job([res("rack", res("node", slot(res("core")))),
                res("pool", res("store", res("ssd", exclusive=True)))])


def pooled_storage() -> ResourceGraph:
    """cluster0 -> rack{r} -> node{r} -> core{0,1}, rack{r} -> store{r} -> ssd{0,1}, and
    cluster0 -> pool0 -> store{0,1}: each store has two containment parents."""
    g = ResourceGraph()
    add = g.add_vertex

    def rack_with_store(rack: int, r: int) -> int:
        node_with_cores(g, rack, r)
        store = add(type="store", basename="store", id=r)
        g.add_edge(rack, store)
        for s in range(2):
            g.add_edge(store, add(type="ssd", basename="ssd", id=s))
        return store

    cluster, stores = two_racks(g, rack_with_store)
    pool = add(type="pool", basename="pool", id=0)
    g.add_edge(cluster, pool)
    for store in stores:
        g.add_edge(pool, store)
    g.finalize()
    return g


def test_a_pool_over_other_parents_stores_ranks_last_once_used():
    # exact mode: Fluxion's full walk (fast mode stops early and skips the first failure)
    m = Matcher(pooled_storage(), policy="first", exact=True)
    # pool0 (highest uniq_id, untouched) is walked first and visits both stores through
    # itself, so neither rack finds its store afterwards (Fluxion's answer too)
    with pytest.raises((Busy, Unsatisfiable)):
        m.match(rack_job())
    pooled = m.match(pool_job())
    assert pooled.nodes == ["node1"]
    # pool0 now ranks last (nothing below it counts as free), so the racks come first
    assert m.match(rack_job()).nodes == ["node0"]
    assert m.match(rack_job()).nodes == ["node1"]


GRUGS = TESTDATA / "data" / "resource" / "grugs"


@pytest.mark.skipif(not GRUGS.exists(), reason=f"Fluxion test data not at {GRUGS}")
@pytest.mark.parametrize("name", ["tiny", "medium", "power", "sierra",
                                  "advanced_test", "coarse_iobw"])
def test_inner_edges_are_those_of_the_post_order_below(name: str) -> None:
    """``first`` re-ranks the children of the vertices a held subtree reaches: the edges to
    children with children, walked without listing the leaves (a node's first commit), and
    for every vertex of a layout but the first, found by their places below it. They must
    be those read off the full post-order below, in the same order, at every vertex of
    Fluxion's machines (subtrees with leaves and inner vertices side by side included)."""
    g = load_graph((GRUGS / f"{name}.graphml").read_text(), fmt="grug")
    trav = Matcher(g, policy="first").trav
    kids = g.children[trav.sub]
    mixed = 0
    for u in range(len(g)):
        inner = [u] + [v for v in trav._post_below(u)[1] if kids[v]]  # post-order
        want = [(v, c) for v in inner for c in kids[v] if kids[c]]
        assert trav.inner_edges(u) == want, (name, u)
        mixed += any(kids[c] for c in kids[u]) and not all(kids[c] for c in kids[u])
    if name in ("power", "sierra", "advanced_test"):
        assert mixed, "no vertex with leaf and inner children side by side"
    assert len(trav._inner_plans) == len(set(g.layouts.values()))  # (none in power)
