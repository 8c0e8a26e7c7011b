"""Replay a workload through the real scheduler core on an in-memory cluster, in simulated time.

The same :class:`~fluxinfra.scheduler.core.SchedulerCore` that runs against Kubernetes (queue,
EASY backfill, accounting, per-pod release, overrun extension) is fed pod objects as they arrive
and finish; binds are instant and a bound pod finishes ``runtime`` seconds later. Each allocator
(Fluxion's matcher under a policy, or the kube-scheduler-like spread baseline) replays the same
workload; :func:`compare` prints makespan, utilisation and wait times side by side.

Workload file (YAML or JSON)::

    cluster:                       # N identical nodes, or a list of node groups
      nodes: 64
      cpu: "32"                    # Kubernetes quantities
      memory: 128Gi
      gpus: 0
    # cluster: [{nodes: 32, cpu: "64", memory: 256Gi}, {nodes: 8, cpu: "32", gpus: 4}]
    default_duration: 3600         # declared runtime of jobs that give none (seconds)
    jobs:
      - name: train                # a job is one pod (pods: 1) or a gang of pods
        arrival: 0                 # seconds
        pods: 16
        cpu: "4"
        memory: 8Gi
        gpus: 0
        duration: 600              # declared (the fluxinfra.io/duration annotation)
        runtime: 450               # actual; defaults to duration
        priority: 0
        repeat: 10                 # optional: 10 copies ...
        every: 30                  # ... arriving 30 s apart

A key not listed here is refused, naming the closest known one (a typo such as ``duraton``
would otherwise fall back to a default); errors say where (``cluster.nodes``,
``cluster[1].cpu``, ``jobs[3] (train).pods``).

>>> w = parse_workload({"cluster": {"nodes": 2, "cpu": "4", "memory": "8Gi"},
...                     "jobs": [{"name": "a", "pods": 2, "cpu": "4", "duration": 10},
...                              {"name": "b", "arrival": 1, "cpu": "2", "duration": 5}]})
>>> r = Simulation(w, SpreadAllocator()).run()
>>> r.makespan, r.completed_pods, r.waits["a"], r.waits["b"]
(15, 3, 0, 9)
"""

from __future__ import annotations

import heapq
import itertools
import math
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from fluxinfra.errors import FluxinfraError, did_you_mean
from fluxinfra.inputs import parse_yaml, read_text, shown, type_name
from fluxinfra.kube.shapes import ShapeError, quantity
from fluxinfra.scheduler.allocator import Allocator, SpreadAllocator
from fluxinfra.scheduler.core import SchedulerConfig, SchedulerCore
from fluxinfra.scheduler.metrics import Metrics
from fluxinfra.scheduler.pods import (
    ANNOT_DURATION,
    LABEL_GROUP,
    LABEL_GROUP_SIZE,
    PodInfo,
    pod_request,
)

__all__ = ["SimJob", "SimResult", "Simulation", "Workload", "WorkloadError", "compare",
           "load_workload", "parse_workload"]

EPOCH = datetime(2026, 1, 1, tzinfo=UTC).timestamp()
NAMESPACE = "sim"


class WorkloadError(FluxinfraError):
    """A workload file value is wrong (names the job, the field and the fix)."""


@dataclass
class SimJob:
    name: str
    arrival: int
    pods: int
    cpu: str
    memory: str
    gpus: int
    duration: int
    runtime: int
    priority: int = 0


@dataclass
class Workload:
    nodes: list[dict[str, Any]]
    jobs: list[SimJob]
    default_duration: int = 3600

    @property
    def total_cores(self) -> float:
        from fluxinfra.kube.resources import node_allocatable

        milli = sum(node_allocatable(n).get("cpu", 0) for n in self.nodes)
        return milli // 1000 if milli % 1000 == 0 else milli / 1000


