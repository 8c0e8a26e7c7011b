"""The whole dev stack on four real nodes, deployed as the README deploys it: ``make render`` (the
installer's ``source: prefix`` set with ``--set``, conda-forge being out of reach here) and
``scripts/deploy`` (``make deploy``), the project's image and a Flux image loaded into the nodes
under the names the stack uses (``scripts/kube load-image`` / ``flux-image``).

Then what runs on it across the nodes: every Deployment available and the installer's brokers
one instance led by the first host; the stack's own ``hello`` MiniCluster placed by the stack's
scheduler as one gang, one broker per node, to Complete; a MiniCluster of 4 the same way and a
persistent one growing onto a fifth node; a gang of 8 beside the default scheduler's pods (the
kubelets admit every one); a queued Job of 4 pods; and a node whose kubelet stops.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from e2e_cluster import REPO, Cluster, wait_for
from flux_instance import (
    FLUX_PREFIX,
    Instance,
    clear_installer_nodes,
    render_dev_with_prefix,
    start_settings,
)

from fluxinfra.k8s.minicluster import (
    MiniClusterArgs,
    minicluster_keys_secret,
    minicluster_manifests,
)
from fluxinfra.secrets import derive_cluster_keys

NODES = 4
FIELD_MANAGER = "fluxinfra-e2e-dev"


@dataclass
class Deployed:
    out: Path
    docs: list[dict[str, Any]]
    nodes: list[str]
    started: float
    instance: Instance
    settings: dict[str, Any]
    #: the image the stack's MiniClusters name (a Flux image), as loaded into every node
    flux_image: str
    scheduler: str
    label: tuple[str, str]

    def of_kind(self, kind: str) -> list[dict[str, Any]]:
        return [d for d in self.docs if d["kind"] == kind]


def _docs(out: Path) -> list[dict[str, Any]]:
    docs = []
    for path in sorted(out.rglob("*.yaml")):
        if path.name != "kustomization.yaml":
            docs.extend(d for d in yaml.safe_load_all(path.read_text()) if d)
    return docs


def _flux_image(cluster: Cluster, name: str) -> None:
    """A Flux image from the build at $FLUXINFRA_FLUX_PREFIX, in every node as ``name``."""
    import sys

    sys.path.insert(0, str(REPO / "tests" / "image"))
    from image_podman import podman, why_not_runnable
    from kubebed.loadimages import build_flux_image, load_image

    if (reason := why_not_runnable()) is not None:
        pytest.skip(reason)
    subprocess.run(["bash", str(REPO / "scripts" / "base-image")], check=True,
                   capture_output=True, timeout=900)
    tag = build_flux_image(FLUX_PREFIX, f"localhost/flux-view:e2e-{os.getpid()}")
    try:
        load_image(cluster.bed, tag, [name])
    finally:
        podman("rmi", "--force", tag, check=False, timeout=120)


@pytest.fixture(scope="module")
def dev(cluster: Cluster, fluxinfra_image: str, tmp_path_factory) -> Deployed:
    if len(cluster.real_nodes) < NODES:
        pytest.skip(f"needs a bed of {NODES} real nodes (FLUXINFRA_E2E_NODES={NODES}; `make "
                    f"e2e` sets it), this one has {len(cluster.real_nodes)}")
    if not (FLUX_PREFIX / "bin" / "flux").exists():
        pytest.skip(f"no Flux build at {FLUX_PREFIX} (FLUXINFRA_FLUX_PREFIX): the installer and "
                    "the MiniClusters need one")
    nodes = cluster.real_nodes[:NODES]
    out = render_dev_with_prefix(tmp_path_factory.mktemp("dev-stack"))
    docs = _docs(out)
    installer = next(d for d in docs if d["kind"] == "DaemonSet")
    pod = installer["spec"]["template"]["spec"]
    label = next(iter(pod["nodeSelector"].items()))
    scripts = next(d for d in docs if d["kind"] == "ConfigMap"
                   and "node-watch.json" in d.get("data", {}))
    settings = start_settings(out, json.loads(scripts["data"]["node-watch.json"]))
    hello = next(d for d in docs if d["kind"] == "Job")
    flux_image = hello["spec"]["template"]["spec"]["containers"][0]["image"]
    scheduler = next(d for d in docs if d["kind"] == "Deployment"
                     and "scheduler" in d["metadata"]["name"])
    args = scheduler["spec"]["template"]["spec"]["containers"][0]["args"]
    # the images the stack names, in every node (kind's loadImages; nothing is pulled here)
    cluster.bed.tag_image(fluxinfra_image, pod["containers"][0]["image"])
    _flux_image(cluster, flux_image)
    # kind's workerLabels: the nodes the installer goes to, the first host first
    for node in nodes:
        cluster.kubectl("label", "node", node, f"{label[0]}={label[1]}", "--overwrite")
    started = time.monotonic()
    deploy = subprocess.run(["bash", str(REPO / "scripts" / "deploy"), str(out)],
                            env={**cluster.env, "KUBECTL": cluster.kubectl_path,
                                 "FIELD_MANAGER": FIELD_MANAGER},
                            capture_output=True, text=True, timeout=600, check=False)
    assert deploy.returncode == 0, deploy.stderr[-3000:]
    deployed = Deployed(out, docs, nodes, started, Instance(cluster, nodes[0], settings),
                        settings, flux_image, args[args.index("--scheduler-name") + 1], label)
    yield deployed
    cluster.kubectl("delete", "-k", str(out), "--ignore-not-found", "--wait=true",
                    "--timeout=240s", check=False, timeout=300)
    namespaces = [d["metadata"]["name"] for d in docs if d["kind"] == "Namespace"]
    cluster.kubectl("wait", "--for=delete", "--timeout=180s",
                    *[f"namespace/{n}" for n in namespaces], check=False, timeout=200)
    clear_installer_nodes(cluster, label[0], settings)


def test_the_whole_dev_stack_runs_across_the_nodes(cluster: Cluster, dev: Deployed):
    """Every Deployment available, an installer pod Running on each node, their brokers one
    instance led by the first host, and ``hello`` Complete: its two brokers on two nodes,
    placed as one gang by the stack's own scheduler."""
    for deployment in dev.of_kind("Deployment"):
        meta = deployment["metadata"]
        cluster.kubectl("wait", "-n", meta["namespace"], "--for=condition=Available",
                        f"deployment/{meta['name']}", "--timeout=300s", timeout=320)
    available = time.monotonic() - dev.started
    ds = dev.of_kind("DaemonSet")[0]["metadata"]
    pods = cluster.get("pods", "-n", ds["namespace"], "-l", "app.kubernetes.io/name=flux-installer")
    running = sorted(p["spec"]["nodeName"] for p in pods["items"]
                     if p["status"].get("phase") == "Running")
    assert running == sorted(dev.nodes), running
    expect = f"{dev.settings['hostPrefix']}[0-{NODES - 1}]"
    wait_for(lambda: dev.instance.up() == expect, 600, f"ranks {expect} up")
    quorum = time.monotonic() - dev.started
    ranks = json.loads(cluster.get("configmap", dev.settings["rankMap"], "-n", ds["namespace"])[
        "data"]["ranks.json"])
    assert ranks["slots"]["0"]["node"] == dev.nodes[0], "the lead broker is the first host"
    hello = dev.of_kind("Job")[0]["metadata"]
    cluster.kubectl("wait", "-n", hello["namespace"], "--for=condition=Complete",
                    f"job/{hello['name']}", "--timeout=600s", timeout=620)
    complete = time.monotonic() - dev.started
    pods = cluster.get("pods", "-n", hello["namespace"], "-l",
                       f"job-name={hello['name']}")["items"]
    placed = {p["metadata"]["name"]: p["spec"]["nodeName"] for p in pods}
    assert len(set(placed.values())) == len(placed) == 2, placed
    assert all(p["spec"]["schedulerName"] == dev.scheduler for p in pods)
    logs = cluster.kubectl("logs", "-n", hello["namespace"], "-l",
                           "batch.kubernetes.io/job-completion-index=0", "--tail=-1").stdout
    assert sorted(ln for ln in logs.splitlines() if ln.startswith("hello-")) == \
        ["hello-0", "hello-1"], logs[-3000:]
    events = cluster.get("events", "-n", hello["namespace"], "--field-selector",
                         "reason=Scheduled")["items"]
    by = {e["involvedObject"]["name"]: e.get("reportingComponent") or e["source"].get("component")
          for e in events}
    assert all(by.get(name) == dev.scheduler for name in placed), by
    print(f"\ndev stack on {NODES} real nodes: deploy -> Deployments available {available:.1f}s, "
          f"every rank up {quorum:.1f}s, hello Complete {complete:.1f}s "
          f"(brokers on {', '.join(sorted(placed.values()))})")


