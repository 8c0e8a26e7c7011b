"""``Matcher.register_amounts``: amounts in use on a node, held under a job id, and
``update_allocate`` finding an R's vertices through the graph's indexes."""

from __future__ import annotations

import pytest
from matcher_testlib import build_cluster, check_invariants

from fluxinfra.matcher import Busy, GraphError, Matcher, MatcherError


def names(m: Matcher, result) -> list[str]:
    g = m.graph
    return [g.path(v) for _, v, _, _, _ in result.emitted]


def test_takes_the_lowest_free_vertices_below_the_node() -> None:
    m = Matcher(build_cluster(nodes=2, cores=4, gpus=1, mem_per_socket=16), policy="low")
    r = m.register_amounts(7, "node1", {"core": 5, "gpu": 1, "memory": 10}, at=0, duration=50)
    assert r.jobid == 7 and r.status == "ALLOCATED" and r.nodes == ["node1"]
    got = names(m, r)
    cores = [p for p in got if p.rsplit("/", 1)[-1].startswith("core")]
    assert len(cores) == 5 and all("/node1/" in p for p in cores)
    assert sum("/gpu" in p for p in got) == 1 and sum("/memory" in p for p in got) == 1
    assert r.R["execution"]["starttime"] == 0 and r.R["execution"]["expiration"] == 50
    check_invariants(m)
    # the next registration gets the next free vertices; matches see them held
    again = m.register_amounts(8, "node1", {"core": 3})
    assert not set(names(m, again)) & set(cores)
    with pytest.raises(Busy):
        m.register_amounts(9, "node1", {"core": 1})
    m.cancel(7)
    assert m.register_amounts(9, "node1", {"core": 5}).nodes == ["node1"]
    check_invariants(m)


def test_refusals_hold_nothing() -> None:
    m = Matcher(build_cluster(nodes=1, cores=2), policy="first")
    with pytest.raises(Busy):
        m.register_amounts(1, "node0", {"core": 5})
    with pytest.raises(GraphError, match="no vertex named 'ghost'"):
        m.register_amounts(1, "ghost", {"core": 1})
    with pytest.raises(GraphError, match="has no 'fpga'"):
        m.register_amounts(1, "node0", {"fpga": 1})
    with pytest.raises(MatcherError, match=r"amounts\['core'\]"):
        m.register_amounts(1, "node0", {"core": -1})
    assert not m.jobs
    assert all(not p.spans for p in m.trav.sched.values())
    m.register_amounts(1, "node0", {"core": 4})
    with pytest.raises(MatcherError, match="already in use"):
        m.register_amounts(1, "node0", {"core": 1})


def test_windows_that_overlap_are_refused_and_later_ones_fit() -> None:
    m = Matcher(build_cluster(nodes=1, cores=2, gpus=0), policy="low")
    m.register_amounts(1, "node0", {"core": 4}, at=100, duration=10)
    with pytest.raises(Busy):
        m.register_amounts(2, "node0", {"core": 1}, at=0, duration=200)
    later = m.register_amounts(3, "node0", {"core": 4}, at=110, duration=10)
    assert later.R["execution"]["starttime"] == 110
    check_invariants(m)


def test_update_allocate_finds_vertices_by_uniq_id_without_path_scans(monkeypatch) -> None:
    g = build_cluster(nodes=3, cores=4)
    m = Matcher(g, policy="low")
    r = m.match({"version": 1, "resources": [{"type": "node", "count": 2, "with": [
        {"type": "slot", "count": 1, "label": "t", "with": [{"type": "core", "count": 2}]}]}]})
    again = Matcher(g, policy="low")

    def no_scan(name):
        raise AssertionError(f"path lookup by name {name!r}")

    monkeypatch.setattr(g, "by_name", no_scan)
    assert again.update_allocate(50, r.R).nodes == r.nodes
    assert sorted(again.info(50).emitted) == sorted(r.emitted)


def test_update_allocate_falls_back_to_the_path_when_uniq_ids_differ() -> None:
    m = Matcher(build_cluster(nodes=2, cores=2), policy="low")
    r = m.match({"version": 1, "resources": [{"type": "slot", "count": 1, "label": "t",
                                               "with": [{"type": "core", "count": 1}]}]})
    rset = r.R
    assert rset["scheduling"]["graph"]["nodes"]
    for n in rset["scheduling"]["graph"]["nodes"]:
        n["id"] = str(int(n["id"]) + 1000)
        n["metadata"]["uniq_id"] = int(n["metadata"]["uniq_id"]) + 1000
    again = Matcher(build_cluster(nodes=2, cores=2), policy="low")
    assert sorted(again.update_allocate(3, rset).emitted) == sorted(r.emitted)
