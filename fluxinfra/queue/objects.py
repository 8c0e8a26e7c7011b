"""Type checks for the objects the queue controller reads: Jobs, FluxJobs, FluxJobQueues and
PriorityClasses (gated pods are checked as every pod is, :func:`fluxinfra.scheduler.pods.
check_pod`).

The API server holds only what its schemas let through, but a CRD's schema can be loosened,
an object written by another version, or a watch served by something else; the controller
runs on whatever arrives. :func:`problem` says what in an object the controller cannot read
(one sentence naming the object, the field, the value and the fix) or ``""``; the controller
skips such an object with a log line and an Event, and goes on with the rest.

>>> problem("jobs", "ADDED", {"metadata": {"name": "a", "namespace": "ns", "uid": "u"},
...                           "spec": {"parallelism": "2"}})
"Job ns/a: spec.parallelism: '2' is a string; give a whole number"
>>> problem("jobs", "DELETED", {"metadata": {"name": "a", "namespace": "ns", "uid": "u"},
...                             "spec": {"parallelism": "2"}})
''
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fluxinfra.kube import shapes
from fluxinfra.kube.fluxjob import API_VERSION
from fluxinfra.scheduler.pods import PodSpecError, check_pod, object_identity

__all__ = ["API_VERSIONS", "KINDS", "identity", "pod_problem", "problem"]

#: the kind names the runner uses -> how a message names one
KINDS = {"jobs": "Job", "fluxjobs": "FluxJob", "fluxjobqueues": "FluxJobQueue",
         "priorityclasses": "PriorityClass"}
API_VERSIONS = {"jobs": "batch/v1", "fluxjobs": API_VERSION, "fluxjobqueues": API_VERSION,
                "priorityclasses": "scheduling.k8s.io/v1"}
#: int32, as the API's counts and priorities are
_INT32 = 2**31 - 1


def identity(kind: str, obj: Any) -> tuple[str, str, str]:
    """``(namespace, name, uid)``; raises :class:`PodSpecError` when they cannot be read."""
    if kind == "priorityclasses":
        meta = obj.get("metadata") if isinstance(obj, Mapping) else None
        try:
            name = shapes.string(shapes.mapping(meta, "PriorityClass: metadata").get("name"),
                                 "PriorityClass: metadata.name", required=True)
        except shapes.ShapeError as exc:
            raise PodSpecError(str(exc)) from None
        return "", name, ""
    return object_identity(obj, KINDS[kind])


def problem(kind: str, etype: str, obj: Any) -> str:
    """What the controller cannot read in ``obj`` (a sentence), or ``""``. A deletion needs
    only the object's name (and uid)."""
    try:
        namespace, name, _ = identity(kind, obj)
        if etype == "DELETED":
            return ""
        at = f"{KINDS[kind]} {namespace + '/' if namespace else ''}{name}"
        _CHECKS[kind](obj, at)
    except (PodSpecError, shapes.ShapeError) as exc:
        return str(exc)
    return ""


def pod_problem(pod: Any) -> str:
    """What the queue cannot read of a pod, or ``""``: the fields it routes a pod by (uid,
    owners, labels, scheduling gates, phase), and what :func:`check_pod` reads (its requests,
    which a gated pod's FluxJob is made from before the core sees the pod)."""
    try:
        namespace, name, _ = object_identity(pod, "pod")
        at = f"pod {namespace}/{name}"
        meta = pod["metadata"]
        shapes.string_map(meta.get("labels"), f"{at}: metadata.labels")
        for i, owner in enumerate(shapes.mappings(meta.get("ownerReferences"),
                                                  f"{at}: metadata.ownerReferences")):
            shapes.string(owner.get("kind"), f"{at}: metadata.ownerReferences[{i}].kind")
            shapes.string(owner.get("uid"), f"{at}: metadata.ownerReferences[{i}].uid")
        spec = shapes.mapping(pod.get("spec"), f"{at}: spec")
        shapes.mappings(spec.get("schedulingGates"), f"{at}: spec.schedulingGates")
        shapes.string(shapes.mapping(pod.get("status"), f"{at}: status").get("phase"),
                      f"{at}: status.phase")
        check_pod(pod)
    except (PodSpecError, shapes.ShapeError) as exc:
        return str(exc)
    return ""


