"""The queue hosted in the scheduler, against the API double and the Job controller's emulation."""

from __future__ import annotations

import time

from fluxinfra.kube.fluxjob import ANNOT_ADMITTED_NODES, LABEL_FLUXJOB

from .harness import QueueHarness, check_books, check_empty, job, nodes
from .queue_double import QueueApiDouble


def test_job_is_admitted_whole_and_bound_to_the_nodes_fluxion_chose():
    api = QueueApiDouble()
    nodes(api, 2)
    h = QueueHarness(api).start()
    api.create_job(job("train", pods=4, cpu="2"))
    h.step()
    fj = h.fluxjob("job-train")
    assert fj["status"]["state"] == "Admitted", fj["status"]
    chosen = fj["status"]["nodes"]
    assert sorted(chosen) == ["n0", "n0", "n1", "n1"]
    stored = api.get("jobs", "team-a/train")
    assert stored["spec"]["suspend"] is False
    assert stored["metadata"]["annotations"][ANNOT_ADMITTED_NODES] == ",".join(chosen)
    template = stored["spec"]["template"]
    assert template["metadata"]["labels"][LABEL_FLUXJOB] == "job-train"
    terms = template["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms == [{"matchFields": [{"key": "metadata.name", "operator": "In",
                                       "values": [n]}]} for n in ("n0", "n1")]
    pods = h.pods_of("train")
    assert sorted(p["spec"]["nodeName"] for p in pods) == sorted(chosen)
    check_books(h)
    h.run("train")
    h.step()
    assert h.state("job-train") == "Running"
    h.finish("train")
    h.step()
    assert h.state("job-train") == "Finished"
    check_empty(h)


def test_three_jobs_on_a_cluster_that_fits_two_the_third_is_reserved_then_admitted():
    api = QueueApiDouble()
    nodes(api, 2)
    h = QueueHarness(api).start()
    for i, name in enumerate(("a", "b", "c")):
        api.clock_text = f"2026-01-01T00:00:0{i}Z"  # FCFS by creation
        api.create_job(job(name, pods=2, cpu="2", duration="600s"))
    h.step()
    assert [h.state(f"job-{n}") for n in "abc"] == ["Admitted", "Admitted", "Reserved"]
    reserved = h.fluxjob("job-c")["status"]
    assert reserved["reason"] == "Reserved" and reserved["estimatedStart"]
    assert api.get("jobs", "team-a/c")["spec"]["suspend"] is True  # never a bind before time
    assert not h.pods_of("c")
    check_books(h)
    h.run("a")
    h.run("b")
    h.step(30)
    assert h.state("job-c") == "Reserved"
    h.finish("a")
    h.step(30)
    assert h.state("job-a") == "Finished"
    assert h.state("job-c") == "Admitted"
    assert "estimatedStart" not in h.fluxjob("job-c")["status"]
    check_books(h)
    h.finish("b")
    h.run("c")
    h.step()
    h.finish("c")
    h.step()
    check_empty(h)

    def reasons(name: str) -> list[str]:
        return [e["reason"] for e in api.events if e["regarding"]["name"] == name]
    # one Event per state a user can see: made and handed to Fluxion in one cycle is one
    # Queued Event (Created); waiting for resources after that is an Event of its own
    assert reasons("job-a") == ["Created", "Admitted", "Running", "JobComplete"]
    assert reasons("job-c")[:2] == ["Created", "Reserved"] and "Admitted" in reasons("job-c")


def test_backfill_never_delays_the_head():
    api = QueueApiDouble()
    nodes(api, 2)
    h = QueueHarness(api).start()
    api.clock_text = "2026-01-01T00:00:00Z"
    api.create_job(job("running", pods=1, cpu="4", duration="1000s"))   # holds n0 until ~1000
    h.step()
    h.run("running")
    api.clock_text = "2026-01-01T00:00:01Z"
    api.create_job(job("head", pods=2, cpu="4", duration="1000s"))      # needs both nodes
    api.clock_text = "2026-01-01T00:00:02Z"
    api.create_job(job("long", pods=1, cpu="2", duration="5000s"))      # would delay the head
    api.clock_text = "2026-01-01T00:00:03Z"
    api.create_job(job("short", pods=1, cpu="2", duration="100s"))      # ends before it
    h.step()
    assert h.state("job-head") == "Reserved"
    assert h.state("job-long") in ("Queued", "Reserved")
    assert h.state("job-short") == "Admitted", h.fluxjob("job-short")["status"]
    check_books(h)


def test_priority_goes_first():
    api = QueueApiDouble()
    nodes(api, 1)
    h = QueueHarness(api).start()
    api.clock_text = "2026-01-01T00:00:00Z"
    api.create_job(job("low", pods=1, cpu="4"))
    api.clock_text = "2026-01-01T00:00:01Z"
    api.create_job(job("high", pods=1, cpu="4", priority=100))
    h.step()
    assert h.state("job-high") == "Admitted" and h.state("job-low") == "Reserved"


