"""Hollow nodes: Node objects with whatever capacity, labels and taints a test needs, and no
kubelet behind them (kube-scheduler's integration tests and kubemark do the same).

The keeper also plays the part of their kubelet for pods (as kubemark's hollow kubelet does with
a fake runtime): a pod bound to a hollow node is reported Running at once (conditions and
container statuses as a kubelet writes them), then ``Succeeded`` after the seconds in its
annotation ``fluxinfra.io/hollow-run-seconds`` (no annotation: it runs until deleted); a pod
being deleted from a hollow node is finished at once (grace period 0), as its kubelet would
confirm. So Deployments become available, Jobs complete and gangs finish on hollow nodes.

The node-lifecycle controller marks a node ``Ready=Unknown`` and taints it
``node.kubernetes.io/unreachable`` when its kubelet stops renewing the node's Lease for
``--node-monitor-grace-period`` (40 s by default), then evicts its pods. The bed keeps
hollow nodes alive the way a kubelet does: the **keeper** (``python -m kubebed.hollow STATE``, one
process per bed) renews each hollow node's Lease in ``kube-node-lease`` every ``interval``
seconds, so the controller stays enabled and treats hollow and real nodes alike; and, as a
kubelet's status update does, it reports a node of its own Ready again when the controller
marked it Unknown (a Lease that could not be renewed while the API server was away). A test
that wants a node to die stops renewing it (:func:`remove` with ``delete=False``) or patches
its status, and watches the real controller react.

For many hundreds of nodes (benchmarks), start the bed with a longer
``node_monitor_grace`` and the keeper renews less often (a quarter of the grace period).
A scheduler benchmark also starts it with leases only (``--leases-only``; ``Bed.up(...,
hollow_kubelet=False)``), as kube-scheduler's own benchmark (scheduler_perf) runs no kubelet:
bound pods stay Pending, and no status write of a kubelet lands on the API server while a
scheduler's writes are being timed.

>>> node = node_object("h1", cpu="8", memory="16Gi", labels={"zone": "a"})
>>> node["status"]["allocatable"]["cpu"], node["metadata"]["labels"]["zone"]
('8', 'a')
"""

from __future__ import annotations

import contextlib
import datetime
import heapq
import json
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

from .rest import ApiStatus, Rest

__all__ = ["HOLLOW_LABEL", "RUN_SECONDS", "HollowKubelet", "add", "healthy_conditions",
           "keeper_main", "lease_object", "node_object", "remove", "revive", "running_status",
           "succeeded_status"]

#: Every hollow node carries this label (value ``hollow``; the real node's is ``real``).
HOLLOW_LABEL = "fluxinfra.io/bed-node"
LEASE_NS = "kube-node-lease"
#: How long a pod on a hollow node runs before it succeeds (seconds; absent: until deleted).
RUN_SECONDS = "fluxinfra.io/hollow-run-seconds"


def _now(micro: bool = False) -> str:
    now = datetime.datetime.now(datetime.UTC)
    if micro:
        return now.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return now.strftime("%Y-%m-%dT%H:%M:%SZ")


def node_object(name: str, *, cpu: str = "32", memory: str = "128Gi", pods: str = "110",
                ephemeral_storage: str = "100Gi", extended: dict[str, str] | None = None,
                labels: dict[str, str] | None = None,
                taints: list[dict[str, str]] | None = None,
                unschedulable: bool = False) -> dict[str, Any]:
    """A v1 Node as a kubelet would register it, Ready, with the given capacity.

    ``extended`` adds resources such as ``{"nvidia.com/gpu": "4"}``; ``taints`` are v1 Taints
    (``{"key", "value", "effect"}``)."""
    capacity = {"cpu": cpu, "memory": memory, "pods": pods,
                "ephemeral-storage": ephemeral_storage, **(extended or {})}
    spec: dict[str, Any] = {}
    if taints:
        spec["taints"] = taints
    if unschedulable:
        spec["unschedulable"] = True
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {
            "kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64", HOLLOW_LABEL: "hollow", **(labels or {})}},
        "spec": spec,
        "status": {
            "capacity": capacity, "allocatable": dict(capacity),
            "conditions": healthy_conditions(),
            "addresses": [{"type": "Hostname", "address": name}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 0}},
            "nodeInfo": {"machineID": "", "systemUUID": "", "bootID": "",
                         "kernelVersion": "hollow", "osImage": "hollow",
                         "containerRuntimeVersion": "hollow://0", "kubeletVersion": "v1.28.7",
                         "kubeProxyVersion": "", "operatingSystem": "linux",
                         "architecture": "amd64"},
        },
    }


