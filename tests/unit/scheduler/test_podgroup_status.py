"""The PodGroup status lifecycle the scheduler keeps from its pods' phases (scheduler-plugins'
``Pending -> Scheduling -> Scheduled -> Running -> Finished | Failed``, with the counts)."""

from __future__ import annotations

import time
from typing import Any

import pytest

from fluxinfra.scheduler.config import SchedulerConfig
from fluxinfra.scheduler.fluxion import FluxionAllocator
from fluxinfra.scheduler.podgroup_status import podgroup_status, status_differs
from fluxinfra.scheduler.pods import LABEL_PODGROUP

from .harness import Harness, check_invariants
from .kube_double import KubeApiDouble, make_node, make_pod, make_podgroup


@pytest.mark.parametrize(("pods", "previous", "phase"), [
    ([], "", "Pending"),
    ([("Pending", False)], "", "Pending"),
    ([("Pending", False)] * 2, "Pending", "Scheduling"),
    ([("Pending", True), ("Pending", False)], "Scheduling", "Scheduling"),
    ([("Pending", True)] * 2, "Scheduling", "Scheduled"),
    ([("Running", True), ("Pending", True)], "Scheduled", "Scheduled"),
    ([("Running", True)] * 2, "Scheduled", "Running"),
    ([("Running", True), ("Succeeded", True)], "Running", "Running"),
    ([("Succeeded", True)] * 2, "Running", "Finished"),
    ([("Succeeded", True)] * 2, "Scheduled", "Finished"),   # never seen Running
    ([("Failed", True), ("Running", True)], "Running", "Failed"),
    ([("Failed", True), ("Pending", False)], "Scheduled", "Scheduling"),
    ([("Running", True)], "Running", "Pending"),              # a member was deleted
])
def test_the_phase_follows_the_pods(pods: list[tuple[str, bool]], previous: str,
                                    phase: str) -> None:
    status = podgroup_status(2, pods, previous)
    assert status is not None and status["phase"] == phase
    assert status["scheduled"] == sum(bound for _, bound in pods)
    for name, counted in (("running", "Running"), ("succeeded", "Succeeded"),
                          ("failed", "Failed")):
        assert status[name] == sum(p == counted for p, _ in pods)


@pytest.mark.parametrize("final", ["Finished", "Failed"])
def test_a_final_phase_is_kept(final: str) -> None:
    assert podgroup_status(2, [("Running", True)], final) is None


def test_absent_counts_are_zero() -> None:
    status = {"phase": "Pending", "scheduled": 0, "running": 0, "succeeded": 0, "failed": 0}
    assert not status_differs(status, {"phase": "Pending"})
    assert status_differs(status, {"phase": "Pending", "scheduled": 1})
    assert status_differs(status, None)


def gang(api: KubeApiDouble, name: str, size: int, *, min_member: int | None = None,
         count: int | None = None) -> None:
    api.create("podgroups", make_podgroup(name, min_member or size))
    for i in range(size if count is None else count):
        api.create("pods", make_pod(f"{name}-{i}", labels={LABEL_PODGROUP: name}))


def harness(nodes: int = 2, config: SchedulerConfig | None = None) -> Harness:
    api = KubeApiDouble()
    for i in range(nodes):
        api.create("nodes", make_node(f"n{i}", cpu="4", memory="16Gi"))
    return Harness(api, FluxionAllocator(policy="lonode"), config).start()


def phases(h: Harness, name: str) -> list[str]:
    """The phases written to PodGroup ``name``, in order."""
    return [p["status"]["phase"] for _, n, p in h.api.podgroup_patches if n == name]


def status(h: Harness, name: str) -> dict[str, Any]:
    return h.api.get("podgroups", f"default/{name}")["status"]


def test_a_gang_goes_from_pending_to_finished() -> None:
    h = harness()
    gang(h.api, "train", 2, count=1)
    h.step()
    assert status(h, "train")["phase"] == "Pending"
    h.api.create("pods", make_pod("train-1", labels={LABEL_PODGROUP: "train"}))
    h.step()
    assert status(h, "train") == {"phase": "Scheduled", "scheduled": 2, "running": 0,
                                  "succeeded": 0, "failed": 0}
    h.api.set_phase("default/train-0", "Running")
    h.step()
    assert status(h, "train")["running"] == 0, "a count change waits out the interval"
    assert h.core.next_due(0) == 1.0, "the loop wakes for it"
    h.step(1)
    assert status(h, "train")["phase"] == "Scheduled" and status(h, "train")["running"] == 1
    h.api.set_phase("default/train-1", "Running")
    h.step()
    assert status(h, "train")["phase"] == "Running" and status(h, "train")["running"] == 2, \
        "a new phase is written at once"
    h.api.set_phase("default/train-0", "Succeeded")
    h.step(1)
    assert status(h, "train")["phase"] == "Running" and status(h, "train")["succeeded"] == 1
    h.api.set_phase("default/train-1", "Succeeded")
    h.step()
    assert status(h, "train") == {"phase": "Finished", "scheduled": 2, "running": 0,
                                  "succeeded": 2, "failed": 0}
    assert phases(h, "train") == ["Pending", "Scheduled", "Scheduled", "Running", "Running",
                                  "Finished"]
    written = len(h.api.podgroup_patches)
    h.api.delete("pods", "default/train-0")  # the Job's pods are cleaned up: still Finished
    h.step(60)
    assert len(h.api.podgroup_patches) == written and status(h, "train")["phase"] == "Finished"
    check_invariants(h)


