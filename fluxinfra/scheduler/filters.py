"""Where a pod may go: kube-scheduler v1.28's Filter plugins over the exact :class:`Ledger`.

Two kinds of check, as in kube-scheduler:

- **static** (they read only the pod and the Node object): NodeUnschedulable (``spec.
  unschedulable`` unless the pod tolerates ``node.kubernetes.io/unschedulable:NoSchedule``),
  NodeAffinity (``nodeSelector`` and required node affinity, ``matchFields`` on
  ``metadata.name``), TaintToleration (every NoSchedule/NoExecute taint, ``node.kubernetes.io/*``
  condition taints included, must be tolerated). Their result depends only on the pod's
  :attr:`~fluxinfra.scheduler.pods.PodInfo.static_key`, so it is computed once per distinct key
  (10,000 identical pods filter 5,000 nodes once) and kept up to date node by node as nodes
  change (:meth:`Filters.node_changed`).
- **dynamic** (they read other pods): NodePorts, InterPodAffinity (the pod's required affinity
  and anti-affinity, and existing pods' required anti-affinity against it), PodTopologySpread
  (DoNotSchedule constraints: ``minDomains``, ``matchLabelKeys``, node inclusion policies) and
  NodeResourcesFit (exact, every resource by name, the pod count). :class:`InterPod` is their
  pre-computed state for one pod (kube's PreFilter), updated pod by pod
  (:meth:`InterPod.update`) when a gang places members one after another or preemption removes
  victims.

The candidate set of a pod (static, then the inter-pod checks) is what the matcher is told
(an RFC 31 constraint); resource fit is left to the graph, whose pools count the same amounts,
and is checked here again before anything is bound. Messages follow kube-scheduler's
(``0/5 nodes are available: 2 Insufficient cpu, 3 node(s) had untolerated taint {a: b}.``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from fluxinfra.kube.selectors import Taint, tolerates, untolerated_taint
from fluxinfra.scheduler.ledger import Ledger, NodeState
from fluxinfra.scheduler.pods import AffinityTerm, PodInfo, SpreadConstraint

__all__ = ["Filters", "InterPod", "static_reason"]

UNSCHEDULABLE_TAINT = Taint("node.kubernetes.io/unschedulable", "", "NoSchedule")
R_UNSCHEDULABLE = "node(s) were unschedulable"
R_NODE_AFFINITY = "node(s) didn't match Pod's node affinity/selector"
R_PORTS = "node(s) didn't have free ports for the requested pod ports"
R_POD_AFFINITY = "node(s) didn't match pod affinity rules"
R_POD_ANTI = "node(s) didn't match pod anti-affinity rules"
R_EXISTING_ANTI = "node(s) didn't satisfy existing pods anti-affinity rules"
R_SPREAD = "node(s) didn't match pod topology spread constraints"
R_SPREAD_LABEL = "node(s) didn't match pod topology spread constraints (missing required label)"


def static_reason(pod: PodInfo, node: NodeState) -> str | None:
    """Why a static filter rejects ``node`` for ``pod`` (UnschedulableAndUnresolvable), or
    None."""
    if not node.exists:
        return "node(s) not found"
    if node.unschedulable and not any(tolerates(t, UNSCHEDULABLE_TAINT)
                                      for t in pod.tolerations):
        return R_UNSCHEDULABLE
    labels = node.labels
    if any(labels.get(k) != v for k, v in pod.node_selector):
        return R_NODE_AFFINITY
    if pod.node_affinity is not None and not pod.node_affinity.matches(node.name, labels):
        return R_NODE_AFFINITY
    taint = untolerated_taint(node.taints, pod.tolerations)
    if taint is not None:
        return f"node(s) had untolerated taint {taint}"
    return None


def _count(counter: Counter, key: tuple[str, str], delta: int) -> None:
    counter[key] += delta
    if counter[key] == 0:
        del counter[key]


@dataclass
class _Spread:
    constraint: SpreadConstraint
    counts: Counter = field(default_factory=Counter)  #: (key, value) -> matching pods
    eligible: set[str] = field(default_factory=set)    #: nodes whose domain counts


@dataclass
class InterPod:
    """One pod's inter-pod state (kube's PreFilter results for NodePorts' sibling plugins):
    topology pairs its affinity needs, pairs its anti-affinity forbids, pairs existing pods'
    anti-affinity forbids, and its spread constraints' per-domain counts."""

    pod: PodInfo
    ns_labels: Mapping[str, Mapping[str, str]]
    affinity: Counter = field(default_factory=Counter)
    anti: Counter = field(default_factory=Counter)
    existing_anti: Counter = field(default_factory=Counter)
    spread: list[_Spread] = field(default_factory=list)
    terms_ns: dict[int, frozenset[str]] = field(default_factory=dict)

    def _term_ns(self, term: AffinityTerm) -> frozenset[str]:
        """The term's namespaces with its namespaceSelector's matches merged in
        (``mergeAffinityTermNamespacesIfNotEmpty``)."""
        got = self.terms_ns.get(id(term))
        if got is None:
            got = term.namespaces | frozenset(
                ns for ns, labels in self.ns_labels.items()
                if term.namespace_selector.matches(labels))
            self.terms_ns[id(term)] = got
        return got

    def _matches(self, term: AffinityTerm, other: PodInfo) -> bool:
        return other.namespace in self._term_ns(term) and term.selector.matches(other.labels)

    def update(self, other: PodInfo, node: NodeState, sign: int = 1) -> None:
        """``other`` joins (+1) or leaves (-1) ``node`` (kube's AddPod / RemovePod)."""
        pod = self.pod
        labels = node.labels
        if pod.affinity and all(self._matches(t, other) for t in pod.affinity):
            for t in pod.affinity:
                if t.topology_key in labels:
                    _count(self.affinity, (t.topology_key, labels[t.topology_key]), sign)
        for t in pod.anti_affinity:
            if t.topology_key in labels and self._matches(t, other):
                _count(self.anti, (t.topology_key, labels[t.topology_key]), sign)
        ns = self.ns_labels.get(pod.namespace)
        for t in other.anti_affinity:
            if t.topology_key in labels and t.matches(pod.labels, pod.namespace, ns):
                _count(self.existing_anti, (t.topology_key, labels[t.topology_key]), sign)
        if other.namespace == pod.namespace and not other.deleting:
            for s in self.spread:
                c = s.constraint
                if node.name in s.eligible and not c.selector.empty and \
                        c.selector.matches(other.labels):
                    _count(s.counts, (c.topology_key, labels[c.topology_key]), sign)

    def fail(self, node: NodeState) -> tuple[str, bool] | None:
        """(reason, unresolvable) when an inter-pod filter rejects ``node``; else None."""
        pod = self.pod
        labels = node.labels
        for port in pod.host_ports:
            if node.port_conflict(*port):
                return R_PORTS, False
        if pod.affinity:
            exist = True
            for t in pod.affinity:
                value = labels.get(t.topology_key)
                if value is None:
                    return R_POD_AFFINITY, True
                if self.affinity.get((t.topology_key, value), 0) <= 0:
                    exist = False
            if not exist and not (not self.affinity and all(
                    self._matches(t, pod) for t in pod.affinity)):
                return R_POD_AFFINITY, True
        if self.anti:
            for t in pod.anti_affinity:
                value = labels.get(t.topology_key)
                if value is not None and self.anti.get((t.topology_key, value), 0) > 0:
                    return R_POD_ANTI, False
        if self.existing_anti:
            for pair in labels.items():
                if self.existing_anti.get(pair, 0) > 0:
                    return R_EXISTING_ANTI, False
        for s in self.spread:
            c = s.constraint
            value = labels.get(c.topology_key)
            if value is None:
                return R_SPREAD_LABEL, True
            domains = {k for k in s.counts if k[0] == c.topology_key}
            if not domains:
                continue  # kube: no critical path for the key (an internal error there)
            low = min(s.counts[k] for k in domains)
            if len(domains) < c.min_domains:
                low = 0
            own = 1 if c.selector.matches(pod.labels) else 0
            if s.counts.get((c.topology_key, value), 0) + own - low > c.max_skew:
                return R_SPREAD, False
        return None


