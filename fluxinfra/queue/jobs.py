"""The suspended-Job integration: a batch/v1 Job queued whole, placed by the core as slot pods.

Mirrors Kueue's ``pkg/controller/jobs/job`` (the ``GenericJob`` of a batch/v1 Job: suspended
until admitted, run with its pod sets' placement, stopped when it ends).

A suspended Job has no pods yet. Handed over (:meth:`SuspendedJobs.hand_over`), the core gets
``count`` *slot pods* (the Job's pod template, one label group of ``count``), so it matches the
Job whole with the scheduler's own conversion of every request, its filters, priorities, FCFS and
EASY backfill. "Binding" a slot pod only records its node (:meth:`~SuspendedJobs.slot_placed`).
When every slot has one, the Job is admitted (:meth:`~SuspendedJobs.admit`): one merge patch
sets ``suspend: false``, pins the pod template to the chosen nodes (required node affinity on
``metadata.name``, allowed on a suspended Job that never ran) and records the nodes
(``fluxinfra.io/admitted-nodes``). The Job controller then makes the pods; the queue binds each
to a free slot's node (:meth:`~SuspendedJobs.bind_pods`) and from then on shows it to the core
*as* that slot (same uid, same node, same request): the allocation Fluxion made at admission is
the one the pod holds, never a second one.

Releasing: a finished pod releases its slot unless the Job will start another pod in its place
(``min(parallelism, completions - succeeded)`` still to run, :func:`still_needed`); a Job that
completes, fails or is deleted releases every slot. Restart: an admitted Job's slots are rebuilt
from its ``fluxinfra.io/admitted-nodes`` as running slot pods on those nodes
(:meth:`~SuspendedJobs.restore`), its running pods shown as those slots, nothing matched again.
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
    Slot,
    Unit,
    controller_ref,
    key_of,
    log,
    meta,
    quantities,
    short,
)
from fluxinfra.scheduler.events import micro_time
from fluxinfra.scheduler.kube import ApiError
from fluxinfra.scheduler.pods import ANNOT_DURATION, LABEL_GROUP, LABEL_GROUP_SIZE, LABEL_PODGROUP

__all__ = ["SLOT_PREFIX", "SuspendedJobs", "job_pods", "still_needed"]

#: the uid prefix of a slot pod (the core's name for one placement of a Job's pod)
SLOT_PREFIX = "fluxjob-slot:"


def job_pods(job: dict[str, Any]) -> int:
    """How many pods a Job runs at once: its ``parallelism``, at most its ``completions``."""
    spec = job.get("spec") or {}
    parallelism = spec.get("parallelism")
    parallelism = 1 if parallelism is None else int(parallelism)
    completions = spec.get("completions")
    return parallelism if completions is None else min(parallelism, int(completions))


def still_needed(job: dict[str, Any]) -> int:
    """Pods the Job may still start at once (its pods holding a slot included)."""
    spec, status = job.get("spec") or {}, job.get("status") or {}
    if _condition(job, "Complete") or _condition(job, "Failed"):
        return 0
    parallelism = 1 if spec.get("parallelism") is None else int(spec["parallelism"])
    succeeded = int(status.get("succeeded") or 0)
    completions = spec.get("completions")
    if completions is None:  # a work queue: no new pods once one succeeded
        return parallelism if succeeded == 0 else 0
    return max(0, min(parallelism, int(completions) - succeeded))


def slot_uid(unit: Unit, index: int) -> str:
    return f"{SLOT_PREFIX}{unit.uid}:{index}"


class SuspendedJobs:
    """The :class:`~fluxinfra.queue.workload.Integration` of suspended batch/v1 Jobs."""

    kind = "job"

    def __init__(self, ctx: QueueContext) -> None:
        self.ctx = ctx
        self.books = ctx.books
        self.states = ctx.states
        self.jobs: dict[str, dict[str, Any]] = {}     # Job uid -> Job
        self.shown: dict[str, str] = {}               # real pod uid -> uid the core knows it by
        self.slot_pods: dict[str, tuple[str, int]] = {}  # slot uid -> (unit key, index)
        self.restored: set[str] = set()               # admitted units rebuilt at start-up
        self.binding: dict[str, Slot] = {}            # pod uid -> slot it is being bound to
        # what a cycle looks at, kept as it changes (a cycle costs what changed):
        self.new_jobs: set[str] = set()               # Job uids that may need a FluxJob
        self.to_admit: set[str] = set()               # Job units whose slots were placed
        self.unbound: dict[str, None] = {}            # pods of admitted Jobs waiting for a bind
        self._seq = itertools.count(1)
        self._seen: dict[str, int] = {}               # Job uid -> arrival number

    # ==== Jobs ===================================================================================
    def on_job(self, etype: str, job: dict[str, Any], now: int) -> None:
        uid = str(meta(job).get("uid", ""))
        if etype == "DELETED":
            self.jobs.pop(uid, None)
            self.new_jobs.discard(uid)
            self._seen.pop(uid, None)
            unit = self.books.owned_by(uid)
            if unit is not None:
                self.ctx.release_all(unit, now)
                self.states.finish(unit, "Failed" if unit.state not in ("Finished", "Failed")
                                   else unit.state, "JobDeleted", "the Job was deleted")
            return
        if uid not in self.jobs:
            self._seen[uid] = next(self._seq)
        self.jobs[uid] = job
        unit = self.books.owned_by(uid)
        if unit is None:
            self.new_jobs.add(uid)  # the next cycle sees whether it needs a FluxJob
            return
        if _condition(job, "Complete"):
            self.ctx.release_all(unit, now)
            self.states.finish(unit, "Finished", "JobComplete", "the Job completed")
        elif _condition(job, "Failed"):
            self.ctx.release_all(unit, now)
            reason = next((c.get("reason") for c in job["status"]["conditions"]
                           if c.get("type") == "Failed"), "") or "JobFailed"
            self.states.finish(unit, "Failed", reason, "the Job failed")
        else:
            self._retain(unit, now)

    @staticmethod
    def _ours(job: dict[str, Any]) -> bool:
        """A Job the webhook queued: labelled with a queue, not run by another controller."""
        queue = (meta(job).get("labels") or {}).get(q.LABEL_QUEUE_NAME)
        owner = controller_ref(job).get("kind")
        return bool(queue) and queue != q.OPT_OUT_VALUE and owner in (None, "CronJob")

    def new_fluxjobs(self, busy: Callable[[str], bool],
                     queued_at: Callable[[], str]) -> list[dict[str, Any]]:
        bodies = []
        # only Jobs that changed since (a Job's next event brings it back)
        for uid in sorted(self.new_jobs, key=lambda uid: self._seen.get(uid, 0)):
            job = self.jobs.get(uid)
            if job is None or busy(uid):
                continue
            spec = job.get("spec") or {}
            annotations = meta(job).get("annotations") or {}
            if (not self._ours(job) or not spec.get("suspend")
                    or q.ANNOT_ADMITTED_NODES in annotations):
                continue
            bodies.append(self._fluxjob(job, queued_at))
        self.new_jobs.clear()
        return bodies

    def create_failed(self, owner: str) -> None:
        self.new_jobs.add(owner)

    def _fluxjob(self, job: dict[str, Any], queued_at: Callable[[], str]) -> dict[str, Any]:
        m = meta(job)
        template = (job.get("spec") or {}).get("template") or {}
        pod = self._template_pod(job, "probe")
        count = job_pods(job)
        requests = pod_requests(pod)
        duration = self.ctx.duration((template.get("metadata") or {}).get("annotations") or {})
        owner = {"apiVersion": "batch/v1", "kind": "Job", "name": m["name"], "uid": m["uid"]}
        body = q.fluxjob_object(
            m.get("namespace", ""), q.fluxjob_name("Job", m["name"]),
            owners=[{**owner, "controller": True, "blockOwnerDeletion": False}],
            queue=(m.get("labels") or {}).get(q.LABEL_QUEUE_NAME, q.DEFAULT_QUEUE),
            pod_sets=[{"name": "main", "count": count, "requests": quantities(requests)}],
            priority=self.ctx.priority(template.get("spec") or {}), duration=duration,
            jobspec=jobspec_text(pod, count, duration), queued_at=queued_at())
        body["spec"]["owner"] = owner
        return body

    def _template_pod(self, job: dict[str, Any], name: str) -> dict[str, Any]:
        template = (job.get("spec") or {}).get("template") or {}
        tmeta = template.get("metadata") or {}
        # one level deep: the queue sets top-level fields only; the core only reads the rest
        return {"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": name, "namespace": meta(job).get("namespace", ""),
                             "labels": dict(tmeta.get("labels") or {}),
                             "annotations": dict(tmeta.get("annotations") or {})},
                "spec": dict(template.get("spec") or {}), "status": {"phase": "Pending"}}

    def adopt(self, unit: Unit) -> None:
        if self.ctx.core.loaded:
            self.restore(unit)

    # ==== pods ===================================================================================
    def claim(self, uid: str, pod: dict[str, Any]) -> Unit | None:
        """A pod of one of our Jobs: filed under its unit once the Job's slots exist."""
        unit = self.books.owned_by(controller_ref(pod).get("uid", ""))
        if unit is not None and unit.slots:
            self.books.attach(uid, unit)
            return unit
        return None

    def on_pod(self, unit: Unit, uid: str, etype: str, obj: dict[str, Any], now: int) -> None:
        slot = next((s for s in unit.slots if s.pod == uid), None)
        phase = (obj.get("status") or {}).get("phase")
        node = (obj.get("spec") or {}).get("nodeName") or ""
        feed = self.ctx.core.pod
        if etype == "DELETED" or phase in TERMINAL_PHASES:
            if etype == "DELETED":
                self.books.detach(uid)
            self.unbound.pop(uid, None)
            if slot is not None:
                slot.pod = ""
                self._retain(unit, now, finished=slot)
            elif uid in self.shown:
                feed(etype, obj, now)
            self._update_state(unit)
            return
        if slot is None and node:
            pending = self.binding.get(uid)  # our bind, seen on the watch before it returned
            if pending is not None and pending.node == node and not (pending.pod
                                                                     or pending.released):
                slot = pending
            else:  # bound by someone else: a free slot on its node no bind of ours is taking
                others = {id(s) for u, s in self.binding.items() if u != uid}
                slot = next((s for s in unit.slots if not s.released and not s.pod
                             and s.node == node and id(s) not in others), None)
            if slot is None:  # bound where no slot is: count it as what it is
                if any(not s.released for s in unit.slots):
                    log.warning("pod %s of %s runs on %s outside its slots", key_of(obj),
                                unit.key, node)
                # else its Job ended or went, and its slots with it: a pod still ending
                # counts as itself, as the release said
                self.shown[uid] = uid
                feed(etype, obj, now)
                return
            slot.pod = uid
        if slot is not None:
            self.unbound.pop(uid, None)
            self.shown[uid] = slot_uid(unit, slot.index)
            feed("MODIFIED", self._as_slot(unit, slot, obj), now)
        elif not node:
            self.unbound[uid] = None  # the Job controller's new pod: to a slot's node
        self._update_state(unit)

    def _update_state(self, unit: Unit) -> None:
        if unit.state in ("Finished", "Failed", "Queued", "Reserved") or not unit.placed:
            return
        if any(self.books.phase(s.pod) == "Running" for s in unit.slots if s.pod):
            self.states.running(unit)

    # ==== slot pods ==============================================================================
    def _slot_labels(self, unit: Unit, labels: dict[str, str]) -> dict[str, str]:
        labels = {k: v for k, v in labels.items() if k not in (LABEL_PODGROUP, LABEL_GROUP,
                                                               LABEL_GROUP_SIZE)}
        labels.update({LABEL_GROUP: unit.group, LABEL_GROUP_SIZE: str(unit.count),
                       q.LABEL_FLUXJOB: unit.name})
        return labels

    def _slot_pod(self, unit: Unit, slot: Slot) -> dict[str, Any] | None:
        """The pod the core sees for an empty slot: the Job's template, placed or not."""
        job = self.jobs.get(unit.owner_uid)
        if job is None:
            return None
        pod = self._template_pod(job, f"{unit.name}-slot-{slot.index}")
        m, spec = pod["metadata"], pod["spec"]
        m["uid"] = slot_uid(unit, slot.index)
        m["creationTimestamp"] = micro_time(unit.created)
        m["labels"] = self._slot_labels(unit, m["labels"])
        m["annotations"][ANNOT_DURATION] = f"{unit.duration}s"
        spec["schedulerName"] = self.ctx.config.scheduler_name
        spec["priority"] = unit.priority
        spec.pop("schedulingGates", None)
        if slot.node:
            spec["nodeName"] = slot.node
            pod["status"]["phase"] = "Running"
        self.slot_pods[m["uid"]] = (unit.key, slot.index)
        return pod

    def _as_slot(self, unit: Unit, slot: Slot, pod: dict[str, Any]) -> dict[str, Any]:
        """A real pod shown to the core as the slot it took: same uid and group as the slot."""
        shown = copy.copy(pod)
        m = dict(meta(pod))
        m["uid"] = slot_uid(unit, slot.index)
        m["labels"] = self._slot_labels(unit, dict(m.get("labels") or {}))
        shown["metadata"] = m
        return shown

    def unit_of_slot(self, uid: str) -> Unit | None:
        """The unit of a slot pod (None: ``uid`` is not a live slot)."""
        if uid not in self.slot_pods:
            return None
        return self.books.units.get(self.slot_pods[uid][0])

    def slot_placed(self, uid: str, node: str) -> None:
        """The core "bound" a slot pod: its node is recorded, the Job admitted next."""
        key, index = self.slot_pods[uid]
        unit = self.books.units.get(key)
        if unit is not None:
            unit.slots[index].node = node
            self.to_admit.add(key)

    def restore(self, unit: Unit) -> None:
        """An admitted Job's slots from its annotation (restart, or a FluxJob seen late)."""
        if unit.slots:
            return
        job = self.jobs.get(unit.owner_uid)
        nodes = ((meta(job).get("annotations") or {}).get(q.ANNOT_ADMITTED_NODES, "")
                 if job else "")
        if not nodes:
            return
        unit.slots = [Slot(i, n) for i, n in enumerate(nodes.split(","))]
        unit.fed = True
        self.states.unfed.discard(unit.key)
        self.books.by_group[self.core_group(unit)] = unit.key
        if unit.state in ("Queued", "Reserved"):  # admitted, but the status never said so
            self.states.admitted_before(unit, [s.node for s in unit.slots])
        for slot in unit.slots:
            self.slot_pods[slot_uid(unit, slot.index)] = (unit.key, slot.index)
        # running pods take their slots (on_pod); what no pod took is held as a running slot
        self.restored.add(unit.key)

    def hold_restored(self, now: int) -> None:
        """The slots of the Jobs rebuilt since that no running pod took: held as running
        slot pods on their nodes."""
        for key in sorted(self.restored):
            unit = self.books.units.get(key)
            if unit is not None:
                for slot in unit.slots:
                    if not slot.pod and not slot.released:
                        pod = self._slot_pod(unit, slot)
                        if pod is not None:
                            self.ctx.core.pod("ADDED", pod, now)
                self._retain(unit, now)
        self.restored = set()

    # ==== handing over, admitting ================================================================
    def hand_over(self, unit: Unit, now: int) -> bool:
        if unit.owner_uid not in self.jobs:
            return False
        unit.slots = [Slot(i) for i in range(unit.count)]
        pods = [self._slot_pod(unit, slot) for slot in unit.slots]
        unit.fed = True
        for pod in pods:
            if pod is not None:
                self.ctx.core.pod("ADDED", pod, now)
        return True

    def core_group(self, unit: Unit) -> str:
        return f"{unit.namespace}/{unit.group}"

    def admit(self, now: int) -> None:
        """Every Job whose slots are all placed: un-suspend it, pinned to its nodes."""
        ready = []
        for key in sorted(self.to_admit):  # the Jobs whose slots were placed since
            unit = self.books.units.get(key)
            if (unit is not None and unit.kind == "job" and unit.fed and unit.placed
                    and self.states.waiting(unit) and not unit.admitting):
                ready.append(unit)
        self.to_admit.clear()
        for unit in ready:
            unit.admitting = True
            self.ctx.writes.write(lambda unit=unit: self._unsuspend(unit),
                                  lambda error, unit=unit: self._admitted(unit, error, now))

    def _admitted(self, unit: Unit, error: Exception | None, now: int) -> None:
        unit.admitting = False
        if self.books.units.get(unit.key) is not unit or all(s.released for s in unit.slots):
            return  # released while the patch was out (Job or FluxJob deleted): nothing to do
        if error is None:
            nodes = [s.node for s in unit.slots]
            self.states.admit(unit, nodes, f"{len(nodes)} pods on {len(set(nodes))} nodes: "
                              f"{short(nodes)}")
        elif isinstance(error, ApiError) and error.not_found:
            self.release_all(unit, now)
            self.states.finish(unit, "Failed", "JobDeleted", "the Job is gone")
        else:  # transient: the slots stay held, admission is tried again next cycle
            self.ctx.metrics.errors.inc(source="admit")
            self.to_admit.add(unit.key)

    def _unsuspend(self, unit: Unit) -> Exception | None:
        job = self.jobs.get(unit.owner_uid)
        if job is None:
            return ApiError(404, "NotFound", "job gone")
        nodes = [s.node for s in unit.slots]
        template = (job.get("spec") or {}).get("template") or {}
        affinity = _pin(nodes, (template.get("spec") or {}).get("affinity"))
        patch = {"metadata": {"annotations": {q.ANNOT_ADMITTED_NODES: ",".join(nodes)}},
                 "spec": {"suspend": False, "template": {
                     "metadata": {"labels": {q.LABEL_FLUXJOB: unit.name}},
                     "spec": {"affinity": affinity,
                              "schedulerName": self.ctx.config.scheduler_name}}}}
        try:
            self.ctx.api.patch_job(unit.namespace, meta(job)["name"], patch)
        except ApiError as exc:
            log.warning("admitting %s failed: %s", unit.key, exc)
            return exc
        return None

    def bind_pods(self, now: int) -> None:
        """Pods the Job controller made for an admitted Job: each to a free slot's node."""
        todo: list[tuple[Unit, Slot, dict[str, Any]]] = []
        taken = {id(s) for s in self.binding.values()}
        for uid in list(self.unbound):  # pods seen without a node since
            unit = self.books.units.get(self.books.pod_unit.get(uid, ""))
            pod = self.books.pods.get(uid)
            if (unit is None or pod is None or unit.kind != "job"
                    or (pod.get("spec") or {}).get("nodeName")
                    or any(s.pod == uid for s in unit.slots)
                    or (pod.get("status") or {}).get("phase") in TERMINAL_PHASES
                    or meta(pod).get("deletionTimestamp")):
                del self.unbound[uid]
                continue
            if not unit.placed or uid in self.binding:
                continue
            slot = next((s for s in unit.slots if not s.released and not s.pod
                         and id(s) not in taken), None)
            if slot is None:
                continue  # more pods than slots (parallelism raised): they wait
            del self.unbound[uid]
            self.binding[uid] = slot
            taken.add(id(slot))
            todo.append((unit, slot, pod))
        for unit, slot, pod in todo:
            self.ctx.writes.write(lambda pod=pod, node=slot.node: self._bind_one(pod, node),
                                  lambda error, unit=unit, slot=slot, pod=pod:
                                  self._bound(unit, slot, pod, error, now))

    def _bound(self, unit: Unit, slot: Slot, pod: dict[str, Any], error: Exception | None,
               now: int) -> None:
        uid = meta(pod)["uid"]
        self.binding.pop(uid, None)
        if error is not None:
            self.ctx.metrics.errors.inc(source="bind")
            self.unbound[uid] = None  # tried again next cycle
            return
        if slot.released or slot.pod or any(s.pod == uid for s in unit.slots):
            return  # the watch showed it bound first (on_pod gave it a slot) or it is gone
        slot.pod = uid
        bound = copy.deepcopy(pod)
        bound["spec"]["nodeName"] = slot.node
        self.shown[uid] = slot_uid(unit, slot.index)
        self.ctx.core.pod("MODIFIED", self._as_slot(unit, slot, bound), now)

    def _bind_one(self, pod: dict[str, Any], node: str) -> Exception | None:
        m = meta(pod)
        try:
            self.ctx.api.bind(m["namespace"], m["name"], m["uid"], node)
        except ApiError as exc:
            return exc
        return None

    # ==== releasing ==============================================================================
    def _retain(self, unit: Unit, now: int, finished: Slot | None = None) -> None:
        """Give back the slots the Job can no longer use; hold the rest for its next pods."""
        if not unit.slots:
            return
        job = self.jobs.get(unit.owner_uid)
        needed = still_needed(job) if job is not None else 0
        live = [s for s in unit.slots if not s.released]
        spare = len(live) - max(needed, sum(1 for s in live if s.pod))
        free = [s for s in live if not s.pod]
        if finished is not None and finished in free:
            free.remove(finished)
            free.insert(0, finished)
        for slot in free[:max(0, spare)]:
            self._release_slot(unit, slot, now)
        for slot in free[max(0, spare):]:
            if slot is finished and slot.node:  # the slot goes back to being held empty
                pod = self._slot_pod(unit, slot)
                if pod is not None:
                    self.ctx.core.pod("MODIFIED", pod, now)

    def _release_slot(self, unit: Unit, slot: Slot, now: int) -> None:
        slot.released = True
        uid = slot_uid(unit, slot.index)
        feed = self.ctx.core.pod
        if slot.pod:  # its pod still runs: from now on it counts as itself
            real = self.books.pods.get(slot.pod)
            self.shown.pop(slot.pod, None)
            self.books.detach(slot.pod)
            slot.pod = ""
            feed("DELETED", {"metadata": {"uid": uid}}, now)
            if real is not None:
                self.shown[meta(real)["uid"]] = meta(real)["uid"]
                feed("ADDED", real, now)
        else:
            feed("DELETED", {"metadata": {"uid": uid}}, now)
        self.slot_pods.pop(uid, None)

    def release_all(self, unit: Unit, now: int) -> None:
        for slot in unit.slots:
            if not slot.released:
                self._release_slot(unit, slot, now)

    def forget(self, unit: Unit, now: int) -> None:
        for uid in list(unit.attached):
            self.books.detach(uid)
        if unit.owner_uid in self.jobs:
            self.new_jobs.add(unit.owner_uid)  # a new FluxJob if it still waits


def _condition(job: dict[str, Any], kind: str) -> bool:
    return any(c.get("type") == kind and c.get("status") == "True"
               for c in (job.get("status") or {}).get("conditions") or [])


def _pin(nodes: list[str], affinity: dict[str, Any] | None) -> dict[str, Any]:
    """Required node affinity narrowed to ``nodes``: one term per node (a ``metadata.name``
    field requirement takes exactly one value), each carrying the Job's own terms' needs."""
    affinity = copy.deepcopy(affinity or {})
    node_affinity = affinity.setdefault("nodeAffinity", {})
    required = node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
    own = (required or {}).get("nodeSelectorTerms") or [{}]
    terms = []
    for node in sorted(set(nodes)):
        pin = {"key": "metadata.name", "operator": "In", "values": [node]}
        for term in own:
            terms.append({**copy.deepcopy(term),
                          "matchFields": [*(term.get("matchFields") or []), pin]})
    node_affinity["requiredDuringSchedulingIgnoredDuringExecution"] = {"nodeSelectorTerms": terms}
    return affinity
