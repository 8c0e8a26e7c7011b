"""The invariants every fault test of ``test_faults.py`` checks after the fault, read from the
API server's own objects (and, on a bed, its audit log), never from the scheduler's word:

- **no pod bound twice**: at most one successful ``pods/binding`` create per pod (audit log),
  at most one ``Scheduled`` Event per pod, naming the node the pod is on;
- **no gang half bound**: of each gang (``fluxinfra.io/group`` + ``group-size`` labels, or a
  PodGroup's ``minMember``) either no live member is bound or at least its size;
- **no node above allocatable** for any resource (cpu, memory, extended, pod count), summed
  over every live pod of every namespace;
- **no queued Job lost or admitted twice**: every Job has exactly one FluxJob, created
  suspended, and was admitted at most once.

:func:`violations` returns what is broken as sentences (empty: all hold); :func:`hold` asserts
that it is empty, so a red run names the pod, gang or node.
"""

from __future__ import annotations

import json
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from e2e_cluster import Cluster

from fluxinfra.kube.resources import node_allocatable
from fluxinfra.scheduler.pods import LABEL_GROUP, LABEL_GROUP_SIZE, pod_info

__all__ = ["audit_bindings", "bound_twice", "half_bound_gangs", "hold", "jobs_lost_or_twice",
           "over_allocatable", "steady", "violations"]

POD_GROUP_LABEL = "scheduling.x-k8s.io/pod-group"


