"""Preemption as kube-scheduler's DefaultPreemption, with gangs evicted whole or not at all.

Scenarios run with each allocator on the API double: victims get ``DisruptionTarget``
(PreemptionByScheduler), are deleted, and get a ``Preempted`` Event; the preemptor gets
``status.nominatedNodeName`` and binds once the victims are gone (the double's
``kubelet_sync`` stands for a kubelet finishing them).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from fluxinfra.scheduler.allocator import Allocator, SpreadAllocator
from fluxinfra.scheduler.fluxion import FluxionAllocator
from fluxinfra.scheduler.pods import LABEL_GROUP, LABEL_GROUP_SIZE, pod_info
from fluxinfra.scheduler.preemption import _pick, _split_by_pdb, budgets

from .harness import Harness, check_invariants
from .kube_double import KubeApiDouble, make_node, make_pod

ALLOCATORS: dict[str, Callable[[], Allocator]] = {
    "fluxion": lambda: FluxionAllocator(policy="first"),
    "spread": SpreadAllocator,
}


@pytest.fixture(params=sorted(ALLOCATORS))
def cluster(request: pytest.FixtureRequest) -> Callable[..., Harness]:
    def build(*nodes: dict[str, Any]) -> Harness:
        api = KubeApiDouble()
        for node in nodes:
            api.create("nodes", node)
        return Harness(api, ALLOCATORS[request.param]()).start()
    return build


def running(h: Harness, name: str, node: str, cpu: str, priority: int = 0,
            labels: dict[str, str] | None = None, started: str = "2026-01-01T00:00:00Z") -> None:
    pod = make_pod(name, cpu=cpu, priority=priority, labels=labels, node=node,
                   phase="Running")
    pod["status"]["startTime"] = started
    h.api.create("pods", pod)


def pdb(name: str, app: str, allowed: int) -> dict[str, Any]:
    return {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"selector": {"matchLabels": {"app": app}}},
            "status": {"disruptionsAllowed": allowed, "disruptedPods": {}}}


def preempted(h: Harness) -> list[str]:
    return sorted(k.split("/")[1] for k in h.api.deleted)


def test_fewest_lowest_priority_victims_then_nominated_and_bound(cluster) -> None:
    h = cluster(make_node("n0", cpu="4"), make_node("n1", cpu="4"))
    running(h, "a", "n0", "2", priority=10)
    running(h, "b", "n0", "2", priority=10)
    running(h, "c", "n1", "3", priority=5)
    running(h, "d", "n1", "1", priority=100)
    h.step()
    h.api.create("pods", make_pod("urgent", cpu="3", priority=1000))
    h.step()
    # n0 needs two victims, n1 one (c, priority 5; d at 100 is reprieved): n1 wins
    assert preempted(h) == ["c"]
    c = h.api.get("pods", "default/c")["status"]["conditions"]
    assert {"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler"} \
        .items() <= next(x for x in c if x["type"] == "DisruptionTarget").items()
    [ev] = h.events("Preempted")
    assert ev["regarding"]["name"] == "c" and "default/urgent" in ev["note"]
    assert h.api.get("pods", "default/urgent")["status"]["nominatedNodeName"] == "n1"
    assert h.node_of("urgent") == "", "the victim is still terminating"
    h.step()
    assert preempted(h) == ["c"], "no second round while the victim terminates"
    h.api.kubelet_sync()
    h.step()
    assert h.node_of("urgent") == "n1"
    check_invariants(h)


def test_equal_or_higher_priority_pods_and_never_policy_are_not_preempted(cluster) -> None:
    h = cluster(make_node("n0", cpu="2"))
    running(h, "peer", "n0", "2", priority=50)
    h.step()
    h.api.create("pods", make_pod("same", cpu="1", priority=50))
    never = make_pod("polite", cpu="1", priority=1000,
                     spec={"preemptionPolicy": "Never"})
    h.api.create("pods", never)
    h.step()
    assert not h.api.deleted
    assert h.conditions("same")["PodScheduled"]["reason"] == "Unschedulable"


def test_pod_disruption_budgets_steer_the_choice(cluster) -> None:
    h = cluster(make_node("n0", cpu="2"), make_node("n1", cpu="2"))
    running(h, "guarded", "n0", "2", labels={"app": "db"})
    running(h, "free", "n1", "2", labels={"app": "batch"})
    h.api.create("poddisruptionbudgets", pdb("db", "db", 0))  # watched like the rest
    h.step()
    assert "default/db" in h.core.pdbs
    h.api.create("pods", make_pod("urgent", cpu="2", priority=10))
    h.step()
    assert preempted(h) == ["free"], "the node whose victims violate no budget wins"
    h.api.kubelet_sync()
    h.step()
    assert h.node_of("urgent") == "n1"
    check_invariants(h)


def test_a_running_gang_is_evicted_whole_or_not_at_all(cluster) -> None:
    h = cluster(make_node("n0", cpu="2"), make_node("n1", cpu="2"))
    gang = {LABEL_GROUP: "train", LABEL_GROUP_SIZE: "2"}
    running(h, "train-0", "n0", "2", labels=gang)
    running(h, "train-1", "n1", "1", labels=gang)
    h.step()
    h.api.create("pods", make_pod("urgent", cpu="2", priority=10))
    h.step()
    assert preempted(h) == ["train-0", "train-1"], "never half a gang"
    h.api.kubelet_sync()
    h.step()
    assert h.node_of("urgent")
    check_invariants(h)


def test_a_gang_preempts_for_every_member_or_for_none(cluster) -> None:
    h = cluster(make_node("n0", cpu="2"), make_node("n1", cpu="2"))
    running(h, "low0", "n0", "2")
    running(h, "low1", "n1", "2")
    h.step()
    labels = {LABEL_GROUP: "hpc", LABEL_GROUP_SIZE: "2"}
    for i in range(2):
        h.api.create("pods", make_pod(f"hpc-{i}", cpu="2", priority=10, labels=labels))
    h.step()
    assert preempted(h) == ["low0", "low1"]
    nominated = {h.api.get("pods", f"default/hpc-{i}")["status"].get("nominatedNodeName")
                 for i in range(2)}
    assert nominated == {"n0", "n1"}
    h.api.kubelet_sync()
    h.step()
    assert {h.node_of("hpc-0"), h.node_of("hpc-1")} == {"n0", "n1"}
    check_invariants(h)
    # A gang bigger than what preemption can free evicts nothing.
    for i in range(3):
        h.api.create("pods", make_pod(f"big-{i}", cpu="2", priority=20,
                                      labels={LABEL_GROUP: "big", LABEL_GROUP_SIZE: "3"}))
    h.step()
    assert preempted(h) == ["low0", "low1"]


def test_a_gang_preemptor_s_later_members_use_the_room_its_first_victims_made(
        cluster) -> None:
    """Found on the bed: a gang of 4 one-GPU pods never preempted two running 4-pod gangs
    that filled two 4-GPU nodes. Its first member's victims (a whole gang) freed a node, but
    for the second member that node had no victims left to offer, so it was not a candidate,
    and the plan failed at the third member."""
    h = cluster(make_node("n0", cpu="16", gpu=4), make_node("n1", cpu="16", gpu=4))
    for gang in ("a", "b"):
        for i in range(4):
            h.api.create("pods", make_pod(f"low-{gang}-{i}", cpu="100m", gpu=1, priority=1,
                                          labels={LABEL_GROUP: f"low-{gang}",
                                                  LABEL_GROUP_SIZE: "4"}))
    h.step()
    h.api.kubelet_sync()
    h.step()
    for i in range(4):
        h.api.create("pods", make_pod(f"high-{i}", cpu="100m", gpu=1, priority=1000,
                                      labels={LABEL_GROUP: "high", LABEL_GROUP_SIZE: "4"}))
    h.step()
    victims = preempted(h)
    assert len(victims) == 4 and len({v.rsplit("-", 1)[0] for v in victims}) == 1, \
        f"one whole gang evicted, not {victims}"
    h.api.kubelet_sync()
    h.step()
    assert all(h.node_of(f"high-{i}") for i in range(4)), "the whole gang bound"
    check_invariants(h)


def test_lower_priority_pods_keep_off_a_nominated_node(cluster) -> None:
    h = cluster(make_node("n0", cpu="2"))
    running(h, "victim", "n0", "2")
    h.step()
    h.api.create("pods", make_pod("urgent", cpu="2", priority=10))
    h.step()
    h.api.kubelet_sync()
    h.api.create("pods", make_pod("sneaky", cpu="1", priority=5,
                                  created="2025-12-31T00:00:00Z"))
    h.step()
    assert h.node_of("urgent") == "n0" and h.node_of("sneaky") == ""
    check_invariants(h)


def test_pdb_split_and_node_pick_follow_kube_scheduler() -> None:
    pods = [pod_info(make_pod(f"p{i}", labels={"app": "a"}, node="n", phase="Running"))
            for i in range(3)]
    violating, fine = _split_by_pdb(pods, budgets([pdb("b", "a", 1)]))
    assert [p.name for p in fine] == ["p0"] and [p.name for p in violating] == ["p1", "p2"]
    from fluxinfra.scheduler.preemption import _Choice

    def victim(prio: int, start: float) -> Any:
        p = pod_info(make_pod("v", priority=prio, node="n", phase="Running"))
        p.started = start
        return p

    choices = [_Choice("a", [victim(5, 10)], 1), _Choice("b", [victim(9, 10)], 0),
               _Choice("c", [victim(5, 10), victim(1, 10)], 0), _Choice("d", [victim(5, 20)], 0)]
    assert _pick(choices).node == "d", "no violation, lowest top priority, latest start"


def test_an_eviction_the_api_refuses_nominates_nothing_and_is_tried_again(cluster) -> None:
    h = cluster(make_node("n0", cpu="2"))
    running(h, "victim", "n0", "2")
    h.step()
    h.api.fail_next("delete_pod", 500)
    h.api.create("pods", make_pod("urgent", cpu="2", priority=10))
    h.step()
    assert not h.api.deleted
    assert "nominatedNodeName" not in h.api.get("pods", "default/urgent")["status"]
    assert h.binder.metrics.errors.value(source="preempt") == 1
    h.step(1)
    assert preempted(h) == ["victim"], "tried again on the next cycle"