def test_restart_mid_queue_rebuilds_from_the_cluster_nothing_lost_nothing_placed_twice():
    api = QueueApiDouble()
    nodes(api, 2)
    h = QueueHarness(api).start()
    for i, name in enumerate(("a", "b", "c")):
        api.clock_text = f"2026-01-01T00:00:0{i}Z"
        api.create_job(job(name, pods=2, cpu="2", duration="600s"))
    h.step()
    h.run("a")
    h.step()
    before = {n: h.fluxjob(f"job-{n}")["status"].get("nodes") for n in "abc"}
    # the controller dies; a new one starts from what the cluster holds
    h2 = QueueHarness(api).start()
    h2.step()
    assert [h2.state(f"job-{n}") for n in "abc"] == ["Running", "Admitted", "Reserved"]
    assert {n: h2.fluxjob(f"job-{n}")["status"].get("nodes") for n in "abc"} == before
    check_books(h2)
    assert len(h2.sched.held()["n0"]) + len(h2.sched.held()["n1"]) == 4  # a's and b's, once
    h2.finish("a")
    h2.step(10)
    assert h2.state("job-c") == "Admitted"
    check_books(h2)
    for name in "bc":
        h2.run(name)
        h2.step()
        h2.finish(name)
        h2.step()
    check_empty(h2)


def test_restart_between_admission_and_status_reads_the_job():
    api = QueueApiDouble()
    nodes(api, 2)
    h = QueueHarness(api).start()
    api.create_job(job("a", pods=2, cpu="2"))
    api.fail_next("patch_fluxjobs_status", 500, times=100)  # the status write never lands
    h.step()
    assert api.get("jobs", "team-a/a")["spec"]["suspend"] is False
    assert "status" not in h.fluxjob("job-a")
    api.failures.clear()
    h2 = QueueHarness(api).start()
    h2.step()
    assert h2.state("job-a") in ("Admitted", "Running")
    assert sorted(h2.fluxjob("job-a")["status"]["nodes"]) == sorted(
        api.get("jobs", "team-a/a")["metadata"]["annotations"][ANNOT_ADMITTED_NODES]
        .split(","))
    check_books(h2)


def test_a_pod_of_another_scheduler_takes_room():
    from scheduler.kube_double import make_pod

    api = QueueApiDouble()
    nodes(api, 2)
    api.create_pod(make_pod("web", "other", cpu="3", scheduler="default-scheduler", node="n0",
                            phase="Running"))
    h = QueueHarness(api).start()
    api.create_job(job("a", pods=2, cpu="2"))
    h.step()
    assert h.state("job-a") == "Admitted"
    assert h.fluxjob("job-a")["status"]["nodes"] == ["n1", "n1"]
    check_books(h)
    api.create_pod(make_pod("web2", "other", cpu="3", scheduler="default-scheduler", node="n1",
                            phase="Running"))  # bound behind our back: counted, no crash
    h.step()
    api.create_job(job("b", pods=1, cpu="2"))
    h.step()
    assert h.state("job-b") == "Reserved"


def test_unknown_queue_and_unsatisfiable_jobs_say_why():
    api = QueueApiDouble()
    nodes(api, 1)
    h = QueueHarness(api).start()
    api.create_job(job("lost", queue="nowhere"))
    api.create_job(job("huge", pods=1, cpu="64"))
    h.step()
    lost = h.fluxjob("job-lost")["status"]
    assert (lost["state"], lost["reason"]) == ("Queued", "QueueNotFound")
    assert "nowhere" in lost["message"]
    huge = h.fluxjob("job-huge")["status"]
    assert (huge["state"], huge["reason"]) == ("Failed", "Unsatisfiable")
    assert "can never fit" in huge["message"]
    reasons = {e["reason"] for e in api.events if e["regarding"]["kind"] == "FluxJob"}
    assert {"Created", "QueueNotFound", "Unsatisfiable"} <= reasons
    check_books(h)


def test_gated_pod_is_ungated_and_bound_where_fluxion_placed_it():
    from .harness import gated_pod

    api = QueueApiDouble()
    nodes(api, 1)
    h = QueueHarness(api).start()
    api.create_pod(gated_pod("solo", cpu="3"))
    api.create_pod(gated_pod("second", cpu="3"))
    h.step()
    assert h.state("pod-solo") == "Admitted"
    solo = api.get("pods", "team-a/solo")
    assert solo["spec"]["nodeName"] == "n0" and not solo["spec"].get("schedulingGates")
    # one Scheduled Event, from the queue's binder (the core leaves it to the binder)
    assert [(e["regarding"]["name"], e["note"]) for e in api.events
            if e["reason"] == "Scheduled"] == [("solo", "Successfully assigned team-a/solo to n0")]
    assert h.state("pod-second") == "Reserved"
    assert api.get("pods", "team-a/second")["spec"]["schedulingGates"]
    check_books(h)
    api.set_phase("team-a/solo", "Running")
    h.step()
    assert h.state("pod-solo") == "Running"
    api.set_phase("team-a/solo", "Succeeded")
    h.step()
    assert h.state("pod-solo") == "Finished"
    assert h.state("pod-second") == "Admitted"
    api.set_phase("team-a/second", "Failed")
    h.step()
    assert h.state("pod-second") == "Failed"
    check_empty(h)


