"""Faults on the real bed: the control plane restarted mid-burst, the scheduler killed mid-gang
and mid-preemption, a scheduler stopped right after a burst, a node deleted under running gangs,
the queue's webhook down while Jobs arrive. The real ``fluxinfra scheduler`` runs as a process
under the RBAC the stack renders (``scheduler_run``); its pods ask for ``nvidia.com/gpu``,
which only the test's hollow nodes offer, so capacity is exactly known whatever else the
cluster runs.

After each fault the invariants of ``fault_checks`` hold (no pod bound twice, no gang half
bound, no node above allocatable, no queued Job lost or admitted twice) and the cluster is back
to its steady state within the time the test states; each test prints the recovery time it
measured (``pytest -s`` shows it).

(The leader of two replicas killed, and the Fluxion service restarted under its scheduler, are
in ``test_scheduler_robustness.py``, checked against the same invariants.)
"""

from __future__ import annotations

import signal
import subprocess
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml
from e2e_cluster import Cluster, wait_for
from fault_checks import hold, steady
from scheduler_run import Process, Scheduler, pod_manifest, scheduler_kubeconfig

from fluxinfra.k8s.scheduler import podgroup_crd
from fluxinfra.scheduler.pods import LABEL_GROUP, LABEL_GROUP_SIZE

#: what each recovery must stay within (seconds); the measured figures are in docs/scheduler.md
RECOVERY = 120


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def gang(name: str, namespace: str, scheduler: str, size: int, *, gpus: int = 1,
         priority: str = "", podgroup: bool = False) -> list[dict[str, Any]]:
    """A gang of ``size`` pods, each asking ``gpus`` GPUs: label-grouped, or (``podgroup``)
    members of PodGroup ``name``."""
    pods = []
    for i in range(size):
        pod = pod_manifest(f"{name}-{i}", namespace, scheduler, gpus=gpus)
        labels = pod["metadata"]["labels"]
        if podgroup:
            labels["scheduling.x-k8s.io/pod-group"] = name
        else:
            labels.update({LABEL_GROUP: name, LABEL_GROUP_SIZE: str(size)})
        if priority:
            pod["spec"]["priorityClassName"] = priority
        pods.append(pod)
    return pods


def apply_retrying(cluster: Cluster, objects: list[dict[str, Any]], timeout: float = 120
                   ) -> int:
    """Create ``objects`` as a client would while the API server may be away: retried until
    accepted; returns how many attempts were refused."""
    refused = 0
    deadline = time.monotonic() + timeout
    while True:
        try:
            proc = cluster.kubectl("apply", "-f", "-", input_text=yaml.safe_dump_all(objects),
                                   check=False, timeout=30)
            if proc.returncode == 0:
                return refused
            why = proc.stderr[-500:]
        except subprocess.TimeoutExpired:  # a server starting up accepts and does not answer
            why = "no answer in 30 s"
        refused += 1
        if time.monotonic() > deadline:
            raise AssertionError(f"not accepted in {timeout:.0f}s: {why}")
        time.sleep(0.5)


class Arrivals(threading.Thread):
    """``work()`` in a thread (objects arriving while a fault happens); :meth:`finish` joins
    it and raises what it raised."""

    def __init__(self, work) -> None:
        super().__init__(daemon=True)
        self.work, self.error, self.refused = work, None, 0

    def run(self) -> None:
        try:
            self.refused = self.work()
        except BaseException as exc:  # noqa: BLE001 - handed to the test by finish()
            self.error = exc

    def finish(self, timeout: float = 300) -> int:
        self.join(timeout)
        assert not self.is_alive(), f"the arrivals did not end in {timeout:.0f}s"
        if self.error is not None:
            raise self.error
        return self.refused


def live_bound(cluster: Cluster, namespace: str) -> dict[str, str]:
    """pod -> node of the namespace's bound pods not being deleted."""
    return {p["metadata"]["name"]: p["spec"]["nodeName"]
            for p in cluster.get("pods", "-n", namespace)["items"]
            if p["spec"].get("nodeName") and not p["metadata"].get("deletionTimestamp")}


