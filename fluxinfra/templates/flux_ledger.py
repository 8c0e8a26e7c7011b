"""One ledger for Flux jobs and Kubernetes pods on the same nodes (standard library only).

The installer's ``ledger`` container runs this beside node-watch on every node; it acts only on
the node that holds rank 0 (the lead broker, where the job-manager and Fluxion run) and idles
elsewhere, re-reading the rank map, so a new lead takes over on its own.

**Flux -> Kubernetes.** ``ledger-feed.py`` (run on the node with Flux's Python, as the instance
owner) streams the job-manager's journal: every job the instance still knows, then live events.
For each running job (``alloc`` .. ``free``/``clean``) and each rank it holds that a node holds
(the rank map), the ledger keeps one **placeholder pod** ``flux-job-<id>-<rank>`` in its own
namespace, bound to that node (``spec.nodeName``: no scheduler involved), requesting the cores
(and GPUs) the job holds there, with a non-preempting PriorityClass. Every scheduler, the
kubelet's admission and cluster-autoscaler count it as they count any pod. It is deleted when the
job frees its resources. A restart rebuilds everything from the journal's history.

**Kubernetes -> Flux.** Every other bound, unfinished pod on a node with a rank (the
installer's own pods and the placeholders excepted) withholds that node from Flux: the ledger
marks **every core** of the rank down in Fluxion (``set_status``), and up again once no such pod
requests CPU there. Every core, not just as many as pods request: flux-sched 0.54 gives a
node-exclusive request (``flux run -N``) a node whose cores are only partly down, down ones
included, and a node vertex marked down makes such a job fail as unsatisfiable instead of
waiting; with all its cores down, the job waits.

**Races.** The lead broker's job-manager runs ``ledger-prolog.sh`` before every job starts: it
waits until the ledger has every placeholder of the job admitted by its node's kubelet (writes
``<ledgerDir>/admitted/<id>``). A placeholder the kubelet rejects (a pod came first: OutOfcpu) is
deleted and created again until it fits, so the job waits for the pod, never beside it.

Usage: python3 flux_ledger.py node-watch.json       (the installer's ledger container)
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

ROLE_LABEL = "fluxinfra.io/role"
PLACEHOLDER_ROLE = "flux-job-hold"
JOB_LABEL = "fluxinfra.io/flux-job"
RANK_LABEL = "fluxinfra.io/flux-rank"
GPU_RESOURCE = "nvidia.com/gpu"
#: Job events after which a job holds nothing any more (``free`` returns its resources to the
#: scheduler; ``clean`` ends it, also when it never got any).
RELEASE_EVENTS = ("free", "clean")
#: Touched on every pass; the container's liveness probe checks it.
HEARTBEAT = "/tmp/ledger.alive"
#: Seconds between attempts to create a placeholder the kubelet rejected.
RETRY_SECONDS = 1.0

_SUFFIX = {"m": Decimal("0.001"), "": Decimal(1), "k": Decimal(10) ** 3, "M": Decimal(10) ** 6,
           "G": Decimal(10) ** 9, "T": Decimal(10) ** 12, "Ki": Decimal(1024),
           "Mi": Decimal(1024) ** 2, "Gi": Decimal(1024) ** 3}


def log(msg: str) -> None:
    print(f"ledger: {msg}", file=sys.stderr, flush=True)


# -- quantities and pods ---------------------------------------------------------------------------

def quantity(value: Any) -> Decimal:
    """A Kubernetes quantity as a number (``"1500m"`` -> 1.5, ``"2"`` -> 2).

    >>> quantity("1500m"), quantity("2"), quantity(3)
    (Decimal('1.500'), Decimal('2'), Decimal('3'))
    """
    text = str(value).strip()
    for suffix in sorted(_SUFFIX, key=len, reverse=True):
        if suffix and text.endswith(suffix):
            return Decimal(text[:-len(suffix)]) * _SUFFIX[suffix]
    return Decimal(text)


def pod_demand(pod: dict[str, Any]) -> tuple[int, int]:
    """(millicores, GPUs) a pod holds on its node, as the kubelet's admission counts them: the
    containers' requests summed, or the largest init container's if larger, plus overhead."""
    spec = pod.get("spec") or {}

    def of(container: dict[str, Any]) -> tuple[int, int]:
        req = (container.get("resources") or {}).get("requests") or {}
        cpu = math.ceil(quantity(req.get("cpu", 0)) * 1000)
        return cpu, int(quantity(req.get(GPU_RESOURCE, 0)))

    mains = [of(c) for c in spec.get("containers") or []]
    inits = [of(c) for c in spec.get("initContainers") or []]
    cpu, gpus = sum(c for c, _ in mains), sum(g for _, g in mains)
    cpu = max([cpu] + [c for c, _ in inits])
    gpus = max([gpus] + [g for _, g in inits])
    overhead = spec.get("overhead") or {}
    return cpu + math.ceil(quantity(overhead.get("cpu", 0)) * 1000), gpus


def is_placeholder(pod: dict[str, Any]) -> bool:
    return (pod.get("metadata", {}).get("labels") or {}).get(ROLE_LABEL) == PLACEHOLDER_ROLE


def holds_node(pod: dict[str, Any]) -> bool:
    """Is the pod bound and not finished (the kubelet counts it)?"""
    return bool((pod.get("spec") or {}).get("nodeName")) and \
        (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed")


def counts_against_flux(pod: dict[str, Any], own_labels: dict[str, str]) -> bool:
    """A pod whose requests are withheld from Flux: bound, unfinished, neither a placeholder nor
    one of the installer's own pods (they host Flux itself), and asking for some CPU or GPU."""
    labels = pod.get("metadata", {}).get("labels") or {}
    if is_placeholder(pod) or (own_labels and all(labels.get(k) == v
                                                  for k, v in own_labels.items())):
        return False
    return holds_node(pod) and pod_demand(pod) != (0, 0)


