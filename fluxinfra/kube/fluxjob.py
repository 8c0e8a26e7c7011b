"""The queue's API: labels, annotations, the FluxJob and FluxJobQueue custom resources.

A leaf module (standard library only), kept with the other Kubernetes objects rather than in
:mod:`fluxinfra.queue`: the queue's controller, webhook and CLI and the Pulumi component that
installs the CRDs (:mod:`fluxinfra.k8s.queue`) all read the same definitions from here, and
the component never imports the queue.

Opting in (the admission webhook only sees what opted in):

``fluxinfra.io/queue: enabled`` (namespace label)
    every batch Job and pod created in the namespace is queued;
``fluxinfra.io/queue-name: NAME`` (label on a Job or pod)
    queue this object (in any namespace but the system ones) in the namespace's queue NAME
    (default ``default``); ``none`` opts an object out of an enabled namespace.

A **FluxJob** (``queue.fluxinfra.io/v1alpha1``) is one unit of admitted work: a batch Job (its
``parallelism`` pods, admitted together), a group of gated pods (a PodGroup's members or a
``fluxinfra.io/group`` label group), or one gated pod. Its ``status.state`` is one of
:data:`STATES`; ``status.reason`` and ``status.message`` say why, ``status.estimatedStart`` when
Fluxion has reserved its resources for later, ``status.nodes`` where its pods go (one entry per
pod, in slot order).

A **FluxJobQueue** (same group) names a namespace's queue and its limits: how many FluxJobs may
be admitted at once and how many cores, bytes of memory and GPUs they may request together.
Without one, the ``default`` queue has no limits.

>>> fluxjob_name("Job", "train")
'job-train'
>>> fluxjob_crd()["spec"]["names"]["shortNames"]
['fj', 'fjs']
"""

from __future__ import annotations

import hashlib
from typing import Any

__all__ = [
    "ANNOT_ADMITTED_NODES",
    "CONDITION_TYPES",
    "GATE",
    "GROUP",
    "KIND",
    "LABEL_FLUXJOB",
    "LABEL_NAMESPACE_OPT_IN",
    "LABEL_QUEUE_NAME",
    "NAMESPACE_OPT_IN_VALUE",
    "OPT_OUT_VALUE",
    "PLURAL",
    "QUEUE_KIND",
    "QUEUE_PLURAL",
    "STATES",
    "VERSION",
    "API_VERSION",
    "DEFAULT_QUEUE",
    "fluxjob_crd",
    "fluxjob_name",
    "fluxjobqueue_crd",
    "fluxjob_object",
]

GROUP = "queue.fluxinfra.io"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "FluxJob"
PLURAL = "fluxjobs"
QUEUE_KIND = "FluxJobQueue"
QUEUE_PLURAL = "fluxjobqueues"

LABEL_NAMESPACE_OPT_IN = "fluxinfra.io/queue"
NAMESPACE_OPT_IN_VALUE = "enabled"
LABEL_QUEUE_NAME = "fluxinfra.io/queue-name"
OPT_OUT_VALUE = "none"
DEFAULT_QUEUE = "default"
#: The scheduling gate on queued pods (a qualified name, as Kubernetes asks of gates).
GATE = "fluxinfra.io/queue"
#: On an admitted Job's pod template: the FluxJob its pods belong to.
LABEL_FLUXJOB = "fluxinfra.io/fluxjob"
#: On an admitted Job, written together with ``suspend: false``: one node per pod slot, the
#: durable record of the admission (a restarted controller reads it back).
ANNOT_ADMITTED_NODES = "fluxinfra.io/admitted-nodes"

#: A FluxJob's states, in the order work moves through them.
STATES = ("Queued", "Reserved", "Admitted", "Running", "Finished", "Failed")
CONDITION_TYPES = STATES

_NAME_LIMIT = 253


def fluxjob_name(kind: str, name: str) -> str:
    """``<kind>-<name>`` in lower case; names too long for Kubernetes get a hash suffix."""
    full = f"{kind.lower()}-{name}"
    if len(full) <= _NAME_LIMIT:
        return full
    digest = hashlib.sha256(full.encode()).hexdigest()[:10]
    return f"{full[:_NAME_LIMIT - 11]}-{digest}"


def fluxjob_object(namespace: str, name: str, *, owners: list[dict[str, Any]],
                   queue: str, pod_sets: list[dict[str, Any]], priority: int, duration: int,
                   jobspec: str, queued_at: str) -> dict[str, Any]:
    """A FluxJob as the controller creates it (no status: the status subresource sets that).

    ``owners`` are ownerReferences (the Job, the PodGroup, or the pods), so the garbage
    collector deletes the FluxJob with its work; ``pod_sets`` are ``{name, count, requests}``;
    ``queued_at`` (microseconds, unlike ``creationTimestamp``) is its place in FCFS order.
    """
    return {
        "apiVersion": API_VERSION, "kind": KIND,
        "metadata": {"name": name, "namespace": namespace, "ownerReferences": owners,
                     "labels": {LABEL_QUEUE_NAME: queue}},
        "spec": {"queueName": queue, "podSets": pod_sets, "priority": priority,
                 "duration": duration, "jobspec": jobspec, "queuedAt": queued_at},
    }


# -- CRDs ----------------------------------------------------------------------------------------

_QUANTITY = {"anyOf": [{"type": "integer"}, {"type": "string"}],
             "x-kubernetes-int-or-string": True,
             "pattern": r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|"
                        r"([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"}
_TIME = {"type": "string", "format": "date-time"}


