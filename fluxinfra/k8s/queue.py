"""``FluxQueue``: the Fluxion queue (admission webhook, FluxJob CRDs, RBAC, TLS) in-cluster.

What it declares (docs/queue.md explains the design):

- the ``FluxJob`` and ``FluxJobQueue`` CRDs (:mod:`fluxinfra.kube.fluxjob`, the API
  definition; this component never imports the queue itself); the configured queues are not
  objects here: the scheduler gets them (``--queue-config``) and its queue controller creates them
  (:mod:`fluxinfra.queue.configured`), so one ``kubectl apply -k`` of a render works on an
  empty cluster (a FluxJobQueue beside its CRD in one request is refused);
- the webhook: a Deployment of ``fluxinfra queue webhook`` (stateless, ``webhookReplicas``
  replicas spread over nodes, a PodDisruptionBudget), its Service, its TLS Secret and the
  ``MutatingWebhookConfiguration`` with two webhooks: namespaces labelled
  ``fluxinfra.io/queue=enabled``, and objects labelled ``fluxinfra.io/queue-name`` elsewhere
  (never the system namespaces). Both on CREATE and UPDATE of batch Jobs and pods,
  ``sideEffects: None``, ``timeoutSeconds`` (default 3 s: the webhook answers in about a
  millisecond, and an API server never waits longer than this), ``failurePolicy`` (default
  ``Fail``: when no replica answers, creating a Job in an opted-in namespace fails loudly rather
  than running unqueued past the limits; ``Ignore`` chooses availability instead);
- TLS: ``tls: generate`` (default) makes a private CA and the server certificate at deploy time
  (:class:`WebhookCerts`, Python ``cryptography``, kept in the Pulumi state, the keys as
  secrets) and puts the CA into the webhook configuration's ``caBundle``; ``tls:
  cert-manager`` asks a cert-manager installed in the cluster instead (a self-signed Issuer, a
  Certificate, and ``cert-manager.io/inject-ca-from`` on the configuration);
- RBAC: the queue controller runs inside the scheduler (``fluxinfra scheduler --queue``), so
  the scheduler's ServiceAccount gets exactly what the queue does (Jobs: read, patch; FluxJobs:
  read, create, status; FluxJobQueues: read, create and patch (the configured ones), status;
  PriorityClasses: read); the webhook's own
  ServiceAccount gets nothing (it reads no API). FluxJobs are readable by everyone with ``view``
  and FluxJobQueues editable by namespace admins (aggregated ClusterRoles).
"""

from __future__ import annotations

import base64
import hashlib
from dataclasses import dataclass, field
from typing import Any

import pulumi
from pulumi.dynamic import CreateResult, DiffResult, Resource, ResourceProvider

from fluxinfra.k8s import manifests as m
from fluxinfra.k8s.config import (
    at_least,
    dns1123_label,
    one_of,
    option,
    resource_requirements,
)
from fluxinfra.k8s.resources import declare, declare_all
from fluxinfra.kube.fluxjob import (
    GATE,
    GROUP,
    LABEL_FLUXJOB,
    LABEL_NAMESPACE_OPT_IN,
    LABEL_QUEUE_NAME,
    NAMESPACE_OPT_IN_VALUE,
    OPT_OUT_VALUE,
    PLURAL,
    QUEUE_PLURAL,
    fluxjob_crd,
    fluxjobqueue_crd,
)
from fluxinfra.pki import make_service_tls

__all__ = ["CERTS_PURPOSE", "FluxQueue", "FluxQueueArgs", "WebhookCerts", "cert_outputs",
           "controller_rules", "queue_manifests", "webhook_names"]

COMPONENT = "fluxion-queue"
CERTS_PURPOSE = "fluxinfra-webhook-tls"
_SECRET_OUTPUTS = ["server_key"]
_QUEUE_KEYS = {"namespace", "name", "maxRunning", "maxCores", "maxMemory", "maxGPUs"}
#: Namespaces the webhook never sees, whatever their labels say.
SYSTEM_NAMESPACES = ("kube-system", "kube-public", "kube-node-lease")


