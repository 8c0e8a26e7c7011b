"""Read what the scheduler needs out of a pod's (and a PodGroup's) API JSON.

Everything kube-scheduler v1.28's filters read is parsed once per pod change into a
:class:`PodInfo`: the effective request of every resource by its exact name (``resource.
PodRequests``: containers + sidecars vs. the peak init container, plus overhead), node selector,
required node affinity, tolerations, required pod (anti-)affinity, DoNotSchedule topology spread
constraints (``minDomains``, ``matchLabelKeys``, node inclusion policies), host ports,
scheduling gates, priority and preemption policy, volumes.

Labels and annotations the scheduler understands (all optional):

``scheduling.x-k8s.io/pod-group: NAME`` (label)
    member of the scheduler-plugins PodGroup ``NAME`` in the pod's namespace (its
    ``spec.minMember``, ``minResources``, ``scheduleTimeoutSeconds`` apply).
``fluxinfra.io/group: NAME`` + ``fluxinfra.io/group-size: N`` (labels)
    the same without a custom resource: N pods must start together.
``fluxinfra.io/topology-required: LEVEL`` / ``fluxinfra.io/topology-preferred: LEVEL``
    (annotation or label, on the PodGroup or on the pods of a label group) every member in
    one vertex of topology level LEVEL (``zone``, ``rack``, ... as configured); preferred
    falls back to anywhere when no single domain has room now.
``fluxinfra.io/duration: 3600s`` (annotation; also ``90m``, ``2h``, ``1d``, plain seconds)
    how long the pod is expected to run: the matcher's walltime, used for backfill.

>>> parse_duration("90m"), parse_duration("3600s"), parse_duration(120)
(5400, 3600, 120)
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from fluxinfra.errors import FluxinfraError
from fluxinfra.kube import shapes
from fluxinfra.kube.resources import pod_requests
from fluxinfra.kube.selectors import (
    LabelSelector,
    NodeSelector,
    SelectorError,
    Toleration,
)
from fluxinfra.matcher.planner import HORIZON
from fluxinfra.scheduler.events import parse_time

__all__ = [
    "ANNOT_DURATION",
    "ANNOT_MIRROR",
    "check_pod",
    "is_node_overhead",
    "object_identity",
    "object_key",
    "ANNOT_TOPOLOGY_PREFERRED",
    "ANNOT_TOPOLOGY_REQUIRED",
    "LABEL_GROUP",
    "LABEL_GROUP_SIZE",
    "LABEL_PODGROUP",
    "AffinityTerm",
    "PodGroupSpec",
    "PodInfo",
    "PodSpecError",
    "Request",
    "SpreadConstraint",
    "parse_duration",
    "pod_info",
    "pod_info_update",
    "pod_request",
    "podgroup_spec",
]

LABEL_PODGROUP = "scheduling.x-k8s.io/pod-group"
LABEL_GROUP = "fluxinfra.io/group"
LABEL_GROUP_SIZE = "fluxinfra.io/group-size"
ANNOT_DURATION = "fluxinfra.io/duration"
ANNOT_TOPOLOGY_REQUIRED = "fluxinfra.io/topology-required"
ANNOT_TOPOLOGY_PREFERRED = "fluxinfra.io/topology-preferred"

TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})
#: the annotation the kubelet puts on the mirror pod of a static pod
ANNOT_MIRROR = "kubernetes.io/config.mirror"


class PodSpecError(FluxinfraError):
    """A pod (or PodGroup) carries a value the scheduler cannot read; names the field and fix."""


_DURATION = re.compile(r"^(\d+(?:\.\d+)?)(s|m|h|d)?$")
_DURATION_UNIT = {None: 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration(value: Any, where: str = f"metadata.annotations[{ANNOT_DURATION}]") -> int:
    """Seconds from ``3600``, ``"3600s"``, ``"90m"``, ``"2h"`` or ``"1d"``; must be > 0 and
    within the matcher's planning horizon (2^62 s)."""
    match = _DURATION.match(str(value).strip()) if isinstance(value, (str, int)) else None
    amount = float(match.group(1)) * _DURATION_UNIT[match.group(2)] if match else 0.0
    if not 0 < amount < HORIZON:
        raise PodSpecError(f"{where}: {shapes.shown(value)} is not a positive duration (at "
                           "most 2^62 s); write e.g. '3600s', '90m' or '2h'")
    return math.ceil(amount)


