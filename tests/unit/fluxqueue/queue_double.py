"""``QueueApiDouble``: the scheduler's API double plus what the queue uses (a TEST DOUBLE).

On top of :class:`KubeApiDouble` (nodes, pods, PodGroups, binds, Events, Leases) it keeps batch
Jobs, FluxJobs, FluxJobQueues and PriorityClasses, with the API server's rules the queue must
live with:

- a FluxJob is checked against the CRD's own structural schema (``fluxjob_crd()``, with
  ``jsonschema``); on create its status is dropped (the status subresource owns it), and a
  status merge patch touches nothing else;
- a Job merge patch may change the pod template only while the Job is suspended and has never
  started, and then only its scheduling directives, labels and annotations (the rule of
  ``JobMutableNodeSchedulingDirectives``); the result is validated with kubernetes-validate;
- a pod JSON patch may remove scheduling gates but not add them; a failed ``test`` is 422;
  binding a pod that still has gates is 409 (``pods/binding``'s check);
- :meth:`run_job_controller` does what kube-controller-manager's Job controller does: an
  un-suspended Job gets pods from its template (owned by the Job, labelled with its uid), up to
  ``min(parallelism, completions - succeeded)`` active; finished pods are counted into the
  Job's status and ``Complete`` is set when enough succeeded.

The e2e suite runs the same scenarios against a real API server and controller-manager.
"""

from __future__ import annotations

import copy
import itertools
import threading
from typing import Any

import jsonschema
from scheduler.kube_double import KubeApiDouble, validate

from fluxinfra.kube.fluxjob import fluxjob_crd, fluxjobqueue_crd
from fluxinfra.scheduler.kube import ApiError

from .jsonpatch import PatchError, apply_patch

_MUTABLE_TEMPLATE_SPEC = {"affinity", "nodeSelector", "tolerations", "schedulingGates",
                          "schedulerName"}


def _schema(crd: dict[str, Any]) -> dict[str, Any]:
    return crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


FLUXJOB_SCHEMA = _schema(fluxjob_crd())
QUEUE_SCHEMA = _schema(fluxjobqueue_crd())


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out


