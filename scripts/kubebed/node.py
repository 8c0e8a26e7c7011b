"""A bed's real nodes: each one looks like a machine of its own, on one machine.

kind gets this from one container per node; a bed gets it from one set of namespaces per node,
made with ``unshare`` and held by a small init (PID 1 of the node):

- **PID**: the node's containerd and kubelet, and so every ``hostPID`` pod, see the node's
  processes only; ``nsenter -t 1`` from such a pod (what the Flux installer does) enters *this*
  node, not the machine.
- **mount**: ``/etc``, ``/opt``, ``/usr/local``, ``/var``, ``/run``, ``/home``, ``/root`` and
  ``/srv`` are overlays whose writes stay in the node's state directory (a user created, a
  package unpacked or a broker's state written on one node is not on the others, nor on the
  machine); ``/sys`` is the node's own (its network devices), ``/sys/fs/cgroup`` shows the
  node's cgroup as the root of every hierarchy; the kernel settings the kubelet insists on are
  files bound over ``/proc/sys/...`` that already hold its values, so it never writes the
  machine's.
- **network**: an interface ``eth0`` on the bed's node network (a veth into the machine's
  bridge ``fxkn<s>``), the node's pod bridge ``cni0`` with its own pod network, and the bed's
  Service translation (written by :mod:`kubebed.services`). The machine routes between nodes
  on that bridge only; nothing from it is forwarded anywhere else.
- **UTS**: the node's name is its hostname.
- **cgroup**: the node's processes live in ``/fxkube<s>/node<i>`` of every hierarchy, which the
  node sees as its root (the kubelet's ``cgroupRoot`` is ``/`` there).

Stopping a node stops its kubelet, then kills its init: the kernel ends every process of the
node's PID namespace with it, and the mounts, network devices and namespace go too.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import time
import urllib.request
from pathlib import Path

import tomli_w

from .images import PAUSE_IMAGE
from .layout import CGROUP_FS, NODE_OVERLAYS, Layout, NodeSpec, find_binary, require_binary
from .pki import CertificateAuthority, kubeconfig
from .procs import CommandError, Proc, launch, run, start_time, wait_until
from .rest import ApiStatus, Rest

__all__ = ["POD_BRIDGE", "Node", "cgroup_hierarchies", "children", "node_teardown"]

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
#: The pod bridge inside each node's network namespace.
POD_BRIDGE = "cni0"
#: PID 1 of a node: waits, reaps orphans (shims, daemonized brokers), ignores signals but KILL.
_INIT = ("import os, signal\n"
         "def reap(*_):\n"
         "    while True:\n"
         "        try:\n"
         "            pid, _ = os.waitpid(-1, os.WNOHANG)\n"
         "        except ChildProcessError:\n"
         "            return\n"
         "        if pid == 0:\n"
         "            return\n"
         "signal.signal(signal.SIGCHLD, reap)\n"
         "while True:\n"
         "    signal.pause()\n")


def cgroup_hierarchies() -> list[Path]:
    """Every mounted cgroup hierarchy (v1 controllers, name=systemd, the unified v2 tree)."""
    if (CGROUP_FS / "cgroup.controllers").exists():  # pure cgroup v2
        return [CGROUP_FS]
    return sorted(p for p in CGROUP_FS.iterdir() if p.is_dir() and not p.is_symlink()
                  and (p / "cgroup.procs").exists())


def cgroup_mounts() -> list[tuple[str, str, str]]:
    """``(path under /sys/fs/cgroup, fstype, mount options)`` of the machine's cgroup mounts,
    to mount the same hierarchies again inside a node's cgroup namespace."""
    found = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        left, _, right = line.partition(" - ")
        point = left.split()[4]
        fstype, _, opts = right.split()[:3]
        if fstype not in ("cgroup", "cgroup2") or not point.startswith(f"{CGROUP_FS}"):
            continue
        keep = [o for o in opts.split(",") if o not in ("rw", "ro") and not o.startswith(
            ("release_agent=", "clone_children"))]
        if fstype == "cgroup" and all(o.startswith("name=") or o in ("xattr", "noprefix")
                                      for o in keep):
            keep.insert(0, "none")  # a named hierarchy without controllers
        found.append((os.path.relpath(point, CGROUP_FS), fstype, ",".join(keep)))
    return found


