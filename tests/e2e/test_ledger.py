"""One ledger for Flux jobs and pods, on the bed's four real nodes with the real Flux build.

The dev stack's installer (``source: prefix``, the ledger on as the stack has it) brings every
node into one instance; then:

* a Flux job holding every core of 2 of the 4 nodes keeps a Deployment of 1-core pods under the
  default scheduler and one under the project's scheduler off those nodes until it ends, then
  their pending pods land there;
* pods filling one node make ``flux run -N4`` wait until they leave;
* at every sample of both, for every node, what Flux has allocated there plus what pods request
  there is at most its cores.
"""

from __future__ import annotations

import json
import shutil
import time
import uuid

import pytest
import yaml
from e2e_cluster import STACK_IMAGE, Cluster, wait_for
from fluxion_scheduler import SchedulerProcess, install, sa_kubeconfig
from test_multinode import (
    FLUX_PREFIX,
    NODES,
    Instance,
    _start_settings,
    installer_only,
    render_dev_with_prefix,
)

from fluxinfra.templates.flux_ledger import (
    JOB_LABEL,
    counts_against_flux,
    idset,
    pod_demand,
)

OWN = {"app.kubernetes.io/name": "flux-installer"}


class Books:
    """Both sides' books, read from the real instance and the real API server."""

    def __init__(self, cluster: Cluster, flux: Instance, ns: str, settings: dict) -> None:
        self.cluster, self.flux, self.ns, self.settings = cluster, flux, ns, settings

    def ranks(self) -> dict[int, str]:
        ranks = json.loads(self.cluster.get("configmap", self.settings["rankMap"], "-n",
                                            self.ns)["data"]["ranks.json"])
        return {int(r): s["node"] for r, s in ranks["slots"].items()}

    def find(self, criteria: str) -> dict[int, set[int]]:
        """Rank -> cores of ``flux ion-resource find <criteria>`` (Fluxion's own view)."""
        out = self.flux.flux("ion-resource", "find", criteria).splitlines()[-1]
        R = json.loads(out) if out.startswith("{") else None
        cores: dict[int, set[int]] = {}
        for entry in ((R or {}).get("execution") or {}).get("R_lite", []):
            for rank in idset(entry["rank"]):
                cores.setdefault(rank, set()).update(idset(entry["children"].get("core", "")))
        return cores

    def pods(self) -> list[dict]:
        return self.cluster.get("pods", "-A")["items"]

    def placeholders(self, job: str = "") -> list[dict]:
        selector = f"{JOB_LABEL}={job}" if job else JOB_LABEL
        return self.cluster.get("pods", "-n", self.ns, "-l", selector)["items"]

    def sample(self) -> dict[str, tuple[int, int, int]]:
        """Node -> (Flux allocated cores, pods' requested cores, cores); asserts the sum fits."""
        ranks = self.ranks()
        allocated = self.find("sched-now=allocated")
        pods = self.pods()
        out = {}
        for rank, node in ranks.items():
            cores = int(self.flux.on(node, "nproc", "--all").strip())
            requested = sum(pod_demand(p)[0] for p in pods
                            if p["spec"].get("nodeName") == node and counts_against_flux(p, OWN))
            flux_cores = len(allocated.get(rank, ()))
            out[node] = (flux_cores, requested, cores)
            assert flux_cores * 1000 + requested <= cores * 1000, \
                f"{node} overcommitted: Flux {flux_cores} cores + pods {requested}m > {cores}"
        return out


