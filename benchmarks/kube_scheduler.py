"""fluxinfra's scheduler beside kube-scheduler, Coscheduling and the API server's write ceiling.

    .venv/bin/python benchmarks/run.py kube_scheduler                  # 5,000 nodes, 10,000 pods
    .venv/bin/python benchmarks/run.py kube_scheduler --quick          # 500 nodes, 1,000 pods
    .venv/bin/python benchmarks/kube_scheduler.py --rounds 2 --gangs --modes burst \
        --coscheduling /opt/scheduler-plugins/bin/kube-scheduler     # + PodGroups of 16

Needs the Kubernetes test bed (root, the v1.28 binaries in ``$FLUXINFRA_KUBE_BIN`` or on
``PATH``; docs/e2e.md); without it, it says why and does nothing. One bed (etcd, kube-apiserver,
controller-manager; no kubelet) gets N hollow Node objects (32 cores, 128 GiB, 110 pods each,
kept Ready by their Leases, no kubelet behind them: a bound pod stays Pending, as in
kube-scheduler's own benchmark, so no kubelet's status write is timed with a scheduler's); the
first run waits until the node-lifecycle controller has lifted the ``not-ready`` taint the API
server gives every new Node. Then, alternately in one run (``--rounds R``), each scheduler runs
as its own process against that API server and the same pods (1 core, 1 GiB, created by
``--creators`` threads as fast as the API server takes them) are scheduled:

* ``kube-scheduler`` - v1.28's default profile (every filter and score plugin), leader election
  off, the client's QPS/burst raised to ``--qps`` (scheduler_perf does the same; the default 50
  would cap binds at 50/s), as ``system:kube-scheduler``; lone pods;
* ``coscheduling`` (``--gangs`` and ``--coscheduling PATH`` or ``$FLUXINFRA_COSCHEDULING_BIN``:
  a scheduler-plugins ``kube-scheduler``, built outside the repository) - the same binary's
  default plugins with Coscheduling as queue-sort, pre-filter, post-filter, permit and reserve
  plugin (scheduler-plugins' own sample profile, permit wait 10 s), QPS/burst ``--qps``, as the
  bed's admin (its RBAC is not installed); gangs. It writes Events as kube-scheduler does; the
  PodGroup status is written by scheduler-plugins' controller, a separate process not run here;
* ``fluxion`` - ``python -m fluxinfra.scheduler`` (matcher in process, policy ``first``), as its
  ServiceAccount with the RBAC the stack renders, every filter on; lone pods and
  (``--gangs``) PodGroups (``scheduling.x-k8s.io/v1alpha1``, ``minMember`` 16), all-or-nothing;
* ``ceiling`` (``--ceiling THREADS[,THREADS...]``, burst mode) - no scheduler: a process
  (``benchmarks/_bind_only.py``) makes the writes a scheduler owes, through the scheduler's own
  client, from THREADS threads as fast as the API server takes them: a bind and a ``Scheduled``
  Event per pod, and a status per PodGroup when its last pod is bound. The figure every
  scheduler above is held against on this machine.

Per scheduler and round: what the scheduler wrote, counted on the API server by watches on the
namespace's pods, Events (``events.k8s.io/v1``, ``Scheduled`` about each pod of the run, by its
uid) and PodGroups (``status.scheduled`` reaching ``minMember``); pods/s from the first pod
submitted (arrivals) or first bind (burst) to the last of those writes; binds/s to the last
bind only; creation-to-bound latency per pod (client clock), p50/p99; groups/s for gangs; and
the process's peak RSS (``VmHWM``) and CPU seconds (user + system) over the run. After the last
bind, writes still missing are waited for up to ``--write-wait`` seconds; the counts say what
came. The raw results (``--json``) also hold what the API server counted from the scheduler's
start until every write was seen (``apiserver_request_total`` by verb, resource and
subresource; ``apiserver_watch_events_total`` by kind; every client's, the bed's own too).
Between runs every pod, Event and PodGroup of the namespace is deleted and the scheduler
stopped; each run (and, in a burst, the scheduler's start after the pods are created) waits
until the bed's processes are quiet (under a tenth of a core for a second), so that no run
inherits another's clean-up. Rounds alternate the order (ABBA: every other round runs the
schedulers in reverse), so that none always runs first after the bed started or right after
the same other one. The ratio lines at the end divide each scheduler's median pods/s
by the ceiling's (its best thread count), measured in the same run: other work on the machine
moves every absolute figure, the ratio much less.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(ROOT / "scripts"))
sys.path.insert(0, str(ROOT / "tests" / "e2e"))
sys.path.insert(0, str(ROOT))
from _table import format_table  # noqa: E402

from fluxinfra.scheduler.client import watch_lines  # noqa: E402
from fluxinfra.scheduler.kube import (  # noqa: E402
    PODGROUP_GROUP,
    PODGROUP_PLURAL,
    PODGROUP_VERSION,
)
from fluxinfra.scheduler.pods import LABEL_PODGROUP  # noqa: E402

#: the label of the bed's hollow nodes; the benchmark's pods select them by it
NODE_LABELS = {"bench": "yes"}
#: where a scheduler-plugins kube-scheduler is named when --coscheduling is not given
COSCHEDULING_ENV = "FLUXINFRA_COSCHEDULING_BIN"
#: what the table calls that build when its --version names no release
COSCHEDULING_VERSION_ENV = "FLUXINFRA_COSCHEDULING_VERSION"

LEGEND = {
    "mode": "arrivals: pods created while the scheduler runs; burst: all created, then it starts",
    "pods/s": "pods bound / (last bind, Event or status written - first pod submitted "
              "(arrivals) or first bind (burst))",
    "binds/s": "pods bound / (last bind - the same start)",
    "groups/s": "PodGroups fully bound / the pods/s span",
    "events": "pods of the run with a Scheduled Event on the API server at the end",
    "statuses": "PodGroups whose status.scheduled reached minMember at the end",
    "p50 s, p99 s": "creation-to-bound latency per pod",
    "RSS MiB": "the process's peak resident memory",
    "CPU s": "the process's user + system CPU seconds over the run",
    "CPU ms/pod": "the process's CPU within the pods/s span, per pod bound",
    "API ms/pod": "kube-apiserver + etcd CPU within the same span, per pod bound (2 cores: "
                  "what the scheduler takes, the API server lacks)",
    "fullest": "most pods bound to one node (32 cores, 1-core pods: never above 32)",
}

#: what each scheduler is and how it differs, printed under the table
WHO = {
    "kube-scheduler": "{version}, default profile; system:kube-scheduler; Scheduled Events",
    "coscheduling": "scheduler-plugins Coscheduling, {version}; the bed's admin; Scheduled "
                    "Events, no PodGroup status (its controller writes that, not run here)",
    "fluxion": "python -m fluxinfra.scheduler, policy first; its ServiceAccount; Scheduled "
               "Events, PodGroup status",
    "ceiling": "no scheduling: bind + Scheduled Event per pod, PodGroup status per group; "
               "the bed's admin",
}


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="benchmarks/kube_scheduler.py",
                                description=__doc__.split("\n")[0])
    p.add_argument("--nodes", type=int, default=5000)
    p.add_argument("--pods", type=int, default=10_000)
    p.add_argument("--quick", action="store_true", help="500 nodes, 1,000 pods, 1 round")
    p.add_argument("--rounds", type=int, default=1, help="alternations of the schedulers")
    p.add_argument("--gangs", action="store_true",
                   help="also the same pods as PodGroups of --group-size (fluxion, "
                        "Coscheduling when named, the ceiling)")
    p.add_argument("--group-size", type=int, default=16, help="pods per PodGroup (--gangs)")
    p.add_argument("--coscheduling", metavar="PATH", default=os.environ.get(COSCHEDULING_ENV),
                   help="a scheduler-plugins kube-scheduler binary: Coscheduling runs the "
                        f"gangs too (default ${COSCHEDULING_ENV})")
    p.add_argument("--creators", type=int, default=16, help="threads creating pods")
    p.add_argument("--qps", type=int, default=5000, help="kube-scheduler client QPS and burst")
    p.add_argument("--timeout", type=float, default=1200, help="seconds per scheduling run")
    p.add_argument("--write-wait", type=float, default=60,
                   help="seconds after the last bind to wait for Events and statuses")
    p.add_argument("--modes", default="arrivals,burst",
                   help="comma-separated: arrivals (pods created while it runs), burst")
    p.add_argument("--only", metavar="NAMES", default="",
                   help="comma-separated: run only these of kube-scheduler, coscheduling, "
                        "fluxion, ceiling")
    p.add_argument("--json", help="write the raw results here (after every run)")
    p.add_argument("--ceiling", default="16", metavar="THREADS[,THREADS...]",
                   help="in burst mode, make the same writes with no scheduling from THREADS "
                        "threads (each count a run of its own; 0: none): the API server's "
                        "write ceiling on this machine")
    return p


# -- the bed --------------------------------------------------------------------------------------
def _bed(nodes: int, log) -> Any:
    import kubebed

    if os.geteuid() != 0:
        raise RuntimeError("needs root (the test bed starts etcd and an API server)")
    kubebed.preflight(real_node=False)
    # no hollow kubelet: its Running reports would be timed with the scheduler's writes
    bed = kubebed.Bed.up(f"bench-{os.getpid()}", real_node=False, scheduler=False,
                         node_monitor_grace=3600, hollow_kubelet=False, log=log)
    try:
        t0 = time.monotonic()
        batch = 250
        for start in range(0, nodes, batch):
            bed.add_hollow_nodes([kubebed.node_object(f"hn{i:05d}", cpu="32", memory="128Gi",
                                                      labels=dict(NODE_LABELS))
                                  for i in range(start, min(nodes, start + batch))])
        log(f"{nodes} hollow nodes in {time.monotonic() - t0:.0f}s")
        waited = _untainted(bed, nodes)
        log(f"every hollow node schedulable after {waited:.0f}s more")
    except BaseException:
        bed.down()
        raise
    return bed


def _untainted(bed: Any, nodes: int, per_node: float = 1.0) -> float:
    """Wait until no hollow node carries a taint; returns the seconds waited. The API server
    taints every new Node ``node.kubernetes.io/not-ready`` (admission, TaintNodesByCondition)
    and the node-lifecycle controller lifts it at its client's pace (about 5 nodes a second
    here): until then a scheduler finds fewer nodes and the controller's PATCHes would be
    timed with the first run."""
    rest = bed.rest()
    t0 = time.monotonic()
    try:
        while True:
            listing = rest.get("/api/v1/nodes?" + urlencode({"labelSelector": ",".join(
                f"{k}={v}" for k, v in NODE_LABELS.items())}))
            tainted = sum(1 for n in listing["items"] if n["spec"].get("taints"))
            if not tainted:
                return time.monotonic() - t0
            if time.monotonic() - t0 > 60 + per_node * nodes:
                raise RuntimeError(f"{tainted} of {nodes} hollow nodes still tainted after "
                                   f"{time.monotonic() - t0:.0f}s")
            time.sleep(2)
    finally:
        rest.close()


def _cpu_seconds(pid: int) -> float | None:
    """A process's user + system CPU seconds, or None when it is not (or no longer) there."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return None


