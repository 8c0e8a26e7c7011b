"""The bed's real node: containerd (Debian), runc, the CNI bridge + host-local plugins, kubelet.

Two kubelets on one machine would trample each other's machine-wide files, and a kubelet alone
changes kernel settings the whole machine shares. So each bed's containerd and kubelet run in a
**mount namespace of their own**, held open by an idle process (the *holder*), in which:

- ``/var`` and ``/run`` are overlays whose writable layer is in the bed's state directory: what
  the kubelet and containerd write there (``/var/lib/kubelet/device-plugins``, ``/var/log/pods``,
  ``/var/log/containers``, ``/var/lib/cni``, shim sockets in ``/run/containerd``) lands in the
  bed, not on the machine;
- ``/run/netns`` is a shared bind of a bed directory before containerd starts (containerd 1.6
  otherwise binds it onto itself lazily, and two sandboxes starting at once can hide each
  other's netns mount);
- the kernel settings the kubelet insists on (``vm.overcommit_memory=1``, ``kernel.panic=10``,
  ``kernel.panic_on_oops=1``, ...) are shown to it as files bound over ``/proc/sys/...`` that
  already hold those values, so it never writes the machine's real ones;
- every mount the node makes (container root filesystems, ``shm``, token volumes, network
  namespaces) lives and dies with the namespace.

On the machine itself a bed's node makes only objects named by its slot (see
:mod:`kubebed.layout`): the cgroup ``/fxkube<s>`` in every hierarchy (the kubelet's
``cgroupRoot``), the bridge ``fxkb<s>`` with the pod gateway address (made here, so the CNI
bridge plugin runs with ``isGateway: false`` and never turns on ``ip_forward``), and the nft
table ``fxkube<s>`` that sends pods' traffic for the ``kubernetes`` Service IP to the API server
(there is no kube-proxy: it would own machine-wide iptables chains). The kubelet runs with
``makeIPTablesUtilChains: false``, so it adds no iptables rules either.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import sys
import textwrap
import urllib.request
from pathlib import Path

from .images import PAUSE_IMAGE, pause_image
from .layout import CGROUP_FS, Layout, find_binary, require_binary
from .procs import CommandError, Proc, launch, run, wait_until
from .rest import ApiStatus, Rest
from .services import Catalog, nft_rules

__all__ = ["Node", "cgroup_hierarchies", "node_teardown"]

#: What the kubelet's setupKernelTunables wants (pkg/kubelet/cm/container_manager_linux.go);
#: each is shown to the kubelet, inside the node's mount namespace, as a file with this value.
KUBELET_SYSCTLS = {
    "vm/overcommit_memory": "1",
    "vm/panic_on_oom": "0",
    "kernel/panic": "10",
    "kernel/panic_on_oops": "1",
    "kernel/keys/root_maxkeys": "1000000",
    "kernel/keys/root_maxbytes": "25000000",
}
CNI_BIN_DIRS = ("/usr/lib/cni", "/opt/cni/bin")


def cgroup_hierarchies() -> list[Path]:
    """Every mounted cgroup hierarchy (v1 controllers, name=systemd, the unified v2 tree)."""
    if (CGROUP_FS / "cgroup.controllers").exists():  # pure cgroup v2
        return [CGROUP_FS]
    return sorted(p for p in CGROUP_FS.iterdir() if p.is_dir() and not p.is_symlink()
                  and (p / "cgroup.procs").exists())


class Node:
    """Start and describe the real node of one bed."""

    def __init__(self, layout: Layout, pki: dict[str, str], record) -> None:
        self.layout = layout
        self.pki = pki
        self.dir = layout.state / "node"
        self.logs = layout.state / "logs"
        self.sock = str(self.dir / "containerd" / "containerd.sock")
        self.record = record  # callback(key, value): persist what was made, before making it

    # -- host objects ------------------------------------------------------------------------
    def make_cgroups(self) -> None:
        self.record("cgroups", True)
        for hierarchy in cgroup_hierarchies():
            path = hierarchy / self.layout.cgroup_root.lstrip("/")
            path.mkdir(exist_ok=True)
            if hierarchy.name == "cpuset":  # a new v1 cpuset has no CPUs until given some
                for knob in ("cpuset.cpus", "cpuset.mems"):
                    (path / knob).write_text((hierarchy / knob).read_text())

    def make_bridge(self) -> None:
        lay = self.layout
        prefix = lay.pod_cidr.split("/")[1]
        self.record("bridge", True)
        run(["ip", "link", "add", lay.bridge, "type", "bridge"])
        run(["ip", "addr", "add", f"{lay.pod_gateway}/{prefix}", "dev", lay.bridge])
        run(["ip", "link", "set", lay.bridge, "up"])

    def make_service_nat(self) -> None:
        """The bed's nft table as it is before any Service exists: pods reach the API server
        at the ``kubernetes`` Service address; the services process keeps it up to date."""
        self.record("nft_table", True)
        run([require_binary("nft"), "-f", "-"], input_text=nft_rules(self.layout, Catalog()))

    def start_services(self) -> Proc:
        """Services and cluster DNS for the node's pods (:mod:`kubebed.services`)."""
        proc = launch("services", [sys.executable, "-m", "kubebed.services",
                                   str(self.layout.state)], self.logs,
                      cwd=Path(__file__).resolve().parents[1])
        if not wait_until(lambda: _udp_bound(self.layout.pod_gateway, 53) or not proc.alive(),
                          10) or not proc.alive():
            raise CommandError(f"the services process did not come up:\n{proc.log_tail()}")
        return proc

    # -- the namespace holder ----------------------------------------------------------------
    def start_holder(self) -> Proc:
        ns = self.dir / "ns"
        for sub in ("var.upper", "var.work", "run.upper", "run.work", "netns", "sysctl"):
            (ns / sub).mkdir(parents=True, exist_ok=True)
        binds = []
        for key, value in KUBELET_SYSCTLS.items():
            fake = ns / "sysctl" / key.replace("/", ".")
            fake.write_text(value + "\n")
            binds.append(f"mount --bind {fake} /proc/sys/{key}")
        script = self.dir / "namespace.sh"
        script.write_text("\n".join([
            "set -eu",
            f"mount -t overlay bed-var -o lowerdir=/var,upperdir={ns}/var.upper,"
            f"workdir={ns}/var.work /var",
            f"mount -t overlay bed-run -o lowerdir=/run,upperdir={ns}/run.upper,"
            f"workdir={ns}/run.work /run",
            "mkdir -p /run/netns",
            f"mount --bind {ns}/netns /run/netns",
            "mount --make-shared /run/netns",
            *binds,
            "echo ready > " + str(ns / "ready"),
            # The holder: names the bed's state in its command line, so it can be told apart.
            f"exec {sys.executable} -c 'import signal; signal.pause()' {self.dir}",
            "",
        ]))
        proc = launch("namespace", ["unshare", "--mount", "--propagation", "private",
                                    "sh", str(script)], self.logs)
        if not wait_until(lambda: (ns / "ready").exists() or not proc.alive(), 10) \
                or not proc.alive():
            raise CommandError(f"the node's mount namespace did not come up:\n{proc.log_tail()}")
        return proc

    def enter(self, holder: Proc, argv: list[str]) -> list[str]:
        return ["nsenter", f"--mount=/proc/{holder.pid}/ns/mnt", "--", *argv]

    # -- containerd --------------------------------------------------------------------------
    def containerd_config(self) -> Path:
        lay = self.layout
        cni_bin = next((d for d in CNI_BIN_DIRS if Path(d, "bridge").exists()), None)
        if cni_bin is None:
            raise CommandError("CNI plugins (bridge, host-local) not found in "
                               f"{' or '.join(CNI_BIN_DIRS)}: install containernetworking-plugins")
        cni_conf = self.dir / "cni"
        cni_conf.mkdir(parents=True, exist_ok=True)
        (cni_conf / "10-bed.conflist").write_text(json.dumps({
            "cniVersion": "1.0.0", "name": f"bed-{lay.name}",
            "plugins": [{
                "type": "bridge", "bridge": lay.bridge,
                # The gateway address is on the bridge already (make_bridge): isGateway would
                # also switch on net.ipv4.ip_forward for the whole machine.
                "isGateway": False, "ipMasq": False, "hairpinMode": True,
                "ipam": {"type": "host-local",
                         "ranges": [[{"subnet": lay.pod_cidr, "gateway": lay.pod_gateway}]],
                         "routes": [{"dst": lay.service_cidr}, {"dst": f"{lay.node_ip}/32"}],
                         "dataDir": str(self.dir / "cni-ipam")},
            }],
        }, indent=2))
        root, state = self.dir / "containerd", self.dir / "containerd-state"
        config = self.dir / "containerd.toml"
        config.write_text(textwrap.dedent(f"""\
            version = 2
            root = "{root}/root"
            state = "{state}"
            oom_score = 0
            disabled_plugins = ["io.containerd.snapshotter.v1.btrfs",
              "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.aufs",
              "io.containerd.snapshotter.v1.devmapper", "io.containerd.tracing.processor.v1.otlp",
              "io.containerd.internal.v1.tracing"]
            [grpc]
              address = "{self.sock}"
            [ttrpc]
              address = ""
            [debug]
              address = ""
              level = "info"
            [metrics]
              address = ""
            [plugins."io.containerd.internal.v1.opt"]
              path = "{root}/opt"
            [plugins."io.containerd.grpc.v1.cri"]
              sandbox_image = "{PAUSE_IMAGE}"
              # No CAP_SYS_RESOURCE on these machines: keep pods' oom_score_adj >= ours (0).
              restrict_oom_score_adj = true
              disable_apparmor = true
              enable_selinux = false
              stream_server_address = "127.0.0.1"
              stream_server_port = "0"
              [plugins."io.containerd.grpc.v1.cri".containerd]
                snapshotter = "overlayfs"
                default_runtime_name = "runc"
                [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
                  runtime_type = "io.containerd.runc.v2"
                  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
                    BinaryName = "{require_binary('runc')}"
                    Root = "{state}/runc"
                    SystemdCgroup = false
              [plugins."io.containerd.grpc.v1.cri".cni]
                bin_dir = "{cni_bin}"
                conf_dir = "{cni_conf}"
                max_conf_num = 1
            """))
        return config

    def start_containerd(self, holder: Proc) -> Proc:
        config = self.containerd_config()
        proc = launch("containerd", self.enter(holder, [require_binary("containerd"), "--config",
                                                        str(config)]), self.logs)

        def up() -> bool:
            if not proc.alive():
                raise CommandError(f"containerd exited:\n{proc.log_tail()}")
            return run(self.ctr("version"), check=False, timeout=10).returncode == 0
        if not wait_until(up, 30):
            raise CommandError(f"containerd not ready after 30s:\n{proc.log_tail()}")
        return proc

    def ctr(self, *args: str) -> list[str]:
        return [require_binary("ctr"), "--address", self.sock, "--namespace", "k8s.io", *args]

    def import_image(self, tar: Path) -> None:
        run(self.ctr("images", "import", str(tar)), timeout=600)

    # -- kubelet -----------------------------------------------------------------------------
    def kubelet_config(self) -> Path:
        lay, p = self.layout, self.pki
        config = self.dir / "kubelet.yaml"
        config.write_text(json.dumps({
            "apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
            "address": lay.node_ip, "port": lay.ports["kubelet"], "readOnlyPort": 0,
            "healthzBindAddress": "127.0.0.1", "healthzPort": lay.ports["kubelet_healthz"],
            "authentication": {"anonymous": {"enabled": False}, "webhook": {"enabled": True},
                               "x509": {"clientCAFile": p["ca"]}},
            "authorization": {"mode": "Webhook"},
            "tlsCertFile": p["kubelet-serving"], "tlsPrivateKeyFile": p["kubelet-serving_key"],
            "containerRuntimeEndpoint": f"unix://{self.sock}",
            "imageServiceEndpoint": f"unix://{self.sock}",
            "cgroupDriver": "cgroupfs", "cgroupsPerQOS": True, "cgroupRoot": lay.cgroup_root,
            "enforceNodeAllocatable": [],
            "failSwapOn": False,
            # The default -999 needs CAP_SYS_RESOURCE, which these machines do not grant.
            "oomScoreAdj": 0,
            # No iptables chains (KUBE-FIREWALL, canaries): they are machine-wide.
            "makeIPTablesUtilChains": False,
            # Cluster DNS is the bed's services process on the bridge address.
            "resolvConf": "/etc/resolv.conf", "clusterDomain": "cluster.local",
            "clusterDNS": [lay.pod_gateway], "rotateCertificates": False,
            "serverTLSBootstrap": False,
            "registerNode": True, "syncFrequency": "10s", "fileCheckFrequency": "10s",
            "nodeStatusUpdateFrequency": "10s",
            "imageGCHighThresholdPercent": 100, "imageGCLowThresholdPercent": 99,
            "evictionHard": {"memory.available": "100Mi", "nodefs.available": "1%",
                             "imagefs.available": "1%"},
        }, indent=2))
        return config

    def start_kubelet(self, holder: Proc) -> Proc:
        lay, p = self.layout, self.pki
        proc = launch("kubelet", self.enter(holder, [
            require_binary("kubelet"), f"--config={self.kubelet_config()}",
            f"--kubeconfig={p['kubelet_kubeconfig']}", f"--root-dir={self.dir / 'kubelet'}",
            f"--hostname-override={lay.node_name}", f"--node-ip={lay.node_ip}",
            # Deprecated but still read by the image garbage collector: never collect it.
            f"--pod-infra-container-image={PAUSE_IMAGE}",
            "--node-labels=fluxinfra.io/bed-node=real", "--v=2",
        ]), self.logs)
        url = f"http://127.0.0.1:{lay.ports['kubelet_healthz']}/healthz"

        def healthy() -> bool:
            if not proc.alive():
                raise CommandError(f"kubelet exited:\n{proc.log_tail()}")
            with urllib.request.urlopen(url, timeout=2) as resp:
                return resp.status == 200
        if not wait_until(healthy, 60):
            raise CommandError(f"kubelet not healthy after 60s:\n{proc.log_tail()}")
        return proc

    def wait_ready(self, rest: Rest, timeout: float = 120) -> None:
        """Ready, and the controller-manager has lifted the not-ready taint."""
        path = f"/api/v1/nodes/{self.layout.node_name}"

        def ready() -> bool:
            try:
                node = rest.get(path)
            except ApiStatus:
                return False
            conds = {c["type"]: c["status"] for c in node["status"].get("conditions", [])}
            taints = [t["key"] for t in node["spec"].get("taints", [])]
            return conds.get("Ready") == "True" and \
                "node.kubernetes.io/not-ready" not in taints
        if not wait_until(ready, timeout):
            raise CommandError(f"node {self.layout.node_name} not Ready after {timeout:.0f}s")

    def start(self, started, rest: Rest) -> None:
        """Make the host objects, then the services process, the holder, containerd (+ the
        pause image) and the kubelet; each process is handed to ``started`` as soon as it
        exists, so a failure part-way can be undone."""
        self.make_cgroups()
        self.make_bridge()
        self.make_service_nat()
        started(self.start_services())
        pause = pause_image(self.dir / "images")
        holder = self.start_holder()
        started(holder)
        started(self.start_containerd(holder))
        self.import_image(pause)
        started(self.start_kubelet(holder))
        self.wait_ready(rest)