def healthy_conditions() -> list[dict[str, str]]:
    """The conditions a healthy kubelet reports for its node, as of now."""
    now = _now()
    return [{"type": kind, "status": status, "reason": reason, "message": "hollow node",
             "lastHeartbeatTime": now, "lastTransitionTime": now}
            for kind, status, reason in (("MemoryPressure", "False", "KubeletHasSufficientMemory"),
                                         ("DiskPressure", "False", "KubeletHasNoDiskPressure"),
                                         ("PIDPressure", "False", "KubeletHasSufficientPID"),
                                         ("Ready", "True", "KubeletReady"))]


def revive(rest: Rest, names: set[str]) -> list[str]:
    """Report healthy again, as a kubelet's next status update does, each node of ``names``
    whose ``Ready`` is not True: the node-lifecycle controller sets it Unknown (and taints the
    node unreachable) when the Lease was not renewed in time, e.g. while the API server was
    away, and only the kubelet's own status turns it back. Returns the nodes revived."""
    listed = rest.get(f"/api/v1/nodes?labelSelector={HOLLOW_LABEL}%3Dhollow")
    revived = []
    for node in listed.get("items", []):
        name = node["metadata"]["name"]
        ready = next((c for c in node.get("status", {}).get("conditions") or []
                      if c.get("type") == "Ready"), {})
        if name in names and ready.get("status") != "True":
            rest.patch(f"/api/v1/nodes/{name}/status",
                       {"status": {"conditions": healthy_conditions()}}, "strategic-merge")
            revived.append(name)
    return revived


def lease_object(node: dict[str, Any], duration: int) -> dict[str, Any]:
    """The Lease a kubelet keeps for its node, owned by the Node (deleted with it)."""
    name = node["metadata"]["name"]
    return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": name, "namespace": LEASE_NS, "ownerReferences": [{
                "apiVersion": "v1", "kind": "Node", "name": name,
                "uid": node["metadata"]["uid"]}]},
            "spec": {"holderIdentity": name, "leaseDurationSeconds": duration,
                     "renewTime": _now(micro=True)}}


def _roster(state: Path) -> Path:
    return state / "hollow.json"


def _read_roster(state: Path) -> dict[str, Any]:
    try:
        return json.loads(_roster(state).read_text())
    except (OSError, ValueError):
        return {"nodes": [], "interval": 10, "lease_seconds": 40}


def _write_roster(state: Path, roster: dict[str, Any]) -> None:
    tmp = _roster(state).with_suffix(".tmp")
    tmp.write_text(json.dumps(roster, indent=1))
    tmp.replace(_roster(state))