def start_scheduler(cluster: Cluster, namespace: str, tmp_path: Path,
                    processes: list[Process], name: str, *extra: str, log: str = "scheduler"
                    ) -> Scheduler:
    kubeconfig = tmp_path / f"{name}.kubeconfig"
    if not kubeconfig.exists():
        scheduler_kubeconfig(cluster, namespace, name, name, kubeconfig)
    proc = Scheduler(kubeconfig, name, tmp_path / f"{log}.log", "--no-leader-elect", *extra)
    processes.append(proc)
    proc.wait_healthy(120)
    return proc


@pytest.mark.parametrize("component", ["kube-apiserver", "etcd"])
def test_a_control_plane_restart_mid_burst_loses_nothing(
        cluster: Cluster, namespace: str, hollow_nodes, tmp_path: Path,
        processes: list[Process], component: str) -> None:
    """12 GPUs on three hollow nodes; 8 gangs of 3 arrive while ``component`` is killed
    (SIGKILL) and started again. Exactly 4 gangs fit: they are bound whole, the rest wait, and
    once two bound gangs end the scheduler binds two more (it works after the fault)."""
    if cluster.bed is None:
        pytest.skip("restarting the control plane needs a bed this session started")
    nodes = hollow_nodes(3, cpu="16", memory="64Gi", extended={"nvidia.com/gpu": "4"})
    name = unique("cp")
    start_scheduler(cluster, namespace, tmp_path, processes, name)
    gangs = [gang(f"g{i}", namespace, name, 3) for i in range(8)]
    burst = Arrivals(lambda: sum(apply_retrying(cluster, g) for g in gangs))
    burst.start()
    wait_for(lambda: live_bound(cluster, namespace), 60, "the first binds")
    took = cluster.bed.restart(component)
    refused = burst.finish()
    recovered = steady(lambda: len(live_bound(cluster, namespace)) == 12, RECOVERY,
                       "12 GPUs in use")
    time.sleep(5)  # give a mistaken extra bind time to show
    assert len(live_bound(cluster, namespace)) == 12
    hold(cluster, namespace, nodes)
    # two whole gangs end; two waiting ones take their place
    ended = sorted({p.rsplit("-", 1)[0] for p in live_bound(cluster, namespace)})[:2]
    cluster.kubectl("delete", "pods", "-n", namespace, "--wait=false",
                    *[f"{g}-{i}" for g in ended for i in range(3)])
    after = steady(lambda: len(live_bound(cluster, namespace)) == 12 and not any(
        p.startswith(tuple(f"{g}-" for g in ended)) for p in live_bound(cluster, namespace)),
        RECOVERY, "two waiting gangs bound in place of the ended ones")
    hold(cluster, namespace, nodes)
    print(f"{component} back {took:.1f}s after SIGKILL; {refused} creates refused and "
          f"retried; 12 GPUs bound {recovered:.1f}s after it answered again; two gangs "
          f"replaced in {after:.1f}s")


def test_a_scheduler_killed_mid_gang_leaves_no_gang_half_bound(
        cluster: Cluster, namespace: str, hollow_nodes, tmp_path: Path,
        processes: list[Process]) -> None:
    """20 gangs of 4 pods, 80 GPUs, waiting when the scheduler starts: it is SIGKILLed as
    soon as it has bound the first pods (its own count), some gangs partly bound on the API
    server; a new one rebuilds from the cluster and completes them."""
    nodes = hollow_nodes(10, cpu="16", memory="64Gi", extended={"nvidia.com/gpu": "8"})
    name = unique("kill")
    objects = [pod for i in range(20) for pod in gang(f"k{i}", namespace, name, 4)]
    cluster.apply(yaml.safe_dump_all(objects))
    first = start_scheduler(cluster, namespace, tmp_path, processes, name, "--bind-workers",
                            "2", log="first")
    bound_then = wait_for(lambda: first.metric("fluxinfra_scheduler_pods_bound_total"), 60,
                          "the first binds", interval=0.02)
    first.kill(signal.SIGKILL)
    first.proc.wait(10)
    killed = time.monotonic()
    at_kill = len(live_bound(cluster, namespace))
    start_scheduler(cluster, namespace, tmp_path, processes, name, log="second")
    recovered = steady(lambda: len(live_bound(cluster, namespace)) == 80, RECOVERY,
                       "all 80 pods bound")
    time.sleep(3)
    hold(cluster, namespace, nodes)
    print(f"killed with {bound_then:.0f} (its count) / {at_kill} (API server) of 80 bound; "
          f"all bound {time.monotonic() - killed:.1f}s after the kill ({recovered:.1f}s of it "
          "after the new scheduler was healthy)")