def _usage(pid: int) -> tuple[float, float]:
    """A live process's peak RSS (MiB, ``VmHWM``) and CPU seconds (user + system)."""
    rss = float("nan")
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                rss = int(line.split()[1]) / 1024
    except (OSError, IndexError, ValueError):
        pass
    cpu = _cpu_seconds(pid)
    return rss, float("nan") if cpu is None else cpu


def _quiet(pids: list[int], log: Callable[[str], None], *, cores: float = 0.1,
           window: float = 0.5, timeout: float = 60.0) -> float:
    """Wait until the bed's processes (``pids``) use under ``cores`` of CPU over two windows
    in a row: the previous run's clean-up (deletions, the controllers)
    done before the next run starts, so no scheduler inherits another's aftermath. Returns
    the seconds waited."""
    t0 = time.monotonic()
    last = sum(_cpu_seconds(p) or 0.0 for p in pids)
    calm = 0
    while calm < 2 and time.monotonic() - t0 < timeout:
        time.sleep(window)
        now = sum(_cpu_seconds(p) or 0.0 for p in pids)
        calm = calm + 1 if (now - last) / window < cores else 0
        last = now
    waited = time.monotonic() - t0
    if calm < 2:
        log(f"the bed still busy after {waited:.0f}s; starting anyway")
    return waited


