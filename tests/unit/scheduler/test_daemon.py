"""The daemon loop for real: informer threads, the apply/schedule loop, /healthz and /metrics."""

from __future__ import annotations

import threading
import time
import urllib.error
import urllib.request

from fluxinfra.scheduler.binder import KubeBinder
from fluxinfra.scheduler.core import SchedulerCore
from fluxinfra.scheduler.fluxion import FluxionAllocator
from fluxinfra.scheduler.metrics import Metrics, serve_http
from fluxinfra.scheduler.runner import Runner

from .kube_double import KubeApiDouble, make_node, make_pod


def wait_for(predicate, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_daemon_binds_watched_pods_and_serves_health_and_metrics() -> None:
    api = KubeApiDouble()
    api.create("nodes", make_node("n0", cpu="8", memory="32Gi"))
    api.create("pods", make_pod("early", cpu="2"))
    metrics = Metrics()
    binder = KubeBinder(api, metrics=metrics, workers=4, async_events=True)
    core = SchedulerCore(FluxionAllocator(), binder, metrics=metrics)
    runner = Runner(api, core, idle_wait=0.05)
    server = serve_http(metrics, runner.healthy, "127.0.0.1", 0)
    base = f"http://127.0.0.1:{server.server_address[1]}"
    assert get(base + "/healthz")[0] == 503, "not ready before the initial sync"
    thread = threading.Thread(target=runner.run, daemon=True)
    thread.start()
    try:
        wait_for(lambda: api.get("pods", "default/early")["spec"].get("nodeName"))
        assert get(base + "/healthz") == (200, "ok\n")
        for i in range(3):  # arrive through the watch
            api.create("pods", make_pod(f"late{i}", cpu="2"))
        wait_for(lambda: all(api.get("pods", f"default/late{i}")["spec"].get("nodeName")
                             for i in range(3)))
        binder.flush()
        status, text = get(base + "/metrics")
        assert status == 200
        assert "fluxinfra_scheduler_pods_bound_total 4" in text
        assert "fluxinfra_scheduler_queue_depth 0" in text
        assert 'fluxinfra_scheduler_match_duration_seconds_bucket{le="+Inf"}' in text
        # The core reports Scheduled after the bind returns, so the last Event may still be on
        # its way when the pods already show their nodeName.
        wait_for(lambda: len([e for e in api.events if e["reason"] == "Scheduled"]) == 4)
    finally:
        runner.stop()
        thread.join(10)
        server.shutdown()
        binder.close()
    assert not thread.is_alive()


def test_forbidden_initial_list_is_a_clear_error() -> None:
    import pytest

    from fluxinfra.scheduler.runner import StartupError

    api = KubeApiDouble()
    api.fail_next("list_pods", 403)
    runner = Runner(api, SchedulerCore(FluxionAllocator(), KubeBinder(api)))
    with pytest.raises(StartupError, match="listing pods failed: 403.*ClusterRole"):
        runner.start()