@dataclass(frozen=True, slots=True)
class Request:
    """Amounts by resource name in base units (cpu millicores, bytes, counts), positive only;
    hashable, so identical requests share caches.

    >>> r = Request.of({"cpu": 500, "memory": 2**30})
    >>> r.get("cpu"), r.get("nvidia.com/gpu"), r.slot()["pods"]
    (500, 0, 1)
    """

    amounts: tuple[tuple[str, int], ...] = ()

    @classmethod
    def of(cls, amounts: Mapping[str, int]) -> Request:
        return cls(tuple(sorted((k, int(v)) for k, v in amounts.items() if v > 0)))

    def get(self, name: str, default: int = 0) -> int:
        for key, value in self.amounts:
            if key == name:
                return value
        return default

    def items(self) -> Iterator[tuple[str, int]]:
        return iter(self.amounts)

    def as_dict(self) -> dict[str, int]:
        return dict(self.amounts)

    def slot(self, pods: int = 1) -> dict[str, int]:
        """What one pod takes from a node: its request plus one of the node's pods."""
        out = dict(self.amounts)
        out["pods"] = out.get("pods", 0) + pods
        return out

    def __add__(self, other: Request) -> Request:
        out = dict(self.amounts)
        for k, v in other.amounts:
            out[k] = out.get(k, 0) + v
        return Request.of(out)

    @property
    def cpu_milli(self) -> int:
        return self.get("cpu")

    @property
    def memory(self) -> int:
        return self.get("memory")

    def __str__(self) -> str:
        parts = []
        for name, value in self.amounts:
            if name == "cpu":
                parts.append(f"cpu={value}m")
            elif name in ("memory", "ephemeral-storage") or name.startswith("hugepages-"):
                parts.append(f"{name}={_bytes(value)}")
            else:
                parts.append(f"{name}={value}")
        return ", ".join(parts) or "nothing"