def _queue_list(value: list) -> str | None:
    accepted = ("a list of queues, each a mapping with 'namespace' and 'name' (DNS-1123 "
                "labels) and optional maxRunning, maxGPUs (integers >= 0), maxCores, maxMemory "
                "(quantities like '64', '500m', '256Gi')")
    seen = set()
    for item in value:
        if not isinstance(item, dict) or not set(item) <= _QUEUE_KEYS:
            return accepted
        if any(dns1123_label()(str(item.get(k, ""))) is not None for k in ("namespace", "name")):
            return accepted
        for key in ("maxRunning", "maxGPUs"):
            if key in item and (not isinstance(item[key], int) or item[key] < 0):
                return accepted
        for key in ("maxCores", "maxMemory"):
            if key in item:
                from fluxinfra.kube.quantity import QuantityError, parse_quantity

                try:
                    if parse_quantity(str(item[key])) < 0:
                        return accepted
                except QuantityError:
                    return accepted
        if (item["namespace"], item["name"]) in seen:
            return accepted
        seen.add((item["namespace"], item["name"]))
    return None


@dataclass
class FluxQueueArgs:
    webhook_replicas: int = option(2, "webhook replicas (stateless; 2 keeps admission up "
                                   "through a node drain)", check=at_least(1, 10))
    """Replicas of the webhook Deployment."""
    webhook_port: int = option(9443, "HTTPS port of the webhook container",
                               check=at_least(1024, 65535))
    """HTTPS port the webhook listens on (the Service exposes 443)."""
    failure_policy: str = option("Fail", "what the API server does when no webhook replica "
                                 "answers: Fail (refuse the object) or Ignore (create it "
                                 "unqueued)", check=one_of("Fail", "Ignore"))
    """The webhook configuration's failurePolicy (docs/queue.md: why Fail)."""
    timeout_seconds: int = option(3, "seconds the API server waits for the webhook",
                                  check=at_least(1, 30))
    """The webhook configuration's timeoutSeconds."""
    tls: str = option("generate", "generate (a private CA made at deploy time) or "
                      "cert-manager (needs cert-manager in the cluster)",
                      check=one_of("generate", "cert-manager"))
    """Where the webhook's serving certificate comes from."""
    queues: list = option([], "FluxJobQueues the queue controller makes at start and keeps: "
                          "namespace, name and limits "
                          "(maxRunning, maxCores, maxMemory, maxGPUs)", check=_queue_list)
    """Per-namespace queues and their limits (a namespace without one has an unlimited
    ``default`` queue)."""
    resources: dict = option({"requests": {"cpu": "50m", "memory": "64Mi"},
                              "limits": {"memory": "256Mi"}}, "webhook container resources",
                             check=resource_requirements)
    """Resources of the webhook container."""
    namespace: str = field(default=m.DEFAULT_NAMESPACE)
    """Namespace of the webhook (the stack's top-level ``namespace``)."""
    image: str = field(default=m.DEFAULT_IMAGE)
    """The fluxinfra image (the stack's top-level ``image``)."""
    scheduler_name: str = field(default="fluxion")
    """The scheduler that hosts the queue (its ``schedulerName``)."""
    scheduler_account: str = field(default="fluxion-scheduler")
    """The scheduler's ServiceAccount (same namespace): the queue controller's identity."""


def webhook_names(name: str, args: FluxQueueArgs) -> list[str]:
    """The DNS names the API server may use for the webhook's Service."""
    return [f"{name}.{args.namespace}.svc", f"{name}.{args.namespace}.svc.cluster.local",
            f"{name}.{args.namespace}"]


def controller_rules() -> list[dict[str, Any]]:
    """What the queue controller (inside the scheduler) does beyond the scheduler's rules."""
    return [
        {"apiGroups": ["batch"], "resources": ["jobs"],
         "verbs": ["get", "list", "watch", "patch"]},
        {"apiGroups": [GROUP], "resources": [PLURAL],
         "verbs": ["get", "list", "watch", "create"]},
        {"apiGroups": [GROUP], "resources": [f"{PLURAL}/status"], "verbs": ["patch"]},
        # get/create/patch: the stack's configured queues (fluxinfra.queue.configured)
        {"apiGroups": [GROUP], "resources": [QUEUE_PLURAL],
         "verbs": ["get", "list", "watch", "create", "patch"]},
        {"apiGroups": [GROUP], "resources": [f"{QUEUE_PLURAL}/status"], "verbs": ["patch"]},
        {"apiGroups": ["scheduling.k8s.io"], "resources": ["priorityclasses"],
         "verbs": ["get", "list", "watch"]},
    ]


