"""What the Kubernetes API answers to each call the scheduler makes, reduced to comparable shapes.

:func:`observe` drives any :class:`~fluxinfra.scheduler.kube.KubeApi` through the same scenarios
(list, watch events, BOOKMARK, 410 Gone, Binding and its 404/409s, Events and a 422, status
patches, PodGroups with and without their CRD, Leases and their 404/409s) and returns, per
scenario, the shape of what came back: key structure instead of values, error status + reason +
message with names and numbers masked. ``tests/e2e/test_api_shapes.py`` runs it against a real
API server (through the production client) and against :class:`KubeApiDouble` side by side, and
records the real answers in ``recorded_api_shapes.json``; ``test_double_shapes.py`` checks the
double against that file on every unit-test run, so the two cannot drift apart unnoticed.

A :class:`World` sets the scene (nodes, pods, the PodGroup CRD), since creating objects is not
part of ``KubeApi``.
"""

from __future__ import annotations

import copy
import json
import re
import threading
import time
from pathlib import Path
from typing import Any, Protocol

from fluxinfra.scheduler.events import pod_event, scheduled_condition_patch
from fluxinfra.scheduler.kube import ApiError, KubeApi

from .kube_double import KubeApiDouble, make_node, make_pod, make_podgroup

__all__ = ["KNOWN_DIFFERENCES", "RECORDING", "DoubleWorld", "World", "differences", "observe",
           "shape"]

RECORDING = Path(__file__).with_name("recorded_api_shapes.json")

#: Where the double answers differently from a real API server on purpose, and why.
KNOWN_DIFFERENCES = {
    "bind_unknown_node": "the double refuses a bind to a node it does not hold, so a scheduler "
                         "bug fails the test at once; a real API server accepts the Binding and "
                         "the pod then waits for a kubelet that never comes",
}

#: Metadata the API server fills in; which of them an object carries is part of its shape.
SERVER_METADATA = ("uid", "resourceVersion", "creationTimestamp", "deletionTimestamp",
                   "deletionGracePeriodSeconds", "generation")
NODE = "shapes-node"
POD, OTHER_POD, GHOST = "shapes-pod", "shapes-other", "ghost"
PODGROUP, LEASE = "shapes-group", "shapes-lease"
UID_RE = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}|uid-\d+")


class World(Protocol):
    """Sets the scene for :func:`observe` in a real cluster or in the double."""

    namespace: str

    def add_node(self, name: str) -> None: ...
    def add_pod(self, name: str) -> dict[str, Any]: ...
    def label_pod(self, name: str, labels: dict[str, str]) -> None: ...
    def delete_pod(self, name: str) -> None: ...
    def read_pod(self, name: str) -> dict[str, Any]: ...
    def install_podgroups(self) -> None: ...
    def add_podgroup(self, name: str) -> None: ...
    def read_podgroup(self, name: str) -> dict[str, Any]: ...
    def expired_version(self) -> str: ...


def shape(value: Any) -> Any:
    """Structure without values: dicts by key, lists by their first element, scalars by type."""
    if isinstance(value, dict):
        return {k: shape(v) for k, v in sorted(value.items()) if k != "managedFields"}
    if isinstance(value, list):
        return [shape(value[0])] if value else []
    if value is None:
        return None
    return type(value).__name__


def _mask(text: str, namespace: str) -> str:
    text = UID_RE.sub("<uid>", text.replace(namespace, "<ns>"))
    return re.sub(r"\d+", "<n>", text)


def _error(call, namespace: str) -> Any:
    """The masked ApiError a call raises, or ``"accepted"``."""
    try:
        call()
    except ApiError as err:
        return {"status": err.status, "reason": err.reason,
                "message": _mask(err.message, namespace)}
    return "accepted"


def _server_metadata(obj: dict[str, Any]) -> list[str]:
    return [k for k in SERVER_METADATA if k in obj.get("metadata", {})]


def _watch(api: KubeApi, kind: str, version: str, seconds: int,
           during=None) -> list[dict[str, Any]]:
    """Every event of one watch call; ``during`` runs (in this thread) while the watch is open."""
    events: list[dict[str, Any]] = []
    failure: list[BaseException] = []

    def read() -> None:
        try:
            events.extend(api.watch_objects(kind, version, seconds))
        except ApiError as err:
            failure.append(err)
    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    if during is not None:
        time.sleep(0.5)
        during()
    reader.join(seconds + 30)
    if failure:
        raise failure[0]
    return events