@pytest.fixture(scope="module")
def books(cluster: Cluster, fluxinfra_image, tmp_path_factory) -> Books:
    if len(cluster.real_nodes) < NODES:
        pytest.skip(f"needs a bed of {NODES} real nodes (FLUXINFRA_E2E_NODES={NODES})")
    if not (FLUX_PREFIX / "bin" / "flux").exists():
        pytest.skip(f"no Flux build at {FLUX_PREFIX} (FLUXINFRA_FLUX_PREFIX)")
    nodes = cluster.real_nodes[:NODES]
    tmp = tmp_path_factory.mktemp("ledger")
    out = render_dev_with_prefix(tmp)
    files = installer_only(out)
    scripts = next(yaml.safe_load(p.read_text()) for p in files
                   if p.name.startswith("configmap-"))
    settings = json.loads(scripts["data"]["node-watch.json"])
    assert settings["ledger"] is True, "the dev stack runs the ledger"
    label = next(iter(settings["nodeSelector"].items()))
    daemonset = next(yaml.safe_load(p.read_text()) for p in files
                     if p.name.startswith("daemonset-"))
    ns = daemonset["metadata"]["namespace"]
    cluster.bed.tag_image(STACK_IMAGE, "localhost/fluxinfra:0.1.0")
    flux = Instance(cluster, nodes[0], _start_settings(out, settings))
    try:
        for node in nodes:
            cluster.kubectl("label", "node", node, f"{label[0]}={label[1]}", "--overwrite")
        first = [p for p in files if p.name.startswith(("namespace-", "priorityclass-"))]
        cluster.kubectl("apply", *[a for p in first for a in ("-f", str(p))])
        cluster.kubectl("apply", *[a for p in files if p not in first for a in ("-f", str(p))])
        expect = f"{settings['hostPrefix']}[0-{NODES - 1}]"
        wait_for(lambda: flux.up() == expect, 600, f"ranks {expect} up")
        # the ledger is through the journal once a job passes the prolog
        flux.flux("run", "-N1", "true", timeout=180)
        yield Books(cluster, flux, ns, settings)
    finally:
        for pod in cluster.get("pods", "-n", ns, "-l", "app.kubernetes.io/name=flux-installer"
                               )["items"]:
            log = cluster.kubectl("logs", "-n", ns, pod["metadata"]["name"], "-c", "ledger",
                                  check=False).stdout
            print(f"--- ledger log of {pod['spec'].get('nodeName')}:\n{log[-3000:]}")
        cluster.kubectl("delete", "daemonset", "-n", ns, "--all", "--wait=true",
                        "--timeout=180s", check=False, timeout=200)
        cluster.kubectl("delete", "namespace", ns, "--wait=false", check=False)
        cluster.kubectl("delete", "clusterrole,clusterrolebinding", "flux-installer-nodes",
                        check=False)
        cluster.kubectl("delete", "priorityclass", settings["ledgerPriorityClass"],
                        check=False)
        for node in cluster.real_nodes:
            cluster.kubectl("label", "node", node, f"{label[0]}-", check=False)
            cluster.bed.exec_on(node, ["sh", "-c", f"{settings['libDir']}/flux-start.sh stop; "
                                       f"rm -rf {settings['libDir']} {settings['etcDir']}"],
                                check=False, timeout=150)
        shutil.rmtree(tmp, ignore_errors=True)


@pytest.fixture(scope="module")
def fluxion(cluster: Cluster, tmp_path_factory):
    """The project's scheduler, as its ServiceAccount, beside the default one."""
    tag = uuid.uuid4().hex[:6]
    namespace, sa, name = f"fluxion-{tag}", f"fluxion-e2e-{tag}", f"fluxion-{tag}"
    cluster.kubectl("create", "namespace", namespace)
    install(cluster, sa, namespace, name)
    tmp = tmp_path_factory.mktemp("fluxion")
    kubeconfig = sa_kubeconfig(cluster, sa, namespace, tmp / "sa.kubeconfig")
    proc = SchedulerProcess(kubeconfig, name, tmp / "scheduler.log").start()
    yield name
    proc.stop()
    cluster.kubectl("delete", "namespace", namespace, "--wait=false", check=False)
    for kind in ("clusterrole", "clusterrolebinding"):
        cluster.kubectl("delete", kind, sa, check=False)


def deployment(name: str, ns: str, replicas: int, image: str, scheduler: str = "",
               node: str = "") -> dict:
    spec: dict = {"terminationGracePeriodSeconds": 1, "containers": [{
        "name": "c", "image": image, "imagePullPolicy": "Never", "command": ["sleep", "3600"],
        "resources": {"requests": {"cpu": "1"}}}]}
    if scheduler:
        spec["schedulerName"] = scheduler
    if node:
        spec["nodeSelector"] = {"kubernetes.io/hostname": node}
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}}, "spec": spec}}}


def _pods(books: Books, ns: str) -> list[dict]:
    return [p for p in books.cluster.get("pods", "-n", ns)["items"]
            if not p["metadata"].get("deletionTimestamp")]


def _job_state(books: Books, job: str) -> str:
    return books.flux.flux("jobs", "-no", "{status_abbrev}", job).strip()