def _node(name: str, cpu: str, memory: str, gpus: int) -> dict[str, Any]:
    allocatable: dict[str, str] = {"cpu": str(cpu), "memory": str(memory), "pods": "1000"}
    if gpus:
        allocatable["nvidia.com/gpu"] = str(gpus)
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
            "status": {"allocatable": allocatable, "capacity": dict(allocatable),
                       "conditions": [{"type": "Ready", "status": "True"}]}}


#: bounds of a workload: times in seconds (about 31 years of simulated time), nodes, and the
#: jobs and pods after ``repeat``
MAX_SECONDS = 10**9
MAX_NODES = 100_000
MAX_JOBS = 100_000
MAX_PODS = 1_000_000


def _int(raw: dict[str, Any], key: str, default: int | None, where: str, minimum: int = 0,
         maximum: int = MAX_SECONDS) -> int:
    value = raw.get(key, default)
    if value is None:
        raise WorkloadError(f"{where}.{key}: missing; give an integer >= {minimum}")
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= maximum:
        raise WorkloadError(f"{where}.{key}: {shown(value)}; give an integer from {minimum} "
                            f"to {maximum}")
    return value


def _quantity(raw: dict[str, Any], key: str, default: str, where: str) -> str:
    """A Kubernetes quantity (a string, or a number written without quotes) as a string."""
    value = raw.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise WorkloadError(f"{where}.{key}: {shown(value)} is {type_name(value)}; give a "
                            "Kubernetes quantity such as '4' or 8Gi")
    try:
        quantity(str(value), f"{where}.{key}", "cpu" if key == "cpu" else "")
    except ShapeError as exc:
        raise WorkloadError(str(exc)) from None
    return str(value)


_NAME = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9]{0,48}[A-Za-z0-9])?")
_WORKLOAD_KEYS = ("cluster", "default_duration", "jobs")
_GROUP_KEYS = ("nodes", "cpu", "memory", "gpus")
_JOB_KEYS = ("name", "arrival", "pods", "cpu", "memory", "gpus", "duration", "runtime",
             "priority", "repeat", "every")


def _known_keys(raw: dict[str, Any], allowed: tuple[str, ...], where: str) -> None:
    """Refuse a key the format does not have (a typo would otherwise fall back to a default)."""
    for key in raw:
        if key not in allowed:
            raise WorkloadError(f"{where}: unknown key {key!r}{did_you_mean(key, allowed)} "
                                f"(accepted: {', '.join(allowed)})")


