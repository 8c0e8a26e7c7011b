"""Where a bed lives: its slot, names, addresses, ports and directories, and the machine-wide
registry that keeps concurrent beds apart.

Several beds run on one machine at once (one per engineer or test session). Each takes a *slot*
``s`` (1..99) under a lock, and everything it makes on the machine is named from that slot, so
two beds never share anything:

==================  ==============================================  ===========================
what                value for slot ``s``, node ``i``                override
==================  ==============================================  ===========================
API address         ``192.0.2.(100+s)/32`` on ``lo``                ``FLUXINFRA_KUBE_NODE_NET``
ports               ``24000 + 10 s`` .. ``+6``                       ``FLUXINFRA_KUBE_PORT_BASE``
node network        ``10.212.s.0/24`` on bridge ``fxkn<s>``; the     ``FLUXINFRA_KUBE_NODE_LAN``
                    machine is ``.1`` (cluster DNS), node ``i`` is
                    ``.(10+i)`` in a network namespace of its own
pod network         node ``i``: ``10.(213+i).s.0/24`` on a bridge   ``FLUXINFRA_KUBE_POD_NET``
                    inside that node's network namespace
service network     ``10.96.0.0/24``, translated inside each node's network namespace, so beds
                    can share it
cgroups             ``/fxkube<s>`` in every hierarchy; node ``i`` is ``/fxkube<s>/node<i>``
state               ``$FLUXINFRA_KUBE_ROOT/beds/<name>`` (default root ``/tmp/fluxinfra-kube``)
node names          ``<name>-node``, ``<name>-node2``, ... (kind's pattern)
==================  ==============================================  ===========================

The ports sit below the kernel's ephemeral range (32768+), so no outgoing connection takes one
between the check and the bind. A slot is skipped while any of its names or ports is in use,
which also steps around the leftovers of a bed that crashed and was never taken down.
"""

from __future__ import annotations

import contextlib
import fcntl
import ipaddress
import json
import os
import re
import shutil
import socket
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

from fluxinfra.kube.names import is_dns1123_label

__all__ = ["MAX_NODES", "MAX_SLOT", "NODE_OVERLAYS", "Layout", "LayoutError", "NodeSpec",
           "allocate", "bed_records", "find_binary", "lock", "registry_root", "release",
           "require_binary"]

MAX_SLOT = 99
#: Nodes per bed: pod networks ``10.(213+i).s.0/24`` stay below the labs' ``10.244``.
MAX_NODES = 16
PORT_NAMES = ("etcd", "etcd_peer", "apiserver", "controller_manager", "scheduler", "kubelet",
              "kubelet_healthz")
SERVICE_CIDR = "10.96.0.0/24"
CGROUP_FS = Path("/sys/fs/cgroup")
#: A bed name becomes part of node names: a DNS-1123 label this long at most.
NAME_MAX = 32
#: The lock stays behind like apt's /tmp/fluxinfra-apt.lock: deleting a lock file that others
#: may hold open would let two processes hold "the" lock at once.
LOCK_FILE = Path(os.environ.get("FLUXINFRA_KUBE_LOCK", "/tmp/fluxinfra-kube.lock"))


class LayoutError(Exception):
    """A bed cannot be placed; the message says what to change."""


def registry_root() -> Path:
    return Path(os.environ.get("FLUXINFRA_KUBE_ROOT", "/tmp/fluxinfra-kube"))