# -- teardown ------------------------------------------------------------------------------
def _udp_bound(address: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.bind((address, port))
        except OSError:
            return True
    return False


def _mount_ns(pid: int) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/mnt")
    except OSError:
        return None


def _pids() -> list[int]:
    return [int(p) for p in os.listdir("/proc") if p.isdigit()]


def _cgroup_pids(layout: Layout) -> set[int]:
    found: set[int] = set()
    for hierarchy in cgroup_hierarchies():
        root = hierarchy / layout.cgroup_root.lstrip("/")
        if not root.is_dir():
            continue
        for procs in root.rglob("cgroup.procs"):
            with contextlib.suppress(OSError, ValueError):
                found.update(int(x) for x in procs.read_text().split())
    return found


def _kill_all(pids_fn, what: str, timeout: float = 15) -> None:
    def gone() -> bool:
        pids = pids_fn()
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        return not pids
    if not wait_until(gone, timeout):
        raise CommandError(f"{what}: processes {sorted(pids_fn())} survive SIGKILL")


def _remove_cgroups(layout: Layout) -> list[str]:
    left = []
    for hierarchy in cgroup_hierarchies():
        root = hierarchy / layout.cgroup_root.lstrip("/")
        if not root.exists():
            continue
        dirs = sorted((p for p in root.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts))
        for d in [*dirs, root]:
            ok = wait_until(lambda d=d: _rmdir(d), 5)
            if not ok:
                left.append(str(d))
    return left


def _rmdir(path: Path) -> bool:
    try:
        path.rmdir()
    except FileNotFoundError:
        return True
    except OSError:
        return False
    return True


def node_teardown(layout: Layout, procs: dict[str, Proc], made: dict[str, object]) -> list[str]:
    """Stop the node and remove what it made; returns what could not be removed (empty when
    all is gone). Safe to run on a half-started node and to run twice."""
    problems: list[str] = []
    for name in ("services", "kubelet"):
        if name in procs:
            procs[name].stop(timeout=10)
    # Containers and sandboxes: everything in the bed's cgroups.
    _kill_all(lambda: _cgroup_pids(layout), "pods")
    holder = procs.get("namespace")
    ns = _mount_ns(holder.pid) if holder and holder.alive() else None
    if "containerd" in procs:
        procs["containerd"].stop(timeout=10)
    if ns is not None:
        # The shims (and anything else) left in the node's mount namespace, the holder last.
        def in_namespace() -> set[int]:
            return {pid for pid in _pids() if pid != holder.pid and _mount_ns(pid) == ns}
        _kill_all(in_namespace, "node mount namespace")
        holder.stop(timeout=5)
    elif holder is not None:
        holder.stop(timeout=5)
    if made.get("cgroups"):
        problems += [f"cgroup {p} remains" for p in _remove_cgroups(layout)]
    if made.get("nft_table"):
        nft = find_binary("nft")
        if nft and run([nft, "list", "table", "ip", layout.nft_table], check=False).returncode \
                == 0:
            run([nft, "delete", "table", "ip", layout.nft_table])
    if made.get("bridge") and Path(f"/sys/class/net/{layout.bridge}").exists():
        # Pod veths go away with their network namespaces; delete any that lingers.
        for port in Path(f"/sys/class/net/{layout.bridge}/brif").iterdir():
            run(["ip", "link", "del", port.name], check=False)
        run(["ip", "link", "del", layout.bridge], check=False)
        if Path(f"/sys/class/net/{layout.bridge}").exists():
            problems.append(f"link {layout.bridge} remains")
    conntrack = find_binary("conntrack")
    if conntrack and made.get("bridge"):
        for flag in ("-s", "-d"):
            run([conntrack, "-D", flag, layout.pod_cidr], check=False)
    return problems