def admission(pod: dict[str, Any]) -> bool | None:
    """True once the kubelet admitted the pod (running, or its containers being created),
    False if it rejected it (Failed, e.g. OutOfcpu), None while it has not decided."""
    status = pod.get("status") or {}
    if status.get("phase") == "Failed":
        return False
    if status.get("phase") == "Running" or status.get("containerStatuses"):
        return True
    return None


# -- what Flux jobs hold ---------------------------------------------------------------------------

def idset(text: str) -> list[int]:
    """RFC 22 idset ``"0-2,5"`` -> [0, 1, 2, 5].

    >>> idset("0-2,5")
    [0, 1, 2, 5]
    """
    ids: list[int] = []
    for part in filter(None, str(text).split(",")):
        lo, _, hi = part.partition("-")
        ids.extend(range(int(lo), int(hi or lo) + 1))
    return ids


@dataclass(frozen=True)
class Share:
    """What one job holds on one rank."""

    cores: tuple[int, ...]
    gpus: tuple[int, ...] = ()


def shares(R: dict[str, Any]) -> dict[int, Share]:
    """Rank -> Share of an RFC 20 R."""
    out: dict[int, Share] = {}
    for entry in (R.get("execution") or {}).get("R_lite", []):
        children = entry.get("children") or {}
        for rank in idset(entry["rank"]):
            out[rank] = Share(tuple(idset(children.get("core", ""))),
                              tuple(idset(children.get("gpu", ""))))
    return out


class Holds:
    """Running jobs and what they hold, from the job-manager's journal events."""

    def __init__(self) -> None:
        self.jobs: dict[int, dict[int, Share]] = {}

    def apply(self, event: dict[str, Any]) -> bool:
        """One journal line (``{"id", "name", "R"}``); True if what jobs hold changed."""
        job, name = int(event["id"]), event["name"]
        if name == "alloc" and event.get("R"):
            R = event["R"] if isinstance(event["R"], dict) else json.loads(event["R"])
            self.jobs[job] = shares(R)
            return True
        if name in RELEASE_EVENTS and job in self.jobs:
            del self.jobs[job]
            return True
        return False

    def held_cores(self, rank: int) -> set[int]:
        return {c for held in self.jobs.values() if rank in held for c in held[rank].cores}


