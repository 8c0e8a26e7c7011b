"""Core operations: allocate, reserve, cancel, partial cancel, update_allocate, info."""

from __future__ import annotations

import pytest
from matcher_testlib import build_cluster, check_invariants, counts_met

from fluxinfra.matcher import (
    Busy,
    JobspecError,
    Matcher,
    UnknownJob,
    Unsatisfiable,
)


def slot_spec(nslots=1, cores=1, mem=0, gpus=0, duration=3600, node_excl=False):
    inner = [{"type": "core", "count": cores}]
    if mem:
        inner.append({"type": "memory", "count": mem})
    if gpus:
        inner.append({"type": "gpu", "count": gpus})
    slot = {"type": "slot", "count": nslots, "label": "task", "with": inner}
    res = [{"type": "node", "count": 1, "exclusive": True, "with": [slot]}] if node_excl else [slot]
    return {"version": 1, "resources": res,
            "tasks": [{"command": ["app"], "slot": "task", "count": {"per_slot": 1}}],
            "attributes": {"system": {"duration": duration}}}


def test_allocate_fills_graph_then_busy(cluster):
    m = Matcher(cluster, policy="low")
    for _ in range(8):  # 8 sockets x 4 cores; slots of 4 cores fill one socket each
        r = m.match(slot_spec(cores=4))
        counts_met(r, {"core": 4})
    check_invariants(m)
    with pytest.raises(Busy):
        m.match(slot_spec(cores=4))


def test_low_policy_takes_lowest_ids_first(cluster):
    m = Matcher(cluster, policy="low")
    r = m.match(slot_spec(cores=2))
    assert r.nodes == ["node0"]
    assert [cluster.name[v] for _, v, _, x, _ in r.emitted if cluster.type[v] == "core"] == [
        "core0", "core1"]


def test_high_policy_takes_highest_ids_first(cluster):
    m = Matcher(cluster, policy="high")
    r = m.match(slot_spec(cores=1))
    assert r.nodes == ["node3"]


def test_unsatisfiable_is_never(cluster):
    m = Matcher(cluster, policy="first")
    with pytest.raises(Unsatisfiable):
        m.match(slot_spec(cores=64), op="allocate_with_satisfiability")
    with pytest.raises(Unsatisfiable):
        m.match(slot_spec(cores=64), op="satisfiability")


def test_reservation_lands_when_the_first_job_ends(cluster):
    m = Matcher(cluster, policy="first")
    whole = {"version": 1, "resources": [{"type": "node", "count": 4, "exclusive": True,
                                          "with": [{"type": "slot", "count": 1, "label": "a",
                                                    "with": [{"type": "core", "count": 1}]}]}],
             "attributes": {"system": {"duration": 100}}}
    first = m.match(whole)
    assert first.status == "ALLOCATED" and first.at == 0
    second = m.match(slot_spec(cores=1, duration=50), op="allocate_orelse_reserve")
    assert second.status == "RESERVED" and second.at == 100
    check_invariants(m)
    m.cancel(first.jobid)
    third = m.match(slot_spec(cores=1, duration=50))
    assert third.status == "ALLOCATED" and third.at == 0


def test_cancel_unknown_job_raises(cluster):
    with pytest.raises(UnknownJob):
        Matcher(cluster).cancel(42)


def test_cancel_frees_everything(cluster):
    m = Matcher(cluster, policy="low")
    jobs = [m.match(slot_spec(cores=4)).jobid for _ in range(8)]
    for j in jobs:
        m.cancel(j)
    assert all(p.empty for p in m.trav.sched.values())
    assert all(p.empty for p in m.trav.agg.values())
    assert m.match(slot_spec(cores=4)).nodes == ["node0"]


def test_pod_group_slots_stay_on_one_node_and_share_nodes():
    g = build_cluster(nodes=2, sockets=1, cores=8, gpus=0, mem_per_socket=64)
    m = Matcher(g, policy="low", exact_pools=True)
    r = m.match(slot_spec(nslots=3, cores=2, mem=10))
    assert len(r.slots) == 3
    for inst in r.slots:
        assert len(inst) == 1, f"slot spans nodes: {inst}"
        assert next(iter(inst.values())) == {"core": 2, "memory": 10}
    assert r.nodes == ["node0"]  # three pods fit on one node: they share it
    other = m.match(slot_spec(nslots=1, cores=2, mem=34))
    assert other.nodes == ["node0"]  # and the node is shared with another job
    check_invariants(m)


def test_fluxion_pools_are_taken_whole_by_default():
    g = build_cluster(nodes=1, sockets=1, cores=8, gpus=0, mem_per_socket=64)
    r = Matcher(g, policy="low").match(slot_spec(nslots=1, cores=1, mem=4))
    assert r.slots == [{"node0": {"core": 1, "memory": 64}}]


def test_partial_cancel_releases_one_node_then_all():
    g = build_cluster(nodes=2, sockets=1, cores=2, gpus=0)
    m = Matcher(g, policy="low")
    spec = {"version": 1, "resources": [{"type": "node", "count": 2, "with": [
        {"type": "slot", "count": 1, "label": "a", "with": [{"type": "core", "count": 2}]}]}]}
    r = m.match(spec)
    assert sorted(r.nodes) == ["node0", "node1"]
    assert m.partial_cancel(r.jobid, "node0") is False
    again = m.match(slot_spec(cores=2))
    assert again.nodes == ["node0"]
    assert m.partial_cancel(r.jobid, ["node1"]) is True
    with pytest.raises(UnknownJob):
        m.info(r.jobid)
    check_invariants(m)


