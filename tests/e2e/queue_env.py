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
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from e2e_cluster import REPO, Cluster, wait_for
from kubebed.hollow import RUN_SECONDS

from fluxinfra.k8s.queue import FluxQueueArgs, webhook_configuration
from fluxinfra.kube.fluxjob import fluxjob_crd, fluxjobqueue_crd
from fluxinfra.pki import make_service_tls

__all__ = ["SCHEDULER", "Queue", "job_yaml", "reached", "running_queue"]

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
        self.webhook: subprocess.Popen | None = None
        self.webhook_starts = 0
        self.admitter = ""

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

    def start_webhook(self) -> None:
        """The webhook on its port (again, after :meth:`stop_webhook`: a replica back)."""
        self.webhook = _start(["queue", "webhook", "--tls-dir", str(self.work / "tls"),
                               "--host", "127.0.0.1", "--port", str(self.webhook_port),
                               "--scheduler-name", SCHEDULER, "--admitter", self.admitter],
                              self.work / f"webhook-{self.webhook_starts}.log", self.env)
        self.webhook_starts += 1

        def listening() -> bool:
            assert self.webhook is not None and self.webhook.poll() is None, self.log()
            try:
                self.webhook_metrics()
                return True
            except OSError:
                return False
        wait_for(listening, 60, "the webhook to listen")

    def stop_webhook(self, sig: int = signal.SIGTERM) -> None:
        if self.webhook is not None:
            if sig != signal.SIGTERM and self.webhook.poll() is None:
                self.webhook.send_signal(sig)
            _stop(self.webhook)

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
        return self.status(namespace, name).get("state", "")

    def wait_state(self, namespace: str, name: str, state: str, timeout: float = 60) -> None:
        """Wait until the FluxJob is in ``state`` or has gone past it.

        Its status is its current state, written once per change it can keep up with: on
        hollow nodes a pod runs the moment it is bound, so an admitted Job is often
        ``Running`` before a poll sees ``Admitted`` (a gated pod may go from ``Queued`` to
        ``Running`` in one write). Having been admitted is read from ``admittedAt``, having
        run from ``startedAt``, which stay once set; ``Queued``, ``Reserved`` and ``Failed``
        are waited for as they are."""
        try:
            wait_for(lambda: reached(self.status(namespace, name), state), timeout,
                     f"FluxJob {namespace}/{name} {state}")
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{self.log()}") from None

    def status(self, namespace: str, name: str) -> dict[str, Any]:
        proc = self.cluster.kubectl("get", "fluxjob", name, "-n", namespace, "-o", "json",
                                    check=False)
        return (json.loads(proc.stdout).get("status") or {}) if proc.returncode == 0 else {}

    def pods(self, namespace: str, job: str) -> list[dict[str, Any]]:
        return self.cluster.get("pods", "-n", namespace, "-l",
                                f"batch.kubernetes.io/job-name={job}")["items"]

    def end_pods(self, namespace: str, pods: list[dict[str, Any]]) -> None:
        """Their containers exit 0 now: the bed's hollow kubelet (the keeper) marks a pod
        ``Succeeded`` once the seconds in ``fluxinfra.io/hollow-run-seconds`` have passed,
        here none."""
        for pod in pods:
            self.cluster.kubectl("annotate", "pod", pod["metadata"]["name"], "-n", namespace,
                                 f"{RUN_SECONDS}=0", "--overwrite")


def job_yaml(name: str, namespace: str, pods: int, cpu: str = "40", duration: str = "600s",
             extra_annotations: str = "") -> str:
    """A plain Job, as a user writes it: not suspended, no scheduler named. Its pods run on
    hollow nodes until they are ended (``Queue.end_pods``) or for the seconds of a
    ``fluxinfra.io/hollow-run-seconds`` annotation in ``extra_annotations``."""
    return f"""
apiVersion: batch/v1
kind: Job
metadata: {{name: {name}, namespace: {namespace}}}
spec:
  parallelism: {pods}
  completions: {pods}
  backoffLimit: 0
  template:
    metadata:
      annotations: {{fluxinfra.io/duration: "{duration}"{extra_annotations}}}
    spec:
      restartPolicy: Never
      containers:
      - name: main
        image: busybox
        resources: {{requests: {{cpu: "{cpu}", memory: 1Gi}}}}
"""


#: after which states a FluxJob has been in ``state`` (its own timestamp says so)
_PAST = {"Admitted": ("admittedAt", ("Admitted", "Running", "Finished")),
         "Running": ("startedAt", ("Running", "Finished"))}


def reached(status: dict[str, Any], state: str) -> bool:
    """Whether a FluxJob with ``status`` is in ``state`` or went through it."""
    if state not in _PAST:
        return status.get("state") == state
    stamp, states = _PAST[state]
    return status.get("state") in states and bool(status.get(stamp))


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
    # the scheduler runs with the cluster's kubeconfig: its user admits, as the scheduler's
    # ServiceAccount does in a deployed stack (the webhook refuses anyone else's un-suspend,
    # and the API server does not call it for the admitter's own)
    admitter = json.loads(cluster.kubectl("auth", "whoami", "-o", "json").stdout)[
        "status"]["userInfo"]["username"]
    q.admitter = admitter
    q.start_webhook()
    config = webhook_configuration(f"fluxinfra-e2e-{os.getpid()}",
                                   FluxQueueArgs(timeout_seconds=timeout_seconds), None,
                                   user=admitter)
    for hook in config["webhooks"]:
        hook["clientConfig"] = {"url": f"https://127.0.0.1:{port}/mutate",
                                "caBundle": base64.b64encode(tls.ca_cert.encode()).decode()}
    cluster.apply(json.dumps(config))
    q.start_scheduler()
    try:
        yield q
    finally:
        cluster.kubectl("delete", "mutatingwebhookconfiguration",
                        config["metadata"]["name"], check=False)
        q.stop_scheduler()
        q.stop_webhook()
        cluster.kubectl("delete", "crd", "fluxjobs.queue.fluxinfra.io",
                        "fluxjobqueues.queue.fluxinfra.io", "--wait=false", check=False)


