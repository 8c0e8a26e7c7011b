"""Queue benchmark: the webhook's latency over real HTTPS, and FluxJobs admitted per second.

    .venv/bin/python benchmarks/run.py fluxjobs            # full size, in process
    .venv/bin/python benchmarks/run.py fluxjobs --quick    # 1/10 of the Jobs, 100 nodes
    sudo FLUXINFRA_KUBE_BIN=/path/to/kubernetes/bin .venv/bin/python benchmarks/run.py \
        fluxjobs --real                                    # + against a real API server

``--real`` starts a test bed (``scripts/kube``: etcd, kube-apiserver, kube-controller-manager;
no kube-scheduler, no real node) with 1,000 hollow nodes (32 cores, 128 GiB), the webhook and
the scheduler with the queue as their own processes (``tests/e2e/queue_env.py``), and creates
the Jobs through the API as fast as 8 client threads can: Jobs/s is the number of Jobs over the
time from the first create call to the last un-suspend seen on a watch (so it can be no faster
than the API server takes the creates). A third run, ``a backlog of``, creates 1,000 Jobs while
the scheduler is stopped (the webhook suspends them) and starts it: Jobs/s from its start
(initial LIST and rebuild included) to the last un-suspend, the queue's own pace against the
API server. Before the queue starts, the bench waits until the node-lifecycle controller has
lifted the not-ready taint from every hollow node. The webhook's latency is
the API server's own histogram, ``apiserver_admission_webhook_admission_duration_seconds``
(its buckets are coarse: 5 ms, 25 ms, 100 ms; quantiles are interpolated within a bucket, and
the share answered under 5 ms is printed beside them).

* ``webhook``: ``fluxinfra queue webhook``'s server on loopback (real TLS, one kept-alive
  connection, as the API server keeps one) answering AdmissionReviews for a Job and a Pod;
  p50 / p99 / max of the round trip as the client sees it, and the server's own handling time.
  The API server's view (``apiserver_admission_webhook_admission_duration_seconds``) adds its
  own serialisation; that figure needs the real-Kubernetes test bed.
* ``admit-1``: 1,000 single-pod Jobs on 1,000 nodes; ``admit-16``: 200 Jobs of 16 pods. The
  queue runs hosted in the real scheduler core with the real matcher, against the tests' API
  double (every object stored, watched and patched in memory; schema validation off), so the
  figure is the controller's own cost from a Job's creation to its un-suspend patch: Jobs/s
  = Jobs / wall time from the first Job created to the last admitted. The writes go through
  the queue's pool as in the daemon (``QueueConfig.workers``; the loop never waits for them).
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import ssl
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def _percentiles(samples: list[float]) -> tuple[float, float, float]:
    ordered = sorted(samples)
    return (statistics.median(ordered), ordered[int(0.99 * (len(ordered) - 1))], ordered[-1])


def bench_webhook(requests: int) -> list[dict[str, Any]]:
    sys.path.insert(0, str(ROOT / "tests" / "unit"))
    from fluxqueue.test_webhook import admission, make_job  # noqa: E402
    from fluxqueue.tlsutil import make_certs  # noqa: E402
    from scheduler.kube_double import make_pod  # noqa: E402

    from fluxinfra.queue.webhook import WebhookConfig, serve

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        ca, cert, key = make_certs(Path(tmp), ["127.0.0.1"])
        server = serve(WebhookConfig(), str(cert), str(key), host="127.0.0.1", port=0)
        context = ssl.create_default_context(cafile=str(ca))
        try:
            for kind, obj in (("Job", make_job("bench", parallelism=16)),
                              ("Pod", make_pod("bench", "team-a"))):
                body = json.dumps(admission(obj)).encode()
                conn = http.client.HTTPSConnection("127.0.0.1", server.server_address[1],
                                                   context=context)
                samples = []
                for _ in range(requests):
                    t0 = time.perf_counter()
                    conn.request("POST", "/mutate?timeout=3s", body=body,
                                 headers={"Content-Type": "application/json"})
                    resp = conn.getresponse()
                    resp.read()
                    samples.append(time.perf_counter() - t0)
                    assert resp.status == 200
                conn.close()
                p50, p99, worst = _percentiles(samples)
                rows.append({"scenario": f"webhook {kind}", "requests": requests,
                             "p50_ms": round(p50 * 1e3, 3), "p99_ms": round(p99 * 1e3, 3),
                             "max_ms": round(worst * 1e3, 3)})
            hist = server.metrics.latency  # type: ignore[attr-defined]
            rows.append({"scenario": "webhook server-side mean", "requests": hist.count,
                         "p50_ms": round(hist.sum / hist.count * 1e3, 3)})
        finally:
            server.shutdown()
            server.server_close()
    return rows


def bench_admission(nodes: int, jobs: int, pods: int) -> dict[str, Any]:
    sys.path.insert(0, str(ROOT / "tests" / "unit"))
    import fluxqueue.queue_double as qd  # noqa: E402
    import scheduler.kube_double as kd  # noqa: E402
    from fluxqueue.harness import QueueHarness, job  # noqa: E402

    from fluxinfra.queue.controller import QueueConfig

    def off(*_: Any, **__: Any) -> None:
        return None

    kd.validate = qd.validate = off  # schema checks are the tests' job, not the benchmark's
    qd.jsonschema.validate = off
    api = qd.QueueApiDouble(history=10**7)
    for i in range(nodes):
        api.create("nodes", kd.make_node(f"n{i:04d}", cpu="32", memory="128Gi"))
    h = QueueHarness(api, workers=QueueConfig.workers).start()  # the production path
    t0 = time.perf_counter()
    for i in range(jobs):
        api.create_job(job(f"j{i:05d}", pods=pods, cpu="1", duration="3600s"))
    admitted = 0
    cycles = 0
    while admitted < jobs and cycles < 10_000:
        h.runner.pump()  # writes are collected by later cycles, as in the daemon
        cycles += 1
        admitted = sum(1 for j in api.objects["jobs"].values()
                       if j["spec"].get("suspend") is False)
    wall = time.perf_counter() - t0
    return {"scenario": f"admit {jobs} x {pods}-pod Jobs, {nodes} nodes", "admitted": admitted,
            "jobs_per_s": round(admitted / wall, 1), "pods_per_s": round(admitted * pods / wall),
            "wall_s": round(wall, 2), "cycles": cycles}


def _webhook_histogram(text: str) -> dict[float, float]:
    """Cumulative counts by upper bound of the API server's webhook admission histogram for
    the queue's webhooks (summed over the two and over operations)."""
    counts: dict[float, float] = {}
    metric = "apiserver_admission_webhook_admission_duration_seconds_bucket{"
    for line in text.splitlines():
        if not line.startswith(metric) or "queue.fluxinfra.io" not in line:
            continue
        labels, value = line[len(metric):].rsplit("} ", 1)
        le = labels.split('le="', 1)[1].split('"', 1)[0]
        bound = float("inf") if le == "+Inf" else float(le)
        counts[bound] = counts.get(bound, 0.0) + float(value)
    return counts


