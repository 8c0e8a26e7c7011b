"""``FluxScheduler``: Fluxion as a second Kubernetes scheduler (``fluxinfra scheduler``).

Pods opt in with ``spec.schedulerName: <schedulerName>``. The Deployment runs ``fluxinfra
scheduler --scheduler-name N --policy P --port HTTP --leader-elect --lease-namespace NS
--lease-name N-scheduler`` (``/healthz``, ``/metrics``) with exactly the RBAC a binder needs: pods
get/list/watch/patch, ``pods/binding`` create, ``pods/status`` patch, nodes get/list/watch, events
create (core and events.k8s.io) and patch (events.k8s.io: a repeated Event's series), PodGroups
and their status (scheduling.x-k8s.io), and a namespaced Role on the one Lease the replicas
elect their leader with. Optionally installs the PodGroup CRD (the scheduler-plugins shape:
minMember, minResources, scheduleTimeoutSeconds).

High availability: only the Lease holder schedules; the other replicas stand by, healthy, and
take over within the lease duration (``fluxinfra.scheduler.leader``). So rollouts surge (one new
pod stands by until the old one releases the Lease on SIGTERM), and with more than one replica the
pods spread over nodes and a PodDisruptionBudget keeps one through drains.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import pulumi

from fluxinfra.k8s import manifests as m
from fluxinfra.k8s.config import (
    at_least,
    dns1123_label,
    dns1123_subdomain,
    match_policy,
    option,
    resource_requirements,
)
from fluxinfra.k8s.fluxion_service import mount_secret
from fluxinfra.k8s.resources import declare_all

__all__ = ["FluxSchedulerArgs", "FluxScheduler", "scheduler_manifests", "podgroup_crd",
           "scheduler_rules", "lease_name", "lease_rules"]

COMPONENT = "fluxion-scheduler"
PODGROUP_GROUP = "scheduling.x-k8s.io"
#: More standbys than this buy nothing but Lease polling (each retries every 2 s).
MAX_REPLICAS = 5
#: Where the Fluxion service's client certificate Secret is mounted.
FLUXION_TLS_DIR = "/etc/fluxinfra/fluxion-tls"


def _service(value: str) -> str | None:
    host, sep, port = value.rpartition(":")
    if value in ("", "stack") or (sep and host and port.isdigit() and 0 < int(port) < 65536):
        return None
    return "'' (in process), 'stack' (this stack's FluxionService) or HOST:PORT"


def _secret_name(value: str) -> str | None:
    problem = dns1123_subdomain(value) if value else None
    return f"'' or a Secret name ({problem})" if problem else None


@dataclass
class FluxSchedulerArgs:
    scheduler_name: str = option("fluxion", "schedulerName pods ask for",
                                 check=dns1123_label())
    """The name pods put in spec.schedulerName."""
    policy: str = option("first", "match policy", check=match_policy)
    """Fluxion match policy (KNOWN_POLICIES or a custom 'policy=... key=value' string)."""
    port: int = option(10259, "HTTP port for /healthz and /metrics", check=at_least(1024, 65535))
    """HTTP port for /healthz and /metrics."""
    replicas: int = option(1, "replicas: the Lease holder schedules, the others stand by "
                           "(2 for HA; more only adds standbys)", check=at_least(1, MAX_REPLICAS))
    """Replicas; one leads (holds the Lease ``<schedulerName>-scheduler``), the rest stand by."""
    fluxion_service: str = option("", "'' = match in process; 'stack' = this stack's "
                                  "FluxionService; or HOST:PORT of another", check=_service)
    """Where matching happens: in process, or a Fluxion gRPC service ('stack' is resolved by
    ``__main__.py`` to the stack's FluxionService address)."""
    fluxion_tls_secret: str = option("", "Secret (ca.crt, tls.crt, tls.key) with the client "
                                     "certificate for the Fluxion service's mutual TLS; set "
                                     "for you with fluxionService: stack",
                                     check=_secret_name)
    """Secret mounted for ``--fluxion-tls-dir`` (the FluxionService's ``<name>-client-tls``);
    '' talks to a HOST:PORT service in plain text."""
    install_pod_group_crd: bool = option(True, "install the PodGroup CRD (scheduling.x-k8s.io)")
    """Install the PodGroup CRD (turn off when scheduler-plugins already did)."""
    resources: dict = option({"requests": {"cpu": "500m", "memory": "768Mi"},
                              "limits": {"memory": "1536Mi"}}, "container resources (sized "
                             "for 5,000 nodes / 10,000 pods: peak RSS 770 MiB measured)",
                             check=resource_requirements)
    """Container resources. The default is set from ``benchmarks/memory.py``: the scheduler
    process (matcher in process) peaks at about 770 MiB with 5,000 nodes and 10,000 pods;
    the limit leaves twice that. Smaller clusters can ask for less (docs/scheduler.md)."""
    namespace: str = field(default=m.DEFAULT_NAMESPACE)
    """Namespace to run in (must exist; the stack's top-level ``namespace``)."""
    image: str = field(default=m.DEFAULT_IMAGE)
    """The fluxinfra image (the stack's top-level ``image``)."""
    queue: bool = field(default=False)
    """Host the Fluxion queue (``--queue``); set when the stack's ``queue`` is enabled."""
    queues: list = field(default_factory=list)
    """The stack's FluxJobQueues (``--queue-config``): the controller creates them and keeps
    their limits, so no FluxJobQueue is applied in the same request as its CRD."""


def scheduler_rules() -> list[dict[str, Any]]:
    """The ClusterRole rules: what a binder reads, binds, patches and reports, and the pods it
    evicts when it preempts (delete); nothing else. Namespaces (pod affinity's
    namespaceSelector) and PodDisruptionBudgets (preemption) are listed and watched, never read
    by name (no get: the e2e audit found it unused)."""
    return [
        {"apiGroups": [""], "resources": ["pods"],
         "verbs": ["get", "list", "watch", "patch", "delete"]},
        {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["list", "watch"]},
        {"apiGroups": ["policy"], "resources": ["poddisruptionbudgets"],
         "verbs": ["list", "watch"]},
        {"apiGroups": [""], "resources": ["pods/binding"], "verbs": ["create"]},
        {"apiGroups": [""], "resources": ["pods/status"], "verbs": ["patch"]},
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch"]},
        {"apiGroups": [""], "resources": ["events"], "verbs": ["create"]},
        # patch: a repeated Event grows the first one's series (as kube-scheduler's)
        {"apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": ["create", "patch"]},
        {"apiGroups": [PODGROUP_GROUP], "resources": ["podgroups"],
         "verbs": ["get", "list", "watch", "update", "patch"]},
        {"apiGroups": [PODGROUP_GROUP], "resources": ["podgroups/status"],
         "verbs": ["get", "update", "patch"]},
    ]


def lease_name(args: FluxSchedulerArgs) -> str:
    """The Lease the replicas elect their leader with (the scheduler's own default name)."""
    return f"{args.scheduler_name}-scheduler"


def lease_rules(lease: str) -> list[dict[str, Any]]:
    """What ``fluxinfra.scheduler.leader`` does to its Lease: read it (get), create it when
    absent, and take/renew/release it with a full replace (update, resourceVersion-guarded).
    No patch, list or watch. ``create`` cannot be limited by ``resourceNames`` (the name is not
    known to RBAC before the object exists), so that rule grants creating any Lease in the
    namespace; get and update are limited to the one Lease."""
    group = ["coordination.k8s.io"]
    return [{"apiGroups": group, "resources": ["leases"], "verbs": ["create"]},
            {"apiGroups": group, "resources": ["leases"], "resourceNames": [lease],
             "verbs": ["get", "update"]}]


def podgroup_crd() -> dict[str, Any]:
    """A PodGroup CRD compatible with scheduler-plugins' ``scheduling.x-k8s.io/v1alpha1``."""
    quantity = {"anyOf": [{"type": "integer"}, {"type": "string"}],
                "x-kubernetes-int-or-string": True}
    spec = {"type": "object", "properties": {
        "minMember": {"type": "integer", "format": "int32", "minimum": 1,
                      "description": "Pods that must be schedulable together before any binds."},
        "minResources": {"type": "object", "additionalProperties": quantity,
                         "description": "Resources the whole group needs (name -> quantity)."},
        "scheduleTimeoutSeconds": {"type": "integer", "format": "int32", "minimum": 1,
                                   "description": "Give up on the group after this long."},
    }}
    status = {"type": "object", "properties": {
        "phase": {"type": "string", "description": "Pending, PreScheduling, Scheduling, "
                  "Scheduled, Running, Finished or Failed."},
        "occupiedBy": {"type": "string"},
        "scheduled": {"type": "integer", "format": "int32"},
        "running": {"type": "integer", "format": "int32"},
        "succeeded": {"type": "integer", "format": "int32"},
        "failed": {"type": "integer", "format": "int32"},
        "scheduleStartTime": {"type": "string", "format": "date-time"},
    }}
    return {
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": f"podgroups.{PODGROUP_GROUP}",
                     "labels": m.labels(COMPONENT, "podgroup-crd")},
        "spec": {
            "group": PODGROUP_GROUP,
            "names": {"kind": "PodGroup", "listKind": "PodGroupList", "plural": "podgroups",
                      "singular": "podgroup", "shortNames": ["pg", "pgs"]},
            "scope": "Namespaced",
            "versions": [{
                "name": "v1alpha1", "served": True, "storage": True,
                "subresources": {"status": {}},
                "additionalPrinterColumns": [
                    {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
                    {"name": "MinMember", "type": "integer", "jsonPath": ".spec.minMember"},
                    {"name": "Running", "type": "integer", "jsonPath": ".status.running"},
                ],
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "apiVersion": {"type": "string"}, "kind": {"type": "string"},
                    "metadata": {"type": "object"}, "spec": spec, "status": status}}},
            }],
        },
    }


