"""fluxinfra's scheduler against kube-scheduler v1.28 on a real API server: pods/s, latency, RSS.

    .venv/bin/python benchmarks/run.py kube_scheduler                  # 5,000 nodes, 10,000 pods
    .venv/bin/python benchmarks/run.py kube_scheduler --quick          # 500 nodes, 1,000 pods
    .venv/bin/python benchmarks/kube_scheduler.py --rounds 2 --gangs   # + 625 gangs of 16

Needs the Kubernetes test bed (root, the v1.28 binaries in ``$FLUXINFRA_KUBE_BIN`` or on
``PATH``; docs/e2e.md); without it, it says why and does nothing. One bed (etcd, kube-apiserver,
controller-manager; no kubelet) gets N hollow Node objects (32 cores, 128 GiB, 110 pods each,
kept Ready by their Leases). Then, alternately in one run (``--rounds R``, kube-scheduler first
in each round), each scheduler runs as its own process against that API server and the same
10,000 pods (1 core, 1 GiB, created by ``--creators`` threads as fast as the API server takes
them) are scheduled:

* ``kube-scheduler`` - v1.28's default profile (every filter and score plugin), leader election
  off, the client's QPS/burst raised to ``--qps`` (scheduler_perf does the same; the default 50
  would cap binds at 50/s);
* ``fluxion`` - ``python -m fluxinfra.scheduler`` (matcher in process, policy ``first``), as its
  ServiceAccount with the RBAC the stack renders, every filter on;
* ``fluxion gangs`` (``--gangs``) - the same pods as 625 label groups of 16, all-or-nothing
  (kube-scheduler cannot do this);
* ``bind-only`` (``--ceiling THREADS``, burst mode) - no scheduler: a process binds the same pods
  round-robin onto the nodes from THREADS threads, as fast as the API server takes
  ``pods/binding`` calls. It is the ceiling every scheduler above is under on this machine.

Per scheduler and round: pods/s from the first pod submitted to the last seen bound (a watch on
the namespace), creation-to-bound latency per pod (client clock: just before the create POST to
the watch event with ``nodeName``), p50/p99, groups/s for gangs, and the scheduler process's
peak RSS (``VmHWM``). Between rounds every pod is deleted (grace 0) and the scheduler stopped.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import sys
import tempfile
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(ROOT / "scripts"))
sys.path.insert(0, str(ROOT / "tests" / "e2e"))
from _table import format_table  # noqa: E402

LEGEND = {
    "mode": "arrivals: pods created while the scheduler runs; burst: all created, then it starts",
    "pods/s": "arrivals: pods bound / (last bound - first submitted); burst: / (last - first "
              "bound)",
    "groups/s": "gangs fully bound / the same span",
    "p50 s, p99 s": "creation-to-bound latency per pod",
    "RSS MiB": "the scheduler process's peak resident memory",
    "submit/s": "how fast the API server took the pods (the arrival rate)",
    "fullest": "most pods bound to one node (32 cores, 1-core pods: never above 32)",
}


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="benchmarks/kube_scheduler.py",
                                description=__doc__.split("\n")[0])
    p.add_argument("--nodes", type=int, default=5000)
    p.add_argument("--pods", type=int, default=10_000)
    p.add_argument("--quick", action="store_true", help="500 nodes, 1,000 pods, 1 round")
    p.add_argument("--rounds", type=int, default=1, help="alternations of the two schedulers")
    p.add_argument("--gangs", action="store_true", help="also 625 gangs of 16 (fluxion)")
    p.add_argument("--creators", type=int, default=16, help="threads creating pods")
    p.add_argument("--qps", type=int, default=5000, help="kube-scheduler client QPS and burst")
    p.add_argument("--timeout", type=float, default=1200, help="seconds per scheduling run")
    p.add_argument("--modes", default="arrivals,burst",
                   help="comma-separated: arrivals (pods created while it runs), burst")
    p.add_argument("--json", help="write the raw results here (after every run)")
    p.add_argument("--ceiling", type=int, default=0, metavar="THREADS",
                   help="also, in burst mode, bind the same pods with no scheduling at all "
                        "from THREADS threads: the API server's bind ceiling on this machine")
    return p


# -- the bed --------------------------------------------------------------------------------------
def _bed(nodes: int, log) -> Any:
    import kubebed

    if os.geteuid() != 0:
        raise RuntimeError("needs root (the test bed starts etcd and an API server)")
    kubebed.preflight(real_node=False)
    bed = kubebed.Bed.up(f"bench-{os.getpid()}", real_node=False, scheduler=False,
                         node_monitor_grace=3600, log=log)
    try:
        t0 = time.monotonic()
        batch = 250
        for start in range(0, nodes, batch):
            bed.add_hollow_nodes([kubebed.node_object(f"hn{i:05d}", cpu="32", memory="128Gi",
                                                      labels={"bench": "yes"})
                                  for i in range(start, min(nodes, start + batch))])
        log(f"{nodes} hollow nodes in {time.monotonic() - t0:.0f}s")
    except BaseException:
        bed.down()
        raise
    return bed


class _KubeScheduler:
    """kube-scheduler v1.28 as a process with a KubeSchedulerConfiguration."""

    def __init__(self, bed: Any, qps: int, tmp: Path) -> None:
        from kubebed.layout import find_binary

        self.binary = find_binary("kube-scheduler")
        conf = bed.pki["scheduler_kubeconfig"]
        cfg = tmp / "kube-scheduler.yaml"
        cfg.write_text(json.dumps({
            "apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "KubeSchedulerConfiguration",
            "clientConnection": {"kubeconfig": conf, "qps": qps, "burst": qps},
            "leaderElection": {"leaderElect": False}}))
        self.argv = [self.binary, f"--config={cfg}", f"--authentication-kubeconfig={conf}",
                     f"--authorization-kubeconfig={conf}", "--bind-address=127.0.0.1",
                     "--secure-port=0", f"--cert-dir={tmp / 'ks-certs'}"]
        self.log = tmp / "kube-scheduler.log"
        self.proc: Any = None

    def start(self) -> None:
        import subprocess

        self.proc = subprocess.Popen(self.argv, stdout=self.log.open("ab"),
                                     stderr=subprocess.STDOUT)
        time.sleep(3)
        if self.proc.poll() is not None:
            raise RuntimeError(f"kube-scheduler exited: {self.log.read_text()[-2000:]}")

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(30)


class _BindOnly:
    """The API server's own ceiling: no scheduling at all, only ``pods/binding`` calls.

    A child process (like a scheduler, it holds its own connections and GIL) lists the
    namespace's pods once and binds pod *i* to hollow node *i mod N* from ``threads`` threads,
    as fast as the API server takes the calls. Any scheduler that binds through the API server
    on this machine is bound by this figure; it runs in burst mode only (nothing to watch for)."""

    def __init__(self, kubeconfig: str, namespace: str, nodes: int, threads: int) -> None:
        self.args = (kubeconfig, namespace, nodes, threads)
        self.proc: Any = None

    def start(self) -> None:
        import multiprocessing

        self.proc = multiprocessing.get_context("fork").Process(
            target=_bind_all, args=self.args, daemon=True)
        self.proc.start()

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.join(5)
            if self.proc.is_alive():
                self.proc.terminate()
                self.proc.join(10)


def _bind_all(kubeconfig: str, namespace: str, nodes: int, threads: int) -> None:
    from kubernetes import client, config

    api_client = config.new_client_from_config(kubeconfig)
    api_client.rest_client.pool_manager.connection_pool_kw["maxsize"] = threads
    core = client.CoreV1Api(api_client)
    names: list[str] = []
    token = ""
    while True:
        more = {"_continue": token} if token else {}
        page = json.loads(core.list_namespaced_pod(namespace, limit=5000, **more,
                                                   _preload_content=False).data)
        names += [p["metadata"]["name"] for p in page["items"] if not p["spec"].get("nodeName")]
        token = page["metadata"].get("continue") or ""
        if not token:
            break

    def bind(index: int) -> None:
        body = {"apiVersion": "v1", "kind": "Binding",
                "metadata": {"name": names[index]},
                "target": {"apiVersion": "v1", "kind": "Node",
                           "name": f"hn{index % nodes:05d}"}}
        # the answer read to its end, so the connection goes back to the pool (an unread one
        # is closed, and every bind then opens a new TLS connection)
        resp = core.create_namespaced_pod_binding(names[index], namespace, body,
                                                  _preload_content=False)
        resp.read()

    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(bind, range(len(names))))


def _rss_mib(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


# -- one run ------------------------------------------------------------------------------------
def _pod(name: str, scheduler: str, group: str | None, size: int) -> dict[str, Any]:
    labels = {"fluxinfra.io/group": group, "fluxinfra.io/group-size": str(size)} if group else {}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": labels},
            "spec": {"schedulerName": scheduler, "terminationGracePeriodSeconds": 0,
                     "nodeSelector": {"bench": "yes"},
                     "containers": [{"name": "c", "image": "bench.invalid/none:1",
                                     "resources": {"requests": {"cpu": "1",
                                                                "memory": "1Gi"}}}]}}


def _watch_bound(api_client: Any, namespace: str, want: int, seen: dict[str, float],
                 stop: threading.Event) -> None:
    from kubernetes import client

    core = client.CoreV1Api(api_client)
    rv = ""
    while not stop.is_set() and len(seen) < want:
        try:
            resp = core.list_namespaced_pod(namespace, watch=True, resource_version=rv,
                                            timeout_seconds=30, allow_watch_bookmarks=True,
                                            _preload_content=False)
            buf = b""
            for chunk in resp.stream(amt=None, decode_content=False):
                buf += chunk
                while b"\n" in buf:
                    line, buf = buf.split(b"\n", 1)
                    if not line.strip():
                        continue
                    event = json.loads(line)
                    obj = event.get("object") or {}
                    rv = (obj.get("metadata") or {}).get("resourceVersion", rv)
                    name = (obj.get("metadata") or {}).get("name")
                    if (obj.get("spec") or {}).get("nodeName") and name not in seen:
                        seen[name] = time.monotonic()
                if stop.is_set() or len(seen) >= want:
                    break
        except Exception:  # noqa: BLE001 - a dropped watch is resumed
            rv = ""
            time.sleep(0.5)


def _run(api_client: Any, namespace: str, scheduler: str, count: int, group_size: int,
         creators: int, timeout: float, start=None) -> dict[str, Any]:
    """Create the pods and wait for them to be bound. With ``start`` (a burst), every pod is
    created first and ``start()`` then starts the scheduler: pods/s is then the scheduler's own
    throughput (first to last bind), latency the wait behind the burst."""
    from kubernetes import client

    core = client.CoreV1Api(api_client)
    seen: dict[str, float] = {}
    submitted: dict[str, float] = {}
    stop = threading.Event()
    watcher = threading.Thread(target=_watch_bound, args=(api_client, namespace, count, seen,
                                                          stop), daemon=True)
    watcher.start()
    time.sleep(1)
    names = [f"p{i:05d}" for i in range(count)]

    def create(name: str, index: int) -> None:
        group = f"g{index // group_size}" if group_size > 1 else None
        body = _pod(name, scheduler, group, group_size)
        submitted[name] = time.monotonic()
        core.create_namespaced_pod(namespace, body, _preload_content=False)

    t0 = time.monotonic()
    with ThreadPoolExecutor(creators) as pool:
        list(pool.map(create, names, range(count)))
    t_submitted = time.monotonic()
    if start is not None:
        start()
    deadline = time.monotonic() + timeout
    while len(seen) < count and time.monotonic() < deadline:
        time.sleep(0.2)
    stop.set()
    bound = [n for n in names if n in seen]
    lat = sorted(seen[n] - submitted[n] for n in bound)
    first = min(seen[n] for n in bound) if start is not None and bound else t0
    span = (max(seen[n] for n in bound) - first) if bound else float("nan")
    groups = 0
    if group_size > 1:
        groups = sum(1 for g in range(count // group_size)
                     if all(f"p{i:05d}" in seen
                            for i in range(g * group_size, (g + 1) * group_size)))
    return {"pods": count, "bound": len(bound), "seconds": span,
            "pods_per_s": len(bound) / span if bound else 0.0,
            "groups": groups, "groups_per_s": groups / span if groups else None,
            "p50_s": statistics.median(lat) if lat else None,
            "p99_s": lat[max(0, int(len(lat) * 0.99) - 1)] if lat else None,
            "submit_per_s": count / (t_submitted - t0)}


def _fullest(api_client: Any, namespace: str) -> int:
    """The most pods (1 core each) any node holds: both schedulers' answers must respect the
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
    """Every pod of the namespace gone (delete-collection, grace 0: no kubelet waits). A loaded
    API server answers a large delete-collection with 504 and stops deleting when the request
    times out, so the request is made again while pods remain."""
    from kubernetes import client

    core = client.CoreV1Api(api_client)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            core.delete_collection_namespaced_pod(namespace, grace_period_seconds=0,
                                                  _preload_content=False)
        except client.ApiException as exc:
            # a timed-out request (504, or 500 "context deadline exceeded" from a loaded
            # etcd): what it did not delete is asked again
            if exc.status not in (500, 504):
                raise
        left = core.list_namespaced_pod(namespace, limit=1, _preload_content=False)
        if not json.loads(left.data).get("items"):
            return
        time.sleep(2)
    raise RuntimeError(f"pods of {namespace} still there after {timeout:.0f}s")


