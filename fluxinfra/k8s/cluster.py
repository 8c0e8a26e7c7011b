"""``Cluster``: the Kubernetes cluster every other component deploys to, and its Provider.

``mode: kind`` creates a local kind cluster with ``pulumi_command`` (``kind create cluster`` on
create, ``kind delete cluster`` on destroy) from a generated kind config, and exports its kubeconfig
as a secret. ``mode: existing`` points at a cluster by kubeconfig path and/or context. Both yield
``provider``, the ``pulumi_kubernetes.Provider`` the other components take in their options.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as k8s
import yaml
from pulumi_command import local

from fluxinfra.k8s.config import at_least, dns1123_label, one_of, option, pinned_image, string_map

__all__ = ["ClusterArgs", "Cluster", "kind_config", "kind_commands"]

#: kind v0.24's node image for Kubernetes 1.31.0, pinned by digest.
DEFAULT_KIND_NODE_IMAGE = (
    "kindest/node:v1.31.0@sha256:53df588e04085fd41ae12de0c3fe4c72f7013bba32a20e7325357a1ac94ba865")


@dataclass
class ClusterArgs:
    mode: str = option("existing", "kind (create a local kind cluster) or existing",
                       check=one_of("kind", "existing"))
    """kind (create a local kind cluster) or existing."""
    name: str = option("fluxinfra", "kind cluster name", check=dns1123_label(40))
    """kind cluster name (mode kind)."""
    control_planes: int = option(1, "kind control-plane nodes", check=at_least(1, 3))
    """kind control-plane nodes (mode kind)."""
    workers: int = option(3, "kind worker nodes", check=at_least(0, 64))
    """kind worker nodes (mode kind)."""
    node_image: str = option(DEFAULT_KIND_NODE_IMAGE, "kindest/node image, pinned",
                             check=pinned_image)
    """kindest/node image for every kind node, pinned by tag and digest."""
    worker_labels: dict = option({}, "labels put on every kind worker node", check=string_map)
    """Labels put on every kind worker (e.g. to steer the installer's nodeSelector)."""
    kubeconfig: str = option("", "kubeconfig path for mode existing ('' = $KUBECONFIG or "
                             "~/.kube/config)")
    """kubeconfig path (mode existing); '' = the provider's default lookup."""
    context: str = option("", "kubeconfig context for mode existing ('' = current context)")
    """kubeconfig context (mode existing); '' = the current context."""


def kind_config(args: ClusterArgs) -> dict[str, Any]:
    """The kind ``Cluster`` config: control planes then workers, every node on the pinned image."""
    nodes: list[dict[str, Any]] = [{"role": "control-plane", "image": args.node_image}
                                   for _ in range(args.control_planes)]
    for _ in range(args.workers):
        worker: dict[str, Any] = {"role": "worker", "image": args.node_image}
        if args.worker_labels:
            worker["labels"] = dict(args.worker_labels)
        nodes.append(worker)
    return {"kind": "Cluster", "apiVersion": "kind.x-k8s.io/v1alpha4", "name": args.name,
            "nodes": nodes}


def kind_commands(args: ClusterArgs) -> dict[str, str]:
    """Shell commands for the ``local.Command``: create reads the config on stdin and prints the
    kubeconfig; delete is idempotent."""
    name = args.name
    return {
        "create": (f"kind get clusters | grep -qx {name} || kind create cluster --name {name} "
                   f"--config - --wait 180s >&2 && kind get kubeconfig --name {name}"),
        "delete": f"kind delete cluster --name {name}",
        "stdin": yaml.safe_dump(kind_config(args), sort_keys=False),
    }


class Cluster(pulumi.ComponentResource):
    """A kind cluster made by ``kind`` or an existing cluster; ``provider`` targets it."""

    provider: k8s.Provider
    kubeconfig: pulumi.Output[str]

    def __init__(self, name: str, args: ClusterArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("fluxinfra:k8s:Cluster", name, {}, opts)
        child = pulumi.ResourceOptions(parent=self)
        if args.mode == "kind":
            cmd = kind_commands(args)
            kind = local.Command(f"{name}-kind", create=cmd["create"], delete=cmd["delete"],
                                 stdin=cmd["stdin"], triggers=[cmd["stdin"]],
                                 opts=pulumi.ResourceOptions(parent=self,
                                                             additional_secret_outputs=["stdout"]))
            self.kubeconfig = pulumi.Output.secret(kind.stdout)
            self.provider = k8s.Provider(
                f"{name}-provider", kubeconfig=self.kubeconfig,
                opts=pulumi.ResourceOptions(parent=self, depends_on=[kind]))
        else:
            # The provider takes a path or the file's contents; expand ~ as a shell would.
            path = os.path.expanduser(args.kubeconfig) if args.kubeconfig else ""
            self.kubeconfig = pulumi.Output.secret(path)
            self.provider = k8s.Provider(f"{name}-provider", kubeconfig=path or None,
                                         context=args.context or None, opts=child)
        self.register_outputs({"kubeconfig": self.kubeconfig})