def _pod_events(events: list[dict[str, Any]], namespace: str) -> list[dict[str, Any]]:
    return [e for e in events if e["type"] in ("ADDED", "MODIFIED", "DELETED")
            and e["object"]["metadata"].get("namespace") == namespace]


def _lease(namespace: str, holder: str, version: str | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": LEASE, "namespace": namespace}
    if version:
        meta["resourceVersion"] = version
    return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": meta,
            "spec": {"holderIdentity": holder, "leaseDurationSeconds": 15,
                     "renewTime": "2026-01-01T00:00:00.123456Z"}}


def observe(api: KubeApi, world: World) -> dict[str, Any]:
    """Run every scenario; returns ``{scenario: shape}`` (JSON-serialisable)."""
    ns = world.namespace
    seen: dict[str, Any] = {}
    items, version = api.list_objects("pods")
    seen["list"] = {"items": type(items).__name__, "resourceVersion": version.isdigit()}

    # watch: a pod created, labelled, deleted (an unbound pod goes at once, grace 0)
    world.add_pod(POD)
    world.label_pod(POD, {"shapes": "yes"})
    world.delete_pod(POD)
    lifecycle = _pod_events(_watch(api, "pods", version, 3), ns)
    seen["watch_lifecycle"] = [[e["type"], _server_metadata(e["object"])] for e in lifecycle]

    seen["bookmark"] = _bookmark(api, "pods", lambda: world.add_pod(OTHER_POD))
    seen["bookmark_nodes"] = _bookmark(api, "nodes", lambda: world.add_node(NODE))

    # Binding
    pod = world.add_pod(POD)
    uid = pod["metadata"]["uid"]
    seen["bind"] = _error(lambda: api.bind(ns, POD, uid, NODE), ns)
    bound = world.read_pod(POD)
    seen["bound_pod"] = {"nodeName": bound["spec"].get("nodeName") == NODE,
                         "conditions": shape(bound["status"].get("conditions"))}
    seen["bind_again"] = _error(lambda: api.bind(ns, POD, uid, NODE), ns)
    seen["bind_missing"] = _error(lambda: api.bind(ns, GHOST, "", NODE), ns)
    stale = "00000000-0000-0000-0000-000000000000"
    seen["bind_stale_uid"] = _error(lambda: api.bind(ns, OTHER_POD, stale, NODE), ns)
    seen["bind_unknown_node"] = _bind_unknown_node(api, world, ns)

    # Events and pod status
    event = pod_event(ns, OTHER_POD, "", "FailedScheduling", "no node fits", "fluxion",
                      "fluxion-shapes", now=1767225600.25)
    seen["event"] = _error(lambda: api.create_event(ns, event), ns)
    bad = dict(event, type="Loud", metadata={"name": "shapes-bad-event", "namespace": ns})
    seen["event_invalid"] = _error(lambda: api.create_event(ns, bad), ns)
    patch = scheduled_condition_patch("Unschedulable", "no node fits", now=1767225600)
    seen["patch_status"] = _error(lambda: api.patch_pod_status(ns, OTHER_POD, patch), ns)
    seen["patched_conditions"] = shape(world.read_pod(OTHER_POD)["status"].get("conditions"))
    seen["patch_status_missing"] = _error(lambda: api.patch_pod_status(ns, GHOST, patch), ns)

    # PodGroups: without the CRD, then with it
    seen["podgroups_without_crd"] = _error(lambda: api.list_objects("podgroups"), ns)
    world.install_podgroups()
    seen["bookmark_podgroups"] = _bookmark(api, "podgroups",
                                           lambda: world.add_podgroup(PODGROUP))
    pg_patch = {"status": {"phase": "Scheduled", "scheduled": 2}}
    seen["patch_podgroup"] = _error(
        lambda: api.patch_podgroup_status(ns, PODGROUP, pg_patch), ns)
    seen["patched_podgroup_status"] = shape(world.read_podgroup(PODGROUP).get("status"))
    seen["patch_podgroup_missing"] = _error(
        lambda: api.patch_podgroup_status(ns, GHOST, pg_patch), ns)
    seen["expired"] = _expired(api, world, ns)

    # Leases (leader election)
    seen["lease_missing"] = api.get_lease(ns, LEASE)
    seen["lease_create"] = _error(lambda: api.create_lease(ns, _lease(ns, "a")), ns)
    lease = api.get_lease(ns, LEASE) or {}
    seen["lease"] = {"metadata": _server_metadata(lease), "spec": shape(lease.get("spec"))}
    seen["lease_create_again"] = _error(lambda: api.create_lease(ns, _lease(ns, "b")), ns)
    seen["lease_replace_stale"] = _error(
        lambda: api.replace_lease(ns, LEASE, _lease(ns, "b", "1")), ns)
    current = lease.get("metadata", {}).get("resourceVersion", "")
    seen["lease_replace"] = _error(
        lambda: api.replace_lease(ns, LEASE, _lease(ns, "b", current)), ns)
    renewed = (api.get_lease(ns, LEASE) or {}).get("metadata", {}).get("resourceVersion")
    seen["lease_replace_moves_version"] = renewed != current
    ghost = dict(_lease(ns, "b", "1"), metadata={"name": GHOST, "namespace": ns,
                                                 "resourceVersion": "1"})
    seen["lease_replace_missing"] = _error(lambda: api.replace_lease(ns, GHOST, ghost), ns)
    return json.loads(json.dumps(seen))