def children(pid: int) -> list[int]:
    """The direct children of ``pid`` (``/proc/PID/task/*/children``)."""
    found: list[int] = []
    with contextlib.suppress(OSError):
        for task in Path(f"/proc/{pid}/task").iterdir():
            with contextlib.suppress(OSError):
                found += [int(c) for c in (task / "children").read_text().split()]
    return found


def _child_proc(name: str, parent: Proc, timeout: float = 10) -> Proc:
    """The process ``parent`` (an ``unshare --fork`` or ``nsenter -p``) started, as a Proc
    with ``parent``'s log: signals and liveness then reach the real process."""
    found: list[int] = []

    def forked() -> bool:
        found[:] = children(parent.pid)
        if not found and not parent.alive():
            raise CommandError(f"{name} exited at once:\n{parent.log_tail()}")
        return bool(found)
    if not wait_until(forked, timeout):
        raise CommandError(f"{name}: no process forked in {timeout:.0f}s:\n{parent.log_tail()}")
    start = start_time(found[0])
    if start is None:
        raise CommandError(f"{name} exited at once:\n{parent.log_tail()}")
    return Proc(name, found[0], start, parent.log)


class Node:
    """Start, describe and enter one real node of a bed."""

    def __init__(self, layout: Layout, spec: NodeSpec, pki: dict[str, str], made, started
                 ) -> None:
        self.layout = layout
        self.spec = spec
        self.pki = pki
        self.dir = spec.state
        self.logs = layout.state / "logs"
        self.sock = str(self.dir / "containerd" / "containerd.sock")
        self.made = made        # callback(key): persist what is about to be made
        self.started = started  # callback(Proc): persist a process as soon as it exists
        self.init: Proc | None = None

    @property
    def proc_prefix(self) -> str:
        return f"{self.spec.name}/"

    # -- host objects ------------------------------------------------------------------------
    def cgroup_dirs(self) -> list[Path]:
        return [h / self.spec.cgroup.lstrip("/") for h in cgroup_hierarchies()]

    def make_cgroups(self) -> None:
        self.made("cgroups")
        for hierarchy in cgroup_hierarchies():
            path = hierarchy
            for part in Path(self.spec.cgroup.lstrip("/")).parts:
                path = path / part
                path.mkdir(exist_ok=True)
                if hierarchy.name == "cpuset":  # a new v1 cpuset has no CPUs until given some
                    for knob in ("cpuset.cpus", "cpuset.mems"):
                        (path / knob).write_text((hierarchy / knob).read_text())

    def _join_cgroups(self) -> str:
        """Shell that moves the running shell (``$$``) into the node's cgroup everywhere."""
        return "; ".join(f"echo $$ > {d}/cgroup.procs" for d in self.cgroup_dirs())

    def credentials(self) -> dict[str, str]:
        """The node's own kubelet identity (``system:node:<name>``, NodeRestriction lets it
        touch only its own Node) and serving certificate, issued by the bed's CA."""
        pki = self.dir / "pki"
        ca = CertificateAuthority.load(Path(self.pki["ca"]), Path(self.pki["ca_key"]))
        name = self.spec.name
        client = ca.issue(f"system:node:{name}", client=True, organizations=("system:nodes",))
        serving = ca.issue(name, server=True, dns=(name, "localhost"),
                           ips=(self.spec.ip, "127.0.0.1"))
        paths = {"client": str(client.write(pki, "kubelet")),
                 "serving": str(serving.write(pki, "kubelet-serving")),
                 "serving_key": str(pki / "kubelet-serving.key")}
        paths["kubeconfig"] = str(kubeconfig(
            pki / "kubelet.kubeconfig", server=self.layout.server, ca=ca,
            user=f"system:node:{name}", client=client, cluster=f"bed-{self.layout.name}"))
        return paths

    # -- the namespaces ----------------------------------------------------------------------
    def init_script(self) -> Path:
        ns = self.dir / "ns"
        lines = ["set -eu", "mount -t sysfs sysfs /sys",
                 f"mount -t tmpfs -o mode=755 cgroup {CGROUP_FS}"]
        for sub, fstype, opts in cgroup_mounts():
            lines += [f"mkdir -p {CGROUP_FS / sub}",
                      f"mount -t {fstype} -o {opts or 'defaults'} cgroup {CGROUP_FS / sub}"]
        for top in NODE_OVERLAYS:
            if not Path(top).is_dir() or Path(top).is_symlink():
                continue
            key = top.strip("/").replace("/", "-")
            for sub in ("upper", "work"):
                (ns / f"{key}.{sub}").mkdir(parents=True, exist_ok=True)
            lines.append(f"mount -t overlay node-{key} -o lowerdir={top},"
                         f"upperdir={ns}/{key}.upper,workdir={ns}/{key}.work {top}")
        (ns / "netns").mkdir(parents=True, exist_ok=True)
        (ns / "sysctl").mkdir(parents=True, exist_ok=True)
        lines += ["mkdir -p /run/netns", f"mount --bind {ns}/netns /run/netns",
                  "mount --make-shared /run/netns"]
        for key, value in KUBELET_SYSCTLS.items():
            fake = ns / "sysctl" / key.replace("/", ".")
            fake.write_text(value + "\n")
            lines.append(f"mount --bind {fake} /proc/sys/{key}")
        name, lan = self.spec.name, self.layout
        lines += [
            f"hostname {name}",
            f"echo {name} > /etc/hostname",
            "rm -f /etc/resolv.conf /etc/hosts",
            f"echo 'nameserver {lan.lan_gateway}' > /etc/resolv.conf",
            f"printf '127.0.0.1 localhost\\n{self.spec.ip} {name}\\n' > /etc/hosts",
            # Another node's leftovers never: a machine-id of its own.
            "cat /proc/sys/kernel/random/uuid | tr -d - > /etc/machine-id",
            f"echo ready > {ns}/ready",
            f"exec {sys.executable} -c '{_INIT}' {self.dir}",
            "",
        ]
        script = self.dir / "init.sh"
        script.write_text("\n".join(lines))
        return script

    def start_init(self) -> Proc:
        ns = self.dir / "ns"
        with contextlib.suppress(FileNotFoundError):
            (ns / "ready").unlink()
        script = self.init_script()
        unshare = (f"exec unshare --mount --uts --ipc --net --pid --cgroup --fork "
                   f"--kill-child=SIGKILL --mount-proc --propagation private sh {script}")
        parent = launch(f"{self.proc_prefix}unshare",
                        ["sh", "-c", f"{self._join_cgroups()}; {unshare}"], self.logs)
        self.started(parent)
        init = _child_proc(f"{self.proc_prefix}init", parent)
        self.started(init)
        if not wait_until(lambda: (ns / "ready").exists() or not init.alive(), 20) \
                or not init.alive():
            raise CommandError(f"node {self.spec.name}: its namespaces did not come up:\n"
                               f"{parent.log_tail()}")
        self.init = init
        return init

    def in_net(self, *argv: str) -> list[str]:
        """``argv`` in the node's network namespace (and the machine's mount namespace)."""
        assert self.init is not None
        return ["nsenter", f"--net=/proc/{self.init.pid}/ns/net", "--", *argv]

    def enter(self, argv: list[str]) -> list[str]:
        """``argv`` as a process of the node: its cgroup, then every namespace of its init."""
        assert self.init is not None
        nsenter = (f"exec nsenter -t {self.init.pid} -m -u -i -n -p -C --wd=/ -- \"$@\"")
        return ["sh", "-c", f"{self._join_cgroups()}; {nsenter}", "sh", *argv]

    def launch_in(self, name: str, argv: list[str]) -> Proc:
        parent = launch(f"{self.proc_prefix}{name}-nsenter", self.enter(argv), self.logs)
        self.started(parent)
        proc = _child_proc(f"{self.proc_prefix}{name}", parent)
        self.started(proc)
        return proc

    # -- the network -------------------------------------------------------------------------
    @property
    def veth(self) -> str:
        return f"fxkv{self.layout.slot}n{self.spec.index}"

    def make_network(self) -> None:
        """``eth0`` on the node network, the pod bridge, forwarding inside the node, and the
        machine's route to the node's pods (the API server calls webhooks at pod addresses)."""
        lay, spec = self.layout, self.spec
        assert self.init is not None
        self.made("veth")
        run(["ip", "link", "add", self.veth, "type", "veth", "peer", "name", "eth0",
             "netns", str(self.init.pid)])
        run(["ip", "link", "set", self.veth, "master", lay.lan_bridge, "up"])
        prefix = lay.lan_cidr.split("/")[1]
        pod_prefix = spec.pod_cidr.split("/")[1]
        for argv in (["ip", "link", "set", "lo", "up"],
                     ["ip", "addr", "add", f"{spec.ip}/{prefix}", "dev", "eth0"],
                     ["ip", "link", "set", "eth0", "up"],
                     ["ip", "route", "add", "default", "via", lay.lan_gateway],
                     ["ip", "link", "add", POD_BRIDGE, "type", "bridge"],
                     ["ip", "addr", "add", f"{spec.pod_gateway}/{pod_prefix}", "dev",
                      POD_BRIDGE],
                     ["ip", "link", "set", POD_BRIDGE, "up"],
                     ["sh", "-c", "echo 1 > /proc/sys/net/ipv4/ip_forward"]):
            run(self.in_net(*argv))
        self.made("route")
        run(["ip", "route", "replace", spec.pod_cidr, "via", spec.ip, "dev", lay.lan_bridge])

    # -- containerd --------------------------------------------------------------------------
    def containerd_config(self) -> Path:
        lay, spec = self.layout, self.spec
        cni_bin = next((d for d in CNI_BIN_DIRS if Path(d, "bridge").exists()), None)
        if cni_bin is None:
            raise CommandError("CNI plugins (bridge, host-local) not found in "
                               f"{' or '.join(CNI_BIN_DIRS)}: install containernetworking-plugins")
        cni_conf = self.dir / "cni"
        cni_conf.mkdir(parents=True, exist_ok=True)
        (cni_conf / "10-bed.conflist").write_text(json.dumps({
            "cniVersion": "1.0.0", "name": f"bed-{lay.name}",
            "plugins": [{
                "type": "bridge", "bridge": POD_BRIDGE,
                # The gateway address is on the bridge already (make_network); isGateway would
                # also set the pods' default route, which the range below gives instead.
                "isGateway": False, "ipMasq": False, "hairpinMode": True,
                "ipam": {"type": "host-local",
                         "ranges": [[{"subnet": spec.pod_cidr, "gateway": spec.pod_gateway}]],
                         "routes": [{"dst": "0.0.0.0/0"}],
                         "dataDir": str(self.dir / "cni-ipam")},
            }],
        }, indent=2))
        root, state = self.dir / "containerd", self.dir / "containerd-state"
        config = self.dir / "containerd.toml"
        cri = {
            "sandbox_image": PAUSE_IMAGE,
            # No CAP_SYS_RESOURCE on these machines: keep pods' oom_score_adj >= ours (0).
            "restrict_oom_score_adj": True,
            "disable_apparmor": True, "enable_selinux": False,
            "stream_server_address": "127.0.0.1", "stream_server_port": "0",
            "containerd": {
                "snapshotter": "overlayfs", "default_runtime_name": "runc",
                "runtimes": {"runc": {"runtime_type": "io.containerd.runc.v2", "options": {
                    "BinaryName": str(require_binary("runc")), "Root": f"{state}/runc",
                    "SystemdCgroup": False}}}},
            "cni": {"bin_dir": str(cni_bin), "conf_dir": str(cni_conf), "max_conf_num": 1},
        }
        config.write_text(tomli_w.dumps({
            "version": 2, "root": f"{root}/root", "state": str(state), "oom_score": 0,
            "disabled_plugins": [
                "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs",
                "io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.devmapper",
                "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"],
            "grpc": {"address": str(self.sock)}, "ttrpc": {"address": ""},
            "debug": {"address": "", "level": "info"}, "metrics": {"address": ""},
            "plugins": {"io.containerd.internal.v1.opt": {"path": f"{root}/opt"},
                        "io.containerd.grpc.v1.cri": cri},
        }))
        return config

    def start_containerd(self) -> Proc:
        proc = self.launch_in("containerd", [require_binary("containerd"), "--config",
                                             str(self.containerd_config())])

        def up() -> bool:
            if not proc.alive():
                raise CommandError(f"containerd on {self.spec.name} exited:\n"
                                   f"{proc.log_tail()}")
            return run(self.ctr("version"), check=False, timeout=10).returncode == 0
        if not wait_until(up, 30):
            raise CommandError(f"containerd on {self.spec.name} not ready after 30s:\n"
                               f"{proc.log_tail()}")
        return proc

    def ctr(self, *args: str) -> list[str]:
        return [require_binary("ctr"), "--address", self.sock, "--namespace", "k8s.io", *args]

    def import_image(self, tar: Path) -> None:
        run(self.ctr("images", "import", str(tar)), timeout=900)

    # -- kubelet -----------------------------------------------------------------------------
    def kubelet_config(self, creds: dict[str, str]) -> Path:
        lay, spec = self.layout, self.spec
        config = self.dir / "kubelet.yaml"
        config.write_text(json.dumps({
            "apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
            "address": spec.ip, "port": lay.ports["kubelet"], "readOnlyPort": 0,
            "healthzBindAddress": spec.ip, "healthzPort": lay.ports["kubelet_healthz"],
            "authentication": {"anonymous": {"enabled": False}, "webhook": {"enabled": True},
                               "x509": {"clientCAFile": self.pki["ca"]}},
            "authorization": {"mode": "Webhook"},
            "tlsCertFile": creds["serving"], "tlsPrivateKeyFile": creds["serving_key"],
            "containerRuntimeEndpoint": f"unix://{self.sock}",
            "imageServiceEndpoint": f"unix://{self.sock}",
            # The node's cgroup namespace: "/" is /fxkube<s>/node<i> of the machine.
            "cgroupDriver": "cgroupfs", "cgroupsPerQOS": True, "cgroupRoot": "/",
            "enforceNodeAllocatable": [],
            "failSwapOn": False,
            # The default -999 needs CAP_SYS_RESOURCE, which these machines do not grant.
            "oomScoreAdj": 0,
            # No iptables chains (KUBE-FIREWALL, canaries): the bed's nft table is enough.
            "makeIPTablesUtilChains": False,
            # Cluster DNS is the bed's services process on the node network's gateway.
            "resolvConf": "/etc/resolv.conf", "clusterDomain": "cluster.local",
            "clusterDNS": [lay.lan_gateway], "rotateCertificates": False,
            "serverTLSBootstrap": False,
            "registerNode": True, "syncFrequency": "10s", "fileCheckFrequency": "10s",
            "nodeStatusUpdateFrequency": "10s",
            "imageGCHighThresholdPercent": 100, "imageGCLowThresholdPercent": 99,
            "evictionHard": {"memory.available": "100Mi", "nodefs.available": "1%",
                             "imagefs.available": "1%"},
        }, indent=2))
        return config

    def start_kubelet(self) -> Proc:
        lay, spec = self.layout, self.spec
        creds = self.credentials()
        proc = self.launch_in("kubelet", [
            require_binary("kubelet"), f"--config={self.kubelet_config(creds)}",
            f"--kubeconfig={creds['kubeconfig']}", f"--root-dir={self.dir / 'kubelet'}",
            f"--hostname-override={spec.name}", f"--node-ip={spec.ip}",
            # Deprecated but still read by the image garbage collector: never collect it.
            f"--pod-infra-container-image={PAUSE_IMAGE}",
            "--node-labels=fluxinfra.io/bed-node=real", "--v=2",
        ])
        url = f"http://{spec.ip}:{lay.ports['kubelet_healthz']}/healthz"

        def healthy() -> bool:
            if not proc.alive():
                raise CommandError(f"kubelet on {spec.name} exited:\n{proc.log_tail()}")
            with urllib.request.urlopen(url, timeout=2) as resp:
                return resp.status == 200
        if not wait_until(healthy, 90):
            raise CommandError(f"kubelet on {spec.name} not healthy after 90s:\n"
                               f"{proc.log_tail()}")
        return proc

    def wait_ready(self, rest: Rest, timeout: float = 120) -> None:
        """Ready, and the controller-manager has lifted the not-ready taint."""
        path = f"/api/v1/nodes/{self.spec.name}"

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
            raise CommandError(f"node {self.spec.name} not Ready after {timeout:.0f}s")

    def start(self, pause_tar: Path) -> None:
        """Cgroups, namespaces, network, containerd (+ the pause image), kubelet; each made
        object and process is recorded as soon as it exists, so a failure can be undone. The
        caller waits for Ready (several nodes then come up side by side)."""
        self.dir.mkdir(parents=True, exist_ok=True)
        self.make_cgroups()
        self.start_init()
        self.make_network()
        self.start_containerd()
        self.import_image(pause_tar)
        self.start_kubelet()