class _CpuSampler:
    """The CPU seconds of a scheduler's process and of the API server + etcd, read every
    :attr:`PERIOD` seconds in a thread while a run goes on, so that the CPU each spent within
    the span measured afterwards (first bind to last write) can be read back
    (:meth:`within`). On two cores the scheduler's CPU is taken from the API server's: these
    figures say where the CPU of the measured span went."""

    PERIOD = 0.02

    def __init__(self, scheduler_pid: Callable[[], int], server_pids: list[int]) -> None:
        self.scheduler_pid, self.server_pids = scheduler_pid, server_pids
        #: (monotonic time, scheduler CPU s, API server + etcd CPU s)
        self.samples: list[tuple[float, float, float]] = []
        self._stop = threading.Event()
        self._last_own = 0.0
        self._thread = threading.Thread(target=self._run, name="cpu-sampler", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            pid = self.scheduler_pid()
            own = _cpu_seconds(pid) if pid else None
            server = sum(_cpu_seconds(p) or 0.0 for p in self.server_pids)
            # a process gone (the ceiling's writer exits when done) keeps its last reading
            if own is not None:
                self._last_own = own
            self.samples.append((time.monotonic(), self._last_own, server))
            self._stop.wait(self.PERIOD)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _at(self, t: float) -> tuple[float, float]:
        samples = self.samples
        if not samples:
            return (float("nan"), float("nan"))
        if t <= samples[0][0]:
            return samples[0][1:]
        for (t0, a0, b0), (t1, a1, b1) in zip(samples, samples[1:], strict=False):
            if t0 <= t <= t1:
                f = (t - t0) / (t1 - t0) if t1 > t0 else 0.0
                return (a0 + f * (a1 - a0), b0 + f * (b1 - b0))
        return samples[-1][1:]

    def within(self, t0: float, t1: float) -> tuple[float, float]:
        """CPU seconds of (the scheduler, the API server + etcd) between ``t0`` and ``t1``."""
        a0, b0 = self._at(t0)
        a1, b1 = self._at(t1)
        return (a1 - a0, b1 - b0)


class _Process:
    """A scheduler as a child process: ``start``, ``usage`` (while it runs), ``stop``."""

    def __init__(self, argv: list[str], log: Path) -> None:
        self.argv, self.log = argv, log
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.proc = subprocess.Popen(self.argv, stdout=self.log.open("ab"),
                                     stderr=subprocess.STDOUT)
        time.sleep(3)
        if self.proc.poll() is not None:
            raise RuntimeError(f"{self.argv[0]} exited: {self.log.read_text()[-2000:]}")

    def usage(self) -> tuple[float, float]:
        return _usage(self.proc.pid) if self.proc else (float("nan"), float("nan"))

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(30)


def _kube_scheduler(bed: Any, qps: int, tmp: Path, *, binary: str | None = None,
                    name: str = "kube-scheduler", kubeconfig: str | None = None,
                    profile: dict[str, Any] | None = None) -> _Process:
    """kube-scheduler v1.28 (or a scheduler-plugins build of it) with a configuration file."""
    from kubebed.layout import find_binary

    binary = binary or find_binary("kube-scheduler")
    conf = kubeconfig or bed.pki["scheduler_kubeconfig"]
    cfg = tmp / f"{name}.yaml"
    cfg.write_text(json.dumps({
        "apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "KubeSchedulerConfiguration",
        "clientConnection": {"kubeconfig": conf, "qps": qps, "burst": qps},
        "leaderElection": {"leaderElect": False},
        **({"profiles": [profile]} if profile else {})}))
    return _Process([binary, f"--config={cfg}", f"--authentication-kubeconfig={conf}",
                     f"--authorization-kubeconfig={conf}", "--bind-address=127.0.0.1",
                     "--secure-port=0", f"--cert-dir={tmp / (name + '-certs')}"],
                    tmp / f"{name}.log")


def _coscheduling(bed: Any, qps: int, tmp: Path, binary: str) -> _Process:
    """scheduler-plugins' sample Coscheduling profile (manifests/coscheduling) under its own
    scheduler name; the bed's admin kubeconfig, since its RBAC is not installed."""
    profile = {"schedulerName": "coscheduling",
               "plugins": {"multiPoint": {"enabled": [{"name": "Coscheduling"}]},
                           "queueSort": {"enabled": [{"name": "Coscheduling"}],
                                         "disabled": [{"name": "*"}]}},
               "pluginConfig": [{"name": "Coscheduling",
                                 "args": {"permitWaitingTimeSeconds": 10}}]}
    return _kube_scheduler(bed, qps, tmp, binary=binary, name="coscheduling",
                           kubeconfig=str(bed.kubeconfig), profile=profile)


def _version(binary: str) -> str:
    """What ``binary --version`` says; a source build without release stamps says
    ``v0.0.0-master``, which names nothing: then ``$FLUXINFRA_COSCHEDULING_VERSION`` or
    "version not stamped"."""
    try:
        out = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=30)
        said = (out.stdout or out.stderr).strip().splitlines()[0]
    except (OSError, subprocess.SubprocessError, IndexError):
        said = ""
    if not said or "v0.0.0" in said:
        return os.environ.get(COSCHEDULING_VERSION_ENV, "version not stamped")
    return said


