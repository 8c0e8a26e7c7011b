"""fluxinfra's Kubernetes side against a real API server and a real kubelet: every stack applied
(server dry run, for real, and again with no change), the installer's RBAC checked by
impersonating its ServiceAccount, node-watch's rank map on the real API's compare-and-swap, and,
on the bed's real node with the Flux build at /opt/flux (outside the repository), the installer
DaemonSet running Flux (``source: prefix``) and MiniClusters running on a Flux view image.

The installer runs over every real node of the bed (each a machine of its own: see
docs/e2e.md), one rank each. MiniCluster pods here share the first node
(``oneBrokerPerNode: false``) and find each other through the bed's cluster DNS. The dev
stack's installer over four nodes, with a node joining and one leaving, is in
test_multinode.py.
"""

from __future__ import annotations

import base64
import importlib.util
import json
import os
import shutil
import subprocess
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from e2e_cluster import REPO, Cluster, wait_for

from fluxinfra.k8s.installer import FluxInstallerArgs, installer_keys_secret, installer_manifests
from fluxinfra.k8s.minicluster import (
    MiniClusterArgs,
    minicluster_keys_secret,
    minicluster_manifests,
)
from fluxinfra.secrets import derive_cluster_keys

FLUX_PREFIX = Path(os.environ.get("FLUXINFRA_FLUX_PREFIX", "/opt/flux"))
NODE_WATCH = REPO / "fluxinfra" / "templates" / "node-watch.py"


