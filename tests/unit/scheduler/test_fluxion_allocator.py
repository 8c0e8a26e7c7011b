"""Fluxion-specific behaviour: slot shape, EASY backfill, overrun, rebuilds, per-pod release."""

from __future__ import annotations

import pytest

from fluxinfra.matcher.errors import Busy, Unsatisfiable
from fluxinfra.scheduler.core import SchedulerConfig
from fluxinfra.scheduler.fluxion import FluxionAllocator
from fluxinfra.scheduler.pods import ANNOT_DURATION, Shape

from .harness import Harness, check_invariants
from .kube_double import KubeApiDouble, make_node, make_pod


def nodes(n: int, cpu: str = "4", memory: str = "4Gi") -> list[dict]:
    return [make_node(f"n{i}", cpu=cpu, memory=memory) for i in range(n)]


def test_each_slot_is_on_one_node_and_slots_share_nodes() -> None:
    """Pins the jobspec form the scheduler relies on (top-level slot[count])."""
    a = FluxionAllocator()
    a.set_nodes(nodes(2))
    p = a.place(8, Shape(1, 0, 0), duration=60, now=0, reserve=False)
    assert sorted(p.nodes) == ["n0"] * 4 + ["n1"] * 4
    with pytest.raises(Unsatisfiable):
        a.place(1, Shape(5, 0, 0), duration=60, now=0, reserve=False)  # 8 cores, 4 per node
    with pytest.raises(Busy):
        a.place(1, Shape(1, 0, 0), duration=60, now=0, reserve=False)


def test_reservation_starts_when_the_running_job_ends() -> None:
    a = FluxionAllocator()
    a.set_nodes(nodes(1))
    a.place(1, Shape(4, 0, 0), duration=100, now=0, reserve=False)
    p = a.place(1, Shape(2, 0, 0), duration=10, now=5, reserve=True)
    assert (p.status, p.at) == ("RESERVED", 100)


def test_releasing_one_of_several_pods_on_a_node_frees_exactly_its_share() -> None:
    a = FluxionAllocator()
    a.set_nodes(nodes(1))
    p = a.place(4, Shape(1, 1024, 0), duration=60, now=0, reserve=False)
    assert not a.release(p.jobid, "n0", Shape(1, 1024, 0))
    [piece] = a.jobs[p.jobid]
    assert piece.mjobid == p.jobid and piece.slots == [1, 2, 3], "slot 0 released alone"
    a.place(1, Shape(1, 1024, 0), duration=60, now=1, reserve=False)  # exactly one came back
    with pytest.raises(Busy):
        a.place(1, Shape(1, 0, 0), duration=60, now=1, reserve=False)
    for _ in range(3):
        done = a.release(p.jobid, "n0", Shape(1, 1024, 0))
    assert done and p.jobid not in a.jobs


def test_nodes_join_and_leave_the_live_graph_without_a_rebuild() -> None:
    a = FluxionAllocator()
    a.set_nodes(nodes(1))
    first = a.place(1, Shape(4, 0, 0), duration=60, now=0, reserve=False)
    a.upsert_node(make_node("n1", cpu="4", memory="4Gi"))
    assert a.rebuilds == 0 and a.ledger.free[0] == 4
    p = a.place(1, Shape(4, 0, 0), duration=60, now=1, reserve=False)
    assert p.nodes == ["n1"], "n0 is still full"
    a.upsert_node(make_node("n2", cpu="2", memory="4Gi", labels={"topology.kubernetes.io/zone":
                                                                  "z1"}))
    assert a.place(1, Shape(2, 0, 0), duration=60, now=1, reserve=False).nodes == ["n2"]
    a.remove_node("n0")
    assert a.rebuilds == 0
    assert a.release(first.jobid, "n0", Shape(4, 0, 0)), "its share went with the node"
    with pytest.raises(Busy):  # n1 and n2 are left, both full
        a.place(1, Shape(1, 0, 0), duration=60, now=2, reserve=False)
    assert sorted(a.ledger.capacity) == ["n1", "n2"] and a.ledger.free == [0, 8192, 0]