def _api_writes(text: str) -> dict[str, float]:
    """Writes (create, patch, update) the API server answered, by resource[/subresource]:
    ``apiserver_request_total`` summed over codes and scopes; the resources the queue and the
    Job controller touch."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if not line.startswith("apiserver_request_total{"):
            continue
        labels, value = line[len("apiserver_request_total{"):].rsplit("} ", 1)
        fields = dict(part.split("=", 1) for part in labels.split(",") if "=" in part)
        fields = {k: v.strip('"') for k, v in fields.items()}
        resource = fields.get("resource", "")
        if fields.get("verb") not in ("POST", "PATCH", "PUT") or resource not in (
                "jobs", "fluxjobs", "pods", "events"):
            continue
        key = resource + (f"/{fields['subresource']}" if fields.get("subresource") else "")
        key = f"{fields['verb'].lower()}:{key}"
        out[key] = out.get(key, 0.0) + float(value)
    return out


def _quantile(counts: dict[float, float], q: float) -> float:
    bounds = sorted(counts)
    total = counts[bounds[-1]]
    target, below, lower = q * total, 0.0, 0.0
    for bound in bounds:
        if counts[bound] >= target:
            if bound == float("inf"):
                return lower
            share = (target - below) / max(1e-9, counts[bound] - below)
            return lower + share * (bound - lower)
        below, lower = counts[bound], bound
    return lower


def _settle_nodes(cluster: Any, count: int, timeout: float = 300.0) -> None:
    """Wait until the node-lifecycle controller has lifted the not-ready taint it puts on
    every new node, so the queue starts on the cluster it is measured on (each lifted taint
    is a node entering the scheduler's graph, work that is no part of admitting Jobs)."""
    deadline = time.monotonic() + timeout
    while True:
        items = json.loads(cluster.kubectl("get", "nodes", "-o", "json").stdout)["items"]
        tainted = [n for n in items if any(t.get("key", "").startswith("node.kubernetes.io/")
                                           for t in n["spec"].get("taints") or [])]
        if len(items) >= count and not tainted:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"{len(tainted)} of {len(items)} nodes still tainted after "
                               f"{timeout:.0f} s")
        time.sleep(2)


