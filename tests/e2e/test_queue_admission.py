"""The queue end to end against a real API server and controller-manager.

The API server calls the webhook (``fluxinfra queue webhook``, real TLS on loopback, its CA in
the webhook configuration); the scheduler runs with the queue hosted in it (``fluxinfra
scheduler --queue``, a process of its own); the real Job controller makes the pods of an
un-suspended Job; the bed's keeper plays the kubelet of its hollow nodes (a pod bound to one
runs at once, and succeeds when ``fluxinfra.io/hollow-run-seconds`` says so). So a FluxJob
often goes through ``Admitted`` faster than a poll can see it: the tests wait for a state or
what follows it (``Queue.wait_state``). Requests are sized (40 cores a pod on 64-core hollow
nodes) so that only the hollow nodes a test makes can hold them.
"""

from __future__ import annotations

import time
from collections import Counter

import pytest
from e2e_cluster import Cluster, wait_for
from queue_env import SCHEDULER, Queue, job_yaml, running_queue


@pytest.fixture(scope="module")
def queue(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory):
    with running_queue(cluster, tmp_path_factory.mktemp("queue")) as q:
        yield q


@pytest.fixture
def queued_namespace(cluster: Cluster, namespace: str) -> str:
    cluster.kubectl("label", "namespace", namespace, "fluxinfra.io/queue=enabled")
    return namespace


