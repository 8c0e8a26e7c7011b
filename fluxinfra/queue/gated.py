"""The gated-pods integration: pods that exist already, held by the queue's scheduling gate.

Mirrors Kueue's ``pkg/controller/jobs/pod`` (plain pods and pod groups gated with
``kueue.x-k8s.io/admission``, un-gated when admitted).

A bare pod, a PodGroup's members, a label group, the pods of a JobSet and the like get the gate
``fluxinfra.io/queue`` from the webhook. Their FluxJob (``pod-<name>``, ``podgroup-<name>`` or
``group-<name>``) is made from the group's first pod. Handed over, the core is shown the pods
without our gate (other gates still count), in the FluxJob's FCFS place; when the core binds
them, the queue removes the gate (a JSON patch guarded by a ``test`` op, so it removes only
ours) and binds the pod to the node the core chose (:meth:`GatedPods.ungate_and_bind`): binding
a gated pod is refused by the API server, so the order is fixed. A finished pod releases its
share at once (the core's partial cancel).
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Callable
from typing import Any

from fluxinfra.kube import fluxjob as q
from fluxinfra.kube.resources import pod_requests
from fluxinfra.queue.context import QueueContext
from fluxinfra.queue.placement import jobspec_text
from fluxinfra.queue.workload import (
    TERMINAL_PHASES,
    Unit,
    gated,
    meta,
    quantities,
    short,
)
from fluxinfra.scheduler.events import micro_time, parse_time
from fluxinfra.scheduler.kube import ApiError
from fluxinfra.scheduler.pods import (
    LABEL_GROUP,
    LABEL_GROUP_SIZE,
    LABEL_PODGROUP,
    PodInfo,
    PodSpecError,
    pod_info,
)

__all__ = ["GatedPods", "gated_group"]


class GatedPods:
    """The :class:`~fluxinfra.queue.workload.Integration` of gated pods and groups."""

    kind = "pods"

    def __init__(self, ctx: QueueContext) -> None:
        self.ctx = ctx
        self.books = ctx.books
        self.states = ctx.states
        self.ungate: set[str] = set()                 # gated pods handed to the core
        # what a cycle looks at, kept as it changes (a cycle costs what changed):
        self.new_groups: set[str] = set()             # gated groups that may need a FluxJob
        self._index: dict[str, set[str]] = {}         # gated group -> pods not in a unit yet
        self._group_of: dict[str, str] = {}           # pod uid -> its key in _index
        self._seq = itertools.count(1)
        self._seen: dict[str, int] = {}               # gated group -> arrival number

    def handed(self, uid: str) -> bool:
        """A gated pod the core was shown (its bind un-gates it first)."""
        return uid in self.ungate

    # ==== groups waiting for a FluxJob ===========================================================
    def index(self, uid: str, etype: str, pod: dict[str, Any]) -> None:
        """Keep the index of gated pods in no unit yet, by their group."""
        old = self._group_of.pop(uid, None)
        if old is not None:
            members = self._index.get(old)
            if members is not None:
                members.discard(uid)
                if not members:
                    del self._index[old]
                    self._seen.pop(old, None)
        if etype != "DELETED" and uid not in self.books.pod_unit and gated(pod):
            group = gated_group(pod)
            if group not in self._index:
                self._seen[group] = next(self._seq)
            self._index.setdefault(group, set()).add(uid)
            self._group_of[uid] = group
            self.new_groups.add(group)

    def _waiting_pods(self, group_key: str) -> list[dict[str, Any]]:
        """The group's gated pods still waiting (not finished, not being deleted). A pod
        without a uid (none the API server hands out) cannot be named by its FluxJob's
        ownerReferences, so it is left out."""
        pods = []
        for uid in self._index.get(group_key, ()):
            pod = self.books.pods.get(uid)
            if (pod is not None and uid not in self.books.pod_unit and gated(pod)
                    and isinstance(meta(pod).get("uid"), str) and meta(pod)["uid"]
                    and (pod.get("status") or {}).get("phase") not in TERMINAL_PHASES
                    and not meta(pod).get("deletionTimestamp")):
                pods.append(pod)
        return pods

    def new_fluxjobs(self, busy: Callable[[str], bool],
                     queued_at: Callable[[], str]) -> list[dict[str, Any]]:
        bodies = []
        for group_key in sorted(self.new_groups, key=lambda key: self._seen.get(key, 0)):
            if busy(group_key):
                continue
            pods = self._waiting_pods(group_key)
            if pods:
                bodies.append(self._fluxjob(group_key, pods, queued_at))
        self.new_groups.clear()
        return bodies

    def create_failed(self, owner: str) -> None:
        self.new_groups.add(owner)

    def _fluxjob(self, group_key: str, pods: list[dict[str, Any]],
                 queued_at: Callable[[], str]) -> dict[str, Any]:
        first = min(pods, key=lambda p: (parse_time(meta(p).get("creationTimestamp")),
                                         meta(p).get("name", "")))
        m = meta(first)
        labels = m.get("labels") or {}
        kind, name = _group_kind_name(first)
        count = len(pods) if kind == "pod" else max(len(pods), _group_size(first))
        requests = pod_requests(first)
        duration = self.ctx.duration(m.get("annotations") or {})
        owner = {"apiVersion": "v1", "kind": "Pod" if kind == "pod" else "PodGroup"
                 if kind == "podgroup" else "Group", "name": name, "uid": group_key}
        refs = [{"apiVersion": "v1", "kind": "Pod", "name": meta(p)["name"],
                 "uid": meta(p)["uid"], "blockOwnerDeletion": False} for p in pods]
        body = q.fluxjob_object(
            m.get("namespace", ""), q.fluxjob_name(kind, name), owners=refs,
            queue=labels.get(q.LABEL_QUEUE_NAME, q.DEFAULT_QUEUE),
            pod_sets=[{"name": name, "count": count, "requests": quantities(requests)}],
            priority=self.ctx.priority(first.get("spec") or {}), duration=duration,
            jobspec=jobspec_text(first, count, duration), queued_at=queued_at())
        body["spec"]["owner"] = owner
        return body

    def adopt(self, unit: Unit) -> None:
        """Its FluxJob appeared: the group's gated pods become its members."""
        for uid in self._index.pop(unit.owner_uid, set()):
            self._group_of.pop(uid, None)
            if gated(self.books.pods.get(uid) or {}):
                unit.members.add(uid)
                self.books.attach(uid, unit)

    # ==== pods ===================================================================================
    def claim(self, uid: str, pod: dict[str, Any]) -> Unit | None:
        unit = self.books.owned_by(gated_group(pod))
        if unit is not None:
            self.books.attach(uid, unit)
            unit.members.add(uid)
        return unit

    def on_pod(self, unit: Unit, uid: str, etype: str, obj: dict[str, Any], now: int) -> None:
        feed = self.ctx.core.pod
        if etype == "DELETED":
            self.books.detach(uid)
            unit.members.discard(uid)
            self.ungate.discard(uid)
            feed(etype, obj, now)
        elif gated(obj):
            if unit.fed:
                self.ungate.add(uid)
                feed(etype, _without_gate(obj, unit.created), now)
        else:
            self.ungate.discard(uid)
            feed(etype, obj, now)
        self._update_state(unit)

    def _update_state(self, unit: Unit) -> None:
        if unit.state in ("Finished", "Failed") and not self.states.waiting(unit):
            return
        phases = [(self.books.pods.get(uid) or {}).get("status", {}).get("phase", "Pending")
                  for uid in unit.members]
        placed = [(self.books.pods.get(uid) or {}).get("spec", {}).get("nodeName", "")
                  for uid in unit.members]
        if not unit.members:
            return
        if all(p in TERMINAL_PHASES for p in phases):
            if "Failed" in phases:
                self.states.finish(unit, "Failed", "PodFailed", "a pod failed")
            else:
                self.states.finish(unit, "Finished", "Succeeded", "its pods succeeded")
        elif all(placed) and self.states.waiting(unit):
            self.states.admit(unit, placed, f"on {short(placed)}")
        if any(p == "Running" for p in phases):
            self.states.running(unit)

    # ==== handing over, binding ==================================================================
    def hand_over(self, unit: Unit, now: int) -> bool:
        unit.fed = True
        for uid in list(unit.members):
            pod = self.books.pods.get(uid)
            if pod is not None and gated(pod):
                self.ungate.add(uid)
                self.ctx.core.pod("ADDED", _without_gate(pod, unit.created), now)
        return True

    def core_group(self, unit: Unit) -> str:
        if not unit.core_group and unit.members:
            pod = self.books.pods.get(next(iter(unit.members)))
            if pod is not None:
                try:
                    unit.core_group = pod_info(pod).group_key
                except PodSpecError:
                    unit.core_group = "-"
        return unit.core_group

    def ungate_and_bind(self, pod: PodInfo, node: str) -> Exception | None:
        """A gated pod the core placed: remove the gate (guarded), then bind it."""
        obj = self.books.pods.get(pod.uid)
        if obj is not None and gated(obj):
            gates = obj["spec"]["schedulingGates"]
            index = next(i for i, g in enumerate(gates) if g.get("name") == q.GATE)
            ops = [{"op": "test", "path": f"/spec/schedulingGates/{index}/name",
                    "value": q.GATE},
                   {"op": "remove", "path": f"/spec/schedulingGates/{index}"}]
            try:
                self.ctx.api.patch_pod(pod.namespace, pod.name, ops)
            except ApiError as exc:
                return exc
        try:
            self.ctx.api.bind(pod.namespace, pod.name, pod.uid, node)
        except ApiError as exc:
            return exc
        return None

    # ==== releasing ==============================================================================
    def release_all(self, unit: Unit, now: int) -> None:
        for uid in list(unit.members):
            if uid in self.ungate:  # handed to the core but never placed
                self.ungate.discard(uid)
                pod = self.books.pods.get(uid)
                if pod is not None and gated(pod):
                    self.ctx.core.pod("DELETED", pod, now)

    def forget(self, unit: Unit, now: int) -> None:
        for uid in list(unit.attached):
            self.books.detach(uid)
            pod = self.books.pods.get(uid)
            if pod is not None and gated(pod):
                if uid in self.ungate:
                    self.ctx.core.pod("DELETED", pod, now)
                self.ungate.discard(uid)
                self.index(uid, "MODIFIED", pod)  # a new FluxJob, at the back


