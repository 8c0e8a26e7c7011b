"""Fluxion-specific behaviour: the pool graph, constraints, EASY backfill, overrun, node
changes node by node, per-pod release."""

from __future__ import annotations

import pytest

from fluxinfra.matcher.errors import Busy, Unsatisfiable
from fluxinfra.scheduler.core import SchedulerConfig
from fluxinfra.scheduler.fluxion import FluxionAllocator
from fluxinfra.scheduler.pods import ANNOT_DURATION, Request

from .harness import Harness, check_invariants
from .kube_double import KubeApiDouble, make_node, make_pod

ZONE = "topology.kubernetes.io/zone"


def nodes(n: int, cpu: str = "4", memory: str = "4Gi") -> list[dict]:
    return [make_node(f"n{i}", cpu=cpu, memory=memory) for i in range(n)]


def cpu(milli: int, **more: int) -> Request:
    return Request.of({"cpu": milli, **{k.replace("_", "/", 1): v for k, v in more.items()}})


def place(a: FluxionAllocator, count: int, request: Request, now: int = 0, **kw):
    return a.place(count, request, candidates=kw.pop("candidates", None), duration=60, now=now,
                   reserve=kw.pop("reserve", False), **kw)


def test_each_slot_is_on_one_node_and_slots_share_nodes() -> None:
    """Pins the jobspec form the scheduler relies on (top-level slot[count])."""
    a = FluxionAllocator()
    a.set_nodes(nodes(2))
    p = place(a, 16, cpu(500))
    assert sorted(p.nodes) == ["n0"] * 8 + ["n1"] * 8, "half cores share a node exactly"
    with pytest.raises(Unsatisfiable):
        place(a, 1, cpu(5000))  # 8 cores, 4 per node
    with pytest.raises(Busy):
        place(a, 1, cpu(1))


def test_candidates_travel_as_a_ranks_constraint() -> None:
    a = FluxionAllocator()
    a.set_nodes(nodes(4))
    assert place(a, 2, cpu(1000), candidates=frozenset({"n2"})).nodes == ["n2", "n2"]
    js = next(iter(a._jobspecs.values()))
    assert js["attributes"]["system"]["constraints"] == {"ranks": ["2"]}
    with pytest.raises(Unsatisfiable):
        place(a, 1, cpu(1000), candidates=frozenset())
    every = frozenset(f"n{i}" for i in range(4))
    place(a, 1, cpu(1000), candidates=every)
    assert a._constraint(every) is None, "every node: no constraint at all"


def test_reservation_starts_when_the_running_job_ends() -> None:
    a = FluxionAllocator()
    a.set_nodes(nodes(1))
    a.place(1, cpu(4000), candidates=None, duration=100, now=0, reserve=False)
    p = a.place(1, cpu(2000), candidates=None, duration=10, now=5, reserve=True)
    assert (p.status, p.at) == ("RESERVED", 100)


def test_releasing_one_of_several_pods_on_a_node_frees_exactly_its_share() -> None:
    a = FluxionAllocator()
    a.set_nodes(nodes(1))
    req = Request.of({"cpu": 1000, "memory": 2**30})
    p = place(a, 4, req)
    assert not a.release(p.jobid, "n0", req)
    [piece] = a.jobs[p.jobid]
    assert piece.mjobid == p.jobid and piece.slots == [1, 2, 3], "slot 0 released alone"
    place(a, 1, req, now=1)  # exactly one came back
    with pytest.raises(Busy):
        place(a, 1, cpu(1), now=1)
    for _ in range(3):
        done = a.release(p.jobid, "n0", req)
    assert done and p.jobid not in a.jobs


