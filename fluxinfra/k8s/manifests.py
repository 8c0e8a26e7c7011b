"""Plain-dict builders shared by the components: metadata, RBAC, Pod Security, templates.

Everything here returns Kubernetes API objects as ordinary dicts (camelCase, as ``kubectl`` wants
them), so the component modules stay short and the tests need no Pulumi.
"""

from __future__ import annotations

import base64
import functools
from typing import Any

import jinja2

from fluxinfra import __version__

__all__ = [
    "MANAGED_BY",
    "DEFAULT_IMAGE",
    "DEFAULT_NAMESPACE",
    "labels",
    "metadata",
    "namespace",
    "service_account",
    "cluster_role",
    "cluster_role_binding",
    "role",
    "role_binding",
    "secret",
    "restricted_container_security",
    "restricted_pod_security",
    "restricted_deployment",
    "disruption_budget",
    "render_template",
    "image_ref",
]

MANAGED_BY = "fluxinfra"
#: The image the service, the scheduler and the installer run (built from Containerfile by
#: ``make image``; podman names a local image ``localhost/<name>``, and so must the pods).
DEFAULT_IMAGE = f"localhost/fluxinfra:{__version__}"
#: Namespace of the service and the scheduler unless the stack names another.
DEFAULT_NAMESPACE = "fluxinfra-system"
Manifest = dict[str, Any]


def labels(component: str, instance: str) -> dict[str, str]:
    """The recommended app.kubernetes.io labels; the first two select pods."""
    return {
        "app.kubernetes.io/name": component,
        "app.kubernetes.io/instance": instance,
        "app.kubernetes.io/part-of": "fluxinfra",
        "app.kubernetes.io/managed-by": MANAGED_BY,
    }


def selector(component: str, instance: str) -> dict[str, str]:
    return {k: v for k, v in labels(component, instance).items()
            if k in ("app.kubernetes.io/name", "app.kubernetes.io/instance")}


def metadata(name: str, namespace: str | None, lbls: dict[str, str], **extra: Any) -> Manifest:
    meta: Manifest = {"name": name, "labels": dict(lbls)}
    if namespace is not None:
        meta["namespace"] = namespace
    meta.update(extra)
    return meta


def namespace(name: str, pod_security: str, lbls: dict[str, str]) -> Manifest:
    """A Namespace whose Pod Security admission level is enforced, audited and warned alike."""
    ps = {f"pod-security.kubernetes.io/{mode}": pod_security for mode in ("enforce", "audit",
                                                                            "warn")}
    ps.update({f"pod-security.kubernetes.io/{mode}-version": "latest"
               for mode in ("enforce", "audit", "warn")})
    return {"apiVersion": "v1", "kind": "Namespace",
            "metadata": metadata(name, None, {**lbls, **ps})}


def service_account(name: str, ns: str, lbls: dict[str, str]) -> Manifest:
    return {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": metadata(name, ns, lbls),
            "automountServiceAccountToken": True}


def cluster_role(name: str, rules: list[Manifest], lbls: dict[str, str]) -> Manifest:
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": metadata(name, None, lbls), "rules": rules}


def role(name: str, ns: str, rules: list[Manifest], lbls: dict[str, str]) -> Manifest:
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": metadata(name, ns, lbls), "rules": rules}


def _binding(kind: str, name: str, ns: str | None, role_kind: str, sa: str, sa_ns: str,
             lbls: dict[str, str]) -> Manifest:
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": kind,
            "metadata": metadata(name, ns, lbls),
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": role_kind, "name": name},
            "subjects": [{"kind": "ServiceAccount", "name": sa, "namespace": sa_ns}]}


def cluster_role_binding(name: str, sa: str, sa_ns: str, lbls: dict[str, str]) -> Manifest:
    """Binds the ClusterRole of the same name to one ServiceAccount."""
    return _binding("ClusterRoleBinding", name, None, "ClusterRole", sa, sa_ns, lbls)


def role_binding(name: str, ns: str, sa: str, lbls: dict[str, str]) -> Manifest:
    """Binds the Role of the same name to one ServiceAccount of that namespace."""
    return _binding("RoleBinding", name, ns, "Role", sa, ns, lbls)


