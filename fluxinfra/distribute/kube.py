"""``fluxinfra distribute --kubernetes``: the installer's instance, through ``kubectl exec``.

The installer DaemonSet (:mod:`fluxinfra.k8s.installer`) runs a privileged pod in the host PID
namespace on every node it puts a broker on. Through those pods this module

- finds the pods (``kubectl get pods -l app.kubernetes.io/name=flux-installer,...``) and the
  node each runs on;
- reads the installer's rank map (ConfigMap ``<installer>-ranks``) for the node of each rank:
  the instance's hostnames are rank names (``fluxnode0``), so rank 0's node (the lead broker)
  comes from there; then runs every flux command there, in the node's namespaces as the
  instance owner: ``kubectl exec -i POD -- nsenter -t PID -m -u -i -n -p -- setpriv
  --reuid=flux --regid=flux --init-groups env FLUX_URI=local:///run/flux/local PREFIX/bin/flux
  ...`` (PID: the installer's hostTarget, 1 by default, or the PID of a host process such as
  the kubelet, looked up in the pod);
- resolves SOURCE on the lead node as root (an image reference is pulled there with ``ctr -n
  k8s.io`` and exported once; a path names a file on the lead node);
- after the fan-out, imports image archives on each node as root through that node's installer
  pod (``ctr -n k8s.io images import``): the agents run as the instance owner, which cannot.

No Kubernetes client library: ``kubectl`` is the interface (what an operator already has).
"""

from __future__ import annotations

import ast
import concurrent.futures
import dataclasses
import functools
import json
import subprocess
from collections.abc import Sequence
from importlib import resources

from fluxinfra.distribute.errors import DistributeError, last_line
from fluxinfra.distribute.flux import FluxClient
from fluxinfra.distribute.run import Distribution, Listener, Options, RankResult, agent_source
from fluxinfra.distribute.source import Payload, looks_like_image_ref

__all__ = ["KubeTarget", "INSTALLER_COMPONENT", "NSENTER"]

#: the installer's app.kubernetes.io/name label (fluxinfra.k8s.installer.COMPONENT)
INSTALLER_COMPONENT = "flux-installer"
#: how an installer pod enters its node (as node-watch.py does at the default hostTarget, PID 1)
NSENTER = ["nsenter", "-t", "1", "-m", "-u", "-i", "-n", "-p", "--"]


@functools.cache
def find_host_process() -> str:
    """A script to run in an installer pod (host PID namespace, python3 in the image): the PID
    of the host process named argv[1], chosen by the installer's own ``host_target`` (read
    from the node-watch.py the installer ships: where several run, the one whose command
    line names this node, $NODE_NAME, then the oldest)."""
    text = resources.files("fluxinfra.templates").joinpath("node-watch.py").read_text()
    source = next(ast.get_source_segment(text, node) for node in ast.parse(text).body
                  if isinstance(node, ast.FunctionDef) and node.name == "host_target")
    return ("from __future__ import annotations\nimport os, sys\nfrom typing import Any\n"
            f"{source}\n"
            "try:\n"
            "    print(host_target({'hostTarget': sys.argv[1]}))\n"
            "except RuntimeError as exc:\n"
            "    sys.exit(f\"{exc}: check --host-target (the installer's hostTarget)\")\n")


