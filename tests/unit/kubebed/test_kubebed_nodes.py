"""The multi-node parts of the bed that need no root: names and addresses per node, the nft
tables, the cgroup mounts a node repeats, and who made a change on the machine."""

from __future__ import annotations

import ipaddress
from pathlib import Path

import pytest
from kubebed import hoststate
from kubebed.__main__ import main as kube_main
from kubebed.layout import MAX_NODES, Layout, LayoutError
from kubebed.node import cgroup_mounts
from kubebed.services import Catalog, host_rules, nft_rules


def test_every_node_of_a_bed_has_its_own_names_and_networks() -> None:
    lay = Layout.for_slot("e2e", 7, Path("/tmp/x/e2e"))
    nodes = [lay.node(i) for i in range(MAX_NODES)]
    assert [n.name for n in nodes[:4]] == ["e2e-node", "e2e-node2", "e2e-node3", "e2e-node4"]
    assert nodes[0].pod_cidr == lay.pod_cidr, "the first node keeps the bed's pod network"
    lan = ipaddress.ip_network(lay.lan_cidr)
    nets = [ipaddress.ip_network(n.pod_cidr) for n in nodes] + [lan]
    for i, one in enumerate(nets):
        for other in nets[i + 1:]:
            assert not one.overlaps(other), (one, other)
    for node in nodes:
        assert ipaddress.ip_address(node.ip) in lan and node.ip != lay.lan_gateway
        assert ipaddress.ip_address(node.pod_gateway) in ipaddress.ip_network(node.pod_cidr)
        assert node.cgroup.startswith(lay.cgroup_root + "/")
        assert Path(node.state_dir).is_relative_to(lay.state)
    assert len({n.ip for n in nodes}) == MAX_NODES
    assert max(len(f"fxkv{99}n{i}") for i in range(MAX_NODES)) <= 15  # IFNAMSIZ
    assert all(not ipaddress.ip_network(n.pod_cidr).overlaps(ipaddress.ip_network(
        "10.244.0.0/16")) for n in nodes), "the labs' networks stay free"
    with pytest.raises(LayoutError, match="node index"):
        lay.node(MAX_NODES)


def test_beds_never_share_a_node_network() -> None:
    one = Layout.for_slot("a", 1, Path("/tmp/x/a"))
    two = Layout.for_slot("b", 2, Path("/tmp/x/b"))
    assert one.lan_bridge != two.lan_bridge
    mine = {one.node(i).pod_cidr for i in range(MAX_NODES)} | {one.lan_cidr}
    theirs = {two.node(i).pod_cidr for i in range(MAX_NODES)} | {two.lan_cidr}
    assert not mine & theirs


def test_a_node_translates_services_for_its_pods_and_itself() -> None:
    lay = Layout.for_slot("a", 3, Path("/tmp/x/a"))
    node = lay.node(2)
    catalog = Catalog.build(
        [{"metadata": {"name": "web", "namespace": "d"},
          "spec": {"clusterIP": "10.96.0.20", "ports": [{"port": 80, "protocol": "TCP"}]}}],
        [{"metadata": {"name": "web", "namespace": "d"},
          "subsets": [{"addresses": [{"ip": lay.node(0).pod_cidr[:-4] + "5"},
                                     {"ip": node.pod_cidr[:-4] + "9"}],
                       "ports": [{"port": 8080}]}]}])
    rules = nft_rules(lay, node, catalog)
    assert "hook prerouting" in rules and "hook output" in rules
    assert f"dnat to {lay.node_ip}:{lay.ports['apiserver']}" in rules
    assert "numgen random mod 2" in rules, "endpoints on two nodes, both reachable"
    assert f"ip saddr {node.pod_cidr} ct status dnat masquerade" in rules
    host = host_rules(lay)
    assert f'iifname "{lay.lan_bridge}" oifname != "{lay.lan_bridge}" reject' in host
    assert lay.nft_table in host


def test_a_node_mounts_the_machines_cgroup_hierarchies_again() -> None:
    mounts = cgroup_mounts()
    if not mounts:
        pytest.skip("this machine mounts no cgroup hierarchy under /sys/fs/cgroup")
    for sub, fstype, opts in mounts:
        assert fstype in ("cgroup", "cgroup2") and not sub.startswith("/")
        assert "rw" not in opts.split(",")
        if "name=systemd" in opts:
            assert opts.split(",")[0] == "none", "a named hierarchy is mounted without controllers"


def test_runc_state_is_the_beds_only_when_it_names_the_bed() -> None:
    lay = Layout.for_slot("a", 3, Path("/tmp/fluxinfra-kube/beds/a"))
    before = {"files": set(), "links": set(), "routes": set()}
    after = {"files": {"/run/runc",
                       "/run/runc/abc rootfs=/var/lib/containers/storage/overlay/x/merged "
                       "cgroup=/libpod_parent/abc",
                       "/run/runc/def rootfs=/tmp/fluxinfra-kube/beds/a/nodes/a-node/x "
                       "cgroup=/kubepods/pod1"},
             "links": {f"{lay.lan_bridge} master=-", "fxkv3n1 master=fxkn3"},
             "routes": {f"{lay.node(1).pod_cidr} via {lay.node(1).ip} dev fxkn3"}}
    ours, theirs = hoststate.attribute(hoststate.changes(before, after), [lay])
    assert any(line.endswith("/run/runc") for line in theirs), "runc's own directory"
    assert any("/run/runc/abc" in line for line in theirs), "podman's container"
    assert any("/run/runc/def" in line for line in ours), "a container of the bed's node"
    assert any(lay.lan_bridge in line for line in ours)
    assert any("fxkv3n1" in line for line in ours)
    assert any(lay.node(1).pod_cidr in line for line in ours)


@pytest.mark.parametrize("argv, message", [
    (["up", "--nodes", "17"], "--nodes 17"),
    (["up", "--nodes", "-1"], "--nodes -1"),
])
def test_bad_node_counts_get_one_line_errors(argv, message, capsys) -> None:
    with pytest.raises(SystemExit) as exit_:
        kube_main(argv)
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
