"""Declare a plain manifest dict as the matching typed ``pulumi_kubernetes`` resource."""

from __future__ import annotations

import importlib
from typing import Any

import pulumi

__all__ = ["declare"]

# Top-level manifest keys and the keyword the typed resource takes for them.
_ARG_NAMES = {"metadata": "metadata", "spec": "spec", "data": "data", "binaryData": "binary_data",
              "stringData": "string_data", "type": "type", "immutable": "immutable",
              "rules": "rules", "roleRef": "role_ref", "subjects": "subjects",
              "automountServiceAccountToken": "automount_service_account_token",
              "aggregationRule": "aggregation_rule", "webhooks": "webhooks",
              "value": "value", "globalDefault": "global_default",
              "preemptionPolicy": "preemption_policy", "description": "description"}


def _resource_class(api_version: str, kind: str) -> type:
    group, _, version = api_version.rpartition("/")
    group = group.split(".")[0] or "core"
    module = importlib.import_module(f"pulumi_kubernetes.{group}.{version}")
    return getattr(module, kind)


def _builtin(api_version: str) -> bool:
    group = api_version.rpartition("/")[0]
    return group == "" or "." not in group or group.endswith(".k8s.io")


def declare(manifest: dict[str, Any], resource_name: str,
            opts: pulumi.ResourceOptions) -> pulumi.CustomResource:
    """``manifest`` (apiVersion, kind, ...; values may be Outputs) -> the typed resource, or a
    ``CustomResource`` for kinds of other API groups (FluxJobQueues, cert-manager's)."""
    if not _builtin(manifest["apiVersion"]):
        from pulumi_kubernetes.apiextensions import CustomResource

        rest = {k: v for k, v in manifest.items() if k not in ("apiVersion", "kind", "metadata")}
        return CustomResource(resource_name, api_version=manifest["apiVersion"],
                              kind=manifest["kind"], metadata=manifest["metadata"], opts=opts,
                              **rest)
    cls = _resource_class(manifest["apiVersion"], manifest["kind"])
    kwargs = {_ARG_NAMES[key]: value for key, value in manifest.items()
              if key not in ("apiVersion", "kind")}
    return cls(resource_name, opts=opts, **kwargs)


_WORKLOADS = {"Deployment", "DaemonSet", "StatefulSet", "Job"}


def declare_all(manifests: list[dict[str, Any]], name: str, parent: pulumi.Resource,
                workload_timeouts: pulumi.CustomTimeouts | None = None,
                ) -> dict[str, pulumi.CustomResource]:
    """Declare a component's manifests as its children, in apply order.

    Children are named ``<component>-<kind>`` (``<component>-<kind>-<object name>`` when the
    component has several of a kind). Everything waits for the component's Namespace and CRDs;
    workloads also wait for the config, RBAC and Secrets they mount or use, and get
    ``workload_timeouts`` (how long ``pulumi up`` waits for them to be ready or complete).
    """
    kinds = [mf["kind"] for mf in manifests]
    declared: dict[str, pulumi.CustomResource] = {}
    first: list[pulumi.Resource] = []
    config: list[pulumi.Resource] = []
    for mf in sorted(manifests, key=lambda mf: mf["kind"] in _WORKLOADS):
        kind = mf["kind"]
        child = f"{name}-{kind.lower()}"
        if kinds.count(kind) > 1:
            child += f"-{mf['metadata']['name']}"
        deps = first + config if kind in _WORKLOADS else list(first)
        timeouts = workload_timeouts if kind in _WORKLOADS else None
        res = declare(mf, child, pulumi.ResourceOptions(parent=parent, depends_on=deps,
                                                        custom_timeouts=timeouts))
        declared[child] = res
        if kind in ("Namespace", "CustomResourceDefinition"):
            first.append(res)
        elif kind not in _WORKLOADS:
            config.append(res)
    return declared