def scheduler_manifests(name: str, args: FluxSchedulerArgs) -> list[dict[str, Any]]:
    lbls = m.labels(COMPONENT, name)
    namespace = args.namespace
    lease = lease_name(args)
    health = {"httpGet": {"path": "/healthz", "port": "http"}}
    tls = bool(args.fluxion_service and args.fluxion_tls_secret)
    container = {
        "name": "scheduler",
        "image": args.image,
        "args": ["scheduler", "--scheduler-name", args.scheduler_name, "--policy", args.policy,
                 "--port", str(args.port), "--leader-elect", "--lease-namespace", namespace,
                 "--lease-name", lease]
        + (["--fluxion-service", args.fluxion_service] if args.fluxion_service else [])
        + (["--fluxion-tls-dir", FLUXION_TLS_DIR] if tls else [])
        + (["--queue"] if args.queue else [])
        + (["--queue-config", json.dumps(args.queues, separators=(",", ":"), sort_keys=True)]
           if args.queue and args.queues else []),
        "env": [{"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                {"name": "POD_NAMESPACE",
                 "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}}],
        "ports": [{"name": "http", "containerPort": args.port, "protocol": "TCP"}],
        "startupProbe": {**health, "periodSeconds": 5, "timeoutSeconds": 5, "failureThreshold": 60},
        **m.probes(health),
        "resources": args.resources,
    }
    deployment = m.restricted_deployment(
        name, namespace, COMPONENT, args.replicas, container,
        annotations={"prometheus.io/scrape": "true", "prometheus.io/port": str(args.port)})
    # Only the Lease holder schedules, so a surge pod is a harmless standby: it is Ready (standbys
    # are healthy) before the old pod stops, and takes the Lease the old one releases on SIGTERM.
    deployment["spec"]["strategy"] = {"type": "RollingUpdate",
                                      "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}
    if tls:
        mount_secret(deployment, "fluxion-tls", args.fluxion_tls_secret, FLUXION_TLS_DIR)
    out = [
        m.service_account(name, namespace, lbls),
        m.cluster_role(name, scheduler_rules(), lbls),
        m.cluster_role_binding(name, name, namespace, lbls),
        m.role(f"{name}-leader-election", namespace, lease_rules(lease), lbls),
        m.role_binding(f"{name}-leader-election", namespace, name, lbls),
        deployment,
    ]
    if args.replicas > 1:
        out.append(m.disruption_budget(name, namespace, COMPONENT))
    if args.install_pod_group_crd:
        out.insert(0, podgroup_crd())
    return out


class FluxScheduler(pulumi.ComponentResource):
    """The second scheduler; ``scheduler_name`` is what pods put in ``spec.schedulerName``."""

    scheduler_name: pulumi.Output[str]

    def __init__(self, name: str, args: FluxSchedulerArgs,
                 opts: pulumi.ResourceOptions | None = None):
        super().__init__("fluxinfra:k8s:FluxScheduler", name, {}, opts)
        self.resources = declare_all(scheduler_manifests(name, args), name, self)
        self.scheduler_name = pulumi.Output.from_input(args.scheduler_name)
        self.register_outputs({"schedulerName": self.scheduler_name})