def test_a_failed_member_fails_the_group() -> None:
    h = harness()
    gang(h.api, "mpi", 2)
    h.step()
    h.api.set_phase("default/mpi-0", "Running")
    h.api.set_phase("default/mpi-1", "Running")
    h.step()
    h.api.set_phase("default/mpi-1", "Failed")
    h.step()
    assert status(h, "mpi") == {"phase": "Failed", "scheduled": 2, "running": 1,
                                "succeeded": 0, "failed": 1}
    h.api.set_phase("default/mpi-0", "Succeeded")
    h.step()
    assert status(h, "mpi")["phase"] == "Failed" and status(h, "mpi")["succeeded"] == 0
    check_invariants(h)


def test_a_group_that_does_not_fit_is_scheduling() -> None:
    h = harness(nodes=1)
    gang(h.api, "wide", 5)  # 5 cores on a 4-core node
    h.step()
    assert status(h, "wide") == {"phase": "Scheduling", "scheduled": 0, "running": 0,
                                 "succeeded": 0, "failed": 0}
    assert phases(h, "wide") == ["Scheduling"]
    h.step(30)
    assert phases(h, "wide") == ["Scheduling"], "written once, not once per cycle"
    check_invariants(h)


def test_our_status_writes_do_not_wake_waiting_groups() -> None:
    h = harness(nodes=1)
    gang(h.api, "wide", 5)
    gang(h.api, "small", 1)
    h.step()
    generation = h.core.generation
    h.api.set_phase("default/small-0", "Running")  # a status write on "small"
    h.step()
    assert phases(h, "small")[-1] == "Running"
    assert h.core.generation == generation
    check_invariants(h)


def test_a_restart_writes_nothing_already_written() -> None:
    h = harness()
    gang(h.api, "train", 2)
    h.step()
    for i in range(2):
        h.api.set_phase(f"default/train-{i}", "Succeeded")
    h.step()
    written = len(h.api.podgroup_patches)
    again = Harness(h.api, FluxionAllocator(policy="lonode")).start()
    again.step()
    assert len(h.api.podgroup_patches) == written
    assert status(again, "train")["phase"] == "Finished"


def test_a_podgroup_created_after_its_pods_gets_its_status() -> None:
    h = harness()
    for i in range(2):
        h.api.create("pods", make_pod(f"late-{i}", labels={LABEL_PODGROUP: "late"}))
    h.step()
    h.api.create("podgroups", make_podgroup("late", 2))
    h.step()
    assert status(h, "late")["phase"] == "Scheduled"
    check_invariants(h)


def test_members_turning_running_one_by_one_take_one_write_per_interval() -> None:
    """Eight members turn Running a tenth of a second apart: the counts are written at most
    once a second, the new phase at once, and the last count is never lost."""
    h = harness(nodes=2)
    gang(h.api, "wide", 8)
    h.step()
    assert phases(h, "wide") == ["Scheduled"]
    for i in range(7):
        h.api.set_phase(f"default/wide-{i}", "Running")
        h.step(0.1)
    assert [p["status"]["running"] for _, n, p in h.api.podgroup_patches if n == "wide"] == \
        [0], "0.7 s after the first write: the counts wait"
    h.step(0.3)
    assert status(h, "wide")["running"] == 7, "the interval is over: the latest count"
    h.api.set_phase("default/wide-7", "Running")
    h.step()
    assert status(h, "wide")["phase"] == "Running", "a new phase is not held back"
    assert phases(h, "wide") == ["Scheduled", "Scheduled", "Running"]
    check_invariants(h)


def test_a_deleted_podgroup_leaves_nothing_behind() -> None:
    h = harness()
    gang(h.api, "train", 2)
    h.step()
    assert "default/train" in h.core.gangs.written_at
    h.api.delete("podgroups", "default/train")
    h.step()
    assert "default/train" not in h.core.gangs.written_at
    assert "default/train" not in h.core.gangs.status


def test_shutdown_writes_the_counts_the_interval_held_back() -> None:
    h = harness()
    gang(h.api, "train", 2)
    h.step()
    h.api.set_phase("default/train-0", "Running")
    h.step()
    assert status(h, "train")["running"] == 0
    assert h.core.settle(time.monotonic() + 5) == 0
    assert status(h, "train")["running"] == 1, "no count lost at shutdown"


def test_an_interval_of_zero_writes_every_change() -> None:
    h = harness(config=SchedulerConfig(podgroup_status_interval=0.0))
    gang(h.api, "train", 2)
    h.step()
    h.api.set_phase("default/train-0", "Running")
    h.step()
    assert status(h, "train")["running"] == 1


@pytest.mark.parametrize("value", ["-1", "61", "nan"])
def test_a_bad_status_interval_is_refused_naming_the_flag(value: str) -> None:
    from fluxinfra.errors import ConfigError
    from fluxinfra.scheduler.main import main

    with pytest.raises(ConfigError, match=f"--podgroup-status-interval {float(value)}: use "
                                          "seconds from 0"):
        main(["--podgroup-status-interval", value])