def _bytes(n: int) -> str:
    for unit, size in (("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10)):
        if n >= size and n % size == 0:
            return f"{n // size}{unit}"
    return str(n)


@dataclass(frozen=True, slots=True)
class AffinityTerm:
    """A required pod (anti-)affinity term (``framework.AffinityTerm``)."""

    selector: LabelSelector
    namespaces: frozenset[str]
    namespace_selector: LabelSelector  # nothing when the term has none
    topology_key: str

    def matches(self, labels: Mapping[str, str], namespace: str,
                ns_labels: Mapping[str, str] | None) -> bool:
        if namespace in self.namespaces or (
                ns_labels is not None and self.namespace_selector.matches(ns_labels)):
            return self.selector.matches(labels)
        return False


@dataclass(frozen=True, slots=True)
class SpreadConstraint:
    """A DoNotSchedule ``topologySpreadConstraint`` as PodTopologySpread reads it."""

    max_skew: int
    topology_key: str
    selector: LabelSelector
    min_domains: int = 1
    honor_affinity: bool = True   #: nodeAffinityPolicy Honor (default)
    honor_taints: bool = False    #: nodeTaintsPolicy Honor (default Ignore)


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
    started: float = 0.0       #: status.startTime (preemption picks the youngest victims)
    deleting: bool = False
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)
    gates: tuple[str, ...] = ()
    node_selector: tuple[tuple[str, str], ...] = ()
    node_affinity: NodeSelector | None = None
    tolerations: tuple[Toleration, ...] = ()
    affinity: tuple[AffinityTerm, ...] = ()
    anti_affinity: tuple[AffinityTerm, ...] = ()
    spread: tuple[SpreadConstraint, ...] = ()
    host_ports: tuple[tuple[str, str, int], ...] = ()
    preempt_never: bool = False
    nominated_node: str = ""
    unsupported: str = ""      #: why the scheduler cannot place it (volumes), "" if it can
    condition: tuple[str, str, str] = ("", "", "")  #: PodScheduled (status, reason, message)
    disruption_target: bool = False  #: DisruptionTarget=True (being preempted or evicted)
    topology: tuple[str, str] = ("", "")  #: ("required"|"preferred", level) of a label group
    #: per-node infrastructure (a DaemonSet's pod, a static pod's mirror): node overhead
    node_overhead: bool = False
    #: what it was read from that a status update leaves as it is: the pod's ``spec`` and
    #: its ``metadata`` ``labels``, ``annotations`` and ``ownerReferences`` as they came;
    #: :func:`pod_info_update` compares them
    source: tuple[Any, ...] | None = field(default=None, compare=False, repr=False)

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

    @property
    def gated(self) -> bool:
        return bool(self.gates)

    @property
    def static_key(self) -> tuple:
        """What the node-only filters read (NodeUnschedulable, NodeAffinity, TaintToleration):
        pods with equal keys have the same candidate nodes before any pod-dependent check."""
        return (self.node_selector, self.node_affinity, self.tolerations)

    @property
    def interpod(self) -> bool:
        """Its placement depends on other pods' placement (and theirs on its): host ports,
        required pod (anti-)affinity or hard topology spread."""
        return bool(self.affinity or self.anti_affinity or self.spread or self.host_ports)


def is_node_overhead(meta: Mapping[str, Any]) -> bool:
    """Whether a pod with this ``metadata`` is per-node infrastructure: its controller is a
    DaemonSet, or it is the mirror of a static pod (the kubelet's annotation, or owned by its
    Node). Such pods are node overhead to the scheduler, never a node's workload.

    >>> is_node_overhead({"ownerReferences": [{"kind": "DaemonSet", "name": "kube-proxy",
    ...                                         "controller": True}]})
    True
    >>> is_node_overhead({"ownerReferences": [{"kind": "ReplicaSet", "name": "web-7d9f",
    ...                                         "controller": True}]})
    False
    """
    if ANNOT_MIRROR in (meta.get("annotations") or {}):
        return True
    for owner in meta.get("ownerReferences") or []:
        kind = owner.get("kind")
        if kind == "Node" or (kind == "DaemonSet" and owner.get("controller")):
            return True
    return False


def pod_request(pod: Mapping[str, Any]) -> Request:
    """Effective request (Kubernetes' rule, see :func:`fluxinfra.kube.resources.pod_requests`)."""
    try:
        return Request.of(pod_requests(pod))
    except FluxinfraError as exc:
        raise PodSpecError(str(exc)) from None


def _terms(raw: Any, where: str, namespace: str) -> tuple[AffinityTerm, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise PodSpecError(f"{where}: {raw!r} is not a list of pod affinity terms")
    out = []
    for i, term in enumerate(raw):
        at = f"{where}[{i}]"
        if not isinstance(term, Mapping) or not term.get("topologyKey"):
            raise PodSpecError(f"{at}.topologyKey: missing; name the node label that forms "
                               "the topology domain (e.g. kubernetes.io/hostname)")
        namespaces = frozenset(term.get("namespaces") or [])
        ns_sel = term.get("namespaceSelector")
        if not namespaces and ns_sel is None:
            namespaces = frozenset([namespace])
        out.append(AffinityTerm(LabelSelector.parse(term.get("labelSelector"),
                                                    f"{at}.labelSelector"),
                                namespaces,
                                LabelSelector.parse(ns_sel, f"{at}.namespaceSelector"),
                                str(term["topologyKey"])))
    return tuple(out)


def _spread(raw: Any, labels: Mapping[str, str]) -> tuple[SpreadConstraint, ...]:
    out = []
    for i, c in enumerate(raw or []):
        at = f"spec.topologySpreadConstraints[{i}]"
        if not isinstance(c, Mapping):
            raise PodSpecError(f"{at}: {c!r} is not a topology spread constraint")
        if c.get("whenUnsatisfiable", "DoNotSchedule") != "DoNotSchedule":
            continue  # ScheduleAnyway only scores
        skew, key = c.get("maxSkew"), c.get("topologyKey")
        if not isinstance(skew, int) or skew < 1 or not key:
            raise PodSpecError(f"{at}: maxSkew {skew!r} / topologyKey {key!r}; give "
                               "maxSkew >= 1 and a node label key")
        selector = LabelSelector.parse(c.get("labelSelector"), f"{at}.labelSelector")
        match_keys = {k: labels[k] for k in c.get("matchLabelKeys") or [] if k in labels}
        if match_keys:
            selector = selector.with_labels(match_keys)
        min_domains = c.get("minDomains")
        if min_domains is not None and (not isinstance(min_domains, int) or min_domains < 1):
            raise PodSpecError(f"{at}.minDomains: {min_domains!r}; give an integer >= 1")
        out.append(SpreadConstraint(int(skew), str(key), selector, int(min_domains or 1),
                                    c.get("nodeAffinityPolicy", "Honor") != "Ignore",
                                    c.get("nodeTaintsPolicy", "Ignore") == "Honor"))
    return tuple(out)


def _host_ports(spec: Mapping[str, Any]) -> tuple[tuple[str, str, int], ...]:
    ports = []
    for container in spec.get("containers") or []:  # NodePorts reads app containers only
        for p in container.get("ports") or []:
            port = int(p.get("hostPort") or 0)
            if port > 0:
                ports.append((p.get("hostIP") or "0.0.0.0", p.get("protocol") or "TCP", port))
    return tuple(ports)


#: volume sources whose placement needs volume binding / topology, which we do not do
_UNSUPPORTED_VOLUMES = ("persistentVolumeClaim", "ephemeral")


def _unsupported(spec: Mapping[str, Any]) -> str:
    for i, vol in enumerate(spec.get("volumes") or []):
        for source in _UNSUPPORTED_VOLUMES:
            if source in vol:
                return (f"spec.volumes[{i}].{source}: volume binding and volume topology are "
                        "not supported by this scheduler; schedule pods with persistent "
                        "volumes with the default scheduler")
    return ""


def _topology(labels: Mapping[str, str], annotations: Mapping[str, str],
              where: str) -> tuple[str, str]:
    required = annotations.get(ANNOT_TOPOLOGY_REQUIRED) or labels.get(ANNOT_TOPOLOGY_REQUIRED)
    preferred = annotations.get(ANNOT_TOPOLOGY_PREFERRED) or labels.get(ANNOT_TOPOLOGY_PREFERRED)
    if required and preferred:
        raise PodSpecError(f"{where}: both {ANNOT_TOPOLOGY_REQUIRED} and "
                           f"{ANNOT_TOPOLOGY_PREFERRED} are set; keep one")
    if required:
        return ("required", required.strip())
    if preferred:
        return ("preferred", preferred.strip())
    return ("", "")


def pod_info(pod: Mapping[str, Any]) -> PodInfo:
    """Parse one pod; raises :class:`PodSpecError` naming the offending field (every field's
    type is checked first, by :func:`check_pod`)."""
    check_pod(pod)
    try:
        return _pod_info(pod)
    except SelectorError as exc:
        raise PodSpecError(str(exc)) from None


def pod_info_update(pod: Mapping[str, Any], previous: PodInfo | None) -> PodInfo:
    """:func:`pod_info` of a pod read before as ``previous``. Most updates a watch brings of
    a pod the scheduler placed are its status (bound, then Running): when the pod's ``spec``
    (but for ``nodeName``, which a bind sets), labels, annotations, owners, identity and
    creation time are those ``previous`` was read from, only its status, ``nodeName`` and
    deletion are read (and checked) again; otherwise the whole pod is. The answer, and the
    error for a field that cannot be read, are those of :func:`pod_info`."""
    source = previous.source if previous is not None else None
    meta = pod.get("metadata") if isinstance(pod, Mapping) else None
    spec = pod.get("spec") if isinstance(pod, Mapping) else None
    status = pod.get("status") if isinstance(pod, Mapping) else None
    if (source is None or not isinstance(meta, Mapping) or not isinstance(spec, Mapping)
            or not (status is None or isinstance(status, Mapping))
            or meta.get("uid") != previous.uid or meta.get("name") != previous.name
            or meta.get("namespace", "default") != previous.namespace
            or meta.get("labels") != source[1] or meta.get("annotations") != source[2]
            or meta.get("ownerReferences") != source[3]
            or parse_time(meta.get("creationTimestamp")) != previous.created
            or not _same_but_node_name(spec, source[0])):
        return pod_info(pod)
    status = status or {}
    try:
        shapes.string(meta.get("generateName"), "metadata.generateName")
        shapes.string(spec.get("nodeName"), "spec.nodeName")
        _check_status(status)
    except shapes.ShapeError as exc:
        raise PodSpecError(str(exc)) from None
    return dataclasses.replace(previous, source=(spec, *source[1:]),
                               **_updated_fields(meta, spec, status))


def _updated_fields(meta: Mapping[str, Any], spec: Mapping[str, Any],
                    status: Mapping[str, Any]) -> dict[str, Any]:
    """The :class:`PodInfo` fields a status update may change (its ``nodeName``, status and
    deletion), read alike by :func:`pod_info` and :func:`pod_info_update`."""
    conditions = status.get("conditions") or []
    scheduled = next((c for c in conditions if c.get("type") == "PodScheduled"), {})
    return {
        "node_name": spec.get("nodeName") or "",
        "phase": status.get("phase") or "Pending",
        "started": parse_time(status.get("startTime")),
        "deleting": bool(meta.get("deletionTimestamp")),
        "nominated_node": status.get("nominatedNodeName") or "",
        "condition": (str(scheduled.get("status", "")), str(scheduled.get("reason", "")),
                      str(scheduled.get("message", ""))),
        "disruption_target": any(c.get("type") == "DisruptionTarget"
                                 and c.get("status") == "True" for c in conditions),
    }


def _same_but_node_name(spec: Mapping[str, Any], before: Mapping[str, Any]) -> bool:
    if spec == before:
        return True
    return len(spec.keys() - {"nodeName"}) == len(before.keys() - {"nodeName"}) and all(
        k == "nodeName" or before.get(k, _ABSENT) == v for k, v in spec.items())


_ABSENT = object()


def _pod_info(pod: Mapping[str, Any]) -> PodInfo:
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    status = pod.get("status") or {}
    labels = dict(meta.get("labels") or {})
    annotations = dict(meta.get("annotations") or {})
    name, namespace = meta.get("name", ""), meta.get("namespace", "default")
    affinity = spec.get("affinity") or {}
    node_aff = (affinity.get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution")
    pod_aff = affinity.get("podAffinity") or {}
    anti_aff = affinity.get("podAntiAffinity") or {}
    info = PodInfo(
        uid=str(meta.get("uid") or f"{namespace}/{name}"),
        namespace=namespace, name=name,
        scheduler_name=spec.get("schedulerName") or "default-scheduler",
        request=pod_request(pod),
        priority=int(spec.get("priority") or 0),
        created=parse_time(meta.get("creationTimestamp")),
        labels=labels,
        annotations=annotations,
        gates=tuple(str(g.get("name", "")) for g in spec.get("schedulingGates") or []),
        node_selector=tuple(sorted((str(k), str(v))
                                   for k, v in (spec.get("nodeSelector") or {}).items())),
        node_affinity=(NodeSelector.parse(node_aff, "spec.affinity.nodeAffinity."
                                          "requiredDuringSchedulingIgnoredDuringExecution")
                       if node_aff is not None else None),
        tolerations=tuple(Toleration.parse(t, f"spec.tolerations[{i}]")
                          for i, t in enumerate(spec.get("tolerations") or [])),
        affinity=_terms(pod_aff.get("requiredDuringSchedulingIgnoredDuringExecution"),
                        "spec.affinity.podAffinity.requiredDuringSchedulingIgnoredDuring"
                        "Execution", namespace),
        anti_affinity=_terms(anti_aff.get("requiredDuringSchedulingIgnoredDuringExecution"),
                             "spec.affinity.podAntiAffinity.requiredDuringScheduling"
                             "IgnoredDuringExecution", namespace),
        spread=_spread(spec.get("topologySpreadConstraints"), labels),
        host_ports=_host_ports(spec),
        preempt_never=spec.get("preemptionPolicy") == "Never",
        unsupported=_unsupported(spec),
        node_overhead=is_node_overhead(meta),
        **_updated_fields(meta, spec, status),
        source=(spec, meta.get("labels"), meta.get("annotations"), meta.get("ownerReferences")),
    )
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
        info.topology = _topology(labels, annotations, "metadata.annotations")
    if ANNOT_DURATION in annotations:
        info.duration = parse_duration(annotations[ANNOT_DURATION])
    return info


@dataclass(frozen=True)
class PodGroupSpec:
    """What the scheduler reads from a scheduler-plugins PodGroup."""

    min_member: int
    min_resources: Request = Request()
    schedule_timeout: int = 0           #: seconds; 0 = the scheduler's default
    topology: tuple[str, str] = ("", "")


def podgroup_spec(obj: Mapping[str, Any]) -> PodGroupSpec:
    """Parse a PodGroup; raises :class:`PodSpecError` naming the field and the fix."""
    key = f"PodGroup {object_key(obj)}"
    try:
        meta = shapes.mapping(obj.get("metadata"), f"{key}: metadata")
        spec = shapes.mapping(obj.get("spec"), f"{key}: spec")
        labels = shapes.string_map(meta.get("labels"), f"{key}: metadata.labels")
        annotations = shapes.string_map(meta.get("annotations"), f"{key}: metadata.annotations")
        min_res = Request.of(shapes.quantity_map(spec.get("minResources"),
                                                 f"{key}: spec.minResources"))
    except shapes.ShapeError as exc:
        raise PodSpecError(str(exc)) from None
    raw = spec.get("minMember")
    if isinstance(raw, bool) or not isinstance(raw, (int, float)) or not math.isfinite(raw) \
            or int(raw) != raw or not 1 <= raw <= _MAX_COUNT:
        raise PodSpecError(f"{key}: spec.minMember is {shapes.shown(raw)}; set it to the number "
                           f"of pods that must start together (1 to {_MAX_COUNT})")
    timeout = spec.get("scheduleTimeoutSeconds") or 0
    if isinstance(timeout, bool) or not isinstance(timeout, int) or not 0 <= timeout < HORIZON:
        raise PodSpecError(f"{key}: spec.scheduleTimeoutSeconds is {shapes.shown(timeout)}; "
                           "give whole seconds >= 1")
    topology = _topology(labels, annotations, f"{key}: metadata.annotations")
    return PodGroupSpec(int(raw), min_res, int(timeout), topology)


def object_key(obj: Any) -> str:
    """``namespace/name`` of an object for messages, whatever its shape (``?`` for a part
    that is missing or not a string)."""
    meta = obj.get("metadata") if isinstance(obj, Mapping) else None
    if not isinstance(meta, Mapping):
        return "?/?"
    namespace, name = meta.get("namespace", "default"), meta.get("name")
    return (f"{namespace if isinstance(namespace, str) else '?'}/"
            f"{name if isinstance(name, str) and name else '?'}")


def object_identity(obj: Any, kind: str) -> tuple[str, str, str]:
    """``(namespace, name, uid)`` of a namespaced object; raises :class:`PodSpecError` when
    they cannot be read (then nothing can be attached to it, not even an Event)."""
    try:
        if not isinstance(obj, Mapping):
            raise shapes.ShapeError(f"{kind}: {shapes.shown(obj)} is not an object")
        meta = obj.get("metadata")
        if not isinstance(meta, Mapping):
            raise shapes.ShapeError(f"{kind} {object_key(obj)}: metadata: "
                                    f"{shapes.shown(meta)} is not an object")
        name = shapes.string(meta.get("name"), f"{kind} {object_key(obj)}: metadata.name",
                             required=True)
        namespace = shapes.string(meta.get("namespace"),
                                  f"{kind} {object_key(obj)}: metadata.namespace") or "default"
        uid = shapes.string(meta.get("uid"), f"{kind} {object_key(obj)}: metadata.uid")
    except shapes.ShapeError as exc:
        raise PodSpecError(str(exc)) from None
    return namespace, name, uid


#: the largest group or priority a pod may declare (int32, as the API's fields are)
_MAX_COUNT = 2**31 - 1


def check_pod(pod: Any) -> None:
    """Check the type of every field :func:`pod_info` (and the webhook) reads; raises
    :class:`PodSpecError` naming the first that is wrong. Values are checked by the readers
    themselves (selectors, durations, group sizes)."""
    try:
        _check_pod(pod)
    except shapes.ShapeError as exc:
        raise PodSpecError(str(exc)) from None


def _check_pod(pod: Any) -> None:
    if not isinstance(pod, Mapping):
        raise shapes.ShapeError(f"pod: {shapes.shown(pod)} is not an object")
    meta, spec, status = (shapes.mapping(pod.get(k), k) for k in ("metadata", "spec", "status"))
    for key in ("name", "generateName", "namespace", "uid"):
        # a pod being created may have no name yet (generateName): the core requires one
        shapes.string(meta.get(key), f"metadata.{key}")
    shapes.string_map(meta.get("labels"), "metadata.labels")
    shapes.string_map(meta.get("annotations"), "metadata.annotations")
    for i, owner in enumerate(shapes.mappings(meta.get("ownerReferences"),
                                              "metadata.ownerReferences")):
        shapes.string(owner.get("kind"), f"metadata.ownerReferences[{i}].kind")
        shapes.string(owner.get("name"), f"metadata.ownerReferences[{i}].name")
        shapes.boolean(owner.get("controller"), f"metadata.ownerReferences[{i}].controller")
    for key in ("schedulerName", "nodeName", "preemptionPolicy", "priorityClassName"):
        shapes.string(spec.get(key), f"spec.{key}")
    shapes.integer(spec.get("priority"), "spec.priority", low=-_MAX_COUNT - 1, high=_MAX_COUNT)
    for i, gate in enumerate(shapes.mappings(spec.get("schedulingGates"),
                                             "spec.schedulingGates")):
        shapes.string(gate.get("name"), f"spec.schedulingGates[{i}].name", required=True)
    shapes.string_map(spec.get("nodeSelector"), "spec.nodeSelector")
    affinity = shapes.mapping(spec.get("affinity"), "spec.affinity")
    for kind in ("nodeAffinity", "podAffinity", "podAntiAffinity"):
        terms = shapes.mapping(affinity.get(kind), f"spec.affinity.{kind}")
        if kind != "nodeAffinity":
            where = f"spec.affinity.{kind}.requiredDuringSchedulingIgnoredDuringExecution"
            for i, term in enumerate(shapes.mappings(
                    terms.get("requiredDuringSchedulingIgnoredDuringExecution"), where)):
                shapes.string_list(term.get("namespaces"), f"{where}[{i}].namespaces")
                shapes.string(term.get("topologyKey"), f"{where}[{i}].topologyKey")
    shapes.mappings(spec.get("tolerations"), "spec.tolerations")
    for i, c in enumerate(shapes.mappings(spec.get("topologySpreadConstraints"),
                                          "spec.topologySpreadConstraints")):
        where = f"spec.topologySpreadConstraints[{i}]"
        shapes.string_list(c.get("matchLabelKeys"), f"{where}.matchLabelKeys")
        for key in ("topologyKey", "whenUnsatisfiable", "nodeAffinityPolicy",
                    "nodeTaintsPolicy"):
            shapes.string(c.get(key), f"{where}.{key}")
    for field_name in ("containers", "initContainers"):
        for i, container in enumerate(shapes.mappings(spec.get(field_name),
                                                      f"spec.{field_name}")):
            where = f"spec.{field_name}[{i}]"
            shapes.string(container.get("restartPolicy"), f"{where}.restartPolicy")
            resources = shapes.mapping(container.get("resources"), f"{where}.resources")
            shapes.quantity_map(resources.get("requests"), f"{where}.resources.requests")
            shapes.quantity_map(resources.get("limits"), f"{where}.resources.limits")
            for j, port in enumerate(shapes.mappings(container.get("ports"), f"{where}.ports")):
                shapes.integer(port.get("hostPort"), f"{where}.ports[{j}].hostPort", low=0,
                               high=65535)
                shapes.string(port.get("hostIP"), f"{where}.ports[{j}].hostIP")
                shapes.string(port.get("protocol"), f"{where}.ports[{j}].protocol")
    resources = shapes.mapping(spec.get("resources"), "spec.resources")
    shapes.quantity_map(resources.get("requests"), "spec.resources.requests")
    shapes.quantity_map(spec.get("overhead"), "spec.overhead")
    shapes.mappings(spec.get("volumes"), "spec.volumes")
    _check_status(status)


def _check_status(status: Mapping[str, Any]) -> None:
    shapes.string(status.get("phase"), "status.phase")
    shapes.string(status.get("nominatedNodeName"), "status.nominatedNodeName")
    for i, condition in enumerate(shapes.mappings(status.get("conditions"),
                                                  "status.conditions")):
        for key in ("type", "status", "reason", "message"):
            shapes.string(condition.get(key), f"status.conditions[{i}].{key}")
