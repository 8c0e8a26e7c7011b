"""``fluxinfra distribute --kubernetes``: the installer's instance, through ``kubectl exec``.

The installer DaemonSet (:mod:`fluxinfra.k8s.installer`) runs a privileged pod in the host PID
namespace on every node it puts a broker on. Through those pods this module

- finds the pods (``kubectl get pods -l app.kubernetes.io/name=flux-installer,...``) and the
  node each runs on;
- asks any of them which node is rank 0 (``flux overlay status``: the lead broker is the first
  node), then runs every flux command there, in the node's namespaces as the instance owner:
  ``kubectl exec -i POD -- nsenter -t 1 -m -u -i -n -p -- setpriv --reuid=flux --regid=flux
  --init-groups env FLUX_URI=local:///run/flux/local PREFIX/bin/flux ...``;
- resolves SOURCE on the lead node as root (an image reference is pulled there with ``ctr -n
  k8s.io`` and exported once; a path names a file on the lead node);
- after the fan-out, imports image archives on each node as root through that node's installer
  pod (``ctr -n k8s.io images import``): the agents run as the instance owner, which cannot.

No Kubernetes client library: ``kubectl`` is the interface (what an operator already has).
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import json
import subprocess
from collections.abc import Sequence

from fluxinfra.distribute.errors import DistributeError, last_line
from fluxinfra.distribute.flux import FluxClient, parse_overlay_status
from fluxinfra.distribute.run import Distribution, Listener, Options, RankResult, agent_source
from fluxinfra.distribute.source import Payload, looks_like_image_ref

__all__ = ["KubeTarget", "INSTALLER_COMPONENT", "NSENTER"]

#: the installer's app.kubernetes.io/name label (fluxinfra.k8s.installer.COMPONENT)
INSTALLER_COMPONENT = "flux-installer"
#: how an installer pod enters its node (as node-watch.py does at the default hostTarget, PID 1)
NSENTER = ["nsenter", "-t", "1", "-m", "-u", "-i", "-n", "-p", "--"]


@dataclasses.dataclass
class KubeTarget:
    kubectl: Sequence[str] = ("kubectl",)
    namespace: str = "flux-installer"
    installer: str = "flux-installer"
    context: str | None = None
    flux_prefix: str = "/opt/fluxinfra/flux"
    flux_user: str = "flux"
    run_dir: str = "/run/flux"

    # -- kubectl -----------------------------------------------------------------------------
    def _kubectl(self) -> list[str]:
        argv = list(self.kubectl)
        if self.context:
            argv += ["--context", self.context]
        return argv + ["-n", self.namespace]

    def exec_prefix(self, pod: str, *, owner: bool) -> list[str]:
        """Run a command on ``pod``'s node, as root or (``owner``) as the instance owner."""
        argv = self._kubectl() + ["exec", "-i", pod, "--", *NSENTER]
        if owner:
            argv += ["setpriv", f"--reuid={self.flux_user}", f"--regid={self.flux_user}",
                     "--init-groups", "env", f"FLUX_URI=local://{self.run_dir}/local"]
        return argv

    def pods(self) -> dict[str, str]:
        """Running installer pods: node name -> pod name."""
        selector = (f"app.kubernetes.io/name={INSTALLER_COMPONENT},"
                    f"app.kubernetes.io/instance={self.installer}")
        argv = self._kubectl() + ["get", "pods", "-l", selector, "-o", "json"]
        try:
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=60)
        except FileNotFoundError:
            raise DistributeError(f"--kubectl: {argv[0]!r} was not found: install kubectl or "
                                  "name it with --kubectl") from None
        if proc.returncode != 0:
            raise DistributeError(f"kubectl get pods -n {self.namespace}: "
                                  f"{last_line(proc.stderr)}: check --context and --namespace")
        pods = {}
        for item in json.loads(proc.stdout).get("items", []):
            node = item.get("spec", {}).get("nodeName")
            if node and item.get("status", {}).get("phase") == "Running":
                pods[node] = item["metadata"]["name"]
        if not pods:
            raise DistributeError(f"no running installer pods with {selector} in namespace "
                                  f"{self.namespace}: check --namespace and --installer (the "
                                  "installer component's name)")
        return pods

    def lead(self, pods: dict[str, str]) -> str:
        """The node of rank 0, asked of any installer pod's broker."""
        any_pod = pods[sorted(pods)[0]]
        flux = FluxClient(self.exec_prefix(any_pod, owner=True) + [self.flux])
        status = parse_overlay_status(flux.run("overlay", "status", "--no-pretty"))
        if 0 not in status:
            raise DistributeError("flux overlay status on the installer's instance did not list "
                                  "rank 0: is the broker running (kubectl logs the installer)?")
        node = status[0][0]
        if node not in pods:
            raise DistributeError(f"rank 0 runs on node {node!r}, which has no running installer "
                                  f"pod in {self.namespace}")
        return node

    @property
    def flux(self) -> str:
        return f"{self.flux_prefix}/bin/flux"

    # -- the distribution --------------------------------------------------------------------
    def distribution(self, opts: Options, listener: Listener | None = None) -> Distribution:
        pods = self.pods()
        lead = self.lead(pods)
        # kubectl exec carries no signals to flux: an interrupt stops the ranks via rexec.kill
        flux = FluxClient(self.exec_prefix(pods[lead], owner=True) + [self.flux],
                          signals_pass=False)
        host = NodeHost(self, pods[lead], lead)
        importer = None
        if opts.importer != "none":
            importer = NodeImporter(self, pods)
        return Distribution(opts, flux, host, listener, remote_flux=self.flux, importer=importer)