def _live(pod: dict[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed") and \
        not pod["metadata"].get("deletionTimestamp")


def audit_records(audit_log: Path | None) -> Iterable[dict[str, Any]]:
    """The audit log's ResponseComplete records (the bed logs a workload ServiceAccount's
    requests; the admin's are not logged)."""
    if audit_log is None or not audit_log.exists():
        return []
    out = []
    with audit_log.open(errors="replace") as fh:
        for line in fh:
            try:
                rec = json.loads(line)
            except ValueError:
                continue  # a line being written
            if rec.get("stage") == "ResponseComplete":
                out.append(rec)
    return out


def audit_bindings(audit_log: Path | None, namespace: str) -> Counter[str]:
    """pod name -> successful ``pods/binding`` creates in ``namespace`` (audit log)."""
    done: Counter[str] = Counter()
    for rec in audit_records(audit_log):
        ref = rec.get("objectRef") or {}
        if ref.get("namespace") == namespace and ref.get("resource") == "pods" and \
                ref.get("subresource") == "binding" and rec.get("verb") == "create" and \
                (rec.get("responseStatus") or {}).get("code", 0) // 100 == 2:
            done[ref.get("name", "")] += 1
    return done


def bound_twice(cluster: Cluster, namespace: str, pods: list[dict[str, Any]]) -> list[str]:
    problems = []
    where = {p["metadata"]["uid"]: (p["metadata"]["name"], p["spec"].get("nodeName") or "")
             for p in pods}
    events = cluster.get("events.v1.events.k8s.io", "-n", namespace)["items"]
    scheduled: dict[str, list[str]] = defaultdict(list)
    for e in events:
        if e.get("reason") == "Scheduled" and e["regarding"].get("uid") in where:
            scheduled[e["regarding"]["uid"]].append(e.get("note") or "")
    for uid, notes in scheduled.items():
        name, node = where[uid]
        if len(notes) > 1:
            problems.append(f"pod {name}: {len(notes)} Scheduled Events: {notes}")
        elif node and node not in notes[0]:
            problems.append(f"pod {name} is on {node} but its Scheduled Event says {notes[0]!r}")
    audit = cluster.bed.audit_log if cluster.bed is not None else None
    for name, n in audit_bindings(audit, namespace).items():
        if n > 1:
            problems.append(f"pod {name}: {n} successful bindings (audit log)")
    return problems


def _group_sizes(cluster: Cluster, namespace: str) -> dict[str, int]:
    proc = cluster.kubectl("get", "podgroups.scheduling.x-k8s.io", "-n", namespace, "-o",
                           "json", check=False)
    if proc.returncode != 0:
        return {}
    return {g["metadata"]["name"]: int(g["spec"].get("minMember") or 1)
            for g in json.loads(proc.stdout)["items"]}


def half_bound_gangs(cluster: Cluster, namespace: str, pods: list[dict[str, Any]]) -> list[str]:
    podgroups = _group_sizes(cluster, namespace)
    bound: Counter[str] = Counter()
    size: dict[str, int] = {}
    for pod in pods:
        labels = pod["metadata"].get("labels") or {}
        if labels.get(LABEL_GROUP):
            key = labels[LABEL_GROUP]
            size[key] = int(labels.get(LABEL_GROUP_SIZE) or 1)
        elif labels.get(POD_GROUP_LABEL) in podgroups:
            key = labels[POD_GROUP_LABEL]
            size[key] = podgroups[key]
        else:
            continue
        if pod["spec"].get("nodeName") and _live(pod):
            bound[key] += 1
    return [f"gang {g}: {bound[g]} of its {size[g]} live members bound"
            for g in sorted(size) if 0 < bound[g] < size[g]]


def over_allocatable(cluster: Cluster, nodes: list[str] | None = None) -> list[str]:
    """Every node (or only ``nodes``): the live pods' requests summed per resource, and their
    count, against the Node's allocatable."""
    used: dict[str, Counter[str]] = defaultdict(Counter)
    for pod in cluster.get("pods", "-A")["items"]:
        info = pod_info(pod)
        if info.node_name and info.holds_resources:
            used[info.node_name]["pods"] += 1
            for resource, amount in info.request.items():
                used[info.node_name][resource] += amount
    problems = []
    for node in cluster.get("nodes")["items"]:
        name = node["metadata"]["name"]
        if nodes is not None and name not in nodes:
            continue
        alloc = node_allocatable(node)
        for resource, amount in used.get(name, {}).items():
            if amount > alloc.get(resource, 0):
                problems.append(f"node {name}: {amount} {resource} requested, "
                                f"{alloc.get(resource, 0)} allocatable")
    return problems


def jobs_lost_or_twice(cluster: Cluster, namespace: str) -> list[str]:
    """Each Job in ``namespace``: exactly one FluxJob owned by it, created suspended by the
    webhook (so it never ran unqueued), un-suspended at most once."""
    jobs = cluster.get("jobs", "-n", namespace)["items"]
    fluxjobs = cluster.get("fluxjobs", "-n", namespace)["items"]
    owners = Counter(f["spec"].get("owner", {}).get("uid") for f in fluxjobs)
    problems = []
    for job in jobs:
        name, uid = job["metadata"]["name"], job["metadata"]["uid"]
        if owners[uid] != 1:
            problems.append(f"Job {name}: {owners[uid]} FluxJobs")
        labels = job["metadata"].get("labels") or {}
        if not labels.get("fluxinfra.io/queue-name"):
            problems.append(f"Job {name} was created without the webhook (not queued)")
    # the queue writes as the admin in these tests (not audited): its Events say how often
    admitted = Counter(e["regarding"].get("name") for e in
                       cluster.get("events.v1.events.k8s.io", "-n", namespace)["items"]
                       if e["regarding"].get("kind") == "FluxJob"
                       and e.get("reason") == "Admitted")
    problems += [f"FluxJob {n}: admitted {c} times" for n, c in admitted.items() if c > 1]
    return problems


def violations(cluster: Cluster, namespace: str, nodes: list[str] | None = None, *,
               queue: bool = False) -> list[str]:
    """Every invariant above, for the pods of ``namespace`` and the nodes ``nodes`` (None:
    all)."""
    pods = cluster.get("pods", "-n", namespace)["items"]
    problems = bound_twice(cluster, namespace, pods) + half_bound_gangs(cluster, namespace, pods)
    problems += over_allocatable(cluster, nodes)
    if queue:
        problems += jobs_lost_or_twice(cluster, namespace)
    return problems


def hold(cluster: Cluster, namespace: str, nodes: list[str] | None = None, *,
         queue: bool = False) -> None:
    """Assert every invariant (:func:`violations`), naming each that is broken."""
    problems = violations(cluster, namespace, nodes, queue=queue)
    assert not problems, "\n".join(problems)


def steady(predicate: Callable[[], Any], timeout: float, what: str,
           interval: float = 0.5) -> float:
    """Seconds until ``predicate()`` holds (the recovery time a test reports); fails naming
    ``what`` after ``timeout``."""
    began = time.monotonic()
    last: Any = None
    while time.monotonic() - began < timeout:
        try:
            ok = last = predicate()
        except AssertionError as exc:  # kubectl refused: the API server is still coming back
            ok, last = False, str(exc).splitlines()[0]
        if ok:
            return time.monotonic() - began
        time.sleep(interval)
    raise AssertionError(f"not steady after {timeout:.0f}s: {what} (last: {last!r})")
