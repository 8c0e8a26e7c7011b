"""Several real nodes: each one a machine of its own, and the seeds' picture on them.

With the bed's real nodes (``make e2e`` starts 4; ``FLUXINFRA_E2E_NODES``), these tests check
what a kind cluster would give: a ``hostPID`` pod that enters "the host" (``nsenter -t 1``)
lands in its own node (name, files, network); pods on different nodes reach each other by
address and by cluster DNS names; and the Flux installer, rendered from the dev stack with
``source: prefix`` (no conda-forge here), brings every node into one instance whose lead broker
is the first node, then keeps running jobs through a node joining and a node leaving.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import pytest
import yaml
from e2e_cluster import STACK_IMAGE, Cluster, wait_for
from flux_instance import (
    Instance,
    apply_installer,
    expand,
    remove_installer,
    render_dev_with_prefix,
    start_settings,
)

FLUX_PREFIX = Path(os.environ.get("FLUXINFRA_FLUX_PREFIX", "/opt/flux"))
NODES = 4


@pytest.fixture(scope="module")
def nodes(cluster: Cluster) -> list[str]:
    """The bed's first four real nodes (the tests need that many)."""
    if len(cluster.real_nodes) < NODES:
        pytest.skip(f"needs a bed of {NODES} real nodes (FLUXINFRA_E2E_NODES={NODES}; "
                    f"`make e2e` sets it), this one has {len(cluster.real_nodes)}")
    return cluster.real_nodes[:NODES]


def exec_in(cluster: Cluster, ns: str, pod: str, *argv: str, check: bool = True) -> str:
    return cluster.kubectl("exec", "-n", ns, pod, "--", *argv, check=check).stdout


def _host_pods(cluster: Cluster, ns: str, names: list[str], image: str) -> list[dict]:
    """One privileged hostPID pod per node, serving its node's name over HTTP, each with a
    hostname under the headless Service ``web``."""
    docs = [{"apiVersion": "v1", "kind": "Service",
             "metadata": {"name": "web", "namespace": ns},
             "spec": {"clusterIP": "None", "selector": {"app": "web"},
                      "ports": [{"port": 8080}]}},
            {"apiVersion": "v1", "kind": "Service",
             "metadata": {"name": "any", "namespace": ns},
             "spec": {"selector": {"app": "web"}, "ports": [{"port": 80, "targetPort": 8080}]}}]
    for i, node in enumerate(names):
        docs.append({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"n{i}", "namespace": ns, "labels": {"app": "web"}},
            "spec": {"nodeName": node, "hostPID": True, "hostname": f"n{i}", "subdomain": "web",
                     "terminationGracePeriodSeconds": 1,
                     "containers": [{
                         "name": "c", "image": image, "imagePullPolicy": "Never",
                         "securityContext": {"privileged": True},
                         "env": [{"name": "NODE", "valueFrom": {"fieldRef": {
                             "fieldPath": "spec.nodeName"}}}],
                         "command": ["sh", "-c", "mkdir -p /www && echo $NODE > /www/name && "
                                     "exec httpd -f -p 8080 -h /www"]}]}})
    cluster.apply("".join("---\n" + yaml.safe_dump(d) for d in docs))
    cluster.kubectl("wait", "-n", ns, "--for=condition=Ready", "pod", "-l", "app=web",
                    "--timeout=180s", timeout=200)
    return cluster.get("pods", "-n", ns, "-l", "app=web")["items"]