def _webhook(name: str, args: FluxQueueArgs, suffix: str, namespace_selector: dict[str, Any],
             object_selector: dict[str, Any], ca_bundle: Any, user: str) -> dict[str, Any]:
    client: dict[str, Any] = {"service": {"name": name, "namespace": args.namespace,
                                          "path": "/mutate", "port": 443}}
    if ca_bundle is not None:
        client["caBundle"] = ca_bundle
    return {
        "name": f"{suffix}.queue.fluxinfra.io",
        "admissionReviewVersions": ["v1"],
        "clientConfig": client,
        "rules": [{"apiGroups": ["batch"], "apiVersions": ["v1"], "resources": ["jobs"],
                   "operations": ["CREATE", "UPDATE"], "scope": "Namespaced"},
                  {"apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"],
                   "operations": ["CREATE", "UPDATE"], "scope": "Namespaced"}],
        "namespaceSelector": namespace_selector,
        "objectSelector": object_selector,
        "sideEffects": "None",
        "failurePolicy": args.failure_policy,
        "timeoutSeconds": args.timeout_seconds,
        "matchPolicy": "Equivalent",
        "reinvocationPolicy": "IfNeeded",
        "matchConditions": [{"name": "creates-or-starts-queued-work",
                             "expression": _calls_for(user)}],
    }


def admitter(args: FluxQueueArgs) -> str:
    """The user that admits queued work: the queue controller's (the scheduler's)
    ServiceAccount; the webhook lets only it start a queued Job or un-gate a queued pod."""
    return f"system:serviceaccount:{args.namespace}:{args.scheduler_account}"


def _calls_for(user: str) -> str:
    """When the API server calls the webhook (a CEL match condition): every create, and an
    update only when it starts queued work (a Job's ``suspend`` true -> false, our gate gone
    from a pod) by someone other than ``user``. The webhook answers every other update with
    "allowed, unchanged": the update of a running Job by its controller, a label edit, and
    the queue's own un-suspend of every Job it admits (one call saved per admission). Where
    match conditions are not served (before Kubernetes 1.28) the field is dropped and every
    update is sent, which the webhook answers the same way."""
    gated = f"exists(g, g.name == '{GATE}')"
    return (
        "request.operation == 'CREATE' || (request.userInfo.username != '" + user + "' && ("
        "(request.kind.kind == 'Job' && has(oldObject.spec.suspend) && oldObject.spec.suspend"
        " && !(has(object.spec.suspend) && object.spec.suspend)) || "
        "(request.kind.kind == 'Pod' && has(oldObject.spec.schedulingGates) && "
        f"oldObject.spec.schedulingGates.{gated} && !(has(object.spec.schedulingGates) && "
        f"object.spec.schedulingGates.{gated}))))")


def webhook_configuration(name: str, args: FluxQueueArgs, ca_bundle: Any,
                          user: str | None = None) -> dict[str, Any]:
    """Two webhooks, so a Job or pod opts in by its namespace *or* by its own label.
    ``user``: who admits queued work (the webhook's ``--admitter``; default the scheduler's
    ServiceAccount, :func:`admitter`)."""
    user = user or admitter(args)
    not_system = {"key": "kubernetes.io/metadata.name", "operator": "NotIn",
                  "values": [*SYSTEM_NAMESPACES, args.namespace]}
    not_opted_out = {"key": LABEL_QUEUE_NAME, "operator": "NotIn", "values": [OPT_OUT_VALUE]}
    # the pods of a Job the queue admitted are not called for (the webhook would only let
    # them through): one call per pod, and per pod update, saved in the API server
    not_admitted = {"key": LABEL_FLUXJOB, "operator": "DoesNotExist"}
    meta = m.metadata(name, None, m.labels(COMPONENT, name))
    if args.tls == "cert-manager":
        meta["annotations"] = {"cert-manager.io/inject-ca-from": f"{args.namespace}/{name}"}
    return {
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
        "metadata": meta,
        "webhooks": [
            _webhook(name, args, "namespace",
                     {"matchExpressions": [
                         {"key": LABEL_NAMESPACE_OPT_IN, "operator": "In",
                          "values": [NAMESPACE_OPT_IN_VALUE]}, not_system]},
                     {"matchExpressions": [not_opted_out, not_admitted]}, ca_bundle, user),
            _webhook(name, args, "object",
                     {"matchExpressions": [
                         {"key": LABEL_NAMESPACE_OPT_IN, "operator": "NotIn",
                          "values": [NAMESPACE_OPT_IN_VALUE]}, not_system]},
                     {"matchExpressions": [{"key": LABEL_QUEUE_NAME, "operator": "Exists"},
                                           not_opted_out, not_admitted]}, ca_bundle, user),
        ],
    }


