"""The scheduler's and the queue's metrics: prometheus_client's, each component in its own
registry, served on one ``/metrics`` page by ``serve_http``."""

from __future__ import annotations

import urllib.request

import pytest
from prometheus_client import REGISTRY
from prometheus_client.parser import text_string_to_metric_families

from fluxinfra.queue.metrics import QueueMetrics, combined
from fluxinfra.scheduler.metrics import Metrics, serve_http


def families(text: str) -> dict[str, tuple[str, str, list]]:
    """name -> (type, help, samples), read back with prometheus_client's own parser."""
    return {f.name: (f.type, f.documentation, f.samples)
            for f in text_string_to_metric_families(text)}


def test_two_schedulers_in_one_process_keep_their_own_counts() -> None:
    """Each Metrics has its own registry: no collision, no count shared, and nothing is added
    to the library's global default registry."""
    before = {f.name for f in REGISTRY.collect()}
    one, two = Metrics(), Metrics()
    one.pods_bound.inc(3)
    two.pods_bound.inc()
    one.errors.inc(source="bind")
    one.errors.inc(2, source="bind")
    assert (one.pods_bound.value(), two.pods_bound.value()) == (3, 1)
    assert one.errors.value(source="bind") == 3 and two.errors.value(source="bind") == 0
    assert {f.name for f in REGISTRY.collect()} == before


def test_the_page_keeps_every_name_type_and_help() -> None:
    m = Metrics()
    m.unschedulable.inc(reason="unsatisfiable")
    m.match_latency.observe(0.003)
    m.match_latency.observe(20.0)
    m.matcher_replays.set_function(lambda: 2)
    m.queue_depth.set_function(lambda: 5)
    got = families(m.render())
    assert got["fluxinfra_scheduler_pods_bound"][:2] == ("counter",
                                                         "Pods bound by this scheduler.")
    assert got["fluxinfra_scheduler_queue_depth"][0] == "gauge"
    assert got["fluxinfra_scheduler_queue_depth"][2][0].value == 5
    replays = got["fluxinfra_scheduler_matcher_replays"]
    assert replays[0] == "counter" and [s.value for s in replays[2]] == [2]
    assert [(s.labels, s.value) for s in got["fluxinfra_scheduler_unschedulable"][2]
            if s.name.endswith("_total")] == [({"reason": "unsatisfiable"}, 1)]
    kind, _, samples = got["fluxinfra_scheduler_match_duration_seconds"]
    buckets = {s.labels["le"]: s.value for s in samples if s.name.endswith("_bucket")}
    assert kind == "histogram" and buckets["0.0025"] == 0 and buckets["0.005"] == 1
    assert buckets["10.0"] == 1 and buckets["+Inf"] == 2
    assert m.match_latency.count == 2 and m.match_latency.sum == pytest.approx(20.003)


def test_one_page_serves_the_scheduler_and_the_queue() -> None:
    sched, queue = Metrics(), QueueMetrics()
    sched.pods_bound.inc(4)
    queue.admitted.inc(2)
    queue.transitions.inc(state="Admitted")
    server = serve_http(combined(sched, queue), lambda: True, "127.0.0.1", 0)
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/metrics"
        with urllib.request.urlopen(url, timeout=5) as resp:
            assert resp.headers["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
            got = families(resp.read().decode())
    finally:
        server.shutdown()
        server.server_close()
    assert got["fluxinfra_scheduler_pods_bound"][2][0].value == 4
    assert got["fluxinfra_queue_admitted"][2][0].value == 2
    assert [s.labels for s in got["fluxinfra_queue_transitions"][2]
            if s.name.endswith("_total")] == [{"state": "Admitted"}]