def test_a_scheduler_killed_during_preemption_evicts_whole_gangs_only(
        cluster: Cluster, namespace: str, hollow_nodes, tmp_path: Path,
        processes: list[Process]) -> None:
    """Two low-priority gangs of 4 fill 8 GPUs; a high-priority gang of 4 arrives and the
    scheduler is SIGKILLed as soon as it counts its first victim. The new scheduler finishes:
    the high gang runs whole, and of the low gangs each is whole or gone."""
    nodes = hollow_nodes(2, cpu="16", memory="64Gi", extended={"nvidia.com/gpu": "4"})
    name = unique("pre")
    low, high = f"{name}-low", f"{name}-high"
    for pc, value in ((low, 10), (high, 1000)):
        cluster.apply(yaml.safe_dump({"apiVersion": "scheduling.k8s.io/v1",
                                      "kind": "PriorityClass", "metadata": {"name": pc},
                                      "value": value}))
    try:
        first = start_scheduler(cluster, namespace, tmp_path, processes, name, log="first")
        cluster.apply(yaml.safe_dump_all(gang("low-a", namespace, name, 4, priority=low)
                                         + gang("low-b", namespace, name, 4, priority=low)))
        wait_for(lambda: len(live_bound(cluster, namespace)) == 8, 60, "the low gangs bound")
        cluster.apply(yaml.safe_dump_all(gang("high", namespace, name, 4, priority=high)))
        # (the whole preemption takes about a second: its own count is the quick signal)
        wait_for(lambda: first.metric("fluxinfra_scheduler_preemption_victims_total"), 60,
                 "the first victim", interval=0.02)
        first.kill(signal.SIGKILL)
        first.proc.wait(10)
        killed = time.monotonic()
        start_scheduler(cluster, namespace, tmp_path, processes, name, log="second")

        def high_whole() -> bool:
            bound = live_bound(cluster, namespace)
            return sum(p.startswith("high-") for p in bound) == 4
        recovered = steady(high_whole, RECOVERY, "the high-priority gang bound whole")
        time.sleep(3)
        hold(cluster, namespace, nodes)
        bound = live_bound(cluster, namespace)
        print(f"high gang bound {time.monotonic() - killed:.1f}s after the kill (steady "
              f"{recovered:.1f}s after the new scheduler was healthy); bound now: "
              f"{sorted(bound)}")
    finally:
        cluster.kubectl("delete", "priorityclass", low, high, "--wait=false", check=False)


