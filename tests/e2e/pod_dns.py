"""A stand-in for cluster DNS (named as such: the test bed runs no CoreDNS), just enough for a
MiniCluster's brokers to find each other: it answers A queries for
``<hostname>.<subdomain>.<namespace>.svc.<domain>`` with the pod IP of the pod that has that
``spec.hostname`` and ``spec.subdomain`` (what CoreDNS answers for a headless Service with
``publishNotReadyAddresses``), NXDOMAIN for other names in the domain, and an empty answer for
other record types. Standard library only; UDP; one thread.
"""

from __future__ import annotations

import json
import socket
import struct
import threading
from collections.abc import Callable

A, IN = 1, 1


def _qname(packet: bytes, offset: int) -> tuple[str, int]:
    labels = []
    while True:
        length = packet[offset]
        offset += 1
        if length == 0:
            return ".".join(labels), offset
        labels.append(packet[offset:offset + length].decode("ascii", "replace"))
        offset += length


def answer(packet: bytes, lookup: Callable[[str], str | None], domain: str) -> bytes:
    """The response to one query packet."""
    ident, _flags, qdcount = struct.unpack("!HHH", packet[:6])
    name, end = _qname(packet, 12)
    qtype, qclass = struct.unpack("!HH", packet[end:end + 4])
    question = packet[12:end + 4]
    name = name.lower().rstrip(".")
    ip = lookup(name) if qtype == A and qclass == IN else None
    ours = name.endswith(f".svc.{domain}")
    if ip:
        flags, answers = 0x8580, 1   # response, authoritative, RD, RA
        record = struct.pack("!HHHIH", 0xC00C, A, IN, 5, 4) + socket.inet_aton(ip)
    else:
        exists = ours and qtype != A and lookup(name) is not None
        flags = 0x8580 if exists or not ours else 0x8583   # NXDOMAIN for unknown names of ours
        answers, record = 0, b""
    return struct.pack("!HHHHHH", ident, flags, 1, answers, 0, 0) + question + record


def pod_lookup(kubectl: Callable[..., str],
               domain: str = "cluster.local") -> Callable[[str], str | None]:
    """Resolve ``<host>.<sub>.<ns>.svc.<domain>`` through the API (``kubectl get pods``)."""
    def lookup(name: str) -> str | None:
        parts = name.split(".")
        suffix = ["svc", *domain.split(".")]
        if len(parts) != 3 + len(suffix) or parts[3:] != suffix:
            return None
        host, sub, ns = parts[:3]
        pods = json.loads(kubectl("get", "pods", "-n", ns, "-o", "json"))["items"]
        for pod in pods:
            spec = pod["spec"]
            if spec.get("hostname") == host and spec.get("subdomain") == sub and \
                    pod.get("status", {}).get("podIP"):
                return pod["status"]["podIP"]
        return None
    return lookup


class PodDNS:
    """Serve :func:`answer` on ``(address, port)`` until closed."""

    def __init__(self, address: str, lookup: Callable[[str], str | None],
                 domain: str = "cluster.local", port: int = 53) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind((address, port))
        self.sock.settimeout(0.5)
        self.lookup, self.domain = lookup, domain
        self.queries: list[str] = []
        self.closed = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while not self.closed.is_set():
            try:
                packet, peer = self.sock.recvfrom(512)
            except TimeoutError:
                continue
            except OSError:
                return
            try:
                self.queries.append(_qname(packet, 12)[0])
                self.sock.sendto(answer(packet, self.lookup, self.domain), peer)
            except (IndexError, struct.error, OSError, ValueError):
                continue

    def close(self) -> None:
        self.closed.set()
        self.thread.join(5)
        self.sock.close()