class Filters:
    """Static candidate sets (cached per static key) and inter-pod state over a ledger."""

    def __init__(self, ledger: Ledger,
                 ns_labels: Mapping[str, Mapping[str, str]] | None = None) -> None:
        self.ledger = ledger
        #: namespace -> its labels (namespaceSelector of pod affinity terms)
        self.ns_labels: Mapping[str, Mapping[str, str]] = ns_labels if ns_labels is not None \
            else {}
        #: static key -> [candidate frozenset, nodes changed since it was computed]
        self._static: dict[tuple, list] = {}
        self.static_evaluations = 0

    # -- static ---------------------------------------------------------------------------------
    def node_changed(self, name: str) -> None:
        """A node was added, changed or removed: the cached sets re-check it when next read."""
        for entry in self._static.values():
            entry[1].add(name)

    def static_candidates(self, pod: PodInfo) -> frozenset[str]:
        key = pod.static_key
        entry = self._static.get(key)
        nodes = self.ledger.nodes
        if entry is None:
            self.static_evaluations += len(nodes)
            cands = frozenset(n.name for n in self.ledger.existing()
                              if static_reason(pod, n) is None)
            if len(self._static) >= 4096:
                self._static.clear()
            self._static[key] = [cands, set()]
            return cands
        cands, changed = entry
        if changed:
            add, drop = set(), set()
            for name in changed:
                state = nodes.get(name)
                ok = state is not None and static_reason(pod, state) is None
                if ok and name not in cands:
                    add.add(name)
                elif not ok and name in cands:
                    drop.add(name)
            self.static_evaluations += len(changed)
            changed.clear()
            if add or drop:
                cands = entry[0] = (cands - drop) | add
        return cands

    # -- dynamic --------------------------------------------------------------------------------
    def needs_interpod(self, pod: PodInfo) -> bool:
        """Whether other pods can restrict where ``pod`` goes."""
        return pod.interpod or bool(self.ledger.anti_affinity)

    def interpod(self, pod: PodInfo, extra: Iterable[tuple[PodInfo, str]] = (),
                 skip: frozenset[str] | set[str] = frozenset()) -> InterPod:
        """The pod's inter-pod state over the ledger without the pods in ``skip`` (uids:
        preemption victims), plus ``extra`` (pod, node) placements not in it yet (gang members
        placed before this one)."""
        state = InterPod(pod, self.ns_labels)
        if pod.spread:
            keys = [c.topology_key for c in pod.spread]
            for c in pod.spread:
                eligible = set()
                for n in self.ledger.existing():
                    if not all(k in n.labels for k in keys):
                        continue
                    if c.honor_affinity and (any(n.labels.get(k) != v for k, v in
                                                 pod.node_selector) or (
                            pod.node_affinity is not None
                            and not pod.node_affinity.matches(n.name, n.labels))):
                        continue
                    if c.honor_taints and untolerated_taint(n.taints, pod.tolerations):
                        continue
                    eligible.add(n.name)
                spread = _Spread(c, Counter(), eligible)
                for name in eligible:  # every eligible domain counts, with 0 pods too
                    spread.counts[(c.topology_key, self.ledger.nodes[name].labels[
                        c.topology_key])] += 0
                state.spread.append(spread)
        if pod.affinity or pod.anti_affinity or pod.spread:
            for other, node in self.ledger.pods():
                if node.exists and other.uid != pod.uid and other.uid not in skip:
                    state.update(other, node)
        elif self.ledger.anti_affinity:
            for other in self.ledger.anti_affinity.values():
                node = self.ledger.nodes[self.ledger.where[other.uid]]
                if node.exists and other.uid != pod.uid and other.uid not in skip:
                    state.update(other, node)
        for other, name in extra:
            node = self.ledger.nodes.get(name)
            if node is not None:
                state.update(other, node)
        return state

    def candidates(self, pod: PodInfo, state: InterPod | None = None,
                   extra_ports: Mapping[str, list[PodInfo]] | None = None) -> frozenset[str]:
        """Static candidates, minus nodes an inter-pod filter rejects (``state``), minus nodes
        whose host ports pods in ``extra_ports`` (node -> pods placed there tentatively)
        already take."""
        cands = self.static_candidates(pod)
        if state is None or not (pod.interpod or state.existing_anti):
            return cands
        nodes = self.ledger.nodes
        keep = []
        for name in cands:
            node = nodes[name]
            if state.fail(node) is not None:
                continue
            if extra_ports and pod.host_ports and any(
                    set(p.host_ports) & set(pod.host_ports) for p in extra_ports.get(name, ())):
                continue
            keep.append(name)
        return frozenset(keep)

    # -- messages -------------------------------------------------------------------------------
    def explain(self, pod: PodInfo, state: InterPod | None = None) -> tuple[int, str]:
        """How many nodes ``pod`` fits now, and kube-scheduler's FitError text for it."""
        reasons: Counter = Counter()
        fit = 0
        nodes = list(self.ledger.existing())
        for node in nodes:
            why = static_reason(pod, node)
            if why is None and state is not None:
                failed = state.fail(node)
                why = failed[0] if failed else None
            if why is not None:
                reasons[why] += 1
                continue
            lacking = self.ledger.insufficient(pod.request, node.name)
            for r in lacking:
                reasons[r] += 1
            if not lacking:
                fit += 1
        text = ", ".join(sorted(f"{n} {r}" for r, n in reasons.items()))
        head = f"{fit}/{len(nodes)} nodes are available"
        return fit, (f"{head}: {text}." if text else f"{head}.")