# -- MiniClusters across the nodes, placed by the stack's scheduler --------------------------

def _minicluster(cluster: Cluster, dev: Deployed, namespace: str, **kw) -> MiniClusterArgs:
    args = MiniClusterArgs(name="mc", namespace=namespace, image=dev.flux_image,
                           image_pull_policy="Never", scheduler_name=dev.scheduler,
                           pod_group=True, **kw)
    keys = derive_cluster_keys(b"e2e dev-stack minicluster seed..", namespace)
    docs = [minicluster_keys_secret(args, keys.curve_cert), *minicluster_manifests(args)]
    cluster.apply("".join("---\n" + yaml.safe_dump(d, sort_keys=False) for d in docs))
    return args


def _pods(cluster: Cluster, ns: str) -> dict[int, dict[str, Any]]:
    pods = cluster.get("pods", "-n", ns, "-l", "job-name=mc")["items"]
    return {int(p["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"]): p
            for p in pods if not p["metadata"].get("deletionTimestamp")}


def test_a_minicluster_of_four_is_one_gang_one_broker_per_node(cluster: Cluster, dev: Deployed,
                                                               namespace):
    started = time.monotonic()
    _minicluster(cluster, dev, namespace, size=4, max_size=6, command="hostname")
    cluster.kubectl("wait", "-n", namespace, "--for=condition=Complete", "job/mc",
                    "--timeout=600s", timeout=620)
    elapsed = time.monotonic() - started
    pods = _pods(cluster, namespace)
    nodes = {i: p["spec"]["nodeName"] for i, p in pods.items()}
    assert sorted(nodes) == [0, 1, 2, 3] and len(set(nodes.values())) == 4, nodes
    logs = cluster.kubectl("logs", "-n", namespace, pods[0]["metadata"]["name"],
                           "--tail=-1").stdout
    assert sorted(ln for ln in logs.splitlines() if ln.startswith("mc-")) == \
        [f"mc-{i}" for i in range(4)], logs[-3000:]
    group = cluster.get("podgroup", "mc", "-n", namespace)
    assert group["status"].get("scheduled") == 4, group["status"]
    print(f"\nMiniCluster of 4 as one gang of {dev.scheduler}: apply -> Complete "
          f"{elapsed:.1f}s on {', '.join(sorted(set(nodes.values())))}")


