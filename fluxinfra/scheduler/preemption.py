"""Preemption as kube-scheduler v1.28's DefaultPreemption does it, on the exact ledger, with
whole gangs as the unit of eviction.

For a pod that fits nowhere (``SelectVictimsOnNode``, per node): every lower-priority pod on the
node is a potential victim; if the pod fits once they are all gone, they are given back one by
one, most important first (priority, then the earlier start), those whose eviction would
violate a PodDisruptionBudget first, each kept if the pod still fits with it; the rest are the
node's victims. Of the nodes where that works, the one chosen has (in this order) the fewest
PDB violations, the lowest highest victim priority, the lowest sum of victim priorities, the
fewest victims, and the latest start among its victims (``pickOneNodeForPreemption``). Nodes
rejected by a static filter (node affinity, taints, cordon) or by the pod's required pod
affinity are never considered ("preemption might not help"), and a pod with
``preemptionPolicy: Never`` never preempts.

Gangs: a pod of a running gang (a PodGroup or label group with more than one member running) is
evicted with its whole gang or not at all; a gang whose highest priority is not below the
preemptor's is never a victim. A gang preemptor places its members one after another, each
against the cluster without the victims chosen so far and with the members placed before it;
either every member finds a node, or nothing is evicted.

The result is a plan (:class:`Plan`): which pods to evict and on which node each preemptor pod
is nominated. The core carries it out: the ``DisruptionTarget`` condition
(``PreemptionByScheduler``), the delete, a ``Preempted`` Event, and ``status.nominatedNodeName``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from fluxinfra.kube.selectors import LabelSelector
from fluxinfra.scheduler.filters import Filters, static_reason
from fluxinfra.scheduler.ledger import Ledger, NodeState
from fluxinfra.scheduler.pods import PodInfo, Request

__all__ = ["Budget", "Plan", "Preemptor", "budgets"]

_MAX_INT32 = 2**31 - 1


@dataclass
class Budget:
    """A PodDisruptionBudget as DefaultPreemption reads it."""

    namespace: str
    selector: LabelSelector
    allowed: int
    disrupted: frozenset[str] = frozenset()


def budgets(pdbs: Iterable[Mapping[str, Any]]) -> list[Budget]:
    """PodDisruptionBudget objects -> budgets (a malformed selector selects nothing)."""
    out = []
    for pdb in pdbs:
        meta, spec, status = (pdb.get(k) or {} for k in ("metadata", "spec", "status"))
        try:
            selector = LabelSelector.parse(spec.get("selector"), "spec.selector")
        except Exception:  # noqa: BLE001 - kube ignores a PDB whose selector does not parse
            continue
        out.append(Budget(meta.get("namespace", "default"), selector,
                          int(status.get("disruptionsAllowed") or 0),
                          frozenset(status.get("disruptedPods") or {})))
    return out


@dataclass
class _Choice:
    node: str
    victims: list[PodInfo]
    violations: int


@dataclass
class Plan:
    """Evict ``victims``; nominate each preemptor pod on its node."""

    victims: list[PodInfo] = field(default_factory=list)
    nominations: list[tuple[PodInfo, str]] = field(default_factory=list)


def _importance(pod: PodInfo) -> tuple:
    """``util.MoreImportantPod``: higher priority, then earlier start, sorts first."""
    return (-pod.priority, pod.started or float("inf"))


class Preemptor:
    """DefaultPreemption over a ledger (see the module docstring)."""

    def __init__(self, ledger: Ledger, filters: Filters,
                 gang_of: Callable[[PodInfo], list[PodInfo]], min_candidates: int = 100,
                 percentage: int = 10) -> None:
        self.ledger = ledger
        self.filters = filters
        self.gang_of = gang_of          #: the running members of a victim's gang (or [pod])
        self.min_candidates = min_candidates
        self.percentage = percentage
        self._offset = 0

    def plan(self, members: list[PodInfo], pdbs: list[Budget],
             domains: list[frozenset[str]] | None = None,
             exclude: frozenset[str] = frozenset()) -> Plan | None:
        """Victims and nominations that let every member of ``members`` fit, or None."""
        if any(m.preempt_never for m in members):
            return None
        for domain in domains or [None]:
            plan = self._plan(members, pdbs, domain, exclude)
            if plan is not None:
                return plan
        return None

    def _plan(self, members: list[PodInfo], pdbs: list[Budget],
              domain: frozenset[str] | None, exclude: frozenset[str]) -> Plan | None:
        removed: dict[str, PodInfo] = {}
        added: list[tuple[PodInfo, str]] = []
        plan = Plan()
        for member in members:
            choice = self._best_node(member, pdbs, removed, added, domain, exclude)
            if choice is None:
                return None
            for victim in choice.victims:
                for v in self.gang_of(victim):
                    if v.uid not in removed:
                        removed[v.uid] = v
                        plan.victims.append(v)
            added.append((member, choice.node))
            plan.nominations.append((member, choice.node))
        return plan if plan.victims else None

    def _best_node(self, pod: PodInfo, pdbs: list[Budget], removed: dict[str, PodInfo],
                   added: list[tuple[PodInfo, str]], domain: frozenset[str] | None,
                   exclude: frozenset[str]) -> _Choice | None:
        nodes = sorted(n.name for n in self.ledger.existing()
                       if (domain is None or n.name in domain) and n.name not in exclude)
        if not nodes:
            return None
        want = min(len(nodes), max(self.min_candidates, len(nodes) * self.percentage // 100))
        start = self._offset % len(nodes)
        self._offset += 1
        found: list[_Choice] = []
        for i in range(len(nodes)):
            node = self.ledger.nodes[nodes[(start + i) % len(nodes)]]
            if static_reason(pod, node) is not None:
                continue  # unresolvable: preemption cannot help there
            choice = self._victims_on(pod, node, pdbs, removed, added)
            if choice is not None:
                found.append(choice)
                if len(found) >= want:
                    break
        return _pick(found)

    def _victims_on(self, pod: PodInfo, node: NodeState, pdbs: list[Budget],
                    removed: dict[str, PodInfo], added: list[tuple[PodInfo, str]]
                    ) -> _Choice | None:
        potential = []
        for other in node.pods.values():
            if other.uid in removed:
                continue
            gang = self.gang_of(other)
            if max(g.priority for g in gang) < pod.priority:
                potential.append(other)
        if not potential:
            # Nothing (more) to evict here; a gang's later member may still fit in the room
            # its earlier members' victims made on this node.
            return _Choice(node.name, [], 0) if self._fits(pod, node, set(removed), added) \
                else None
        gone = set(removed) | {p.uid for p in potential}
        if not self._fits(pod, node, gone, added):
            return None
        potential.sort(key=_importance)
        violating, fine = _split_by_pdb(potential, pdbs)
        victims: list[PodInfo] = []
        violations = 0
        for group, counts in ((violating, True), (fine, False)):
            for other in group:
                gone.discard(other.uid)
                if self._fits(pod, node, gone, added):
                    continue
                gone.add(other.uid)
                victims.append(other)
                violations += counts
        return _Choice(node.name, victims, violations)

    def _fits(self, pod: PodInfo, node: NodeState, gone: set[str],
              added: list[tuple[PodInfo, str]]) -> bool:
        """Would ``pod`` pass every filter on ``node`` with ``gone`` evicted and ``added``
        placed (RunFilterPluginsWithNominatedPods on the modified NodeInfo)?"""
        here_added = [p for p, n in added if n == node.name]
        freed = Request()
        freed_pods = 0
        for uid, other in node.pods.items():
            if uid in gone:
                freed = freed + other.request
                freed_pods += 1
        extra = Request()
        for p in here_added:
            extra = extra + p.request
        pods_now = len(node.pods) - freed_pods + len(here_added)
        if pods_now + 1 > node.allocatable.get("pods", 0):
            return False
        for resource, amount in pod.request.items():
            free = node.allocatable.get(resource, 0) - node.requested.get(resource, 0) + \
                freed.get(resource) - extra.get(resource)
            if amount > free:
                return False
        ports = {port for uid, other in node.pods.items() if uid not in gone
                 for port in other.host_ports}
        ports |= {port for p in here_added for port in p.host_ports}
        for ip, proto, port in pod.host_ports:
            if any(pp == port and pr == proto and (ip == "0.0.0.0" or i in ("0.0.0.0", ip))
                   for i, pr, pp in ports):
                return False
        if self.filters.needs_interpod(pod):
            state = self.filters.interpod(pod, added, skip=gone)
            failed = state.fail(node)
            if failed is not None:
                return False
        return True


def _split_by_pdb(pods: list[PodInfo], pdbs: list[Budget]) -> tuple[list[PodInfo],
                                                                     list[PodInfo]]:
    """``filterPodsWithPDBViolation``: the pods whose eviction would exceed a budget."""
    allowed = [b.allowed for b in pdbs]
    violating, fine = [], []
    for pod in pods:
        violated = False
        if pod.labels:
            for i, b in enumerate(pdbs):
                if b.namespace != pod.namespace or b.selector.empty or \
                        not b.selector.matches(pod.labels) or pod.name in b.disrupted:
                    continue
                allowed[i] -= 1
                if allowed[i] < 0:
                    violated = True
        (violating if violated else fine).append(pod)
    return violating, fine


def _pick(choices: list[_Choice]) -> _Choice | None:
    """``pickOneNodeForPreemption``."""
    if not choices:
        return None

    def keys(c: _Choice) -> tuple:
        prios = [v.priority for v in c.victims]
        starts = [v.started for v in c.victims if v.started]
        return (c.violations, max(prios, default=-_MAX_INT32 - 1),
                sum(p + _MAX_INT32 + 1 for p in prios), len(c.victims),
                -(min(starts) if starts else 0.0))

    return min(choices, key=keys)