def parse_workload(data: Any) -> Workload:
    """Validate a workload (see the module docstring); raises :class:`WorkloadError`."""
    if not isinstance(data, dict):
        raise WorkloadError("workload: not a mapping with 'cluster' and 'jobs'")
    _known_keys(data, _WORKLOAD_KEYS, "workload")
    groups = data.get("cluster")
    single = isinstance(groups, dict)  # one group, written without a list
    if single:
        groups = [groups]
    if groups is None:
        raise WorkloadError("cluster: missing; give {nodes: N, cpu: '32', memory: 128Gi}")
    if not isinstance(groups, list) or not groups:
        raise WorkloadError(f"cluster: {groups!r} is not a node group; give {{nodes: N, cpu: "
                            "'32', memory: 128Gi}, or a list of such groups")
    nodes: list[dict[str, Any]] = []
    for g, group in enumerate(groups):
        where = "cluster" if single else f"cluster[{g}]"
        if not isinstance(group, dict):
            raise WorkloadError(f"{where}: {group!r} is not a mapping; give {{nodes: N, cpu: "
                                "'32', memory: 128Gi}")
        _known_keys(group, _GROUP_KEYS, where)
        count = _int(group, "nodes", None, where, 1, MAX_NODES - len(nodes))
        cpu, memory = _quantity(group, "cpu", "32", where), _quantity(group, "memory",
                                                                      "128Gi", where)
        gpus = _int(group, "gpus", 0, where, 0, 2**31 - 1)
        for _ in range(count):
            nodes.append(_node(f"node{len(nodes):05d}", cpu, memory, gpus))
    default = _int(data, "default_duration", 3600, "workload", 1)
    raw_jobs = data.get("jobs")
    if not isinstance(raw_jobs, list) or not raw_jobs:
        raise WorkloadError("jobs: missing or empty; give a list of jobs")
    jobs: list[SimJob] = []
    total_pods = 0
    for j, raw in enumerate(raw_jobs):
        if not isinstance(raw, dict):
            raise WorkloadError(f"jobs[{j}]: {raw!r} is not a mapping; give {{name: a, cpu: "
                                "'4', duration: 600}")
        name = raw.get("name")
        if name is not None and (not isinstance(name, str) or not _NAME.fullmatch(name)):
            raise WorkloadError(f"jobs[{j}].name: {shown(name)}; give a name of letters, "
                                "digits and '-' (at most 50 characters)")
        where = f"jobs[{j}] ({name or '?'})"
        _known_keys(raw, _JOB_KEYS, where)
        duration = _int(raw, "duration", default, where, 1)
        runtime = _int(raw, "runtime", duration, where, 1)
        repeat = _int(raw, "repeat", 1, where, 1, MAX_JOBS - len(jobs))
        every = _int(raw, "every", 0, where)
        arrival = _int(raw, "arrival", 0, where)
        if arrival + (repeat - 1) * every > MAX_SECONDS:
            raise WorkloadError(f"{where}: the last of {repeat} copies {every} s apart arrives "
                                f"after {MAX_SECONDS} s; give fewer copies or a shorter 'every'")
        pods = _int(raw, "pods", 1, where, 1, MAX_PODS)
        if pods * repeat + total_pods > MAX_PODS:
            raise WorkloadError(f"{where}: {pods * repeat} pods bring the workload past "
                                f"{MAX_PODS:,} pods; give fewer")
        total_pods += pods * repeat
        base = name or f"job{j}"
        for r in range(repeat):
            job = SimJob(name=base if repeat == 1 else f"{base}-{r}",
                         arrival=arrival + r * every, pods=pods,
                         cpu=_quantity(raw, "cpu", "1", where),
                         memory=_quantity(raw, "memory", "0", where),
                         gpus=_int(raw, "gpus", 0, where, 0, 2**31 - 1),
                         duration=duration, runtime=runtime,
                         priority=_int(raw, "priority", 0, where, -(2**31), 2**31 - 1))
            try:
                pod_request(_pod(job, 0, 0))
            except FluxinfraError as exc:
                raise WorkloadError(f"{where}: {exc}") from None
            jobs.append(job)
    names = [j.name for j in jobs]
    if len(set(names)) != len(names):
        dup = next(n for n in names if names.count(n) > 1)
        raise WorkloadError(f"jobs: the name {dup!r} is used twice; job names must be unique")
    return Workload(nodes, sorted(jobs, key=lambda j: (j.arrival, j.name)), default)


def load_workload(path: str | Path) -> Workload:
    """The workload file ``path`` (YAML or JSON, read within :mod:`fluxinfra.inputs`' bounds),
    validated; raises :class:`WorkloadError`."""
    what = f"workload {str(path)!r}"
    text = read_text(path, what, WorkloadError)
    return parse_workload(parse_yaml(text, what, WorkloadError, fix="check its indentation"))


def _timestamp(seconds: float) -> str:
    return datetime.fromtimestamp(EPOCH + seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _pod(job: SimJob, index: int, uid: int) -> dict[str, Any]:
    requests: dict[str, str] = {"cpu": job.cpu, "memory": job.memory}
    if job.gpus:
        requests["nvidia.com/gpu"] = str(job.gpus)
    labels = {LABEL_GROUP: job.name, LABEL_GROUP_SIZE: str(job.pods)} if job.pods > 1 else {}
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": f"{job.name}-{index}", "namespace": NAMESPACE, "uid": f"u{uid}",
                     "labels": labels, "annotations": {ANNOT_DURATION: f"{job.duration}s"},
                     "creationTimestamp": _timestamp(job.arrival)},
        "spec": {"schedulerName": "fluxion", "priority": job.priority,
                 "containers": [{"name": "main", "resources": {"requests": requests}}]},
        "status": {"phase": "Pending"},
    }