def test_gated_group_is_admitted_all_or_nothing():
    from .harness import gated_pod

    api = QueueApiDouble()
    nodes(api, 2)
    h = QueueHarness(api).start()
    group = {"fluxinfra.io/group": "ring", "fluxinfra.io/group-size": "3"}
    for i in range(2):
        api.create_pod(gated_pod(f"ring-{i}", cpu="3", labels=group))
    h.step()
    assert h.state("group-ring") != "Admitted"  # two of three: nothing binds
    assert all(not p["spec"].get("nodeName") for p in api.objects["pods"].values())
    api.create_pod(gated_pod("ring-2", cpu="3", labels=group))
    h.step()
    status = h.fluxjob("group-ring")["status"]  # 3 x 3 cores can never fit 2 x 4 cores
    assert (status["state"], status["reason"]) == ("Failed", "Unsatisfiable")
    assert all(not p["spec"].get("nodeName") for p in api.objects["pods"].values())
    from scheduler.kube_double import make_node

    api.create("nodes", make_node("n2", cpu="4", memory="64Gi"))  # the cluster grows
    h.step()
    assert h.state("group-ring") == "Admitted"
    assert sorted(api.get("pods", f"team-a/ring-{i}")["spec"]["nodeName"]
                  for i in range(3)) == ["n0", "n1", "n2"]
    check_books(h)


def test_queue_limits_hold_admission_back():
    api = QueueApiDouble()
    nodes(api, 4)
    api.create("fluxjobqueues", {"apiVersion": "queue.fluxinfra.io/v1alpha1",
                                 "kind": "FluxJobQueue",
                                 "metadata": {"name": "default", "namespace": "team-a"},
                                 "spec": {"maxRunning": 2, "maxCores": "6"}})
    h = QueueHarness(api).start()
    for i, name in enumerate(("a", "b", "c")):
        api.clock_text = f"2026-01-01T00:00:0{i}Z"
        api.create_job(job(name, pods=1, cpu="2"))
    api.clock_text = "2026-01-01T00:00:05Z"
    api.create_job(job("other", pods=4, cpu="1", namespace="team-b"))  # another queue
    h.step()
    assert [h.state(f"job-{n}") for n in "abc"] == ["Admitted", "Admitted", "Queued"]
    status = h.fluxjob("job-c")["status"]
    assert status["reason"] == "QuotaExceeded" and "maxRunning 2" in status["message"]
    assert h.state("job-other", "team-b") == "Admitted"
    h.finish("a")
    h.step()
    assert h.state("job-c") == "Admitted"
    api.create_job(job("big", pods=2, cpu="2"))
    h.step()
    assert h.fluxjob("job-big")["status"]["reason"] == "QuotaExceeded"


def test_cleanup_releases_everything_whatever_ends_the_work():
    api = QueueApiDouble()
    nodes(api, 2)
    h = QueueHarness(api).start()
    api.create_job(job("done", pods=2, cpu="1"))
    api.create_job(job("deleted", pods=2, cpu="1"))
    api.create_job(job("byhand", pods=2, cpu="1"))
    api.create_job(job("waiting", pods=2, cpu="4"))   # Reserved: nothing to release yet
    h.step()
    for name in ("done", "deleted", "byhand"):
        h.run(name)
    h.step()
    check_books(h)
    # a finished pod releases its share at once; the Job completing, the rest
    first = h.pods_of("done")[0]
    api.set_phase(f"team-a/{first['metadata']['name']}", "Succeeded")
    h.step()
    check_books(h)
    h.finish("done")
    h.step()
    # a deleted Job (its pods go with it) releases everything
    for pod in h.pods_of("deleted"):
        api.delete("pods", f"team-a/{pod['metadata']['name']}")
    api.delete("jobs", "team-a/deleted")
    h.step()
    check_books(h)
    # a FluxJob deleted by hand releases its slots; its running pods stay counted as pods
    api.delete_fluxjob("team-a", "job-byhand")
    h.step()
    check_books(h)
    running = [p for p in h.pods_of("byhand") if p["status"]["phase"] == "Running"]
    held = {uid for shares in h.sched.held().values() for uid, _ in shares}
    assert {p["metadata"]["uid"] for p in running} <= held
    h.finish("byhand")
    h.step()
    assert h.state("job-waiting") == "Admitted"
    h.run("waiting")
    h.step()
    h.finish("waiting")
    h.step()
    check_empty(h)