def test_a_persistent_minicluster_grows_onto_a_fifth_node(cluster: Cluster, dev: Deployed,
                                                         namespace):
    args = _minicluster(cluster, dev, namespace, size=4, max_size=6, mode="persistent")

    def up() -> str:
        pods = _pods(cluster, namespace)
        if 0 not in pods:
            return ""
        return cluster.kubectl("exec", "-n", namespace, pods[0]["metadata"]["name"], "--",
                               "/etc/flux/minicluster/flux-connect", "resource", "list", "-s",
                               "up", "-no", "{nodelist}", check=False).stdout.strip()

    wait_for(lambda: up() == "mc-[0-3]", 600, "4 brokers up")
    before = {i: (p["metadata"]["uid"], p["spec"]["nodeName"])
              for i, p in _pods(cluster, namespace).items()}
    assert len({node for _, node in before.values()}) == 4, before
    fifth = cluster.bed.add_node()
    try:
        started = time.monotonic()
        grown = MiniClusterArgs(**{**args.__dict__, "size": 5})
        keys = derive_cluster_keys(b"e2e dev-stack minicluster seed..", namespace)
        cluster.apply("".join("---\n" + yaml.safe_dump(d, sort_keys=False) for d in
                              [minicluster_keys_secret(grown, keys.curve_cert),
                               *minicluster_manifests(grown)]))
        wait_for(lambda: up() == "mc-[0-4]", 600, "the fifth broker up")
        join = time.monotonic() - started
        after = _pods(cluster, namespace)
        assert {i: (p["metadata"]["uid"], p["spec"]["nodeName"]) for i, p in after.items()
                if i < 4} == before, "no broker was replaced or moved"
        assert after[4]["spec"]["nodeName"] == fifth, after[4]["spec"]["nodeName"]
        print(f"\npersistent MiniCluster 4 -> 5 onto {fifth}: apply -> rank 4 up {join:.1f}s")
    finally:
        cluster.kubectl("delete", "job,podgroup", "mc", "-n", namespace, "--wait=true",
                        "--timeout=120s", check=False, timeout=150)
        cluster.bed.remove_node(fifth, drain=False)


# -- other workloads across the nodes ---------------------------------------------------------