# -- the rank map ----------------------------------------------------------------------------------

@dataclass
class Ranks:
    """Which node holds which rank and each rank's cores (from the rank map's R)."""

    nodes: dict[int, str] = field(default_factory=dict)
    cores: dict[int, list[int]] = field(default_factory=dict)
    host_prefix: str = "fluxnode"

    @classmethod
    def from_map(cls, ranks: dict[str, Any] | None) -> Ranks:
        if not ranks:
            return cls()
        out = cls(nodes={int(r): s["node"] for r, s in ranks.get("slots", {}).items()},
                  host_prefix=ranks.get("hostPrefix", "fluxnode"))
        if ranks.get("R"):
            out.cores = {rank: list(share.cores) for rank, share in shares(ranks["R"]).items()}
        return out

    def rank_of(self, node: str) -> int | None:
        return next((r for r, n in self.nodes.items() if n == node), None)

    def core_path(self, rank: int, core: int) -> str:
        """Fluxion's vertex path of a core (the rv1exec reader: cluster0/<host>/core<N>)."""
        return f"/cluster0/{self.host_prefix}{rank}/core{core}"


# -- plans (pure) ----------------------------------------------------------------------------------

def placeholder_name(job: int, rank: int) -> str:
    return f"flux-job-{job}-{rank}"


def placeholder_pod(job: int, rank: int, node: str, share: Share,
                    settings: dict[str, Any]) -> dict[str, Any]:
    """The pod that shows Kubernetes what job ``job`` holds on ``node``."""
    requests = {"cpu": str(len(share.cores))}
    if share.gpus:
        requests[GPU_RESOURCE] = str(len(share.gpus))
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": placeholder_name(job, rank), "namespace": settings["namespace"],
            "labels": {ROLE_LABEL: PLACEHOLDER_ROLE, JOB_LABEL: str(job), RANK_LABEL: str(rank),
                       "app.kubernetes.io/part-of": "fluxinfra",
                       "app.kubernetes.io/managed-by": "fluxinfra-ledger"},
            "annotations": {"fluxinfra.io/flux-cores": ",".join(map(str, share.cores)),
                            "fluxinfra.io/flux-gpus": ",".join(map(str, share.gpus))}},
        "spec": {
            "nodeName": node,
            "priorityClassName": settings["ledgerPriorityClass"],
            "restartPolicy": "Always",
            "terminationGracePeriodSeconds": 0,
            "automountServiceAccountToken": False,
            "enableServiceLinks": False,
            # Bound by name, so no scheduler checks taints; tolerate them all, so a NoExecute
            # taint never evicts what Flux holds.
            "tolerations": [{"operator": "Exists"}],
            "securityContext": {"runAsNonRoot": True, "runAsUser": 65534,
                                "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [{
                "name": "hold", "image": settings["ledgerImage"],
                "imagePullPolicy": "IfNotPresent",
                "command": ["sleep", "infinity"],
                "resources": {"requests": requests},
                "securityContext": {"allowPrivilegeEscalation": False,
                                    "readOnlyRootFilesystem": True,
                                    "capabilities": {"drop": ["ALL"]}}}]}}


@dataclass
class PlaceholderPlan:
    create: list[dict[str, Any]]
    delete: list[str]
    admitted: set[int]
    #: job -> why it still waits in its prolog, for its memo (jobs not admitted)
    waiting: dict[int, str] = field(default_factory=dict)


