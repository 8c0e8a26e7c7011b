"""Real network hosts on this machine for running Flux brokers: one network namespace per host
on a private bridge, with its own address, its own hostname (a UTS namespace per process) and
its own /etc/hosts (``ip netns exec`` mounts ``/etc/netns/<ns>/hosts`` over it), so brokers
bind the same port on different addresses and find each other by name, as pods do through
their headless Service. Needs root and iproute2; :func:`why_not` says what is missing.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import time
import uuid
from pathlib import Path

FLUX_CANDIDATES = ("FLUXINFRA_FLUX", "/opt/flux/bin/flux")


def flux_binary() -> str | None:
    """The real ``flux`` to test with: $FLUXINFRA_FLUX, /opt/flux/bin/flux, or on PATH."""
    env = os.environ.get("FLUXINFRA_FLUX")
    for candidate in (env, "/opt/flux/bin/flux", shutil.which("flux")):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    return None


def why_not() -> str | None:
    """None if real hosts can be made here, else the reason (for pytest.skip)."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    if shutil.which("ip") is None or shutil.which("unshare") is None:
        return "iproute2 (ip) and util-linux (unshare) are needed"
    if flux_binary() is None:
        return ("no Flux build (flux-core 0.88.0 + flux-sched 0.54.0): set FLUXINFRA_FLUX or "
                "install one at /opt/flux (CI has none)")
    return None


def _ip(*argv: str) -> None:
    subprocess.run(["ip", *argv], check=True, capture_output=True, text=True)


class Hosts:
    """``names`` as hosts on a /24 of their own; ``aliases`` maps a name to extra /etc/hosts
    names (e.g. its FQDN). Use as a context manager; everything is removed on exit."""

    def __init__(self, names: list[str], aliases: dict[str, list[str]] | None = None) -> None:
        self.tag = "fk" + uuid.uuid4().hex[:6]
        self.bridge = f"{self.tag}br"
        self.net = f"10.254.{int(self.tag[2:6], 16) % 250}"
        self.names = list(names)
        self.aliases = aliases or {}
        self.procs: list[subprocess.Popen] = []
        self.namespaces: dict[str, str] = {}

    def address(self, name: str) -> str:
        return f"{self.net}.{10 + self.names.index(name)}"

    def __enter__(self) -> Hosts:
        _ip("link", "add", self.bridge, "type", "bridge")
        _ip("link", "set", self.bridge, "up")
        hosts_file = ["127.0.0.1 localhost"]
        for name in self.names:
            hosts_file.append(f"{self.address(name)} {name} {' '.join(self.aliases.get(name, []))}"
                              .rstrip())
        for i, name in enumerate(self.names):
            ns = f"{self.tag}-{i}"
            self.namespaces[name] = ns
            _ip("netns", "add", ns)
            veth, peer = f"{self.tag}v{i}", f"{self.tag}p{i}"
            _ip("link", "add", veth, "type", "veth", "peer", "name", peer)
            _ip("link", "set", veth, "master", self.bridge)
            _ip("link", "set", veth, "up")
            _ip("link", "set", peer, "netns", ns)
            _ip("-n", ns, "addr", "add", f"{self.address(name)}/24", "dev", peer)
            _ip("-n", ns, "link", "set", peer, "up")
            _ip("-n", ns, "link", "set", "lo", "up")
            etc = Path("/etc/netns") / ns
            etc.mkdir(parents=True, exist_ok=True)
            (etc / "hosts").write_text("\n".join(hosts_file) + "\n")
        return self

    def argv(self, name: str, argv: list[str], hostname: str | None = None) -> list[str]:
        """``argv`` run on host ``name`` (its network, hostname and /etc/hosts)."""
        return ["ip", "netns", "exec", self.namespaces[name], "unshare", "--uts", "--",
                "sh", "-c", 'hostname "$0" && exec "$@"', hostname or name, *argv]

    def popen(self, name: str, argv: list[str], **kwargs) -> subprocess.Popen:
        proc = subprocess.Popen(self.argv(name, argv), start_new_session=True, **kwargs)
        self.procs.append(proc)
        return proc

    def run(self, name: str, argv: list[str], **kwargs) -> subprocess.CompletedProcess:
        return subprocess.run(self.argv(name, argv), **kwargs)

    def __exit__(self, *exc: object) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, 15)
        deadline = time.monotonic() + 15
        for proc in self.procs:
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, 9)
                proc.wait()
        for ns in self.namespaces.values():
            subprocess.run(["ip", "netns", "delete", ns], capture_output=True)
            shutil.rmtree(Path("/etc/netns") / ns, ignore_errors=True)
        subprocess.run(["ip", "link", "delete", self.bridge], capture_output=True)
