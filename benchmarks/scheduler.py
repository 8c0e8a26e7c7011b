"""Scheduler benchmark: pods/s and scheduling latency on a simulated 5,000-node cluster.

    .venv/bin/python benchmarks/run.py scheduler             # 5,000 nodes, the full scenarios
    .venv/bin/python benchmarks/run.py scheduler --quick     # 500 nodes, 1/10 of the pods
    .venv/bin/python benchmarks/scheduler.py --nodes 5000 --profile   # + top matcher functions

The real scheduler core (parsing pod objects, queue, Fluxion allocator, accounting) runs against
an in-memory cluster of N nodes (32 cores, 128 GiB each); binds are recorded in memory (the API
round trip is not part of these figures). Scenarios, each in its own subprocess so the RSS printed
is that scenario's peak:

* ``single``      10,000 lone pods (1 core, 1 GiB) arrive at once; lone pods with identical
                  requests are matched in batches (``batch_size``, default 64);
* ``single-nobatch``  the same with batching off: one match per pod (Fluence's model);
* ``groups``      625 gangs of 16 pods (label groups) arrive at once, each matched once;
* ``spread``      the 10,000 lone pods through the kube-scheduler-like baseline allocator;
* ``restart``     start-up with the 10,000 pods already running (2 per node): the time from
                  the LIST results to ready (graph built, every pod registered) is ``seconds``;
* ``node-change`` with the 10,000 pods running, one node at a time gets a new label, a new
                  taint, a new allocatable cpu (resize) or a new zone (it moves in the graph):
                  the time ``on_node`` takes (median and max of 20 each; the graph is never
                  rebuilt, ``rebuilds`` stays 0);
* ``steady``      the 10,000 lone pods arriving at a steady ``--rate`` (default 800 pods/s) while
                  the loop runs (apply arrivals, one cycle, repeat): latency as users feel it
                  below saturation (in a burst, latency is mostly the wait behind the burst).

Throughput is pods (or groups) divided by the wall time from the first pod handed to the core to
the last bind decision; latency is, per pod, that decision's time minus the time the pod was
handed to the core (p50/p99). ``grpc`` measures one Match + Cancel round trip on loopback to a
``fluxinfra service`` in this process (16 nodes), median of 200.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the shared benchmarks/_table.py
from _table import format_table  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

SCENARIOS = ("single", "single-nobatch", "groups", "spread", "steady", "restart",
             "node-change", "grpc")


def _nodes(n: int) -> list[dict[str, Any]]:
    return [{"metadata": {"name": f"node{i:05d}", "labels": {}},
             "status": {"allocatable": {"cpu": "32", "memory": "128Gi", "pods": "110"}}}
            for i in range(n)]


def _pods(count: int, group: int) -> list[dict[str, Any]]:
    pods = []
    for i in range(count):
        labels = ({"fluxinfra.io/group": f"g{i // group}", "fluxinfra.io/group-size": str(group)}
                  if group > 1 else {})
        pods.append({"metadata": {"name": f"p{i}", "namespace": "bench", "uid": f"u{i}",
                                  "labels": labels, "creationTimestamp": "2026-01-01T00:00:00Z"},
                     "spec": {"schedulerName": "fluxion", "containers": [{
                         "name": "c", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}]},
                     "status": {"phase": "Pending"}})
    return pods


class _Recorder:
    """Binder that records when each pod's bind decision was made."""

    def __init__(self) -> None:
        self.decided: dict[str, float] = {}

    def bind(self, assignments):
        now = time.perf_counter()
        for pod, _ in assignments:
            self.decided[pod.uid] = now
        return [None] * len(assignments)

    def pod_event(self, *a: Any) -> None:
        pass

    def pod_unschedulable(self, *a: Any) -> None:
        pass

    def podgroup_event(self, *a: Any) -> None:
        pass

    def podgroup_status(self, *a: Any) -> None:
        pass

    def node_event(self, *a: Any) -> None:
        pass


