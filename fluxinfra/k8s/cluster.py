"""``Cluster``: the Kubernetes cluster every other component deploys to, and its Provider.

The Provider updates ConfigMaps in place (``enableConfigMapMutable``) instead of replacing them
on every data change: a replaced ConfigMap with a fixed name is deleted first, and with it the
volume every running pod mounts; a persistent MiniCluster's resize changes one key of its
ConfigMap and must not disturb the brokers that run.

``mode: kind`` creates a local kind cluster with ``pulumi_command`` (``kind create cluster`` on
create, ``kind delete cluster`` on destroy) from a generated kind config, and exports its kubeconfig
as a secret. ``mode: existing`` points at a cluster by kubeconfig path and/or context. Both yield
``provider``, the ``pulumi_kubernetes.Provider`` the other components take in their options.
"""

from __future__ import annotations

import os
import shlex
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as k8s
import yaml
from pulumi_command import local

from fluxinfra.k8s.config import at_least, dns1123_label, one_of, option, pinned_image, string_map

__all__ = ["ClusterArgs", "Cluster", "kind_config", "kind_commands", "kind_load_command"]

#: kind v0.24's node image for Kubernetes 1.31.0, pinned by digest.
DEFAULT_KIND_NODE_IMAGE = (
    "kindest/node:v1.31.0@sha256:53df588e04085fd41ae12de0c3fe4c72f7013bba32a20e7325357a1ac94ba865")


def _image_list(value: list) -> str | None:
    if all(isinstance(v, str) and pinned_image(v) is None for v in value):
        return None
    return "a list of pinned image references (repo:tag, not 'latest')"


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
    load_images: list = option([], "local images to load into the kind nodes (docker or "
                               "podman), e.g. the fluxinfra image", check=_image_list)
    """Images built locally that the kind nodes cannot pull (mode kind)."""
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


def kind_load_command(args: ClusterArgs, image: str) -> str:
    """Copy a local image into every node of the kind cluster, from docker or else podman."""
    ref = shlex.quote(image)
    return ("set -eu; archive=$(mktemp); trap 'rm -f \"$archive\"' EXIT; "
            f"docker save -o \"$archive\" {ref} 2>/dev/null || "
            f"podman save -o \"$archive\" {ref}; "
            f"kind load image-archive \"$archive\" --name {args.name}")


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
                                 # a new config must delete the old cluster first: both
                                 # have the same name
                                 opts=pulumi.ResourceOptions(parent=self,
                                                             delete_before_replace=True,
                                                             additional_secret_outputs=["stdout"]))
            self.kubeconfig = pulumi.Output.secret(kind.stdout)
            loads = [local.Command(f"{name}-load-{i}", create=kind_load_command(args, image),
                                   triggers=[image, kind.id],
                                   opts=pulumi.ResourceOptions(parent=self, depends_on=[kind]))
                     for i, image in enumerate(args.load_images)]
            # Nothing is declared on the cluster before it exists with its images loaded.
            self.provider = k8s.Provider(
                f"{name}-provider", kubeconfig=self.kubeconfig,
                enable_config_map_mutable=True,
                opts=pulumi.ResourceOptions(parent=self, depends_on=[kind, *loads]))
        else:
            # The provider takes a path or the file's contents; expand ~ as a shell would.
            path = os.path.expanduser(args.kubeconfig) if args.kubeconfig else ""
            self.kubeconfig = pulumi.Output.secret(path)
            self.provider = k8s.Provider(f"{name}-provider", kubeconfig=path or None,
                                         context=args.context or None,
                                         enable_config_map_mutable=True, opts=child)
        self.register_outputs({"kubeconfig": self.kubeconfig})