def test_sigterm_right_after_a_burst_writes_every_event_and_status_it_owes(
        cluster: Cluster, namespace: str, hollow_nodes, tmp_path: Path,
        processes: list[Process]) -> None:
    """400 pods in 50 PodGroups are bound in one burst; SIGTERM the moment the API server
    shows the last bind. Within the grace period the scheduler exits 0 and the API server
    then holds one Scheduled Event per pod and on every PodGroup a status counting all its
    members scheduled (``Scheduled``, or ``Running`` once its pods run)."""
    grace = 15
    cluster.apply(yaml.safe_dump(podgroup_crd()))
    cluster.kubectl("wait", "--for=condition=Established", "--timeout=60s",
                    f"crd/{podgroup_crd()['metadata']['name']}")
    nodes = hollow_nodes(10, cpu="64", memory="256Gi", extended={"nvidia.com/gpu": "40"})
    name = unique("term")
    groups, size = 50, 8
    objects: list[dict[str, Any]] = []
    for i in range(groups):
        objects.append({"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
                        "metadata": {"name": f"pg{i}", "namespace": namespace},
                        "spec": {"minMember": size}})
        objects += gang(f"pg{i}", namespace, name, size, podgroup=True)
    for at in range(0, len(objects), 25):  # (one request of 450 objects outlasts kubectl)
        apply_retrying(cluster, objects[at:at + 25], timeout=300)
    total = groups * size
    scheduler = start_scheduler(cluster, namespace, tmp_path, processes, name,
                                "--shutdown-grace", str(grace))
    wait_for(lambda: len(live_bound(cluster, namespace)) == total, 180, f"{total} pods bound",
             interval=0.1)
    scheduler.kill(signal.SIGTERM)
    signalled = time.monotonic()
    code = scheduler.proc.wait(grace + 15)
    exited = time.monotonic() - signalled
    assert code == 0, scheduler.tail()
    events = [e for e in cluster.get("events.v1.events.k8s.io", "-n", namespace)["items"]
              if e.get("reason") == "Scheduled"]
    statuses = [g.get("status") or {} for g in
                cluster.get("podgroups.scheduling.x-k8s.io", "-n", namespace)["items"]]
    # (a group whose pods the hollow kubelet already runs has gone on to Running)
    written = sum(1 for s in statuses if s.get("phase") in ("Scheduled", "Running")
                  and s.get("scheduled") == size)
    print(f"exited {exited:.1f}s after SIGTERM; {len(events)} of {total} Scheduled Events and "
          f"{written} of {groups} PodGroup statuses written")
    assert exited <= grace + 1, f"took {exited:.1f}s (grace {grace}s)"
    assert len({e['regarding']['uid'] for e in events}) == total == len(events)
    assert written == groups, statuses
    hold(cluster, namespace, nodes)


def gang_job(name: str, namespace: str, scheduler: str, size: int) -> dict[str, Any]:
    """A Job whose ``size`` pods (one GPU each, running until deleted) are one gang: its
    controller replaces a member that is lost."""
    pod = pod_manifest("member", namespace, scheduler, gpus=1)
    pod["metadata"] = {"labels": {LABEL_GROUP: name, LABEL_GROUP_SIZE: str(size),
                                  "e2e": "robust"}}
    pod["spec"]["restartPolicy"] = "Never"
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"parallelism": size, "completions": size, "backoffLimit": 100,
                     "template": {"metadata": pod["metadata"], "spec": pod["spec"]}}}


