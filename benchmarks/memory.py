"""Memory benchmark: peak RSS of the scheduler process and of the Fluxion service.

    .venv/bin/python benchmarks/run.py memory              # 5,000 nodes, 10,000 pods
    .venv/bin/python benchmarks/run.py memory --quick      # 500 nodes, 1,000 pods

What the Deployments' memory requests and limits are set from (docs/scheduler.md). Unlike
``benchmarks/scheduler.py`` (the scheduler core alone, fed minimal pod dicts), each scenario here
holds a whole process's state, in a subprocess of its own so its peak RSS (``ru_maxrss``) is its
own:

* ``scheduler``  the real ``Runner``, ``SchedulerCore``, ``FluxionAllocator`` (matcher in
  process) and ``KubeBinder`` over an in-memory ``KubeApi`` serving N Node and M Pod objects
  shaped as the API server sends them (labels, annotations, ``managedFields``,
  ``ownerReferences``, the projected service-account volume, tolerations, conditions, container
  statuses; nodes with their image lists), as paginated JSON pages parsed with ``json.loads`` and
  stripped page by page, as ``ClientKubeApi`` does. Every pod is pending at start and all are
  bound in one cycle; then each pod's MODIFIED event (bound, Running, with its status) arrives
  through the watch, and a resync lists everything again beside the stores: informer stores,
  core and allocator at their fullest;
* ``restart``    the same objects, the M pods already running at start-up (the graph built and
  every pod registered before anything binds), then a resync;
* ``service``    ``fluxinfra service`` in its own process: ``LoadNodes`` of the N nodes, one
  ``Register`` per node (a replay), then the M pods matched through it in batches of 64 (as the
  scheduler does); the service's peak RSS (``VmHWM``).

The figures include the interpreter and every imported module (``kubernetes``, ``grpc``).
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
for _path in (str(ROOT), str(HERE)):
    if _path not in sys.path:
        sys.path.insert(0, _path)

SCENARIOS = ("scheduler", "restart", "service")
PAGE = 500
_MANAGER = {"apiVersion": "v1", "fieldsType": "FieldsV1", "operation": "Update",
            "time": "2026-01-01T00:00:00Z"}


def _fields(keys: list[str]) -> dict[str, Any]:
    """A managedFields fieldsV1 tree of the usual depth (what server-side apply records)."""
    return {"f:metadata": {"f:labels": {f"f:{k}": {} for k in keys}},
            "f:spec": {f"f:{k}": {} for k in keys},
            "f:status": {"f:conditions": {f'k:{{"type":"{k}"}}': {
                ".": {}, "f:lastTransitionTime": {}, "f:status": {}, "f:type": {}}
                for k in keys[:4]}}}


def realistic_node(i: int) -> dict[str, Any]:
    name = f"node{i:05d}"
    labels = {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
              "kubernetes.io/arch": "amd64", "node.kubernetes.io/instance-type": "c6i.8xlarge",
              "topology.kubernetes.io/zone": f"zone-{i % 3}",
              "topology.kubernetes.io/region": "region-1", "beta.kubernetes.io/os": "linux",
              "beta.kubernetes.io/arch": "amd64", "rack": f"rack-{i // 40}"}
    conditions = [{"type": t, "status": "True" if t == "Ready" else "False",
                   "lastHeartbeatTime": "2026-01-01T00:00:00Z",
                   "lastTransitionTime": "2026-01-01T00:00:00Z",
                   "reason": f"Kubelet{t}", "message": f"kubelet reports {t}"}
                  for t in ("MemoryPressure", "DiskPressure", "PIDPressure", "Ready")]
    images = [{"names": [f"registry.example.org/team{j}/app@sha256:{j:064x}",
                         f"registry.example.org/team{j}/app:v{j}"], "sizeBytes": 100_000_000 + j}
              for j in range(30)]
    amounts = {"cpu": "32", "memory": "128Gi", "pods": "110", "ephemeral-storage": "500Gi",
               "hugepages-1Gi": "0", "hugepages-2Mi": "0"}
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "uid": f"node-uid-{i:08d}", "resourceVersion": str(i + 1),
                     "creationTimestamp": "2026-01-01T00:00:00Z", "labels": labels,
                     "annotations": {"node.alpha.kubernetes.io/ttl": "0",
                                     "volumes.kubernetes.io/controller-managed-attach-detach":
                                     "true"},
                     "managedFields": [{**_MANAGER, "manager": m, "fieldsV1": _fields(
                         list(labels))} for m in ("kubelet", "kube-controller-manager")]},
        "spec": {"podCIDR": f"10.{i // 250}.{i % 250}.0/24",
                 "podCIDRs": [f"10.{i // 250}.{i % 250}.0/24"],
                 "providerID": f"aws:///zone-{i % 3}/i-{i:017x}"},
        "status": {"capacity": amounts, "allocatable": dict(amounts), "conditions": conditions,
                   "addresses": [{"type": "InternalIP", "address": f"10.250.{i // 250}.{i % 250}"},
                                 {"type": "Hostname", "address": name}],
                   "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
                   "nodeInfo": {"machineID": f"{i:032x}", "systemUUID": f"{i:032x}",
                                "bootID": f"{i:032x}", "kernelVersion": "6.1.0-18-amd64",
                                "osImage": "Debian GNU/Linux 12 (bookworm)",
                                "containerRuntimeVersion": "containerd://1.6.20",
                                "kubeletVersion": "v1.28.7", "kubeProxyVersion": "v1.28.7",
                                "operatingSystem": "linux", "architecture": "amd64"},
                   "images": images},
    }


def realistic_pod(i: int, node: str = "") -> dict[str, Any]:
    job = f"train-{i // 16}"
    labels = {"app.kubernetes.io/name": "trainer", "batch.kubernetes.io/job-name": job,
              "controller-uid": f"{i // 16:032x}", "job-name": job}
    spec: dict[str, Any] = {
        "schedulerName": "fluxion", "restartPolicy": "Never", "dnsPolicy": "ClusterFirst",
        "serviceAccountName": "default", "serviceAccount": "default",
        "terminationGracePeriodSeconds": 30, "enableServiceLinks": True, "priority": 0,
        "preemptionPolicy": "PreemptLowerPriority", "securityContext": {},
        "containers": [{
            "name": "main", "image": "registry.example.org/hpc/trainer:v1.2.3",
            "imagePullPolicy": "IfNotPresent", "command": ["python", "-m", "train"],
            "args": ["--epochs", "10", "--data", "/data"],
            "env": [{"name": f"VAR_{k}", "value": f"value-{k}"} for k in range(4)],
            "resources": {"requests": {"cpu": "1", "memory": "1Gi"},
                          "limits": {"cpu": "1", "memory": "1Gi"}},
            "volumeMounts": [{"name": "kube-api-access", "readOnly": True,
                              "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}],
            "terminationMessagePath": "/dev/termination-log",
            "terminationMessagePolicy": "File"}],
        "tolerations": [{"key": f"node.kubernetes.io/{t}", "operator": "Exists",
                         "effect": "NoExecute", "tolerationSeconds": 300}
                        for t in ("not-ready", "unreachable")],
        "volumes": [{"name": "kube-api-access", "projected": {"defaultMode": 420, "sources": [
            {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
            {"configMap": {"name": "kube-root-ca.crt",
                           "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
            {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {
                "apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}}]}}],
    }
    status: dict[str, Any] = {"phase": "Pending", "qosClass": "Guaranteed"}
    if node:
        spec["nodeName"] = node
        status = {"phase": "Running", "qosClass": "Guaranteed", "hostIP": "10.250.0.1",
                  "podIP": f"10.{i // 60000}.{i // 250 % 250}.{i % 250}",
                  "startTime": "2026-01-01T00:00:00Z",
                  "conditions": [{"type": t, "status": "True",
                                  "lastTransitionTime": "2026-01-01T00:00:00Z"}
                                 for t in ("Initialized", "Ready", "ContainersReady",
                                           "PodScheduled")],
                  "containerStatuses": [{
                      "name": "main", "ready": True, "restartCount": 0, "started": True,
                      "image": "registry.example.org/hpc/trainer:v1.2.3",
                      "imageID": f"registry.example.org/hpc/trainer@sha256:{i:064x}",
                      "containerID": f"containerd://{i:064x}",
                      "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}}}]}
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": f"{job}-{i % 16}-x{i:05x}", "generateName": f"{job}-",
                     "namespace": "research", "uid": f"pod-uid-{i:08d}",
                     "resourceVersion": str(100_000 + i),
                     "creationTimestamp": "2026-01-01T00:00:00Z", "labels": labels,
                     "annotations": {"batch.kubernetes.io/job-completion-index": str(i % 16)},
                     "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": job,
                                          "uid": f"{i // 16:032x}", "controller": True,
                                          "blockOwnerDeletion": True}],
                     "managedFields": [{**_MANAGER, "manager": m, "fieldsV1": _fields(
                         list(labels))} for m in ("kube-controller-manager", "kubelet")]},
        "spec": spec, "status": status,
    }


class InMemoryApi:
    """A :class:`~fluxinfra.scheduler.kube.KubeApi` serving N nodes and M pods as paginated JSON
    pages, each made when it is asked for and parsed and stripped as ``ClientKubeApi`` does (so
    the pages' bytes are never all held at once, as with a real API server); watches from an
    event iterator; binds recorded (a pod bound here is listed bound and running). A benchmark
    stand-in for the API server, not a test double."""

    def __init__(self, nodes: int, pods: int, running: bool) -> None:
        from fluxinfra.scheduler.kube import KINDS

        #: every kind the scheduler lists; the pods' one namespace, no PodGroup or PDB
        self.counts = {**dict.fromkeys(KINDS, 0), "nodes": nodes, "pods": pods, "namespaces": 1}
        self.bound: dict[str, str] = {f"pod-uid-{i:08d}": f"node{i % nodes:05d}"
                                      for i in range(pods)} if running else {}
        self.events: Iterator[dict[str, Any]] = iter(())
        self.json_bytes = dict.fromkeys(KINDS, 0)

    def _object(self, kind: str, i: int) -> dict[str, Any]:
        if kind == "nodes":
            return realistic_node(i)
        if kind == "namespaces":
            return {"apiVersion": "v1", "kind": "Namespace",
                    "metadata": {"name": "research", "uid": "namespace-uid-research",
                                 "labels": {"kubernetes.io/metadata.name": "research"}}}
        return realistic_pod(i, self.bound.get(f"pod-uid-{i:08d}", ""))

    def list_objects(self, kind: str) -> tuple[list[dict[str, Any]], str]:
        from fluxinfra.scheduler.informer import strip_bulk

        items: list[dict[str, Any]] = []
        total = 0
        for start in range(0, self.counts[kind], PAGE):
            page = json.dumps({"items": [self._object(kind, i) for i in range(
                start, min(self.counts[kind], start + PAGE))]}).encode()
            total += len(page)
            items += [strip_bulk(kind, o) for o in json.loads(page)["items"]]  # type: ignore
        self.json_bytes[kind] = total
        return items, "1"

    def watch_objects(self, kind: str, resource_version: str,
                      timeout_seconds: int) -> Iterator[dict[str, Any]]:
        if kind == "pods":  # one event at a time off the wire, as a real watch delivers them
            events, self.events = self.events, iter(())
            for event in events:
                yield json.loads(json.dumps(event))

    def bind(self, namespace: str, pod: str, uid: str, node: str) -> None:
        self.bound[uid] = node

    def create_event(self, namespace: str, event: dict[str, Any]) -> None:
        pass

    def patch_pod_status(self, namespace: str, pod: str, patch: dict[str, Any]) -> None:
        pass

    def patch_podgroup_status(self, namespace: str, name: str, patch: dict[str, Any]) -> None:
        pass


def _rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def run_scheduler(nodes: int, pods: int, restart: bool) -> dict[str, Any]:
    from fluxinfra.scheduler.binder import KubeBinder
    from fluxinfra.scheduler.core import SchedulerConfig, SchedulerCore
    from fluxinfra.scheduler.fluxion import FluxionAllocator
    from fluxinfra.scheduler.runner import Runner

    api = InMemoryApi(nodes, pods, running=restart)
    core = SchedulerCore(FluxionAllocator("first"), KubeBinder(api),  # type: ignore[arg-type]
                         SchedulerConfig(queue_depth=1_000_000))
    runner = Runner(api, core)  # type: ignore[arg-type]
    t0 = time.perf_counter()
    runner.start()
    object_bytes = sum(api.json_bytes.values())
    report = runner.pump()
    if not restart:  # the watch brings every pod back bound and running
        api.events = ({"type": "MODIFIED", "object": realistic_pod(i, api.bound[f"pod-uid-"
                                                                              f"{i:08d}"])}
                      for i in range(pods))
        runner.pump()
    # A resync (every --resync seconds): each kind listed again beside its store.
    for informer in runner.informers.values():
        informer.relist()
    runner.pump()
    seconds = time.perf_counter() - t0
    held = sum(len(v) for v in core.held().values())
    return {"scenario": "restart" if restart else "scheduler", "nodes": nodes, "pods": pods,
            "held": held, "bound": report.bound, "seconds": seconds,
            "api_json_mib": object_bytes / 2**20, "rss_mib": _rss_mib()}


def run_service(nodes: int, pods: int) -> dict[str, Any]:
    import re

    from fluxinfra.scheduler.fluxion import slim_node
    from fluxinfra.service.client import FluxionClient
    from fluxinfra.service.jobspecs import slots_jobspec

    proc = subprocess.Popen(
        [sys.executable, "-m", "fluxinfra", "service", "--host", "127.0.0.1", "--port", "0",
         "--recipe", '{"cluster": "b", "racks": 1, "nodes_per_rack": 1, "sockets": 1, '
         '"cores_per_socket": 1, "memory_per_socket": [1, 1]}'],
        stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, cwd=ROOT)
    try:
        line = proc.stderr.readline()
        port = re.search(r"listening on 127\.0\.0\.1:(\d+)", line)
        assert port, line
        t0 = time.perf_counter()
        with FluxionClient(f"127.0.0.1:{port.group(1)}", timeout=600) as client:
            # what RemoteBackend sends: the nodes without their bulk (image lists, ...)
            client.load_nodes([slim_node(realistic_node(i)) for i in range(nodes)])
            for i in range(nodes):  # a replay: what runs on each node
                client.register(10**9 + i, f"node{i:05d}", cores=1, memory_mib=1024, at=0,
                                duration=3600)
            js = slots_jobspec(64, cores=1, memory_mib=1024, duration=3600)
            for _ in range(pods // 64):
                client.match(js)
            jobs = client.service_epoch()["jobs"]
        seconds = time.perf_counter() - t0
        status = Path(f"/proc/{proc.pid}/status").read_text()
        hwm = int(re.search(r"VmHWM:\s+(\d+) kB", status).group(1)) / 1024
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    return {"scenario": "service", "nodes": nodes, "pods": pods // 64 * 64, "held": jobs,
            "bound": pods // 64 * 64, "seconds": seconds, "api_json_mib": float("nan"),
            "rss_mib": hwm}


def run_one(name: str, nodes: int, pods: int) -> dict[str, Any]:
    if name == "service":
        return run_service(nodes, pods)
    return run_scheduler(nodes, pods, restart=name == "restart")


def _table(rows: list[dict[str, Any]]) -> str:
    from _table import format_table

    headers = ["scenario", "nodes", "pods", "held", "seconds", "API JSON MiB", "peak RSS MiB"]
    return format_table(headers, [[r["scenario"], r["nodes"], r["pods"], r["held"], r["seconds"],
                                   r["api_json_mib"], r["rss_mib"]] for r in rows], legend={
        "held": "pods the scheduler holds (scheduler, restart); jobs the service holds",
        "API JSON MiB": "the LIST responses' JSON the scheduler read at start-up",
        "peak RSS MiB": "ru_maxrss of the scheduler's process, VmHWM of the service's"})


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="benchmarks/memory.py", description=__doc__.split("\n")[0])
    p.add_argument("--nodes", type=int, default=5000)
    p.add_argument("--pods", type=int, default=10_000)
    p.add_argument("--quick", action="store_true", help="500 nodes, 1,000 pods")
    p.add_argument("--scenarios", default=",".join(SCENARIOS))
    args, _ = p.parse_known_args(argv)
    if args.quick:
        args.nodes, args.pods = 500, 1000
    names = args.scenarios.split(",")
    unknown = [n for n in names if n not in SCENARIOS]
    if unknown:
        print(f"benchmarks/memory.py: --scenarios: {unknown[0]!r} is not one of "
              f"{', '.join(SCENARIOS)}", file=sys.stderr)
        return 2
    rows = []
    for name in names:  # a fresh process each, so each peak RSS is that scenario's own
        code = (f"import json, sys; sys.path[:0] = [{str(ROOT)!r}, {str(HERE)!r}]; "
                f"import memory; print(json.dumps(memory.run_one({name!r}, {args.nodes}, "
                f"{args.pods})))")
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             cwd=ROOT)
        if out.returncode:
            print(f"scenario {name} failed:\n{out.stderr}", file=sys.stderr)
            return 1
        rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
    print(f"memory benchmark: {args.nodes} nodes, {args.pods} pods; API-shaped objects; "
          "peak RSS of each scenario's own process")
    print(_table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
