"""The queue's processes on a real cluster, for the e2e tests and the benchmark: the webhook
(``fluxinfra queue webhook``, real TLS on loopback, its CA in a MutatingWebhookConfiguration
that points the API server at it by URL) and the scheduler with the queue hosted in it
(``fluxinfra scheduler --queue``), each a process of its own, with their logs."""

from __future__ import annotations

import base64
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from e2e_cluster import REPO, Cluster, wait_for

from fluxinfra.k8s.queue import FluxQueueArgs, webhook_configuration
from fluxinfra.pki import make_service_tls
from fluxinfra.queue.api import fluxjob_crd, fluxjobqueue_crd

__all__ = ["SCHEDULER", "Queue", "running_queue"]

SCHEDULER = "fluxion-queue-e2e"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start(args: list[str], log: Path, env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "fluxinfra", *args], cwd=REPO, env=env,
                            stdout=log.open("w"), stderr=subprocess.STDOUT,
                            start_new_session=True)


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


class Queue:
    """The webhook and the scheduler-with-queue processes, and what tests ask of them."""

    def __init__(self, cluster: Cluster, work: Path, scheduler_args: tuple[str, ...] = ()
                 ) -> None:
        self.cluster = cluster
        self.work = work
        self.scheduler_args = scheduler_args
        self.env = dict(os.environ, KUBECONFIG=str(cluster.kubeconfig))
        self.scheduler: subprocess.Popen | None = None
        self.restarts = 0
        self.webhook_port = 0

    def start_scheduler(self) -> None:
        port = _free_port()
        self.scheduler = _start(
            ["scheduler", "--queue", "--scheduler-name", SCHEDULER, "--no-leader-elect",
             "--kubeconfig", str(self.cluster.kubeconfig), "--port", str(port), "--host",
             "127.0.0.1", "--resync", "30", *self.scheduler_args],
            self.work / f"scheduler-{self.restarts}.log", self.env)
        self.restarts += 1

        def healthy() -> bool:
            assert self.scheduler is not None and self.scheduler.poll() is None, self.log()
            try:
                return urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz",
                                              timeout=2).status == 200
            except OSError:
                return False
        wait_for(healthy, 90, "the scheduler's /healthz")

    def stop_scheduler(self) -> None:
        if self.scheduler is not None:
            _stop(self.scheduler)

    def webhook_metrics(self) -> str:
        """The webhook's own /metrics (its handling time, as it measures it)."""
        import ssl

        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        url = f"https://127.0.0.1:{self.webhook_port}/metrics"
        with urllib.request.urlopen(url, context=context, timeout=5) as resp:
            return resp.read().decode()

    def log(self) -> str:
        logs = sorted(self.work.glob("*.log"))
        return "\n".join(f"== {p.name}\n{p.read_text()[-4000:]}" for p in logs)

    def fluxjob(self, namespace: str, name: str) -> dict[str, Any]:
        return self.cluster.get("fluxjob", name, "-n", namespace)

    def state(self, namespace: str, name: str) -> str:
        proc = self.cluster.kubectl("get", "fluxjob", name, "-n", namespace, "-o", "json",
                                    check=False)
        if proc.returncode != 0:
            return ""
        return (json.loads(proc.stdout).get("status") or {}).get("state", "")

    def wait_state(self, namespace: str, name: str, state: str, timeout: float = 60) -> None:
        try:
            wait_for(lambda: self.state(namespace, name) == state, timeout,
                     f"FluxJob {namespace}/{name} {state}")
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{self.log()}") from None

    def pods(self, namespace: str, job: str) -> list[dict[str, Any]]:
        return self.cluster.get("pods", "-n", namespace, "-l",
                                f"batch.kubernetes.io/job-name={job}")["items"]

    def set_phase(self, namespace: str, pods: list[dict[str, Any]], phase: str) -> None:
        """What a kubelet would report (hollow nodes run nothing)."""
        for pod in pods:
            status: dict[str, Any] = {"phase": phase}
            if phase in ("Succeeded", "Failed"):
                status["containerStatuses"] = [{
                    "name": "main", "image": "busybox", "imageID": "", "ready": False,
                    "restartCount": 0, "state": {"terminated": {
                        "exitCode": 0 if phase == "Succeeded" else 1,
                        "reason": "Completed" if phase == "Succeeded" else "Error",
                        "startedAt": "2026-01-01T00:00:00Z",
                        "finishedAt": "2026-01-01T00:00:01Z"}}}]
            self.cluster.kubectl("patch", "pod", pod["metadata"]["name"], "-n", namespace,
                                 "--subresource=status", "--type=merge",
                                 "-p", json.dumps({"status": status}))


@contextmanager
def running_queue(cluster: Cluster, work: Path, *, timeout_seconds: int = 5,
                  scheduler_args: tuple[str, ...] = ()) -> Iterator[Queue]:
    """CRDs, webhook, webhook configuration and scheduler up; all taken down after."""
    q = Queue(cluster, work, scheduler_args)
    for crd in (fluxjob_crd(), fluxjobqueue_crd()):
        cluster.apply(json.dumps(crd))
    cluster.kubectl("wait", "--for=condition=Established", "crd/fluxjobs.queue.fluxinfra.io",
                    "crd/fluxjobqueues.queue.fluxinfra.io", "--timeout=60s")
    tls = make_service_tls(["127.0.0.1"], "unused")
    (work / "tls").mkdir()
    (work / "tls" / "tls.crt").write_text(tls.server_cert)
    (work / "tls" / "tls.key").write_text(tls.server_key)
    port = q.webhook_port = _free_port()
    webhook = _start(["queue", "webhook", "--tls-dir", str(work / "tls"), "--host",
                      "127.0.0.1", "--port", str(port), "--scheduler-name", SCHEDULER],
                     work / "webhook.log", q.env)
    config = webhook_configuration(f"fluxinfra-e2e-{os.getpid()}",
                                   FluxQueueArgs(timeout_seconds=timeout_seconds), None)
    for hook in config["webhooks"]:
        hook["clientConfig"] = {"url": f"https://127.0.0.1:{port}/mutate",
                                "caBundle": base64.b64encode(tls.ca_cert.encode()).decode()}
    time.sleep(1.0)
    assert webhook.poll() is None, q.log()
    cluster.apply(json.dumps(config))
    q.start_scheduler()
    try:
        yield q
    finally:
        cluster.kubectl("delete", "mutatingwebhookconfiguration",
                        config["metadata"]["name"], check=False)
        q.stop_scheduler()
        _stop(webhook)
        cluster.kubectl("delete", "crd", "fluxjobs.queue.fluxinfra.io",
                        "fluxjobqueues.queue.fluxinfra.io", "--wait=false", check=False)


