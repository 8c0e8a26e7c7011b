"""The real ``fluxinfra scheduler`` (and ``fluxinfra service``) as processes against an e2e
cluster, under the ServiceAccount and RBAC the Pulumi component renders.

:func:`scheduler_kubeconfig` applies the ServiceAccount, ClusterRole, ClusterRoleBinding and the
leases Role + RoleBinding from :func:`fluxinfra.k8s.scheduler.scheduler_manifests` (everything but
the Deployment, which a test replaces by a process) and returns a kubeconfig carrying that
ServiceAccount's token: the process can do exactly what the deployed scheduler can.
:class:`Process` starts a ``fluxinfra`` subcommand with its log in a file, and prints the log's
tail when a test using it fails.
"""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import yaml
from e2e_cluster import REPO, Cluster, wait_for

from fluxinfra.k8s.scheduler import FluxSchedulerArgs, scheduler_manifests

__all__ = ["Process", "Scheduler", "bound_nodes", "free_port", "gpu_pods", "gpus_in_use",
           "lease", "pod_manifest", "scheduled_events", "scheduler_kubeconfig"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def scheduler_kubeconfig(cluster: Cluster, namespace: str, name: str, scheduler_name: str,
                         out: Path) -> Path:
    """RBAC as rendered for a scheduler named ``name`` in ``namespace``; a kubeconfig with its
    ServiceAccount's token."""
    args = FluxSchedulerArgs(scheduler_name=scheduler_name, namespace=namespace,
                             install_pod_group_crd=False)
    objects = [o for o in scheduler_manifests(name, args)
               if o["kind"] not in ("Deployment", "PodDisruptionBudget")]
    cluster.apply(yaml.safe_dump_all(objects))
    token = cluster.kubectl("create", "token", name, "-n", namespace,
                            "--duration", "2h").stdout.strip()
    admin = yaml.safe_load(cluster.kubeconfig.read_text())
    context = next(c for c in admin["contexts"] if c["name"] == admin["current-context"])
    server = next(c for c in admin["clusters"] if c["name"] == context["context"]["cluster"])
    doc = {"apiVersion": "v1", "kind": "Config", "clusters": [server],
           "users": [{"name": name, "user": {"token": token}}],
           "contexts": [{"name": name, "context": {"cluster": server["name"], "user": name}}],
           "current-context": name}
    out.write_text(yaml.safe_dump(doc))
    out.chmod(0o600)
    return out


def pod_manifest(name: str, namespace: str, scheduler: str, *, cpu: str = "100m",
                 gpus: int = 0) -> dict[str, Any]:
    """A pod for ``scheduler`` (on a hollow node it is bound but never runs)."""
    resources: dict[str, Any] = {"requests": {"cpu": cpu, "memory": "64Mi"}}
    if gpus:
        resources["limits"] = {"nvidia.com/gpu": str(gpus)}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "labels": {"e2e": "robust"}},
            "spec": {"schedulerName": scheduler, "terminationGracePeriodSeconds": 0,
                     "containers": [{"name": "main", "image": "registry.invalid/none:1",
                                     "resources": resources}]}}


def gpu_pods(cluster: Cluster, namespace: str, scheduler: str, names: list[str]) -> None:
    cluster.apply(yaml.safe_dump_all([pod_manifest(n, namespace, scheduler, gpus=1)
                                      for n in names]))


class Process:
    """``python -m fluxinfra <args>`` with its output in ``log``."""

    def __init__(self, args: list[str], log: Path, env: dict[str, str] | None = None) -> None:
        self.args, self.log = args, log
        self.handle = log.open("w")
        self.proc = subprocess.Popen([sys.executable, "-m", "fluxinfra", *args],
                                     stdout=self.handle, stderr=subprocess.STDOUT, cwd=REPO,
                                     env=env)

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def tail(self, lines: int = 40) -> str:
        text = self.log.read_text(errors="replace").splitlines()
        return "\n".join(text[-lines:])

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.alive:
            self.proc.send_signal(sig)

    def stop(self) -> int | None:
        if self.alive:
            self.proc.send_signal(signal.SIGTERM)
            try:
                return self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self.handle.close()
        return self.proc.poll()


class Scheduler(Process):
    """A scheduler process with its ``/healthz`` and ``/metrics`` on a loopback port."""

    def __init__(self, kubeconfig: Path, scheduler_name: str, log: Path, *extra: str,
                 identity: str = "", pod_namespace: str = "") -> None:
        """``identity``: ``$POD_NAME`` (the Lease identity, the Events' reportingInstance, and
        with ``pod_namespace`` the pod the scheduler reports about itself on)."""
        self.port = free_port()
        env = None
        if identity:
            import os

            env = {k: v for k, v in os.environ.items() if k != "POD_NAMESPACE"}
            env["POD_NAME"] = identity
            if pod_namespace:
                env["POD_NAMESPACE"] = pod_namespace
        super().__init__(["scheduler", "--kubeconfig", str(kubeconfig), "--scheduler-name",
                          scheduler_name, "--host", "127.0.0.1", "--port", str(self.port),
                          *extra], log, env)

    def get(self, path: str) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}",
                                        timeout=5) as resp:
                return resp.status, resp.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()
        except OSError as exc:
            return 0, str(exc)

    def healthz(self) -> tuple[int, str]:
        return self.get("/healthz")

    def metric(self, name: str) -> float | None:
        status, text = self.get("/metrics")
        if status != 200:
            return None
        for line in text.splitlines():
            if line.startswith(name + " "):
                return float(line.split()[-1])
        return None

    def wait_healthy(self, timeout: float = 60) -> None:
        wait_for(lambda: self.healthz()[0] == 200 or not self.alive, timeout,
                 f"{self.args[-1]} /healthz 200")
        assert self.alive, f"the scheduler exited:\n{self.tail()}"


def bound_nodes(cluster: Cluster, namespace: str) -> dict[str, str]:
    """pod name -> node (bound pods of the namespace)."""
    pods = cluster.get("pods", "-n", namespace)["items"]
    return {p["metadata"]["name"]: p["spec"].get("nodeName", "") for p in pods}


def scheduled_events(cluster: Cluster, namespace: str) -> list[dict[str, Any]]:
    events = cluster.get("events.v1.events.k8s.io", "-n", namespace)["items"]
    return [e for e in events if e.get("reason") == "Scheduled"]


def gpus_in_use(cluster: Cluster, nodes: list[str]) -> dict[str, int]:
    """node -> GPUs requested by the pods bound there (any namespace, any scheduler)."""
    used = dict.fromkeys(nodes, 0)
    for pod in cluster.get("pods", "-A")["items"]:
        node = pod["spec"].get("nodeName")
        if node in used and pod["status"].get("phase") not in ("Succeeded", "Failed"):
            for c in pod["spec"]["containers"]:
                used[node] += int((c.get("resources", {}).get("limits") or {})
                                  .get("nvidia.com/gpu", 0))
    return used


def lease(cluster: Cluster, namespace: str, name: str) -> dict[str, Any] | None:
    proc = cluster.kubectl("get", "lease", name, "-n", namespace, "-o", "json", check=False)
    return json.loads(proc.stdout) if proc.returncode == 0 else None