@contextlib.contextmanager
def lock() -> Iterator[None]:
    """The machine-wide lock around slot allocation and release."""
    with open(LOCK_FILE, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


@dataclass
class Layout:
    """Everything a bed's processes and host objects are named by (see the module table)."""

    name: str
    slot: int
    state_dir: str
    node_ip: str
    ports: dict[str, int]
    pod_cidr: str
    pod_gateway: str
    service_cidr: str
    service_ip: str
    bridge: str
    nft_table: str
    cgroup_root: str
    node_name: str
    etcd_dir: str
    extra: dict[str, str] = field(default_factory=dict)
    #: the node network: the machine's bridge, its address (cluster DNS) and the /24
    lan_bridge: str = ""
    lan_gateway: str = ""
    lan_cidr: str = ""

    @property
    def state(self) -> Path:
        return Path(self.state_dir)

    @property
    def server(self) -> str:
        return f"https://{self.node_ip}:{self.ports['apiserver']}"

    @classmethod
    def for_slot(cls, name: str, slot: int, state_dir: Path) -> Layout:
        node_net = os.environ.get("FLUXINFRA_KUBE_NODE_NET", "192.0.2")
        pod_net = os.environ.get("FLUXINFRA_KUBE_POD_NET", "10.213")
        base = int(os.environ.get("FLUXINFRA_KUBE_PORT_BASE", "24000")) + 10 * slot
        service = ipaddress.ip_network(SERVICE_CIDR)
        shm = Path("/dev/shm")
        # etcd fsyncs every write; on tmpfs that costs nothing, and a bed is throw-away.
        etcd_dir = (shm / f"fluxinfra-kube-{slot}-etcd") if shm.is_dir() else state_dir / "etcd"
        return cls(
            name=name, slot=slot, state_dir=str(state_dir),
            node_ip=f"{node_net}.{100 + slot}",
            ports={n: base + i for i, n in enumerate(PORT_NAMES)},
            pod_cidr=f"{pod_net}.{slot}.0/24", pod_gateway=f"{pod_net}.{slot}.1",
            service_cidr=SERVICE_CIDR, service_ip=str(service.network_address + 1),
            bridge=f"fxkb{slot}", nft_table=f"fxkube{slot}", cgroup_root=f"/fxkube{slot}",
            node_name=f"{name}-node", etcd_dir=str(etcd_dir),
            lan_bridge=f"fxkn{slot}", lan_gateway=f"{_lan_net()}.{slot}.1",
            lan_cidr=f"{_lan_net()}.{slot}.0/24",
        )

    def node(self, index: int) -> NodeSpec:
        """Node ``index``'s names and addresses (0 is the first node)."""
        if not 0 <= index < MAX_NODES:
            raise LayoutError(f"node index {index}: a bed has nodes 0..{MAX_NODES - 1}")
        first, second = os.environ.get("FLUXINFRA_KUBE_POD_NET", "10.213").split(".")
        pod_prefix = f"{first}.{int(second) + index}.{self.slot}"
        name = self.node_name if index == 0 else f"{self.node_name}{index + 1}"
        return NodeSpec(index=index, name=name, ip=self.lan_gateway.rsplit(".", 1)[0]
                        + f".{10 + index}", pod_cidr=f"{pod_prefix}.0/24",
                        pod_gateway=f"{pod_prefix}.1",
                        cgroup=f"{self.cgroup_root}/node{index}",
                        state_dir=str(self.state / "nodes" / name))

    def to_json(self) -> dict[str, object]:
        return asdict(self)


#: What each node sees as its own copy of the machine's directories (overlays whose writes stay
#: in the node's state directory); a bed's state must live elsewhere.
NODE_OVERLAYS = ("/etc", "/opt", "/usr/local", "/var", "/run", "/home", "/root", "/srv")


def _lan_net() -> str:
    return os.environ.get("FLUXINFRA_KUBE_NODE_LAN", "10.212")


@dataclass
class NodeSpec:
    """One real node of a bed: its name, its address on the node network, its pod network,
    its cgroup (under the bed's) and its state directory."""

    index: int
    name: str
    ip: str
    pod_cidr: str
    pod_gateway: str
    cgroup: str
    state_dir: str

    @property
    def state(self) -> Path:
        return Path(self.state_dir)

    def to_json(self) -> dict[str, object]:
        return asdict(self)


def find_binary(name: str) -> str | None:
    """``$FLUXINFRA_KUBE_BIN/<name>`` first, then ``PATH``, then the sbin directories (Debian
    puts runc and nft there)."""
    bin_dir = os.environ.get("FLUXINFRA_KUBE_BIN")
    if bin_dir:
        candidate = Path(bin_dir) / name
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    found = shutil.which(name)
    if found:
        return found
    return shutil.which(name, path="/usr/local/sbin:/usr/sbin:/sbin")


def require_binary(name: str) -> str:
    """:func:`find_binary`, or an error saying where the bed looks and what provides it."""
    path = find_binary(name)
    if path is None:
        raise LayoutError(
            f"{name}: not found in $FLUXINFRA_KUBE_BIN, on PATH or in /usr/sbin; the bed needs "
            "the Kubernetes v1.28 binaries (kube-apiserver, kube-controller-manager, "
            "kube-scheduler, kubelet, kubectl) there, and the Debian packages of "
            "scripts/apt-packages-kube.txt (scripts/kube deps installs them)")
    return path


def _slot_file(slot: int) -> Path:
    return registry_root() / "slots" / f"{slot}.json"


def bed_records() -> list[dict[str, object]]:
    """Every registered bed's ``{"name", "slot", "state_dir"}``."""
    records = []
    for path in sorted((registry_root() / "slots").glob("*.json")):
        with contextlib.suppress(OSError, ValueError):
            records.append(json.loads(path.read_text()))
    return records


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("0.0.0.0", port))
        except OSError:
            return False
    return True


