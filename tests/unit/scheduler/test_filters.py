"""kube-scheduler v1.28's filter semantics, case by case (pure: ledger + filters, no API)."""

from __future__ import annotations

from typing import Any

import pytest

from fluxinfra.kube.selectors import LabelSelector, NodeSelector, SelectorError, Toleration
from fluxinfra.scheduler.filters import Filters, static_reason
from fluxinfra.scheduler.ledger import Ledger
from fluxinfra.scheduler.pods import PodSpecError, pod_info, podgroup_spec

from .kube_double import make_node, make_pod, make_podgroup

ZONE = "topology.kubernetes.io/zone"


def ledger(*nodes: dict[str, Any]) -> Ledger:
    led = Ledger()
    for n in nodes:
        led.upsert_node(n)
    return led


def place(led: Ledger, name: str, node: str, **pod: Any) -> None:
    led.add(pod_info(make_pod(name, node=node, phase="Running", **pod)), node)


def test_label_selectors_nil_selects_nothing_empty_everything() -> None:
    assert not LabelSelector.parse(None, "s").matches({})
    assert LabelSelector.parse({}, "s").matches({"a": "b"}) and LabelSelector.parse({}, "s").empty
    sel = LabelSelector.parse({"matchLabels": {"app": "a"}, "matchExpressions": [
        {"key": "tier", "operator": "NotIn", "values": ["db"]}]}, "s")
    assert sel.matches({"app": "a"}) and not sel.matches({"app": "a", "tier": "db"})
    with pytest.raises(SelectorError, match="s.matchExpressions\\[0\\].operator"):
        LabelSelector.parse({"matchExpressions": [{"key": "a", "operator": "Gt",
                                                   "values": ["1"]}]}, "s")


def test_node_selector_terms_or_expressions_and() -> None:
    ns = NodeSelector.parse({"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "a", "operator": "In", "values": ["1"]},
                              {"key": "b", "operator": "Exists"}]},
        {"matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": ["x"]}]}]},
        "aff")
    assert ns.matches("x", {"a": "1", "b": ""})
    assert ns.matches("y", {}) and not ns.matches("x", {"a": "1"})
    assert not NodeSelector.parse({"nodeSelectorTerms": [{}]}, "aff").matches("n", {}), \
        "only empty terms: nothing matches"
    with pytest.raises(SelectorError, match="only metadata.name"):
        NodeSelector.parse({"nodeSelectorTerms": [{"matchFields": [
            {"key": "spec.x", "operator": "In", "values": ["1"]}]}]}, "aff")


@pytest.mark.parametrize("value", [True, 5, "a", {"key": "a"}])
def test_requirements_that_are_not_a_list_are_named(value: object) -> None:
    with pytest.raises(SelectorError, match=r"aff.nodeSelectorTerms\[0\].matchExpressions: .* "
                                            "is not a list of requirements"):
        NodeSelector.parse({"nodeSelectorTerms": [{"matchExpressions": value}]}, "aff")
    with pytest.raises(SelectorError, match=r"aff.nodeSelectorTerms\[0\].matchFields: "):
        NodeSelector.parse({"nodeSelectorTerms": [{"matchFields": value}]}, "aff")
    with pytest.raises(SelectorError, match=r"s.matchExpressions: .* is not a list"):
        LabelSelector.parse({"matchExpressions": value}, "s")


def test_tolerations_need_exists_for_an_empty_key() -> None:
    with pytest.raises(SelectorError, match="an empty key needs operator Exists"):
        Toleration.parse({"value": "x"}, "spec.tolerations[0]")
    bad = make_pod("p")
    bad["spec"]["tolerations"] = [{"key": "k", "operator": "Bogus"}]
    with pytest.raises(PodSpecError, match="spec.tolerations\\[0\\].operator: 'Bogus'"):
        pod_info(bad)


def test_prefer_no_schedule_taints_never_filter() -> None:
    led = ledger(make_node("n", taints=[{"key": "k", "effect": "PreferNoSchedule"}]))
    assert static_reason(pod_info(make_pod("p")), led.nodes["n"]) is None


def test_static_candidates_are_computed_once_and_updated_node_by_node() -> None:
    led = ledger(*[make_node(f"n{i}", labels={"pool": "a" if i % 2 else "b"})
                   for i in range(100)])
    filters = Filters(led)
    pods = [pod_info(make_pod(f"p{i}", spec={"nodeSelector": {"pool": "a"}}))
            for i in range(50)]
    first = filters.static_candidates(pods[0])
    assert len(first) == 50 and filters.static_evaluations == 100
    assert all(filters.static_candidates(p) is first for p in pods), "one set for all"
    assert filters.static_evaluations == 100
    led.upsert_node(make_node("n0", labels={"pool": "a"}))
    filters.node_changed("n0")
    again = filters.static_candidates(pods[1])
    assert "n0" in again and len(again) == 51 and filters.static_evaluations == 101