def test_job_slots_are_kept_for_replacement_pods_and_released_when_not_needed():
    api = QueueApiDouble()
    nodes(api, 1)
    h = QueueHarness(api).start()
    api.create_job(job("waves", pods=2, cpu="1", completions=4))   # 2 at a time, 4 in all
    h.step()
    h.run("waves")
    h.step()
    first = h.pods_of("waves")[0]["metadata"]["name"]
    api.set_phase(f"team-a/{first}", "Succeeded")
    h.step()  # the Job controller starts a third pod in the freed slot
    pods = h.pods_of("waves")
    assert len(pods) == 3 and all(p["spec"].get("nodeName") == "n0" for p in pods)
    check_books(h)
    h.run("waves")
    for _ in range(3):
        h.finish("waves")
        h.step()
    assert h.state("job-waves") == "Finished"
    check_empty(h)


def test_a_job_deleted_while_its_unsuspend_is_out_stays_failed_and_holds_nothing():
    """The loop does not wait for its writes: the Job's deletion can arrive before the answer
    to its un-suspend. The late answer must not turn the FluxJob back into Admitted."""
    api = QueueApiDouble()
    nodes(api, 2)
    h = QueueHarness(api).start()
    api.create_job(job("gone", pods=2, cpu="2"))
    h.pump()                       # the FluxJob is made
    h.runner.pump()                # placed; the un-suspend goes out, its answer not taken yet
    deadline = time.monotonic() + 10
    while not api.job_patches and time.monotonic() < deadline:
        time.sleep(0.01)
    assert api.job_patches, "the un-suspend never reached the API"
    time.sleep(0.05)               # its answer is back in the queue's inbox by now
    api.delete("jobs", "team-a/gone")
    h.pump()                       # the deletion first, then the late answer
    h.pump()
    status = h.fluxjob("job-gone")["status"]
    assert (status["state"], status["reason"]) == ("Failed", "JobDeleted"), status
    check_books(h)
    check_empty(h)


def test_pods_still_ending_after_their_job_went_count_as_themselves_quietly(caplog):
    """A Job deleted (say with its namespace) while its pods still run: its slots are
    released at once, and the pods, until they are gone, are pods on their nodes; they were
    never bound "outside their slots", so the queue does not warn that they were."""
    api = QueueApiDouble()
    nodes(api, 2)
    h = QueueHarness(api).start()
    api.create_job(job("gone", pods=2, cpu="2"))
    h.step()
    h.run("gone")
    h.step()
    pods = h.pods_of("gone")
    api.delete("jobs", "team-a/gone")
    h.pump()
    assert h.state("job-gone") == "Failed"
    with caplog.at_level("WARNING", logger="fluxinfra.queue.controller"):
        for pod in pods:  # the API server sets their deletionTimestamp: an update each
            pod = api.get("pods", f"team-a/{pod['metadata']['name']}")
            pod["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
            api.update("pods", pod)
        h.pump()
    assert not [r for r in caplog.records if "outside its slots" in r.getMessage()]
    held = {uid for shares in h.sched.held().values() for uid, _ in shares}
    assert {p["metadata"]["uid"] for p in pods} <= held   # counted, as themselves
    check_books(h)
    for pod in pods:
        api.delete("pods", f"team-a/{pod['metadata']['name']}")
    h.pump()
    check_empty(h)


def test_the_answer_to_a_write_wakes_the_loop_once_until_it_collects():
    """The loop sleeps until an event or a wake: a write's answer that no watch event
    announces (the last un-suspend of a burst) must wake it, and a burst of answers wakes it
    once, not once per answer."""
    import threading

    api = QueueApiDouble()
    nodes(api, 2)
    h = QueueHarness(api, workers=4).start()  # writes on the pool, as in the daemon
    woken = threading.Event()
    wakes: list[float] = []

    def wake() -> None:
        wakes.append(time.monotonic())
        woken.set()
    h.queue.set_waker(wake)
    for name in ("a", "b", "c"):
        api.create_job(job(name, pods=1, cpu="1"))
    h.runner.pump()                # three FluxJob creates go out; nothing collected yet
    assert woken.wait(10), "no wake after the writes were answered"
    deadline = time.monotonic() + 10
    while h.queue._done.qsize() < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(wakes) == 1, wakes  # three answers, one wake
    assert h.queue.collect(wait=10.0) == 0
    h.step()
    assert {h.state(f"job-{n}") for n in ("a", "b", "c")} == {"Admitted"}
    assert len(wakes) >= 2         # after a collect, answers wake the loop again