def _bookmark(api: KubeApi, kind: str, change) -> Any:
    """The BOOKMARK of one watch: a real server sends one two seconds before the watch ends,
    once it has seen an event no older than this watcher's version; ``change`` (made while the
    watch is open) makes sure it has."""
    _, version = api.list_objects(kind)
    events = _watch(api, kind, version, 5, during=change)
    marks = [e["object"] for e in events if e["type"] == "BOOKMARK"]
    if not marks:
        return "none"
    return {"object": shape(marks[-1]),
            "version_is_digits": marks[-1]["metadata"]["resourceVersion"].isdigit()}


def _bind_unknown_node(api: KubeApi, world: World, ns: str) -> Any:
    pod = world.add_pod("shapes-nowhere")
    try:
        return _error(lambda: api.bind(ns, "shapes-nowhere", pod["metadata"]["uid"],
                                       "no-such-node"), ns)
    except AssertionError:
        return "refused by the double"


def _expired(api: KubeApi, world: World, ns: str) -> Any:
    """Watching from a version the server no longer holds: an ERROR event carrying a 410
    Status, or ApiError(410)."""
    version = world.expired_version()
    try:
        events = _watch(api, "podgroups", version, 3)
    except ApiError as err:
        return {"raised": err.status}
    first = events[0] if events else {}
    obj = first.get("object", {})
    return {"type": first.get("type"), "object": shape(obj), "code": obj.get("code"),
            "reason": obj.get("reason"), "message": _mask(obj.get("message", ""), ns)}


class DoubleWorld:
    """The scene of :func:`observe` inside a :class:`KubeApiDouble`."""

    namespace = "double-ns"

    def __init__(self, api: KubeApiDouble) -> None:
        self.api = api
        api.podgroups_installed = False

    def add_node(self, name: str) -> None:
        self.api.create("nodes", make_node(name))

    def add_pod(self, name: str) -> dict[str, Any]:
        pod = make_pod(name, self.namespace, scheduler="shapes-nobody")
        return self.api.create("pods", pod)

    def label_pod(self, name: str, labels: dict[str, str]) -> None:
        pod = copy.deepcopy(self.read_pod(name))
        pod["metadata"]["labels"] = labels
        self.api.update("pods", pod)

    def delete_pod(self, name: str) -> None:
        self.api.delete("pods", f"{self.namespace}/{name}")

    def read_pod(self, name: str) -> dict[str, Any]:
        return self.api.get("pods", f"{self.namespace}/{name}")

    def install_podgroups(self) -> None:
        self.api.podgroups_installed = True

    def add_podgroup(self, name: str) -> None:
        self.api.create("podgroups", make_podgroup(name, 2, self.namespace))

    def read_podgroup(self, name: str) -> dict[str, Any]:
        return self.api.get("podgroups", f"{self.namespace}/{name}")

    def expired_version(self) -> str:
        self.api.compact()
        return "1"


def differences(double: dict[str, Any], real: dict[str, Any]) -> list[str]:
    """Scenarios where the double's shape differs from the real one, except the
    :data:`KNOWN_DIFFERENCES`; one line each, both sides shown."""
    out = []
    for key in sorted(set(double) | set(real)):
        if key in KNOWN_DIFFERENCES:
            continue
        if double.get(key) != real.get(key):
            out.append(f"{key}: double {json.dumps(double.get(key), sort_keys=True)} "
                       f"!= real {json.dumps(real.get(key), sort_keys=True)}")
    return out