def secret(name: str, ns: str, files: dict[str, bytes | str], lbls: dict[str, str]) -> Manifest:
    """An Opaque Secret; file contents base64-encoded under ``data``."""
    data = {key: base64.b64encode(val.encode() if isinstance(val, str) else val).decode()
            for key, val in files.items()}
    return {"apiVersion": "v1", "kind": "Secret", "metadata": metadata(name, ns, lbls),
            "type": "Opaque", "data": data}


def restricted_container_security() -> Manifest:
    """What the ``restricted`` Pod Security level asks of every container, and a read-only root."""
    return {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
            "runAsNonRoot": True, "capabilities": {"drop": ["ALL"]},
            "seccompProfile": {"type": "RuntimeDefault"}}


#: The fluxinfra image's user (Containerfile: uid/gid 10001), numeric so runAsNonRoot can check.
IMAGE_UID = 10001


def restricted_pod_security() -> Manifest:
    return {"runAsNonRoot": True, "runAsUser": IMAGE_UID, "runAsGroup": IMAGE_UID,
            "fsGroup": IMAGE_UID, "seccompProfile": {"type": "RuntimeDefault"}}


def probes(handler: Manifest) -> dict[str, Manifest]:
    """Readiness and liveness probes on ``handler`` (an ``httpGet`` or ``grpc`` check) with the
    settings kubeadm gives kube-scheduler and the controller-manager: a check answered slowly
    on a busy node takes a pod out of its Service, and only one that fails for 80 s restarts
    it (Kubernetes' defaults, 1 s and 3 failures, restart a healthy controller under CPU
    pressure and lose what it held in memory)."""
    return {"readinessProbe": {**handler, "periodSeconds": 5, "timeoutSeconds": 5,
                               "failureThreshold": 3},
            "livenessProbe": {**handler, "periodSeconds": 10, "timeoutSeconds": 15,
                              "failureThreshold": 8}}


def restricted_deployment(name: str, ns: str, component: str, replicas: int,
                          container: Manifest, annotations: dict[str, str] | None = None
                          ) -> Manifest:
    """A Deployment of one restricted container running as ServiceAccount ``name``."""
    lbls = labels(component, name)
    template_meta: Manifest = {"labels": lbls}
    if annotations:
        template_meta["annotations"] = annotations
    # The root filesystem is read-only; /tmp is a small scratch emptyDir.
    container = {"imagePullPolicy": "IfNotPresent", **container,
                 "securityContext": restricted_container_security(),
                 "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}]}
    pod: Manifest = {
        "serviceAccountName": name,
        "securityContext": restricted_pod_security(),
        "containers": [container],
        "volumes": [{"name": "tmp", "emptyDir": {"sizeLimit": "64Mi"}}],
    }
    if replicas > 1:  # spread replicas over nodes, so one node going away leaves the others
        pod["topologySpreadConstraints"] = [{
            "maxSkew": 1, "topologyKey": "kubernetes.io/hostname",
            "whenUnsatisfiable": "ScheduleAnyway",
            "labelSelector": {"matchLabels": selector(component, name)}}]
    return {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": metadata(name, ns, lbls),
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": selector(component, name)},
            "template": {"metadata": template_meta, "spec": pod},
        },
    }


def disruption_budget(name: str, ns: str, component: str) -> Manifest:
    """Keep one replica through voluntary disruptions (node drains)."""
    return {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": metadata(name, ns, labels(component, name)),
            "spec": {"minAvailable": 1,
                     "selector": {"matchLabels": selector(component, name)}}}


@functools.cache
def _environment() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.PackageLoader("fluxinfra", "templates"),
        undefined=jinja2.StrictUndefined, keep_trailing_newline=True, autoescape=False,
        trim_blocks=True, lstrip_blocks=True)


def render_template(template: str, **context: Any) -> str:
    """Render ``fluxinfra/templates/<name>`` (undefined variables are errors, not blanks)."""
    return _environment().get_template(template).render(**context)


def image_ref(repository: str, tag: str, digest: str = "") -> str:
    """``repo:tag`` or ``repo:tag@sha256:...`` (the digest wins at pull time, the tag documents)."""
    ref = f"{repository}:{tag}" if tag else repository
    return f"{ref}@{digest}" if digest else ref