def test_update_allocate_accepts_own_R(cluster):
    m = Matcher(cluster, policy="low")
    r = m.match(slot_spec(cores=4))
    fresh = Matcher(cluster, policy="low")
    back = fresh.update_allocate(r.jobid, r.R)
    assert back.nodes == r.nodes
    assert [e[1:4] for e in back.emitted] == [e[1:4] for e in r.emitted]
    nxt = fresh.match(slot_spec(cores=4))
    assert nxt.emitted != r.emitted
    check_invariants(fresh)


def test_info_returns_the_match(cluster):
    m = Matcher(cluster)
    r = m.match(slot_spec())
    assert m.info(r.jobid).R["execution"]["nodelist"] == r.R["execution"]["nodelist"]


def test_slot_R_releases_one_pod_of_a_group_sharing_a_pool():
    g = build_cluster(nodes=1, sockets=1, cores=4, gpus=0, mem_per_socket=16)
    m = Matcher(g, policy="low", exact_pools=True)
    r = m.match(slot_spec(nslots=3, cores=1, mem=4))
    assert len(r.slots) == 3
    assert m.partial_cancel(r.jobid, m.slot_R(r.jobid, 0)) is False
    assert len(m.info(r.jobid).slots) == 2
    # the pod's core and its 4 units of memory are free again: 2 cores + 8 memory remain
    m.match(slot_spec(nslots=1, cores=2, mem=8))
    with pytest.raises(Busy):
        m.match(slot_spec(nslots=1, cores=1, mem=1))
    check_invariants(m)


def test_slots_belong_to_their_own_job_not_the_last_match(cluster):
    m = Matcher(cluster, policy="low")
    first = m.match(slot_spec(nslots=2, cores=1))
    m.match(slot_spec(nslots=1, cores=3))
    assert len(m.info(first.jobid).slots) == 2


def test_a_repeated_request_is_parsed_once_and_a_mutated_one_again():
    m = Matcher(build_cluster(nodes=2, sockets=1, cores=4))
    spec = {"version": 1, "resources": [{"type": "slot", "count": 1, "label": "a",
                                         "with": [{"type": "core", "count": 1}]}]}
    first = m._parse(spec)  # a first sighting takes no snapshot
    assert m._parse(spec) is m._parse(spec) is not first
    assert m._parse("version: 1\nresources: [{type: core, count: 1}]") is m._parse(
        "version: 1\nresources: [{type: core, count: 1}]")
    m.match(spec)
    spec["resources"][0]["with"][0]["count"] = 3  # changed in place: parsed again
    r = m.match(spec)
    assert sum(1 for e in r.emitted if m.graph.type[e[1]] == "core") == 3
    spec["resources"][0]["with"][0]["count"] = 0
    with pytest.raises(JobspecError, match="count"):
        m.match(spec)


def test_a_query_session_freezes_nothing_itself(tmp_path) -> None:
    """`fluxinfra query` raises the collection thresholds but leaves freezing to the step
    that settles the collector beside a large graph (``gcpolicy.tune_for``): a session on a
    small graph (hundreds of them in one process in the replays) freezes nothing that would
    outlive it."""
    import gc

    from fluxinfra.cli import query

    before = gc.get_threshold()
    gc.unfreeze()
    try:
        query._batch_gc()
        assert gc.get_freeze_count() == 0
        assert gc.get_threshold() == (10_000, 100, 100)
    finally:
        gc.set_threshold(*before)


def _kept_groups(root) -> list:
    """Every candidate group (an evaluators.Candidate) reachable from ``root``'s references
    (not through modules or callables: the matcher's own data)."""
    import gc
    import types

    from fluxinfra.matcher.evaluators import Candidate

    seen, todo, out = set(), [root], []
    while todo:
        obj = todo.pop()
        if (id(obj) in seen or isinstance(obj, (str, bytes, int, float, type, types.ModuleType))
                or callable(obj)):
            continue
        seen.add(id(obj))
        if type(obj) is Candidate:
            out.append(obj)
        todo.extend(gc.get_referents(obj))
    return out


@pytest.mark.parametrize("policy", ["high", "low", "locality", "variation"])
def test_the_groups_a_matcher_keeps_hold_their_edges_out_of_the_collectors_sight(policy):
    """The walk keeps each vertex's candidate groups for later matches (a node's groups live
    until the node is touched again, or as its layout's). Their edges are tuples of ints,
    which the cyclic collector stops tracking (the next collections of their generation):
    the collections of the middle and oldest generations do not keep walking them (at
    16,384 nodes they were 253 of the 601 objects a `high` 1-core match left tracked)."""
    import gc

    from fluxinfra.matcher import load_graph
    from fluxinfra.matcher.recipe import recipe_to_grug

    graph = load_graph(recipe_to_grug({"cluster": "t", "racks": 2, "nodes_per_rack": 8,
                                       "sockets": 2, "cores_per_socket": 4}), fmt="grug")
    m = Matcher(graph, policy=policy)
    for i in range(12):
        r = m.match(slot_spec(cores=1, node_excl=i % 4 == 3))
        if i % 3 == 2:
            m.cancel(r.jobid)
    gc.collect()  # (an edge is let go first, the tuple holding it at the next collection)
    gc.collect()
    groups = _kept_groups(m)
    assert groups  # (the walk keeps some)
    for group in groups:
        edges = group.edges
        assert type(edges) is tuple and not gc.is_tracked(edges), group
        assert all(type(e) is tuple and not gc.is_tracked(e) for e in edges), group