def test_each_node_is_a_machine_of_its_own(cluster: Cluster, nodes, busybox, namespace):
    pods = _host_pods(cluster, namespace, nodes, busybox)
    by_name = {p["metadata"]["name"]: p for p in pods}
    mark = f"/opt/fluxinfra-e2e-{namespace}"
    try:
        for i, node in enumerate(nodes):
            host = exec_in(cluster, namespace, f"n{i}", "nsenter", "-t", "1", "-m", "-u", "-n",
                           "--", "sh", "-c", f"hostname; echo {node} > {mark}; cat {mark}")
            assert host.split() == [node, node], f"n{i} entered {host!r}, not {node}"
        for i, node in enumerate(nodes):
            seen = exec_in(cluster, namespace, f"n{i}", "nsenter", "-t", "1", "-m", "--",
                           "cat", mark).strip()
            assert seen == node, f"{node} sees another node's {mark}: {seen!r}"
        assert not Path(mark).exists(), "a node wrote into the machine's /opt"
        addresses = {p["status"]["podIP"] for p in pods}
        hosts = {p["status"]["hostIP"] for p in pods}
        assert len(addresses) == len(hosts) == NODES, (addresses, hosts)
        # every pod reaches every other, by address and by its DNS name, and the Service
        for i in range(NODES):
            for j in range(NODES):
                ip = by_name[f"n{j}"]["status"]["podIP"]
                got = exec_in(cluster, namespace, f"n{i}", "timeout", "10", "wget", "-q", "-O-",
                              f"http://{ip}:8080/name").strip()
                assert got == nodes[j], (i, j, got)
                fqdn = f"n{j}.web.{namespace}.svc.cluster.local"
                got = exec_in(cluster, namespace, f"n{i}", "timeout", "10", "wget", "-q", "-O-",
                              f"http://{fqdn}:8080/name").strip()
                assert got == nodes[j], (i, fqdn, got)
            got = exec_in(cluster, namespace, f"n{i}", "timeout", "10", "wget", "-q", "-O-",
                          f"http://any.{namespace}.svc.cluster.local/name").strip()
            assert got in nodes, got
    finally:
        for i in range(NODES):
            exec_in(cluster, namespace, f"n{i}", "nsenter", "-t", "1", "-m", "--", "rm", "-f",
                    mark, check=False)


# -- the seeds' picture: one Flux instance over every node -----------------------------------

def installer_only(out: Path) -> list[Path]:
    """The rendered files of the installer (its namespace, RBAC, keys, scripts, DaemonSet)."""
    keep = []
    for path in sorted(out.glob("*.yaml")) + sorted((out / "secrets").glob("*.yaml")):
        doc = yaml.safe_load(path.read_text())
        if path.name == "kustomization.yaml" or not doc:
            continue
        meta = doc.get("metadata", {})
        if meta.get("namespace") == "flux-installer" or meta.get("name", "").startswith(
                "flux-installer"):
            keep.append(path)
    return keep