def test_nodes_join_and_leave_the_live_graph_without_a_rebuild() -> None:
    a = FluxionAllocator()
    a.set_nodes(nodes(1))
    first = place(a, 1, cpu(4000))
    a.upsert_node(make_node("n1", cpu="4", memory="4Gi"))
    assert a.rebuilds == 0
    assert place(a, 1, cpu(4000), now=1).nodes == ["n1"], "n0 is still full"
    a.upsert_node(make_node("n2", cpu="2", memory="4Gi", labels={ZONE: "z1"}))
    assert place(a, 1, cpu(2000), now=1).nodes == ["n2"]
    a.remove_node("n0")
    assert a.rebuilds == 0
    assert a.release(first.jobid, "n0", cpu(4000)), "its share went with the node"
    with pytest.raises(Busy):  # n1 and n2 are left, both full
        place(a, 1, cpu(1), now=2)
    assert a.ranks == {"n0": 0, "n1": 1, "n2": 2}, "ranks are never reused"


def test_a_resized_node_changes_alone_and_keeps_its_allocations() -> None:
    a = FluxionAllocator()
    a.set_nodes(nodes(2))
    running = place(a, 2, cpu(4000))
    a.upsert_node(make_node("n0", cpu="8", memory="4Gi"))
    assert (a.rebuilds, a.resized) == (0, 1)
    assert place(a, 1, cpu(4000), now=1).nodes == ["n0"], "n0 grew by 4 free cores"
    with pytest.raises(Busy):
        place(a, 1, cpu(1), now=1)
    for node in ("n0", "n1"):
        a.release(running.jobid, node, cpu(4000))
    assert place(a, 1, cpu(4000), now=2).nodes, "the pre-resize pod's share came back"


def test_labels_taints_and_cordons_never_touch_the_graph() -> None:
    a = FluxionAllocator()
    a.set_nodes(nodes(2))
    graph = a.backend.matcher.graph
    a.upsert_node(make_node("n0", cpu="4", memory="4Gi", unschedulable=True,
                            labels={"pool": "b"},
                            taints=[{"key": "k", "value": "v", "effect": "NoSchedule"}]))
    assert a.backend.matcher.graph is graph and (a.rebuilds, a.resized) == (0, 0)


def test_a_zone_label_change_moves_the_node() -> None:
    a = FluxionAllocator(levels=f"zone={ZONE}")
    a.set_nodes([make_node("n0", cpu="4", memory="4Gi", labels={ZONE: "a"})])
    held = place(a, 1, cpu(3000))
    a.upsert_node(make_node("n0", cpu="4", memory="4Gi", labels={ZONE: "b"}))
    g = a.backend.matcher.graph
    assert g.path(g.resolve("n0")) == "/cluster0/b/n0" and a.resized == 1
    with pytest.raises(Busy):
        place(a, 1, cpu(2000), now=1)  # its running pod moved with it
    assert a.release(held.jobid, "n0", cpu(3000))


def backfill_cluster() -> Harness:
    api = KubeApiDouble()
    api.create("nodes", make_node("n0", cpu="4", memory="16Gi"))
    return Harness(api, FluxionAllocator(), SchedulerConfig(default_duration=3600))


def timed(name: str, cpu: str, seconds: int, created: str) -> dict:
    return make_pod(name, cpu=cpu, memory="0", annotations={ANNOT_DURATION: f"{seconds}s"},
                    created=created)


@pytest.mark.parametrize("depth", [1, 0], ids=["easy", "no-reservation"])
def test_backfill_never_delays_the_head_job(depth: int) -> None:
    h = backfill_cluster()
    h.core.config.reserve_depth = depth
    h.start()
    h.api.create("pods", timed("running", "2", 100, "2026-01-01T00:00:00Z"))
    h.step()
    assert h.node_of("running") == "n0"
    h.api.create("pods", timed("head", "4", 1000, "2026-01-01T00:01:00Z"))
    h.step(1)
    h.api.create("pods", timed("long", "2", 200, "2026-01-01T00:02:00Z"))
    h.step(1)
    h.api.create("pods", timed("short", "2", 50, "2026-01-01T00:03:00Z"))
    h.step(1)
    assert h.node_of("head") == ""
    if depth:
        assert h.node_of("short") == "n0", "ends before the head's reservation: backfilled"
        assert h.node_of("long") == "", "would run past the head's reserved start"
        assert any("reserved" in e["note"] for e in h.events("FailedScheduling"))
    else:
        # Without a reservation the long job jumps in and the head waits past t=100.
        assert h.node_of("long") == "n0" and h.node_of("short") == ""
    check_invariants(h)
    h.api.set_phase("default/running", "Succeeded")
    h.api.set_phase("default/short", "Succeeded")
    h.step(100)
    assert (h.node_of("head") == "n0") == bool(depth), "EASY: the head starts at t=100"
    check_invariants(h)


