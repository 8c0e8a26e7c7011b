"""Services and cluster DNS for the real nodes' pods, without kube-proxy or CoreDNS.

kube-proxy owns iptables chains and a DNS add-on needs a Service of its own, so a bed runs one
small process instead (``python -m kubebed.services STATE``) that reads Services and Endpoints
every second and

- writes an nft table ``fxkube`` *inside each real node's network namespace* (as kube-proxy
  does on every node): traffic from the node's pods, or from the node itself, to a ClusterIP
  port is DNATed to one of the ready endpoints (picked at random, as kube-proxy's iptables mode
  does), on whichever node it runs, and hairpin traffic (a pod reaching a Service that sends
  it to a pod on the same bridge) is masqueraded to the bridge address so the answer comes back
  the same way;
- answers DNS on the node network's gateway (the machine's end of ``fxkn<s>``), port 53 (the
  kubelets' ``clusterDNS``):
  ``<service>.<namespace>.svc.cluster.local`` is the ClusterIP, or for a headless Service the
  endpoint addresses, and ``<hostname>.<service>.<namespace>.svc.cluster.local`` is the pod an
  endpoint names (what a StatefulSet or an indexed Job with a ``subdomain`` relies on). Other
  names go to the machine's own resolver.

Only the bed's own nodes see any of it. On the machine, the bed's nft table (``fxkube<s>``,
:func:`host_rules`) keeps the node network to itself: the machine forwards between nodes on the
bridge and nothing from it anywhere else.

>>> catalog = Catalog.build(
...     [{"metadata": {"name": "web", "namespace": "d"},
...       "spec": {"clusterIP": "10.96.0.20", "ports": [{"port": 80, "protocol": "TCP"}]}}],
...     [{"metadata": {"name": "web", "namespace": "d"},
...       "subsets": [{"addresses": [{"ip": "10.213.1.5"}], "ports": [{"port": 8080}]}]}])
>>> catalog.names["web.d.svc.cluster.local"], catalog.routes
(['10.96.0.20'], [('10.96.0.20', 'tcp', 80, [('10.213.1.5', 8080)])])
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import struct
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .layout import Layout, NodeSpec, require_binary
from .procs import run
from .rest import ApiStatus, Rest

__all__ = ["NODE_TABLE", "Catalog", "DnsServer", "answer", "host_rules", "nft_rules",
           "services_main"]

DOMAIN = "cluster.local"
#: The Service table's name inside every node's network namespace.
NODE_TABLE = "fxkube"
TTL = 5


@dataclass
class Catalog:
    """What the Services and Endpoints say: DNS names and ClusterIP routes."""

    names: dict[str, list[str]] = field(default_factory=dict)
    #: (cluster IP, protocol, port, [(endpoint IP, endpoint port)])
    routes: list[tuple[str, str, int, list[tuple[str, int]]]] = field(default_factory=list)

    @classmethod
    def build(cls, services: list[dict[str, Any]], endpoints: list[dict[str, Any]]) -> Catalog:
        by_key = {(e["metadata"]["namespace"], e["metadata"]["name"]): e for e in endpoints}
        catalog = cls()
        for svc in services:
            meta, spec = svc["metadata"], svc["spec"]
            fqdn = f"{meta['name']}.{meta['namespace']}.svc.{DOMAIN}"
            subsets = by_key.get((meta["namespace"], meta["name"]), {}).get("subsets") or []
            addresses = [a for s in subsets for a in s.get("addresses", [])]
            for addr in addresses:
                if addr.get("hostname"):
                    catalog.names.setdefault(f"{addr['hostname']}.{fqdn}", []).append(addr["ip"])
            cluster_ip = spec.get("clusterIP")
            if not cluster_ip or cluster_ip == "None":
                catalog.names[fqdn] = sorted({a["ip"] for a in addresses})
                continue
            catalog.names[fqdn] = [cluster_ip]
            for port in spec.get("ports", []):
                targets = sorted(
                    (addr["ip"], ep["port"]) for s in subsets for ep in s.get("ports", [])
                    if ep.get("name", "") == port.get("name", "")
                    for addr in s.get("addresses", []))
                catalog.routes.append((cluster_ip, port.get("protocol", "TCP").lower(),
                                       port["port"], targets))
        catalog.routes.sort()
        return catalog


def host_rules(layout: Layout) -> str:
    """The bed's table on the machine: what arrives from the node network is forwarded back
    onto it (node to node, pod to pod) and nowhere else."""
    lan, table = layout.lan_bridge, layout.nft_table
    return "\n".join([
        f"table ip {table} {{}}", f"delete table ip {table}", f"table ip {table} {{",
        "  chain forward {",
        "    type filter hook forward priority filter; policy accept;",
        f'    iifname "{lan}" oifname != "{lan}" reject with icmp type admin-prohibited',
        f'    oifname "{lan}" iifname != "{lan}" reject with icmp type admin-prohibited',
        "  }", "}", ""])


def nft_rules(layout: Layout, node: NodeSpec, catalog: Catalog, bridge: str = "cni0") -> str:
    """One node's whole Service table (inside its network namespace), for one atomic
    ``nft -f``."""
    table = NODE_TABLE
    lines = [f"table ip {table} {{}}", f"delete table ip {table}", f"table ip {table} {{",
             "  chain prerouting {", "    type nat hook prerouting priority dstnat; "
             "policy accept;", f'    iifname "{bridge}" jump services', "  }",
             "  chain output {", "    type nat hook output priority -100; policy accept;",
             "    jump services", "  }",
             "  chain services {",
             # The API server is on the machine: no endpoint list needed, and always there.
             f"    ip daddr {layout.service_ip} tcp dport 443 dnat to "
             f"{layout.node_ip}:{layout.ports['apiserver']}"]
    for ip, proto, port, targets in catalog.routes:
        if ip == layout.service_ip or not targets:
            continue  # no endpoint: nothing answers, as with kube-proxy's reject rule
        match = f"    ip daddr {ip} {proto} dport {port} dnat to "
        if len(targets) == 1:
            lines.append(match + f"{targets[0][0]}:{targets[0][1]}")
        else:
            pick = ", ".join(f"{i} : {a} . {p}" for i, (a, p) in enumerate(targets))
            lines.append(match + f"numgen random mod {len(targets)} map {{ {pick} }}")
    lines += ["  }",
              "  chain postrouting {",
              "    type nat hook postrouting priority srcnat; policy accept;",
              f'    oifname "{bridge}" ip saddr {node.pod_cidr} ct status dnat masquerade',
              "  }", "}", ""]
    return "\n".join(lines)


# -- DNS -------------------------------------------------------------------------------------
def _question(packet: bytes) -> tuple[str, int, int]:
    """(name, qtype, offset past the question) of a one-question query."""
    labels, pos = [], 12
    while True:
        size = packet[pos]
        if size == 0:
            pos += 1
            break
        if size & 0xC0:
            raise ValueError("compressed name in a question")
        labels.append(packet[pos + 1:pos + 1 + size].decode("ascii", "replace"))
        pos += 1 + size
    qtype, _ = struct.unpack("!HH", packet[pos:pos + 4])
    return ".".join(labels).lower(), qtype, pos + 4


def answer(packet: bytes, names: dict[str, list[str]]) -> bytes | None:
    """The reply to a query for a cluster name, or None when the name is not ours to answer.

    >>> q = struct.pack("!HHHHHH", 7, 0x0100, 1, 0, 0, 0) + b"\\x01a\\x01b\\x03svc"
    >>> q += b"\\x07cluster\\x05local\\x00" + struct.pack("!HH", 1, 1)
    >>> reply = answer(q, {"a.b.svc.cluster.local": ["10.96.0.9"]})
    >>> struct.unpack("!HHHH", reply[:8]), socket.inet_ntoa(reply[-4:])
    ((7, 33152, 1, 1), '10.96.0.9')
    """
    try:
        name, qtype, end = _question(packet)
    except (IndexError, ValueError, struct.error):
        return None
    if not (name == DOMAIN or name.endswith("." + DOMAIN)):
        return None
    ident, flags = struct.unpack("!HH", packet[:4])
    ips = names.get(name)
    rcode = 0 if ips is not None else 3  # NXDOMAIN
    records = [socket.inet_aton(ip) for ip in ips or []] if qtype in (1, 255) else []
    header = struct.pack("!HHHHHH", ident, 0x8180 | (flags & 0x0100) | rcode, 1,
                         len(records), 0, 0)
    body = packet[12:end]
    for data in records:
        body += struct.pack("!HHHIH", 0xC00C, 1, 1, TTL, 4) + data
    return header + body


def _upstream() -> tuple[str, int]:
    for line in Path("/etc/resolv.conf").read_text().splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[0] == "nameserver":
            return parts[1], 53
    return "127.0.0.1", 53


class DnsServer:
    """UDP DNS on ``address:53`` from the current catalog's names; other names are relayed."""

    def __init__(self, address: str, catalog_fn) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind((address, 53))
        self.catalog_fn = catalog_fn
        self.upstream = _upstream()

    def serve(self, stop: threading.Event) -> None:
        self.sock.settimeout(0.5)
        while not stop.is_set():
            try:
                packet, client = self.sock.recvfrom(4096)
            except TimeoutError:
                continue
            reply = answer(packet, self.catalog_fn().names)
            if reply is not None:
                self.sock.sendto(reply, client)
            else:
                threading.Thread(target=self._relay, args=(packet, client),
                                 daemon=True).start()

    def _relay(self, packet: bytes, client: tuple[str, int]) -> None:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as out:
            out.settimeout(3)
            with contextlib.suppress(OSError):
                out.sendto(packet, self.upstream)
                self.sock.sendto(out.recvfrom(65535)[0], client)


