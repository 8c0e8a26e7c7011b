"""``fluxinfra distribute --kubernetes`` through the kubectl double into the flux double: the lead
node found from the overlay, flux run there as the owner, images imported per node as root."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import fluxinfra
from fluxinfra.distribute import DistributeError, Options
from fluxinfra.distribute.kube import (
    INSTALLER_COMPONENT,
    NSENTER,
    KubeTarget,
    find_host_process,
)

from .conftest import make_tar

pytestmark = pytest.mark.slow  # through the kubectl and flux doubles: seconds each

HERE = Path(__file__).resolve().parent


@pytest.fixture
def cluster(double_instance, tmp_path, monkeypatch):
    """Three nodes, each with an installer pod; node2 is rank 0 (the rank map says so: the
    instance's hostnames are rank names, as the real installer's are)."""
    inst = double_instance(3, "kary:2", hosts=["fluxnode0", "fluxnode1", "fluxnode2"])
    labels = {"app.kubernetes.io/name": INSTALLER_COMPONENT,
              "app.kubernetes.io/instance": "flux-installer"}
    pods = [{"name": f"flux-installer-{node}", "namespace": "flux-installer", "node": node,
             "phase": "Running", "labels": labels, "rank": rank}
            for rank, node in enumerate(["node2", "node0", "node1"])]
    pods.append({"name": "other-pod", "namespace": "flux-installer", "node": "node0",
                 "phase": "Running", "labels": {"app": "x"}, "rank": 1})
    state = tmp_path / "kubectl-state.json"
    ranks = {"epoch": 1, "size": 3, "R": None,
             "slots": {str(rank): {"node": node} for rank, node in enumerate(["node2", "node0",
                                                                              "node1"])}}
    state.write_text(json.dumps({"pods": pods, "contexts": ["lab"], "configmaps": {
        "flux-installer/flux-installer-ranks": {"ranks.json": json.dumps(ranks)}}}))
    kubectl = tmp_path / "kubectl"
    kubectl.write_text(f"#!/bin/sh\nexec {sys.executable} {HERE / 'kubectl_double.py'} \"$@\"\n")
    kubectl.chmod(0o755)
    tools = tmp_path / "tools"
    tools.mkdir()
    log = tmp_path / "tools.log"
    (tools / "ctr").write_text(f'#!/bin/sh\necho "ctr $* on $FLUX_URI" >> {log}\n')
    (tools / "ctr").chmod(0o755)
    for key, value in inst.env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("PATH", f"{tools}:{inst.env['PATH']}")
    monkeypatch.setenv("KUBECTL_DOUBLE_STATE", str(state))
    monkeypatch.setenv("KUBECTL_DOUBLE_LOG", str(tmp_path / "kubectl.log"))
    target = KubeTarget(kubectl=[str(kubectl)], context="lab", flux_prefix=str(inst.dir))
    return inst, target, tmp_path, log


def opts(tmp_path: Path, source: str, **kw) -> Options:
    return Options(source, dest=str(tmp_path / "out" / "{host}"), state_dir=str(tmp_path / "st"),
                   staging_dir=str(tmp_path / "staging"), progress_interval=0.05, **kw)


def docker_archive(path: Path) -> Path:
    return make_tar(path, {"manifest.json": b'[{"RepoTags": ["app:1"]}]', "l.tar": b"x" * 5000})


def test_the_lead_is_rank_0_s_node_and_flux_runs_there_as_the_owner(cluster):
    inst, target, tmp_path, _ = cluster
    pods = target.pods()
    assert pods == {"node2": "flux-installer-node2", "node0": "flux-installer-node0",
                    "node1": "flux-installer-node1"}
    assert target.lead(pods) == "node2"
    prefix = target.exec_prefix("p", owner=True)
    assert prefix[prefix.index("--") + 1:][:len(NSENTER)] == NSENTER
    assert prefix[-6:] == ["setpriv", "--reuid=flux", "--regid=flux", "--init-groups", "env",
                           "FLUX_URI=local:///run/flux/local"]


def test_an_image_reaches_every_node_and_is_imported_there_as_root(cluster):
    inst, target, tmp_path, log = cluster
    image = docker_archive(tmp_path / "app.tar")
    report = target.distribution(opts(tmp_path, str(image), importer="containerd")).run()
    assert report.ok, report.results
    assert report.kind == "image-archive"
    for rank in range(3):
        assert (tmp_path / "out" / f"fluxnode{rank}" / "app.tar").read_bytes() == \
            image.read_bytes()
        assert report.results[rank].imported == ["app.tar"]
    imports = sorted(log.read_text().splitlines())
    # each rank's archive imported through the installer pod of the node the rank map names
    assert imports == sorted(
        f"ctr -n k8s.io images import {tmp_path}/out/fluxnode{rank}/app.tar on "
        f"local://{inst.dir}/rank{rank}/local" for rank in range(3))
    calls = [json.loads(line) for line in (tmp_path / "kubectl.log").read_text().splitlines()]
    flux_calls = [c for c in calls if c["argv"][0].endswith("/bin/flux")]
    assert {c["node"] for c in flux_calls if c["argv"][1] != "overlay"} == {"node2"}
    # flux commands run as the instance owner; reading SOURCE (the agent's inspect and
    # manifest, under flux python) runs as root, like the pull would
    agent_calls = [c for c in flux_calls if c["argv"][1] == "python" and len(c["argv"]) > 4]
    assert {c["argv"][4] for c in agent_calls} == {"inspect", "manifest"}
    assert not any(c["as_owner"] for c in agent_calls)
    assert all(c["as_owner"] for c in flux_calls if c not in agent_calls)
    assert not any(c["as_owner"] for c in calls if c["argv"][0] == "ctr")


def test_a_relative_source_is_refused_with_the_reason(cluster):
    _, target, tmp_path, _ = cluster
    with pytest.raises(DistributeError, match=r"with --kubernetes SOURCE is an absolute path on "
                                              r"the lead node \(node2\) or an image reference"):
        target.distribution(opts(tmp_path, "./model.bin")).run()


def test_no_installer_pods_names_namespace_and_installer(cluster):
    _, target, _, _ = cluster
    target.installer = "other"
    with pytest.raises(DistributeError, match="no running installer pods with .*instance=other "
                                              "in namespace flux-installer: check --namespace"):
        target.pods()


def test_all_means_the_ranks_the_rank_map_gives_a_node(cluster):
    """An instance sized ahead (maxNodes) has spare ranks no node holds: not targets."""
    inst, target, tmp_path, _ = cluster
    state = json.loads(Path(os.environ["KUBECTL_DOUBLE_STATE"]).read_text())
    key = "flux-installer/flux-installer-ranks"
    ranks = json.loads(state["configmaps"][key]["ranks.json"])
    del ranks["slots"]["2"]  # node1 left; its rank stays unheld
    state["configmaps"][key]["ranks.json"] = json.dumps(ranks)
    Path(os.environ["KUBECTL_DOUBLE_STATE"]).write_text(json.dumps(state))
    source = tmp_path / "model.bin"
    source.write_bytes(b"m" * 4000)
    report = target.distribution(opts(tmp_path, str(source))).run()
    assert report.ok and sorted(report.results) == [0, 1], report.results


def test_no_rank_map_names_the_configmap_and_the_fix(cluster):
    _, target, tmp_path, _ = cluster
    target.namespace = "elsewhere"
    with pytest.raises(DistributeError, match="configmap flux-installer-ranks -n elsewhere: "
                                              ".*NotFound.*check --installer and --namespace"):
        target.rank_nodes()


def test_an_unknown_context_is_kubectl_s_message(cluster):
    _, target, _, _ = cluster
    target.context = "prod"
    with pytest.raises(DistributeError, match='context "prod" does not exist: check --context'):
        target.pods()


def test_the_defaults_match_the_installer():
    pytest.importorskip("pulumi")
    from fluxinfra.k8s.installer import FluxInstallerArgs, installer_manifests

    args = FluxInstallerArgs()
    daemonset = installer_manifests("flux-installer", args)[-1]
    target = KubeTarget()
    assert daemonset["spec"]["selector"]["matchLabels"] == {
        "app.kubernetes.io/name": INSTALLER_COMPONENT,
        "app.kubernetes.io/instance": target.installer}
    assert daemonset["metadata"]["namespace"] == target.namespace == args.namespace
    assert (target.flux_prefix, target.flux_user, target.run_dir) == (
        args.prefix, args.flux_user, args.run_dir)
    # the installer's own way into its node (node-watch.py's on_host), at its default hostTarget
    spec = importlib.util.spec_from_file_location(
        "node_watch", Path(fluxinfra.__file__).parent / "templates" / "node-watch.py")
    node_watch = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(node_watch)
    assert node_watch.on_host({"hostTarget": args.host_target}, []) == NSENTER


def test_a_host_target_by_name_is_looked_up_once_per_pod_in_the_pod(tmp_path):
    """``--host-target kubelet`` (where PID 1 refuses nsenter): the PID is asked of the pod
    (python3 -c, the same choice as node-watch's host_target) once, then used in nsenter."""
    log = tmp_path / "calls"
    kubectl = tmp_path / "kubectl"
    kubectl.write_text(f'#!/bin/sh\necho "$*" >> {log}\ncase "$*" in *bad*) echo "no process '
                       'named" >&2; exit 1;; esac\necho 4242\n')
    kubectl.chmod(0o755)
    target = KubeTarget(kubectl=[str(kubectl)], host_target="kubelet")
    first = target.exec_prefix("pod-a", owner=False)
    again = target.exec_prefix("pod-a", owner=True)
    assert first[first.index("--") + 1:] == ["nsenter", "-t", "4242", "-m", "-u", "-i", "-n",
                                             "-p", "--"]
    assert again[again.index("--") + 1:][:3] == ["nsenter", "-t", "4242"]
    calls = log.read_text()
    assert calls.count("exec -i pod-a -- python3 -c") == 1
    assert calls.rstrip().endswith(" kubelet")
    bad = KubeTarget(kubectl=[str(kubectl)], host_target="bad")
    with pytest.raises(DistributeError, match="installer pod pod-b: no process named"):
        bad.exec_prefix("pod-b", owner=False)
    assert KubeTarget().exec_prefix("p", owner=False)[-len(NSENTER):] == NSENTER


def test_the_pod_side_lookup_is_the_installer_s_own_choice():
    """The script asked of an installer pod runs node-watch.py's host_target (not a copy):
    here, against this machine's /proc, it finds a process by its command name and names
    --host-target when there is none."""
    sleeper = subprocess.Popen(["sleep", "30"])
    try:
        proc = subprocess.run([sys.executable, "-c", find_host_process(), "sleep"],
                              capture_output=True, text=True, env={}, timeout=30)
        assert proc.returncode == 0, proc.stderr
        pid = proc.stdout.strip()
        assert Path(f"/proc/{pid}/comm").read_text().strip() == "sleep"
        assert int(pid) <= sleeper.pid  # the oldest of them (no node named: none preferred)
    finally:
        sleeper.kill()
        sleeper.wait()
    proc = subprocess.run([sys.executable, "-c", find_host_process(), "no-such-process-x"],
                          capture_output=True, text=True, env={}, timeout=30)
    assert proc.returncode == 1 and proc.stdout == ""
    assert "installer.hostTarget 'no-such-process-x': no such process on this node: check " \
        "--host-target (the installer's hostTarget)" in proc.stderr
    assert "def host_target(settings" in find_host_process()


def test_the_cli_refuses_flux_command_with_kubernetes():
    proc = subprocess.run([sys.executable, "-m", "fluxinfra", "distribute", "/x", "--kubernetes",
                           "--flux-command", "flux"], capture_output=True, text=True)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1
    assert "--flux-command and --kubernetes" in proc.stderr
