"""Scheduler scenarios end to end: API double -> informers -> core -> allocator -> binds/Events.

Every scenario runs with each allocator (Fluxion's matcher in process, the same over the real
gRPC service on loopback, and the spread baseline), and ends with :func:`check_invariants` (no
node over capacity, exactly one share held per running pod, on the node it runs on).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from fluxinfra.scheduler.allocator import Allocator, SpreadAllocator
from fluxinfra.scheduler.core import SchedulerConfig
from fluxinfra.scheduler.fluxion import FluxionAllocator, RemoteBackend
from fluxinfra.scheduler.pods import LABEL_GROUP, LABEL_GROUP_SIZE, LABEL_PODGROUP

from .harness import Harness, check_invariants
from .kube_double import KubeApiDouble, make_node, make_pod, make_podgroup

ALLOCATORS: dict[str, Callable[[], Allocator]] = {
    "spread": SpreadAllocator,
    "fluxion": lambda: FluxionAllocator(policy="first"),
}


@pytest.fixture(params=[*sorted(ALLOCATORS), "fluxion-grpc"])
def make(request: pytest.FixtureRequest) -> Callable[..., Harness]:
    if request.param == "fluxion-grpc":
        target = request.getfixturevalue("fluxion_service")
        factory: Callable[[], Allocator] = lambda: FluxionAllocator(  # noqa: E731
            backend=RemoteBackend(target, timeout=10))
    else:
        factory = ALLOCATORS[request.param]

    def build(nodes: int = 2, cpu: str = "4", memory: str = "16Gi",
              config: SchedulerConfig | None = None, api: KubeApiDouble | None = None) -> Harness:
        if api is None:
            api = KubeApiDouble()
            for i in range(nodes):
                api.create("nodes", make_node(f"n{i}", cpu=cpu, memory=memory))
        return Harness(api, factory(), config)
    return build


def group_pods(api: KubeApiDouble, name: str, size: int, cpu: str = "1", *,
               podgroup: bool = False, start: int = 0, count: int | None = None) -> None:
    labels = ({LABEL_PODGROUP: name} if podgroup
              else {LABEL_GROUP: name, LABEL_GROUP_SIZE: str(size)})
    for i in range(start, start + (size if count is None else count)):
        api.create("pods", make_pod(f"{name}-{i}", cpu=cpu, labels=labels))


def test_single_pods_are_bound_with_events(make: Callable[..., Harness]) -> None:
    h = make().start()
    for i in range(3):
        h.api.create("pods", make_pod(f"p{i}"))
    h.step()
    assert all(h.node_of(f"p{i}") for i in range(3))
    assert len(h.api.bindings) == 3
    assert {e["regarding"]["name"] for e in h.events("Scheduled")} == {"p0", "p1", "p2"}
    assert h.core.metrics.pods_bound.value() == 3
    check_invariants(h)


def test_pods_of_other_schedulers_are_left_alone_but_counted(
        make: Callable[..., Harness]) -> None:
    h = make(nodes=1).start()
    h.api.create("pods", make_pod("theirs", cpu="3", scheduler="default-scheduler"))
    h.step()
    assert h.node_of("theirs") == "" and not h.api.bindings
    h.api.bind_elsewhere("default/theirs", "n0")  # kube-scheduler places it
    h.api.create("pods", make_pod("ours", cpu="2"))
    h.step()
    assert h.node_of("ours") == "", "3 of 4 cores are taken by the other scheduler's pod"
    check_invariants(h)
    h.api.set_phase("default/theirs", "Succeeded")
    h.step()
    assert h.node_of("ours") == "n0"
    check_invariants(h)


def test_gang_is_all_or_nothing(make: Callable[..., Harness]) -> None:
    h = make(nodes=2, cpu="4").start()
    h.api.create("pods", make_pod("blocker", cpu="4", scheduler="other", node="n0",
                                  phase="Running"))
    group_pods(h.api, "gang", 5)  # 5 x 1 core; only 4 free
    h.step()
    assert not any(h.node_of(f"gang-{i}") for i in range(5))
    assert h.events("FailedScheduling"), "waiting pods get a FailedScheduling Event"
    h.api.delete("pods", "default/blocker")
    h.step()
    assert all(h.node_of(f"gang-{i}") for i in range(5))
    check_invariants(h)


def test_group_waits_for_min_member(make: Callable[..., Harness]) -> None:
    h = make().start()
    h.api.create("podgroups", make_podgroup("pg", 3))
    group_pods(h.api, "pg", 3, podgroup=True, count=2)
    h.step()
    assert not h.api.bindings
    group_pods(h.api, "pg", 3, podgroup=True, start=2, count=1)
    h.step()
    assert len(h.api.bindings) == 3
    assert h.api.podgroup_patches[-1][2]["status"]["phase"] == "Scheduled"
    check_invariants(h)


def test_podgroup_with_min_member_zero_is_reported_not_retried(
        make: Callable[..., Harness]) -> None:
    h = make().start()
    h.api.create("podgroups", make_podgroup("bad", 0))
    group_pods(h.api, "bad", 2, podgroup=True)
    h.step()
    h.step(5)
    assert not h.api.bindings
    [ev] = [e for e in h.events("InvalidPodGroup")]
    assert "spec.minMember" in ev["note"] and ev["regarding"]["kind"] == "PodGroup"
    cond = h.conditions("bad-0")["PodScheduled"]
    assert cond["status"] == "False" and cond["reason"] == "Unschedulable"


def test_group_larger_than_cluster_is_unschedulable_once(make: Callable[..., Harness]) -> None:
    h = make(nodes=2, cpu="4").start()
    h.api.create("podgroups", make_podgroup("huge", 9))
    group_pods(h.api, "huge", 9, podgroup=True)
    h.step()
    tries = h.core.metrics.match_latency.count
    h.step(10)
    h.step(10)
    assert h.core.metrics.match_latency.count == tries, "no endless retry"
    assert not h.api.bindings
    never = h.events("Unschedulable")
    pods = [e for e in never if e["regarding"]["kind"] == "Pod"]
    assert len(pods) == 9 and all("can never fit" in e["note"] for e in pods), \
        "one Event per pod, not one per cycle"
    assert [e["regarding"]["kind"] for e in never].count("PodGroup") == 1
    assert h.conditions("huge-3")["PodScheduled"]["reason"] == "Unschedulable"
    # A node joins: the group is looked at again (and still cannot fit 9 cores on 12 - no,
    # it now can: 3 nodes x 4 cores).
    h.api.create("nodes", make_node("n2", cpu="4", memory="16Gi"))
    h.step()
    assert len(h.api.bindings) == 9
    check_invariants(h)


def test_unparsable_request_gets_an_event_and_the_loop_goes_on(
        make: Callable[..., Harness]) -> None:
    h = make().start()
    bad = make_pod("bad")
    bad["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "lots"
    h.api.objects["pods"]["default/bad"] = {**bad, "metadata": {**bad["metadata"],
                                                                "uid": "uid-bad"}}
    h.api._record("pods", "ADDED", h.api.objects["pods"]["default/bad"])
    h.api.create("pods", make_pod("good"))
    h.step()
    h.step(5)
    assert h.node_of("good") and not h.node_of("bad")
    [ev] = h.events("InvalidPod")
    assert "cpu" in ev["note"] and "'lots'" in ev["note"]
    assert h.conditions("bad")["PodScheduled"]["reason"] == "Unschedulable"
    check_invariants(h)


def test_pod_finishing_in_a_group_releases_only_its_share(make: Callable[..., Harness]) -> None:
    h = make(nodes=1, cpu="4").start()
    group_pods(h.api, "g", 4)
    h.step()
    assert len(h.api.bindings) == 4
    h.api.set_phase("default/g-0", "Succeeded")
    h.step()
    held = h.core.held()["n0"]
    assert len(held) == 3, held
    # Exactly one core came back: a 1-core pod fits, a 2-core pod does not.
    h.api.create("pods", make_pod("two", cpu="2"))
    h.api.create("pods", make_pod("one", cpu="1"))
    h.step()
    assert h.node_of("one") == "n0" and h.node_of("two") == ""
    check_invariants(h)


def test_node_deleted_under_running_pods(make: Callable[..., Harness]) -> None:
    h = make(nodes=2, cpu="4").start()
    for i in range(2):
        h.api.create("pods", make_pod(f"p{i}", cpu="3"))
    h.step()
    lost = next(p for p in ("p0", "p1") if h.node_of(p) == "n0")
    h.api.delete("nodes", "/n0")
    h.step()
    # The pod GC deletes pods of a deleted node; the scheduler must not crash meanwhile.
    h.api.delete("pods", f"default/{lost}")
    h.api.create("pods", make_pod("next", cpu="3"))
    h.step()
    assert h.node_of("next") == "", "the only node left is full"
    check_invariants(h)


def test_bind_conflict_accounts_for_the_real_placement(make: Callable[..., Harness]) -> None:
    h = make(nodes=2, cpu="4").start()
    h.api.create("pods", make_pod("racer", cpu="2"))
    real_bind = h.api.bind

    def bind_after_rival(namespace: str, pod: str, uid: str, node: str) -> None:
        other = "n1" if node == "n0" else "n0"
        h.api.bind_elsewhere(f"{namespace}/{pod}", other)  # someone else won the race
        h.api.bind = real_bind  # type: ignore[method-assign]
        real_bind(namespace, pod, uid, node)

    h.api.bind = bind_after_rival  # type: ignore[method-assign]
    h.step()
    assert h.events("FailedBinding"), "the 409 is reported"
    assert h.core.metrics.errors.value(source="bind") == 1
    h.step()  # the watch shows where the pod really runs: counted there, our hold released
    [(uid, _)] = h.core.held()[h.node_of("racer")]
    assert uid == h.api.get("pods", "default/racer")["metadata"]["uid"]
    assert len(h.core.held()) == 1
    check_invariants(h)


def test_server_error_on_bind_keeps_the_reservation_and_retries_to_the_same_node(
        make: Callable[..., Harness]) -> None:
    cfg = SchedulerConfig(bind_retry_after=5)
    h = make(config=cfg).start()
    h.api.fail_next("bind", 503)
    h.api.create("pods", make_pod("p"))
    h.step()
    assert h.node_of("p") == ""
    [(reserved, _)] = [(n, u) for n, us in h.core.held().items() for u in us]
    check_invariants(h)
    h.step(1)
    assert h.node_of("p") == "", "still cooling down"
    h.step(5)
    assert h.node_of("p") == reserved
    check_invariants(h)


def test_restart_in_the_middle_of_binding_a_group(make: Callable[..., Harness]) -> None:
    first = make(nodes=2, cpu="4").start()
    group_pods(first.api, "g", 6)
    calls = {"n": 0}
    real_bind = first.api.bind

    def crash_after_three(*args: str) -> None:
        calls["n"] += 1
        if calls["n"] > 3:
            raise RuntimeError("scheduler killed")
        real_bind(*args)

    first.api.bind = crash_after_three  # type: ignore[method-assign]
    with pytest.raises(RuntimeError):
        first.step()
    first.api.bind = real_bind  # type: ignore[method-assign]
    assert len(first.api.bindings) == 3
    # A new scheduler process on the same cluster.
    second = make(api=first.api).start()
    assert sorted(len(s) for s in second.core.held().values()) in ([3], [1, 2], [0, 3])
    check_invariants(second)
    second.step()
    assert len(second.api.bindings) == 6
    check_invariants(second)


def test_priority_is_served_first(make: Callable[..., Harness]) -> None:
    h = make(nodes=1, cpu="4").start()
    h.api.create("pods", make_pod("low", cpu="4", priority=0,
                                  created="2026-01-01T00:00:00Z"))
    h.api.create("pods", make_pod("high", cpu="4", priority=1000,
                                  created="2026-01-01T00:01:00Z"))
    h.step()
    assert h.node_of("high") == "n0" and h.node_of("low") == ""
    check_invariants(h)


def test_cordoned_node_gets_no_new_pods_but_keeps_its_running_ones(
        make: Callable[..., Harness]) -> None:
    h = make(nodes=2, cpu="4").start()
    h.api.create("pods", make_pod("a", cpu="1"))
    h.step()
    node = h.node_of("a")
    cordoned = dict(h.api.get("nodes", f"/{node}"))
    cordoned["spec"] = {"unschedulable": True}
    h.api.update("nodes", cordoned)
    h.step()
    for i in range(3):
        h.api.create("pods", make_pod(f"b{i}", cpu="1"))
    h.step()
    assert all(h.node_of(f"b{i}") not in ("", node) for i in range(3))
    check_invariants(h)


def test_identical_lone_pods_are_matched_together_and_released_alone(
        make: Callable[..., Harness]) -> None:
    h = make(nodes=2, cpu="4").start()
    for i in range(8):
        h.api.create("pods", make_pod(f"p{i}", cpu="1"))
    h.api.create("pods", make_pod("odd", cpu="2", created="2026-01-01T00:00:01Z"))
    h.step()
    assert h.core.metrics.match_latency.count == 2, "one match for the 8, one for the odd pod"
    assert sum(1 for i in range(8) if h.node_of(f"p{i}")) == 8
    assert h.node_of("odd") == "", "8 of 8 cores taken"
    on_n0 = [f"p{i}" for i in range(8) if h.node_of(f"p{i}") == "n0"]
    h.api.set_phase(f"default/{on_n0[0]}", "Succeeded")
    h.step()
    assert h.node_of("odd") == "", "one core back is not enough for two"
    h.api.set_phase(f"default/{on_n0[1]}", "Succeeded")
    h.step()
    assert h.node_of("odd") == "n0", "two single cores came back on n0"
    check_invariants(h)


def test_small_pods_of_others_are_summed_before_rounding(make: Callable[..., Harness]) -> None:
    """Ten 100m pods (a DaemonSet's worth) take one core of the graph, not ten."""
    h = make(nodes=1, cpu="4").start()
    for i in range(10):
        h.api.create("pods", make_pod(f"ds{i}", cpu="100m", memory="64Mi",
                                      scheduler="default-scheduler", node="n0",
                                      phase="Running"))
    h.api.create("pods", make_pod("ours", cpu="3", memory="1Gi"))
    h.step()
    assert h.node_of("ours") == "n0"
    assert h.core.metrics.errors.value(source="adopt") == 0
    check_invariants(h)
    h.api.create("pods", make_pod("more", cpu="1", memory="1Gi"))
    h.step()
    assert h.node_of("more") == "", "1 core (rounded) is in use by the small pods"
    for i in range(10):
        h.api.delete("pods", f"default/ds{i}")
    h.step()
    assert h.node_of("more") == "n0"
    check_invariants(h)


def test_node_heartbeats_do_not_wake_unschedulable_groups(make: Callable[..., Harness]) -> None:
    h = make(nodes=1, cpu="4").start()
    h.api.create("pods", make_pod("huge", cpu="8"))
    h.step()
    tries = h.core.metrics.match_latency.count
    beat = h.api.get("nodes", "/n0")
    beat["status"]["conditions"][0]["lastHeartbeatTime"] = "2026-01-01T00:00:10Z"
    h.api.update("nodes", beat)
    h.step(10)
    assert h.core.metrics.match_latency.count == tries, "a heartbeat changes nothing"
    grown = h.api.get("nodes", "/n0")
    grown["status"]["allocatable"]["cpu"] = "8"
    h.api.update("nodes", grown)
    h.step(10)
    assert h.node_of("huge") == "n0", "more capacity: tried again, and it fits"
    check_invariants(h)


class _SlowBinder:
    """A KubeBinder whose binds finish when the test says so (async binding)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.held: list[tuple[Any, Any]] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def submit(self, assignments: list) -> list:
        from concurrent.futures import Future

        futures = []
        for a in assignments:
            f: Future = Future()
            self.held.append((a, f))
            futures.append(f)
        return futures

    def finish(self, *names: str) -> None:
        """Finish the binds of the pods named (all when none is)."""
        for a, f in [(a, f) for a, f in self.held if not names or a[0].name in names]:
            f.set_result(self.inner._bind_here(a))  # the bind and its Scheduled Event
            self.held.remove((a, f))


def test_binds_run_while_the_loop_goes_on(make: Callable[..., Harness]) -> None:
    """Async binding: pods are assumed (ledger and graph) while their binds run; nothing else
    takes their room meanwhile, and the results are taken in when the binds finish."""
    h = make(nodes=1, cpu="4")
    slow = _SlowBinder(h.binder)
    h.core.binder = slow
    h.start()
    group_pods(h.api, "g", 3, cpu="1")
    h.step()
    assert not h.api.bindings and len(slow.held) == 3
    assert sorted(len(v) for v in h.core.held().values()) == [3], "assumed on their node"
    h.api.create("pods", make_pod("other", cpu="2"))
    h.step()
    assert h.node_of("other") == "", "the assumed gang's cores are not free"
    slow.finish()
    h.step()
    assert len(h.api.bindings) == 3 and len(h.events("Scheduled")) == 3
    check_invariants(h)


def _gang_on_a_slow_binder(make: Callable[..., Harness]) -> tuple[Harness, _SlowBinder]:
    """A PodGroup of 4 placed, its binds held by a :class:`_SlowBinder`."""
    h = make(nodes=1, cpu="8")
    slow = _SlowBinder(h.binder)
    h.core.binder = slow
    h.start()
    h.api.create("podgroups", make_podgroup("pg", 4))
    for i in range(4):
        h.api.create("pods", make_pod(f"m{i}", cpu="1", labels={"scheduling.x-k8s.io/pod-group":
                                                               "pg"}))
    h.step()
    return h, slow


def test_binds_are_taken_in_as_they_finish_not_as_they_started(
        make: Callable[..., Harness]) -> None:
    """The loop takes in the binds that finished (queued by the binder's threads), in the
    order they finished; those still running stay assumed, their pods neither Scheduled nor
    counted as bound in the PodGroup's status."""
    h, slow = _gang_on_a_slow_binder(make)
    assert len(slow.held) == 4 and len(h.core.inflight) == 4
    slow.finish("m2")
    slow.finish("m0")
    h.step()
    assert [e["regarding"]["name"] for e in h.events("Scheduled")] == ["m2", "m0"]
    assert sorted(h.core.inflight) == sorted(p.uid for (p, _), _ in slow.held)
    assert h.core.inflight_groups == {"default/pg": 2}
    assert h.api.podgroup_patches == [], "no status while the gang's binds run"
    slow.finish()
    h.step()
    assert not h.core.inflight and not h.core.inflight_groups
    assert len(h.events("Scheduled")) == 4
    assert [p[2]["status"]["scheduled"] for p in h.api.podgroup_patches] == [4], \
        "one status write, when the binds are done"
    check_invariants(h)


def test_a_gang_bound_counts_before_the_watch_shows_it(make: Callable[..., Harness]) -> None:
    """The binds of a gang finished, the watch has not yet brought the pods' ``nodeName``:
    the cycle that takes the binds in writes the PodGroup's status with every member
    scheduled (what the binds did), once, not a partial count the watch then corrects."""
    h, slow = _gang_on_a_slow_binder(make)
    # an update from before the bind (a label set by another client) while the binds run
    m0 = h.api.get("pods", "default/m0")
    h.api.update("pods", {**m0, "metadata": {**m0["metadata"],
                                             "labels": {**m0["metadata"]["labels"], "x": "y"}}})
    h.step()
    assert not h.core.pods[m0["metadata"]["uid"]].node_name, "the pod read as it is, unbound"
    slow.finish()
    h.runner.cycle()  # the loop woken by the finished binds, before any watch event
    assert [p[2]["status"] for p in h.api.podgroup_patches] == [
        {"phase": "Scheduled", "scheduled": 4, "running": 0, "succeeded": 0, "failed": 0}]
    h.step()
    assert len(h.api.podgroup_patches) == 1, "the watch's updates change nothing"
    check_invariants(h)
