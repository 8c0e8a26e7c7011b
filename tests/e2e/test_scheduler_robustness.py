"""The scheduler's robustness against a real API server: the real ``fluxinfra scheduler``
process, the real ``kubernetes`` client, the ServiceAccount and RBAC the component renders.

- two replicas elect a leader on a real Lease; the leader is killed (SIGKILL: no hand-over), the
  standby takes over, and no pod is bound twice nor any node over-committed;
- the API server is paused (SIGSTOP) for longer than the client timeouts: the watchdog fails
  ``/healthz``, a leader steps down and exits, and the scheduler recovers once it resumes;
- lists are paginated against the real server, and an expired continue token (a real etcd
  compaction between pages) restarts the list;
- the Fluxion service is killed and restarted under a scheduler that matches through it over
  mutual TLS: the scheduler notices the new epoch, replays its allocations, and places nothing
  twice.

After a fault the invariants of ``fault_checks`` hold (``test_faults.py`` has the other
faults).

Pods for the scheduler under test ask for ``nvidia.com/gpu``, which only the test's hollow nodes
offer, so capacity is exactly known whatever else runs in the cluster.
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from e2e_cluster import Cluster, wait_for
from fault_checks import hold
from scheduler_run import (
    Process,
    Scheduler,
    bound_nodes,
    free_port,
    gpu_pods,
    gpus_in_use,
    lease,
    pod_manifest,
    scheduled_events,
    scheduler_kubeconfig,
)

from fluxinfra.pki import make_service_tls
from fluxinfra.scheduler.client import ClientKubeApi
from fluxinfra.signals import signal_disposition


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def holder(cluster: Cluster, namespace: str, name: str) -> str:
    found = lease(cluster, namespace, name)
    return (found or {}).get("spec", {}).get("holderIdentity") or ""


def count_bound(cluster: Cluster, namespace: str) -> int:
    return sum(1 for node in bound_nodes(cluster, namespace).values() if node)


def test_a_killed_leader_is_replaced_and_nothing_is_bound_twice(
        cluster: Cluster, namespace: str, hollow_nodes, tmp_path: Path,
        processes: list[Process]) -> None:
    name = unique("fx")
    lease_name = f"{name}-scheduler"
    kubeconfig = scheduler_kubeconfig(cluster, namespace, name, name, tmp_path / "kubeconfig")
    nodes = hollow_nodes(2, cpu="16", memory="64Gi", extended={"nvidia.com/gpu": "4"})
    common = ["--leader-elect", "--lease-namespace", namespace, "--lease-name", lease_name,
              "--page-size", "3"]
    a = Scheduler(kubeconfig, name, tmp_path / "replica-a.log", *common, identity="replica-a")
    processes.append(a)
    a.wait_healthy()
    wait_for(lambda: holder(cluster, namespace, lease_name) == "replica-a", 60, "a to lead")
    b = Scheduler(kubeconfig, name, tmp_path / "replica-b.log", *common, identity="replica-b")
    processes.append(b)
    assert b.healthz() == (200, "standby: another replica holds the lease\n") or \
        wait_for(lambda: b.healthz()[0] == 200, 60, "b healthy as a standby")

    gpu_pods(cluster, namespace, name, [f"one-{i}" for i in range(4)])
    wait_for(lambda: count_bound(cluster, namespace) == 4, 60, "a to bind 4 pods")
    assert holder(cluster, namespace, lease_name) == "replica-a", "b must not have taken over"
    threads = signal_disposition(a.proc.pid)
    assert list(threads.values()).count("sigwait") == 1, threads
    assert "open" not in threads.values(), f"a SIGTERM could land in a busy thread: {threads}"

    a.kill(signal.SIGKILL)  # no release: b must see the Lease expire on its own clock
    killed = time.monotonic()
    gpu_pods(cluster, namespace, name, [f"two-{i}" for i in range(6)])
    wait_for(lambda: holder(cluster, namespace, lease_name) == "replica-b", 90,
             "b to take the Lease over")
    took_over = time.monotonic() - killed
    wait_for(lambda: count_bound(cluster, namespace) == 8, 60, "b to fill the GPUs")
    time.sleep(6)  # give a mistaken over-commit time to show
    bound = bound_nodes(cluster, namespace)
    assert sum(1 for node in bound.values() if node) == 8, bound
    used = gpus_in_use(cluster, nodes)
    assert all(n <= 4 for n in used.values()) and sum(used.values()) == 8, used
    hold(cluster, namespace, nodes)  # and no pod bound twice, by the audit log
    events = scheduled_events(cluster, namespace)
    per_pod: dict[str, list[str]] = {}
    for event in events:
        per_pod.setdefault(event["regarding"]["name"], []).append(event["reportingInstance"])
    assert sorted(per_pod) == sorted(p for p, node in bound.items() if node), per_pod
    assert all(len(v) == 1 for v in per_pod.values()), f"bound twice: {per_pod}"
    assert {per_pod[f"one-{i}"][0] for i in range(4)} == {"replica-a"}
    assert {v[0] for p, v in per_pod.items() if p.startswith("two-")} == {"replica-b"}
    notes = [e["note"] for e in cluster.get("events.v1.events.k8s.io", "-n", namespace)["items"]
             if e.get("reason") == "LeaderElection"]
    assert "replica-a became leader" in notes and "replica-b became leader" in notes, notes
    print(f"b took over {took_over:.1f}s after a was killed (lease 15 s)")
    stopping = time.monotonic()
    assert b.stop() == 0, "SIGTERM: a clean exit"
    assert holder(cluster, namespace, lease_name) == "", "released for a fast hand-over"
    print(f"b stopped and released the Lease {time.monotonic() - stopping:.1f}s after SIGTERM")


@pytest.fixture
def paused_bed(cluster: Cluster, tmp_path: Path) -> Iterator[Cluster]:
    """A bed of its own (control plane only) whose API server a test may pause."""
    if cluster.bed is None:
        pytest.skip("pausing the API server needs a bed this session started")
    import kubebed

    bed = kubebed.Bed.up(f"e2e-pause-{os.getpid()}", real_node=False, scheduler=False,
                         log=lambda m: print(f"pause bed: {m}", file=sys.stderr))
    own = Cluster(bed.kubeconfig, tmp_path / "kubectl-cache", bed)
    try:
        yield own
    finally:
        bed.procs()["kube-apiserver"].signal(signal.SIGCONT)
        bed.down()


def test_a_paused_api_server_fails_the_watchdog_and_the_leader_steps_down(
        paused_bed: Cluster, tmp_path: Path, processes: list[Process]) -> None:
    """SIGSTOP: connections are accepted (the kernel's backlog) and never answered, the
    half-open case client timeouts exist for. The Lease cannot keep a stalled scheduler up."""
    cluster = paused_bed
    namespace = "robust"
    cluster.kubectl("create", "namespace", namespace)
    wait_for(lambda: cluster.kubectl("get", "serviceaccount", "default", "-n", namespace,
                                     check=False).returncode == 0, 30, "the namespace")
    quick = ["--api-timeout", "3", "--watch-timeout", "5", "--stall-timeout", "5"]
    watched = Scheduler(scheduler_kubeconfig(cluster, namespace, "watched", "watched",
                                             tmp_path / "kc-watched"),
                        "watched", tmp_path / "watched.log", "--no-leader-elect", *quick)
    processes.append(watched)
    leader = Scheduler(scheduler_kubeconfig(cluster, namespace, "leader", "leader",
                                            tmp_path / "kc-leader"),
                       "leader", tmp_path / "leader.log", "--leader-elect", "--lease-namespace",
                       namespace, "--lease-name", "leader-scheduler", *quick, identity="leader")
    processes.append(leader)
    watched.wait_healthy()
    leader.wait_healthy()
    wait_for(lambda: holder(cluster, namespace, "leader-scheduler") == "leader", 60, "a leader")
    assert watched.metric("fluxinfra_scheduler_healthy") == 1

    apiserver = cluster.bed.procs()["kube-apiserver"]
    assert apiserver.signal(signal.SIGSTOP)
    paused = time.monotonic()
    try:
        wait_for(lambda: watched.healthz()[0] == 503, 60, "/healthz to fail")
        failed_after = time.monotonic() - paused
        status, why = watched.healthz()
        assert "no answer from the API server" in why, why
        assert watched.metric("fluxinfra_scheduler_healthy") == 0
        assert watched.alive, "the watchdog reports; the kubelet's liveness probe restarts"
        code = leader.proc.wait(timeout=60)
        assert code == 1, f"the leader must step down and exit 1, not {code}"
        assert "lost the lease" in leader.log.read_text()
    finally:
        apiserver.signal(signal.SIGCONT)
    wait_for(lambda: watched.healthz()[0] == 200, 120, "/healthz to recover after SIGCONT")
    print(f"/healthz failed {failed_after:.1f}s after the API server was paused")


def _all_pod_names(cluster: Cluster) -> set[str]:
    out = cluster.kubectl("get", "pods", "-A", "-o",
                          "jsonpath={range .items[*]}{.metadata.namespace}/{.metadata.name}"
                          "{'\\n'}{end}").stdout
    return {line for line in out.splitlines() if line}


def test_lists_are_paginated_against_the_real_server(cluster: Cluster, namespace: str) -> None:
    cluster.apply(yaml.safe_dump_all([pod_manifest(f"page-{i:02d}", namespace, "nobody")
                                      for i in range(23)]))
    api = ClientKubeApi(cluster.client(), page_size=5)
    items, resource_version = api.list_objects("pods")
    names = {f"{p['metadata']['namespace']}/{p['metadata']['name']}" for p in items}
    expected = _all_pod_names(cluster)
    assert {f"{namespace}/page-{i:02d}" for i in range(23)} <= names
    assert names == expected, names ^ expected
    assert api.pages == math.ceil(len(items) / 5) and api.pages >= 5, api.pages
    assert resource_version.isdigit() and api.restarts == 0
    assert all("managedFields" not in p["metadata"] for p in items)


def test_an_expired_continue_token_restarts_the_list(cluster: Cluster, namespace: str) -> None:
    """A real 410: etcd compacted past the list's revision between two pages."""
    if cluster.bed is None:
        pytest.skip("compacting etcd needs a bed this session started")
    from kubebed.layout import find_binary

    etcdctl = find_binary("etcdctl")
    if etcdctl is None:
        pytest.skip("etcdctl not found in $FLUXINFRA_KUBE_BIN or on PATH")
    endpoint = f"http://127.0.0.1:{cluster.bed.layout.ports['etcd']}"
    env = dict(os.environ, ETCDCTL_API="3")

    def compact() -> None:
        # Something changes after page 1, then history up to now is compacted away.
        cluster.kubectl("create", "configmap", unique("bump"), "-n", namespace)
        status = json.loads(subprocess.run(
            [etcdctl, "--endpoints", endpoint, "endpoint", "status", "-w", "json"],
            env=env, capture_output=True, text=True, check=True).stdout)
        revision = status[0]["Status"]["header"]["revision"]
        subprocess.run([etcdctl, "--endpoints", endpoint, "compact", str(revision)], env=env,
                       capture_output=True, text=True, check=True)

    class CompactingApi(ClientKubeApi):
        def _page(self, kind, limit, token):  # type: ignore[override]
            body = super()._page(kind, limit, token)
            if self.pages == 1:
                compact()
            return body

    cluster.apply(yaml.safe_dump_all([pod_manifest(f"gone-{i:02d}", namespace, "nobody")
                                      for i in range(12)]))
    api = CompactingApi(cluster.client(), page_size=5)
    items, _ = api.list_objects("pods")
    assert api.restarts == 1, "page 2's continue token expired: the list started over"
    names = {f"{p['metadata']['namespace']}/{p['metadata']['name']}" for p in items}
    assert names == _all_pod_names(cluster)


def test_a_restarted_fluxion_service_is_refilled_and_nothing_is_placed_twice(
        cluster: Cluster, namespace: str, hollow_nodes, tmp_path: Path,
        processes: list[Process]) -> None:
    pki = make_service_tls(["127.0.0.1"], "fluxion-scheduler")
    dirs = {}
    for side, cert, key in (("server", pki.server_cert, pki.server_key),
                            ("client", pki.client_cert, pki.client_key)):
        d = dirs[side] = tmp_path / side
        d.mkdir()
        for fname, text in (("ca.crt", pki.ca_cert), ("tls.crt", cert), ("tls.key", key)):
            (d / fname).write_text(text)
    port = free_port()
    recipe = ('{"cluster": "boot", "racks": 1, "nodes_per_rack": 1, "sockets": 1, '
              '"cores_per_socket": 1, "memory_per_socket": [1, 1]}')

    def start_service(n: int) -> Process:
        svc = Process(["service", "--host", "127.0.0.1", "--port", str(port), "--tls-dir",
                       str(dirs["server"]), "--recipe", recipe], tmp_path / f"service-{n}.log")
        processes.append(svc)
        wait_for(lambda: "listening on" in svc.log.read_text() or not svc.alive, 60,
                 "the service to listen")
        assert svc.alive, svc.tail()
        return svc

    service = start_service(1)
    name = unique("fxs")
    kubeconfig = scheduler_kubeconfig(cluster, namespace, name, name, tmp_path / "kubeconfig")
    nodes = hollow_nodes(2, cpu="16", memory="64Gi", extended={"nvidia.com/gpu": "2"})
    # The pod the scheduler "runs in", for the Event it records about itself on a replay.
    cluster.apply(yaml.safe_dump(pod_manifest("scheduler-pod", namespace, "nobody")))
    scheduler = Scheduler(kubeconfig, name, tmp_path / "scheduler.log", "--no-leader-elect",
                          "--fluxion-service", f"127.0.0.1:{port}", "--fluxion-tls-dir",
                          str(dirs["client"]), identity="scheduler-pod",
                          pod_namespace=namespace)
    processes.append(scheduler)
    scheduler.wait_healthy()
    gpu_pods(cluster, namespace, name, [f"one-{i}" for i in range(3)])
    wait_for(lambda: count_bound(cluster, namespace) == 3, 60, "3 pods bound through the service")

    service.kill(signal.SIGKILL)
    service.stop()
    start_service(2)  # a fresh service: its own one-node graph, none of our jobs
    gpu_pods(cluster, namespace, name, [f"two-{i}" for i in range(3)])
    wait_for(lambda: count_bound(cluster, namespace) == 4, 90, "the 4th GPU to be used")
    time.sleep(6)  # give a mistaken over-commit time to show
    bound = bound_nodes(cluster, namespace)
    assert sum(1 for node in bound.values() if node) == 4, bound
    used = gpus_in_use(cluster, nodes)
    assert used == dict.fromkeys(nodes, 2), used
    hold(cluster, namespace, nodes)
    assert scheduler.metric("fluxinfra_scheduler_matcher_replays_total") == 1
    log = scheduler.log.read_text()
    assert "restarted (epoch" in log and "replayed" in log, scheduler.tail()
    assert scheduler.healthz()[0] == 200
    replays = [e for e in cluster.get("events.v1.events.k8s.io", "-n", namespace)["items"]
               if e.get("reason") == "MatcherReplayed"]
    assert [e["regarding"]["name"] for e in replays] == ["scheduler-pod"], replays
    assert "restarted (epoch" in replays[0]["note"], replays[0]["note"]


def test_the_mounted_client_certificate_is_readable_by_the_restricted_pod(
        cluster: Cluster, namespace: str, busybox: str, real_node: str) -> None:
    """The scheduler's pod as rendered (uid 10001, fsGroup 10001, read-only root, the Secret
    mounted 0400) on the real kubelet: the kubelet makes the files group-readable for the
    fsGroup, so the non-root process can read its key, and nobody else in the pod's group."""
    from fluxinfra.k8s.fluxion_service import FluxionServiceArgs, service_tls_secrets
    from fluxinfra.k8s.scheduler import FLUXION_TLS_DIR, FluxSchedulerArgs, scheduler_manifests

    tls = make_service_tls([f"fs.{namespace}.svc"], "fluxion-scheduler")
    secrets = service_tls_secrets("fs", FluxionServiceArgs(namespace=namespace), tls)
    cluster.apply(yaml.safe_dump_all(secrets))
    args = FluxSchedulerArgs(namespace=namespace, install_pod_group_crd=False,
                             fluxion_service=f"fs.{namespace}.svc.cluster.local:4242",
                             fluxion_tls_secret="fs-client-tls")
    deployment = next(m for m in scheduler_manifests("sc", args) if m["kind"] == "Deployment")
    spec = deployment["spec"]["template"]["spec"]
    container = spec["containers"][0]
    container.update(image=busybox, imagePullPolicy="Never", command=[
        "sh", "-c", f"id; stat -c '%a %g' $(readlink -f {FLUXION_TLS_DIR}/tls.key); "
                    f"head -1 {FLUXION_TLS_DIR}/tls.key; sleep 3600"])
    for key in ("args", "env", "ports", "startupProbe", "readinessProbe", "livenessProbe"):
        container.pop(key, None)
    spec.update(serviceAccountName="default", nodeSelector={"fluxinfra.io/bed-node": "real"},
                terminationGracePeriodSeconds=0)
    cluster.apply(yaml.safe_dump({"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": "reads-its-key", "namespace": namespace}, "spec": spec}))
    cluster.kubectl("wait", "-n", namespace, "--for=condition=Ready", "pod/reads-its-key",
                    "--timeout=90s")

    def output() -> str:
        text = cluster.kubectl("logs", "-n", namespace, "reads-its-key").stdout
        return text if "KEY" in text else ""
    logs = wait_for(output, 30, "the pod's output")
    lines = logs.splitlines()
    assert lines[0].startswith("uid=10001") and "gid=10001" in lines[0], lines
    assert lines[1] == "440 10001", f"0400 + fsGroup -> group-readable: {lines[1]}"
    assert lines[2] == "-----BEGIN PRIVATE KEY-----", lines
