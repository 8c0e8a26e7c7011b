"""``KubeApiDouble``: an in-memory stand-in for the Kubernetes API server (a TEST DOUBLE).

It implements :class:`fluxinfra.scheduler.kube.KubeApi` and replays the shapes and failure modes
of the real API that the scheduler must survive:

- list returns ``(items, resourceVersion)``; watch yields ``{"type": ADDED|MODIFIED|DELETED|
  BOOKMARK|ERROR, "object": ...}`` after a given version, then ends (a watch timeout);
- after :meth:`compact`, watching from an older version yields an ``ERROR`` event whose object is
  a ``Status`` with ``code: 410`` (or raises ``ApiError(410)`` when ``gone_as_exception``);
- binding an already-bound pod is 409 Conflict, a missing pod 404, a uid mismatch 409;
- deleting a pod is a MODIFIED event (``deletionTimestamp``) and then DELETED; :meth:`terminate`
  stops after the first, as a kubelet's graceful shutdown does;
- replacing a Lease that does not exist creates it (the real Lease strategy allows that);
- :meth:`fail_next` makes the next calls of one method fail with any status (e.g. 500, 503);

Every answer (objects the server fills in, error status, reason and message) has the shape a real
v1.28 API server gives through :mod:`fluxinfra.scheduler.client`: ``api_shapes.py`` holds the
scenarios, ``recorded_api_shapes.json`` the real answers (recorded by the e2e suite) and
``test_double_shapes.py`` checks this double against them.
- every object the scheduler sends is validated against the Kubernetes schemas with
  ``kubernetes-validate`` in strict mode: the Binding, each Event, and the pod as it looks after
  a status patch. PodGroup status patches are checked against the scheduler-plugins
  CRD's status fields.
"""

from __future__ import annotations

import copy
import itertools
from collections import defaultdict
from collections.abc import Iterator
from typing import Any

import kubernetes_validate

from fluxinfra.scheduler.kube import ApiError, Kind, WatchEvent, binding

K8S_VERSION = "1.31"
#: The HTTP reason phrases the production client reports as ``ApiError.reason``.
HTTP_REASONS = {404: "Not Found", 409: "Conflict", 410: "Gone", 422: "Unprocessable Entity",
                429: "Too Many Requests", 500: "Internal Server Error",
                503: "Service Unavailable", 504: "Gateway Timeout"}
CREATED = "2026-01-01T00:00:00Z"


def api_error(status: int, message: str) -> ApiError:
    return ApiError(status, HTTP_REASONS.get(status, "Error"), message)


def conflict(resource: str, name: str, why: str) -> ApiError:
    """A 409 as the API server words an optimistic-concurrency or precondition failure."""
    return api_error(409, f'Operation cannot be fulfilled on {resource} "{name}": {why}')


def bookmark(kind: Kind, version: str) -> dict[str, Any]:
    """The object of a BOOKMARK event: an empty object of the kind, as the server serialises
    it, carrying only the version."""
    meta = {"resourceVersion": version}
    if kind == "podgroups":
        return {"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
                "metadata": meta}
    if kind == "nodes":
        return {"kind": "Node", "apiVersion": "v1",
                "metadata": {**meta, "creationTimestamp": None}, "spec": {},
                "status": {"daemonEndpoints": {"kubeletEndpoint": {"Port": 0}},
                           "nodeInfo": {k: "" for k in (
                               "machineID", "systemUUID", "bootID", "kernelVersion", "osImage",
                               "containerRuntimeVersion", "kubeletVersion", "kubeProxyVersion",
                               "operatingSystem", "architecture")}}}
    return {"kind": "Pod", "apiVersion": "v1",
            "metadata": {**meta, "creationTimestamp": None}, "spec": {"containers": None},
            "status": {}}


