"""Each group a cycle tries comes to one typed :class:`~fluxinfra.scheduler.cycle.Result`
(kube-scheduler's ``ScheduleResult`` or ``*Status``), reported per group in the cycle's
:class:`~fluxinfra.scheduler.cycle.CycleReport` and counted there."""

from __future__ import annotations

from fluxinfra.scheduler.cycle import Result
from fluxinfra.scheduler.fluxion import FluxionAllocator
from fluxinfra.scheduler.pods import LABEL_GROUP, LABEL_GROUP_SIZE

from .harness import Harness, check_invariants
from .kube_double import KubeApiDouble, make_node, make_pod


def _harness() -> Harness:
    api = KubeApiDouble()
    api.create("nodes", make_node("n0", cpu="4", memory="16Gi"))
    return Harness(api, FluxionAllocator(policy="first")).start()


def test_each_group_tried_gets_its_result() -> None:
    h = _harness()
    h.api.create("pods", make_pod("fits", cpu="2", created="2026-01-01T00:00:00Z"))
    gang = {LABEL_GROUP: "gang", LABEL_GROUP_SIZE: "3"}
    for i in range(2):  # 2 of the 3 pods the group needs
        h.api.create("pods", make_pod(f"gang-{i}", labels=gang, created="2026-01-01T00:00:01Z"))
    h.api.create("pods", make_pod("huge", cpu="8", created="2026-01-01T00:00:02Z"))
    report = h.runner.pump()
    assert report.results == {"default/pod:fits": Result.PLACED,
                              "default/gang": Result.WAITING,
                              "default/pod:huge": Result.UNSCHEDULABLE}
    assert (report.bound, report.waiting, report.unschedulable) == (1, 1, 1)

    # 2 cores left: the first 3-core pod gets the reservation (EASY), the second meets the
    # shape the cycle found busy
    h.api.create("pods", make_pod("first", cpu="3", created="2026-01-01T00:00:03Z"))
    h.api.create("pods", make_pod("second", cpu="3", created="2026-01-01T00:00:04Z"))
    report = h.runner.pump()
    assert report.results == {"default/pod:first": Result.RESERVED,
                              "default/pod:second": Result.BUSY}
    assert (report.reserved, report.busy, report.skipped) == (1, 1, 2)
    assert set(report.reservations) == {"default/pod:first"}
    check_invariants(h)


def test_lone_pods_matched_together_each_get_placed() -> None:
    h = _harness()
    for i in range(3):
        h.api.create("pods", make_pod(f"p{i}", cpu="1"))
    report = h.runner.pump()
    assert report.results == {f"default/pod:p{i}": Result.PLACED for i in range(3)}
    assert report.bound == 3 and report.tried == 1
    check_invariants(h)


def test_a_cycle_reads_only_the_groups_with_pods_to_place() -> None:
    """Bound and binding groups are not read again by each cycle: the queue's waiting groups
    are those a pod was queued in, dropped once placed, and a pod queued again brings its
    group back."""
    h = _harness()
    gang = {LABEL_GROUP: "gang", LABEL_GROUP_SIZE: "2"}
    for i in range(2):
        h.api.create("pods", make_pod(f"gang-{i}", labels=gang))
    h.api.create("pods", make_pod("lone", cpu="1"))
    queue = h.core.scheduling_queue
    h.runner.pump()
    assert h.node_of("gang-0") and h.node_of("lone")
    h.runner.pump()  # the cycle after the one that placed them drops them
    assert "default/gang" in queue.groups and not queue.waiting  # bound: not read again
    h.api.create("pods", make_pod("late", cpu="1"))
    h.runner.pump()
    h.runner.pump()
    assert h.node_of("late") and not queue.waiting
    h.api.create("pods", make_pod("huge", cpu="8"))
    report = h.runner.pump()
    assert report.results == {"default/pod:huge": Result.UNSCHEDULABLE}
    assert queue.waiting == {"default/pod:huge"}  # still waiting: read by the next cycle
    check_invariants(h)