def test_the_installer_brings_every_node_into_one_instance(cluster: Cluster, nodes,
                                                           fluxinfra_image, tmp_path):
    if not (FLUX_PREFIX / "bin" / "flux").exists():
        pytest.skip(f"no Flux build at {FLUX_PREFIX} (FLUXINFRA_FLUX_PREFIX): the installer "
                    "with source: prefix needs one on the nodes")
    out = render_dev_with_prefix(tmp_path)
    files = installer_only(out)
    daemonset = next(yaml.safe_load(p.read_text()) for p in files
                     if p.name.startswith("daemonset-"))
    assert daemonset["spec"]["template"]["spec"]["containers"][0]["image"] == \
        "localhost/fluxinfra:0.1.0"
    scripts = next(yaml.safe_load(p.read_text()) for p in files
                   if p.name.startswith("configmap-"))
    settings = json.loads(scripts["data"]["node-watch.json"])
    label = next(iter(settings["nodeSelector"].items()))
    ns = daemonset["metadata"]["namespace"]
    cluster.bed.tag_image(STACK_IMAGE, "localhost/fluxinfra:0.1.0")
    flux = Instance(cluster, nodes[0], start_settings(out, settings))
    joined: list[str] = []
    try:
        for node in nodes:  # the first host first: it becomes the lead (rank 0)
            cluster.kubectl("label", "node", node, f"{label[0]}={label[1]}", "--overwrite")
        started = time.monotonic()
        apply_installer(cluster, files, ns)
        expect = f"{settings['hostPrefix']}[0-{NODES - 1}]"
        wait_for(lambda: flux.up() == expect, 600, f"ranks {expect} up")
        quorum = time.monotonic() - started
        ranks = json.loads(cluster.get("configmap", settings["rankMap"], "-n", ns)["data"][
            "ranks.json"])
        assert ranks["slots"]["0"]["node"] == nodes[0], "the lead broker is the first host"
        listing = flux.flux("resource", "list", "-no", "{state} {nnodes} {ncores} {nodelist}")
        cores = int(flux.on(nodes[0], "nproc", "--all").strip())
        lines = [ln for ln in listing.splitlines() if ln.strip()]
        free = [ln for ln in lines if ln.startswith("free ")]
        assert free and free[0].split()[1:3] == [str(NODES), str(NODES * cores)], listing
        # Ranks no node holds yet (maxNodes is room to grow) are down; no held rank is.
        held = {f"{settings['hostPrefix']}{r}" for r in range(NODES)}
        down = set().union(*[expand(ln.split()[-1], settings) for ln in lines
                             if ln.startswith("down ") and ln.split()[1] != "0"])
        assert not down & held, listing
        hosts = flux.flux("run", "-N", str(NODES), "hostname", timeout=180).split()
        assert sorted(hosts) == sorted(nodes), hosts
        print(f"\ninstaller over {NODES} real nodes: apply -> every rank up {quorum:.1f}s; "
              f"`flux run -N{NODES} hostname`: {' '.join(hosts)}")

        # -- a fifth node joins while a job runs on ranks 0-3 --------------------------------
        pids = {n: flux.broker_pid(n) for n in nodes}
        assert all(pids.values()), pids
        job = flux.flux("submit", "-N", str(NODES), "sleep", "60").strip()
        wait_for(lambda: flux.flux("jobs", "-no", "{state_single}", job).strip() == "R", 60,
                 "the job running on ranks 0-3")
        started = time.monotonic()
        fifth = cluster.bed.add_node()
        joined.append(fifth)
        cluster.kubectl("label", "node", fifth, f"{label[0]}={label[1]}", "--overwrite")
        wait_for(lambda: flux.up() == f"{settings['hostPrefix']}[0-{NODES}]", 600,
                 "the fifth node's rank up")
        join = time.monotonic() - started
        assert {n: flux.broker_pid(n) for n in nodes} == pids, "no running broker restarted"
        wait_for(lambda: flux.flux("jobs", "-no", "{status_abbrev} {returncode}",
                                   job).split() == ["CD", "0"], 120, "the job completed")
        hosts = flux.flux("run", "-N", str(NODES + 1), "hostname", timeout=180).split()
        assert sorted(hosts) == sorted([*nodes, fifth]), hosts

        # -- a node leaves: drained, its kubelet stopped, its Node deleted -------------------
        leaving = nodes[-1]
        rank = next(r for r, s in json.loads(cluster.get(
            "configmap", settings["rankMap"], "-n", ns)["data"]["ranks.json"])["slots"].items()
            if s["node"] == leaving)
        started = time.monotonic()
        cluster.bed.remove_node(leaving)
        wait_for(lambda: settings["hostPrefix"] + rank not in expand(flux.up(), settings),
                 300, f"rank {rank} of {leaving} down")
        leave = time.monotonic() - started
        assert {n: flux.broker_pid(n) for n in nodes[:-1]} == \
            {n: pids[n] for n in nodes[:-1]}, "the other brokers are untouched"
        hosts = flux.flux("run", "-N", str(NODES), "hostname", timeout=180).split()
        assert sorted(hosts) == sorted([*nodes[:-1], fifth]), hosts
        print(f"fifth node: add-node -> its rank up {join:.1f}s (job on ranks 0-3 ran on); "
              f"{leaving}: remove-node -> rank {rank} down {leave:.1f}s")
    finally:
        remove_installer(cluster, ns, label[0], settings)
        for node in joined:
            if node in cluster.real_nodes:
                cluster.bed.remove_node(node, drain=False)
        if len(cluster.real_nodes) < NODES:  # the suite goes on with the bed it started with
            cluster.bed.add_node()
        shutil.rmtree(tmp_path, ignore_errors=True)
