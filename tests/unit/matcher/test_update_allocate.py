"""``Matcher.update_allocate`` never books a vertex twice: it checks an R against the holds
of every other job for its window, raises ``Busy`` / ``GraphError`` and then changes nothing,
and re-registering a job id replaces that job's stale allocation."""

from __future__ import annotations

import copy

import pytest
from matcher_testlib import build_cluster, check_invariants

from fluxinfra.matcher import Busy, GraphError, Matcher
from fluxinfra.matcher.planner import Planner

ONE_CORE = {"version": 1, "resources": [{"type": "node", "count": 1, "with": [
    {"type": "slot", "count": 1, "label": "s", "with": [{"type": "core", "count": 1}]}]}],
    "attributes": {"system": {"duration": 100}}, "tasks": [
    {"command": ["x"], "slot": "s", "count": {"per_slot": 1}}]}
WHOLE_NODE = copy.deepcopy(ONE_CORE)
WHOLE_NODE["resources"][0]["exclusive"] = True


def state(m: Matcher) -> tuple:
    """Everything a failed call must leave as it was."""
    t = m.trav
    return (sorted(m.jobs), m.stat(),
            {v: (list(p.times), list(p.usage)) for v, p in t.sched.items()},
            {v: (list(p.times), list(p.usage)) for v, p in t.xcheck.items()})


def fresh() -> Matcher:
    return Matcher(build_cluster(nodes=2, cores=2), policy="low")


def test_the_same_R_under_a_second_job_id_is_busy_and_changes_nothing() -> None:
    R = fresh().match(ONE_CORE, jobid=1).R
    m = fresh()
    m.update_allocate(1, R)
    before = state(m)
    with pytest.raises(Busy, match="core0 has 0 of 1 free"):
        m.update_allocate(2, R)
    assert state(m) == before
    check_invariants(m)


def test_re_registering_the_same_job_id_replaces_its_stale_allocation() -> None:
    m = fresh()
    first = m.match(ONE_CORE, jobid=5).R
    assert m.update_allocate(5, first).nodes == ["node0"]  # idempotent: still one hold
    assert len(m.jobs) == 1 and m.trav.sched[m.graph.by_name("core0")[0]].usage[0] == 1
    # the job moved (another R for the same id): the old vertices are released
    other = fresh()
    other.match(WHOLE_NODE, jobid=9)
    moved = other.match(ONE_CORE, jobid=5).R  # lands on node1
    assert m.update_allocate(5, moved).nodes == ["node1"]
    assert m.match(WHOLE_NODE, jobid=6).nodes == ["node0"]  # node0 is whole again
    check_invariants(m)


def test_a_failed_replacement_keeps_the_old_allocation() -> None:
    m = fresh()
    m.match(ONE_CORE, jobid=1)  # node0 core0
    blocker = m.match(WHOLE_NODE, jobid=2)  # node1 whole
    elsewhere = fresh()
    elsewhere.match(WHOLE_NODE, jobid=3)
    on_node1 = elsewhere.match(ONE_CORE, jobid=1).R
    before = state(m)
    with pytest.raises(Busy, match="node1"):
        m.update_allocate(1, on_node1)
    assert state(m) == before and m.info(1).nodes == ["node0"] and blocker.nodes == ["node1"]


def test_an_R_holding_a_node_whole_is_busy_while_another_job_shares_it() -> None:
    R = fresh().match(WHOLE_NODE, jobid=1).R  # node0 whole
    m = fresh()
    m.match(ONE_CORE, jobid=2)  # a core of node0
    before = state(m)
    with pytest.raises(Busy, match="node0"):
        m.update_allocate(1, R)
    assert state(m) == before


def test_only_the_window_counts() -> None:
    m = fresh()
    m.match(WHOLE_NODE, jobid=1)  # node0 during [0, 100)
    R = fresh().match(ONE_CORE, jobid=2).R
    with pytest.raises(Busy):
        m.update_allocate(2, R, at=50, duration=100)
    assert m.update_allocate(2, R, at=100, duration=100).at == 100
    check_invariants(m)


def test_a_vertex_that_is_not_in_the_graph_is_a_graph_error() -> None:
    R = Matcher(build_cluster(nodes=4, cores=2), policy="high").match(ONE_CORE, jobid=1).R
    m = fresh()  # two nodes: node3 is not there
    before = state(m)
    with pytest.raises(GraphError, match="is not in the graph"):
        m.update_allocate(1, R)
    assert state(m) == before


def test_a_removed_vertex_is_a_graph_error() -> None:
    R = Matcher(build_cluster(nodes=2, cores=2), policy="high").match(ONE_CORE, jobid=1).R
    m = Matcher(build_cluster(nodes=2, cores=2), policy="high")
    m.remove_subgraph("node1")  # where R's core is
    before = state(m)
    with pytest.raises(GraphError, match=r"/node1/.* was removed from the graph"):
        m.update_allocate(1, R)
    assert state(m) == before


def test_more_units_than_a_vertex_has_is_a_graph_error_naming_it() -> None:
    R = fresh().match(ONE_CORE, jobid=1).R
    for n in R["scheduling"]["graph"]["nodes"]:
        if n["metadata"]["type"] == "core":
            n["metadata"]["size"] = 3
    m = fresh()
    before = state(m)
    with pytest.raises(GraphError, match="core0: R holds 3 units of it, it has 1"):
        m.update_allocate(1, R)
    assert state(m) == before


def test_register_amounts_refuses_a_node_held_whole_by_a_node_exclusive_job() -> None:
    m = Matcher(build_cluster(nodes=1, cores=4), policy="lonodex")
    m.register_amounts(1, "node0", {"core": 1})  # lonodex holds node0 whole
    before = state(m)
    with pytest.raises(Busy, match="node0"):
        m.register_amounts(2, "node0", {"core": 1})
    assert state(m) == before


def test_planner_used_without_ignores_one_span_and_changes_nothing() -> None:
    p = Planner(4)
    a = p.add_span(0, 10, 3)
    p.add_span(10, 10, 3)  # adjacent and equal: the point at 10 is kept, usage flat
    before = (list(p.times), list(p.usage))
    assert p.used_without(0, 20, a) == 3  # the second span still counts
    assert p.used_without(0, 10, a) == 0
    assert p.used_without(5, 3, None) == 3 and p.used_without(5, 3, 99) == 3
    assert (list(p.times), list(p.usage)) == before