def _node_watch():
    spec = importlib.util.spec_from_file_location("node_watch_e2e", NODE_WATCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def dump(manifests: list[dict]) -> str:
    return "".join("---\n" + yaml.safe_dump(m, sort_keys=False) for m in manifests)


# -- every stack on the real API server ----------------------------------------------------------

def _delete_rendered(cluster: Cluster, out: Path, namespaces: list[str]) -> None:
    """Delete what was applied and wait until its namespaces are gone: the next test (the
    other stack, or the stacks test) applies into namespaces of the same names, and the API
    server refuses new objects in a namespace that is still terminating."""
    cluster.kubectl("delete", "-k", str(out), "--ignore-not-found", "--wait=false", check=False,
                    timeout=180)
    if namespaces:
        cluster.kubectl("wait", "--for=delete", "--timeout=180s",
                        *[f"namespace/{n}" for n in namespaces], check=False, timeout=200)


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_every_stack_applies_dry_run_then_for_real_then_unchanged(cluster: Cluster, stack,
                                                                  tmp_path):
    out = tmp_path / stack
    subprocess.run([str(REPO / ".venv/bin/fluxinfra"), "render", "--stack", stack, "--root",
                    str(REPO), "--out", str(out), "--quiet"], check=True, capture_output=True)
    docs = {p.name: yaml.safe_load(p.read_text()) for p in out.glob("*.yaml")
            if p.name != "kustomization.yaml"}
    first = [out / n for n, d in docs.items() if d["kind"] in ("Namespace",
                                                                "CustomResourceDefinition")]
    try:
        # A server dry run needs the namespaces (and the CRDs) the rest lives in.
        cluster.kubectl("apply", *[a for p in first for a in ("-f", str(p))])
        for crd in (d for d in docs.values() if d["kind"] == "CustomResourceDefinition"):
            cluster.kubectl("wait", "--for=condition=Established", "--timeout=60s",
                            f"crd/{crd['metadata']['name']}")
        dry = cluster.kubectl("apply", "--server-side", "--dry-run=server", "-k", str(out))
        secrets = [p for p in (out / "secrets").glob("*.yaml") if p.name != "kustomization.yaml"]
        assert dry.stdout.count("(server dry run)") == len(docs) + len(secrets), dry.stdout
        cluster.apply(out)
        # what a second `kubectl apply` (or `pulumi up`) would change: nothing
        diff = cluster.kubectl("diff", "--server-side", "--field-manager=fluxinfra-e2e", "-k",
                               str(out), check=False)
        assert diff.returncode == 0, f"a second apply would change:\n{diff.stdout[-3000:]}"
    finally:
        _delete_rendered(cluster, out, [d["metadata"]["name"] for d in docs.values()
                                        if d["kind"] == "Namespace"])


# -- the installer's RBAC, by impersonation -------------------------------------------------------

@pytest.fixture
def installer_rbac(cluster: Cluster):
    tag = uuid.uuid4().hex[:6]
    name, ns = f"fi-{tag}", f"fi-{tag}"
    args = FluxInstallerArgs(namespace=ns)
    rbac = [m for m in installer_manifests(name, args) if m["kind"] in (
        "Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role",
        "RoleBinding")]
    cluster.apply(dump(rbac))
    yield name, ns
    cluster.kubectl("delete", "namespace", ns, "--wait=false", check=False)
    cluster.kubectl("delete", "clusterrole,clusterrolebinding", f"{name}-nodes", check=False)


CAN = [("get", "nodes", ""), ("list", "nodes", ""), ("watch", "nodes", ""),
       ("get", "configmaps/{name}-ranks", "ns"), ("update", "configmaps/{name}-ranks", "ns"),
       ("create", "configmaps", "ns"), ("get", "daemonsets.apps/{name}", "ns"),
       # the ledger (on by default): pods on every node, its placeholder pods in its namespace
       ("list", "pods", ""), ("watch", "pods", ""), ("create", "pods", "ns"),
       ("delete", "pods", "ns")]
CANNOT = [("patch", "nodes", ""), ("delete", "nodes", ""), ("update", "nodes", ""),
          ("get", "configmaps/other", "ns"), ("update", "configmaps/other", "ns"),
          ("delete", "configmaps/{name}-ranks", "ns"), ("list", "configmaps", "ns"),
          ("get", "secrets", "ns"), ("get", "pods", "ns"), ("patch", "pods", "ns"),
          ("create", "pods", "default"), ("delete", "pods", "default"),
          ("get", "daemonsets.apps/other", "ns"), ("update", "daemonsets.apps/{name}", "ns"),
          ("get", "configmaps/{name}-ranks", "default")]


def test_installer_rbac_is_exactly_what_node_watch_uses(cluster: Cluster, installer_rbac):
    name, ns = installer_rbac
    who = f"system:serviceaccount:{ns}:{name}"
    for allowed, cases in ((True, CAN), (False, CANNOT)):
        for verb, what, where in cases:
            target = what.format(name=name)
            space = {"ns": ["-n", ns], "default": ["-n", "default"], "": []}[where]
            got = cluster.kubectl("auth", "can-i", verb, target, "--as", who, *space,
                                  check=False).stdout.strip()
            assert got == ("yes" if allowed else "no"), f"{who} {verb} {target} {space}: {got}"


def test_the_rank_map_compare_and_swap_holds_on_the_real_api_server(cluster: Cluster,
                                                                   installer_rbac, tmp_path):
    """node-watch's own client, with the installer's ServiceAccount token, against the real
    API server: two nodes race for ranks, the loser of a compare-and-swap reads again."""
    name, ns = installer_rbac
    nw = _node_watch()
    token = cluster.kubectl("create", "token", name, "-n", ns).stdout.strip()
    cfg = yaml.safe_load(Path(cluster.kubeconfig).read_text())
    url = cfg["clusters"][0]["cluster"]["server"]
    host, port = url.removeprefix("https://").rsplit(":", 1)
    sa = tmp_path / "sa"
    sa.mkdir()
    (sa / "token").write_text(token)
    ca = cfg["clusters"][0]["cluster"]
    (sa / "ca.crt").write_bytes(base64.b64decode(ca["certificate-authority-data"])
                                if "certificate-authority-data" in ca
                                else Path(ca["certificate-authority"]).read_bytes())
    store = nw.RankStore(nw.Api(host=host, port=port, sa_dir=str(sa)), ns, f"{name}-ranks")
    settings = {"maxNodes": 4, "generation": 0, "hostPrefix": "fluxnode", "topology": "kary:0",
                "brokerPort": 8050, "templateGeneration": 1, "spareCores": 0, "spareGpus": 0}
    live = {"n1": "10.0.0.1", "n2": "10.0.0.2", "n3": "10.0.0.3"}
    assert store.read() == (None, None)
    nw.reconcile(store, live, "n1", {"cores": "0-1", "gpus": ""}, settings)
    stale, version = store.read()
    nw.reconcile(store, live, "n2", {"cores": "0-1", "gpus": ""}, settings)
    with pytest.raises(nw.Conflict):
        store.write(nw.plan(stale, live, "n3", None, settings), version)
    ranks = nw.reconcile(store, live, "n3", None, settings)
    assert {r: s["node"] for r, s in ranks["slots"].items()} == {"0": "n1", "1": "n2", "2": "n3"}
    with pytest.raises(nw.Conflict):
        store.write(ranks, None)   # create, when it exists: 409 too


# -- images for the real node ---------------------------------------------------------------------

@dataclass
class Images:
    fluxinfra: str
    base: str
    view: str


def build_images(tmp: Path, tag: str) -> Images:
    """Build the three images with podman (tagged ``tag``); returns their names."""
    import sys

    sys.path.insert(0, str(REPO / "tests" / "image"))
    from image_podman import BASE_IMAGE, ULIMITS, build_wheels, podman, run
    from kubebed.fluxview import assemble_view

    run(["bash", "scripts/base-image"], timeout=900)
    build_wheels(REPO / "build" / "wheels")
    fluxinfra = f"localhost/fluxinfra:{tag}"
    podman("build", "--network=none", *ULIMITS, "--file", "Containerfile", "--build-arg",
           f"BASE={BASE_IMAGE}", "--tag", fluxinfra, str(REPO), timeout=1200)
    assemble_view(FLUX_PREFIX, tmp / "context" / "view")
    (tmp / "context" / "Containerfile").write_text(
        f"FROM {BASE_IMAGE}\nCOPY view {FLUX_PREFIX}\n")
    view = f"localhost/flux-view:{tag}"
    podman("build", "--network=none", *ULIMITS, "--tag", view, str(tmp / "context"),
           timeout=900)
    shutil.rmtree(tmp / "context")
    return Images(fluxinfra=fluxinfra, base=BASE_IMAGE, view=view)


def import_images(bed, images: Images, tmp: Path) -> None:
    """podman save each image and import it into the bed's real node."""
    import sys

    sys.path.insert(0, str(REPO / "tests" / "image"))
    from image_podman import podman

    for image in (images.fluxinfra, images.base, images.view):
        tar = tmp / (image.replace("/", "_").replace(":", "_") + ".tar")
        podman("save", "--format", "docker-archive", "-o", str(tar), image, timeout=600)
        bed.import_image(tar)
        tar.unlink()


@pytest.fixture(scope="session")
def images(cluster: Cluster, real_node: str, tmp_path_factory) -> Images:
    """The fluxinfra image (the installer runs it), the plain Debian base (an application image
    without Flux) and a Flux view image from /opt/flux, built with podman and imported into the
    real node's containerd."""
    import sys

    if not (FLUX_PREFIX / "bin" / "flux").exists():
        pytest.skip(f"no Flux build at {FLUX_PREFIX} (FLUXINFRA_FLUX_PREFIX): the installer and "
                    "the MiniCluster need one to run")
    sys.path.insert(0, str(REPO / "tests" / "image"))
    from image_podman import podman, why_not_runnable

    if (reason := why_not_runnable()) is not None:
        pytest.skip(reason)
    tmp = tmp_path_factory.mktemp("flux-images")
    built = build_images(tmp, f"e2e-{os.getpid()}")
    import_images(cluster.bed, built, tmp)
    yield built
    for image in (built.fluxinfra, built.view):
        podman("rmi", "--force", image, check=False, timeout=120)
    shutil.rmtree(tmp, ignore_errors=True)


# -- the installer on the real node ---------------------------------------------------------------

class OnNode:
    """Runs commands in the real node's namespaces (the kubelet's), as the installer does."""

    def __init__(self, node: str) -> None:
        self.pid = _node_watch().host_target({"hostTarget": "kubelet"}, node=node)

    def run(self, *argv: str, env: dict | None = None, check: bool = True) -> str:
        prefix = ["nsenter", "-t", self.pid, "-m", "-u", "-i", "-n", "-p", "--"]
        if env:
            prefix += ["env", *(f"{k}={v}" for k, v in env.items())]
        proc = subprocess.run(prefix + list(argv), capture_output=True, text=True, timeout=300)
        if check and proc.returncode != 0:
            raise AssertionError(f"{argv} on the node: {proc.returncode}: {proc.stderr}")
        return proc.stdout


def test_the_installer_runs_flux_on_every_real_node(cluster: Cluster, real_node: str, images):
    """The installer with ``source: prefix`` and the default ``hostTarget`` (PID 1 of each
    node) over every real node of the bed (``maxNodes`` of them): every rank up, the first
    labelled node rank 0, a job on each; ``fluxinfra distribute --kubernetes`` puts a file into
    each node's own file system; a rolling update leaves every broker and a running job alone;
    a node leaves and joins again on its rank; the uninstall stops every broker."""
    nodes = cluster.real_nodes
    tag = uuid.uuid4().hex[:6]
    name, ns = f"fi-{tag}", f"fi-{tag}"
    base = f"/var/lib/fluxinfra-e2e-{tag}"   # inside each node's own /var
    label = f"fluxinfra.io/e2e-{tag}"
    port = 25000 + int(tag[:2], 16) * 10
    size = len(nodes)
    args = FluxInstallerArgs(
        namespace=ns, image=images.fluxinfra, source="prefix", prefix=str(FLUX_PREFIX),
        flux_core_version="0.88.0", flux_user="root", max_nodes=size,
        broker_port=port, node_selector={label: "true"}, settle_seconds=1,
        lib_dir=f"{base}/lib", etc_dir=f"{base}/etc", state_dir=f"{base}/state",
        run_dir=f"{base}/run", munge_dir=f"{base}/munge", bin_dir=f"{base}/bin",
        log_file=f"{base}/broker.log")
    keys = derive_cluster_keys(b"e2e installer seed of 32 bytes..", tag)
    manifests = installer_manifests(name, args, keys.curve.public)
    manifests.insert(-1, installer_keys_secret(name, args, keys.curve_cert, keys.munge_key))
    on = {n: OnNode(n) for n in nodes}
    lead = on[nodes[0]]
    uri = {"FLUX_URI": f"local://{base}/run/local"}
    every = "fluxnode0" if size == 1 else f"fluxnode[0-{size - 1}]"

    def flux(*argv: str, check: bool = True) -> str:
        return lead.run(f"{FLUX_PREFIX}/bin/flux", *argv, env=uri, check=check)

    def up() -> str:
        return flux("resource", "list", "-s", "up", "-no", "{nodelist}", check=False).strip()

    def supervisors() -> dict[str, str]:
        return {n: on[n].run("cat", f"{base}/run/broker-supervisor.pid", check=False).strip()
                for n in nodes}

    try:
        cluster.apply(dump(manifests))
        started = time.monotonic()
        for node in nodes:  # the first one first: it takes rank 0
            cluster.kubectl("label", "node", node, f"{label}=true")
        wait_for(lambda: up() == every, 300, f"every node's broker up ({every})")
        first_up = time.monotonic() - started
        listing = flux("resource", "list", "-no", "{state} {nnodes} {ncores} {nodelist}")
        cores = int(lead.run("nproc", "--all").strip())
        assert f"free {size} {size * cores} {every}" in listing, listing
        assert not [ln for ln in listing.splitlines() if ln.startswith("down ")
                    and ln.split()[1] != "0"], listing
        hosts = flux("run", "-N", str(size), "hostname").split()
        assert sorted(hosts) == sorted(nodes), hosts
        ranks = json.loads(cluster.get("configmap", f"{name}-ranks", "-n", ns)["data"][
            "ranks.json"])
        assert ranks["slots"]["0"]["node"] == nodes[0] and ranks["R"] is not None
        # `fluxinfra distribute --kubernetes` through the installer's pod, as an operator runs
        # it: the file lands in each node's own file system
        lead.run("sh", "-c", f"head -c 256000000 /dev/urandom > {base}/payload.bin")
        sent = time.monotonic()
        dist = subprocess.run(
            [str(REPO / ".venv/bin/fluxinfra"), "distribute", "--kubernetes", "--namespace", ns,
             "--installer", name, "--kubectl", cluster.kubectl_path, "--flux-prefix",
             str(FLUX_PREFIX), "--flux-user", "root", "--run-dir", f"{base}/run",
             "--dest", f"{base}/dist", "--state-dir",
             str(REPO / "build" / f"e2e-distribute-{tag}"), f"{base}/payload.bin"],
            env=cluster.env, capture_output=True, text=True, timeout=900, check=False)
        assert dist.returncode == 0, dist.stderr[-3000:]
        spread = time.monotonic() - sent
        want = lead.run("sha256sum", f"{base}/payload.bin").split()[0]
        for node in nodes:
            got = on[node].run("sha256sum", f"{base}/dist/payload.bin").split()[0]
            assert got == want, f"{node}: {got} != {want}"
        shutil.rmtree(REPO / "build" / f"e2e-distribute-{tag}", ignore_errors=True)
        # a rolling update of the installer leaves every broker (and its jobs) alone
        job = flux("submit", "-N", str(size), "sleep", "600").strip()
        brokers = supervisors()
        cluster.kubectl("patch", "daemonset", name, "-n", ns, "--type=merge", "-p", json.dumps(
            {"spec": {"template": {"metadata": {"annotations": {"e2e/roll": "1"}}}}}))
        cluster.kubectl("rollout", "status", f"daemonset/{name}", "-n", ns, "--timeout=300s",
                        timeout=320)
        assert supervisors() == brokers and flux("jobs", "-no", "{state_single}", job).strip() \
            == "R", "every broker survived the installer's rolling update"
        flux("cancel", job)
        # the last node leaves: its pod goes, preStop stops its broker; the rank stays held
        leaving = nodes[-1]
        rank = next(r for r, s in ranks["slots"].items() if s["node"] == leaving)
        cluster.kubectl("label", "node", leaving, f"{label}-")
        wait_for(lambda: supervisors()[leaving] == "", 120, "the broker stopped by preStop")
        assert {n: p for n, p in supervisors().items() if n != leaving} == \
            {n: p for n, p in brokers.items() if n != leaving}, "the others are untouched"
        ranks = json.loads(cluster.get("configmap", f"{name}-ranks", "-n", ns)["data"][
            "ranks.json"])
        assert ranks["slots"][rank]["node"] == leaving
        # and joins again: same rank, same epoch
        started = time.monotonic()
        cluster.kubectl("label", "node", leaving, f"{label}=true")
        wait_for(lambda: up() == every, 300, f"the broker back as rank {rank}")
        rejoin = time.monotonic() - started
        again = json.loads(cluster.get("configmap", f"{name}-ranks", "-n", ns)["data"][
            "ranks.json"])
        assert again["epoch"] == ranks["epoch"]
        print(f"\ninstaller on {size} nodes: every broker up {first_up:.1f}s after the labels "
              f"(install included); 256 MB to {size} nodes {spread:.1f}s; rank {rank} rejoin "
              f"{rejoin:.1f}s")
        # uninstall: deleting the DaemonSet stops every broker
        cluster.kubectl("delete", "daemonset", name, "-n", ns, "--wait=true", "--timeout=180s",
                        timeout=200)
        wait_for(lambda: not any(supervisors().values()), 180,
                 "every broker stopped by the uninstall")
    finally:
        for node in nodes:
            cluster.kubectl("label", "node", node, f"{label}-", check=False)
        cluster.kubectl("delete", "namespace", ns, "--wait=false", check=False)
        cluster.kubectl("delete", "clusterrole,clusterrolebinding", f"{name}-nodes", check=False)
        for node in nodes:
            on[node].run(f"{base}/lib/flux-start.sh", "stop", check=False)
            on[node].run("rm", "-rf", base, check=False)


# -- MiniClusters on the real node ----------------------------------------------------------------

def minicluster(namespace: str, images: Images, **kw) -> MiniClusterArgs:
    """A MiniCluster on the bed's first node; its brokers find each other through the
    cluster DNS the pods get by default (on a bed, the bed's own: docs/e2e.md)."""
    return MiniClusterArgs(name="mc", namespace=namespace, image=images.base,
                           flux_view_image=images.view, flux_view_path=str(FLUX_PREFIX),
                           image_pull_policy="Never", one_broker_per_node=False,
                           cores_per_broker=1, **kw)


def apply_minicluster(cluster: Cluster, args: MiniClusterArgs) -> None:
    keys = derive_cluster_keys(b"e2e minicluster seed of 32 bytes", args.namespace)
    cluster.apply(dump([minicluster_keys_secret(args, keys.curve_cert),
                        *minicluster_manifests(args)]))


def pod_of(cluster: Cluster, ns: str, index: int) -> str:
    pods = cluster.get("pods", "-n", ns, "-l", f"batch.kubernetes.io/job-completion-index={index}")
    live = [p for p in pods["items"] if not p["metadata"].get("deletionTimestamp")]
    return live[0]["metadata"]["name"] if live else ""


def test_an_ephemeral_minicluster_runs_on_a_view_and_completes(cluster: Cluster, real_node,
                                                              images, namespace):
    args = minicluster(namespace, images, size=2, max_size=4, command="hostname")
    started = time.monotonic()
    apply_minicluster(cluster, args)
    cluster.kubectl("wait", "-n", namespace, "--for=condition=Complete", "job/mc",
                    "--timeout=300s")
    elapsed = time.monotonic() - started
    logs = cluster.kubectl("logs", "-n", namespace, "-l",
                           "batch.kubernetes.io/job-completion-index=0", "-c", "flux",
                           "--tail=-1").stdout
    assert "R: rank[0-3]/core0" in logs, logs[-3000:]
    printed = sorted(ln for ln in logs.splitlines() if ln in ("mc-0", "mc-1"))
    assert printed == ["mc-0", "mc-1"], logs[-3000:]
    print(f"\nephemeral MiniCluster of 2 on {real_node}: applied -> Job Complete {elapsed:.1f}s")


def test_a_failing_command_fails_the_job_with_its_status(cluster: Cluster, real_node, images,
                                                        namespace):
    args = minicluster(namespace, images, size=2, command="sh -c 'exit 3'")
    apply_minicluster(cluster, args)
    cluster.kubectl("wait", "-n", namespace, "--for=condition=Failed", "job/mc",
                    "--timeout=300s")
    job = cluster.get("job", "mc", "-n", namespace)
    reason = next(c for c in job["status"]["conditions"] if c["type"] == "Failed")
    assert reason["reason"] == "PodFailurePolicy", reason
    statuses = [s["state"].get("terminated", {}).get("exitCode")
                for p in cluster.get("pods", "-n", namespace)["items"]
                for s in p["status"].get("containerStatuses", []) if s["name"] == "flux"]
    assert 3 in statuses, statuses


def test_a_persistent_minicluster_grows_and_shrinks_in_place(cluster: Cluster, real_node, images,
                                                           namespace):
    args = minicluster(namespace, images, size=2, max_size=4, mode="persistent")
    apply_minicluster(cluster, args)
    wait_for(lambda: pod_of(cluster, namespace, 0), 60, "rank 0's pod")

    def up() -> str:
        proc = cluster.kubectl("exec", "-n", namespace, pod_of(cluster, namespace, 0), "-c",
                               "flux", "--", "/etc/flux/minicluster/flux-connect", "resource",
                               "list", "-s", "up", "-no", "{nodelist}", check=False)
        return proc.stdout.strip()

    wait_for(lambda: up() == "mc-[0-1]", 300, "2 of 4 brokers up")
    pods = {i: pod_of(cluster, namespace, i) for i in (0, 1)}
    # what `pulumi up` with size 3 changes: the Job's completions/parallelism, the quorum key
    grown = MiniClusterArgs(**{**args.__dict__, "size": 3})
    started = time.monotonic()
    apply_minicluster(cluster, grown)
    wait_for(lambda: up() == "mc-[0-2]", 300, "the third broker up")
    join = time.monotonic() - started
    assert {i: pod_of(cluster, namespace, i) for i in (0, 1)} == pods, "no pod was replaced"
    started = time.monotonic()
    apply_minicluster(cluster, args)
    wait_for(lambda: up() == "mc-[0-1]", 300, "the third broker gone")
    leave = time.monotonic() - started
    assert {i: pod_of(cluster, namespace, i) for i in (0, 1)} == pods
    print(f"\npersistent MiniCluster on {real_node}: resize 2->3, apply -> rank up {join:.1f}s; "
          f"3->2, apply -> rank down {leave:.1f}s")
