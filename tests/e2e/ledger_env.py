"""The installer with its ledger on the bed's real nodes, for tests/e2e/test_ledger.py and
benchmarks/flux_ledger.py: the dev stack's installer rendered with ``source: prefix`` (the Flux
build at $FLUXINFRA_FLUX_PREFIX) applied to four real nodes, and both sides' books read from
the real instance and the real API server."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from e2e_cluster import STACK_IMAGE, Cluster, wait_for
from flux_instance import Instance, clear_installer_nodes, render_dev_with_prefix, start_settings
from test_multinode import NODES, installer_only

from fluxinfra.k8s.fluxconf import hostlist_decode
from fluxinfra.templates.flux_ledger import (
    JOB_LABEL,
    counts_against_flux,
    idset,
    pod_demand,
)

__all__ = ["Books", "import_saved_image", "installer_with_ledger"]

OWN = {"app.kubernetes.io/name": "flux-installer"}


#: Run with Flux's Python on the lead: rank -> cores of every running job with a ``start``
#: event, as JSON.
STARTED = """
import json, flux
from flux.job import JobList, job_kvs_lookup
h = flux.Flux()
out = {}
for job in JobList(h, filters=["running"], attrs=["state"]).jobs():
    info = job_kvs_lookup(h, job.id, keys=["eventlog", "R"])
    if not info or '"name":"start"' not in info["eventlog"]:
        continue
    for e in info["R"]["execution"]["R_lite"]:
        for part in e["rank"].split(","):
            lo, _, hi = part.partition("-")
            for rank in range(int(lo), int(hi or lo) + 1):
                cores = out.setdefault(rank, [])
                for c in e["children"].get("core", "").split(","):
                    a, _, b = c.partition("-")
                    cores.extend(range(int(a), int(b or a) + 1))
print(json.dumps(out))
"""


@dataclass
class Sample:
    """Node -> (cores Flux runs started jobs on, millicores pods request, cores); ``waiting``:
    nodes where Fluxion's allocation (a job waiting in its prolog included) plus pods exceed
    the cores."""

    nodes: dict[str, tuple[int, int, int]] = field(default_factory=dict)
    waiting: list[str] = field(default_factory=list)


class Books:
    """Both sides' books, read from the real instance and the real API server."""

    def __init__(self, cluster: Cluster, flux: Instance, ns: str, settings: dict) -> None:
        self.cluster, self.flux, self.ns, self.settings = cluster, flux, ns, settings
        self._cores: dict[str, int] = {}

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

    def started(self) -> dict[int, set[int]]:
        """Rank -> cores of the running jobs that have started (past the ledger's prolog):
        what Flux runs work on. A job still in its prolog holds its cores in Fluxion but
        runs nothing on them."""
        out = self.flux.flux("python", "-c", STARTED, timeout=60).strip() or "{}"
        return {int(r): set(c) for r, c in json.loads(out).items()}

    def pods(self) -> list[dict]:
        return self.cluster.get("pods", "-A")["items"]

    def placeholders(self, job: str = "") -> list[dict]:
        selector = f"{JOB_LABEL}={job}" if job else JOB_LABEL
        return self.cluster.get("pods", "-n", self.ns, "-l", selector)["items"]

    def cores(self, node: str) -> int:
        if node not in self._cores:
            self._cores[node] = int(self.flux.on(node, "nproc", "--all").strip())
        return self._cores[node]

    def sample(self) -> Sample:
        """Both books at one moment: Flux's started jobs read before and after the pods, and
        only cores they held at both reads counted (so a job and a pod that followed each
        other between the reads are not taken for a pair); asserts that on every node the
        cores Flux runs jobs on plus what pods request fit its cores."""
        ranks = self.ranks()
        before = self.started()
        pods = self.pods()
        after = self.started()
        allocated = self.find("sched-now=allocated")
        sample = Sample()
        for rank, node in ranks.items():
            cores = self.cores(node)
            requested = sum(pod_demand(p)[0] for p in pods
                            if p["spec"].get("nodeName") == node and counts_against_flux(p, OWN))
            running = len(before.get(rank, set()) & after.get(rank, set()))
            sample.nodes[node] = (running, requested, cores)
            assert running * 1000 + requested <= cores * 1000, \
                f"{node} overcommitted: Flux runs on {running} cores + pods {requested}m > {cores}"
            if len(allocated.get(rank, ())) * 1000 + requested > cores * 1000:
                sample.waiting.append(node)
        return sample



def import_saved_image(cluster: Cluster, tar: Path) -> str:
    """A ``podman save`` of a fluxinfra image (``localhost/fluxinfra:0.1.0``) into every node
    as the stacks name it, unless the nodes have it already (a bed one keeps between runs). The
    installer's scripts come from its ConfigMap, so any fluxinfra image runs them."""
    bed = cluster.bed
    have = [subprocess.run(bed.ctr("images", "ls", "-q", node=n), capture_output=True,
                           text=True, check=False).stdout.split() for n in bed.node_names]
    if not all(f"docker.io/library/{STACK_IMAGE}" in names for names in have):
        bed.import_image(tar, tags={"localhost/fluxinfra:0.1.0": STACK_IMAGE})
    return STACK_IMAGE


def _ranks_up(flux: Instance) -> int:
    """How many ranks are up (0 while the broker has no run directory yet). Which ranks the
    nodes hold is node-watch's business (a rank a gone node held stays held until reused)."""
    try:
        up = flux.up()
    except AssertionError:
        return 0
    return len(hostlist_decode(up)) if up else 0


@contextmanager
def installer_with_ledger(cluster: Cluster, tmp: Path, log=print) -> Iterator[Books]:
    """The dev stack's installer over the bed's first four real nodes, every rank up and one
    job through the ledger's prolog; everything removed again afterwards."""
    nodes = cluster.real_nodes[:NODES]
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
    flux = Instance(cluster, nodes[0], start_settings(out, settings))
    try:
        for node in nodes:
            cluster.kubectl("label", "node", node, f"{label[0]}={label[1]}", "--overwrite")
        first = [p for p in files if p.name.startswith(("namespace-", "priorityclass-"))]
        cluster.kubectl("apply", *[a for p in first for a in ("-f", str(p))])
        cluster.kubectl("apply", *[a for p in files if p not in first for a in ("-f", str(p))])
        wait_for(lambda: _ranks_up(flux) == NODES, 600, f"{NODES} ranks up")
        # the ledger is through the journal once a job passes the prolog
        flux.flux("run", "-N1", "true", timeout=180)
        yield Books(cluster, flux, ns, settings)
    finally:
        for pod in cluster.get("pods", "-n", ns, "-l", "app.kubernetes.io/name=flux-installer"
                               )["items"]:
            text = cluster.kubectl("logs", "-n", ns, pod["metadata"]["name"], "-c", "ledger",
                                   check=False).stdout
            log(f"--- ledger log on {pod['spec'].get('nodeName')}:\n{text[-3000:]}")
        cluster.kubectl("delete", "daemonset", "-n", ns, "--all", "--wait=true",
                        "--timeout=180s", check=False, timeout=200)
        cluster.kubectl("delete", "namespace", ns, "--wait=false", check=False)
        cluster.kubectl("delete", "clusterrole,clusterrolebinding", "flux-installer-nodes",
                        check=False)
        cluster.kubectl("delete", "priorityclass", settings["ledgerPriorityClass"],
                        check=False)
        clear_installer_nodes(cluster, label[0], settings)
        shutil.rmtree(tmp, ignore_errors=True)