def test_a_node_removed_under_running_gangs_loses_only_its_pods(
        cluster: Cluster, namespace: str, hollow_nodes, tmp_path: Path,
        processes: list[Process]) -> None:
    """Four hollow nodes of 4 GPUs; three Jobs, each one gang of 4 one-GPU pods, run on 12 of
    the 16 GPUs. The node holding most of them is deleted (its kubelet gone for good): the pods
    there are garbage-collected, their Jobs make replacements, and the scheduler binds them
    into the 4 GPUs left free on the other nodes, never onto the deleted node: every gang whole
    again on 12 GPUs. A fourth gang arriving then waits; when the node joins again, the fourth
    gang is bound there."""
    shape = {"cpu": "16", "memory": "64Gi", "extended": {"nvidia.com/gpu": "4"}}
    nodes = hollow_nodes(4, **shape)
    name = unique("gone")
    start_scheduler(cluster, namespace, tmp_path, processes, name)
    cluster.apply(yaml.safe_dump_all([gang_job(f"j{i}", namespace, name, 4) for i in range(3)]))
    steady(lambda: len(live_bound(cluster, namespace)) == 12, RECOVERY, "three gangs bound")
    hold(cluster, namespace, nodes)
    per_node: dict[str, list[str]] = {n: [] for n in nodes}
    for pod, node in live_bound(cluster, namespace).items():
        per_node[node].append(pod)
    gone = max(nodes, key=lambda n: len(per_node[n]))
    lost = set(per_node[gone])
    assert lost, "no pod on any node"
    cluster.bed.remove_hollow_nodes([gone])
    removed = time.monotonic()

    def pods_now() -> dict[str, dict[str, Any]]:
        return {p["metadata"]["name"]: p for p in cluster.get("pods", "-n", namespace)["items"]}
    collected = steady(lambda: not lost & set(pods_now()), RECOVERY,
                       "the deleted node's pods garbage-collected")
    replaced = steady(lambda: len([p for p in pods_now().values()
                                   if not p["metadata"].get("deletionTimestamp")]) == 12,
                      RECOVERY, "the Jobs' replacements created")

    def refilled() -> bool:
        bound = live_bound(cluster, namespace)
        return len(bound) == 12 and not lost & set(bound) and gone not in bound.values()
    bound_again = steady(refilled, RECOVERY, "every gang whole again without the node")
    recovered = time.monotonic() - removed
    cluster.apply(yaml.safe_dump(gang_job("late", namespace, name, 4)))
    time.sleep(5)  # give a mistaken bind (onto the deleted node, or of the late gang) time
    bound = live_bound(cluster, namespace)
    assert gone not in bound.values(), f"bound to the deleted node {gone}: {bound}"
    assert not any(p.startswith("late-") for p in bound), "the late gang did not wait"
    survivors = [n for n in nodes if n != gone]
    hold(cluster, namespace, survivors)
    cluster.add_hollow_nodes([gone], **shape)

    def late_bound() -> dict[str, str]:
        return {p: n for p, n in live_bound(cluster, namespace).items()
                if p.startswith("late-")}
    back = steady(lambda: len(late_bound()) == 4, RECOVERY, "the late gang bound")
    assert set(late_bound().values()) == {gone}, late_bound()
    time.sleep(3)
    assert len(live_bound(cluster, namespace)) == 16
    hold(cluster, namespace, nodes)
    print(f"{gone} deleted with {len(lost)} of our pods on it: every gang whole again on the "
          f"other nodes {recovered:.1f}s later (the pods garbage-collected {collected:.1f}s, "
          f"their Jobs' replacements {replaced:.1f}s, all bound {bound_again:.1f}s after "
          f"that); the late gang bound on it {back:.1f}s after it joined again")


def test_the_webhook_down_while_jobs_arrive_loses_no_job_and_runs_none_unqueued(
        cluster: Cluster, namespace: str, hollow_nodes, tmp_path: Path) -> None:
    """Twelve Jobs arrive one by one, each retried by its client until accepted, while the
    queue's only webhook replica is SIGKILLed and started again (the stack's ``failurePolicy:
    Fail``: creates are refused meanwhile, none runs unqueued). Every Job then has one
    FluxJob, was admitted once, and finishes."""
    from kubebed.hollow import RUN_SECONDS
    from queue_env import job_yaml, running_queue

    cluster.kubectl("label", "namespace", namespace, "fluxinfra.io/queue=enabled")
    hollow_nodes(2, cpu="64", memory="256Gi")
    with running_queue(cluster, tmp_path) as queue:
        def arrive() -> int:
            refused = 0
            for i in range(12):
                job = yaml.safe_load(job_yaml(f"j{i}", namespace, pods=1, cpu="40",
                                              extra_annotations=f', {RUN_SECONDS}: "1"'))
                refused += apply_retrying(cluster, [job])
                time.sleep(0.5)
            return refused
        arrivals = Arrivals(arrive)
        arrivals.start()
        wait_for(lambda: cluster.get("jobs", "-n", namespace)["items"], 60, "the first Job")
        queue.stop_webhook(signal.SIGKILL)
        down = time.monotonic()
        time.sleep(5)
        queue.start_webhook()
        back = time.monotonic()
        refused = arrivals.finish()
        names = [f"job-j{i}" for i in range(12)]
        recovered = steady(lambda: all(queue.state(namespace, n) == "Finished" for n in names),
                           RECOVERY, "every FluxJob Finished")
        hold(cluster, namespace, queue=True)
        assert refused > 0, "the outage refused no create: it was not tested"
        print(f"webhook down {back - down:.1f}s: {refused} creates refused and retried; "
              f"all 12 Jobs Finished {recovered:.1f}s after the last was accepted")