@dataclasses.dataclass
class KubeTarget:
    kubectl: Sequence[str] = ("kubectl",)
    namespace: str = "flux-installer"
    installer: str = "flux-installer"
    context: str | None = None
    flux_prefix: str = "/opt/fluxinfra/flux"
    flux_user: str = "flux"
    run_dir: str = "/run/flux"
    #: the installer's hostTarget: a PID, or the command name of a host process (``kubelet``)
    host_target: str = "1"
    _host_pids: dict = dataclasses.field(default_factory=dict, repr=False)

    # -- kubectl -----------------------------------------------------------------------------
    def _kubectl(self) -> list[str]:
        argv = list(self.kubectl)
        if self.context:
            argv += ["--context", self.context]
        return argv + ["-n", self.namespace]

    def host_pid(self, pod: str) -> str:
        """The PID whose namespaces are ``pod``'s node's (``host_target``; asked once per pod
        when it is a command name)."""
        if self.host_target.isdigit():
            return self.host_target
        if pod not in self._host_pids:
            argv = self._kubectl() + ["exec", "-i", pod, "--", "python3", "-c",
                                      find_host_process(), self.host_target]
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=60)
            if proc.returncode != 0 or not proc.stdout.strip().isdigit():
                raise DistributeError(f"installer pod {pod}: {last_line(proc.stderr)}")
            self._host_pids[pod] = proc.stdout.strip()
        return self._host_pids[pod]

    def exec_prefix(self, pod: str, *, owner: bool) -> list[str]:
        """Run a command on ``pod``'s node, as root or (``owner``) as the instance owner."""
        enter = [*NSENTER[:2], self.host_pid(pod), *NSENTER[3:]]
        argv = self._kubectl() + ["exec", "-i", pod, "--", *enter]
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

    def rank_nodes(self) -> dict[int, str]:
        """Rank -> node, from the installer's rank map (the ConfigMap ``<installer>-ranks``).
        The instance's hostnames are rank names (``fluxnode3``), not node names: flux-core
        needs every hostname at start, before nodes are known; the rank map says which node
        holds which rank."""
        name = f"{self.installer}-ranks"
        argv = self._kubectl() + ["get", "configmap", name, "-o", "json"]
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=60)
        if proc.returncode != 0:
            raise DistributeError(f"kubectl get configmap {name} -n {self.namespace}: "
                                  f"{last_line(proc.stderr)}: the installer keeps its rank map "
                                  "there; check --installer and --namespace")
        try:
            ranks = json.loads(json.loads(proc.stdout)["data"]["ranks.json"])
            return {int(rank): slot["node"] for rank, slot in ranks["slots"].items()}
        except (KeyError, TypeError, ValueError) as exc:
            raise DistributeError(f"configmap {name} in {self.namespace}: not the installer's "
                                  f"rank map ({exc!r})") from None

    def lead(self, pods: dict[str, str], ranks: dict[int, str] | None = None) -> str:
        """The node of rank 0 (the lead broker), from the rank map."""
        ranks = self.rank_nodes() if ranks is None else ranks
        node = ranks.get(0)
        if node is None:
            raise DistributeError(f"the rank map of {self.installer} gives rank 0 to no node: "
                                  "is the installer's instance up (kubectl logs the installer)?")
        if node not in pods:
            raise DistributeError(f"rank 0 is node {node!r}, which has no running installer "
                                  f"pod in {self.namespace}")
        return node

    @property
    def flux(self) -> str:
        return f"{self.flux_prefix}/bin/flux"

    # -- the distribution --------------------------------------------------------------------
    def distribution(self, opts: Options, listener: Listener | None = None) -> Distribution:
        pods = self.pods()
        ranks = self.rank_nodes()
        lead = self.lead(pods, ranks)
        if opts.ranks == "all":
            # the instance is sized ahead (the installer's maxNodes): its spare ranks belong to
            # no node, so "all" means every rank the rank map gives a node
            opts = dataclasses.replace(opts, ranks=",".join(str(r) for r in sorted(ranks)))
        # kubectl exec carries no signals to flux: an interrupt stops the ranks via rexec.kill
        flux = FluxClient(self.exec_prefix(pods[lead], owner=True) + [self.flux],
                          signals_pass=False)
        host = NodeHost(self, pods[lead], lead)
        importer = None
        if opts.importer != "none":
            importer = NodeImporter(self, pods, ranks)
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

    def __init__(self, target: KubeTarget, pods: dict[str, str], ranks: dict[int, str]):
        self.target = target
        self.pods = pods
        self.ranks = ranks

    def __call__(self, results: list[RankResult], payload: Payload, opts: Options) -> None:
        def one(result: RankResult) -> None:
            node = self.ranks.get(result.rank, "")
            pod = self.pods.get(node)
            if pod is None:
                result.status, result.stage = "failed", "import"
                result.reason = (f"no installer pod on node {node} (rank {result.rank}) to "
                                 "import as root" if node else
                                 f"rank {result.rank} has no node in the rank map")
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

