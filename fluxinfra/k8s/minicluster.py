"""``MiniCluster``: a Flux instance in Kubernetes, one broker per pod (the Flux Operator design).

An Indexed Job of ``size`` pods (index = Flux rank) with a headless Service, so each pod has a
stable name ``<name>-<index>.<name>.<ns>.svc.cluster.local``; a ConfigMap with the broker config
listing ``maxSize`` of those names (so the Job can later grow up to ``maxSize`` without a new
config: ranks not yet running are simply offline, and ``broker.quorum`` is the current size); the
CURVE certificate in a Secret mounted 0400. ``ephemeral`` runs ``command`` on rank 0 and the whole
Job completes when it ends (workers' brokers exit with the instance; ``ttlSecondsAfterFinished``
removes the pods); ``persistent`` keeps the instance up until the MiniCluster is removed.
"""

from __future__ import annotations

import base64
import shlex
from dataclasses import dataclass
from typing import Any

import pulumi

from fluxinfra.k8s import manifests as m
from fluxinfra.k8s.config import (
    at_least,
    container_list,
    dns1123_label,
    dns1123_subdomain,
    one_of,
    option,
    pinned_image,
    resource_requirements,
)
from fluxinfra.k8s.keys import ClusterKeys
from fluxinfra.k8s.resources import declare_all

__all__ = ["MiniClusterArgs", "MiniCluster", "minicluster_manifests", "broker_config",
           "minicluster_hosts"]

COMPONENT = "flux-minicluster"
CONFIG_DIR = "/etc/flux/config"
KEYS_DIR = "/etc/flux/keys"
SCRIPTS_DIR = "/etc/flux/scripts"


@dataclass
class MiniClusterArgs:
    name: str = option("flux-sample", "MiniCluster name (Job, Service, pod prefix)",
                       check=dns1123_label(40))
    """Name of the Job, the headless Service and the pods' prefix."""
    namespace: str = option("default", "namespace to run in", check=dns1123_label())
    """Namespace (must exist)."""
    size: int = option(2, "brokers (pods) to run now", check=at_least(1))
    """Pods now; 1 <= size <= maxSize."""
    max_size: int = option(0, "brokers the config lists, so the cluster can grow (0 = size)",
                           check=at_least(0, 1024))
    """Hosts in the broker config (0 means size)."""
    mode: str = option("ephemeral", "ephemeral (run command, then finish) or persistent",
                       check=one_of("ephemeral", "persistent"))
    """ephemeral: rank 0 runs command, then everything ends; persistent: stays up."""
    command: str = option("", "command rank 0 runs in ephemeral mode (e.g. 'flux run -N2 "
                          "hostname')")
    """Command rank 0 runs (ephemeral mode)."""
    image: str = option("fluxrm/flux-sched:noble-v0.48.0-amd64",
                        "runner image with flux-core and flux-sched", check=pinned_image)
    """Flux runner image (must contain flux; the default is flux-sched's published amd64 image,
    which runs as a non-root user, hence runAsUser 0 below)."""
    broker_port: int = option(8050, "broker TCP port", check=at_least(1024, 65535))
    """Broker port."""
    fanout: int = option(2, "tree fan-out (tbon.topo kary:<fanout>)", check=at_least(1, 1024))
    """Overlay tree fan-out."""
    services: list = option([], "extra sidecar containers (Kubernetes container objects)",
                            check=container_list)
    """Service containers started beside the Flux runner in every pod."""
    resources: dict = option({}, "runner container resources", check=resource_requirements)
    """Runner container resources."""
    ttl_seconds_after_finished: int = option(300, "seconds a finished Job (and its pods) stays",
                                             check=at_least(0))
    """Seconds a finished Job stays before Kubernetes removes it."""
    backoff_limit: int = option(2, "pod failures tolerated before the Job fails",
                                check=at_least(0, 100))
    """Job backoffLimit."""
    cluster_domain: str = option("cluster.local", "the cluster's DNS domain (kubelet "
                                 "--cluster-domain)", check=dns1123_subdomain)
    """DNS domain of the cluster, for the brokers' FQDNs."""

    @property
    def hosts(self) -> int:
        return self.max_size or self.size


def minicluster_hosts(args: MiniClusterArgs) -> list[str]:
    """Every broker's FQDN, rank order, ``maxSize`` of them."""
    return [f"{args.name}-{i}.{args.name}.{args.namespace}.svc.{args.cluster_domain}"
            for i in range(args.hosts)]


def broker_config(args: MiniClusterArgs) -> str:
    lines = ["# Written by fluxinfra: rank i is pod <name>-<i> of the indexed Job.",
             "[bootstrap]", f'curve_cert = "{KEYS_DIR}/curve.cert"', "hosts = ["]
    fqdns = minicluster_hosts(args)
    for i, fqdn in enumerate(fqdns):
        comma = "," if i < len(fqdns) - 1 else ""
        lines.append(f'  {{ host = "{fqdn.split(".")[0]}", bind = "tcp://*:'
                     f'{args.broker_port}", connect = "tcp://{fqdn}:{args.broker_port}" }}{comma}')
    lines += ["]", "", "[tbon]", f'topo = "kary:{args.fanout}"', "", "[resource]",
              "noverify = true", ""]
    return "\n".join(lines)