def bench_real(nodes: int, scenarios: list[tuple[int, int, bool]]) -> list[dict[str, Any]]:
    import threading
    from concurrent.futures import ThreadPoolExecutor

    sys.path.insert(0, str(ROOT / "scripts"))
    sys.path.insert(0, str(ROOT / "tests" / "e2e"))
    import kubebed  # noqa: E402
    from e2e_cluster import Cluster  # noqa: E402
    from kubernetes import client, watch  # noqa: E402
    from queue_env import running_queue  # noqa: E402

    rows: list[dict[str, Any]] = []
    bed = kubebed.Bed.up(f"fluxjobs-bench-{os.getpid()}", real_node=False, scheduler=False,
                         node_monitor_grace=300)
    work = Path(tempfile.mkdtemp(prefix="fluxjobs-bench-"))
    try:
        bed.add_hollow_nodes([kubebed.node_object(f"h{i:04d}", cpu="32", memory="128Gi")
                              for i in range(nodes)])
        cluster = Cluster(bed.kubeconfig, work / "kubectl-cache", bed)
        _settle_nodes(cluster, nodes)
        with running_queue(cluster, work, timeout_seconds=3) as queue:
            api_client = cluster.client()
            batch = client.BatchV1Api(api_client)
            for jobs, pods, backlog in scenarios:
                ns = f"bench-{jobs}x{pods}" + ("-backlog" if backlog else "")
                cluster.kubectl("create", "namespace", ns)
                cluster.kubectl("label", "namespace", ns, "fluxinfra.io/queue=enabled")
                started: dict[str, float] = {}
                admitted: dict[str, float] = {}
                done = threading.Event()

                def follow(namespace: str = ns, total: int = jobs,
                           seen: dict[str, float] = admitted, stop: threading.Event = done
                           ) -> None:
                    w = watch.Watch()
                    for event in w.stream(batch.list_namespaced_job, namespace,
                                          timeout_seconds=600):
                        job = event["object"]
                        if job.spec.suspend is False and job.metadata.name not in seen:
                            seen[job.metadata.name] = time.perf_counter()
                            if len(seen) >= total:
                                stop.set()
                                w.stop()

                follower = threading.Thread(target=follow, daemon=True)
                follower.start()
                time.sleep(0.5)

                def create(i: int, namespace: str = ns, count: int = pods,
                           when: dict[str, float] = started) -> None:
                    name = f"j{i:05d}"
                    body = {"apiVersion": "batch/v1", "kind": "Job",
                            "metadata": {"name": name, "namespace": namespace},
                            "spec": {"parallelism": count, "completions": count,
                                     "template": {"metadata": {"annotations": {
                                         "fluxinfra.io/duration": "3600s"}},
                                         "spec": {"restartPolicy": "Never", "containers": [{
                                             "name": "main", "image": "busybox",
                                             "resources": {"requests": {
                                                 "cpu": "1", "memory": "1Gi"}}}]}}}}
                    when[name] = time.perf_counter()
                    batch.create_namespaced_job(namespace, body, _preload_content=False)

                if backlog:
                    queue.stop_scheduler()
                t0 = time.perf_counter()
                with ThreadPoolExecutor(8) as pool:
                    list(pool.map(create, range(jobs)))
                created = time.perf_counter() - t0
                if backlog:  # the queue's own pace: from its start to the last un-suspend
                    t0 = time.perf_counter()
                    started = dict.fromkeys(started, t0)
                    queue.start_scheduler()
                done.wait(600)
                last = max(admitted.values(), default=t0)
                waits = sorted(admitted[n] - started[n] for n in admitted)
                what = "a backlog of " if backlog else ""
                rows.append({
                    "scenario": f"real API: admit {what}{jobs} x {pods}-pod Jobs, {nodes} nodes",
                    "admitted": len(admitted), "jobs_per_s": round(len(admitted) / (last - t0),
                                                                   1),
                    "create_s": round(created, 2), "wall_s": round(last - t0, 2),
                    "wait_p50_s": round(statistics.median(waits), 3) if waits else None,
                    "wait_p99_s": round(waits[int(0.99 * (len(waits) - 1))], 3)
                    if waits else None})
            own = queue.webhook_metrics()
            total = sum_ = 0.0
            for line in own.splitlines():
                if line.startswith("fluxinfra_queue_webhook_duration_seconds_sum"):
                    sum_ = float(line.split()[-1])
                elif line.startswith("fluxinfra_queue_webhook_duration_seconds_count"):
                    total = float(line.split()[-1])
            rows.append({"scenario": "real API: webhook's own handling time (mean)",
                         "requests": int(total),
                         "p50_ms": round(sum_ / total * 1e3, 3) if total else None})
            metrics = cluster.kubectl("get", "--raw", "/metrics").stdout
            jobs_made = sum(j for j, _, _ in scenarios)
            requests = _api_writes(metrics)
            rows.append({"scenario": "real API: writes the API server took, per Job",
                         **{k: round(v / jobs_made, 2) for k, v in sorted(requests.items())}})
            counts = _webhook_histogram(metrics)
            if counts:
                total = counts[max(counts)]
                rows.append({"scenario": "real API: webhook admission duration (API server)",
                             "requests": int(total),
                             "p50_ms": round(_quantile(counts, 0.5) * 1e3, 2),
                             "p99_ms": round(_quantile(counts, 0.99) * 1e3, 2),
                             "under_5ms": f"{100 * counts.get(0.005, 0) / total:.1f}%"})
    finally:
        bed.down()
    return rows


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="benchmarks/run.py fluxjobs")
    p.add_argument("--quick", action="store_true")
    p.add_argument("--requests", type=int, default=2000)
    p.add_argument("--real", action="store_true",
                   help="also against a real API server (a test bed; root and the binaries)")
    args, _ = p.parse_known_args(argv)
    scale = 10 if args.quick else 1
    rows: list[dict[str, Any]] = bench_webhook(args.requests // scale)
    nodes = 1000 // scale
    rows.append(bench_admission(nodes, 1000 // scale, 1))
    rows.append(bench_admission(nodes, 200 // scale, 16))
    if args.real:
        rows += bench_real(nodes, [(1000 // scale, 1, False), (200 // scale, 16, False),
                                   (1000 // scale, 1, True)])
    print(_table(rows))
    return 0


#: a row's key -> its column's header (keys not named here are their own header)
HEADERS = {"p50_ms": "p50 ms", "p99_ms": "p99 ms", "max_ms": "max ms", "jobs_per_s": "Jobs/s",
           "pods_per_s": "pods/s", "wall_s": "wall s", "create_s": "create s",
           "wait_p50_s": "wait p50 s", "wait_p99_s": "wait p99 s", "under_5ms": "under 5 ms"}
LEGEND = {
    "requests": "AdmissionReviews answered",
    "p50 ms": "webhook: median round trip (server-side and real-API rows: mean handling time, "
              "or the API server's own histogram)",
    "admitted": "Jobs un-suspended by the queue",
    "Jobs/s": "Jobs admitted per second, from the first Job created to the last admitted",
    "wall s": "that time",
    "cycles": "scheduling cycles the queue ran",
    "wait p50 s": "median time from a Job's creation to its un-suspend",
}


def _table(rows: list[dict[str, Any]]) -> str:
    """The scenarios as one table: a column per figure any scenario has, in first-seen order."""
    sys.path.insert(0, str(ROOT / "benchmarks"))  # the shared benchmarks/_table.py
    from _table import format_table

    keys = list(dict.fromkeys(key for row in rows for key in row))
    return format_table([HEADERS.get(key, key) for key in keys],
                        [[row.get(key) for key in keys] for row in rows], legend=LEGEND)


def tools(argv: list[str]) -> list[str]:
    """The outside programs a run uses (benchmarks/run.py records their versions)."""
    return ["kubernetes"] if "--real" in argv else []


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
