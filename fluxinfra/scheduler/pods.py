"""Read what the scheduler needs out of a pod's API JSON: requests, group, duration, priority.

Labels and annotations the scheduler understands (all optional):

``scheduling.x-k8s.io/pod-group: NAME`` (label)
    member of the scheduler-plugins PodGroup ``NAME`` in the pod's namespace; the group's size is
    the PodGroup's ``spec.minMember``.
``fluxinfra.io/group: NAME`` + ``fluxinfra.io/group-size: N`` (labels)
    the same without a custom resource: the group is complete when N pods carry the label.
``fluxinfra.io/duration: 3600s`` (annotation; also ``90m``, ``2h``, ``1d``, plain seconds)
    how long the pod is expected to run: the matcher's walltime, used for backfill.

>>> parse_duration("90m"), parse_duration("3600s"), parse_duration(120)
(5400, 3600, 120)
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

from fluxinfra.errors import FluxinfraError
from fluxinfra.matcher.k8s import DEFAULT_GPU_RESOURCES, DEFAULT_MEMORY_CHUNK_MIB, pod_requests
from fluxinfra.scheduler.events import parse_time

__all__ = [
    "ANNOT_DURATION",
    "LABEL_GROUP",
    "LABEL_GROUP_SIZE",
    "LABEL_PODGROUP",
    "PodInfo",
    "PodSpecError",
    "Request",
    "Shape",
    "pod_request",
    "parse_duration",
    "pod_info",
]

LABEL_PODGROUP = "scheduling.x-k8s.io/pod-group"
LABEL_GROUP = "fluxinfra.io/group"
LABEL_GROUP_SIZE = "fluxinfra.io/group-size"
ANNOT_DURATION = "fluxinfra.io/duration"

MIB = 2**20
TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})


class PodSpecError(FluxinfraError):
    """A pod (or PodGroup) carries a value the scheduler cannot read; names the field and fix."""


_DURATION = re.compile(r"^(\d+(?:\.\d+)?)(s|m|h|d)?$")
_DURATION_UNIT = {None: 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration(value: Any, where: str = f"metadata.annotations[{ANNOT_DURATION}]") -> int:
    """Seconds from ``3600``, ``"3600s"``, ``"90m"``, ``"2h"`` or ``"1d"``; must be > 0."""
    match = _DURATION.match(str(value).strip())
    seconds = math.ceil(float(match.group(1)) * _DURATION_UNIT[match.group(2)]) if match else 0
    if seconds <= 0:
        raise PodSpecError(f"{where}: {value!r} is not a positive duration; "
                           "write e.g. '3600s', '90m' or '2h'")
    return seconds


@dataclass(frozen=True, slots=True)
class Request:
    """One pod's effective request: millicores, bytes of memory, whole GPUs."""

    cpu_milli: int = 0
    memory: int = 0
    gpu: int = 0

    def shape(self) -> Shape:
        """What the matcher sees: whole cores (at least one), whole memory chunks, GPUs."""
        chunks = math.ceil(self.memory / (DEFAULT_MEMORY_CHUNK_MIB * MIB))
        return Shape(max(1, math.ceil(self.cpu_milli / 1000)), chunks * DEFAULT_MEMORY_CHUNK_MIB,
                     self.gpu)


@dataclass(frozen=True, slots=True, order=True)
class Shape:
    """One slot of a jobspec, in the graph's units (see :mod:`fluxinfra.matcher.k8s`): memory is
    a whole number of the graph's memory chunks, in MiB."""

    cores: int = 1
    memory_mib: int = 0
    gpus: int = 0


@dataclass(slots=True)
class PodInfo:
    """The scheduler's view of one pod (plain data; built by :func:`pod_info`)."""

    uid: str
    namespace: str
    name: str
    scheduler_name: str
    node_name: str
    phase: str
    request: Request
    priority: int = 0
    group_name: str = ""       #: PodGroup or label-group name ("" = a group of one)
    group_kind: str = ""       #: "podgroup" | "label" | ""
    group_size: int = 1        #: declared size (label form); PodGroups carry it themselves
    duration: int = 0          #: seconds; 0 = the scheduler's default
    created: float = 0.0       #: creationTimestamp, epoch seconds (FCFS order)
    deleting: bool = False
    annotations: dict[str, str] = field(default_factory=dict)

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def group_key(self) -> str:
        """Groups are namespaced; a lone pod is its own group."""
        if self.group_name:
            return f"{self.namespace}/{self.group_name}"
        return f"{self.namespace}/pod:{self.name}"

    @property
    def bound(self) -> bool:
        return bool(self.node_name)

    @property
    def terminal(self) -> bool:
        return self.phase in TERMINAL_PHASES

    @property
    def holds_resources(self) -> bool:
        """Bound and not finished: its requests are in use on its node."""
        return self.bound and not self.terminal


def pod_request(pod: dict[str, Any]) -> Request:
    """Effective request (Kubernetes' rule, see :func:`fluxinfra.matcher.k8s.pod_requests`)."""
    try:
        amounts = pod_requests(pod)
    except FluxinfraError as exc:
        raise PodSpecError(str(exc)) from None
    gpu = sum(amounts.get(name, 0) for name in DEFAULT_GPU_RESOURCES)
    return Request(amounts.get("cpu", 0), amounts.get("memory", 0), gpu)


def pod_info(pod: dict[str, Any]) -> PodInfo:
    """Parse one pod; raises :class:`PodSpecError` naming the offending field."""
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    labels = meta.get("labels") or {}
    annotations = meta.get("annotations") or {}
    name, namespace = meta.get("name", ""), meta.get("namespace", "default")
    info = PodInfo(
        uid=str(meta.get("uid") or f"{namespace}/{name}"),
        namespace=namespace, name=name,
        scheduler_name=spec.get("schedulerName") or "default-scheduler",
        node_name=spec.get("nodeName") or "",
        phase=(pod.get("status") or {}).get("phase") or "Pending",
        request=Request(),
        priority=int(spec.get("priority") or 0),
        created=parse_time(meta.get("creationTimestamp")),
        deleting=bool(meta.get("deletionTimestamp")),
        annotations=dict(annotations),
    )
    info.request = pod_request(pod)
    if labels.get(LABEL_PODGROUP):
        info.group_name, info.group_kind = labels[LABEL_PODGROUP], "podgroup"
        info.group_size = 0
    elif labels.get(LABEL_GROUP):
        info.group_name, info.group_kind = labels[LABEL_GROUP], "label"
        raw = labels.get(LABEL_GROUP_SIZE, "")
        try:
            info.group_size = int(raw)
        except ValueError:
            info.group_size = 0
        if info.group_size < 1:
            raise PodSpecError(
                f"metadata.labels[{LABEL_GROUP_SIZE}]: {raw!r} is not a positive integer; "
                f"pods labelled {LABEL_GROUP}={info.group_name} must also carry "
                f"{LABEL_GROUP_SIZE}=N (N >= 1)")
    if ANNOT_DURATION in annotations:
        info.duration = parse_duration(annotations[ANNOT_DURATION])
    return info
