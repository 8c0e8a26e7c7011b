"""What node overhead costs the scheduler: a DaemonSet pod arriving on nodes of a live graph.

    .venv/bin/python benchmarks/run.py node_overhead [--quick] [--sizes 100,1000]

DaemonSet and mirror pods are taken out of what a node offers (docs/scheduler.md, "Node
overhead"), so one arriving re-offers its node: the node is removed and attached again, which
re-indexes the whole graph. The Fluxion allocator, in process, with every node holding one
registration of running pods. Per size, side by side in one run: registering a pod's amounts
(what a DaemonSet pod cost when it was an allocation), re-offering one node, and a DaemonSet
created over every node at once (one rebuild, past ``REBUILD_AFTER`` nodes) against what
re-offering each node would take.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the shared benchmarks/_table.py
from _table import format_table  # noqa: E402

LEGEND = {
    "nodes": "nodes in the graph (32 cpu, 128Gi, 110 pods each; one registration each)",
    "register ms": "median: a 50m / 64Mi pod registered as an allocation on one node",
    "re-offer ms": "median: one node re-offered with that pod taken out (re-attached)",
    "rollout s": "a DaemonSet's pod on every node at once: upsert_nodes (one rebuild)",
    "one by one s": "the same estimated as one re-offer per node (re-offer ms x nodes)",
}


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="benchmarks/run.py node_overhead",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="100 nodes, 5 samples")
    p.add_argument("--sizes", default="100,1000", help="node counts (default 100,1000)")
    p.add_argument("--samples", type=int, default=15, help="samples per median (default 15)")
    return p


def _nodes(n: int) -> list[dict]:
    return [{"metadata": {"name": f"n{i}", "labels": {}}, "status": {"allocatable": {
        "cpu": "32", "memory": "128Gi", "pods": "110"}}} for i in range(n)]


def measure(n: int, samples: int) -> list[object]:
    from fluxinfra.scheduler.fluxion import FluxionAllocator
    from fluxinfra.scheduler.overhead import offered_node
    from fluxinfra.scheduler.pods import Request

    nodes = _nodes(n)
    alloc = FluxionAllocator(policy="lonode", levels="")
    alloc.set_nodes(nodes)
    for i in range(n):
        alloc.adopt(f"n{i}", Request.of({"cpu": 1000, "memory": 2**30}), 2, now=0,
                    duration=3600)
    pod = Request.of({"cpu": 50, "memory": 64 * 2**20})
    register, offer = [], []
    for k in range(samples):
        node = nodes[k * 7 % n]
        t0 = time.perf_counter()
        job = alloc.adopt(node["metadata"]["name"], pod, 1, now=0, duration=3600)
        register.append(time.perf_counter() - t0)
        alloc.cancel(job)
        t0 = time.perf_counter()
        alloc.upsert_node(offered_node(node, pod, 1))
        offer.append(time.perf_counter() - t0)
        alloc.upsert_node(node)
    t0 = time.perf_counter()
    alloc.upsert_nodes([offered_node(node, pod, 1) for node in nodes])
    rollout = time.perf_counter() - t0
    one = statistics.median(offer)
    return [n, statistics.median(register) * 1e3, one * 1e3, rollout, one * n]


def main(argv: list[str]) -> int:
    args, _ = parser().parse_known_args(argv)
    sizes = [100] if args.quick else [int(s) for s in args.sizes.split(",") if s.strip()]
    samples = 5 if args.quick else max(1, args.samples)
    rows = [measure(n, samples) for n in sizes]
    print(format_table(["nodes", "register ms", "re-offer ms", "rollout s", "one by one s"],
                       rows, legend=LEGEND))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
