"""The bed itself: a real API server, controllers, a kubelet running pods, hollow nodes kept
Ready by the keeper and let go when it stops."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
import uuid

import pytest
from e2e_cluster import REPO, Cluster, wait_for
from kubebed import hollow


def test_server_is_kubernetes_1_28(cluster: Cluster) -> None:
    version = json.loads(cluster.kubectl("get", "--raw", "/version").stdout)
    assert (version["major"], version["minor"]) == ("1", "28"), version
    assert cluster.kubectl("get", "--raw", "/readyz").stdout.strip() == "ok"


def test_a_pod_runs_on_the_real_node_and_reaches_the_api(cluster: Cluster, real_node: str,
                                                         busybox: str, namespace: str) -> None:
    """Scheduled by kube-scheduler, run by the kubelet, logs and exec through the API server,
    and the pod reaches the API server through the ``kubernetes`` Service address."""
    cluster.apply(f"""
apiVersion: v1
kind: Pod
metadata: {{name: probe, namespace: {namespace}}}
spec:
  nodeSelector: {{fluxinfra.io/bed-node: real}}
  containers:
  - name: main
    image: {busybox}
    imagePullPolicy: Never
    command: [sh, -c, 'echo started; sleep 3600']
""")
    cluster.kubectl("wait", "-n", namespace, "--for=condition=Ready", "pod/probe",
                    "--timeout=90s")
    pod = cluster.get("pod", "probe", "-n", namespace)
    assert pod["spec"]["nodeName"] in cluster.real_nodes
    wait_for(lambda: "started" in cluster.kubectl("logs", "-n", namespace, "probe").stdout,
             30, "the pod's log line")
    host = cluster.kubectl("exec", "-n", namespace, "probe", "--",
                           "sh", "-c", "echo $KUBERNETES_SERVICE_HOST").stdout.strip()
    out = cluster.kubectl("exec", "-n", namespace, "probe", "--", "wget", "-q", "-O-",
                          "--no-check-certificate", f"https://{host}/version").stdout
    assert json.loads(out)["gitVersion"].startswith("v1.28"), out


def test_hollow_nodes_stay_ready_past_the_grace_period(cluster: Cluster, hollow_nodes) -> None:
    """The keeper renews their Leases, so the node-lifecycle controller (20 s grace in the
    suite's bed) leaves them Ready; one it stops renewing goes Unknown and gets tainted."""
    if cluster.bed is None:
        pytest.skip("hollow nodes are made only on a bed")
    kept, dropped = hollow_nodes(2, cpu="8", memory="16Gi", labels={"e2e": "hollow"})
    assert cluster.node_ready(kept) and cluster.node_ready(dropped)
    cluster.bed.remove_hollow_nodes([dropped], delete=False)
    grace = cluster.bed.record["grace"]

    def dropped_unreachable() -> bool:
        node = cluster.get("node", dropped)
        ready = next(c for c in node["status"]["conditions"] if c["type"] == "Ready")
        taints = {t["key"] for t in node["spec"].get("taints", [])}
        return ready["status"] == "Unknown" and "node.kubernetes.io/unreachable" in taints
    wait_for(dropped_unreachable, grace * 3, f"{dropped} to be marked unreachable", 1.0)
    assert cluster.node_ready(kept), f"{kept} lost Ready although the keeper renews it"
    node = cluster.get("node", kept)
    assert node["status"]["allocatable"]["cpu"] == "8"
    assert not node["spec"].get("taints"), node["spec"]
    cluster.bed.remove_hollow_nodes([dropped])


def test_jobs_complete_on_hollow_nodes(cluster: Cluster, hollow_nodes, namespace: str) -> None:
    """The keeper runs pods bound to hollow nodes in name only: Running at once, Succeeded
    after their ``fluxinfra.io/hollow-run-seconds``; so the real Job controller completes a
    Job whose pods never had a container."""
    if cluster.bed is None:
        pytest.skip("hollow nodes are made only on a bed")
    zone = f"job-{namespace}"
    hollow_nodes(2, cpu="4", labels={"e2e-zone": zone})
    cluster.apply(f"""
apiVersion: batch/v1
kind: Job
metadata: {{name: hollow-job, namespace: {namespace}}}
spec:
  completions: 3
  parallelism: 2
  template:
    metadata:
      annotations: {{fluxinfra.io/hollow-run-seconds: "1"}}
    spec:
      nodeSelector: {{e2e-zone: {zone}}}
      restartPolicy: Never
      containers: [{{name: main, image: never-pulled.invalid/x:1}}]
""")
    cluster.kubectl("wait", "-n", namespace, "--for=condition=Complete", "job/hollow-job",
                    "--timeout=120s")
    pods = cluster.get("pods", "-n", namespace)["items"]
    assert len(pods) == 3 and {p["status"]["phase"] for p in pods} == {"Succeeded"}


def _pod_bound_to(node: str, name: str, namespace: str) -> str:
    """A pod created bound to ``node`` (no scheduler), with an image nothing pulls."""
    return f"""
apiVersion: v1
kind: Pod
metadata: {{name: {name}, namespace: {namespace}}}
spec:
  nodeName: {node}
  containers: [{{name: main, image: never-pulled.invalid/x:1}}]
"""


def test_a_pod_deleted_from_a_hollow_node_goes_at_once(cluster: Cluster, hollow_nodes,
                                                        namespace: str) -> None:
    """Graceful deletion needs the node's kubelet to confirm; the keeper confirms for hollow
    nodes, so the pod is gone well within its 30 s grace period."""
    if cluster.bed is None:
        pytest.skip("hollow nodes are made only on a bed")
    (node,) = hollow_nodes(1)
    cluster.apply(_pod_bound_to(node, "resident", namespace))
    wait_for(lambda: cluster.get("pod", "resident", "-n", namespace)["status"].get("phase")
             == "Running", 30, "the pod on the hollow node to run")
    cluster.kubectl("delete", "pod", "resident", "-n", namespace, "--wait=true",
                    "--timeout=20s")


def test_a_leases_only_keeper_keeps_its_nodes_ready_and_runs_no_pod(
        cluster: Cluster, namespace: str, tmp_path) -> None:
    """The scheduler benchmark's keeper (``--leases-only``, as kube-scheduler's own benchmark
    runs no kubelet) renews its hollow node's Lease but writes nothing about pods: a pod bound
    to the node stays Pending while the bed's own keeper runs its nodes' pods at once. The
    keeper here is a second one, with a roster of its own beside a copy of the bed's record."""
    if cluster.bed is None:
        pytest.skip("hollow nodes are made only on a bed")
    state = tmp_path / "state"
    state.mkdir()
    shutil.copy(cluster.bed.state / "bed.json", state / "bed.json")
    name = f"leased-{uuid.uuid4().hex[:6]}"
    rest = cluster.bed.rest()
    hollow.add(rest, state, [hollow.node_object(name, cpu="4")], grace=cluster.bed.record["grace"])
    keeper = subprocess.Popen([sys.executable, "-m", "kubebed.hollow", str(state),
                               "--leases-only"], cwd=REPO / "scripts",
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        def renewed() -> str:
            return cluster.get("lease", name, "-n", hollow.LEASE_NS)["spec"]["renewTime"]
        first = renewed()
        cluster.apply(_pod_bound_to(name, "unrun", namespace))
        # the renewal interval is a quarter of the grace period: the Lease moves within it
        wait_for(lambda: renewed() != first, cluster.bed.record["grace"], "the Lease renewed")
        time.sleep(2)
        assert cluster.node_ready(name)
        pod = cluster.get("pod", "unrun", "-n", namespace)
        assert pod["status"].get("phase") == "Pending", pod["status"]
        assert not pod["status"].get("containerStatuses"), pod["status"]
        assert keeper.poll() is None, keeper.stderr.read() if keeper.stderr else ""
    finally:
        keeper.terminate()
        keeper.wait(timeout=10)
        cluster.kubectl("delete", "pod", "unrun", "-n", namespace, "--grace-period=0",
                        "--force", "--wait=false")
        hollow.remove(rest, state, [name])
        rest.close()


def test_pods_reach_services_and_each_other_by_name(cluster: Cluster, real_node: str,
                                                    busybox: str, namespace: str) -> None:
    """Cluster DNS and Services on the real node (the bed's services process): a ClusterIP
    Service by its short name (the pod reaches itself through it: hairpin), a headless
    Service's pod by ``<hostname>.<subdomain>``, and a name outside the cluster through the
    machine's resolver."""
    if cluster.bed is None:
        pytest.skip("the bed's own Services and DNS")
    cluster.apply(f"""
apiVersion: v1
kind: Service
metadata: {{name: web, namespace: {namespace}}}
spec:
  selector: {{app: web}}
  ports: [{{port: 80, targetPort: 8080}}]
---
apiVersion: v1
kind: Service
metadata: {{name: peers, namespace: {namespace}}}
spec:
  clusterIP: None
  publishNotReadyAddresses: true
  selector: {{app: web}}
  ports: [{{port: 8080}}]
---
apiVersion: v1
kind: Pod
metadata: {{name: web-0, namespace: {namespace}, labels: {{app: web}}}}
spec:
  nodeSelector: {{fluxinfra.io/bed-node: real}}
  hostname: web-0
  subdomain: peers
  containers:
  - name: main
    image: {busybox}
    imagePullPolicy: Never
    command: [sh, -c, 'mkdir /www && echo hello-from-web-0 > /www/index.html &&
              exec httpd -f -p 8080 -h /www']
""")
    cluster.kubectl("wait", "-n", namespace, "--for=condition=Ready", "pod/web-0",
                    "--timeout=90s")

    def fetch(url: str) -> str:
        return cluster.kubectl("exec", "-n", namespace, "web-0", "--", "wget", "-q", "-O-",
                               url, check=False).stdout
    for url in ("http://web/", f"http://web.{namespace}.svc.cluster.local/",
                "http://web-0.peers:8080/"):
        wait_for(lambda url=url: "hello-from-web-0" in fetch(url), 30, f"{url} from the pod")
    host = cluster.kubectl("exec", "-n", namespace, "web-0", "--", "nslookup",
                           "kubernetes.default.svc.cluster.local").stdout
    assert cluster.bed.layout.service_ip in host, host