POD = """
apiVersion: v1
kind: Pod
metadata: {{name: {name}, namespace: {namespace}, labels: {labels}}}
spec:
  schedulerName: {scheduler}
  terminationGracePeriodSeconds: 0
  containers:
  - {{name: main, image: {image}, imagePullPolicy: Never,
     resources: {{requests: {{cpu: "{cpu}", memory: 32Mi}}}}}}
"""


def test_a_gang_of_eight_spreads_beside_the_default_schedulers_pods(cluster: Cluster,
                                                                    dev: Deployed, namespace):
    """600m pods: at most three of the gang fit a 2-core node, so eight span three or four
    nodes; the default scheduler's pods, created at the same moment, land on the same nodes,
    and every kubelet admits every pod (none Failed with OutOfcpu)."""
    from kubebed.images import PAUSE_IMAGE

    docs = ["apiVersion: scheduling.x-k8s.io/v1alpha1\nkind: PodGroup\n"
            f"metadata: {{name: eight, namespace: {namespace}}}\nspec: {{minMember: 8}}\n"]
    docs += [POD.format(name=f"gang-{i}", namespace=namespace, scheduler=dev.scheduler,
                        labels="{scheduling.x-k8s.io/pod-group: eight}", image=PAUSE_IMAGE,
                        cpu="600m") for i in range(8)]
    docs += [POD.format(name=f"plain-{i}", namespace=namespace, scheduler="default-scheduler",
                        labels="{app: plain}", image=PAUSE_IMAGE, cpu="100m") for i in range(4)]
    started = time.monotonic()
    cluster.apply("---".join(docs))
    cluster.kubectl("wait", "-n", namespace, "--for=condition=Ready", "pod", "--all",
                    "--timeout=300s", timeout=320)
    elapsed = time.monotonic() - started
    pods = cluster.get("pods", "-n", namespace)["items"]
    assert all(p["status"]["phase"] == "Running" for p in pods), \
        [(p["metadata"]["name"], p["status"].get("reason")) for p in pods]
    gang = {p["metadata"]["name"]: p["spec"]["nodeName"] for p in pods
            if p["metadata"]["name"].startswith("gang-")}
    assert len(gang) == 8 and len(set(gang.values())) >= 3, gang
    for node in set(gang.values()) | {p["spec"]["nodeName"] for p in pods}:
        allocatable = cluster.get("node", node)["status"]["allocatable"]["cpu"]
        held = sum(_milli(c.get("resources", {}).get("requests", {}).get("cpu", "0"))
                   for p in cluster.get("pods", "-A", "--field-selector",
                                        f"spec.nodeName={node}")["items"]
                   if p["status"].get("phase") in ("Pending", "Running")
                   for c in p["spec"]["containers"])
        assert held <= _milli(allocatable), f"{node}: {held}m of {allocatable}"
    print(f"\ngang of 8 x 600m beside 4 default-scheduler pods: all Running {elapsed:.1f}s, "
          f"gang on {len(set(gang.values()))} nodes")


def _milli(quantity: str) -> int:
    return int(quantity[:-1]) if quantity.endswith("m") else int(float(quantity) * 1000)


QUEUED_JOB = """
apiVersion: batch/v1
kind: Job
metadata: {{name: four, namespace: {namespace}}}
spec:
  parallelism: 4
  completions: 4
  template:
    spec:
      schedulerName: {scheduler}
      restartPolicy: Never
      terminationGracePeriodSeconds: 0
      containers:
      - {{name: main, image: {image}, imagePullPolicy: Never, command: [hostname],
         resources: {{requests: {{cpu: 500m, memory: 32Mi}}}}}}
"""


def test_a_queued_job_of_four_pods_is_admitted_and_completes(cluster: Cluster, dev: Deployed):
    """The dev stack's queue (``default/default``): the Job is suspended by the webhook,
    admitted as a FluxJob, its 4 pods placed by the stack's scheduler across the nodes."""
    namespace = "default"
    cluster.kubectl("label", "namespace", namespace, "fluxinfra.io/queue=enabled", "--overwrite")
    try:
        cluster.apply(QUEUED_JOB.format(namespace=namespace, scheduler=dev.scheduler,
                                        image=dev.flux_image))
        job = cluster.get("job", "four", "-n", namespace)
        assert job["spec"].get("suspend") is True, "the webhook suspends a queued Job"
        cluster.kubectl("wait", "-n", namespace, "--for=condition=Complete", "job/four",
                        "--timeout=300s", timeout=320)
        fluxjobs = [f for f in cluster.get("fluxjobs", "-n", namespace)["items"]
                    if any(o.get("name") == "four"
                           for o in f["metadata"].get("ownerReferences", []))
                    or f.get("spec", {}).get("jobName") == "four"]
        assert len(fluxjobs) == 1, cluster.get("fluxjobs", "-n", namespace)["items"]
        pods = cluster.get("pods", "-n", namespace, "-l", "job-name=four")["items"]
        assert len(pods) == 4 and all(p["status"]["phase"] == "Succeeded" for p in pods)
        assert len({p["spec"]["nodeName"] for p in pods}) >= 2, "4 x 500m span the nodes"
    finally:
        cluster.kubectl("delete", "job", "four", "-n", namespace, "--wait=false", check=False)
        cluster.kubectl("label", "namespace", namespace, "fluxinfra.io/queue-", check=False)