def _crd(kind: str, plural: str, short: list[str], spec: dict[str, Any], status: dict[str, Any],
         columns: list[dict[str, Any]], labels: dict[str, str] | None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": f"{plural}.{GROUP}"}
    if labels:
        meta["labels"] = dict(labels)
    return {
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": meta,
        "spec": {
            "group": GROUP,
            "names": {"kind": kind, "listKind": f"{kind}List", "plural": plural,
                      "singular": kind.lower(), "shortNames": short,
                      "categories": ["fluxinfra"]},
            "scope": "Namespaced",
            "versions": [{
                "name": VERSION, "served": True, "storage": True,
                "subresources": {"status": {}},
                "additionalPrinterColumns": columns,
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "apiVersion": {"type": "string"}, "kind": {"type": "string"},
                    "metadata": {"type": "object"}, "spec": spec, "status": status}}},
            }],
        },
    }


def fluxjob_crd(labels: dict[str, str] | None = None) -> dict[str, Any]:
    """The FluxJob CRD: a structural schema, the status subresource, printer columns."""
    owner = {"type": "object", "required": ["kind", "name"], "properties": {
        "apiVersion": {"type": "string"}, "kind": {"type": "string"},
        "name": {"type": "string"}, "uid": {"type": "string"}}}
    pod_set = {"type": "object", "required": ["name", "count"], "properties": {
        "name": {"type": "string", "description": "The Job's pods, or one gated pod."},
        "count": {"type": "integer", "format": "int32", "minimum": 0,
                  "description": "Pods admitted together (a Job's parallelism)."},
        "requests": {"type": "object", "additionalProperties": _QUANTITY,
                     "description": "What one pod requests (the Kubernetes rule: containers, "
                                    "sidecars, init containers, overhead)."}}}
    spec = {"type": "object", "required": ["queueName", "podSets"], "properties": {
        "queueName": {"type": "string", "description": "The namespace's queue (FluxJobQueue)."},
        "owner": owner,
        "podSets": {"type": "array", "items": pod_set, "minItems": 1},
        "priority": {"type": "integer", "format": "int32",
                     "description": "From the pods' PriorityClass: higher goes first."},
        "duration": {"type": "integer", "format": "int64", "minimum": 1,
                     "description": "Expected runtime in seconds (fluxinfra.io/duration): "
                                    "what Fluxion reserves and backfills with."},
        "jobspec": {"type": "string",
                    "description": "The jobspec Fluxion matches (the scheduler's conversion)."},
        "queuedAt": {**_TIME, "description": "When the work was queued (FCFS order, to the "
                                             "microsecond)."},
    }}
    status = {"type": "object", "properties": {
        "state": {"type": "string", "enum": list(STATES)},
        "reason": {"type": "string"},
        "message": {"type": "string"},
        "estimatedStart": {**_TIME, "description": "Reserved: when Fluxion expects to start it."},
        "nodes": {"type": "array", "items": {"type": "string"},
                  "description": "One node per pod, in slot order."},
        "queuedAt": _TIME, "admittedAt": _TIME, "startedAt": _TIME, "finishedAt": _TIME,
        "lastTransitionTime": _TIME,
    }}
    columns = [
        {"name": "State", "type": "string", "jsonPath": ".status.state"},
        {"name": "Queue", "type": "string", "jsonPath": ".spec.queueName"},
        {"name": "Pods", "type": "integer", "jsonPath": ".spec.podSets[0].count"},
        {"name": "Start", "type": "date", "jsonPath": ".status.estimatedStart",
         "description": "Estimated start (Reserved)."},
        {"name": "Reason", "type": "string", "jsonPath": ".status.reason"},
        {"name": "Nodes", "type": "string", "jsonPath": ".status.nodes", "priority": 1},
        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    ]
    return _crd(KIND, PLURAL, ["fj", "fjs"], spec, status, columns, labels)


def fluxjobqueue_crd(labels: dict[str, str] | None = None) -> dict[str, Any]:
    """The FluxJobQueue CRD: one namespace's queue and its limits."""
    limit = {"type": "integer", "format": "int64", "minimum": 0}
    spec = {"type": "object", "properties": {
        "maxRunning": {**limit, "description": "FluxJobs admitted at once (unset: no limit)."},
        "maxCores": {**_QUANTITY, "description": "CPU the admitted FluxJobs request together "
                                                 "(a quantity: 64, 500m)."},
        "maxMemory": {**_QUANTITY, "description": "Memory they request together (256Gi)."},
        "maxGPUs": {**limit, "description": "GPUs they request together."},
    }}
    status = {"type": "object", "properties": {
        "pending": {"type": "integer", "format": "int32"},
        "admitted": {"type": "integer", "format": "int32"},
        "usedCores": {"type": "string"}, "usedMemory": {"type": "string"},
        "usedGPUs": {"type": "integer", "format": "int64"},
    }}
    columns = [
        {"name": "Pending", "type": "integer", "jsonPath": ".status.pending"},
        {"name": "Admitted", "type": "integer", "jsonPath": ".status.admitted"},
        {"name": "MaxRunning", "type": "integer", "jsonPath": ".spec.maxRunning"},
        {"name": "MaxCores", "type": "string", "jsonPath": ".spec.maxCores"},
        {"name": "MaxGPUs", "type": "integer", "jsonPath": ".spec.maxGPUs"},
        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    ]
    return _crd(QUEUE_KIND, QUEUE_PLURAL, ["fjq"], spec, status, columns, labels)