def test_a_job_is_suspended_admitted_whole_and_bound_to_the_nodes_fluxion_chose(
        cluster: Cluster, queue: Queue, queued_namespace: str, hollow_nodes) -> None:
    ns = queued_namespace
    nodes = hollow_nodes(2, cpu="64", memory="256Gi")
    cluster.apply(job_yaml("whole", ns, pods=2, cpu="40"))
    queue.wait_state(ns, "job-whole", "Admitted")
    fluxjob = queue.fluxjob(ns, "job-whole")
    chosen = fluxjob["status"]["nodes"]
    assert sorted(chosen) == sorted(nodes), fluxjob["status"]
    job = cluster.get("job", "whole", "-n", ns)
    assert job["spec"]["suspend"] is False
    assert job["spec"]["template"]["spec"]["schedulerName"] == SCHEDULER  # set by the webhook
    terms = job["spec"]["template"]["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert sorted(t["matchFields"][0]["values"][0] for t in terms) == sorted(set(chosen))
    pods = wait_for(lambda: (lambda ps: ps if all(p["spec"].get("nodeName") for p in ps)
                             and len(ps) == 2 else None)(queue.pods(ns, "whole")), 60,
                    "the Job controller's two pods, bound")
    assert Counter(p["spec"]["nodeName"] for p in pods) == Counter(chosen)
    # the queue's un-suspend is the admitter's own update: by the webhooks' match condition
    # the API server did not call the webhook for it (nor for any other update of the Job)
    assert 'kind="Job",operation="UPDATE"' not in queue.webhook_metrics()
    queue.wait_state(ns, "job-whole", "Running")  # the hollow kubelet runs them at once
    assert queue.state(ns, "job-whole") == "Running"  # until they end
    queue.end_pods(ns, pods)
    queue.wait_state(ns, "job-whole", "Finished")
    assert queue.status(ns, "job-whole")["reason"] == "JobComplete"
    events = cluster.get("events", "-n", ns, "--field-selector",
                         "involvedObject.kind=FluxJob")["items"]
    assert {"Created", "Admitted"} <= {e["reason"] for e in events}, events


def test_three_jobs_on_a_cluster_that_fits_two(cluster: Cluster, queue: Queue,
                                               queued_namespace: str, hollow_nodes) -> None:
    ns = queued_namespace
    hollow_nodes(2, cpu="64", memory="256Gi")
    for name in ("first", "second", "third"):
        cluster.apply(job_yaml(name, ns, pods=1, cpu="40"))
        time.sleep(1.1)  # distinct creation seconds: FCFS is visible to the reader too
    queue.wait_state(ns, "job-first", "Admitted")
    queue.wait_state(ns, "job-second", "Admitted")
    queue.wait_state(ns, "job-third", "Reserved")
    third = queue.fluxjob(ns, "job-third")
    assert third["status"].get("estimatedStart"), third["status"]
    assert cluster.get("job", "third", "-n", ns)["spec"]["suspend"] is True
    assert queue.pods(ns, "third") == []
    # anyone else starting it is sent to the webhook and refused (a cluster admin too)
    refused = cluster.kubectl("patch", "job", "third", "-n", ns, "--type=merge", "-p",
                              '{"spec": {"suspend": false}}', "--as=someone-else",
                              "--as-group=system:masters", check=False)
    assert refused.returncode != 0 and "is queued" in refused.stderr, refused.stderr
    # a controller restart mid-queue: rebuilt from the cluster, nothing placed twice
    queue.stop_scheduler()
    queue.start_scheduler()
    time.sleep(3)
    assert queue.state(ns, "job-third") == "Reserved"
    first = wait_for(lambda: [p for p in queue.pods(ns, "first") if p["spec"].get("nodeName")],
                     60, "first's pod bound")
    queue.end_pods(ns, first)
    queue.wait_state(ns, "job-first", "Finished")
    queue.wait_state(ns, "job-third", "Admitted")
    third_pod = wait_for(lambda: [p for p in queue.pods(ns, "third")
                                  if p["spec"].get("nodeName")], 60, "third's pod bound")
    second_pod = [p for p in queue.pods(ns, "second") if p["spec"].get("nodeName")]
    assert third_pod[0]["spec"]["nodeName"] == first[0]["spec"]["nodeName"]
    assert second_pod[0]["spec"]["nodeName"] != third_pod[0]["spec"]["nodeName"]


def test_a_pod_of_another_scheduler_takes_room(cluster: Cluster, queue: Queue,
                                               queued_namespace: str, hollow_nodes,
                                               namespace: str) -> None:
    ns = queued_namespace
    a, b = hollow_nodes(2, cpu="64", memory="256Gi")
    cluster.kubectl("create", "namespace", f"{ns}-other")
    try:
        cluster.apply(f"""
apiVersion: v1
kind: Pod
metadata: {{name: squatter, namespace: {ns}-other}}
spec:
  nodeName: {a}
  containers:
  - {{name: main, image: busybox, resources: {{requests: {{cpu: "40"}}}}}}
""")
        time.sleep(2)
        cluster.apply(job_yaml("fits-once", ns, pods=1, cpu="40"))
        queue.wait_state(ns, "job-fits-once", "Admitted")
        assert queue.fluxjob(ns, "job-fits-once")["status"]["nodes"] == [b]
        cluster.apply(job_yaml("no-room", ns, pods=1, cpu="40"))
        queue.wait_state(ns, "job-no-room", "Reserved")
    finally:
        cluster.kubectl("delete", "namespace", f"{ns}-other", "--wait=false", check=False)


def test_malformed_objects_are_refused_or_failed_with_a_reason(
        cluster: Cluster, queue: Queue, queued_namespace: str, hollow_nodes) -> None:
    ns = queued_namespace
    hollow_nodes(1, cpu="64", memory="256Gi")
    bad = cluster.kubectl("apply", "-f", "-", check=False,
                          input_text=job_yaml("bad-duration", ns, pods=1, duration="soon"))
    assert bad.returncode != 0
    assert "fluxinfra.io/duration" in bad.stderr and "denied the request" in bad.stderr, \
        bad.stderr
    cluster.apply(job_yaml("huge", ns, pods=1, cpu="1000"))
    queue.wait_state(ns, "job-huge", "Failed")
    assert queue.fluxjob(ns, "job-huge")["status"]["reason"] == "Unsatisfiable"
    lost = job_yaml("lost", ns, pods=1).replace(
        "metadata: {name: lost,", "metadata: {labels: {fluxinfra.io/queue-name: nowhere}, "
        "name: lost,")
    cluster.apply(lost)
    wait_for(lambda: (queue.fluxjob(ns, "job-lost").get("status") or {}).get("reason")
             == "QueueNotFound", 60, "QueueNotFound")


def test_a_gated_pod_is_ungated_and_bound(cluster: Cluster, queue: Queue,
                                          queued_namespace: str, hollow_nodes) -> None:
    ns = queued_namespace
    (node,) = hollow_nodes(1, cpu="64", memory="256Gi")
    cluster.apply(f"""
apiVersion: v1
kind: Pod
metadata: {{name: solo, namespace: {ns}}}
spec:
  containers:
  - {{name: main, image: busybox, resources: {{requests: {{cpu: "40"}}}}}}
""")
    pod = cluster.get("pod", "solo", "-n", ns)
    assert pod["spec"]["schedulerName"] == SCHEDULER
    queue.wait_state(ns, "pod-solo", "Admitted")
    pod = cluster.get("pod", "solo", "-n", ns)
    assert pod["spec"]["nodeName"] == node and not pod["spec"].get("schedulingGates")
    assert queue.status(ns, "pod-solo")["nodes"] == [node]
    queue.wait_state(ns, "pod-solo", "Running")
