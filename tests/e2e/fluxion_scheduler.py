"""The real ``fluxinfra scheduler`` process against a real cluster, as its ServiceAccount.

:func:`install` applies what ``fluxinfra.k8s.scheduler.scheduler_manifests`` renders for a
stack (the PodGroup CRD, the ServiceAccount, its ClusterRole and bindings, the Lease Role) except
the Deployment; :class:`SchedulerProcess` then runs ``python -m fluxinfra.scheduler`` on this
machine with a kubeconfig holding a token of that ServiceAccount (``kubectl create token``), so
every call the scheduler makes is checked against the rendered RBAC by the real API server.
Also used by ``benchmarks/kube_scheduler.py``.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]

__all__ = ["Running", "SchedulerProcess", "install", "running_scheduler", "sa_kubeconfig"]


def install(cluster: Any, name: str, namespace: str, scheduler_name: str) -> None:
    """Apply the rendered scheduler manifests (all but the Deployment) and wait for the CRD."""
    from fluxinfra.k8s.scheduler import FluxSchedulerArgs, scheduler_manifests

    args = FluxSchedulerArgs(scheduler_name=scheduler_name, namespace=namespace)
    docs = [d for d in scheduler_manifests(name, args) if d["kind"] != "Deployment"]
    cluster.apply(yaml.safe_dump_all(docs))
    cluster.kubectl("wait", "--for=condition=Established", "--timeout=60s",
                    "crd/podgroups.scheduling.x-k8s.io")


def sa_kubeconfig(cluster: Any, name: str, namespace: str, path: Path) -> Path:
    """A kubeconfig that authenticates as ServiceAccount ``namespace/name``."""
    token = cluster.kubectl("create", "token", name, "-n", namespace,
                            "--duration=4h").stdout.strip()
    admin = yaml.safe_load(Path(cluster.kubeconfig).read_text())
    ctx = next(c for c in admin["contexts"] if c["name"] == admin["current-context"])
    server = next(c for c in admin["clusters"] if c["name"] == ctx["context"]["cluster"])
    doc = {"apiVersion": "v1", "kind": "Config", "current-context": "sa",
           "clusters": [{"name": "c", "cluster": server["cluster"]}],
           "users": [{"name": "sa", "user": {"token": token}}],
           "contexts": [{"name": "sa", "context": {"cluster": "c", "user": "sa"}}]}
    path.write_text(yaml.safe_dump(doc))
    path.chmod(0o600)
    return path


@dataclass
class Running:
    """A scheduler :func:`running_scheduler` started: its ``schedulerName`` (pods ask for it),
    ServiceAccount, namespace and process."""

    name: str
    sa: str
    namespace: str
    proc: SchedulerProcess


@contextmanager
def running_scheduler(cluster: Any, tmp: Path, *args: str) -> Iterator[Running]:
    """The project's scheduler beside the cluster's own, as a ServiceAccount of its own in a
    namespace of its own (``fluxion-<tag>``), started with ``args``; everything it made is
    removed afterwards."""
    tag = uuid.uuid4().hex[:6]
    namespace, sa, name = f"fluxion-{tag}", f"fluxion-e2e-{tag}", f"fluxion-{tag}"
    cluster.kubectl("create", "namespace", namespace)
    proc = None
    try:
        install(cluster, sa, namespace, name)
        kubeconfig = sa_kubeconfig(cluster, sa, namespace, tmp / "sa.kubeconfig")
        proc = SchedulerProcess(kubeconfig, name, tmp / "scheduler.log", *args).start()
        yield Running(name, sa, namespace, proc)
    finally:
        if proc is not None:
            proc.stop()
        cluster.kubectl("delete", "namespace", namespace, "--wait=false", check=False)
        for kind in ("clusterrole", "clusterrolebinding"):
            cluster.kubectl("delete", kind, sa, check=False)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class SchedulerProcess:
    """``python -m fluxinfra.scheduler`` as a child process; ``start``/``stop``/``kill``."""

    def __init__(self, kubeconfig: Path, scheduler_name: str, log: Path,
                 *extra: str) -> None:
        self.kubeconfig = kubeconfig
        self.scheduler_name = scheduler_name
        self.log = log
        self.extra = list(extra)
        self.port = _free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 120) -> SchedulerProcess:
        argv = [sys.executable, "-m", "fluxinfra.scheduler", "--kubeconfig",
                str(self.kubeconfig), "--scheduler-name", self.scheduler_name, "--host",
                "127.0.0.1", "--port", str(self.port), "--no-leader-elect", *self.extra]
        env = dict(os.environ, PYTHONPATH=str(REPO))
        env.pop("POD_NAMESPACE", None)
        out = self.log.open("ab")
        self.proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env,
                                     cwd=REPO)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"the scheduler exited {self.proc.returncode}:\n"
                                     f"{self.log.read_text()[-3000:]}")
            if self.healthy():
                return self
            time.sleep(0.3)
        raise AssertionError(f"the scheduler never became healthy:\n"
                             f"{self.log.read_text()[-3000:]}")

    def healthy(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/healthz",
                                        timeout=2) as r:
                return r.status == 200
        except OSError:
            return False

    def metrics(self) -> dict[str, float]:
        """Every sample of ``/metrics`` (name with labels -> value)."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=5) as r:
            text = r.read().decode()
        out = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                key, _, value = line.rpartition(" ")
                out[key] = float(value)
        return out

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30) -> int | None:
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else None
        self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait(10)

    def kill(self) -> None:
        self.stop(signal.SIGKILL)

    def log_tail(self, chars: int = 4000) -> str:
        return self.log.read_text()[-chars:] if self.log.exists() else ""


def dump(obj: Any) -> str:
    return json.dumps(obj, indent=1, sort_keys=True)[:3000]