def _host_addresses() -> list[ipaddress.IPv4Interface]:
    """Every IPv4 address and route destination on the machine, read from /proc (no ``ip``)."""
    nets: list[ipaddress.IPv4Interface] = []
    with contextlib.suppress(OSError):
        for line in Path("/proc/net/route").read_text().splitlines()[1:]:
            cols = line.split()
            dest = socket.inet_ntoa(int(cols[1], 16).to_bytes(4, "little"))
            mask = socket.inet_ntoa(int(cols[7], 16).to_bytes(4, "little"))
            if dest != "0.0.0.0":
                nets.append(ipaddress.IPv4Interface(f"{dest}/{mask}"))
    with contextlib.suppress(OSError):
        for line in Path("/proc/net/fib_trie").read_text().splitlines():
            match = re.match(r"\s+\|-- (\d+\.\d+\.\d+\.\d+)$", line)
            if match:
                nets.append(ipaddress.IPv4Interface(f"{match.group(1)}/32"))
    return nets


def _taken(layout: Layout, used: set[int]) -> str | None:
    """Why this slot cannot be used now, or None."""
    if layout.slot in used:
        return "registered"
    for link in (layout.bridge, layout.lan_bridge):
        if Path(f"/sys/class/net/{link}").exists():
            return f"link {link} exists"
    if (CGROUP_FS / "memory" / layout.cgroup_root.lstrip("/")).exists():
        return f"cgroup {layout.cgroup_root} exists"
    node = ipaddress.ip_address(layout.node_ip)
    ours = [ipaddress.ip_network(layout.lan_cidr)] + [
        ipaddress.ip_network(layout.node(i).pod_cidr) for i in range(MAX_NODES)]
    for net in _host_addresses():
        if net.ip == node:
            return f"{node} is in use"
        for mine in ours:
            if net.network.prefixlen > 0 and net.network.overlaps(mine):
                return f"{mine} overlaps {net.network}"
    busy = [p for p in layout.ports.values() if not _port_free(p)]
    if busy:
        return f"ports {busy} in use"
    if Path(layout.etcd_dir).exists():
        return f"{layout.etcd_dir} exists"
    return None


def allocate(name: str, state_dir: Path | None = None) -> Layout:
    """Register bed ``name`` in the lowest free slot and return its layout."""
    if not is_dns1123_label(name, NAME_MAX):
        raise LayoutError(f"bed name {name!r}: use 1-32 lowercase letters, digits and '-' "
                          "(it becomes part of a node name)")
    root = registry_root()
    with lock():
        (root / "slots").mkdir(parents=True, exist_ok=True)
        records = bed_records()
        if any(r.get("name") == name for r in records):
            raise LayoutError(f"bed {name!r} is already registered; take it down "
                              f"(scripts/kube down --name {name}) or pick another --name")
        used = {int(r["slot"]) for r in records}
        reasons = []
        for slot in range(1, MAX_SLOT + 1):
            state = state_dir or root / "beds" / name
            layout = Layout.for_slot(name, slot, Path(state))
            why = _taken(layout, used)
            if why is None:
                break
            if why != "registered":
                reasons.append(f"slot {slot}: {why}")
        else:
            raise LayoutError("no free bed slot (1..99): " + "; ".join(reasons[-5:]))
        if layout.state.exists() and any(layout.state.iterdir()):
            raise LayoutError(f"state directory {layout.state} is not empty; remove it or "
                              "pick another --name")
        for forbidden in NODE_OVERLAYS:
            if Path(layout.state_dir).resolve().is_relative_to(forbidden):
                raise LayoutError(f"state directory {layout.state_dir}: must not be under "
                                  f"{forbidden} (the node overlays it); use another "
                                  "FLUXINFRA_KUBE_ROOT")
        layout.state.mkdir(parents=True, exist_ok=True)
        _slot_file(slot).write_text(json.dumps(
            {"name": name, "slot": slot, "state_dir": layout.state_dir}))
    return layout


def release(layout: Layout) -> None:
    """Forget the bed's slot; remove the registry directories when no bed is left."""
    root = registry_root()
    with lock():
        with contextlib.suppress(FileNotFoundError):
            _slot_file(layout.slot).unlink()
        for empty in (root / "slots", root / "beds", root):
            with contextlib.suppress(OSError):
                empty.rmdir()
