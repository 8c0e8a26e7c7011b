"""One scheduling cycle: the queue walked once, each group attempted, a typed result per attempt.

kube-scheduler's scheduling cycle (``schedule_one.go``: ``schedulingCycle`` returning a
``ScheduleResult`` or a ``*Status``; PostFilter's ``DefaultPreemption``; the failure handler
setting ``PodScheduled=False`` with a ``FailedScheduling`` Event), walked over the whole queue as
Fluxion's ``queue-depth`` does, with Fluxion's EASY backfill:

- a group is placed as one transaction (:mod:`~fluxinfra.scheduler.placement`) and bound only
  when its ``minMember`` fit (:meth:`SchedulingCycle._commit`, :mod:`~.binding`);
- lone pods next in line with the same request are matched together (``batch_size``);
- the first group that does not fit now gets a reservation (``allocate_orelse_reserve``), kept
  while nothing changes (the cache's generation);
- a higher-priority group that fits only by evicting lower-priority pods preempts them
  (:mod:`~fluxinfra.scheduler.preemption`);
- a group that failed is tried again only when the generation moved; every pod that waits
  carries ``PodScheduled=False, reason=Unschedulable`` with the reason (what cluster-autoscaler
  and Karpenter act on), set once per change of reason.

Each attempt returns an :class:`Attempt` (a :class:`Result` and what the cycle folds into its
:class:`CycleReport`); only :meth:`SchedulingCycle.schedule` keeps the cycle's own state.
:class:`SchedulingCycle` holds the scheduler core's methods for this (the core inherits it).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from fluxinfra.scheduler.allocator import Allocator, Candidates
from fluxinfra.scheduler.binding import Binder
from fluxinfra.scheduler.cache import Cache
from fluxinfra.scheduler.config import SchedulerConfig
from fluxinfra.scheduler.filters import Filters
from fluxinfra.scheduler.gangs import waiting_reason
from fluxinfra.scheduler.metrics import Metrics
from fluxinfra.scheduler.placement import Outcome, Placer, parts
from fluxinfra.scheduler.pods import PodInfo
from fluxinfra.scheduler.preemption import Plan, Preemptor, budgets
from fluxinfra.scheduler.scheduling_queue import Group, SchedulingQueue

__all__ = ["Attempt", "CycleReport", "Result", "SchedulingCycle"]


class Result(enum.Enum):
    """What one attempt at a group came to."""

    PLACED = "placed"                #: minMember (or more) fit: bound, or binding
    WAITING = "waiting"              #: not tried: the gang is incomplete, or its PodGroup bad
    BUSY = "busy"                    #: does not fit now
    RESERVED = "reserved"            #: does not fit now; resources reserved for it (EASY)
    UNSCHEDULABLE = "unschedulable"  #: can never fit in this cluster
    PREEMPTING = "preempting"        #: lower-priority pods are being evicted for it


@dataclass
class Attempt:
    """One attempt at a group (and the lone pods batched with it)."""

    result: Result
    bound: int = 0          #: pods bound (or binding)
    busy: int = 0           #: groups counted as not fitting now
    preempted: int = 0      #: victims chosen for eviction
    #: groups this attempt handled (not tried again this cycle) ...
    done: frozenset[str] = frozenset()
    #: ... and groups of a batch that did not fit, tried next one by one
    again: frozenset[str] = frozenset()
    #: request shapes (of lone pods) found not to fit now -> the message their pods get
    shapes: dict[tuple, str] = field(default_factory=dict)


@dataclass
class CycleReport:
    tried: int = 0
    bound: int = 0
    reserved: int = 0
    busy: int = 0
    unschedulable: int = 0
    waiting: int = 0
    skipped: int = 0
    preempted: int = 0
    #: group key -> the start time (allocator clock) of its reservation, for every
    #: reservation held after this cycle (the queue shows them as Reserved)
    reservations: dict[str, int] = field(default_factory=dict)
    #: group key -> what its attempt in this cycle came to (each lone pod of a batch too)
    results: dict[str, Result] = field(default_factory=dict)

    def add(self, attempt: Attempt) -> None:
        for key in attempt.done - attempt.again:
            self.results[key] = attempt.result
        self.bound += attempt.bound
        self.busy += attempt.busy
        self.preempted += attempt.preempted
        if attempt.result is Result.WAITING:
            self.waiting += 1
        elif attempt.result is Result.RESERVED:
            self.reserved += 1
        elif attempt.result is Result.UNSCHEDULABLE:
            self.unschedulable += 1


@dataclass
class _Pass:
    """What one cycle's attempts read: the time, the queue, the shapes known not to fit."""

    now: int
    wall: float
    queue: list[Group]
    busy: dict[tuple, str] = field(default_factory=dict)