def plan_placeholders(holds: Holds, ranks: Ranks, existing: dict[str, dict[str, Any]],
                      settings: dict[str, Any], may_retry: Callable[[str], bool] = lambda n: True,
                      refused: dict[str, str] | None = None) -> PlaceholderPlan:
    """What to create and delete so there is one admitted placeholder per (job, held node),
    which jobs are fully admitted, and why each other one waits. ``existing`` are the
    placeholders by name; a rejected one is deleted (and created again once
    ``may_retry(name)``); ``refused``: placeholder -> the kubelet's reason, for those rejected
    earlier and not admitted since; a rank no node holds needs none."""
    want: dict[str, dict[str, Any]] = {}
    jobs_of: dict[int, list[str]] = {}
    for job, held in holds.jobs.items():
        names = jobs_of.setdefault(job, [])
        for rank, share in sorted(held.items()):
            node = ranks.nodes.get(rank)
            if node is None:
                continue
            pod = placeholder_pod(job, rank, node, share, settings)
            want[pod["metadata"]["name"]] = pod
            names.append(pod["metadata"]["name"])
    delete = [name for name, pod in existing.items()
              if name not in want or admission(pod) is False]
    create = [pod for name, pod in want.items()
              if name not in existing and may_retry(name)]
    admitted = {job for job, names in jobs_of.items()
                if all(n in existing and admission(existing[n]) for n in names)}
    waiting = {job: _why_waiting(names, want, existing, refused or {})
               for job, names in jobs_of.items() if job not in admitted}
    return PlaceholderPlan(create, delete, admitted, waiting)


def _why_waiting(names: list[str], want: dict[str, dict[str, Any]],
                 existing: dict[str, dict[str, Any]], refused: dict[str, str]) -> str:
    """One line on what a job's prolog waits for: a refusal by a kubelet first (a pod holds
    the cores), then a placeholder not yet admitted, then one not yet created."""
    pending = [n for n in names if not (n in existing and admission(existing[n]))]
    for name in pending:
        pod = existing.get(name)
        reason = (pod.get("status") or {}).get("reason") if pod is not None and \
            admission(pod) is False else refused.get(name)
        if reason:
            return (f"waiting for Kubernetes: node {want[name]['spec']['nodeName']} refused "
                    f"placeholder pod {name} ({reason}): pods hold the cores; retrying")
    name = pending[0]
    node = want[name]["spec"]["nodeName"]
    if name in existing:
        return f"waiting for node {node}'s kubelet to admit placeholder pod {name}"
    return f"waiting for placeholder pod {name} to be created on node {node}"


def withheld_ranks(pods: Iterable[dict[str, Any]], ranks: Ranks,
                   own_labels: dict[str, str]) -> set[int]:
    """Ranks whose node runs a pod that counts against Flux."""
    out = set()
    for pod in pods:
        if counts_against_flux(pod, own_labels):
            rank = ranks.rank_of(pod["spec"]["nodeName"])
            if rank is not None:
                out.add(rank)
    return out


def plan_down(ranks: Ranks, withheld: set[int], down: dict[int, set[int]]
              ) -> list[tuple[str, str]]:
    """``(vertex path, "down"|"up")`` commands that leave every core of a withheld rank down and
    brings back up what the ledger itself marked down (``down``) on the others. Only ranks a
    node holds are touched: Fluxion keeps the cores of a rank whose broker is offline (a free
    rank, a node gone) down itself, and those must stay down."""
    out = []
    for rank in sorted(set(ranks.nodes) & (set(ranks.cores) | set(down))):
        cores = set(ranks.cores.get(rank, [])) | down.get(rank, set())
        now = down.get(rank, set())
        if rank in withheld:
            out += [(ranks.core_path(rank, c), "down") for c in sorted(cores - now)]
        else:
            out += [(ranks.core_path(rank, c), "up") for c in sorted(now)]
    return out


# -- the controller --------------------------------------------------------------------------------