def test_a_flux_job_keeps_pods_of_both_schedulers_off_its_nodes(books: Books, fluxion, busybox,
                                                                 namespace):
    ranks = books.ranks()
    job = books.flux.flux("submit", "-N2", "sleep", "3600").strip()
    dec = books.flux.flux("job", "id", "--to=dec", job).strip()
    submitted = time.monotonic()
    books.flux.flux("job", "wait-event", "-t", "120", job, "start", timeout=150)
    started = time.monotonic() - submitted
    holds = books.placeholders(dec)
    held = sorted(p["spec"]["nodeName"] for p in holds)
    assert len(held) == 2 and all(p["status"]["phase"] == "Running" for p in holds), holds
    cores = {n: int(books.flux.on(n, "nproc", "--all").strip()) for n in ranks.values()}
    for p in holds:
        assert p["spec"]["containers"][0]["resources"]["requests"]["cpu"] == \
            str(cores[p["spec"]["nodeName"]]), "the placeholder asks every core the job holds"
    free = sum(c for n, c in cores.items() if n not in held)
    replicas = free // 2 + 1        # each Deployment: together one more than the free nodes hold
    books.cluster.apply(yaml.safe_dump_all([
        deployment("plain", namespace, replicas, busybox),
        deployment("ours", namespace, replicas, busybox, scheduler=fluxion)]))
    samples = []

    def settled() -> bool:
        samples.append(books.sample())
        running = [p for p in _pods(books, namespace) if p["status"].get("phase") == "Running"]
        return len(running) == free
    wait_for(settled, 180, f"{free} pods running on the free nodes")
    time.sleep(5)   # a scheduler that would still put one on a held node has had its chance
    pods = _pods(books, namespace)
    on_held = [p["metadata"]["name"] for p in pods if p["spec"].get("nodeName") in held]
    assert not on_held, f"pods on the job's nodes {held}: {on_held}"
    pending = [p for p in pods if not p["spec"].get("nodeName")]
    assert len(pending) == 2 * replicas - free, pods
    assert {p["spec"].get("schedulerName") for p in pods} == {"default-scheduler", fluxion}
    # Kubernetes -> Flux: the nodes the pods run on are withheld from Flux
    down = books.find("status=down")
    for rank, node in ranks.items():
        if node not in held:
            assert down.get(rank) == set(range(cores[node])), (node, down)
    samples.append(books.sample())

    books.flux.flux("cancel", job)
    ended = time.monotonic()
    wait_for(lambda: len([p for p in _pods(books, namespace)
                          if p["status"].get("phase") == "Running"]) == 2 * replicas,
             180, "the pending pods running once the job ended")
    landed = time.monotonic() - ended
    nodes_now = {p["spec"]["nodeName"] for p in _pods(books, namespace)}
    assert nodes_now & set(held), f"no pod on the job's nodes after it ended: {nodes_now}"
    assert not books.placeholders(dec), "the job's placeholders are gone"
    samples.append(books.sample())
    books.cluster.kubectl("delete", "deployment", "--all", "-n", namespace)
    wait_for(lambda: not _pods(books, namespace), 120, "the pods gone")
    wait_for(lambda: not books.find("status=down"), 60, "every core up again in Flux")
    print(f"\nledger: job -N2 submit -> start {started:.1f}s (placeholders admitted); "
          f"held {held}; {free} pods ran beside it, {2 * replicas - free} waited; job cancel "
          f"-> waiting pods running {landed:.1f}s; {len(samples)} samples within capacity")


def test_pods_filling_a_node_make_flux_run_wait(books: Books, busybox, namespace):
    ranks = books.ranks()
    node_a = ranks[1]
    cores = int(books.flux.on(node_a, "nproc", "--all").strip())
    books.cluster.apply(yaml.safe_dump(deployment("fill", namespace, cores, busybox,
                                                  node=node_a)))
    wait_for(lambda: len([p for p in _pods(books, namespace)
                          if p["status"].get("phase") == "Running"]) == cores, 120,
             f"{cores} pods running on {node_a}")
    wait_for(lambda: books.find("status=down").get(1) == set(range(cores)), 30,
             f"{node_a}'s cores down in Flux")
    job = books.flux.flux("submit", "-N4", "hostname").strip()
    for _ in range(10):
        time.sleep(1)
        books.sample()
        assert _job_state(books, job) in ("S", "PR"), \
            f"flux run -N4 started while pods fill {node_a}"
    books.cluster.kubectl("delete", "deployment", "fill", "-n", namespace)
    gone = time.monotonic()
    wait_for(lambda: _job_state(books, job) == "CD", 120, "the -N4 job done once pods left")
    ran = time.monotonic() - gone
    hosts = books.flux.flux("job", "attach", job).split()
    assert sorted(hosts) == sorted(ranks[r] for r in range(NODES)), hosts
    print(f"\nledger: -N4 waited while {cores} pods filled {node_a}; pods deleted -> job done "
          f"{ran:.1f}s")
