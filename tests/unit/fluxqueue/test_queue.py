"""The queue hosted in the scheduler, against the API double and the Job controller's emulation."""

from __future__ import annotations

from fluxinfra.queue.api import ANNOT_ADMITTED_NODES, LABEL_FLUXJOB

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
                                       "values": ["n0", "n1"]}]}]
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