@dataclass
class SimResult:
    allocator: str
    makespan: int = 0
    utilisation: float = 0.0
    completed_pods: int = 0
    never_scheduled: list[str] = field(default_factory=list)
    waits: dict[str, int] = field(default_factory=dict)
    cycles: int = 0
    wall_seconds: float = 0.0
    matches: int = 0

    def wait_stats(self) -> dict[str, float]:
        values = sorted(self.waits.values())
        if not values:
            return {"mean": 0.0, "p50": 0.0, "p95": 0.0, "max": 0.0}
        return {"mean": sum(values) / len(values), "p50": _pct(values, 50),
                "p95": _pct(values, 95), "max": float(values[-1])}


def _pct(values: list[int], pct: float) -> float:
    k = max(0, math.ceil(pct / 100 * len(values)) - 1)
    return float(values[k])


class _SimBinder:
    """The in-memory cluster's side of binding: instant binds, finishes scheduled."""

    def __init__(self, sim: Simulation) -> None:
        self.sim = sim
        self.events: dict[str, int] = {}

    def bind(self, assignments: list[tuple[PodInfo, str]]) -> list[Exception | None]:
        for pod, node in assignments:
            self.sim.started(pod, node)
        return [None] * len(assignments)

    def pod_event(self, pod: PodInfo, reason: str, note: str, action: str) -> None:
        self.events[reason] = self.events.get(reason, 0) + 1

    def pod_unschedulable(self, pod: PodInfo, message: str) -> None:
        self.sim.unschedulable.add(pod.uid)

    def podgroup_event(self, namespace: str, name: str, uid: str, reason: str,
                       note: str) -> None:
        self.events[reason] = self.events.get(reason, 0) + 1

    def podgroup_status(self, namespace: str, name: str, status: dict[str, Any]) -> None:
        pass

    def node_event(self, name: str, uid: str, reason: str, note: str) -> None:
        self.events[reason] = self.events.get(reason, 0) + 1

    def preempt(self, victim: PodInfo, preemptor: PodInfo, node: str) -> bool:
        raise AssertionError("the simulator runs without preemption")

    def nominate(self, pod: PodInfo, node: str) -> None:
        pass