class NodeHost:
    """The lead node, as root, through its installer pod (the :class:`~.source.Host` protocol)."""

    def __init__(self, target: KubeTarget, pod: str, node: str):
        self.target = target
        self.prefix = target.exec_prefix(pod, owner=False)
        self.node = node

    def run(self, argv: Sequence[str], input: str | None = None) -> subprocess.CompletedProcess:
        return subprocess.run(self.prefix + list(argv), capture_output=True, text=True,
                              input=input, timeout=3600)

    def _agent(self, *args: str) -> dict:
        proc = self.run([self.target.flux, "python", "-c", agent_source(), *args])
        if proc.returncode != 0:
            raise DistributeError(f"on node {self.node}: agent {args[0]}: "
                                  f"{last_line(proc.stderr)}")
        return json.loads(proc.stdout)

    def inspect(self, path: str) -> dict:
        if not path.startswith("/"):
            if looks_like_image_ref(path):
                return {"kind": "missing", "image": "", "refs": []}
            raise DistributeError(f"SOURCE {path!r}: with --kubernetes SOURCE is an absolute "
                                  f"path on the lead node ({self.node}) or an image reference")
        return self._agent("inspect", path)

    def manifest(self, root: str, entries: Sequence[str]) -> dict:
        return self._agent("manifest", root, *entries)

    def which(self, program: str) -> bool:
        return self.run(["sh", "-c", f"command -v {program}"]).returncode == 0

    def make_dir(self, path: str) -> None:
        proc = self.run(["install", "-d", "-m", "0755", path])
        if proc.returncode != 0:
            raise DistributeError(f"on node {self.node}: cannot create {path}: "
                                  f"{last_line(proc.stderr)}")

    def remove(self, path: str) -> None:
        self.run(["rm", "-rf", "--", path])

    def hostname(self) -> str:
        return self.node


class NodeImporter:
    """Imports image archives on each node as root, through that node's installer pod."""

    def __init__(self, target: KubeTarget, pods: dict[str, str]):
        self.target = target
        self.pods = pods

    def __call__(self, results: list[RankResult], payload: Payload, opts: Options) -> None:
        def one(result: RankResult) -> None:
            pod = self.pods.get(result.host)
            if pod is None:
                result.status, result.stage = "failed", "import"
                result.reason = f"no installer pod on node {result.host} to import as root"
                return
            prefix = self.target.exec_prefix(pod, owner=False)
            for image in payload.images:
                path = f"{result.dest}/{image}"
                argv = (["ctr", "-n", opts.containerd_namespace, "images", "import", path]
                        if opts.importer == "containerd" else ["podman", "load", "-i", path])
                proc = subprocess.run(prefix + argv, capture_output=True, text=True,
                                      timeout=3600)
                if proc.returncode != 0:
                    result.status, result.stage = "failed", "import"
                    result.reason = (f"{' '.join(argv[:-1])} exited {proc.returncode}: "
                                     f"{last_line(proc.stderr or proc.stdout)}")
                    return
                result.imported.append(image)

        with concurrent.futures.ThreadPoolExecutor(max_workers=16) as pool:
            list(pool.map(one, results))

