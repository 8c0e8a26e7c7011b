"""The installer with its ledger on the bed's real nodes, for tests/e2e/test_ledger.py and
benchmarks/flux_ledger.py: the dev stack's installer rendered with ``source: prefix`` (the Flux
build at $FLUXINFRA_FLUX_PREFIX) applied to four real nodes, and both sides' books read from
the real instance and the real API server."""

from __future__ import annotations

import json
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from e2e_cluster import STACK_IMAGE, Cluster, wait_for
from flux_instance import (
    Instance,
    apply_installer,
    remove_installer,
    render_dev_with_prefix,
    start_settings,
)
from test_multinode import NODES, installer_only

from fluxinfra.k8s.fluxconf import hostlist_decode
from fluxinfra.templates.flux_ledger import (
    JOB_LABEL,
    admission,
    counts_against_flux,
    pod_demand,
)

__all__ = ["Books", "Sample", "Sampler", "import_saved_image", "installer_with_ledger"]

OWN = {"app.kubernetes.io/name": "flux-installer"}


#: Runs on the lead with Flux's Python, as the instance owner, for as long as the books are
#: read: each request line is answered with one JSON line, rank -> cores. ``started``: the cores
#: of every running job with a ``start`` event; ``find CRITERIA``: Fluxion's own view
#: (``sched-fluxion-resource.find``, what ``flux ion-resource find`` asks). One process and one
#: broker connection for every read, so a sample takes a few round trips, not processes.
READER = """
import json, sys, flux
from flux.job import JobList, job_kvs_lookup
h = flux.Flux()
def ids(text):
    out = []
    for part in (text or "").split(","):
        if part:
            lo, _, hi = part.partition("-")
            out.extend(range(int(lo), int(hi or lo) + 1))
    return out
def add(out, R):
    if isinstance(R, str):
        R = json.loads(R) if R.startswith("{") else None
    for e in ((R or {}).get("execution") or {}).get("R_lite", []):
        for rank in ids(e["rank"]):
            out.setdefault(rank, []).extend(ids(e["children"].get("core")))
    return out
def started():
    out = {}
    for job in JobList(h, filters=["running"], attrs=["state"]).jobs():
        info = job_kvs_lookup(h, job.id, keys=["eventlog", "R"])
        if info and '"name":"start"' in info["eventlog"]:
            add(out, info["R"])
    return out
for line in sys.stdin:
    what, _, criteria = line.strip().partition(" ")
    try:
        if what == "started":
            answer = started()
        else:
            answer = add({}, h.rpc("sched-fluxion-resource.find",
                                   {"criteria": criteria}).get().get("R"))
        print(json.dumps(answer), flush=True)
    except Exception as exc:
        print(json.dumps({"error": f"{what} {criteria}: {exc}"}), flush=True)
"""


@dataclass
class Sample:
    """Node -> (cores Flux runs started jobs on, millicores pods request, cores); ``waiting``:
    nodes where Fluxion's allocation (a job waiting in its prolog included) plus pods exceed
    the cores; ``at``: when it was taken, ``took``: seconds reading both books."""

    nodes: dict[str, tuple[int, int, int]] = field(default_factory=dict)
    waiting: list[str] = field(default_factory=list)
    at: float = 0.0
    took: float = 0.0


