"""``FluxionService``: the Fluxion matcher as a gRPC service (``fluxinfra service``) in-cluster.

A Deployment running ``fluxinfra service --port P --policy X --tls-dir ... --health-port H``
from the fluxinfra image, a ClusterIP Service exposing the gRPC port, and read-only RBAC on
nodes and pods (the service builds its first graph from them). Runs under the ``restricted``
Pod Security level.

**Only the scheduler gets in.** The gRPC port speaks only mutual TLS: the component makes a
private CA, a server certificate for the Service's DNS names and a client certificate for the
scheduler once per stack (:class:`fluxinfra.k8s.certs.ServiceCerts`) into two Secrets,
``<name>-server-tls`` (mounted by the service) and ``<name>-client-tls`` (mounted by the
scheduler; ``client_tls_secret``). A client without that certificate is refused in the TLS
handshake, before any RPC. A NetworkPolicy admits connections to the gRPC port only from the
scheduler's pods (``app.kubernetes.io/name: fluxion-scheduler``) in the namespace, where the
cluster's network plugin enforces NetworkPolicy. The kubelet's gRPC probes cannot present a
certificate, so ``grpc.health.v1`` alone is also served in plain text on the health port; no
ServiceAccount is granted access to Secrets.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

import pulumi

from fluxinfra.k8s import manifests as m
from fluxinfra.k8s.certs import ServiceCerts
from fluxinfra.k8s.config import at_least, match_policy, option, resource_requirements
from fluxinfra.k8s.resources import declare_all
from fluxinfra.pki import ServiceTls

__all__ = ["FluxionServiceArgs", "FluxionService", "fluxion_service_manifests",
           "fluxion_service_address", "service_tls_secrets", "server_names",
           "client_tls_secret_name", "CLIENT_COMPONENT", "TLS_DIR"]

COMPONENT = "fluxion-service"
#: The pods allowed through the NetworkPolicy (the scheduler component's name label).
CLIENT_COMPONENT = "fluxion-scheduler"
#: Where the server's TLS Secret is mounted in the service container.
TLS_DIR = "/etc/fluxinfra/tls"


@dataclass
class FluxionServiceArgs:
    port: int = option(4242, "gRPC port (mutual TLS only)", check=at_least(1024, 65535))
    """gRPC port of the service (container and Service); mutual TLS only."""
    health_port: int = option(4243, "plain-text port answering only grpc.health.v1 (probes)",
                              check=at_least(1024, 65535))
    """Port of the plain-text ``grpc.health.v1`` endpoint the probes use."""
    policy: str = option("first", "match policy", check=match_policy)
    """Fluxion match policy (KNOWN_POLICIES or a custom 'policy=... key=value' string)."""
    replicas: int = option(1, "replicas; each holds its own graph, so more than 1 only for "
                           "stateless clients, not for the scheduler", check=at_least(1, 16))
    """Replicas (each holds its own graph; clients pick one through the Service)."""
    resources: dict = option({"requests": {"cpu": "500m", "memory": "512Mi"},
                              "limits": {"memory": "1Gi"}}, "container resources (sized for "
                             "5,000 nodes / 10,000 pods: peak RSS 473 MiB measured)",
                             check=resource_requirements)
    """Container resources. The default is set from ``benchmarks/memory.py``: the service
    peaks at about 473 MiB holding 5,000 nodes and 10,000 pods' allocations; the limit leaves
    twice that (docs/scheduler.md)."""
    namespace: str = field(default=m.DEFAULT_NAMESPACE)
    """Namespace to run in (must exist; the stack's top-level ``namespace``)."""
    image: str = field(default=m.DEFAULT_IMAGE)
    """The fluxinfra image (the stack's top-level ``image``)."""


def server_names(name: str, args: FluxionServiceArgs) -> list[str]:
    """The DNS names a client may use for the Service (the server certificate's SANs)."""
    ns = args.namespace
    return [name, f"{name}.{ns}", f"{name}.{ns}.svc", f"{name}.{ns}.svc.cluster.local"]


def client_tls_secret_name(name: str) -> str:
    """The Secret holding the scheduler's client certificate (``ca.crt``, ``tls.crt``,
    ``tls.key``), for ``fluxinfra scheduler --fluxion-tls-dir``."""
    return f"{name}-client-tls"


def service_tls_secrets(name: str, args: FluxionServiceArgs,
                        tls: ServiceTls) -> list[dict[str, Any]]:
    """The server's and the client's ``kubernetes.io/tls`` Secrets (each with the CA)."""
    lbls = m.labels(COMPONENT, name)
    out = []
    for secret_name, cert, key in ((f"{name}-server-tls", tls.server_cert, tls.server_key),
                                   (client_tls_secret_name(name), tls.client_cert,
                                    tls.client_key)):
        secret = m.secret(secret_name, args.namespace,
                          {"ca.crt": tls.ca_cert, "tls.crt": cert, "tls.key": key}, lbls)
        secret["type"] = "kubernetes.io/tls"
        out.append(secret)
    return out


def network_policy(name: str, args: FluxionServiceArgs) -> dict[str, Any]:
    """gRPC only from the scheduler's pods; the health port from anywhere (probes)."""
    return {
        "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
        "metadata": m.metadata(name, args.namespace, m.labels(COMPONENT, name)),
        "spec": {
            "podSelector": {"matchLabels": m.selector(COMPONENT, name)},
            "policyTypes": ["Ingress"],
            "ingress": [
                {"from": [{"podSelector": {"matchLabels": {
                    "app.kubernetes.io/name": CLIENT_COMPONENT}}}],
                 "ports": [{"protocol": "TCP", "port": args.port}]},
                {"ports": [{"protocol": "TCP", "port": args.health_port}]},
            ],
        },
    }


def fluxion_service_manifests(name: str, args: FluxionServiceArgs,
                              tls_fingerprint: Any = "") -> list[dict[str, Any]]:
    """ServiceAccount, read-only ClusterRole + binding, Deployment, Service and NetworkPolicy
    (the two TLS Secrets come separately, from :func:`service_tls_secrets`). The pod template
    carries ``tls_fingerprint`` (a digest of the CA certificate, not secret), so new
    certificates roll the Deployment."""
    lbls = m.labels(COMPONENT, name)
    namespace = args.namespace
    rules = [{"apiGroups": [""], "resources": ["nodes", "pods"], "verbs": ["get", "list", "watch"]}]
    health = {"grpc": {"port": args.health_port}}
    container = {
        "name": "service",
        "image": args.image,
        "args": ["service", "--port", str(args.port), "--policy", args.policy,
                 "--tls-dir", TLS_DIR, "--health-port", str(args.health_port)],
        "ports": [{"name": "grpc", "containerPort": args.port, "protocol": "TCP"},
                  {"name": "health", "containerPort": args.health_port, "protocol": "TCP"}],
        "startupProbe": {**health, "periodSeconds": 10, "timeoutSeconds": 5,
                         "failureThreshold": 30},
        **m.probes(health),
        "resources": args.resources,
    }
    annotations = {"fluxinfra.io/tls-ca-sha256": tls_fingerprint} if tls_fingerprint else None
    deployment = m.restricted_deployment(name, namespace, COMPONENT, args.replicas, container,
                                         annotations=annotations)
    mount_secret(deployment, "tls", f"{name}-server-tls", TLS_DIR)
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
        network_policy(name, args),
        deployment,
        service,
    ]
    if args.replicas > 1:
        out.append(m.disruption_budget(name, namespace, COMPONENT))
    return out