def _cert_manager(name: str, args: FluxQueueArgs, lbls: dict[str, str]) -> list[dict[str, Any]]:
    return [
        {"apiVersion": "cert-manager.io/v1", "kind": "Issuer",
         "metadata": m.metadata(name, args.namespace, lbls), "spec": {"selfSigned": {}}},
        {"apiVersion": "cert-manager.io/v1", "kind": "Certificate",
         "metadata": m.metadata(name, args.namespace, lbls),
         "spec": {"secretName": f"{name}-tls", "dnsNames": webhook_names(name, args),
                  "issuerRef": {"name": name, "kind": "Issuer"},
                  "privateKey": {"algorithm": "ECDSA", "size": 256}}},
    ]


def queue_manifests(name: str, args: FluxQueueArgs, ca_bundle: Any = None,
                    tls_secret: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """Everything but the generated certificate (``ca_bundle`` / ``tls_secret`` carry it)."""
    lbls = m.labels(COMPONENT, name)
    ns = args.namespace
    health = {"httpGet": {"path": "/healthz", "port": "https", "scheme": "HTTPS"}}
    admitter_user = admitter(args)
    container = {
        "name": "webhook", "image": args.image,
        "args": ["queue", "webhook", "--tls-dir", "/tls", "--port", str(args.webhook_port),
                 "--scheduler-name", args.scheduler_name, "--admitter", admitter_user],
        "ports": [{"name": "https", "containerPort": args.webhook_port, "protocol": "TCP"}],
        **m.probes(health),
        "resources": args.resources,
    }
    deployment = m.restricted_deployment(name, ns, COMPONENT, args.webhook_replicas, container,
                                         annotations={"prometheus.io/scrape": "true",
                                                      "prometheus.io/scheme": "https",
                                                      "prometheus.io/port":
                                                          str(args.webhook_port)})
    pod = deployment["spec"]["template"]["spec"]
    pod["automountServiceAccountToken"] = False  # it reads no API
    pod["volumes"].append({"name": "tls", "secret": {"secretName": f"{name}-tls",
                                                     "defaultMode": 0o400}})
    pod["containers"][0]["volumeMounts"].append({"name": "tls", "mountPath": "/tls",
                                                 "readOnly": True})
    service = {"apiVersion": "v1", "kind": "Service", "metadata": m.metadata(name, ns, lbls),
               "spec": {"type": "ClusterIP", "selector": m.selector(COMPONENT, name),
                        "ports": [{"name": "https", "port": 443, "targetPort": "https",
                                   "protocol": "TCP"}]}}
    view = {**lbls, "rbac.authorization.k8s.io/aggregate-to-view": "true"}
    edit = {**lbls, "rbac.authorization.k8s.io/aggregate-to-admin": "true",
            "rbac.authorization.k8s.io/aggregate-to-edit": "true"}
    out: list[dict[str, Any]] = [
        fluxjob_crd(lbls), fluxjobqueue_crd(lbls),
        m.service_account(name, ns, lbls),
        m.cluster_role(f"{name}-controller", controller_rules(), lbls),
        {**m.cluster_role_binding(f"{name}-controller", args.scheduler_account, ns, lbls)},
        m.cluster_role(f"{name}-view", [{"apiGroups": [GROUP],
                                         "resources": [PLURAL, QUEUE_PLURAL],
                                         "verbs": ["get", "list", "watch"]}], view),
        m.cluster_role(f"{name}-edit", [{"apiGroups": [GROUP], "resources": [QUEUE_PLURAL],
                                         "verbs": ["create", "update", "patch", "delete"]}],
                       edit),
        service, deployment,
        webhook_configuration(name, args, ca_bundle if args.tls == "generate" else None),
    ]
    out[2]["automountServiceAccountToken"] = False
    if args.webhook_replicas > 1:
        out.append(m.disruption_budget(name, ns, COMPONENT))
    if args.tls == "cert-manager":
        out += _cert_manager(name, args, lbls)
    elif tls_secret is not None:
        out.append(tls_secret)
    return out


def tls_secret(name: str, namespace: str, cert: Any, key: Any) -> dict[str, Any]:
    """The webhook's ``kubernetes.io/tls`` Secret (values may be Outputs of base64 text)."""
    return {"apiVersion": "v1", "kind": "Secret",
            "metadata": m.metadata(f"{name}-tls", namespace, m.labels(COMPONENT, name)),
            "type": "kubernetes.io/tls", "data": {"tls.crt": cert, "tls.key": key}}


# -- deploy-time certificate --------------------------------------------------------------------

def cert_outputs(names: list[str], seed: bytes | None = None, label: str = "") -> dict[str, str]:
    """A fresh CA and server certificate for ``names`` (the CA's key is thrown away)."""
    tls = make_service_tls(list(names), "unused-client", seed=seed, label=label)
    return {"ca_cert": tls.ca_cert, "server_cert": tls.server_cert,
            "server_key": tls.server_key}


class _CertsProvider(ResourceProvider):
    def create(self, props: dict[str, Any]) -> CreateResult:
        outs = {**props, **cert_outputs(list(props["names"]))}
        ident = hashlib.sha256(outs["ca_cert"].encode()).hexdigest()[:16]
        return CreateResult(id_=f"{props['label']}-{ident}", outs=outs)

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> DiffResult:
        changed = [k for k in ("label", "names") if olds.get(k) != news.get(k)]
        return DiffResult(changes=bool(changed), replaces=changed, delete_before_replace=False)


class WebhookCerts(Resource):
    """``ca_cert``, ``server_cert``, ``server_key`` (PEM; the key a secret output), made once
    per stack and kept until ``label`` or the names change (or ``pulumi up --replace``)."""

    ca_cert: pulumi.Output[str]
    server_cert: pulumi.Output[str]
    server_key: pulumi.Output[str]

    def __init__(self, name: str, label: str, names: list[str],
                 opts: pulumi.ResourceOptions | None = None):
        opts = pulumi.ResourceOptions.merge(
            opts, pulumi.ResourceOptions(additional_secret_outputs=_SECRET_OUTPUTS))
        super().__init__(_CertsProvider(), name,
                         {"label": label, "purpose": CERTS_PURPOSE, "names": list(names),
                          "ca_cert": None, "server_cert": None, "server_key": None}, opts)


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


class FluxQueue(pulumi.ComponentResource):
    """The queue's CRDs, webhook, TLS and RBAC; ``webhook`` is the webhook Service's name."""

    webhook: pulumi.Output[str]

    def __init__(self, name: str, args: FluxQueueArgs,
                 opts: pulumi.ResourceOptions | None = None):
        super().__init__("fluxinfra:k8s:FluxQueue", name, {}, opts)
        ca_bundle = secret = None
        if args.tls == "generate":
            self.certs = WebhookCerts(f"{name}-certs", label=name,
                                      names=webhook_names(name, args),
                                      opts=pulumi.ResourceOptions(parent=self))
            ca_bundle = self.certs.ca_cert.apply(_b64)
            secret = tls_secret(name, args.namespace, self.certs.server_cert.apply(_b64),
                                pulumi.Output.secret(self.certs.server_key.apply(_b64)))
        manifests = queue_manifests(name, args, ca_bundle, secret)
        hook = next(mf for mf in manifests if mf["kind"] == "MutatingWebhookConfiguration")
        manifests.remove(hook)
        self.resources = declare_all(manifests, name, self)
        # The API server calls the webhook as soon as its configuration exists: declare it only
        # once the webhook Deployment is ready (Pulumi waits for that), never before.
        self.resources[f"{name}-mutatingwebhookconfiguration"] = declare(
            hook, f"{name}-mutatingwebhookconfiguration", pulumi.ResourceOptions(
                parent=self, depends_on=[self.resources[f"{name}-deployment"]]))
        self.webhook = pulumi.Output.from_input(f"{name}.{args.namespace}.svc")
        self.register_outputs({"webhook": self.webhook})