def main(argv: list[str] | None = None) -> int:
    p = parser()
    args = p.parse_args(argv)
    bad = set(args.modes.split(",")) - {"arrivals", "burst"}
    if bad:
        p.error(f"--modes {args.modes}: {sorted(bad)} unknown; use arrivals, burst or both")
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
        plan = [("kube-scheduler", 1), ("fluxion", 1)]
        if args.gangs:
            plan.append(("fluxion", 16))
        if args.ceiling:
            plan.append(("bind-only", 1))
        for rnd in range(args.rounds):
            for mode in args.modes.split(","):
                for who, size in plan:
                    if who == "bind-only" and mode != "burst":
                        continue
                    if who == "bind-only":
                        proc = _BindOnly(str(bed.kubeconfig), ns, args.nodes, args.ceiling)
                        name = "bind-only"
                    elif who == "kube-scheduler":
                        proc: Any = _KubeScheduler(bed, args.qps, tmp)
                        name = "default-scheduler"
                    else:
                        proc = SchedulerProcess(kubeconfig, "fluxion", tmp / "fluxion.log",
                                                "--log-level", "warning")
                        name = "fluxion"
                    label = who if size == 1 else f"{who} gangs of {size}"
                    if who == "bind-only":
                        label = f"bind-only, {args.ceiling} threads"
                    log(f"round {rnd + 1}, {mode}: {label}")
                    if mode == "arrivals":
                        proc.start()
                    try:
                        result = _run(api_client, ns, name, args.pods // size * size, size,
                                      args.creators, args.timeout,
                                      start=proc.start if mode == "burst" else None)
                        result.update(scheduler=label, round=rnd + 1, mode=mode,
                                      rss_mib=(float("nan") if who == "bind-only"
                                               else _rss_mib(proc.proc.pid)),
                                      fullest=_fullest(api_client, ns))
                    finally:
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
          f"1 GiB); {args.rounds} round(s), alternated; wall time on this machine")
    headers = ["mode", "scheduler", "round", "bound", "pods/s", "groups/s", "p50 s", "p99 s",
               "RSS MiB", "submit/s", "fullest"]
    print(format_table(headers, [[r["mode"], r["scheduler"], r["round"], r["bound"],
                                  r["pods_per_s"], r["groups_per_s"], r["p50_s"], r["p99_s"],
                                  r["rss_mib"], r["submit_per_s"], r["fullest"]] for r in rows],
                       legend=LEGEND, keys=2))
    for mode in args.modes.split(","):
        kube = [r["pods_per_s"] for r in rows
                if r["scheduler"] == "kube-scheduler" and r["mode"] == mode]
        ours = [r["pods_per_s"] for r in rows if r["scheduler"] == "fluxion" and r["mode"] == mode]
        if kube and ours:
            print(f"{mode}: fluxion / kube-scheduler, median pods/s: "
                  f"{statistics.median(ours) / statistics.median(kube):.2f}x")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


def tools(argv: list[str]) -> list[str]:
    """The outside programs a run uses (benchmarks/run.py records their versions)."""
    return ["kubernetes"]


if __name__ == "__main__":
    sys.exit(main())