def mount_secret(deployment: dict[str, Any], volume: str, secret: str, path: str) -> None:
    """Mount ``secret`` read-only at ``path`` in the Deployment's container: files 0400, which
    the kubelet makes group-readable for the restricted pod's fsGroup (the image's group)."""
    pod = deployment["spec"]["template"]["spec"]
    pod["volumes"].append({"name": volume, "secret": {"secretName": secret,
                                                      "defaultMode": 0o400}})
    pod["containers"][0]["volumeMounts"].append({"name": volume, "mountPath": path,
                                                 "readOnly": True})


def fluxion_service_address(name: str, args: FluxionServiceArgs) -> str:
    """``HOST:PORT`` of the service in the cluster (what ``--fluxion-service`` takes)."""
    return f"{name}.{args.namespace}.svc.cluster.local:{args.port}"


def ca_fingerprint(ca_cert: str) -> str:
    return hashlib.sha256(ca_cert.encode()).hexdigest()[:16]


class FluxionService(pulumi.ComponentResource):
    """The gRPC Fluxion service; ``address`` is ``<svc>.<ns>.svc.cluster.local:<port>`` and
    ``client_tls_secret`` the Secret a client mounts for mutual TLS."""

    address: pulumi.Output[str]
    client_tls_secret: pulumi.Output[str]
    certs: ServiceCerts

    def __init__(self, name: str, args: FluxionServiceArgs,
                 opts: pulumi.ResourceOptions | None = None):
        super().__init__("fluxinfra:k8s:FluxionService", name, {}, opts)
        self.certs = ServiceCerts(f"{name}-tls", label=name, names=server_names(name, args),
                                  client=CLIENT_COMPONENT,
                                  opts=pulumi.ResourceOptions(parent=self))
        manifests = fluxion_service_manifests(name, args,
                                              self.certs.ca_cert.apply(ca_fingerprint))
        manifests += _tls_secrets(name, args, self.certs)
        self.resources = declare_all(manifests, name, self)
        self.address = pulumi.Output.from_input(fluxion_service_address(name, args))
        self.client_tls_secret = pulumi.Output.from_input(client_tls_secret_name(name))
        self.register_outputs({"address": self.address,
                               "clientTlsSecret": self.client_tls_secret})


def _tls_secrets(name: str, args: FluxionServiceArgs,
                 certs: ServiceCerts) -> list[dict[str, Any]]:
    """The Secret manifests with their data as secret Outputs of the certificates resource."""
    every = pulumi.Output.all(certs.ca_cert, certs.server_cert, certs.server_key,
                              certs.client_cert, certs.client_key)
    shapes = service_tls_secrets(name, args, ServiceTls("", "", "", "", ""))
    out = []
    for i, shape in enumerate(shapes):
        data = every.apply(lambda pems, i=i: service_tls_secrets(
            name, args, ServiceTls(*pems))[i]["data"])
        out.append({**shape, "data": pulumi.Output.secret(data)})
    return out