# -- the process -----------------------------------------------------------------------------
def _nodes(state: Path) -> list[tuple[NodeSpec, int]]:
    """The bed's running real nodes and their init's pid (from ``bed.json``, re-read each
    pass: nodes join and leave while the bed runs)."""
    with contextlib.suppress(OSError, ValueError):
        bed = json.loads((state / "bed.json").read_text())
        procs = bed.get("procs", {})
        found = []
        for entry in bed.get("nodes", {}).values():
            spec = NodeSpec(**entry["spec"])
            init = procs.get(f"{spec.name}/init")
            if init and os.path.exists(f"/proc/{init['pid']}/ns/net"):
                found.append((spec, int(init["pid"])))
        return found
    return []


def services_main(argv: list[str]) -> int:
    """``python -m kubebed.services STATE_DIR``: keep the tables and DNS in step until
    SIGTERM."""
    state = Path(argv[0])
    bed = json.loads((state / "bed.json").read_text())
    layout, pki = Layout(**bed["layout"]), bed["pki"]
    rest = Rest(layout.server, pki["ca"], pki["admin"], pki["admin_key"], timeout=10)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    current = [Catalog()]
    dns = DnsServer(layout.lan_gateway, lambda: current[0])
    threading.Thread(target=dns.serve, args=(stop,), daemon=True).start()
    (state / "services.ready").write_text("ready\n")
    nft = require_binary("nft")
    applied: dict[tuple[str, int], str] = {}
    while not stop.is_set():
        try:
            catalog = Catalog.build(rest.get("/api/v1/services")["items"],
                                    rest.get("/api/v1/endpoints")["items"])
        except (ApiStatus, OSError, ValueError) as err:
            print(f"services: {err}", file=sys.stderr, flush=True)
            rest.close()
            stop.wait(1.0)
            continue
        current[0] = catalog
        nodes = _nodes(state)
        for key in set(applied) - {(n.name, pid) for n, pid in nodes}:
            del applied[key]
        for node, pid in nodes:
            rules = nft_rules(layout, node, catalog)
            if applied.get((node.name, pid)) == rules:
                continue
            result = run(["nsenter", f"--net=/proc/{pid}/ns/net", "--", nft, "-f", "-"],
                         input_text=rules, check=False)
            if result.returncode:
                print(f"services: nft on {node.name}: {result.stderr.strip()}",
                      file=sys.stderr, flush=True)
            else:
                applied[(node.name, pid)] = rules
        stop.wait(1.0)
    return 0


if __name__ == "__main__":
    sys.exit(services_main(sys.argv[1:]))