def run_scenario(name: str, nodes: int, pods: int, profile: bool,
                 rate: float = 800.0) -> dict[str, Any]:
    from fluxinfra.scheduler.allocator import SpreadAllocator
    from fluxinfra.scheduler.core import SchedulerConfig, SchedulerCore
    from fluxinfra.scheduler.fluxion import FluxionAllocator

    if name == "grpc":
        return run_grpc()
    if name == "restart":
        return run_restart(nodes, pods)
    if name == "node-change":
        return run_node_change(nodes, pods)
    group = 16 if name == "groups" else 1
    pods = pods // group * group
    allocator = SpreadAllocator() if name == "spread" else FluxionAllocator("first")
    config = SchedulerConfig(batch_size=1 if name == "single-nobatch" else 64,
                             queue_depth=1_000_000)
    recorder = _Recorder()
    core = SchedulerCore(allocator, recorder, config)
    t0 = time.perf_counter()
    core.load(_nodes(nodes), [], [])
    load_s = time.perf_counter() - t0
    objs = _pods(pods, group)
    profiler = None
    if profile:
        import cProfile

        profiler = cProfile.Profile()
        profiler.enable()
    fed: dict[str, float] = {}
    start = time.perf_counter()
    if name == "steady":
        i = 0
        while i < len(objs) or core.pending_pods():
            due = min(len(objs), int((time.perf_counter() - start) * rate) + 1)
            while i < due:
                fed[objs[i]["metadata"]["uid"]] = time.perf_counter()
                core.on_pod("ADDED", objs[i], 0)
                i += 1
            core.schedule(0)
    else:
        for obj in objs:
            fed[obj["metadata"]["uid"]] = time.perf_counter()
            core.on_pod("ADDED", obj, 0)
        core.schedule(0)
    elapsed = time.perf_counter() - start
    if profiler is not None:
        profiler.disable()
    latencies = sorted(recorder.decided[u] - fed[u] for u in recorder.decided)
    out = {"scenario": name, "nodes": nodes, "pods": pods, "bound": len(recorder.decided),
           "groups": pods // group if group > 1 else 0, "load_s": load_s, "seconds": elapsed,
           "pods_per_s": len(recorder.decided) / elapsed if elapsed else 0.0,
           "p50_ms": 1000 * latencies[len(latencies) // 2] if latencies else 0.0,
           "p99_ms": 1000 * latencies[int(len(latencies) * 0.99) - 1] if latencies else 0.0,
           "matches": core.metrics.match_latency.count,
           "rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}
    if profiler is not None:
        import io
        import pstats

        buf = io.StringIO()
        pstats.Stats(profiler, stream=buf).sort_stats("tottime").print_stats(12)
        out["profile"] = buf.getvalue()
    return out


def run_restart(nodes: int, pods: int) -> dict[str, Any]:
    from fluxinfra.scheduler.core import SchedulerCore
    from fluxinfra.scheduler.fluxion import FluxionAllocator

    objs = _pods(pods, 1)
    for i, obj in enumerate(objs):
        obj["spec"]["nodeName"] = f"node{i % nodes:05d}"
        obj["status"]["phase"] = "Running"
    core = SchedulerCore(FluxionAllocator("first"), _Recorder())
    start = time.perf_counter()
    core.load(_nodes(nodes), [], objs)
    elapsed = time.perf_counter() - start
    held = sum(len(v) for v in core.held().values())
    return {"scenario": "restart", "nodes": nodes, "pods": pods, "bound": held,
            "seconds": elapsed, "p50_ms": None, "p99_ms": None,
            "matches": 0, "rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def run_node_change(nodes: int, pods: int, samples: int = 20) -> dict[str, Any]:
    import copy

    from fluxinfra.scheduler.core import SchedulerCore
    from fluxinfra.scheduler.fluxion import FluxionAllocator

    objs = _pods(pods, 1)
    for i, obj in enumerate(objs):
        obj["spec"]["nodeName"] = f"node{i % nodes:05d}"
        obj["status"]["phase"] = "Running"
    node_objs = _nodes(nodes)
    for i, n in enumerate(node_objs):
        n["metadata"]["labels"]["topology.kubernetes.io/zone"] = f"z{i % 4}"
    allocator = FluxionAllocator("first")
    core = SchedulerCore(allocator, _Recorder())
    core.load(node_objs, [], objs)
    core.schedule(0)
    changes = {
        "label": lambda n, k: n["metadata"]["labels"].__setitem__("pool", f"p{k}"),
        "taint": lambda n, k: n.setdefault("spec", {}).__setitem__(
            "taints", [{"key": "k", "value": str(k), "effect": "NoSchedule"}]),
        "resize": lambda n, k: n["status"]["allocatable"].__setitem__("cpu", str(33 + k)),
        "zone": lambda n, k: n["metadata"]["labels"].__setitem__(
            "topology.kubernetes.io/zone", f"z{(k + 1) % 4}"),
    }
    out: dict[str, Any] = {"scenario": "node-change", "nodes": nodes, "pods": pods,
                           "bound": sum(len(v) for v in core.held().values()),
                           "p50_ms": float("nan"), "p99_ms": float("nan"), "matches": 0}
    for kind, change in changes.items():
        times = []
        for k in range(samples):
            node = copy.deepcopy(node_objs[(k * 97) % nodes])
            change(node, k)
            t0 = time.perf_counter()
            core.on_node("MODIFIED", node, 0)
            core.schedule(0)
            times.append(time.perf_counter() - t0)
            node_objs[(k * 97) % nodes] = node
        times.sort()
        out[f"{kind}_ms"] = 1000 * statistics.median(times)
        out[f"{kind}_max_ms"] = 1000 * times[-1]
    out["rebuilds"] = allocator.rebuilds
    out["rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return out


def run_grpc(samples: int = 200) -> dict[str, Any]:
    from fluxinfra.kube.graph import graph_from_k8s
    from fluxinfra.matcher import Matcher
    from fluxinfra.service.client import FluxionClient
    from fluxinfra.service.jobspecs import slots_jobspec
    from fluxinfra.service.server import serve

    server, port = serve(Matcher(graph_from_k8s(_nodes(16), [], subtract_pods=False)),
                         host="127.0.0.1", port=0, workers=4)
    times = []
    try:
        with FluxionClient(f"127.0.0.1:{port}") as client:
            js = slots_jobspec(1, cores=1, memory_mib=1024, duration=60)
            for i in range(samples + 20):
                t0 = time.perf_counter()
                result = client.match(js)
                elapsed = time.perf_counter() - t0
                client.cancel(result.jobid)
                if i >= 20:  # warm-up
                    times.append(elapsed)
    finally:
        server.stop(grace=None)
    times.sort()
    return {"scenario": "grpc", "nodes": 16, "pods": samples, "bound": samples,
            "p50_ms": 1000 * statistics.median(times),
            "p99_ms": 1000 * times[int(len(times) * .99) - 1],
            "rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


LEGEND = {
    "scenario": "single: lone pods at once (batched matches); single-nobatch: one match per "
                "pod; groups: gangs of 16; spread: the kube-scheduler-like baseline; restart: "
                "start-up with the pods running; steady: arrivals at --rate; grpc: Match + "
                "Cancel round trip on loopback",
    "seconds": "wall time from the first pod handed to the core to the last bind decision "
               "(restart: from the LIST results to ready)",
    "pods/s": "pods bound per second of that wall time",
    "groups/s": "gangs bound per second",
    "p50 ms": "median time from a pod's arrival to its bind decision (grpc: per round trip)",
    "p99 ms": "99th percentile of the same",
    "matches": "matcher calls",
    "RSS MiB": "peak resident memory of the scenario's own process",
}


def _table(rows: list[dict[str, Any]]) -> str:
    headers = ["scenario", "nodes", "pods", "bound", "seconds", "pods/s", "groups/s", "p50 ms",
               "p99 ms", "matches", "RSS MiB"]
    table = []
    for r in rows:
        seconds = r.get("seconds")
        groups_s = r["groups"] / seconds if r.get("groups") and seconds else None
        table.append([r["scenario"], r["nodes"], r["pods"], r["bound"], seconds,
                      r.get("pods_per_s"), groups_s, r.get("p50_ms"), r.get("p99_ms"),
                      r.get("matches") or None, r["rss_mib"]])
    return format_table(headers, table, legend=LEGEND)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="benchmarks/run.py scheduler",
                                description=__doc__.split("\n")[0])
    p.add_argument("--nodes", type=int, default=5000,
                   help="simulated nodes, 32 cores and 128 GiB each (default 5000)")
    p.add_argument("--pods", type=int, default=10_000, help="pods per scenario (default 10000)")
    p.add_argument("--quick", action="store_true", help="500 nodes, 1,000 pods")
    p.add_argument("--scenarios", default=",".join(SCENARIOS),
                   help=f"comma-separated (default {','.join(SCENARIOS)})")
    p.add_argument("--profile", action="store_true", help="print the top functions per scenario")
    p.add_argument("--rate", type=float, default=800.0,
                   help="arrivals/s in the steady scenario (default 800)")
    p.add_argument("--json", help="write the raw rows to this file")
    p.add_argument("--one", help=argparse.SUPPRESS)  # run one scenario in this process
    return p


def main(argv: list[str] | None = None) -> int:
    args, _ = parser().parse_known_args(argv)
    if args.quick:
        args.nodes, args.pods = 500, 1000
    if args.one:
        print(json.dumps(run_scenario(args.one, args.nodes, args.pods, args.profile,
                                      args.rate)))
        return 0
    rows = []
    for name in args.scenarios.split(","):
        cmd = [sys.executable, __file__, "--one", name, "--nodes", str(args.nodes),
               "--pods", str(args.pods), "--rate", str(args.rate)]
        cmd += ["--profile"] if args.profile else []
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
        if proc.returncode != 0:
            print(f"scenario {name} failed:\n{proc.stderr}", file=sys.stderr)
            return 1
        rows.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    print(f"scheduler benchmark: {args.nodes} nodes x 32 cores, {args.pods} pods "
          "(1 core, 1 GiB); one run each, wall time on this machine")
    print(_table(rows))
    single = next((r for r in rows if r["scenario"] == "single"), None)
    spread = next((r for r in rows if r["scenario"] == "spread"), None)
    if single and spread and spread["pods_per_s"]:
        print(f"\nsingle vs spread baseline: {single['pods_per_s'] / spread['pods_per_s']:.2f}x")
    change = next((r for r in rows if r["scenario"] == "node-change"), None)
    if change:
        print("\nnode changes at " + f"{change['nodes']} nodes / {change['pods']} running pods "
              "(on_node + one cycle, median / max ms): " + ", ".join(
                  f"{k} {change[k + '_ms']:.1f} / {change[k + '_max_ms']:.1f}"
                  for k in ("label", "taint", "resize", "zone"))
              + f"; graph rebuilds: {change['rebuilds']}")
    for r in rows:
        if r.get("profile"):
            print(f"\n--- profile: {r['scenario']} ---\n{r['profile']}")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
