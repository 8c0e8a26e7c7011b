"""``FluxionService``: the Fluxion matcher as a gRPC service (``fluxinfra service``) in-cluster.

A Deployment running ``fluxinfra service --port P --policy X`` from the fluxinfra image, a
ClusterIP Service exposing the gRPC port, gRPC readiness/liveness probes (``grpc.health.v1``), and
read-only RBAC on nodes and pods (the service builds its resource graph from them). Runs under
the ``restricted`` Pod Security level.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pulumi

from fluxinfra.k8s import manifests as m
from fluxinfra.k8s.config import at_least, match_policy, option, resource_requirements
from fluxinfra.k8s.resources import declare_all

__all__ = ["FluxionServiceArgs", "FluxionService", "fluxion_service_manifests",
           "fluxion_service_address"]

COMPONENT = "fluxion-service"


@dataclass
class FluxionServiceArgs:
    port: int = option(4242, "gRPC port", check=at_least(1024, 65535))
    """gRPC port of the service (container and Service)."""
    policy: str = option("first", "match policy", check=match_policy)
    """Fluxion match policy (KNOWN_POLICIES or a custom 'policy=... key=value' string)."""
    replicas: int = option(1, "replicas; each holds its own graph, so more than 1 only for "
                           "stateless clients, not for the scheduler", check=at_least(1, 16))
    """Replicas (each holds its own graph; clients pick one through the Service)."""
    resources: dict = option({"requests": {"cpu": "100m", "memory": "128Mi"},
                              "limits": {"memory": "512Mi"}}, "container resources",
                             check=resource_requirements)
    """Container resources."""
    namespace: str = field(default=m.DEFAULT_NAMESPACE)
    """Namespace to run in (must exist; the stack's top-level ``namespace``)."""
    image: str = field(default=m.DEFAULT_IMAGE)
    """The fluxinfra image (the stack's top-level ``image``)."""


def fluxion_service_manifests(name: str, args: FluxionServiceArgs) -> list[dict[str, Any]]:
    """ServiceAccount, read-only ClusterRole + binding, Deployment and Service."""
    lbls = m.labels(COMPONENT, name)
    namespace = args.namespace
    rules = [{"apiGroups": [""], "resources": ["nodes", "pods"], "verbs": ["get", "list", "watch"]}]
    probe = {"grpc": {"port": args.port}, "periodSeconds": 10, "timeoutSeconds": 2}
    container = {
        "name": "service",
        "image": args.image,
        "args": ["service", "--port", str(args.port), "--policy", args.policy],
        "ports": [{"name": "grpc", "containerPort": args.port, "protocol": "TCP"}],
        "startupProbe": {**probe, "failureThreshold": 30},
        "readinessProbe": probe,
        "livenessProbe": {**probe, "failureThreshold": 3},
        "resources": args.resources,
    }
    deployment = m.restricted_deployment(name, namespace, COMPONENT, args.replicas, container)
    service = {
        "apiVersion": "v1", "kind": "Service",
        "metadata": m.metadata(name, namespace, lbls),
        "spec": {"type": "ClusterIP", "selector": m.selector(COMPONENT, name),
                 "ports": [{"name": "grpc", "port": args.port, "targetPort": "grpc",
                            "protocol": "TCP", "appProtocol": "grpc"}]},
    }
    out = [
        m.service_account(name, namespace, lbls),
        m.cluster_role(f"{name}-read", rules, lbls),
        m.cluster_role_binding(f"{name}-read", name, namespace, lbls),
        deployment,
        service,
    ]
    if args.replicas > 1:
        out.append(m.disruption_budget(name, namespace, COMPONENT))
    return out


def fluxion_service_address(name: str, args: FluxionServiceArgs) -> str:
    """``HOST:PORT`` of the service in the cluster (what ``--fluxion-service`` takes)."""
    return f"{name}.{args.namespace}.svc.cluster.local:{args.port}"


class FluxionService(pulumi.ComponentResource):
    """The gRPC Fluxion service; ``address`` is ``<svc>.<ns>.svc.cluster.local:<port>``."""

    address: pulumi.Output[str]

    def __init__(self, name: str, args: FluxionServiceArgs,
                 opts: pulumi.ResourceOptions | None = None):
        super().__init__("fluxinfra:k8s:FluxionService", name, {}, opts)
        self.resources = declare_all(fluxion_service_manifests(name, args), name, self)
        self.address = pulumi.Output.from_input(fluxion_service_address(name, args))
        self.register_outputs({"address": self.address})