class Simulation:
    """One replay of ``workload`` with one allocator."""

    def __init__(self, workload: Workload, allocator: Allocator,
                 config: SchedulerConfig | None = None) -> None:
        self.workload = workload
        self.allocator = allocator
        self.now = 0
        self.binder = _SimBinder(self)
        # Preemption is off: a workload's jobs run to completion once started.
        config = config or SchedulerConfig(default_duration=workload.default_duration)
        config.preemption = False
        self.core = SchedulerCore(allocator, self.binder, config, Metrics(),
                                  clock=lambda: float(self.now))
        self._events: list[tuple[int, int, str, Any]] = []
        self._seq = itertools.count()
        self.pods: dict[str, dict[str, Any]] = {}
        self.job_of: dict[str, SimJob] = {}
        self.start: dict[str, int] = {}
        self.end: dict[str, int] = {}
        self.unschedulable: set[str] = set()

    def _push(self, at: int, kind: str, payload: Any) -> None:
        heapq.heappush(self._events, (at, next(self._seq), kind, payload))

    def started(self, pod: PodInfo, node: str) -> None:
        job = self.job_of[pod.uid]
        obj = self.pods[pod.uid]
        obj["spec"]["nodeName"] = node
        obj["status"]["phase"] = "Running"
        self.start[pod.uid] = self.now
        self._push(self.now + job.runtime, "finish", pod.uid)

    def run(self) -> SimResult:
        t0 = time.perf_counter()
        uids = itertools.count(1)
        for job in self.workload.jobs:
            self._push(job.arrival, "arrive", job)
        self.core.load(self.workload.nodes, [], [], now=0)
        result = SimResult(self.allocator.name)
        while self._events:
            self.now = self._events[0][0]
            while self._events and self._events[0][0] == self.now:
                _, _, kind, payload = heapq.heappop(self._events)
                if kind == "arrive":
                    for i in range(payload.pods):
                        obj = _pod(payload, i, next(uids))
                        uid = obj["metadata"]["uid"]
                        self.pods[uid], self.job_of[uid] = obj, payload
                        self.core.on_pod("ADDED", obj, self.now)
                else:
                    obj = self.pods[payload]
                    obj["status"]["phase"] = "Succeeded"
                    self.end[payload] = self.now
                    self.core.on_pod("MODIFIED", obj, self.now)
            self.core.schedule(self.now)
            result.cycles += 1
        result.wall_seconds = time.perf_counter() - t0
        result.matches = self.core.metrics.match_latency.count
        return self._summarise(result)

    def _summarise(self, result: SimResult) -> SimResult:
        jobs = self.workload.jobs
        first = min(j.arrival for j in jobs)
        result.makespan = (max(self.end.values()) - first) if self.end else 0
        result.completed_pods = len(self.end)
        busy = sum(self._cores(uid) * (self.end[uid] - self.start[uid]) for uid in self.end)
        capacity = self.workload.total_cores * result.makespan
        result.utilisation = busy / capacity if capacity else 0.0
        starts: dict[str, list[int]] = {}
        for uid, at in self.start.items():
            starts.setdefault(self.job_of[uid].name, []).append(at)
        for job in jobs:
            if job.name in starts and len(starts[job.name]) >= job.pods:
                result.waits[job.name] = max(starts[job.name]) - job.arrival
            else:
                result.never_scheduled.append(job.name)
        return result

    def _cores(self, uid: str) -> float:
        return pod_request(self.pods[uid]).cpu_milli / 1000


def compare(workload: Workload, policies: list[str], *, baseline: bool = True,
            reserve_depth: int = 1,
            on_matcher: Callable[[Any], Any] | None = None) -> list[SimResult]:
    """Replay ``workload`` under each Fluxion policy (and the spread baseline).
    ``on_matcher``: called with each matcher built (``InProcessBackend``'s)."""
    from fluxinfra.scheduler.fluxion import FluxionAllocator, InProcessBackend

    results = []
    allocators: list[Allocator] = [FluxionAllocator(p, InProcessBackend(p, on_matcher))
                                   for p in policies]
    if baseline:
        allocators.append(SpreadAllocator())
    for allocator in allocators:
        config = SchedulerConfig(default_duration=workload.default_duration,
                                 reserve_depth=reserve_depth)
        results.append(Simulation(workload, allocator, config).run())
    return results


def format_table(results: list[SimResult]) -> str:
    head = (f"{'allocator':<16} {'makespan_s':>10} {'util':>6} {'wait_mean':>10} "
            f"{'wait_p50':>9} {'wait_p95':>9} {'wait_max':>9} {'unplaced':>8} "
            f"{'matches':>8} {'wall_s':>7}")
    lines = [head, "-" * len(head)]
    base = results[-1].makespan if results and results[-1].allocator == "spread" else 0
    for r in results:
        w = r.wait_stats()
        lines.append(f"{r.allocator:<16} {r.makespan:>10} {r.utilisation:>6.1%} "
                     f"{w['mean']:>10.1f} {w['p50']:>9.0f} {w['p95']:>9.0f} {w['max']:>9.0f} "
                     f"{len(r.never_scheduled):>8} {r.matches:>8} {r.wall_seconds:>7.2f}")
    if base:
        lines.append("")
        lines += [f"makespan vs spread baseline: {r.allocator} {r.makespan / base:.2f}x"
                  for r in results[:-1]]
    return "\n".join(lines)
