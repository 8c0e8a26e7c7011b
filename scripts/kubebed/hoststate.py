"""A snapshot of the machine state a bed could change, and the difference between two.

Categories: mounts, links, addresses, routes, nftables rules, legacy iptables rules, the kernel
settings a kubelet or a CNI plugin touches, top-level cgroups, Kubernetes-related processes, and
the files a kubelet or containerd writes outside their own directories when not confined.

Others work on this machine at the same time (network-namespace labs, podman, other beds), so a
difference is attributed: it is the bed's when it names the bed (its slot's bridge, nft table,
cgroup, addresses, state directory) or is something only a Kubernetes node makes (``KUBE-``
chains, ``kubepods`` cgroups, a kubelet process, ``/var/lib/kubelet``...); anything else is
reported as someone else's. Reading never changes anything (no legacy iptables table is listed
unless it exists already: listing one creates it).

>>> before = {"links": {"lo", "eth0"}}
>>> after = {"links": {"lo", "eth0", "fxkb3"}}
>>> changes(before, after)
{'links': {'added': ['fxkb3'], 'removed': []}}
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

from .layout import CGROUP_FS, MAX_NODES, Layout

__all__ = ["KERNEL_SETTINGS", "WATCHED_PATHS", "attribute", "changes", "snapshot"]

#: Settings a kubelet (setupKernelTunables), a CNI bridge (isGateway) or kube-proxy changes.
KERNEL_SETTINGS = (
    "kernel/panic", "kernel/panic_on_oops", "vm/overcommit_memory", "vm/panic_on_oom",
    "kernel/keys/root_maxkeys", "kernel/keys/root_maxbytes", "net/ipv4/ip_forward",
    "net/ipv4/conf/all/forwarding", "net/ipv4/conf/default/forwarding",
    "net/ipv4/conf/all/route_localnet", "net/ipv4/conf/all/accept_redirects",
    "net/ipv6/conf/all/forwarding", "net/bridge/bridge-nf-call-iptables",
    "net/netfilter/nf_conntrack_max",
)
#: Where an unconfined kubelet, containerd or CNI plugin writes outside its own directories.
WATCHED_PATHS = (
    "/var/lib/kubelet", "/var/log/pods", "/var/log/containers", "/var/lib/cni", "/etc/cni",
    "/opt/cni", "/run/containerd", "/var/lib/containerd", "/opt/containerd", "/run/runc",
    "/var/run/kubernetes", "/root/.kube", "/run/netns", "/etc/netns", "/run/mount",
)
#: What only a Kubernetes node makes, whichever bed or kubelet made it: a bed never should.
#: ``/run/runc`` is not among them: runc keeps its own state there for any caller (podman
#: building the project's image makes it on a new machine); a container state in it is the
#: bed's only when it names the bed (see :func:`_files`).
KUBE_MARKS = re.compile(r"KUBE-|CNI-|kubepods|/var/lib/kubelet|/var/log/pods|/var/log/containers|"
                        r"/var/lib/cni|/run/containerd|/var/lib/containerd|/opt/containerd|"
                        r"/var/run/kubernetes|/root/.kube|/run/netns/cni-")
NODE_PROCESSES = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler",
                  "kubelet", "kube-proxy", "containerd", "containerd-shim-runc-v2")


def _run(argv: list[str]) -> str:
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=30,
                              check=False).stdout
    except (OSError, subprocess.TimeoutExpired):
        return ""


def _mounts() -> set[str]:
    out = set()
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        left, _, right = line.partition(" - ")
        fields = left.split()
        out.add(f"{fields[4]} {right.split()[0]}")
    return out


def _nft() -> set[str]:
    text = re.sub(r"packets \d+ bytes \d+", "", _run(["nft", "list", "ruleset"]))
    table, lines = "", set()
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("table "):
            table = line.rstrip(" {")
            lines.add(table)
        elif line and line != "}":
            lines.add(f"{table}: {line}")
    return lines


def _legacy_iptables() -> set[str]:
    lines = set()
    for family, names, save in (("ipv4", "/proc/net/ip_tables_names", "iptables-legacy-save"),
                                ("ipv6", "/proc/net/ip6_tables_names",
                                 "ip6tables-legacy-save")):
        try:
            tables = Path(names).read_text().split()
        except OSError:
            continue
        for table in tables:
            lines.add(f"{family} table {table}")
            for line in _run([save, "-t", table]).splitlines():
                if line.startswith("-"):
                    lines.add(f"{family} {table}: {line}")
    return lines


def _settings() -> set[str]:
    out = set()
    for key in KERNEL_SETTINGS:
        try:
            value = Path("/proc/sys", key).read_text().strip()
        except OSError:
            continue
        out.add(f"{key.replace('/', '.')}={value}")
    return out


def _cgroups() -> set[str]:
    out = set()
    for hierarchy in CGROUP_FS.iterdir():
        if hierarchy.is_dir() and not hierarchy.is_symlink():
            out.update(f"{hierarchy.name}/{c.name}" for c in hierarchy.iterdir() if c.is_dir())
    return out


def _processes() -> set[str]:
    out = set()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        name = os.path.basename(argv[0].decode(errors="replace")) if argv[0] else ""
        if name in NODE_PROCESSES or b"kubebed" in b" ".join(argv):
            out.add(f"{pid} {b' '.join(argv).decode(errors='replace')[:200]}")
    return out


def _runc_entry(entry: Path) -> str:
    """A runc container state directory, with the root file system and cgroup its
    ``state.json`` names (so a bed's container is told from podman's)."""
    try:
        config = json.loads((entry / "state.json").read_text()).get("config", {})
    except (OSError, ValueError):
        return str(entry)
    cgroup = (config.get("cgroups") or {}).get("path", "")
    return f"{entry} rootfs={config.get('rootfs', '?')} cgroup={cgroup}"


def _files() -> set[str]:
    out = set()
    for path in WATCHED_PATHS:
        p = Path(path)
        if p.exists():
            out.add(path)
            if p.is_dir() and path == "/run/runc":
                out.update(_runc_entry(c) for c in p.iterdir() if c.is_dir())
            elif p.is_dir():
                out.update(str(c) for c in p.iterdir())
    for shm in Path("/dev/shm").glob("fluxinfra-kube-*"):
        out.add(str(shm))
    return out


def snapshot() -> dict[str, set[str]]:
    links = {f"{p.name} master={(p / 'master').resolve().name if (p / 'master').exists() else '-'}"
             for p in Path("/sys/class/net").iterdir()}
    addresses = {" ".join(line.split()[1:4]) for line in _run(["ip", "-o", "addr"]).splitlines()}
    return {
        "mounts": _mounts(), "links": links, "addresses": addresses,
        "routes": set(_run(["ip", "-o", "route", "show", "table", "all"]).splitlines()),
        "nftables": _nft(), "iptables-legacy": _legacy_iptables(),
        "kernel settings": _settings(), "cgroups": _cgroups(), "processes": _processes(),
        "files": _files(),
    }


def changes(before: dict[str, set[str]], after: dict[str, set[str]]) -> dict[str, dict]:
    """``{category: {"added": [...], "removed": [...]}}`` for the categories that changed."""
    out = {}
    for key in sorted(set(before) | set(after)):
        added = sorted(after.get(key, set()) - before.get(key, set()))
        removed = sorted(before.get(key, set()) - after.get(key, set()))
        if added or removed:
            out[key] = {"added": added, "removed": removed}
    return out


def attribute(diff: dict[str, dict], layouts: list[Layout]) -> tuple[list[str], list[str]]:
    """Split a :func:`changes` result into (lines that are one of ``layouts``' beds' or a
    Kubernetes node's, lines that are someone else's, such as another bed's or a lab's).

    A changed kernel setting counts as ours: nothing else on these machines changes the ones
    watched."""
    marks = [KUBE_MARKS]
    for lay in layouts:
        names = [lay.bridge, lay.nft_table, lay.cgroup_root.lstrip("/"), lay.node_ip,
                 lay.state_dir, lay.etcd_dir]
        if lay.lan_bridge:
            names += [lay.lan_bridge, lay.lan_cidr.rsplit(".", 1)[0] + "."]
            for i in range(MAX_NODES):
                names += [f"fxkv{lay.slot}n{i}", lay.node(i).pod_cidr.rsplit(".", 1)[0] + "."]
        else:
            names.append(lay.pod_cidr.rsplit(".", 1)[0] + ".")
        marks.append(re.compile("|".join(re.escape(n) + r"\b" for n in names)))
    ours, theirs = [], []
    for category, sides in diff.items():
        for side, items in sides.items():
            for item in items:
                line = f"{category} {side}: {item}"
                mine = category == "kernel settings" or any(m.search(item) for m in marks)
                (ours if mine else theirs).append(line)
    return ours, theirs