class SchedulingCycle:
    """The scheduler core's cycle methods; the state they use is the core's (below)."""

    allocator: Allocator
    binder: Binder
    config: SchedulerConfig
    metrics: Metrics
    clock: Callable[[], float]
    cache: Cache
    scheduling_queue: SchedulingQueue
    filters: Filters
    placer: Placer
    preemptor: Preemptor
    groups: dict[str, Group]
    pods: dict[str, PodInfo]
    nominated: dict[str, tuple[str, int]]
    noted: dict[str, str]
    ready: bool
    #: allocator jobs of the reservations held, and group key -> start time of its reservation
    reservations: list[int]
    reserved_groups: dict[str, int]
    _reservation_gen: int
    _explained: dict[tuple, tuple[int, str]]
    #: groups whose evictions failed this cycle: tried again next cycle
    _retry_soon: set[str]
    # the binding cycle's (:class:`~fluxinfra.scheduler.binding.BindingCycle`)
    _commit: Callable[[Outcome, int, int, float], int]
    _collect_binds: Callable[[], int]
    _retry_binds: Callable[[float], None]
    _write_podgroup_status: Callable[[], None]

    def schedule(self, now: int) -> CycleReport:
        """One pass over the queue at time ``now`` (integer seconds on the allocator's clock)."""
        report = CycleReport()
        if not self.ready:
            return report
        cache = self.cache
        self.placer.begin_cycle()
        self._collect_binds()
        cache.register_residents(now)
        cache.extend_overdue(now)
        wall = self.clock()
        self._retry_binds(wall)
        if self.reservations and self._reservation_gen != cache.generation:
            self._drop_reservations()
        reserve_left = self.config.reserve_depth - len(self.reserved_groups)
        done: set[str] = set()
        cycle = _Pass(now, wall, self.scheduling_queue.ordered())
        for i, group in enumerate(cycle.queue):
            if report.tried >= self.config.queue_depth:
                break
            if group.key in done:
                continue
            if group.failed_gen == cache.generation:
                report.skipped += 1
                continue
            report.tried += 1
            attempt = self._attempt(group, cycle, i, reserve_left > 0)
            report.add(attempt)
            done |= attempt.done
            done -= attempt.again
            cycle.busy.update(attempt.shapes)
            if attempt.result is Result.RESERVED:
                reserve_left -= 1
        report.reservations = dict(self.reserved_groups)
        self._write_podgroup_status()
        return report

    def _attempt(self, group: Group, cycle: _Pass, i: int, reserve: bool) -> Attempt:
        """Attempt ``group``, at position ``i`` of the cycle's queue, and the lone pods batched
        with it; ``reserve``: it may get a reservation when it does not fit now."""
        cache = self.cache
        members = group.members()
        waiting = waiting_reason(group, members, cache.ledger)
        if waiting:
            group.failed_gen = cache.generation
            self._note(group, members, waiting)
            return Attempt(Result.WAITING, done=frozenset((group.key,)))
        need = max(0, group.min_member - len(group.bound)) if group.kind != "single" else 1
        duration = group.duration(self.config.default_duration)
        now, wall = cycle.now, cycle.wall
        exclude = self._excluded_nodes
        done: set[str] = set()
        again: frozenset[str] = frozenset()
        if group.kind == "single":
            batch = self._batch(cycle.queue, i, members[0]) if self.config.batch_size > 1 \
                else [group]
            shape = self._shape_key(members[0])
            if shape is not None and shape in cycle.busy:
                for g in batch:
                    g.failed_gen = cache.generation
                    self._note(g, g.members(), cycle.busy[shape])
                return Attempt(Result.BUSY, busy=len(batch),
                               done=frozenset(g.key for g in batch))
            if len(batch) > 1:
                pods = [g.members()[0] for g in batch]
                outcome = self.placer.place(parts(pods, self._candidates, self._is_interpod),
                                            1, duration=duration, now=now, reserve=False,
                                            exclude=exclude)
                done.update(g.key for g in batch)
                if outcome.status == "placed":
                    bound = self._commit(outcome, now, duration, wall)
                    placed = {p.uid for p, _, _ in outcome.assignments}
                    # the ones that did not fit are tried next, one by one: the first may get
                    # the reservation (EASY), the rest then meet this cycle's busy shape
                    again = frozenset(g.key for g, p in zip(batch, pods, strict=True)
                                      if p.uid not in placed)
                    return Attempt(Result.PLACED, bound=bound, done=frozenset(done),
                                   again=again)
                again = frozenset(g.key for g in batch[1:])
        group_parts = parts(members, self._candidates, self._is_interpod)
        outcome = self.placer.place(group_parts, need, duration=duration, now=now,
                                    reserve=reserve, topology=self._topology(group),
                                    exclude=exclude)
        done.add(group.key)
        handled = frozenset(done)
        if outcome.status == "placed":
            bound = self._commit(outcome, now, duration, wall)
            if group.members() and self.groups.get(group.key) is group:
                # minMember started; the members that did not fit wait for room
                self._failed(group, "busy", Outcome("busy"))
            return Attempt(Result.PLACED, bound=bound, done=handled, again=again)
        shape = self._shape_key(members[0]) if group.kind == "single" else None
        preempted = 0
        if outcome.status == "reserved" and self.config.preemption:
            evicting, preempted = self._preempt(group, members, need)
            if evicting:
                for jobid in outcome.jobs:  # evicting beats waiting for the reservation
                    cache.cancel_quietly(jobid)
                group.failed_gen = cache.generation
                return Attempt(Result.PREEMPTING, preempted=preempted, done=handled,
                               again=again)
        if outcome.status == "reserved" and group.key in self._retry_soon:
            self._retry_soon.discard(group.key)  # evictions failed: no reservation, try again
            for jobid in outcome.jobs:
                cache.cancel_quietly(jobid)
            self._note(group, members, "preemption failed (the API refused an eviction); "
                                       "trying again")
            return Attempt(Result.BUSY, preempted=preempted, done=handled, again=again)
        if outcome.status == "reserved":
            self.reservations += outcome.jobs
            self.reserved_groups[group.key] = outcome.at
            self._reservation_gen = cache.generation
            group.failed_gen = cache.generation
            self._note(group, members, self._busy_message(group, members, outcome) +
                       f"; resources reserved from t={outcome.at}s (EASY backfill)")
            return Attempt(Result.RESERVED, preempted=preempted, done=handled, again=again,
                           shapes={shape: "reserved"} if shape is not None else {})
        if outcome.status == "unschedulable":
            self.metrics.unschedulable.inc(reason="unsatisfiable")
            message = self._failed(group, "unschedulable", outcome)
            return Attempt(Result.UNSCHEDULABLE, preempted=preempted, done=handled,
                           again=again, shapes={shape: message} if shape is not None else {})
        if self.config.preemption:
            evicting, victims = self._preempt(group, members, need)
            preempted += victims
            if evicting:
                group.failed_gen = cache.generation
                return Attempt(Result.PREEMPTING, busy=1, preempted=preempted, done=handled,
                               again=again)
        message = self._failed(group, "busy", outcome)
        if group.key in self._retry_soon:
            self._retry_soon.discard(group.key)
            group.failed_gen = -1
        return Attempt(Result.BUSY, busy=1, preempted=preempted, done=handled, again=again,
                       shapes={shape: message} if shape is not None else {})

    def _failed(self, group: Group, status: str, outcome: Outcome) -> str:
        """Report that ``group`` does not fit now (``status`` "busy") or ever
        ("unschedulable"); returns the message its pods got."""
        group.failed_gen = self.cache.generation
        members = group.members()
        if status == "unschedulable":
            message = self._busy_message(group, members, outcome, never=True)
        else:
            message = self._busy_message(group, members, outcome)
        # an Event reason of its own for "never": what the queue (and users) look for
        self._note(group, members, message,
                   "Unschedulable" if status == "unschedulable" else "FailedScheduling")
        if group.kind == "podgroup" and group.last_state != message and not group.missing:
            group.last_state = message
            self.binder.podgroup_event(group.namespace, group.name, group.podgroup_uid,
                                       "Unschedulable" if status == "unschedulable" else
                                       "FailedScheduling", message)
        return message

    def _drop_reservations(self) -> None:
        for jobid in self.reservations:
            self.cache.cancel_quietly(jobid)
        self.reservations = []
        self.reserved_groups = {}

    def _batch(self, queue: list[Group], start: int, head: PodInfo) -> list[Group]:
        """Lone pods next in line with the same request, candidates, duration and priority:
        matched as one request of up to ``batch_size`` slots; each pod still binds and
        releases alone."""
        key = self._shape_key(head)
        if key is None:
            return [queue[start]]
        batch = [queue[start]]
        duration = queue[start].duration(self.config.default_duration)
        generation = self.cache.generation
        for k in range(start + 1, min(len(queue), start + self.config.batch_size)):
            g = queue[k]
            members = g.members()
            if (g.kind != "single" or len(members) != 1 or g.failed_gen == generation
                    or self._shape_key(members[0]) != key
                    or g.duration(self.config.default_duration) != duration):
                break
            batch.append(g)
        return batch

    def _shape_key(self, pod: PodInfo) -> tuple | None:
        """Lone pods with equal keys are interchangeable for placement (None: not batchable)."""
        if self._is_interpod(pod):
            return None
        return (pod.request, pod.static_key, pod.priority)

    def _is_interpod(self, pod: PodInfo) -> bool:
        return self.filters.needs_interpod(pod)

    def _candidates(self, pod: PodInfo) -> Candidates:
        return self.filters.static_candidates(pod)

    def _excluded_nodes(self, pod: PodInfo) -> frozenset[str]:
        """Nodes ``pod`` must not take now: nodes whose running pods the graph could not all
        register, and nodes nominated for a higher-priority pod that preempted there."""
        out = set(self.allocator.unsynced)
        for uid, (node, prio) in self.nominated.items():
            if prio > pod.priority and uid != pod.uid:
                out.add(node)
        return frozenset(out)

    def _topology(self, group: Group) -> tuple[str, str]:
        mode, level = group.topology
        if not mode:
            return ("", "")
        if level not in {lvl.name for lvl in self.allocator.levels}:
            return ("required", f"<unknown level {level!r}>") if mode == "required" else ("", "")
        return (mode, level)

    # ==== what waiting pods are told ==============================================================
    def _busy_message(self, group: Group, members: list[PodInfo], outcome: Outcome,
                      never: bool = False) -> str:
        """kube-scheduler's FitError text for the group's first member, saying what is
        group-specific: how many must fit at once, in which topology, and that nodes which fit
        one pod may be held for others (a reservation, a nomination)."""
        pod = members[0]
        fit, explained = self._explain(pod)
        head = "can never fit: " if never else ""
        mode, level = group.topology
        if group.kind == "single":
            text = f"{head}{explained}"
            if fit and not never:
                text += (" The nodes that fit are held for a higher-priority pod (a "
                         "reservation or a nomination).")
            return text
        text = f"{group.kind} {group.key}: {len(members)} pod(s) to place"
        if mode:
            text += f", {mode} in one {level}"
        if outcome.fit:
            text += f", only {outcome.fit} fit now"
        text += f"; {head}"
        if fit:
            text += f"they do not fit all at once ({explained})"
        else:
            text += explained
        if outcome.why and ("topology" in outcome.why or "single" in outcome.why):
            text += f" ({outcome.why})"
        if outcome.siblings_why:
            text += f" ({outcome.siblings_why})"
        return text

    def _explain(self, pod: PodInfo) -> tuple[int, str]:
        interpod = self._is_interpod(pod)
        key = (pod.request, pod.static_key, self.cache.ledger.version) if not interpod \
            else None
        if key is not None and key in self._explained:
            return self._explained[key]
        state = self.filters.interpod(pod) if interpod else None
        got = self.filters.explain(pod, state)
        if key is not None:
            if len(self._explained) > 1024:
                self._explained.clear()
            self._explained[key] = got
        return got

    def _note(self, group: Group, members: Iterable[PodInfo], message: str,
              event: str = "FailedScheduling") -> None:
        """``PodScheduled=False, reason=Unschedulable`` with ``message`` and one
        ``FailedScheduling`` Event (``Unschedulable`` when it can never fit), on every waiting
        pod whose reason changed."""
        for pod in members:
            if pod.gated or self.noted.get(pod.uid) == message:
                continue
            self.noted[pod.uid] = message
            self.binder.pod_unschedulable(pod, message)
            self.binder.pod_event(pod, event, message, "Scheduling")

    # ==== PostFilter: preemption ==================================================================
    def _gang_of(self, pod: PodInfo) -> list[PodInfo]:
        """A running pod and the running members of its gang (evicted together or not at all)."""
        group = self.groups.get(pod.group_key) if pod.group_kind else None
        if group is None or len(group.bound) <= 1:
            return [pod]
        ledger = self.cache.ledger
        out = [p for uid in group.bound if (p := ledger.pod(uid)) is not None]
        return out or [pod]

    def _preempt(self, group: Group, members: list[PodInfo], need: int) -> tuple[bool, int]:
        """DefaultPreemption for the group's members: (victims are being evicted, how many
        victims the plan chose)."""
        ledger = self.cache.ledger
        if group.preempting:
            group.preempting = {uid for uid in group.preempting if uid in ledger.where}
            if group.preempting:
                return True, 0  # victims still terminating: wait for them
        if not members or any(m.preempt_never for m in members):
            return False, 0
        lowest = min((p.priority for p, _ in ledger.pods()), default=None)
        if lowest is None or lowest >= group.priority:
            return False, 0
        count = max(1, need) if group.kind != "single" else 1
        mode, level = self._topology(group)
        domains = None
        if mode == "required" and not level.startswith("<"):
            domains = [nodes for _, nodes in self.allocator.domains(level)]
        plan = self.preemptor.plan(members[:count], budgets(self.cache.pdbs.values()), domains,
                                   frozenset(self.allocator.unsynced))
        if plan is None:
            return False, 0
        if self._carry_out(group, plan):
            return True, len(plan.victims)
        self._retry_soon.add(group.key)  # the evictions failed (API errors): try again
        return False, len(plan.victims)

    def _carry_out(self, group: Group, plan: Plan) -> bool:
        """Evict the plan's victims and nominate its pods; False when no victim could be
        evicted (the group then waits as any busy group does)."""
        nodes = sorted({n for _, n in plan.nominations})
        preemptor = plan.nominations[0][0]
        evicted = set()
        where = self.cache.ledger.where
        for victim in plan.victims:
            node = where.get(victim.uid, "")
            if self.binder.preempt(victim, preemptor, node):
                evicted.add(victim.uid)
        if not evicted:
            return False
        group.preempting = evicted
        for pod, node in plan.nominations:
            self.nominated[pod.uid] = (node, pod.priority)
            self.binder.nominate(pod, node)
            for uid, (other_node, prio) in list(self.nominated.items()):
                if other_node == node and prio < pod.priority and uid in self.pods:
                    del self.nominated[uid]
                    self.binder.nominate(self.pods[uid], "")
        message = (f"preempting {len(plan.victims)} lower-priority pod(s) on "
                   f"{', '.join(nodes)}; waiting for them to terminate")
        self._note(group, group.members(), message)
        self.metrics.preemption_victims.inc(len(evicted))
        return True