def test_a_resized_node_rebuilds_and_keeps_allocations() -> None:
    a = FluxionAllocator()
    a.set_nodes(nodes(2))
    a.place(2, Shape(4, 0, 0), duration=60, now=0, reserve=False)
    a.upsert_node(make_node("n0", cpu="8", memory="4Gi"))
    assert a.rebuilds == 1
    p = a.place(1, Shape(4, 0, 0), duration=60, now=1, reserve=False)
    assert p.nodes == ["n0"], "n0 grew by 4 free cores; n1 is still full"


def test_heartbeat_and_cordon_do_not_rebuild() -> None:
    a = FluxionAllocator()
    a.set_nodes(nodes(2))
    node = make_node("n0", cpu="4", memory="4Gi", unschedulable=True)
    a.upsert_node(node)
    assert a.rebuilds == 0 and a.status["n0"] == "down"
    p = a.place(1, Shape(4, 0, 0), duration=60, now=0, reserve=False)
    assert p.nodes == ["n1"]


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


def test_adopted_pods_are_registered_through_the_public_matcher_api(monkeypatch) -> None:
    """``adopt`` holds a running pod's amounts with ``Matcher.register_amounts`` (no
    traverser internals, no path scans) and matches then see them held."""
    a = FluxionAllocator(policy="low")
    a.set_nodes(nodes(2))
    matcher = a.backend.matcher
    calls = []
    real = matcher.register_amounts
    monkeypatch.setattr(matcher, "register_amounts",
                        lambda *args, **kw: calls.append((args, kw)) or real(*args, **kw))
    jobid = a.adopt("n1", Shape(3, 2048, 0), now=0, duration=100)
    assert calls == [((jobid, "n1", {"core": 3, "memory": 2048, "gpu": 0}),
                      {"at": 0, "duration": 100})]
    held = matcher.info(jobid)
    assert held.nodes == ["n1"]
    amounts = {}
    for _, v, amount, _, _ in held.emitted:
        t = matcher.graph.type[v]
        amounts[t] = amounts.get(t, 0) + (amount if t == "memory" else 1)
    assert amounts["core"] == 3 and amounts["memory"] >= 2048
    p = a.place(2, Shape(1, 0, 0), duration=10, now=0, reserve=False)
    assert sorted(p.nodes).count("n1") <= 1  # n1 has one core left
    with pytest.raises(Busy):
        a.place(1, Shape(4, 0, 0), duration=10, now=0, reserve=False)


def test_adopting_on_a_node_held_whole_is_busy_and_books_nothing() -> None:
    """With a node-exclusive policy a placed job holds its node whole: adopting running pods
    there must not book the node twice (``Busy``, which the core logs and counts), and the
    allocator's ledger and the matcher hold nothing for the refused pods."""
    a = FluxionAllocator(policy="lonodex")
    a.set_nodes(nodes(1))
    a.place(1, Shape(1, 0, 0), duration=60, now=0, reserve=False)  # n0, whole
    before = sorted(a.jobs), sorted(a.backend.matcher.jobs)
    with pytest.raises(Busy, match="n0"):
        a.adopt("n0", Shape(1, 0, 0), now=0, duration=60)
    assert (sorted(a.jobs), sorted(a.backend.matcher.jobs)) == before


def test_the_service_gets_nodes_without_their_bulk() -> None:
    """What RemoteBackend sends builds the same graph from a fraction of the bytes."""
    import json

    from fluxinfra.matcher.k8s import graph_from_k8s
    from fluxinfra.scheduler.fluxion import slim_node

    node = make_node("n0", cpu="8", memory="32Gi", gpu=2, labels={"zone": "a"})
    node["metadata"]["managedFields"] = [{"manager": "kubelet", "fieldsV1": {"f:x": {}}}]
    node["status"]["images"] = [{"names": [f"img{i}@sha256:{i:064x}"], "sizeBytes": i}
                                for i in range(50)]
    node["status"]["conditions"][0].update(message="kubelet is posting ready status",
                                           lastHeartbeatTime="2026-01-01T00:00:00Z")
    slim = slim_node(node)
    assert len(json.dumps(slim)) * 5 < len(json.dumps(node))
    assert slim["metadata"]["labels"] == node["metadata"]["labels"]
    assert slim["status"]["conditions"] == [{"type": "Ready", "status": "True"}]
    full, lean = (graph_from_k8s([n], [], subtract_pods=False) for n in (node, slim))
    assert [(full.type[v], full.name[v], full.size[v]) for v in range(len(full))] == \
        [(lean.type[v], lean.name[v], lean.size[v]) for v in range(len(lean))]