class QueueApiDouble(KubeApiDouble):
    """The scheduler's double plus the queue's kinds; safe to call from several threads (the
    queue makes its writes from a pool), as the API server is."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        # one write at a time: resourceVersions handed out and logged in order, so a watch
        # never skips an event that a slower writer logged after a faster one's
        self._lock = threading.RLock()
        self._names = itertools.count(1)
        self.job_patches: list[tuple[str, str, dict[str, Any]]] = []
        self.pod_patches: list[tuple[str, str, list[dict[str, Any]]]] = []
        self.clock_text = "2026-01-01T00:00:00Z"

    # -- helpers for tests -------------------------------------------------------------------
    def create_job(self, job: dict[str, Any]) -> dict[str, Any]:
        validate(job)
        job = copy.deepcopy(job)
        job["metadata"].setdefault("creationTimestamp", self.clock_text)
        job.setdefault("status", {})
        return self.create("jobs", job)  # type: ignore[arg-type]

    def create_pod(self, pod: dict[str, Any]) -> dict[str, Any]:
        validate(pod)
        return self.create("pods", pod)

    # -- the queue's API ---------------------------------------------------------------------
    def create_fluxjob(self, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        self._maybe_fail("create_fluxjob")
        jsonschema.validate(body, FLUXJOB_SCHEMA)
        assert body["metadata"]["namespace"] == namespace
        body = copy.deepcopy(body)
        body.pop("status", None)
        body["metadata"]["creationTimestamp"] = self.clock_text
        return copy.deepcopy(self.create("fluxjobs", body))  # type: ignore[arg-type]

    def _status_patch(self, kind: str, namespace: str, name: str, status: dict[str, Any],
                      schema: dict[str, Any]) -> None:
        self._maybe_fail(f"patch_{kind}_status")
        key = f"{namespace}/{name}"
        current = self.objects[kind].get(key)  # type: ignore[index]
        if current is None:
            raise ApiError(404, "NotFound", f"{kind} {key} not found")
        updated = merge_patch(current, {"status": status})
        jsonschema.validate(updated, schema)
        self.update(kind, updated)  # type: ignore[arg-type]

    def patch_fluxjob_status(self, namespace: str, name: str, status: dict[str, Any]) -> None:
        self._status_patch("fluxjobs", namespace, name, status, FLUXJOB_SCHEMA)

    def patch_fluxjobqueue_status(self, namespace: str, name: str,
                                  status: dict[str, Any]) -> None:
        self._status_patch("fluxjobqueues", namespace, name, status, QUEUE_SCHEMA)

    def patch_job(self, namespace: str, name: str, patch: dict[str, Any]) -> None:
        self._maybe_fail("patch_job")
        key = f"{namespace}/{name}"
        current = self.objects["jobs"].get(key)  # type: ignore[index]
        if current is None:
            raise ApiError(404, "NotFound", f'jobs.batch "{name}" not found')
        updated = merge_patch(current, patch)
        old_t, new_t = current["spec"]["template"], updated["spec"]["template"]
        if old_t != new_t:
            started = bool(current.get("status", {}).get("startTime"))
            changed = {k for k in set(old_t["spec"]) | set(new_t["spec"])
                       if old_t["spec"].get(k) != new_t["spec"].get(k)}
            if not current["spec"].get("suspend") or started or \
                    not changed <= _MUTABLE_TEMPLATE_SPEC:
                raise ApiError(422, "Invalid", f"spec.template: field is immutable ({changed})")
        _check_node_fields(updated["spec"]["template"]["spec"])
        validate(updated)
        self.job_patches.append((namespace, name, copy.deepcopy(patch)))
        self.update("jobs", updated)  # type: ignore[arg-type]

    def patch_pod(self, namespace: str, name: str, ops: list[dict[str, Any]]) -> None:
        self._maybe_fail("patch_pod")
        key = f"{namespace}/{name}"
        current = self.objects["pods"].get(key)
        if current is None:
            raise ApiError(404, "NotFound", f'pods "{name}" not found')
        try:
            updated = apply_patch(current, ops)
        except PatchError as exc:
            raise ApiError(422, "Invalid", str(exc)) from None
        old_gates = [g["name"] for g in current["spec"].get("schedulingGates") or []]
        new_gates = [g["name"] for g in updated["spec"].get("schedulingGates") or []]
        if not set(new_gates) <= set(old_gates):
            raise ApiError(422, "Invalid", "spec.schedulingGates: gates may only be removed")
        validate(updated)
        self.pod_patches.append((namespace, name, copy.deepcopy(ops)))
        self.update("pods", updated)

    def bind(self, namespace: str, pod: str, uid: str, node: str) -> None:
        current = self.objects["pods"].get(f"{namespace}/{pod}")
        if current is not None and current["spec"].get("schedulingGates"):
            raise ApiError(409, "Conflict", f"Operation cannot be fulfilled on pods/binding "
                           f'"{pod}": pod {pod} has non-empty .spec.schedulingGates')
        super().bind(namespace, pod, uid, node)

    def _record(self, kind: Any, etype: str, obj: dict[str, Any]) -> None:
        with self._lock:
            super()._record(kind, etype, obj)

    def delete_fluxjob(self, namespace: str, name: str) -> None:
        self.delete("fluxjobs", f"{namespace}/{name}")  # type: ignore[arg-type]

    # -- kube-controller-manager's Job controller ----------------------------------------------
    def run_job_controller(self) -> None:
        for job in list(self.objects["jobs"].values()):  # type: ignore[index]
            if job["spec"].get("suspend") or _done(job):
                continue
            uid = job["metadata"]["uid"]
            pods = [p for p in self.objects["pods"].values()
                    if any(o.get("uid") == uid for o in p["metadata"].get("ownerReferences")
                           or [])]
            active = [p for p in pods if p["status"].get("phase") not in ("Succeeded",
                                                                            "Failed")]
            succeeded = sum(1 for p in pods if p["status"].get("phase") == "Succeeded")
            failed = sum(1 for p in pods if p["status"].get("phase") == "Failed")
            spec = job["spec"]
            parallelism = spec.get("parallelism", 1)
            completions = spec.get("completions")
            want = parallelism if completions is None else min(parallelism,
                                                               completions - succeeded)
            if completions is None and succeeded:
                want = 0
            for _ in range(max(0, want - len(active))):
                self._make_pod(job)
            status = dict(job.get("status") or {})
            status.update(active=len(active), succeeded=succeeded, failed=failed)
            status.setdefault("startTime", self.clock_text)
            if (completions is not None and succeeded >= completions) or \
                    (completions is None and succeeded and not active):
                status["conditions"] = [{"type": "Complete", "status": "True"}]
                status["completionTime"] = self.clock_text
            if status != job.get("status"):
                updated = copy.deepcopy(job)
                updated["status"] = status
                self.update("jobs", updated)  # type: ignore[arg-type]

    def _make_pod(self, job: dict[str, Any]) -> dict[str, Any]:
        meta, template = job["metadata"], job["spec"]["template"]
        labels = {**(template.get("metadata") or {}).get("labels", {}),
                  "batch.kubernetes.io/controller-uid": meta["uid"],
                  "batch.kubernetes.io/job-name": meta["name"]}
        pod = {"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": f"{meta['name']}-{next(self._names):05d}",
                            "namespace": meta["namespace"], "labels": labels,
                            "annotations": dict((template.get("metadata") or {}).get(
                                "annotations") or {}),
                            "creationTimestamp": self.clock_text,
                            "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job",
                                                 "name": meta["name"], "uid": meta["uid"],
                                                 "controller": True,
                                                 "blockOwnerDeletion": True}]},
               "spec": copy.deepcopy(template["spec"]), "status": {"phase": "Pending"}}
        return self.create_pod(pod)


def _check_node_fields(spec: dict[str, Any]) -> None:
    """The API server's rule the schemas do not carry (seen on the real one): a node field
    selector requirement with In / NotIn takes exactly one value."""
    required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution") or {}
    for i, term in enumerate(required.get("nodeSelectorTerms") or []):
        for j, req in enumerate(term.get("matchFields") or []):
            if req.get("operator") in ("In", "NotIn") and len(req.get("values") or []) != 1:
                raise ApiError(422, "Invalid", f"nodeSelectorTerms[{i}].matchFields[{j}]."
                               "values: Required value: must be only one value when "
                               "`operator` is 'In' or 'NotIn' for node field selector")


def _done(job: dict[str, Any]) -> bool:
    return any(c.get("type") in ("Complete", "Failed") and c.get("status") == "True"
               for c in (job.get("status") or {}).get("conditions") or [])


def _one_at_a_time(method: Any) -> Any:
    def locked(self: QueueApiDouble, *args: Any, **kwargs: Any) -> Any:
        with self._lock:
            return method(self, *args, **kwargs)

    locked.__name__ = method.__name__
    locked.__doc__ = method.__doc__
    return locked


for _name in ("create_fluxjob", "patch_fluxjob_status", "patch_fluxjobqueue_status", "patch_job",
              "patch_pod", "bind", "create_event"):
    setattr(QueueApiDouble, _name, _one_at_a_time(getattr(QueueApiDouble, _name)))
