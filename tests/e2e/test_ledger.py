"""One ledger for Flux jobs and pods, on the bed's four real nodes with the real Flux build.

The dev stack's installer (``source: prefix``, the ledger on as the stack has it) brings every
node into one instance; then:

* a Flux job holding every core of 2 of the 4 nodes keeps a Deployment of 1-core pods under the
  default scheduler and one under the project's scheduler off those nodes until it ends, then
  their pending pods land there;
* pods filling one node make ``flux run -N4`` wait until they leave;
* a mixed workload of Flux jobs, batch pods under both schedulers and gangs, both books sampled
  once a second: at every sample, for every node, the cores Flux runs started jobs on plus what
  pods request there is at most its cores.
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from e2e_cluster import Cluster, wait_for
from fluxion_scheduler import running_scheduler
from ledger_env import Books, Sampler, import_saved_image, installer_with_ledger
from test_multinode import FLUX_PREFIX, NODES

from fluxinfra.templates.flux_ledger import admission


@pytest.fixture(scope="module")
def installer_image(request, cluster: Cluster) -> str:
    """The image the installer's pods run: the project's (``make image``), or, with
    ``FLUXINFRA_E2E_IMAGE_TAR`` naming a ``podman save`` of a fluxinfra image, that one (the
    installer's scripts come from its ConfigMap, so any fluxinfra image runs them; this saves a
    rebuild when iterating on a bed of one's own)."""
    tar = os.environ.get("FLUXINFRA_E2E_IMAGE_TAR")
    if not tar:
        return request.getfixturevalue("fluxinfra_image")
    return import_saved_image(cluster, Path(tar))


@pytest.fixture(scope="module")
def books(cluster: Cluster, installer_image, tmp_path_factory) -> Iterator[Books]:
    if len(cluster.real_nodes) < NODES:
        pytest.skip(f"needs a bed of {NODES} real nodes (FLUXINFRA_E2E_NODES={NODES})")
    if not (FLUX_PREFIX / "bin" / "flux").exists():
        pytest.skip(f"no Flux build at {FLUX_PREFIX} (FLUXINFRA_FLUX_PREFIX)")
    with installer_with_ledger(cluster, tmp_path_factory.mktemp("ledger")) as found:
        yield found


@pytest.fixture(scope="module")
def fluxion(cluster: Cluster, tmp_path_factory) -> Iterator[str]:
    """The project's scheduler, as its ServiceAccount, beside the default one."""
    with running_scheduler(cluster, tmp_path_factory.mktemp("fluxion")) as run:
        yield run.name


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
    assert len(held) == 2 and all(admission(p) for p in holds), \
        f"the job started before its node's kubelet admitted its placeholder: {holds}"
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
    # (Fluxion keeps the cores of ranks no node holds down itself)
    wait_for(lambda: not any(books.find("status=down").get(r) for r in ranks), 60,
             "every core of the nodes' ranks up again in Flux")
    print(f"\nledger: job -N2 submit -> start {started:.1f}s (placeholders admitted); "
          f"held {held}; {free} pods ran beside it, {2 * replicas - free} waited; job cancel "
          f"-> waiting pods running {landed:.1f}s; {len(samples)} samples within capacity")


def test_pods_filling_a_node_make_flux_run_wait(books: Books, busybox, namespace):
    ranks = books.ranks()
    rank_a = min(r for r in ranks if r != 0)
    node_a = ranks[rank_a]
    cores = int(books.flux.on(node_a, "nproc", "--all").strip())
    books.cluster.apply(yaml.safe_dump(deployment("fill", namespace, cores, busybox,
                                                  node=node_a)))
    wait_for(lambda: len([p for p in _pods(books, namespace)
                          if p["status"].get("phase") == "Running"]) == cores, 120,
             f"{cores} pods running on {node_a}")
    wait_for(lambda: books.find("status=down").get(rank_a) == set(range(cores)), 30,
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
    assert sorted(hosts) == sorted(ranks.values()), hosts
    print(f"\nledger: -N4 waited while {cores} pods filled {node_a}; pods deleted -> job done "
          f"{ran:.1f}s")


MIX_SECONDS = float(os.environ.get("FLUXINFRA_LEDGER_MIX_SECONDS", "120"))


def test_a_mixed_workload_never_overcommits_a_node(books: Books, fluxion, busybox, namespace):
    """Flux jobs of random size and length submitted beside batch pods under both schedulers
    and a gang under ours, both books sampled once a second throughout: on every node, what
    Flux runs started jobs on plus what pods request fits its cores at every sample, and every
    job and pod completes. ``FLUXINFRA_LEDGER_MIX_SECONDS`` (default 120; the issue's 600)."""
    rng = random.Random(38)
    jobs: list[str] = []
    pods = 0
    sampler = Sampler(books)
    sampler.start()
    started = time.monotonic()
    next_submit = 0.0
    try:
        while time.monotonic() - started < MIX_SECONDS:
            now = time.monotonic() - started
            if now >= next_submit:
                size = rng.choice([["-n1"], ["-n2"], ["-N1"], ["-N2"], ["-n1", "-c2"]])
                jobs.append(books.flux.flux("submit", *size, "sleep",
                                            str(rng.randint(2, 8))).strip())
                # batch Jobs: a pod the kubelet refuses (a placeholder got there first) is
                # replaced by its Job, as any controller's would be
                batch = [batch_job(f"p{pods + i}", namespace, busybox, rng.randint(2, 8),
                                   fluxion if i % 2 else "") for i in range(2)]
                if len(jobs) % 4 == 0:
                    batch += gang(f"g{len(jobs)}", namespace, busybox, fluxion, 2)
                pods += len(batch) if len(jobs) % 4 else len(batch) - 1
                books.cluster.apply(yaml.safe_dump_all(batch))
                # a rate the four 2-core nodes keep up with (about a third of their cores):
                # faster, the queue of both grows for the whole run
                next_submit = now + rng.uniform(8, 16)
            if sampler.error is not None:
                break
            time.sleep(0.2)
        wait_for(lambda: sampler.error is not None or all(
            _job_state(books, j) in ("CD", "CA", "F", "TO") for j in jobs), 300,
            "every Flux job ended")
        states = {j: _job_state(books, j) for j in jobs}
        assert sampler.error is not None or set(states.values()) == {"CD"}, states

        succeeded = [0]

        def pods_done() -> bool:
            if sampler.error is not None:
                return True
            done = [j for j in books.cluster.get("jobs", "-n", namespace)["items"]
                    if j["status"].get("succeeded")]
            gangs = [p for p in books.cluster.get("pods", "-n", namespace, "-l",
                                                  "scheduling.x-k8s.io/pod-group")["items"]
                     if p["status"].get("phase") == "Succeeded"]
            succeeded[0] = len(done) + len(gangs)
            return succeeded[0] == pods
        try:
            wait_for(pods_done, max(300, MIX_SECONDS), f"all {pods} batch Jobs and gang pods "
                     "succeeded")
        except AssertionError as exc:
            raise AssertionError(f"{exc}: {succeeded[0]} of {pods} done") from None
    finally:
        samples = sampler.finish()  # raises what a sample found (an overcommitted node)
    gaps = [b.at - a.at for a, b in zip(samples, samples[1:], strict=False)]
    took = sorted(s.took for s in samples)
    waiting = sum(1 for s in samples if s.waiting)
    span = samples[-1].at - samples[0].at
    print(f"\nledger mixed workload: {MIX_SECONDS:.0f}s of arrivals, {len(jobs)} Flux jobs and "
          f"{pods} pods (batch Jobs under the default scheduler and {fluxion}, gangs of 2) all "
          f"completed; {len(samples)} samples over {span:.0f}s, every node within its cores "
          f"at each (largest gap between samples {max(gaps):.2f}s, a sample read in "
          f"{took[len(took) // 2]:.2f}s median, {took[-1]:.2f}s largest); {waiting} samples "
          "with a job waiting in its prolog beside a pod")


def batch_pod(name: str, ns: str, image: str, seconds: int, scheduler: str = "",
              labels: dict | None = None) -> dict:
    spec: dict = {"restartPolicy": "Never", "terminationGracePeriodSeconds": 1, "containers": [{
        "name": "c", "image": image, "imagePullPolicy": "Never",
        "command": ["sleep", str(seconds)], "resources": {"requests": {"cpu": "1"}}}]}
    if scheduler:
        spec["schedulerName"] = scheduler
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": ns, "labels": labels or {}}, "spec": spec}


def batch_job(name: str, ns: str, image: str, seconds: int, scheduler: str = "") -> dict:
    pod = batch_pod(name, ns, image, seconds, scheduler)
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"backoffLimit": 6, "template": {"spec": pod["spec"]}}}


def gang(name: str, ns: str, image: str, scheduler: str, size: int) -> list[dict]:
    group = {"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
             "metadata": {"name": name, "namespace": ns}, "spec": {"minMember": size}}
    return [group] + [batch_pod(f"{name}-{i}", ns, image, 4, scheduler,
                                {"scheduling.x-k8s.io/pod-group": name}) for i in range(size)]