class _Ceiling:
    """``benchmarks/_bind_only.py`` as a child process; its CPU and peak RSS come from
    ``wait4`` when it has made every write."""

    def __init__(self, kubeconfig: str, namespace: str, nodes: int, threads: int,
                 log: Path) -> None:
        self.argv = [sys.executable, str(Path(__file__).resolve().parent / "_bind_only.py"),
                     kubeconfig, namespace, str(nodes), str(threads)]
        self.log = log
        self.pid = 0
        self.rusage: tuple[float, float] = (float("nan"), float("nan"))

    def start(self) -> None:
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        with self.log.open("ab") as out:
            # not a Popen: its wait would reap the process before wait4 reads its usage
            self.pid = os.posix_spawn(self.argv[0], self.argv, env, file_actions=[
                (os.POSIX_SPAWN_DUP2, out.fileno(), 1), (os.POSIX_SPAWN_DUP2, out.fileno(), 2)])

    def usage(self) -> tuple[float, float]:
        self.stop()
        return self.rusage

    def stop(self, timeout: float = 600) -> None:
        if not self.pid:
            return
        deadline = time.monotonic() + timeout
        while True:
            pid, status, ru = os.wait4(self.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() > deadline:
                os.kill(self.pid, signal.SIGKILL)
                pid, status, ru = os.wait4(self.pid, 0)
                break
            time.sleep(0.2)
        self.pid = 0
        self.rusage = (ru.ru_maxrss / 1024, ru.ru_utime + ru.ru_stime)
        if os.waitstatus_to_exitcode(status):
            raise RuntimeError(f"the ceiling's writer failed: {self.log.read_text()[-2000:]}")


# -- one run ------------------------------------------------------------------------------------
def _pod(name: str, scheduler: str, group: str | None) -> dict[str, Any]:
    labels = {LABEL_PODGROUP: group} if group else {}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": labels},
            "spec": {"schedulerName": scheduler, "terminationGracePeriodSeconds": 0,
                     "nodeSelector": dict(NODE_LABELS),
                     "containers": [{"name": "c", "image": "bench.invalid/none:1",
                                     "resources": {"requests": {"cpu": "1",
                                                                "memory": "1Gi"}}}]}}


def _podgroup(name: str, size: int) -> dict[str, Any]:
    return {"apiVersion": f"{PODGROUP_GROUP}/{PODGROUP_VERSION}", "kind": "PodGroup",
            "metadata": {"name": name}, "spec": {"minMember": size}}