def _without_gate(pod: dict[str, Any], queued: float) -> dict[str, Any]:
    """The pod as the core sees it while queued: without our gate, in the FluxJob's place in
    FCFS order (creationTimestamp counts whole seconds; queuedAt microseconds)."""
    shown = copy.copy(pod)
    shown["metadata"] = {**meta(pod), "creationTimestamp": micro_time(queued)}
    spec = dict(pod.get("spec") or {})
    spec["schedulingGates"] = [g for g in spec.get("schedulingGates") or []
                               if g.get("name") != q.GATE]
    if not spec["schedulingGates"]:
        del spec["schedulingGates"]
    shown["spec"] = spec
    return shown


def _group_kind_name(pod: dict[str, Any]) -> tuple[str, str]:
    m = meta(pod)
    labels = m.get("labels") or {}
    if labels.get(LABEL_PODGROUP):
        return "podgroup", labels[LABEL_PODGROUP]
    if labels.get(LABEL_GROUP):
        return "group", labels[LABEL_GROUP]
    return "pod", m.get("name", "")


def gated_group(pod: dict[str, Any]) -> str:
    """The key a gated pod's FluxJob is owned by: its PodGroup, label group, or itself."""
    kind, name = _group_kind_name(pod)
    return f"{kind}:{meta(pod).get('namespace', '')}/{name}"


def _group_size(pod: dict[str, Any]) -> int:
    try:
        return int((meta(pod).get("labels") or {}).get(LABEL_GROUP_SIZE) or 1)
    except ValueError:
        return 1