def with_condition_times(conditions: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Pod conditions as the server returns them: both times present, null when unset."""
    return [{"lastProbeTime": None, "lastTransitionTime": None, **c} for c in conditions]
PODGROUP_STATUS_FIELDS = {"phase", "occupiedBy", "scheduled", "running", "succeeded", "failed",
                          "scheduleStartTime"}


def validate(obj: dict[str, Any]) -> None:
    kubernetes_validate.validate(obj, K8S_VERSION, strict=True)


def make_node(name: str, cpu: str = "32", memory: str = "128Gi", gpu: int = 0,
              labels: dict[str, str] | None = None, unschedulable: bool = False,
              ready: bool = True, taints: list[dict[str, str]] | None = None,
              pods: str = "110", extra: dict[str, str] | None = None) -> dict[str, Any]:
    allocatable = {"cpu": cpu, "memory": memory, "pods": pods, **(extra or {})}
    if gpu:
        allocatable["nvidia.com/gpu"] = str(gpu)
    spec: dict[str, Any] = {"unschedulable": True} if unschedulable else {}
    if taints:
        spec["taints"] = taints
    node = {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **(labels or {})}},
        "spec": spec,
        "status": {"allocatable": allocatable, "capacity": dict(allocatable),
                   "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]},
    }
    validate(node)
    return node


def make_pod(name: str, namespace: str = "default", *, cpu: str = "1", memory: str = "1Gi",
             gpu: int = 0, scheduler: str = "fluxion", node: str = "", phase: str = "Pending",
             labels: dict[str, str] | None = None, annotations: dict[str, str] | None = None,
             priority: int | None = None, created: str = "2026-01-01T00:00:00Z",
             extra: dict[str, str] | None = None, spec: dict[str, Any] | None = None,
             ports: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """A pod; ``extra`` adds requests by resource name, ``spec`` merges into the pod spec
    (nodeSelector, affinity, tolerations, schedulingGates, topologySpreadConstraints ...)."""
    requests: dict[str, Any] = {}
    if cpu:
        requests["cpu"] = cpu
    if memory:
        requests["memory"] = memory
    if gpu:
        requests["nvidia.com/gpu"] = str(gpu)
    requests.update(extra or {})
    # as the API server insists: extended resources and hugepages have limit == request
    limits = {k: v for k, v in requests.items() if "/" in k or k.startswith("hugepages-")}
    container: dict[str, Any] = {"name": "main", "image": "busybox",
                                 "resources": {"requests": requests}}
    if limits:
        container["resources"]["limits"] = limits
    if ports:
        container["ports"] = ports
    spec = {"schedulerName": scheduler, "containers": [container], **(spec or {})}
    if node:
        spec["nodeName"] = node
    if priority is not None:
        spec["priority"] = priority
    pod = {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": labels or {},
                     "annotations": annotations or {}, "creationTimestamp": created},
        "spec": spec,
        "status": {"phase": phase},
    }
    validate(pod)
    return pod


def make_podgroup(name: str, min_member: int, namespace: str = "default", *,
                  annotations: dict[str, str] | None = None,
                  **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
            "metadata": {"name": name, "namespace": namespace,
                         "annotations": annotations or {}},
            "spec": {"minMember": min_member, **spec}, "status": {}}


class KubeApiDouble:
    """An in-memory API server for three kinds, with injectable failures. Not thread-safe."""

    def __init__(self, *, history: int = 10_000) -> None:
        self.objects: dict[Kind, dict[str, dict[str, Any]]] = defaultdict(dict)
        self.log: dict[Kind, list[tuple[int, str, dict[str, Any]]]] = defaultdict(list)
        self.rv = itertools.count(1)
        self.current_rv = 0
        self.compacted_rv = 0
        self.history = history
        self.gone_as_exception = False
        self.failures: dict[str, list[int]] = defaultdict(list)
        self.bindings: list[dict[str, Any]] = []
        self.events: list[dict[str, Any]] = []
        self.status_patches: list[tuple[str, str, dict[str, Any]]] = []
        self.podgroup_patches: list[tuple[str, str, dict[str, Any]]] = []
        self.deleted: list[str] = []
        self.calls: defaultdict[str, int] = defaultdict(int)
        self._uids = itertools.count(1)
        self.podgroups_installed = True
        self.leases: dict[str, dict[str, Any]] = {}
        #: what the double refused with 422 as the API server would (the harness asserts none)
        self.rejected: list[str] = []

    # -- test controls -----------------------------------------------------------------------
    def fail_next(self, method: str, status: int, times: int = 1) -> None:
        """The next ``times`` calls of ``method`` fail with HTTP ``status``."""
        self.failures[method].extend([status] * times)

    def compact(self) -> None:
        """Forget history: watches from any version before now get 410 Gone."""
        self.compacted_rv = self.current_rv

    def _maybe_fail(self, method: str) -> None:
        self.calls[method] += 1
        if self.failures[method]:
            status = self.failures[method].pop(0)
            raise api_error(status, f"injected failure of {method}")

    @staticmethod
    def _key(obj: dict[str, Any]) -> str:
        meta = obj["metadata"]
        return f"{meta.get('namespace', '')}/{meta['name']}"

    def _record(self, kind: Kind, etype: str, obj: dict[str, Any]) -> None:
        rv = next(self.rv)
        self.current_rv = rv
        obj["metadata"]["resourceVersion"] = str(rv)
        self.log[kind].append((rv, etype, copy.deepcopy(obj)))
        if len(self.log[kind]) > self.history:
            dropped = self.log[kind].pop(0)
            self.compacted_rv = max(self.compacted_rv, dropped[0])

    def create(self, kind: Kind, obj: dict[str, Any]) -> dict[str, Any]:
        obj = copy.deepcopy(obj)
        obj["metadata"].setdefault("uid", f"uid-{next(self._uids)}")
        obj["metadata"].setdefault("creationTimestamp", CREATED)
        key = self._key(obj)
        if key in self.objects[kind]:
            raise api_error(409, f'{kind} "{obj["metadata"]["name"]}" already exists')
        self.objects[kind][key] = obj
        self._record(kind, "ADDED", obj)
        return obj

    def update(self, kind: Kind, obj: dict[str, Any]) -> dict[str, Any]:
        obj = copy.deepcopy(obj)
        self.objects[kind][self._key(obj)] = obj
        self._record(kind, "MODIFIED", obj)
        return obj

    def delete(self, kind: Kind, key: str) -> None:
        """Delete at once. A pod is first marked (MODIFIED, ``deletionTimestamp``, grace 0), as
        the server does for a pod no kubelet runs, or one its kubelet has stopped."""
        if kind == "pods" and not self.objects[kind][key]["metadata"].get("deletionTimestamp"):
            self.terminate(key, grace=0)
        obj = self.objects[kind].pop(key)
        self._record(kind, "DELETED", obj)

    def terminate(self, key: str, grace: int = 30) -> None:
        """A graceful pod deletion: MODIFIED with ``deletionTimestamp``; the pod stays (and runs)
        until :meth:`delete`, as it does until its kubelet has stopped it."""
        pod = copy.deepcopy(self.objects["pods"][key])
        pod["metadata"]["deletionTimestamp"] = CREATED
        pod["metadata"]["deletionGracePeriodSeconds"] = grace
        self.update("pods", pod)

    def get(self, kind: Kind, key: str) -> dict[str, Any]:
        return self.objects[kind][key]

    def set_phase(self, key: str, phase: str) -> None:
        """What the kubelet does: a bound pod starts Running, then Succeeded or Failed."""
        pod = copy.deepcopy(self.objects["pods"][key])
        pod["status"]["phase"] = phase
        self.update("pods", pod)

    def bind_elsewhere(self, key: str, node: str) -> None:
        """Another scheduler (e.g. kube-scheduler) binds the pod."""
        pod = copy.deepcopy(self.objects["pods"][key])
        pod["spec"]["nodeName"] = node
        self.update("pods", pod)

    # -- KubeApi -----------------------------------------------------------------------------
    def list_objects(self, kind: Kind) -> tuple[list[dict[str, Any]], str]:
        self._maybe_fail(f"list_{kind}")
        if kind == "podgroups" and not self.podgroups_installed:
            # No CRD, no route: the server's plain-text 404 page.
            raise api_error(404, "404 page not found\n")
        items = [copy.deepcopy(o) for o in self.objects[kind].values()]
        return items, str(self.current_rv)

    def watch_objects(self, kind: Kind, resource_version: str,
                      timeout_seconds: int) -> Iterator[WatchEvent]:
        self._maybe_fail(f"watch_{kind}")
        since = int(resource_version or 0)
        if since < self.compacted_rv:
            message = f"too old resource version: {since} ({self.compacted_rv})"
            if self.gone_as_exception:
                raise api_error(410, message)
            yield {"type": "ERROR", "object": {
                "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "message": message, "reason": "Expired", "code": 410}}
            return
        for rv, etype, obj in list(self.log[kind]):
            if rv > since:
                yield {"type": etype, "object": copy.deepcopy(obj)}
        yield {"type": "BOOKMARK", "object": bookmark(kind, str(self.current_rv))}

    def _pod_with_uid(self, key: str, pod: str, uid: str) -> dict[str, Any]:
        """The stored pod; 404 when there is none, 409 when its uid is not ``uid``."""
        current = self.objects["pods"].get(key)
        if current is None:
            raise api_error(404, f'pods "{pod}" not found')
        if uid and current["metadata"]["uid"] != uid:
            raise conflict("pods", pod, (
                f"StorageError: invalid object, Code: 4, Key: /registry/pods/{key}, "
                f"ResourceVersion: 0, AdditionalErrorMsg: Precondition failed: UID in "
                f"precondition: {uid}, UID in object meta: {current['metadata']['uid']}"))
        return current

    def bind(self, namespace: str, pod: str, uid: str, node: str) -> None:
        body = binding(namespace, pod, uid, node)
        validate(body)
        self._maybe_fail("bind")
        key = f"{namespace}/{pod}"
        current = self._pod_with_uid(key, pod, uid)
        # the binding storage's own refusals (pkg/registry/core/pod/storage), all 409
        if current["metadata"].get("deletionTimestamp"):
            raise conflict("pods/binding", pod,
                           f"pod {pod} is being deleted, cannot be assigned to a host")
        if current["spec"].get("nodeName"):
            raise conflict("pods/binding", pod, f"pod {pod} is already assigned to node "
                                                f'"{current["spec"]["nodeName"]}"')
        if current["spec"].get("schedulingGates"):
            raise conflict("pods/binding", pod,
                           f"pod {pod} has non-empty .spec.schedulingGates")
        if f"/{node}" not in self.objects["nodes"]:
            # The real API server accepts it and the kubelet never shows up; we are stricter.
            raise AssertionError(f"bind of {key} to unknown node {node}")
        updated = copy.deepcopy(current)
        updated["spec"]["nodeName"] = node
        conditions = [c for c in updated["status"].get("conditions", [])
                      if c["type"] != "PodScheduled"]
        conditions.append({"type": "PodScheduled", "status": "True",
                           "lastTransitionTime": CREATED})
        updated["status"]["conditions"] = with_condition_times(conditions)
        validate(updated)
        self.bindings.append(body)
        self.update("pods", updated)

    def create_event(self, namespace: str, event: dict[str, Any]) -> None:
        validate(event)
        assert event["metadata"]["namespace"] == namespace
        self._maybe_fail("create_event")
        refused = event_refusal(event)
        if refused:
            self.rejected.append(refused)
            raise api_error(422, refused)
        self.events.append(copy.deepcopy(event))

    def patch_event(self, namespace: str, name: str, patch: dict[str, Any]) -> None:
        """A merge patch of a stored Event (the scheduler only writes its ``series``)."""
        self._maybe_fail("patch_event")
        assert set(patch) == {"series"}, f"Event patch touches {sorted(patch)}"
        stored = next((e for e in self.events if e["metadata"]["name"] == name
                       and e["metadata"]["namespace"] == namespace), None)
        if stored is None:
            raise api_error(404, f'events.events.k8s.io "{name}" not found')
        updated = {**copy.deepcopy(stored), **copy.deepcopy(patch)}
        validate(updated)
        if patch["series"]["count"] < 2:
            raise api_error(422, f'Event "{name}" is invalid: series.count: Invalid value: '
                                 f'{patch["series"]["count"]}: should be at least 2')
        stored.update(updated)

    def patch_pod_status(self, namespace: str, pod: str, patch: dict[str, Any]) -> None:
        self._maybe_fail("patch_pod_status")
        assert set(patch) == {"status"}, f"status patch touches {sorted(patch)}"
        key = f"{namespace}/{pod}"
        if key not in self.objects["pods"]:
            raise api_error(404, f'pods "{pod}" not found')
        updated = copy.deepcopy(self.objects["pods"][key])
        # Strategic merge: conditions merge by "type"; a null deletes the field, and the server
        # then shows an unset time as null again.
        conditions = {c["type"]: c for c in updated["status"].get("conditions", [])}
        for cond in patch["status"].get("conditions", []):
            merged = {**conditions.get(cond["type"], {}), **cond}
            conditions[cond["type"]] = {k: v for k, v in merged.items() if v is not None}
        updated["status"]["conditions"] = with_condition_times(list(conditions.values()))
        for k, v in patch["status"].items():
            if k == "conditions":
                continue
            if v is None:
                updated["status"].pop(k, None)  # a strategic merge patch deletes a null key
            else:
                updated["status"][k] = v
        validate(updated)
        self.status_patches.append((namespace, pod, copy.deepcopy(patch)))
        self.update("pods", updated)

    def delete_pod(self, namespace: str, pod: str, uid: str) -> None:
        """Graceful delete: the pod gets a deletionTimestamp; :meth:`kubelet_sync` (what a
        kubelet does once its containers stopped) removes it. An unbound pod goes at once."""
        self._maybe_fail("delete_pod")
        key = f"{namespace}/{pod}"
        current = self._pod_with_uid(key, pod, uid)
        self.deleted.append(key)
        if not current["spec"].get("nodeName"):
            self.delete("pods", key)
            return
        if not current["metadata"].get("deletionTimestamp"):
            self.terminate(key)

    def kubelet_sync(self) -> None:
        """Every pod marked for deletion is gone (its containers stopped)."""
        for key, pod in list(self.objects["pods"].items()):
            if pod["metadata"].get("deletionTimestamp"):
                self.delete("pods", key)

    def patch_podgroup_status(self, namespace: str, name: str, patch: dict[str, Any]) -> None:
        self._maybe_fail("patch_podgroup_status")
        assert set(patch) == {"status"}, f"podgroup patch touches {sorted(patch)}"
        unknown = set(patch["status"]) - PODGROUP_STATUS_FIELDS
        assert not unknown, f"PodGroup status has no fields {sorted(unknown)}"
        key = f"{namespace}/{name}"
        if key not in self.objects["podgroups"]:
            raise api_error(404, f'podgroups.scheduling.x-k8s.io "{name}" not found')
        updated = copy.deepcopy(self.objects["podgroups"][key])
        updated.setdefault("status", {}).update(patch["status"])
        self.podgroup_patches.append((namespace, name, copy.deepcopy(patch)))
        self.update("podgroups", updated)

    def get_lease(self, namespace: str, name: str) -> dict[str, Any] | None:
        self._maybe_fail("get_lease")
        lease = self.leases.get(f"{namespace}/{name}")
        return copy.deepcopy(lease) if lease else None

    def create_lease(self, namespace: str, lease: dict[str, Any]) -> None:
        validate(lease)
        self._maybe_fail("create_lease")
        name = lease["metadata"]["name"]
        key = f"{namespace}/{name}"
        if key in self.leases:
            raise api_error(409, f'leases.coordination.k8s.io "{name}" already exists')
        self._store_lease(key, lease, uid=f"uid-{next(self._uids)}", created=CREATED)

    def replace_lease(self, namespace: str, name: str, lease: dict[str, Any]) -> None:
        validate(lease)
        self._maybe_fail("replace_lease")
        key = f"{namespace}/{name}"
        current = self.leases.get(key)
        if current is None:
            # Leases may be created by an update (PUT), whatever resourceVersion it names.
            self._store_lease(key, lease, uid=f"uid-{next(self._uids)}", created=CREATED)
            return
        if lease["metadata"].get("resourceVersion") != current["metadata"]["resourceVersion"]:
            raise conflict("leases.coordination.k8s.io", name,
                           "the object has been modified; please apply your changes to the "
                           "latest version and try again")
        self._store_lease(key, lease, uid=current["metadata"]["uid"],
                          created=current["metadata"]["creationTimestamp"])

    def _store_lease(self, key: str, lease: dict[str, Any], *, uid: str, created: str) -> None:
        stored = copy.deepcopy(lease)
        stored["metadata"].update(uid=uid, creationTimestamp=created,
                                  resourceVersion=str(next(self.rv)))
        self.leases[key] = stored


def event_refusal(event: dict[str, Any]) -> str | None:
    """Why the API server's validation (beyond the schema) refuses an ``events.k8s.io/v1``
    Event, worded as the server words it; None when it is accepted."""
    name = event["metadata"]["name"]
    if event.get("type") not in ("Normal", "Warning"):
        return (f'Event "{name}" is invalid: type: Invalid value: "": has invalid value: '
                f'{event.get("type")}')
    for field, limit in (("reportingController", 253), ("reportingInstance", 128),
                         ("action", 128), ("reason", 128)):
        value = event.get(field) or ""
        if not value:
            return f'Event "{name}" is invalid: {field}: Required value'
        if len(value) > limit:
            return (f'Event "{name}" is invalid: {field}: Too long: may not be longer than '
                    f"{limit}")
    if len(event.get("note") or "") > 1024:
        return f'Event "{name}" is invalid: note: Too long: may not be longer than 1024'
    if not event.get("eventTime"):
        return f'Event "{name}" is invalid: eventTime: Required value'
    return None