def minicluster_keys_secret(args: MiniClusterArgs, curve_cert: str) -> dict[str, Any]:
    return m.secret(f"{args.name}-curve", args.namespace, {"curve.cert": curve_cert},
                    m.labels(COMPONENT, args.name))


def minicluster_manifests(args: MiniClusterArgs) -> list[dict[str, Any]]:
    """Headless Service, config ConfigMap and the indexed Job (the Secret comes separately)."""
    name, ns = args.name, args.namespace
    lbls = m.labels(COMPONENT, name)
    start = m.render_template("minicluster-start.sh.j2", name=name, size=args.size,
                              max_size=args.hosts, mode=args.mode, config_dir=CONFIG_DIR,
                              command_quoted=shlex.quote(args.command))
    runner = {
        "name": "flux",
        "image": args.image,
        "imagePullPolicy": "IfNotPresent",
        "command": ["/bin/bash", f"{SCRIPTS_DIR}/start.sh"],
        "ports": [{"name": "broker", "containerPort": args.broker_port, "protocol": "TCP"}],
        "volumeMounts": [
            {"name": "config", "mountPath": CONFIG_DIR, "readOnly": True},
            {"name": "scripts", "mountPath": SCRIPTS_DIR, "readOnly": True},
            {"name": "curve", "mountPath": KEYS_DIR, "readOnly": True},
        ],
        # root in the container: the broker must read the 0400 certificate the Secret volume
        # mounts (owned by root) and create its rundir; no privilege escalation, no extras.
        "securityContext": {"runAsUser": 0, "allowPrivilegeEscalation": False,
                            "seccompProfile": {"type": "RuntimeDefault"}},
    }
    if args.resources:
        runner["resources"] = args.resources
    job = {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": m.metadata(name, ns, lbls),
        "spec": {
            "completionMode": "Indexed",
            # Elastic indexed Job: completions and parallelism change together when size does.
            "completions": args.size,
            "parallelism": args.size,
            "backoffLimit": args.backoff_limit,
            "ttlSecondsAfterFinished": args.ttl_seconds_after_finished,
            "template": {
                "metadata": {"labels": lbls},
                "spec": {
                    "subdomain": name,
                    "restartPolicy": "OnFailure",
                    "enableServiceLinks": False,
                    "containers": [runner, *args.services],
                    "volumes": [
                        {"name": "config", "configMap": {
                            "name": f"{name}-config", "items": [
                                {"key": "broker.toml", "path": "broker.toml"}]}},
                        {"name": "scripts", "configMap": {
                            "name": f"{name}-config", "defaultMode": 0o555, "items": [
                                {"key": "start.sh", "path": "start.sh"}]}},
                        {"name": "curve", "secret": {"secretName": f"{name}-curve",
                                                     "defaultMode": 0o400}},
                    ],
                },
            },
        },
    }
    service = {
        "apiVersion": "v1", "kind": "Service",
        "metadata": m.metadata(name, ns, lbls),
        "spec": {"clusterIP": "None", "publishNotReadyAddresses": True,
                 "selector": m.selector(COMPONENT, name),
                 "ports": [{"name": "broker", "port": args.broker_port,
                            "targetPort": args.broker_port, "protocol": "TCP"}]},
    }
    config = {"apiVersion": "v1", "kind": "ConfigMap",
              "metadata": m.metadata(f"{name}-config", ns, lbls),
              "data": {"broker.toml": broker_config(args), "start.sh": start}}
    return [service, config, job]


class MiniCluster(pulumi.ComponentResource):
    """A Flux instance of ``size`` pods; ``lead`` is rank 0's FQDN."""

    lead: pulumi.Output[str]

    def __init__(self, name: str, args: MiniClusterArgs,
                 opts: pulumi.ResourceOptions | None = None):
        super().__init__("fluxinfra:k8s:MiniCluster", name, {}, opts)
        self.keys = ClusterKeys(f"{name}-keys", label=f"minicluster-{args.namespace}-{args.name}",
                                opts=pulumi.ResourceOptions(parent=self))
        cert_b64 = self.keys.curve_cert.apply(lambda c: base64.b64encode(c.encode()).decode())
        secret = {**minicluster_keys_secret(args, ""),
                  "data": pulumi.Output.secret(cert_b64.apply(lambda b: {"curve.cert": b}))}
        self.resources = declare_all([secret, *minicluster_manifests(args)], name, self)
        self.lead = pulumi.Output.from_input(minicluster_hosts(args)[0])
        self.register_outputs({"lead": self.lead})
