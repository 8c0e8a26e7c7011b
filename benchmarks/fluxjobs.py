"""Queue benchmark: the webhook's latency over real HTTPS, and FluxJobs admitted per second.

    .venv/bin/python benchmarks/run.py fluxjobs            # full size
    .venv/bin/python benchmarks/run.py fluxjobs --quick    # 1/10 of the Jobs, 100 nodes

* ``webhook``: ``fluxinfra queue webhook``'s server on loopback (real TLS, one kept-alive
  connection, as the API server keeps one) answering AdmissionReviews for a Job and a Pod;
  p50 / p99 / max of the round trip as the client sees it, and the server's own handling time.
  The API server's view (``apiserver_admission_webhook_admission_duration_seconds``) adds its
  own serialisation; that figure needs the real-Kubernetes test bed.
* ``admit-1``: 1,000 single-pod Jobs on 1,000 nodes; ``admit-16``: 200 Jobs of 16 pods. The
  queue runs hosted in the real scheduler core with the real matcher, against the tests' API
  double (every object stored, watched and patched in memory; schema validation off), so the
  figure is the controller's own cost from a Job's creation to its un-suspend patch: Jobs/s
  = Jobs / wall time from the first Job created to the last admitted. Against a real API server
  the writes (FluxJob create, Job patch, FluxJob status) add their round trips; the queue makes
  them in parallel (``QueueConfig.workers``).
"""

from __future__ import annotations

import argparse
import http.client
import json
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
                         "p50_ms": round(hist._sum / hist.count * 1e3, 3)})
        finally:
            server.shutdown()
            server.server_close()
    return rows


def bench_admission(nodes: int, jobs: int, pods: int) -> dict[str, Any]:
    sys.path.insert(0, str(ROOT / "tests" / "unit"))
    import fluxqueue.queue_double as qd  # noqa: E402
    import scheduler.kube_double as kd  # noqa: E402
    from fluxqueue.harness import QueueHarness, job  # noqa: E402

    def off(*_: Any, **__: Any) -> None:
        return None

    kd.validate = qd.validate = off  # schema checks are the tests' job, not the benchmark's
    qd.jsonschema.validate = off
    api = qd.QueueApiDouble(history=10**7)
    for i in range(nodes):
        api.create("nodes", kd.make_node(f"n{i:04d}", cpu="32", memory="128Gi"))
    h = QueueHarness(api).start()
    h.queue.config.workers = 1
    t0 = time.perf_counter()
    for i in range(jobs):
        api.create_job(job(f"j{i:05d}", pods=pods, cpu="1", duration="3600s"))
    admitted = 0
    cycles = 0
    while admitted < jobs and cycles < 10_000:
        h.runner.pump()
        cycles += 1
        admitted = sum(1 for j in api.objects["jobs"].values()
                       if j["spec"].get("suspend") is False)
    wall = time.perf_counter() - t0
    return {"scenario": f"admit {jobs} x {pods}-pod Jobs, {nodes} nodes", "admitted": admitted,
            "jobs_per_s": round(admitted / wall, 1), "pods_per_s": round(admitted * pods / wall),
            "wall_s": round(wall, 2), "cycles": cycles}


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="benchmarks/run.py fluxjobs")
    p.add_argument("--quick", action="store_true")
    p.add_argument("--requests", type=int, default=2000)
    args, _ = p.parse_known_args(argv)
    scale = 10 if args.quick else 1
    rows: list[dict[str, Any]] = bench_webhook(args.requests // scale)
    nodes = 1000 // scale
    rows.append(bench_admission(nodes, 1000 // scale, 1))
    rows.append(bench_admission(nodes, 200 // scale, 16))
    for row in rows:
        print("  ".join(f"{k}={v}" for k, v in row.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