def test_pod_affinity_lets_the_first_pod_of_a_group_in() -> None:
    led = ledger(make_node("a", labels={ZONE: "z1"}), make_node("b", labels={ZONE: "z2"}),
                 make_node("c"))
    filters = Filters(led)
    aff = {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"app": "x"}}, "topologyKey": ZONE}]}}
    first = pod_info(make_pod("first", labels={"app": "x"}, spec={"affinity": aff}))
    cands = filters.candidates(first, filters.interpod(first))
    assert cands == {"a", "b"}, "matches its own term: any node with the topology key"
    other = pod_info(make_pod("other", labels={"app": "y"}, spec={"affinity": aff}))
    assert filters.candidates(other, filters.interpod(other)) == frozenset()
    place(led, "peer", "b", labels={"app": "x"})
    assert filters.candidates(other, filters.interpod(other)) == {"b"}


def test_namespace_selector_of_an_anti_affinity_term() -> None:
    led = ledger(make_node("a"), make_node("b"))
    filters = Filters(led, {"prod": {"env": "prod"}, "dev": {"env": "dev"}})
    place(led, "db", "a", namespace="prod", labels={"app": "db"})
    place(led, "db2", "b", namespace="dev", labels={"app": "db"})
    anti = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"app": "db"}},
         "namespaceSelector": {"matchLabels": {"env": "prod"}},
         "topologyKey": "kubernetes.io/hostname"}]}}
    pod = pod_info(make_pod("p", namespace="dev", spec={"affinity": anti}))
    assert filters.candidates(pod, filters.interpod(pod)) == {"b"}


def test_spread_inclusion_policies_and_missing_keys() -> None:
    led = ledger(make_node("a", labels={ZONE: "z1"}),
                 make_node("b", labels={ZONE: "z2"},
                           taints=[{"key": "t", "effect": "NoSchedule"}]),
                 make_node("c"))
    filters = Filters(led)
    place(led, "x", "a", labels={"app": "s"})

    def spread(**policy: str) -> Any:
        c = {"maxSkew": 1, "topologyKey": ZONE, "whenUnsatisfiable": "DoNotSchedule",
             "labelSelector": {"matchLabels": {"app": "s"}}, **policy}
        return pod_info(make_pod("p", labels={"app": "s"},
                                 spec={"topologySpreadConstraints": [c]}))

    ignore = spread()  # z2 counts although the pod cannot go there: z1 1, z2 0 -> a skews 2
    state = filters.interpod(ignore)
    assert filters.candidates(ignore, state) == frozenset()
    assert state.fail(led.nodes["c"]) == (
        "node(s) didn't match pod topology spread constraints (missing required label)", True)
    honor = spread(nodeTaintsPolicy="Honor")  # z2 is no domain: z1 alone is the minimum
    assert filters.candidates(honor, filters.interpod(honor)) == {"a"}


def test_explain_reads_like_kube_scheduler() -> None:
    led = ledger(make_node("a", cpu="1"), make_node("b", labels={"x": "y"}, cpu="1"),
                 make_node("c", taints=[{"key": "k", "value": "v", "effect": "NoExecute"}]))
    filters = Filters(led)
    pod = pod_info(make_pod("p", cpu="2", spec={"nodeSelector": {"x": "y"}}))
    fit, text = filters.explain(pod)
    assert fit == 0 and text == ("0/3 nodes are available: 1 Insufficient cpu, "
                                 "2 node(s) didn't match Pod's node affinity/selector.")


@pytest.mark.parametrize("spec, field", [
    ({"topologySpreadConstraints": [{"maxSkew": 0, "topologyKey": ZONE,
                                     "whenUnsatisfiable": "DoNotSchedule"}]},
     "spec.topologySpreadConstraints[0]"),
    ({"affinity": {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {}}]}}}, "topologyKey: missing"),
    ({"volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "c"}}]}, None),
])
def test_pod_errors_name_the_field(spec, field) -> None:
    pod = make_pod("p")
    pod["spec"].update(spec)  # hand-made objects: the API server would refuse these
    if field is None:
        assert pod_info(pod).unsupported.startswith(
            "spec.volumes[0].persistentVolumeClaim: volume binding and volume topology are "
            "not supported")
        return
    with pytest.raises(PodSpecError, match=field.replace("[", r"\[")):
        pod_info(pod)


def test_podgroup_fields_are_read_and_checked() -> None:
    spec = podgroup_spec(make_podgroup("g", 4, minResources={"cpu": "1500m", "memory": "1Gi"},
                                       scheduleTimeoutSeconds=30,
                                       annotations={"fluxinfra.io/topology-required": "rack"}))
    assert (spec.min_member, spec.min_resources.as_dict(), spec.schedule_timeout,
            spec.topology) == (4, {"cpu": 1500, "memory": 2**30}, 30, ("required", "rack"))
    with pytest.raises(PodSpecError, match="spec.minMember is 0"):
        podgroup_spec(make_podgroup("g", 0))
    with pytest.raises(PodSpecError, match="both fluxinfra.io/topology-required and"):
        podgroup_spec(make_podgroup("g", 1, annotations={
            "fluxinfra.io/topology-required": "rack", "fluxinfra.io/topology-preferred": "zone"}))