class Ledger:
    """The books: what Flux jobs hold (journal), what pods hold (pods), Fluxion's down cores,
    and the rank map; :meth:`reconcile` brings Kubernetes and Flux in line with them.

    ``api`` has ``create_pod(body)``, ``delete_pod(name)``; ``flux`` has ``set_status(path,
    status)``; ``marker_dir`` is where admitted jobs are written for the prolog, ``waiting_dir``
    where it finds why a job still waits (one line per job, its memo)."""

    def __init__(self, settings: dict[str, Any], api: Any, flux: Any, marker_dir: str,
                 own_labels: dict[str, str], clock: Callable[[], float] = time.monotonic,
                 waiting_dir: str | None = None) -> None:
        self.settings, self.api, self.flux = settings, api, flux
        self.marker_dir, self.own_labels, self.clock = marker_dir, own_labels, clock
        self.waiting_dir = waiting_dir or os.path.join(os.path.dirname(marker_dir), "waiting")
        self.refused: dict[str, str] = {}              # placeholder -> the kubelet's reason
        self.reasons: dict[int, str] = {}              # job -> the reason written for it
        self.holds = Holds()
        self.pods: dict[str, dict[str, Any]] = {}     # namespace/name -> pod
        self.down: dict[int, set[int]] = {}
        self.ranks = Ranks()
        self.synced = False                            # the journal's history is through
        self.rejected_at: dict[str, float] = {}
        self.marked: set[int] = set()
        #: called with the cores the ledger has marked down whenever they change (kept on the
        #: node, so a restarted ledger tells its own marks from Fluxion's)
        self.record: Callable[[dict[str, list[int]]], None] | None = None

    def restore_down(self, in_fluxion: dict[str, list[int]],
                     recorded: dict[str, list[int]]) -> None:
        """After a (re)start: the ledger's own marks are those it recorded that Fluxion still
        has down (a restarted broker has none of them any more)."""
        self.down = {int(r): set(c) & set(recorded.get(r, [])) for r, c in in_fluxion.items()
                     if set(c) & set(recorded.get(r, []))}

    def placeholders(self) -> dict[str, dict[str, Any]]:
        ns = self.settings["namespace"]
        return {p["metadata"]["name"]: p for p in self.pods.values()
                if is_placeholder(p) and p["metadata"].get("namespace") == ns}

    def _may_retry(self, name: str) -> bool:
        at = self.rejected_at.get(name)
        return at is None or self.clock() - at >= RETRY_SECONDS

    def reconcile(self) -> None:
        if not self.synced or not self.ranks.nodes:
            return
        existing = self.placeholders()
        plan = plan_placeholders(self.holds, self.ranks, existing, self.settings,
                                 self._may_retry, self.refused)
        for name in plan.delete:
            if admission(existing[name]) is False:
                self.rejected_at[name] = self.clock()
                reason = (existing[name].get("status") or {}).get("reason") or "rejected"
                self.refused[name] = reason
                log(f"{name} rejected by its node's kubelet ({reason}); the job waits")
            self.api.delete_pod(name)
            self.pods.pop(f"{self.settings['namespace']}/{name}", None)
        for pod in plan.create:
            self.api.create_pod(pod)
        self._write_markers(plan.admitted)
        self._write_reasons(plan.waiting)
        commands = plan_down(self.ranks, withheld_ranks(self.pods.values(), self.ranks,
                                                        self.own_labels), self.down)
        for path, status in commands:
            self.flux.set_status(path, status)
            rank, core = _rank_core(path, self.ranks.host_prefix)
            (self.down.setdefault(rank, set()).add if status == "down"
             else self.down.setdefault(rank, set()).discard)(core)
        if commands and self.record is not None:
            self.record({str(r): sorted(c) for r, c in self.down.items() if c})
        if commands:
            log("cores " + ", ".join(f"{p.rsplit('/', 2)[1]}/{p.rsplit('/', 1)[1]} {s}"
                                     for p, s in commands))

    def _write_markers(self, admitted: set[int]) -> None:
        for job in admitted - self.marked:
            with open(os.path.join(self.marker_dir, str(job)), "w"):
                pass
        for job in self.marked - admitted:
            if job not in self.holds.jobs:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(os.path.join(self.marker_dir, str(job)))
        self.marked = (self.marked | admitted) & set(self.holds.jobs)

    def _write_reasons(self, waiting: dict[int, str]) -> None:
        """``<waiting_dir>/<job>``: why each job not yet admitted waits (the prolog shows it as
        the job's memo); removed once it is admitted or gone."""
        os.makedirs(self.waiting_dir, mode=0o755, exist_ok=True)
        for job, reason in waiting.items():
            if self.reasons.get(job) != reason:
                path = os.path.join(self.waiting_dir, str(job))
                with open(path + ".tmp", "w") as fh:
                    fh.write(reason + "\n")
                os.replace(path + ".tmp", path)  # the prolog never reads half a line
                self.reasons[job] = reason
        for job in set(self.reasons) - set(waiting):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(os.path.join(self.waiting_dir, str(job)))
            del self.reasons[job]
        live = {placeholder_name(j, r) for j, held in self.holds.jobs.items() for r in held}
        for name in [n for n in self.refused if n not in live or
                     admission(self.pods.get(f"{self.settings['namespace']}/{n}", {}))]:
            del self.refused[name]