def _labels(meta: Mapping[str, Any], at: str) -> None:
    shapes.string_map(meta.get("labels"), f"{at}: metadata.labels")
    shapes.string_map(meta.get("annotations"), f"{at}: metadata.annotations")


def _check_job(job: Mapping[str, Any], at: str) -> None:
    meta = job["metadata"]
    shapes.string(meta.get("uid"), f"{at}: metadata.uid", required=True)
    _labels(meta, at)
    for i, owner in enumerate(shapes.mappings(meta.get("ownerReferences"),
                                              f"{at}: metadata.ownerReferences")):
        where = f"{at}: metadata.ownerReferences[{i}]"
        shapes.string(owner.get("kind"), f"{where}.kind")
        shapes.string(owner.get("uid"), f"{where}.uid")
        shapes.boolean(owner.get("controller"), f"{where}.controller")
    spec = shapes.mapping(job.get("spec"), f"{at}: spec")
    for key in ("parallelism", "completions"):
        shapes.integer(spec.get(key), f"{at}: spec.{key}", low=0, high=_INT32)
    shapes.boolean(spec.get("suspend"), f"{at}: spec.suspend")
    template = shapes.mapping(spec.get("template"), f"{at}: spec.template")
    tmeta = shapes.mapping(template.get("metadata"), f"{at}: spec.template.metadata")
    tspec = shapes.mapping(template.get("spec"), f"{at}: spec.template.spec")
    try:
        # the queue makes its slot pods from the template: read as a pod is
        check_pod({"metadata": dict(tmeta), "spec": dict(tspec)})
    except PodSpecError as exc:
        raise shapes.ShapeError(f"{at}: spec.template.{exc}") from None
    status = shapes.mapping(job.get("status"), f"{at}: status")
    shapes.integer(status.get("succeeded"), f"{at}: status.succeeded", low=0)
    for i, cond in enumerate(shapes.mappings(status.get("conditions"),
                                             f"{at}: status.conditions")):
        for key in ("type", "status", "reason"):
            shapes.string(cond.get(key), f"{at}: status.conditions[{i}].{key}")


def _check_fluxjob(obj: Mapping[str, Any], at: str) -> None:
    meta = obj["metadata"]
    _labels(meta, at)
    shapes.string(meta.get("creationTimestamp"), f"{at}: metadata.creationTimestamp")
    spec = shapes.mapping(obj.get("spec"), f"{at}: spec")
    owner = shapes.mapping(spec.get("owner"), f"{at}: spec.owner")
    for key in ("kind", "uid", "name"):
        shapes.string(owner.get(key), f"{at}: spec.owner.{key}")
    for i, pod_set in enumerate(shapes.mappings(spec.get("podSets"), f"{at}: spec.podSets")):
        where = f"{at}: spec.podSets[{i}]"
        shapes.integer(pod_set.get("count"), f"{where}.count", low=0, high=_INT32)
        shapes.quantity_map(pod_set.get("requests"), f"{where}.requests")
    for key in ("queueName", "queuedAt"):
        shapes.string(spec.get(key), f"{at}: spec.{key}")
    shapes.integer(spec.get("priority"), f"{at}: spec.priority", low=-_INT32 - 1, high=_INT32)
    shapes.integer(spec.get("duration"), f"{at}: spec.duration", low=0)
    status = shapes.mapping(obj.get("status"), f"{at}: status")
    for key in ("state", "reason", "message", "estimatedStart"):
        shapes.string(status.get(key), f"{at}: status.{key}")
    shapes.string_list(status.get("nodes"), f"{at}: status.nodes")


def _check_fluxjobqueue(obj: Mapping[str, Any], at: str) -> None:
    spec = shapes.mapping(obj.get("spec"), f"{at}: spec")
    for key in ("maxRunning", "maxGPUs"):
        shapes.integer(spec.get(key), f"{at}: spec.{key}", low=0)
    for key, resource in (("maxCores", "cpu"), ("maxMemory", "memory")):
        if spec.get(key) is not None:
            shapes.quantity(spec[key], f"{at}: spec.{key}", resource)


def _check_priorityclass(obj: Mapping[str, Any], at: str) -> None:
    shapes.integer(obj.get("value"), f"{at}: value", low=-_INT32 - 1, high=_INT32)


_CHECKS = {"jobs": _check_job, "fluxjobs": _check_fluxjob,
           "fluxjobqueues": _check_fluxjobqueue, "priorityclasses": _check_priorityclass}