def add(rest: Rest, state: Path, nodes: list[dict[str, Any]], *, grace: int) -> list[str]:
    """Create ``nodes`` (from :func:`node_object`) with their Leases and hand them to the
    keeper; returns their names."""
    roster = _read_roster(state)
    roster["lease_seconds"] = grace
    roster["interval"] = max(1, grace // 4)
    names = []
    for node in nodes:
        created = rest.post("/api/v1/nodes", node)  # a Node's status is kept on create
        rest.post(f"/apis/coordination.k8s.io/v1/namespaces/{LEASE_NS}/leases",
                  lease_object(created, grace))
        names.append(node["metadata"]["name"])
    roster["nodes"] = sorted(set(roster["nodes"]) | set(names))
    _write_roster(state, roster)
    return names


def remove(rest: Rest, state: Path, names: list[str], *, delete: bool = True) -> None:
    """Stop renewing ``names``; with ``delete`` also delete the Nodes (their Leases go with
    them, by owner reference)."""
    roster = _read_roster(state)
    roster["nodes"] = sorted(set(roster["nodes"]) - set(names))
    _write_roster(state, roster)
    if delete:
        for name in names:
            with contextlib.suppress(ApiStatus):
                rest.delete(f"/api/v1/nodes/{name}")


def renew(rest: Rest, name: str, duration: int) -> None:
    path = f"/apis/coordination.k8s.io/v1/namespaces/{LEASE_NS}/leases/{name}"
    body = {"spec": {"holderIdentity": name, "leaseDurationSeconds": duration,
                     "renewTime": _now(micro=True)}}
    try:
        rest.patch(path, body)
    except ApiStatus as err:
        if err.code != 404:
            raise
        node = rest.get(f"/api/v1/nodes/{name}")
        rest.post(f"/apis/coordination.k8s.io/v1/namespaces/{LEASE_NS}/leases",
                  lease_object(node, duration))


def _condition(kind: str, status: str, now: str, reason: str | None = None) -> dict[str, Any]:
    cond = {"type": kind, "status": status, "lastProbeTime": None, "lastTransitionTime": now}
    if reason:
        cond["reason"] = reason
    return cond


def running_status(pod: dict[str, Any], now: str) -> dict[str, Any]:
    """The status patch a kubelet writes once every container of ``pod`` runs."""
    uid = pod["metadata"]["uid"]
    return {"status": {
        "phase": "Running", "startTime": now,
        "conditions": [_condition(k, "True", now) for k in
                       ("Initialized", "Ready", "ContainersReady", "PodScheduled")],
        "containerStatuses": [{
            "name": c["name"], "image": c["image"], "imageID": "",
            "containerID": f"hollow://{uid}/{c['name']}", "ready": True, "started": True,
            "restartCount": 0, "state": {"running": {"startedAt": now}}}
            for c in pod["spec"]["containers"]],
    }}


def succeeded_status(pod: dict[str, Any], now: str) -> dict[str, Any]:
    """The status patch a kubelet writes when every container exited 0."""
    started = pod.get("status", {}).get("startTime") or now
    return {"status": {
        "phase": "Succeeded",
        "conditions": [_condition("Ready", "False", now, "PodCompleted"),
                       _condition("ContainersReady", "False", now, "PodCompleted")],
        "containerStatuses": [{
            "name": c["name"], "ready": False, "started": False,
            "state": {"running": None, "terminated": {
                "exitCode": 0, "reason": "Completed", "startedAt": started,
                "finishedAt": now}}}
            for c in pod["spec"]["containers"]],
    }}


class HollowKubelet:
    """Runs (in name only) the pods bound to the roster's hollow nodes; see the module
    docstring. ``nodes()`` returns the current roster."""

    def __init__(self, rest: Rest, nodes, log=print) -> None:
        self.rest = rest
        self.nodes = nodes
        self.log = log
        self.due: list[tuple[float, str, str, str]] = []  # (when, namespace, name, uid)
        self.lock = threading.Condition()

    def handle(self, pod: dict[str, Any]) -> None:
        meta, spec = pod["metadata"], pod["spec"]
        if spec.get("nodeName") not in self.nodes():
            return
        path = f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}"
        phase = pod.get("status", {}).get("phase")
        if meta.get("deletionTimestamp"):
            with contextlib.suppress(ApiStatus):
                self.rest.delete(path, {"gracePeriodSeconds": 0,
                                        "preconditions": {"uid": meta["uid"]}})
            return
        if phase in ("Succeeded", "Failed"):
            return
        if phase != "Running":
            self.rest.patch(f"{path}/status", running_status(pod, _now()), "strategic-merge")
        seconds = meta.get("annotations", {}).get(RUN_SECONDS)
        if seconds is not None:
            try:
                when = time.time() + max(0.0, float(seconds))
            except ValueError:
                self.log(f"hollow kubelet: {meta['namespace']}/{meta['name']}: {RUN_SECONDS}="
                         f"{seconds!r} is not a number of seconds; it runs until deleted")
                return
            with self.lock:
                heapq.heappush(self.due, (when, meta["namespace"], meta["name"], meta["uid"]))
                self.lock.notify()

    def finish_due(self, stop: threading.Event) -> None:
        """Mark pods Succeeded as their run time ends (a thread's loop)."""
        while not stop.is_set():
            with self.lock:
                wait = (self.due[0][0] - time.time()) if self.due else 1.0
                if wait > 0:
                    self.lock.wait(min(wait, 1.0))
                    continue
                _, namespace, name, uid = heapq.heappop(self.due)
            path = f"/api/v1/namespaces/{namespace}/pods/{name}"
            try:
                pod = self.rest.get(path)
                if pod["metadata"]["uid"] == uid and pod["status"].get("phase") == "Running":
                    self.rest.patch(f"{path}/status", succeeded_status(pod, _now()),
                                    "strategic-merge")
            except (ApiStatus, OSError) as err:
                self.log(f"hollow kubelet: finishing {namespace}/{name}: {err}")

    def watch_pods(self, stop: threading.Event) -> None:
        """List, then watch, every pod; relist when the watch expires (a thread's loop)."""
        version = ""
        while not stop.is_set():
            try:
                if not version:
                    listing = self.rest.get("/api/v1/pods")
                    for pod in listing["items"]:
                        self.handle(pod)
                    version = listing["metadata"]["resourceVersion"]
                for event in self.rest.watch(f"/api/v1/pods?watch=1&resourceVersion={version}"
                                             "&allowWatchBookmarks=true&timeoutSeconds=60", 60):
                    obj = event["object"]
                    if event["type"] == "ERROR":
                        version = ""  # expired: relist
                        break
                    version = obj["metadata"].get("resourceVersion", version)
                    if event["type"] in ("ADDED", "MODIFIED"):
                        self.handle(obj)
            except (ApiStatus, OSError, ValueError) as err:
                self.log(f"hollow kubelet: {err}; relisting")
                version = ""
                stop.wait(1.0)