def _rank_core(path: str, prefix: str) -> tuple[int, int]:
    _, _, host, core = path.split("/")
    return int(host[len(prefix):]), int(core[len("core"):])


# -- the real parts (Kubernetes API, the feed on the node) -----------------------------------------

def _node_watch() -> Any:
    """node-watch.py, shipped beside this file (its Api, rank map and host helpers)."""
    import importlib.util

    here = os.path.dirname(os.path.abspath(__file__))
    path = os.path.join(here, "node-watch.py")
    if not os.path.exists(path):
        path = os.path.join(here, "..", "templates", "node-watch.py")
    spec = importlib.util.spec_from_file_location("node_watch", path)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


class KubePods:
    """Placeholder pods through the API, with the installer's ServiceAccount."""

    def __init__(self, api: Any, namespace: str) -> None:
        self.api, self.namespace = api, namespace

    def create_pod(self, body: dict[str, Any]) -> None:
        try:
            self.api.json("POST", f"/api/v1/namespaces/{self.namespace}/pods", body)
        except Exception as exc:  # noqa: BLE001 - logged; the next pass tries again
            if type(exc).__name__ != "Conflict":
                log(f"create {body['metadata']['name']}: {exc}")

    def delete_pod(self, name: str) -> None:
        try:
            self.api.json("DELETE", f"/api/v1/namespaces/{self.namespace}/pods/{name}",
                          {"kind": "DeleteOptions", "apiVersion": "v1",
                           "gracePeriodSeconds": 0})
        except Exception as exc:  # noqa: BLE001 - a 404 is done already; others retried
            if getattr(exc, "code", None) != 404:
                log(f"delete {name}: {exc}")


class Feed:
    """``ledger-feed.py`` on the node, as the instance owner: journal lines out, set-status in."""

    def __init__(self, argv: list[str]) -> None:
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True, bufsize=1)
        self.lock = threading.Lock()

    def lines(self) -> Iterable[dict[str, Any]]:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.strip():
                yield json.loads(line)

    def set_status(self, path: str, status: str) -> None:
        assert self.proc.stdin is not None
        with self.lock:
            self.proc.stdin.write(json.dumps({"path": path, "status": status}) + "\n")
            self.proc.stdin.flush()

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait()


def feed_argv(nw: Any, settings: dict[str, Any]) -> list[str]:
    run_dir = settings["runDir"]
    return nw.on_host(settings, [
        "runuser", "-u", settings["fluxUser"], "--", "env", f"FLUX_URI=local://{run_dir}/local",
        f"{settings['prefix']}/bin/flux", "python", f"{settings['libDir']}/ledger-feed.py"])


def run(settings: dict[str, Any]) -> None:  # pragma: no cover - the e2e tests run it
    nw = _node_watch()
    api = nw.Api()
    me = os.environ["NODE_NAME"]
    namespace = (nw._read(f"{nw.SA_DIR}/namespace") or "default").strip()
    settings = {**settings, "namespace": namespace}
    store = nw.RankStore(api, namespace, settings["rankMap"])
    marker_dir = f"/host{settings['ledgerDir']}/admitted"
    os.makedirs(marker_dir, mode=0o755, exist_ok=True)
    own = {"app.kubernetes.io/name": "flux-installer",
           "app.kubernetes.io/instance": settings["daemonSet"]}
    while True:
        heartbeat()
        try:
            ranks, _ = store.read()
            if ranks and nw.rank_of(ranks, me) == 0 and ranks.get("R"):
                lead(settings, nw, api, store, marker_dir, own, me)
        except Exception as exc:  # noqa: BLE001 - start over from the cluster's state
            log(f"{type(exc).__name__}: {exc}; starting over")
        time.sleep(5)