class _Watch(threading.Thread):
    """One watch on the namespace from ``resource_version``; ``seen(obj)`` returns the key the
    object counts under (or None), first-seen times are kept in ``times``."""

    def __init__(self, lister: Callable[..., Any], args: tuple[Any, ...], version: str,
                 seen: Callable[[dict[str, Any]], str | None]) -> None:
        super().__init__(daemon=True)
        self.lister, self.args, self.version, self.seen = lister, args, version, seen
        self.times: dict[str, float] = {}
        self.stopping = threading.Event()

    def run(self) -> None:
        while not self.stopping.is_set():
            try:
                resp = self.lister(*self.args, watch=True, resource_version=self.version,
                                   timeout_seconds=30, allow_watch_bookmarks=True,
                                   _preload_content=False)
                for event in watch_lines(resp):
                    self._take(event)
                    if self.stopping.is_set():
                        break
            except Exception:  # noqa: BLE001 - a dropped watch is resumed where it stood
                time.sleep(0.5)

    def _take(self, event: dict[str, Any]) -> None:
        obj = event.get("object") or {}
        if event.get("type") == "ERROR":  # 410 Gone: start again from a list (seen kept)
            self.version = ""
            return
        self.version = (obj.get("metadata") or {}).get("resourceVersion", self.version)
        if event.get("type") in ("ADDED", "MODIFIED"):
            key = self.seen(obj)
            if key is not None and key not in self.times:
                self.times[key] = time.monotonic()


def _server_counts(api_client: Any) -> dict[str, float]:
    """The API server's request counters (``apiserver_request_total``, by verb, resource and
    subresource) and the watch events it sent (``apiserver_watch_events_total``, by kind), read
    from its ``/metrics``: the difference over a run says what a scheduler asked of it."""
    resp = api_client.call_api(*api_client.param_serialize(
        "GET", "/metrics", auth_settings=["BearerToken"]))
    counts: dict[str, float] = {}
    for line in resp.read().decode().splitlines():
        if line.startswith("apiserver_request_total{"):
            labels = dict(_LABEL.findall(line))
            key = " ".join(filter(None, (labels.get("verb"), labels.get("resource"),
                                          labels.get("subresource"))))
        elif line.startswith("apiserver_watch_events_total{"):
            key = "watch event " + dict(_LABEL.findall(line)).get("kind", "")
        else:
            continue
        counts[key] = counts.get(key, 0.0) + float(line.rsplit(" ", 1)[1])
    return counts


_LABEL = re.compile(r'(\w+)="([^"]*)"')


def _list_version(lister: Callable[..., Any], *args: Any) -> str:
    return json.loads(lister(*args, limit=1, _preload_content=False).data)["metadata"][
        "resourceVersion"]


def _watches(api_client: Any, namespace: str) -> list[_Watch]:
    """Bound pods (by name), Scheduled Events (by the pod's uid), PodGroups whose status
    reached minMember (by name)."""
    from kubernetes import client

    core, events = client.CoreV1Api(api_client), client.EventsV1Api(api_client)
    custom = client.CustomObjectsApi(api_client)
    pg_args = (PODGROUP_GROUP, PODGROUP_VERSION, namespace, PODGROUP_PLURAL)

    def bound(obj: dict[str, Any]) -> str | None:
        return obj["metadata"]["name"] if (obj.get("spec") or {}).get("nodeName") else None

    def scheduled(obj: dict[str, Any]) -> str | None:
        regarding = obj.get("regarding") or {}
        if obj.get("reason") == "Scheduled" and regarding.get("kind") == "Pod":
            return regarding.get("uid")
        return None

    def complete(obj: dict[str, Any]) -> str | None:
        want = (obj.get("spec") or {}).get("minMember") or 0
        return obj["metadata"]["name"] \
            if want and ((obj.get("status") or {}).get("scheduled") or 0) >= want else None

    watches = [
        _Watch(core.list_namespaced_pod, (namespace,),
               _list_version(core.list_namespaced_pod, namespace), bound),
        _Watch(events.list_namespaced_event, (namespace,),
               _list_version(events.list_namespaced_event, namespace), scheduled),
        _Watch(custom.list_namespaced_custom_object, pg_args,
               _list_version(custom.list_namespaced_custom_object, *pg_args), complete)]
    for watch in watches:
        watch.start()
    return watches