# -- teardown ------------------------------------------------------------------------------
def _cgroup_pids(paths: list[Path]) -> set[int]:
    found: set[int] = set()
    for root in paths:
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


def remove_cgroup(path: str) -> list[str]:
    """Remove ``path`` (and what is below it) from every hierarchy; returns what is left."""
    left = []
    for hierarchy in cgroup_hierarchies():
        root = hierarchy / path.lstrip("/")
        if not root.exists():
            continue
        dirs = sorted((p for p in root.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts))
        for d in [*dirs, root]:
            if not wait_until(lambda d=d: _rmdir(d), 5):
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


def node_teardown(layout: Layout, spec: NodeSpec, procs: dict[str, Proc],
                  made: dict[str, object]) -> list[str]:
    """Stop one node and remove what it made; returns what could not be removed (empty when
    all is gone). Safe on a half-started node and to run twice."""
    problems: list[str] = []
    prefix = f"{spec.name}/"
    kubelet = procs.get(prefix + "kubelet")
    if kubelet is not None:
        kubelet.stop(timeout=10)
    init = procs.get(prefix + "init")
    if init is not None and init.alive():
        init.signal(signal.SIGKILL)  # the kernel ends the node's whole PID namespace
        if not wait_until(lambda: not init.alive(), 15):
            problems.append(f"{spec.name}: init {init.pid} survives SIGKILL")
    for name, proc in procs.items():
        if name.startswith(prefix) and proc.alive():
            with contextlib.suppress(CommandError):
                proc.stop(timeout=5)
    dirs = [h / spec.cgroup.lstrip("/") for h in cgroup_hierarchies()]
    with contextlib.suppress(CommandError):
        _kill_all(lambda: _cgroup_pids(dirs), f"node {spec.name}")
    if made.get("cgroups"):
        problems += [f"cgroup {p} remains" for p in remove_cgroup(spec.cgroup)]
    veth = f"fxkv{layout.slot}n{spec.index}"
    if made.get("veth") and Path(f"/sys/class/net/{veth}").exists():
        run(["ip", "link", "del", veth], check=False)  # gone with the namespace, normally
        if Path(f"/sys/class/net/{veth}").exists():
            problems.append(f"link {veth} remains")
    if made.get("route"):
        shown = run(["ip", "route", "show", spec.pod_cidr], check=False).stdout
        if shown.strip():
            run(["ip", "route", "del", spec.pod_cidr], check=False)
    conntrack = find_binary("conntrack")
    if conntrack and made.get("route"):
        for flag in ("-s", "-d"):
            run([conntrack, "-D", flag, spec.pod_cidr], check=False)
    return problems


def node_states(record: dict) -> dict[str, dict]:
    """``{node name: {"spec", "made"}}`` from a bed record."""
    return record.get("nodes", {})


def wait_all_ready(nodes: list[Node], rest: Rest, timeout: float = 180) -> None:
    for node in nodes:
        started = time.monotonic()
        node.wait_ready(rest, timeout)
        timeout = max(10.0, timeout - (time.monotonic() - started))


__all__ += ["node_states", "remove_cgroup", "wait_all_ready"]