def test_a_node_whose_kubelet_stops(cluster: Cluster, dev: Deployed, namespace):
    """As docs/kubernetes.md says: the node goes NotReady and is tainted unreachable; the
    stack's scheduler places nothing new there (a pod pinned to it waits, naming the taint);
    its installer rank stays held; once its kubelet is back the node is Ready, the rank the
    same, and the waiting pod runs there."""
    from kubebed.images import PAUSE_IMAGE

    node = dev.nodes[-1]
    ns = dev.of_kind("DaemonSet")[0]["metadata"]["namespace"]

    def rank_of() -> str:
        ranks = json.loads(cluster.get("configmap", dev.settings["rankMap"], "-n", ns)["data"][
            "ranks.json"])
        return next((r for r, s in ranks["slots"].items() if s["node"] == node), "")

    rank = rank_of()
    assert rank, "the node holds a rank"
    cluster.bed.stop_kubelet(node)
    try:
        started = time.monotonic()

        def tainted() -> bool:
            taints = cluster.get("node", node)["spec"].get("taints", [])
            return any(t["key"] == "node.kubernetes.io/unreachable" for t in taints)
        wait_for(tainted, 180, f"{node} tainted unreachable")
        notready = time.monotonic() - started
        cluster.apply(POD.format(name="pinned", namespace=namespace, scheduler=dev.scheduler,
                                 labels="{app: pinned}", image=PAUSE_IMAGE, cpu="100m")
                      .replace("  schedulerName:", f"  nodeSelector: {{kubernetes.io/hostname: "
                               f"{node}}}\n  schedulerName:"))

        def waiting() -> str:
            conds = cluster.get("pod", "pinned", "-n", namespace)["status"].get("conditions", [])
            return next((c.get("message", "") for c in conds if c["type"] == "PodScheduled"
                         and c["status"] == "False"), "")
        message = wait_for(waiting, 120, "the pinned pod marked unschedulable")
        assert "node.kubernetes.io/unreachable" in message, message
        assert rank_of() == rank, "a NotReady node keeps its rank"
    finally:
        cluster.bed.start_kubelet(node)
    wait_for(lambda: any(c["type"] == "Ready" and c["status"] == "True" for c in
                         cluster.get("node", node)["status"]["conditions"]), 180,
             f"{node} Ready again")
    cluster.kubectl("wait", "-n", namespace, "--for=condition=Ready", "pod/pinned",
                    "--timeout=180s", timeout=200)
    back = time.monotonic() - started
    assert cluster.get("pod", "pinned", "-n", namespace)["spec"]["nodeName"] == node
    assert rank_of() == rank
    print(f"\n{node}: kubelet stopped -> tainted unreachable {notready:.1f}s; kubelet back -> "
          f"the pinned pod Running there {back:.1f}s after the stop; rank {rank} kept")


def test_nothing_of_the_stack_runs_twice_or_restarted(cluster: Cluster, dev: Deployed):
    """After all of the above: no pod of the stack's Deployments or of the installer has
    restarted, and the installer's brokers are still the ones of the first test."""
    for ns in {d["metadata"]["namespace"] for d in dev.of_kind("Deployment")
               + dev.of_kind("DaemonSet")}:
        for pod in cluster.get("pods", "-n", ns)["items"]:
            statuses = pod["status"].get("containerStatuses", [])
            restarts = sum(s.get("restartCount", 0) for s in statuses)
            if restarts:
                name = pod["metadata"]["name"]
                last = [s.get("lastState", {}).get("terminated", {}) for s in statuses]
                events = [f"{e['reason']}: {e.get('message', '')}" for e in cluster.get(
                    "events", "-n", ns, "--field-selector", f"involvedObject.name={name}")[
                    "items"] if e["type"] == "Warning"]
                pytest.fail(f"{ns}/{name} restarted {restarts}x; last ended {last}; "
                            f"warnings: {events[-5:]}")

