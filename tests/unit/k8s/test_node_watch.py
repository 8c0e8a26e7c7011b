"""node-watch (the installer's join/leave loop): which nodes get a broker, in which rank order,
and the bootstrap config it writes. Loaded from the template file the ConfigMap ships."""

import importlib.util
import tomllib
from pathlib import Path

import pytest

import fluxinfra

SCRIPT = Path(fluxinfra.__file__).parent / "templates" / "node-watch.py"
SETTINGS = {"nodeSelector": {"flux": "yes"}, "tolerations": [], "brokerPort": 8050,
            "topology": "kary:2", "settleSeconds": 0, "etcDir": "/etc/fluxinfra",
            "libDir": "/var/lib/fluxinfra"}


@pytest.fixture(scope="module")
def nw():
    spec = importlib.util.spec_from_file_location("node_watch", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def node(name, ip="10.0.0.1", labels=None, taints=None, deleting=False):
    meta = {"name": name, "labels": {"flux": "yes", **(labels or {})}}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {"metadata": meta, "spec": {"taints": taints or []},
            "status": {"addresses": [{"type": "InternalIP", "address": ip},
                                     {"type": "Hostname", "address": name}]}}


def names(hosts):
    return [h["name"] for h in hosts]


def test_ranks_follow_sorted_node_names(nw):
    hosts = nw.broker_hosts([node("w3", "10.0.0.3"), node("w1", "10.0.0.1"),
                             node("w2", "10.0.0.2")], SETTINGS)
    assert names(hosts) == ["w1", "w2", "w3"]


def test_selector_taints_and_deletion_exclude_nodes(nw):
    nodes = [node("a"), node("b", labels={"flux": "no"}),
             node("c", taints=[{"key": "node-role.kubernetes.io/control-plane",
                                "effect": "NoSchedule"}]),
             node("d", deleting=True),
             node("e", taints=[{"key": "node.kubernetes.io/not-ready", "effect": "NoExecute"}]),
             node("f", taints=[{"key": "soft", "effect": "PreferNoSchedule"}])]
    assert names(nw.broker_hosts(nodes, SETTINGS)) == ["a", "e", "f"]


def test_tolerations_let_tainted_nodes_in(nw):
    taint = [{"key": "hpc", "value": "true", "effect": "NoSchedule"}]
    settings = {**SETTINGS, "tolerations": [{"key": "hpc", "operator": "Equal",
                                             "value": "true", "effect": "NoSchedule"}]}
    assert names(nw.broker_hosts([node("t", taints=taint)], settings)) == ["t"]
    exists_any = {**SETTINGS, "tolerations": [{"operator": "Exists"}]}
    assert names(nw.broker_hosts([node("t", taints=taint)], exists_any)) == ["t"]
    assert names(nw.broker_hosts([node("t", taints=taint)], SETTINGS)) == []


def test_a_joining_node_changes_the_host_list_and_a_leaving_one_too(nw):
    before = nw.broker_hosts([node("w1"), node("w2")], SETTINGS)
    joined = nw.broker_hosts([node("w1"), node("w2"), node("w0")], SETTINGS)
    left = nw.broker_hosts([node("w2")], SETTINGS)
    assert names(joined) == ["w0", "w1", "w2"] and joined != before
    assert names(left) == ["w2"]


def test_bootstrap_config_is_valid_toml_in_rank_order(nw):
    hosts = nw.broker_hosts([node("w2", "10.0.0.2"), node("w1", "fd00::1")], SETTINGS)
    config = tomllib.loads(nw.bootstrap_toml(hosts, SETTINGS))
    boot = config["bootstrap"]
    assert boot["curve_cert"] == "/etc/fluxinfra/curve.cert"
    assert [h["host"] for h in boot["hosts"]] == ["w1", "w2"]
    assert boot["hosts"][0]["connect"] == "tcp://[fd00::1]:8050"
    assert boot["hosts"][1]["connect"] == "tcp://10.0.0.2:8050"
    assert config["tbon"]["topo"] == "kary:2"


def test_node_without_internal_ip_gets_no_rank(nw):
    bare = node("x")
    bare["status"]["addresses"] = []
    assert nw.broker_hosts([bare, node("y")], SETTINGS)[0]["name"] == "y"


def event(kind, obj):
    return {"type": kind, "object": obj}


def test_membership_reacts_to_joins_leaves_and_eligibility_not_to_readiness(nw):
    members = nw.Membership(SETTINGS)
    members.relist([node("w1", "10.0.0.1"), node("w2", "10.0.0.2")])
    assert members.apply(event("ADDED", node("w3", "10.0.0.3")))           # join
    not_ready = node("w3", "10.0.0.3")
    not_ready["status"]["conditions"] = [{"type": "Ready", "status": "False"}]
    assert not members.apply(event("MODIFIED", not_ready))                 # readiness: no change
    assert members.apply(event("MODIFIED", node("w3", "10.0.0.3", labels={"flux": "no"})))
    assert not members.apply(event("DELETED", node("w3", "10.0.0.3")))    # already excluded
    assert members.apply(event("MODIFIED", node("w2", "10.0.0.9")))        # new address
    assert members.apply(event("DELETED", node("w1")))                     # leave
    assert names(members.hosts()) == ["w2"]


def test_sync_restarts_only_when_the_config_changes(nw, tmp_path):
    (tmp_path / "etc/fluxinfra/conf.d").mkdir(parents=True)
    calls = []

    def start(settings, action):
        calls.append(action)

    hosts = nw.broker_hosts([node("w1"), node("w2", "10.0.0.2")], SETTINGS)
    assert nw.sync_broker(hosts, SETTINGS, root=str(tmp_path), start=start) == "restarted"
    assert nw.sync_broker(hosts, SETTINGS, root=str(tmp_path), start=start) == "ensured"
    fewer = hosts[:1]
    assert nw.sync_broker(fewer, SETTINGS, root=str(tmp_path), start=start) == "restarted"
    assert calls == ["restart", "ensure", "restart"]
    written = (tmp_path / "etc/fluxinfra/conf.d/bootstrap.toml").read_text()
    assert written == nw.bootstrap_toml(fewer, SETTINGS)
    assert not list((tmp_path / "etc/fluxinfra/conf.d").glob("*.tmp"))
