"""One group's placement as a transaction: filters decide the candidates, the allocator
(Fluxion) chooses among them, the exact ledger checks the choice, and nothing is kept unless
the whole group (or its ``minMember``) fits.

A group's pending members are split into *parts* (:func:`parts`): members with the same request
and the same candidate nodes form one part, matched as ONE request of ``count`` slots; members
whose placement depends on their siblings' (host ports, required pod (anti-)affinity, hard
topology spread) are placed one at a time, each against the ledger plus the members placed
before it. Fluxion's traversal cannot match two requests of the same type at one level of a
jobspec (``resource/utilities/README.md``), so a group of several shapes is several matches in
one transaction: any part that does not fit rolls every earlier one back.

``need`` members must fit (``minMember`` minus the members already running); with ``need`` below
the number pending, each part asks for "as many as fit" (a Fluxion count range) and the group
starts once ``need`` fit. A topology requirement (``required``/``preferred`` + level) puts every
member below one vertex of that level: for the level directly above the nodes that is one
jobspec (``rack[1] -> slot[N]``, Fluxion picks the rack); for outer levels (or several parts)
the domains are tried one after another in the policy's order, each as an RFC 31 constraint.

Then every (pod, node) is checked against the ledger, in order, with the earlier members added
(kube's NodeResourcesFit, exactly): the pool graph rounds bytes to KiB with a slack that never
refuses what fits, so it may very rarely admit a few KiB more than the node has; such a node is
excluded and the transaction retried.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from fluxinfra.matcher.errors import Busy, MatcherError, Unsatisfiable
from fluxinfra.scheduler.allocator import Allocator, Candidates
from fluxinfra.scheduler.filters import Filters
from fluxinfra.scheduler.ledger import Ledger
from fluxinfra.scheduler.pods import PodInfo, Request

__all__ = ["Outcome", "Part", "Placer", "parts"]


@dataclass
class Part:
    """Members matched together: same request, same candidates (or one inter-pod member)."""

    request: Request
    candidates: Candidates
    pods: list[PodInfo]
    interpod: bool = False


@dataclass
class Outcome:
    """What a transaction did: ``held`` allocator jobs and the (pod, node, jobid) they hold."""

    status: str                      #: "placed" | "reserved" | "busy" | "unschedulable"
    assignments: list[tuple[PodInfo, str, int]] = field(default_factory=list)
    jobs: list[int] = field(default_factory=list)
    at: int = 0
    why: str = ""
    fit: int = 0                     #: members that fit (busy/partial)
    #: why a member that depends on its siblings (pod anti-affinity, host ports, spread) found
    #: no node once the members before it were placed, in kube-scheduler's words
    siblings_why: str = ""
    matches: int = 0


def parts(members: Iterable[PodInfo], candidates: Callable[[PodInfo], Candidates],
          interpod: Callable[[PodInfo], bool]) -> list[Part]:
    """Split members into parts, largest request first (inter-pod members last, one each)."""
    grouped: dict[tuple, Part] = {}
    singles: list[Part] = []
    for pod in members:
        if interpod(pod):
            singles.append(Part(pod.request, None, [pod], interpod=True))
            continue
        cands = candidates(pod)
        key = (pod.request, id(cands) if cands is not None else None)
        part = grouped.get(key)
        if part is None:
            part = grouped[key] = Part(pod.request, cands, [])
        part.pods.append(pod)
    ordered = sorted(grouped.values(), key=lambda p: sorted(p.request.items(), reverse=True),
                     reverse=True)
    return ordered + singles


class Placer:
    """Runs placement transactions against one allocator, ledger and set of filters."""

    def __init__(self, allocator: Allocator, ledger: Ledger, filters: Filters,
                 observe: Callable[[float], None] | None = None) -> None:
        self.allocator = allocator
        self.ledger = ledger
        self.filters = filters
        self.observe = observe
        #: pod uid -> nodes the exact check refused this cycle
        self._excluded: dict[str, set[str]] = {}

    # -- the transaction ------------------------------------------------------------------------
    def place(self, group_parts: list[Part], need: int, *, duration: int, now: int,
              reserve: bool, topology: tuple[str, str] = ("", ""),
              exclude: Callable[[PodInfo], frozenset[str]] | None = None) -> Outcome:
        """Place ``need`` (or more) members of ``group_parts``; see the module docstring."""
        mode, level = topology
        total = sum(len(p.pods) for p in group_parts)
        need = min(need, total)
        out = Outcome("busy")
        if mode and level:
            outcome = self._in_domains(group_parts, need, total, duration, now, reserve, level,
                                       exclude, out)
            if outcome.status in ("placed", "reserved") or mode == "required":
                return outcome
        return self._attempt(group_parts, need, total, duration, now, reserve, None, None,
                             exclude, out)

    def _in_domains(self, group_parts: list[Part], need: int, total: int, duration: int,
                    now: int, reserve: bool, level: str, exclude, out: Outcome) -> Outcome:
        innermost = getattr(self.allocator, "innermost", lambda _level: False)(level)
        if innermost and len(group_parts) == 1 and not group_parts[0].interpod:
            return self._attempt(group_parts, need, total, duration, now, reserve, level, None,
                                 exclude, out)
        domains = self.allocator.domains(level)
        if not domains:
            out.status = "unschedulable"
            out.why = f"no node carries the topology level {level!r}"
            return out
        unsat = True
        for _path, nodes in domains:
            outcome = self._attempt(group_parts, need, total, duration, now, False, None,
                                    nodes, exclude, out)
            if outcome.status == "placed":
                return outcome
            unsat = unsat and outcome.status == "unschedulable"
        if reserve and not unsat:
            for _path, nodes in domains:
                outcome = self._attempt(group_parts, need, total, duration, now, True, None,
                                        nodes, exclude, out)
                if outcome.status in ("placed", "reserved"):
                    return outcome
        out.status = "unschedulable" if unsat else "busy"
        out.why = out.why or (f"no single {level} has room for {need} of the group's pods"
                              + (" now" if not unsat else ""))
        return out

    def _attempt(self, group_parts: list[Part], need: int, total: int, duration: int,
                 now: int, reserve: bool, within: str | None, domain: frozenset[str] | None,
                 exclude, out: Outcome) -> Outcome:
        for _ in range(3):  # exact re-checks may exclude a node and try again
            result = self._once(group_parts, need, total, duration, now, reserve, within,
                                domain, exclude, out)
            if result is not None:
                return result
        out.status, out.why = "busy", "the graph and the exact ledger disagree; retrying later"
        return out

    def _once(self, group_parts: list[Part], need: int, total: int, duration: int, now: int,
              reserve: bool, within: str | None, domain: frozenset[str] | None, exclude,
              out: Outcome) -> Outcome | None:
        flexible = need < total
        held: list[int] = []
        assignments: list[tuple[PodInfo, str, int]] = []
        placed: list[tuple[PodInfo, str]] = []
        reserved_at = -1
        unsat = ""
        single = len(group_parts) == 1 and not group_parts[0].interpod
        for part in group_parts:
            units = [part.pods] if not part.interpod else [[p] for p in part.pods]
            for pods in units:
                cands = self._candidates(part, pods[0], placed, domain, exclude)
                op_reserve = reserve and single and not flexible
                count_min = 1 if flexible else None
                try:
                    placement = self._match(len(pods), part.request, cands, duration, now,
                                            op_reserve, within, count_min, out)
                except Unsatisfiable as exc:
                    unsat = unsat or str(exc)
                    if part.interpod and placed and not out.siblings_why:
                        out.siblings_why = self._siblings_why(pods[0], placed)
                    if flexible:
                        continue
                    break
                except Busy as exc:
                    out.why = out.why or str(exc)
                    if flexible:
                        continue
                    break
                held.append(placement.jobid)
                if placement.status != "ALLOCATED":
                    reserved_at = max(reserved_at, placement.at)
                    continue
                for pod, node in zip(pods, placement.nodes, strict=False):
                    assignments.append((pod, node, placement.jobid))
                    placed.append((pod, node))
            else:
                continue
            break
        got = len(assignments)
        if reserved_at >= 0 and got == 0 and held:
            out.status, out.jobs, out.at = "reserved", held, reserved_at
            return out
        if got >= need and got > 0:
            bad = self._verify(assignments)
            if bad is not None:
                self._rollback(held)
                pod, node = bad
                self._excluded.setdefault(pod.uid, set()).add(node)
                return None
            out.status, out.assignments, out.jobs, out.fit = "placed", assignments, held, got
            return out
        self._rollback(held)
        out.fit = max(out.fit, got)
        if unsat and not got:
            out.status, out.why = "unschedulable", unsat
        else:
            out.status = "busy"
        if reserve and (flexible or not single) and out.status == "busy":
            return self._reserve_parts(group_parts, need, duration, now, domain, exclude, out)
        return out

    def _reserve_parts(self, group_parts: list[Part], need: int, duration: int, now: int,
                       domain: frozenset[str] | None, exclude, out: Outcome) -> Outcome:
        """EASY backfill's reservation for a group of several parts (or one that may start
        with fewer than all): ``need`` members, each part at its earliest time."""
        held, at, left = [], 0, need
        for part in group_parts:
            if left <= 0:
                break
            count = min(left, len(part.pods))
            left -= count
            cands = self._candidates(part, part.pods[0], [], domain, exclude)
            try:
                p = self._match(count, part.request, cands, duration, now, True,
                                None, None, out)
            except MatcherError:
                self._rollback(held)
                return out
            held.append(p.jobid)
            at = max(at, p.at)
        out.status, out.jobs, out.at = "reserved", held, at
        return out

    # -- pieces ---------------------------------------------------------------------------------
    def begin_cycle(self) -> None:
        self._excluded = {}

    def _candidates(self, part: Part, pod: PodInfo, placed: list[tuple[PodInfo, str]],
                    domain: frozenset[str] | None, exclude) -> Candidates:
        if part.interpod:
            state = self.filters.interpod(pod, placed)
            ports: dict[str, list[PodInfo]] = {}
            for other, node in placed:
                ports.setdefault(node, []).append(other)
            cands: Candidates = self.filters.candidates(pod, state, ports)
        else:
            cands = part.candidates
        drop = set()
        if exclude is not None:
            drop |= exclude(pod)
        if pod.uid in self._excluded:
            drop |= self._excluded[pod.uid]
        if drop:
            cands = (cands if cands is not None else frozenset(
                n.name for n in self.ledger.existing())) - drop
        if domain is not None:
            cands = domain if cands is None else cands & domain
        return cands

    def _siblings_why(self, pod: PodInfo, placed: list[tuple[PodInfo, str]]) -> str:
        _, text = self.filters.explain(pod, self.filters.interpod(pod, placed))
        return f"with {len(placed)} member(s) placed, {pod.name}: {text}"

    def _match(self, count: int, request: Request, cands: Candidates, duration: int,
               now: int, reserve: bool, within: str | None, count_min: int | None,
               out: Outcome):
        t0 = time.perf_counter()
        out.matches += 1
        try:
            return self.allocator.place(count, request, candidates=cands, duration=duration,
                                        now=now, reserve=reserve, within=within,
                                        count_min=count_min)
        finally:
            if self.observe is not None:
                self.observe(time.perf_counter() - t0)

    def _verify(self, assignments: list[tuple[PodInfo, str, int]]) -> tuple[PodInfo, str] | None:
        """The first (pod, node) the exact ledger refuses once the earlier ones are added."""
        added: dict[str, tuple[int, Request]] = {}
        for pod, node, _ in assignments:
            n, extra = added.get(node, (0, Request()))
            if self.ledger.insufficient(pod.request, node, n, extra):
                return pod, node
            added[node] = (n + 1, extra + pod.request)
        return None

    def _rollback(self, jobs: list[int]) -> None:
        for jobid in jobs:
            with contextlib.suppress(MatcherError):
                self.allocator.cancel(jobid)