class Books:
    """Both sides' books, read from the real instance (one reader process on the lead, see
    :data:`READER`) and the real API server (one HTTPS connection)."""

    def __init__(self, cluster: Cluster, flux: Instance, ns: str, settings: dict) -> None:
        self.cluster, self.flux, self.ns, self.settings = cluster, flux, ns, settings
        self._cores: dict[str, int] = {}
        self._reader: subprocess.Popen | None = None
        self._lock = threading.Lock()
        self._rest = cluster.bed.rest()

    def close(self) -> None:
        if self._reader is not None:
            self._reader.stdin.close()
            try:
                self._reader.wait(10)
            except subprocess.TimeoutExpired:
                self._reader.kill()
                self._reader.wait()
            self._reader = None
        self._rest.close()

    def _ask(self, request: str) -> dict[int, set[int]]:
        with self._lock:
            if self._reader is None or self._reader.poll() is not None:
                flux, run_dir = self.flux, self.settings["runDir"]
                owner = flux.on(flux.lead, "stat", "-c", "%U", run_dir).strip()
                argv = ["runuser", "-u", owner, "--", "env", f"FLUX_URI=local://{run_dir}/local",
                        f"{self.settings['prefix']}/bin/flux", "python", "-c", READER]
                self._reader = subprocess.Popen(
                    self.cluster.bed.node(flux.lead).enter(argv), stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE, text=True, bufsize=1)
            self._reader.stdin.write(request + "\n")
            self._reader.stdin.flush()
            line = self._reader.stdout.readline()
        if not line:
            raise AssertionError(f"the books' reader on {self.flux.lead} exited "
                                 f"({self._reader.poll()}) answering {request!r}")
        answer = json.loads(line)
        if "error" in answer:
            raise AssertionError(f"the books' reader: {answer['error']}")
        return {int(r): set(c) for r, c in answer.items()}

    def ranks(self) -> dict[int, str]:
        cm = self._rest.get(f"/api/v1/namespaces/{self.ns}/configmaps/"
                            f"{self.settings['rankMap']}")
        ranks = json.loads(cm["data"]["ranks.json"])
        return {int(r): s["node"] for r, s in ranks["slots"].items()}

    def find(self, criteria: str) -> dict[int, set[int]]:
        """Rank -> cores of ``flux ion-resource find <criteria>`` (Fluxion's own view)."""
        return self._ask(f"find {criteria}")

    def started(self) -> dict[int, set[int]]:
        """Rank -> cores of the running jobs that have started (past the ledger's prolog):
        what Flux runs work on. A job still in its prolog holds its cores in Fluxion but
        runs nothing on them."""
        return self._ask("started")

    def pods(self) -> list[dict]:
        return self._rest.get("/api/v1/pods")["items"]

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
        cores Flux runs jobs on plus what the pods its kubelet admitted request fit its
        cores."""
        began = time.monotonic()
        ranks = self.ranks()
        before = self.started()
        pods = self.pods()
        after = self.started()
        allocated = self.find("sched-now=allocated")
        sample = Sample(at=began, took=time.monotonic() - began)
        for rank, node in ranks.items():
            cores = self.cores(node)
            # what pods hold: those the node's kubelet admitted (a pod two schedulers raced
            # onto a full node is bound but refused, OutOfcpu, and never runs)
            holding = [p for p in pods if p["spec"].get("nodeName") == node
                       and counts_against_flux(p, OWN) and admission(p)]
            requested = sum(pod_demand(p)[0] for p in holding)
            running = len(before.get(rank, set()) & after.get(rank, set()))
            sample.nodes[node] = (running, requested, cores)
            assert running * 1000 + requested <= cores * 1000, \
                f"{node} overcommitted: Flux runs on {running} cores + pods {requested}m > " \
                f"{cores}: " + ", ".join(
                    f"{p['metadata']['namespace']}/{p['metadata']['name']} "
                    f"{(p.get('status') or {}).get('phase')} {pod_demand(p)[0]}m"
                    for p in holding)
            if len(allocated.get(rank, ())) * 1000 + requested > cores * 1000:
                sample.waiting.append(node)
        return sample


class Sampler(threading.Thread):
    """:meth:`Books.sample` once a second (each sample starts on the next whole second after
    the last one began) until :meth:`finish`, which returns the samples and raises what a
    sample raised (an overcommitted node)."""

    def __init__(self, books: Books, every: float = 1.0) -> None:
        super().__init__(daemon=True)
        self.books, self.every = books, every
        self.samples: list[Sample] = []
        self.error: BaseException | None = None
        self._halt = threading.Event()

    def run(self) -> None:
        try:
            while not self._halt.is_set():
                sample = self.books.sample()
                self.samples.append(sample)
                self._halt.wait(max(0.0, sample.at + self.every - time.monotonic()))
        except BaseException as exc:  # noqa: BLE001 - handed to the test by finish()
            self.error = exc

    def finish(self) -> list[Sample]:
        self._halt.set()
        self.join(120)
        if self.error is not None:
            raise self.error
        return self.samples


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
        apply_installer(cluster, files, ns, ("namespace-", "priorityclass-"))
        wait_for(lambda: _ranks_up(flux) == NODES, 600, f"{NODES} ranks up")
        # the ledger is through the journal once a job passes the prolog
        flux.flux("run", "-N1", "true", timeout=180)
        books = Books(cluster, flux, ns, settings)
        try:
            yield books
        finally:
            books.close()
    finally:
        for pod in cluster.get("pods", "-n", ns, "-l", "app.kubernetes.io/name=flux-installer"
                               )["items"]:
            text = cluster.kubectl("logs", "-n", ns, pod["metadata"]["name"], "-c", "ledger",
                                   check=False).stdout
            log(f"--- ledger log on {pod['spec'].get('nodeName')}:\n{text[-3000:]}")
        remove_installer(cluster, ns, label[0], settings,
                         ("priorityclass", settings["ledgerPriorityClass"]))
        shutil.rmtree(tmp, ignore_errors=True)