def lead(settings: dict[str, Any], nw: Any, api: Any, store: Any, marker_dir: str,
         own: dict[str, str], me: str) -> None:  # pragma: no cover - the e2e tests run it
    """Keep the books while this node leads; return when it no longer does."""
    log(f"{me} leads: keeping Flux jobs and pods in one ledger")
    waiting_dir = os.path.join(os.path.dirname(marker_dir), "waiting")
    for where in (marker_dir, waiting_dir):
        os.makedirs(where, mode=0o755, exist_ok=True)
        for name in os.listdir(where):
            os.unlink(os.path.join(where, name))
    feed = Feed(feed_argv(nw, settings))
    ledger = Ledger(settings, KubePods(api, settings["namespace"]), feed, marker_dir, own)
    record_path = os.path.join(os.path.dirname(marker_dir), "down.json")
    ledger.record = lambda down: _save(record_path, down)
    wake = threading.Event()
    lock = threading.Lock()
    stop = threading.Event()

    def read_feed() -> None:
        for msg in feed.lines():
            with lock:
                if "down" in msg:
                    ledger.restore_down(msg["down"], _load(record_path))
                elif msg.get("synced"):
                    ledger.synced = True
                elif "id" in msg:
                    ledger.holds.apply(msg)
                elif "error" in msg:
                    log(f"feed: {msg['error']}")
            wake.set()
        stop.set()
        wake.set()

    def watch_pods() -> None:
        while not stop.is_set():
            try:
                listing = api.json("GET", "/api/v1/pods")
                with lock:
                    ledger.pods = {_key(p): p for p in listing["items"]}
                wake.set()
                version = listing["metadata"]["resourceVersion"]
                stream = api.get(f"/api/v1/pods?watch=1&resourceVersion={version}"
                                 "&timeoutSeconds=60", timeout=90)
                for line in stream:
                    event = json.loads(line)
                    if event["type"] == "ERROR":
                        break
                    with lock:
                        if event["type"] == "DELETED":
                            ledger.pods.pop(_key(event["object"]), None)
                        else:
                            ledger.pods[_key(event["object"])] = event["object"]
                    wake.set()
            except Exception as exc:  # noqa: BLE001 - relist
                log(f"pod watch: {exc}; relisting")
                time.sleep(1)

    threading.Thread(target=read_feed, daemon=True).start()
    threading.Thread(target=watch_pods, daemon=True).start()
    next_map = 0.0
    try:
        while not stop.is_set():
            wake.wait(RETRY_SECONDS)
            wake.clear()
            heartbeat()
            if time.monotonic() >= next_map:
                ranks, _ = store.read()
                if not ranks or nw.rank_of(ranks, me) != 0:
                    log(f"{me} no longer leads")
                    return
                with lock:
                    ledger.ranks = Ranks.from_map(ranks)
                next_map = time.monotonic() + 10
            with lock:
                ledger.reconcile()
        log("the feed ended (broker restart?); rebuilding from the journal")
    finally:
        feed.close()


def _load(path: str) -> dict[str, list[int]]:
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


def _save(path: str, down: dict[str, list[int]]) -> None:
    with open(path + ".tmp", "w") as f:
        json.dump(down, f)
    os.replace(path + ".tmp", path)


def heartbeat() -> None:
    with open(HEARTBEAT, "a"):
        os.utime(HEARTBEAT)


def _key(pod: dict[str, Any]) -> str:
    return f"{pod['metadata'].get('namespace', '')}/{pod['metadata']['name']}"


def main(argv: list[str]) -> None:  # pragma: no cover - the installer's container
    heartbeat()
    with open(argv[-1]) as cfg:
        settings = json.load(cfg)
    run(settings)


if __name__ == "__main__":
    main(sys.argv[1:])