class _RosterNames:
    """The roster's node names, re-read only when the file changed (asked once per pod
    event). Every write replaces the file, so its inode, times and size together tell a new
    roster from the one read (a time alone can repeat within a clock tick)."""

    def __init__(self, state: Path) -> None:
        self.path = _roster(state)
        self.stamp: tuple[int, ...] | None = None
        self.names: set[str] = set()

    def __call__(self) -> set[str]:
        try:
            st = self.path.stat()
        except OSError:
            return set()
        stamp = (st.st_ino, st.st_mtime_ns, st.st_ctime_ns, st.st_size)
        if stamp != self.stamp:
            self.names = set(_read_roster(self.path.parent)["nodes"])
            self.stamp = stamp
        return self.names


def keeper_main(argv: list[str]) -> int:
    """``python -m kubebed.hollow STATE_DIR [--leases-only]``: renew the Leases of the nodes
    listed in ``STATE_DIR/hollow.json`` until SIGTERM, and play their kubelet for pods (not
    with ``--leases-only``); SIGHUP re-reads the list at once."""
    state = Path(argv[0])
    leases_only = "--leases-only" in argv[1:]
    bed = json.loads((state / "bed.json").read_text())
    pki, layout = bed["pki"], bed["layout"]
    rest = Rest(f"https://{layout['node_ip']}:{layout['ports']['apiserver']}", pki["ca"],
                pki["admin"], pki["admin_key"], timeout=10)
    wake = threading.Event()
    stop = threading.Event()
    signal.signal(signal.SIGHUP, lambda *_: wake.set())
    signal.signal(signal.SIGTERM, lambda *_: (stop.set(), wake.set()))

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)
    if not leases_only:
        kubelet = HollowKubelet(rest, _RosterNames(state), log)
        for loop in (kubelet.watch_pods, kubelet.finish_due):
            threading.Thread(target=loop, args=(stop,), daemon=True).start()
    while not stop.is_set():
        roster = _read_roster(state)
        started = time.monotonic()
        for name in roster["nodes"]:
            if stop.is_set():
                break
            try:
                renew(rest, name, roster["lease_seconds"])
            except (ApiStatus, OSError) as err:
                rest.close()
                print(f"keeper: renewing {name}: {err}", file=sys.stderr, flush=True)
        try:
            for name in revive(rest, set(roster["nodes"])):
                print(f"keeper: {name} reported Ready again", file=sys.stderr, flush=True)
        except (ApiStatus, OSError) as err:
            rest.close()
            print(f"keeper: node status: {err}", file=sys.stderr, flush=True)
        took = time.monotonic() - started
        wake.wait(max(0.0, roster["interval"] - took))
        wake.clear()
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(keeper_main(sys.argv[1:]))