def test_overrunning_pod_keeps_its_resources() -> None:
    h = backfill_cluster()
    h.core.config.extension = 30
    h.start()
    h.api.create("pods", timed("slow", "4", 10, "2026-01-01T00:00:00Z"))
    h.step()
    h.step(60)  # ten times its declared duration; still Running
    h.api.create("pods", timed("next", "1", 10, "2026-01-01T00:01:00Z"))
    h.step(1)
    h.step(40)
    assert h.node_of("next") == "", "the node is still full"
    h.api.set_phase("default/slow", "Succeeded")
    h.step(1)
    assert h.node_of("next") == "n0"
    check_invariants(h)


def test_running_pods_are_registered_by_a_match_pinned_to_their_node() -> None:
    """``adopt`` is a match with a ranks constraint on the node: never a vertex twice; a node
    without the room is listed as unsynced and the books are kept."""
    a = FluxionAllocator(policy="low")
    a.set_nodes(nodes(2))
    a.adopt("n1", cpu(3000), 2, now=0, duration=100)
    assert not a.unsynced
    p = place(a, 2, cpu(1000))
    assert sorted(p.nodes).count("n1") <= 1  # n1 has one core left
    jobid = a.adopt("n1", cpu(2000), 1, now=0, duration=100)
    assert a.unsynced == {"n1"} and a.jobs[jobid][0].unheld


def test_the_service_gets_nodes_without_their_bulk() -> None:
    """What RemoteBackend sends builds the same pool graph from a fraction of the bytes."""
    import json

    from fluxinfra.kube.pools import parse_topology, pool_graph
    from fluxinfra.scheduler.fluxion import slim_node

    node = make_node("n0", cpu="8", memory="32Gi", gpu=2, labels={ZONE: "a"})
    node["metadata"]["managedFields"] = [{"manager": "kubelet", "fieldsV1": {"f:x": {}}}]
    node["status"]["images"] = [{"names": [f"img{i}@sha256:{i:064x}"], "sizeBytes": i}
                                for i in range(50)]
    node["status"]["conditions"][0].update(message="kubelet is posting ready status",
                                           lastHeartbeatTime="2026-01-01T00:00:00Z")
    slim = slim_node(node)
    assert len(json.dumps(slim)) * 5 < len(json.dumps(node))
    assert slim["metadata"]["labels"] == node["metadata"]["labels"]
    assert slim["status"]["conditions"] == [{"type": "Ready", "status": "True"}]
    levels = parse_topology(f"zone={ZONE}")
    (full, _), (lean, _) = (pool_graph([n], levels) for n in (node, slim))
    assert len(full) > 4
    assert [(full.type[v], full.name[v], full.size[v]) for v in range(len(full))] == \
        [(lean.type[v], lean.name[v], lean.size[v]) for v in range(len(lean))]


def test_the_in_process_backend_hands_each_matcher_it_builds_to_its_owner() -> None:
    """``InProcessBackend(on_matcher=...)``: the scheduler's command settles the collector
    there (a library user's process is left alone); each rebuild builds a new matcher."""
    from fluxinfra.scheduler.fluxion import InProcessBackend

    built: list = []
    a = FluxionAllocator("first", InProcessBackend("first", on_matcher=built.append))
    a.set_nodes(nodes(2))
    assert built == [a.backend.matcher]
    a.set_nodes(nodes(3))
    assert len(built) == 2 and built[-1] is a.backend.matcher is not built[0]
    assert place(a, 12, cpu(1000)).nodes == ["n0"] * 4 + ["n1"] * 4 + ["n2"] * 4