def _run(api_client: Any, namespace: str, scheduler: str, count: int, group_size: int,
         creators: int, timeout: float, write_wait: float, owes_status: bool,
         start: Callable[[], None] | None = None,
         quiet: Callable[[], Any] = lambda: None) -> dict[str, Any]:
    """Create the pods (and their PodGroups), wait for them to be bound and for the writes
    owed about them. With ``start`` (a burst), every pod is created first and ``start()``
    then starts the scheduler: pods/s is then the scheduler's own throughput."""
    from kubernetes import client

    core = client.CoreV1Api(api_client)
    tag = uuid.uuid4().hex[:4]
    groups = [f"pg{tag}-{g:04d}" for g in range(count // group_size)] if group_size > 1 else []
    custom = client.CustomObjectsApi(api_client)
    for name in groups:
        custom.create_namespaced_custom_object(PODGROUP_GROUP, PODGROUP_VERSION, namespace,
                                               PODGROUP_PLURAL, _podgroup(name, group_size),
                                               _preload_content=False)
    pods, events, statuses = _watches(api_client, namespace)
    names = [f"p{i:05d}" for i in range(count)]
    submitted: dict[str, float] = {}
    uids: dict[str, str] = {}

    def create(name: str, index: int) -> None:
        body = _pod(name, scheduler, groups[index // group_size] if groups else None)
        submitted[name] = time.monotonic()
        resp = core.create_namespaced_pod(namespace, body, _preload_content=False)
        uids[name] = json.loads(resp.data)["metadata"]["uid"]

    t0 = time.monotonic()
    with ThreadPoolExecutor(creators) as pool:
        list(pool.map(create, names, range(count)))
    t_submitted = time.monotonic()
    if start is not None:
        quiet()
    before = _server_counts(api_client)
    if start is not None:
        start()
    deadline = time.monotonic() + timeout
    while len(pods.times) < count and time.monotonic() < deadline:
        time.sleep(0.2)

    def written() -> tuple[int, int]:
        return (sum(1 for n in names if uids.get(n) in events.times),
                sum(1 for g in groups if g in statuses.times))

    deadline = time.monotonic() + write_wait
    while written() != (count, len(groups) if owes_status else 0) and \
            time.monotonic() < deadline:
        time.sleep(0.2)
    after = _server_counts(api_client)
    for watch in (pods, events, statuses):
        watch.stopping.set()
    n_events, n_statuses = written()
    bound = [n for n in names if n in pods.times]
    bind_times = [pods.times[n] for n in bound]
    write_times = bind_times + [events.times[uids[n]] for n in names if uids[n] in events.times] \
        + [statuses.times[g] for g in groups if g in statuses.times]
    lat = sorted(pods.times[n] - submitted[n] for n in bound)
    first = min(bind_times) if start is not None and bound else t0
    span = (max(write_times) - first) if bound else float("nan")
    bind_span = (max(bind_times) - first) if bound else float("nan")
    complete = 0
    if groups:
        complete = sum(1 for g in range(len(groups))
                       if all(n in pods.times for n in names[g * group_size:(g + 1) * group_size]))
    event_times = [events.times[uids[n]] for n in names if uids[n] in events.times]
    status_times = [statuses.times[g] for g in groups if g in statuses.times]
    return {"pods": count, "bound": len(bound), "seconds": span, "span_at": (first, first + span),
            # when the last bind, Event and status came, seconds from the span's start
            "last_s": {what: round(max(times) - first, 3) for what, times in (
                ("bind", bind_times), ("event", event_times), ("status", status_times))
                if times},
            "pods_per_s": len(bound) / span if bound else 0.0,
            "binds_per_s": len(bound) / bind_span if bound else 0.0,
            "events": n_events, "groups_total": len(groups),
            "statuses": n_statuses if groups else None,
            "groups": complete, "groups_per_s": complete / span if complete else None,
            "p50_s": statistics.median(lat) if lat else None,
            "p99_s": lat[max(0, int(len(lat) * 0.99) - 1)] if lat else None,
            "submit_per_s": count / (t_submitted - t0),
            "requests": {k: round(v - before.get(k, 0.0)) for k, v in sorted(after.items())
                         if v - before.get(k, 0.0) > 0}}


def _fullest(api_client: Any, namespace: str) -> int:
    """The most pods (1 core each) any node holds: every scheduler's answers must respect the
    nodes' 32 cores and 110 pods; the caller fails the run otherwise."""
    from kubernetes import client

    core = client.CoreV1Api(api_client)
    per_node: dict[str, int] = {}
    token = ""
    while True:
        more = {"_continue": token} if token else {}
        page = json.loads(core.list_namespaced_pod(namespace, limit=2000, **more,
                                                   _preload_content=False).data)
        for pod in page["items"]:
            node = pod["spec"].get("nodeName")
            if node:
                per_node[node] = per_node.get(node, 0) + 1
        token = page["metadata"].get("continue") or ""
        if not token:
            return max(per_node.values(), default=0)


def _clean(api_client: Any, namespace: str, timeout: float = 900) -> None:
    """Every pod, Event and PodGroup of the namespace gone (delete-collection, grace 0: no
    kubelet waits). A loaded API server answers a large delete-collection with 504 and stops
    deleting when the request times out, so the request is made again while objects remain."""
    from kubernetes import client

    core, custom = client.CoreV1Api(api_client), client.CustomObjectsApi(api_client)
    pg_args = (PODGROUP_GROUP, PODGROUP_VERSION, namespace, PODGROUP_PLURAL)
    kinds = [(core.delete_collection_namespaced_pod, core.list_namespaced_pod, (namespace,)),
             (core.delete_collection_namespaced_event, core.list_namespaced_event,
              (namespace,)),
             (custom.delete_collection_namespaced_custom_object,
              custom.list_namespaced_custom_object, pg_args)]
    deadline = time.monotonic() + timeout
    for delete, lister, args in kinds:
        while time.monotonic() < deadline:
            try:
                delete(*args, grace_period_seconds=0, _preload_content=False)
            except client.ApiException as exc:
                # a timed-out request (504, or 500 "context deadline exceeded" from a loaded
                # etcd): what it did not delete is asked again
                if exc.status not in (500, 504):
                    raise
            left = lister(*args, limit=1, _preload_content=False)
            if not json.loads(left.data).get("items"):
                break
            time.sleep(2)
        else:
            raise RuntimeError(f"objects of {namespace} still there after {timeout:.0f}s")


# -- the runs -----------------------------------------------------------------------------------
def _plan(args: argparse.Namespace, threads: list[int],
          rnd: int = 0) -> list[tuple[str, int, int]]:
    """(scheduler, group size, ceiling threads) in the order round ``rnd`` (from 0) runs them:
    odd rounds run the even rounds' order backwards (ABBA), so that no scheduler always runs
    just after another, or first after the bed started."""
    plan = [("kube-scheduler", 1, 0), ("fluxion", 1, 0)]
    plan += [("ceiling", 1, t) for t in threads]
    if args.gangs:
        if args.coscheduling:
            plan.append(("coscheduling", args.group_size, 0))
        plan.append(("fluxion", args.group_size, 0))
        plan += [("ceiling", args.group_size, t) for t in threads]
    only = set(filter(None, args.only.split(",")))
    plan = [step for step in plan if not only or step[0] in only]
    return plan[::-1] if rnd % 2 else plan


def _label(who: str, size: int, threads: int) -> str:
    label = f"ceiling, {threads} threads" if who == "ceiling" else who
    return label if size == 1 else f"{label}, gangs of {size}"


def _ratios(rows: list[dict[str, Any]], modes: list[str]) -> list[str]:
    """Each scheduler's median pods/s over the best ceiling's median (the thread count with the
    highest median), per mode and group size; then round by round, each round's figure over
    that ceiling's in the same round (their median and range: how far one round strays on a
    machine whose identical runs vary). Not over the better of the ceilings in each round:
    the larger of two noisy figures is biased upwards."""
    lines = []
    for mode in modes:
        for size in sorted({r["group_size"] for r in rows}):
            runs = [r for r in rows if r["mode"] == mode and r["group_size"] == size]
            by: dict[str, list[float]] = {}
            for r in runs:
                by.setdefault(r["scheduler"], []).append(r["pods_per_s"])
            ceilings = {k: statistics.median(v) for k, v in by.items() if k.startswith("ceiling")}
            if not ceilings:
                continue
            ceiling = max(ceilings, key=ceilings.__getitem__)
            best = ceilings[ceiling]
            ceiling_of = {r["round"]: r["pods_per_s"] for r in runs
                          if r["scheduler"] == ceiling}
            what = "lone pods" if size == 1 else f"gangs of {size}"
            for name, values in by.items():
                if name.startswith("ceiling"):
                    continue
                line = (f"{mode}, {what}: {name} / ceiling, median pods/s: "
                        f"{statistics.median(values):.1f} / {best:.1f} = "
                        f"{statistics.median(values) / best:.0%}")
                rounds = [r["pods_per_s"] / ceiling_of[r["round"]] for r in runs
                          if r["scheduler"] == name and ceiling_of.get(r["round"])]
                if len(rounds) > 1:
                    line += (f"; by round {statistics.median(rounds):.0%} "
                             f"({min(rounds):.0%}-{max(rounds):.0%}, {len(rounds)} rounds)")
                lines.append(line)
    return lines


def main(argv: list[str] | None = None) -> int:
    p = parser()
    args = p.parse_args(argv)
    modes = args.modes.split(",")
    bad = set(modes) - {"arrivals", "burst"}
    if bad:
        p.error(f"--modes {args.modes}: {sorted(bad)} unknown; use arrivals, burst or both")
    try:
        threads = [int(t) for t in args.ceiling.split(",") if int(t) > 0]
    except ValueError:
        p.error(f"--ceiling {args.ceiling}: give thread counts, e.g. 16 or 16,32 (0: none)")
    unknown = set(filter(None, args.only.split(","))) - set(WHO)
    if unknown:
        p.error(f"--only {args.only}: {sorted(unknown)} unknown; use {', '.join(WHO)}")
    if args.group_size < 2:
        p.error(f"--group-size {args.group_size}: a gang has at least 2 pods")
    if args.coscheduling and not os.access(args.coscheduling, os.X_OK):
        p.error(f"--coscheduling {args.coscheduling}: not an executable file; build "
                "scheduler-plugins' kube-scheduler (docs/benchmarks.md) or leave it out")
    if args.quick:
        args.nodes, args.pods, args.rounds = 500, 1000, 1
    log = lambda m: print(f"kube_scheduler: {m}", file=sys.stderr, flush=True)  # noqa: E731
    # a SIGTERM (timeout, Ctrl-C in a pipeline) still takes the bed down
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        bed = _bed(args.nodes, log)
    except Exception as exc:  # noqa: BLE001 - no bed here: say why, measure nothing
        print(f"kube_scheduler: skipped: {exc}")
        return 0
    rows: list[dict[str, Any]] = []
    versions = {"coscheduling": _version(args.coscheduling) if args.coscheduling else ""}
    try:
        from e2e_cluster import Cluster
        from fluxion_scheduler import SchedulerProcess, install, sa_kubeconfig

        tmp = Path(tempfile.mkdtemp(prefix="kube-bench-"))
        cluster = Cluster(bed.kubeconfig, tmp / "kubectl-cache", bed)
        api_client = cluster.client()
        ns = f"bench-{uuid.uuid4().hex[:6]}"
        cluster.kubectl("create", "namespace", ns)
        install(cluster, "fluxion-bench", ns, "fluxion")
        kubeconfig = sa_kubeconfig(cluster, "fluxion-bench", ns, tmp / "sa.kubeconfig")
        versions["kube-scheduler"] = _version(_kube_scheduler(bed, args.qps, tmp).argv[0])
        for rnd in range(args.rounds):
            for mode in modes:
                for who, size, nthreads in _plan(args, threads, rnd):
                    if who == "ceiling" and mode != "burst":
                        continue
                    if who == "ceiling":
                        proc: Any = _Ceiling(str(bed.kubeconfig), ns, args.nodes, nthreads,
                                             tmp / "ceiling.log")
                        name = "ceiling"
                    elif who == "kube-scheduler":
                        proc = _kube_scheduler(bed, args.qps, tmp)
                        name = "default-scheduler"
                    elif who == "coscheduling":
                        proc = _coscheduling(bed, args.qps, tmp, args.coscheduling)
                        name = "coscheduling"
                    else:
                        proc = SchedulerProcess(kubeconfig, "fluxion", tmp / "fluxion.log",
                                                "--log-level", "warning")
                        name = "fluxion"
                    label = _label(who, size, nthreads)
                    bed_pids = [p.pid for p in bed.procs().values()]
                    waited = _quiet(bed_pids, log)
                    log(f"round {rnd + 1}, {mode}: {label} (the bed quiet after {waited:.1f}s)")
                    if mode == "arrivals":
                        proc.start()
                    sampler = _CpuSampler(
                        lambda p=proc: p.pid if isinstance(p, _Ceiling) else
                        (p.proc.pid if p.proc else 0),
                        [bed.procs()[n].pid for n in ("kube-apiserver", "etcd")])
                    try:
                        result = _run(api_client, ns, name, args.pods // size * size, size,
                                      args.creators, args.timeout, args.write_wait,
                                      owes_status=who in ("fluxion", "ceiling"),
                                      start=proc.start if mode == "burst" else None,
                                      quiet=lambda pids=bed_pids: _quiet(pids, log))
                        own, server = sampler.within(*result.pop("span_at"))
                        rss, cpu = proc.usage() if hasattr(proc, "usage") \
                            else _usage(proc.proc.pid)
                        result.update(span_cpu_ms=1000 * own / max(1, result["bound"]),
                                      server_cpu_ms=1000 * server / max(1, result["bound"]),
                                      scheduler=label, who=who, group_size=size,
                                      round=rnd + 1, mode=mode, rss_mib=rss, cpu_s=cpu,
                                      fullest=_fullest(api_client, ns))
                    finally:
                        sampler.stop()
                        proc.stop()
                    if result["fullest"] > 32:
                        raise RuntimeError(f"{label}: a node holds {result['fullest']} 1-core "
                                           "pods on 32 cores")
                    rows.append(result)
                    log(f"result: {json.dumps(result)}")
                    if args.json:
                        Path(args.json).write_text(json.dumps(rows, indent=1))
                    _clean(api_client, ns)
        api_client.close()
    finally:
        bed.down()
    print(f"kube_scheduler: {args.nodes} hollow nodes x 32 cores, {args.pods} pods (1 core, "
          f"1 GiB); {args.rounds} round(s), alternated, every other round in reverse order; wall "
          "time on this machine")
    headers = ["mode", "scheduler", "round", "bound", "pods/s", "binds/s", "groups/s",
               "events", "statuses", "p50 s", "p99 s", "RSS MiB", "CPU s", "CPU ms/pod",
               "API ms/pod", "fullest"]
    print(format_table(headers, [[r["mode"], r["scheduler"], r["round"], r["bound"],
                                  r["pods_per_s"], r["binds_per_s"], r["groups_per_s"],
                                  r["events"], r["statuses"], r["p50_s"], r["p99_s"],
                                  r["rss_mib"], r["cpu_s"], r.get("span_cpu_ms"),
                                  r.get("server_cpu_ms"), r["fullest"]] for r in rows],
                       legend=LEGEND, keys=2))
    for who in dict.fromkeys(r["who"] for r in rows):
        print(f"  {who}: {WHO[who].format(version=versions.get(who, ''))}")
    for line in _ratios(rows, modes):
        print(line)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


def tools(argv: list[str]) -> list[str]:
    """The outside programs a run uses (benchmarks/run.py records their versions)."""
    return ["kubernetes"]


if __name__ == "__main__":
    sys.exit(main())
