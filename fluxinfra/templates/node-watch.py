"""Keep this node's Flux broker config in step with the cluster's node list (stdlib only).

Runs in every fluxinfra installer pod (a DaemonSet). It lists and then watches Nodes with the pod's
ServiceAccount (RBAC: get/list/watch nodes, nothing else), keeps the nodes the DaemonSet would run
on (nodeSelector matches, NoSchedule/NoExecute taints tolerated), sorts them by name and writes the
broker's bootstrap config: rank i = i-th node, rank 0 (the first host) leads. When the set changes
(a node joins or leaves) it waits ``settleSeconds`` for the burst to end, rewrites the config and
restarts the local broker, so every broker restarts once with the same host list. Node readiness
does not change the set: a NotReady node keeps its rank and Flux sees its broker as offline.

Usage: python3 node-watch.py node-watch.json
"""

from __future__ import annotations

import json
import os
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from typing import Any

SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
#: Touched on every pass of the watch loop; the pod's probes check its age.
HEARTBEAT = "/tmp/node-watch.alive"
# Taints the DaemonSet controller tolerates on its own (node conditions), so they never exclude.
AUTO_TOLERATED_PREFIX = "node.kubernetes.io/"


def log(msg: str) -> None:
    print(f"node-watch: {msg}", file=sys.stderr, flush=True)


def tolerates(taint: dict[str, Any], tolerations: list[dict[str, Any]]) -> bool:
    if taint.get("effect") == "PreferNoSchedule" or taint["key"].startswith(AUTO_TOLERATED_PREFIX):
        return True
    for tol in tolerations:
        if tol.get("effect") and tol["effect"] != taint.get("effect"):
            continue
        if tol.get("operator") == "Exists":
            if not tol.get("key") or tol["key"] == taint["key"]:
                return True
        elif tol.get("key") == taint["key"] and tol.get("value", "") == taint.get("value", ""):
            return True
    return False


def eligible(node: dict[str, Any], selector: dict[str, str],
             tolerations: list[dict[str, Any]]) -> bool:
    """Would the installer DaemonSet run a pod on this node?"""
    meta = node.get("metadata", {})
    if meta.get("deletionTimestamp"):
        return False
    node_labels = meta.get("labels", {})
    if any(node_labels.get(k) != v for k, v in selector.items()):
        return False
    return all(tolerates(t, tolerations) for t in node.get("spec", {}).get("taints", []))


def broker_hosts(nodes: list[dict[str, Any]], settings: dict[str, Any]) -> list[dict[str, str]]:
    """[{name, address}] of eligible nodes with an InternalIP, sorted by node name."""
    hosts = []
    for node in nodes:
        if not eligible(node, settings["nodeSelector"], settings["tolerations"]):
            continue
        # The first InternalIP: on a dual-stack node, the cluster's primary family.
        address = next((a["address"] for a in node.get("status", {}).get("addresses", [])
                        if a["type"] == "InternalIP"), None)
        if address:
            hostname = node["metadata"].get("labels", {}).get("kubernetes.io/hostname",
                                                              node["metadata"]["name"])
            hosts.append({"name": node["metadata"]["name"], "host": hostname,
                          "address": address})
    return sorted(hosts, key=lambda h: h["name"])


def _url(address: str, port: int) -> str:
    return f"tcp://[{address}]:{port}" if ":" in address else f"tcp://{address}:{port}"


def curve_public_key(cert_path: str) -> str:
    """The public key of the CURVE certificate (public, so fine to write in the config)."""
    with open(cert_path) as f:
        for line in f:
            key, _, value = line.strip().partition("=")
            if key.strip() == "public-key":
                return value.strip().strip('"')
    raise ValueError(f"{cert_path}: no public-key")


def bootstrap_toml(hosts: list[dict[str, str]], settings: dict[str, Any],
                   public_key: str = "", scripts: str = "") -> str:
    """The broker config (TOML) for this host list; rank order = list order, rank 0 leads.
    The CURVE public key and the installer scripts' digest are recorded in comments, so rotated
    keys or new scripts change the file (and so restart the broker)."""
    port = settings["brokerPort"]
    lines = [
        "# Written by fluxinfra node-watch; rewritten whenever nodes join or leave.",
        f"# CURVE public key: {public_key}",
        f"# installer scripts: {scripts}",
        "[bootstrap]",
        f'curve_cert = "{settings["etcDir"]}/curve.cert"',
    ]
    if any(":" in h["address"] for h in hosts):
        lines.append("enable_ipv6 = true")  # else ZeroMQ binds IPv4 only
    lines.append("hosts = [")
    for i, h in enumerate(hosts):
        comma = "," if i < len(hosts) - 1 else ""
        lines.append(f'  {{ host = "{h["host"]}", bind = "tcp://*:{port}", '
                     f'connect = "{_url(h["address"], port)}" }}{comma}')
    lines += [
        "]",
        "",
        "[tbon]",
        f'topo = "{settings["topology"]}"',
        "",
        "[access]",
        "allow-guest-user = true",
        "allow-root-owner = true",
        "",
        "[resource]",
        "noverify = true",
        "",
    ]
    return "\n".join(lines)


class Api:
    """The few Kubernetes API calls node-watch makes, with the pod's ServiceAccount."""

    def __init__(self, host: str | None = None, port: str | None = None,
                 sa_dir: str = SA_DIR) -> None:
        host = host or os.environ["KUBERNETES_SERVICE_HOST"]
        port = port or os.environ.get("KUBERNETES_SERVICE_PORT", "443")
        self.base = f"https://[{host}]:{port}" if ":" in host else f"https://{host}:{port}"
        self.sa_dir = sa_dir
        self.ctx = ssl.create_default_context(cafile=f"{sa_dir}/ca.crt")

    def get(self, path: str, timeout: float) -> Any:
        with open(f"{self.sa_dir}/token") as f:  # re-read: projected tokens rotate
            token = f.read().strip()
        req = urllib.request.Request(self.base + path,
                                     headers={"Authorization": f"Bearer {token}"})
        return urllib.request.urlopen(req, context=self.ctx, timeout=timeout)


def heartbeat() -> None:
    with open(HEARTBEAT, "a"):
        os.utime(HEARTBEAT)


class Membership:
    """The watched Nodes and the broker host list they give."""

    def __init__(self, settings: dict[str, Any]) -> None:
        self.settings = settings
        self.nodes: dict[str, dict[str, Any]] = {}

    def relist(self, items: list[dict[str, Any]]) -> None:
        self.nodes = {n["metadata"]["name"]: n for n in items}

    def hosts(self) -> list[dict[str, str]]:
        return broker_hosts(list(self.nodes.values()), self.settings)

    def apply(self, event: dict[str, Any]) -> bool:
        """Apply one watch event (ADDED, MODIFIED, DELETED); True if the host list changed."""
        before = self.hosts()
        obj = event["object"]
        if event["type"] == "DELETED":
            self.nodes.pop(obj["metadata"]["name"], None)
        else:
            self.nodes[obj["metadata"]["name"]] = obj
        return self.hosts() != before


def flux_start(settings: dict[str, Any], action: str) -> None:
    """Run flux-start.sh on the node (in PID 1's namespaces)."""
    subprocess.run(["nsenter", "-t", "1", "-m", "-u", "-i", "-n", "-p", "--",
                    f"{settings['libDir']}/flux-start.sh", action], check=True)


def sync_broker(hosts: list[dict[str, str]], settings: dict[str, Any], root: str = "/host",
                start: Any = flux_start, public_key: str = "", scripts: str = "") -> str:
    """Make the node's broker run with the config for ``hosts``: rewrite the file (atomically)
    and restart when it changed, else only start the broker if it is not running (a rebooted
    node). Returns "restarted" or "ensured"."""
    path = f"{root}{settings['etcDir']}/conf.d/bootstrap.toml"
    text = bootstrap_toml(hosts, settings, public_key, scripts)
    try:
        with open(path) as f:
            current = f.read()
    except FileNotFoundError:
        current = None
    if current == text:
        start(settings, "ensure")
        return "ensured"
    with open(path + ".tmp", "w") as f:
        f.write(text)
    os.replace(path + ".tmp", path)
    log(f"{len(hosts)} brokers: {', '.join(h['name'] for h in hosts)}; restarting broker")
    start(settings, "restart")
    return "restarted"


def run(settings: dict[str, Any], api: Api | None = None, me: str | None = None,
        root: str = "/host", start: Any = flux_start) -> None:
    """List, then watch, forever; keep the broker config in step (parameters are for tests)."""
    api = api or Api()
    me = me or os.environ["NODE_NAME"]
    public_key = curve_public_key(f"{settings['keysDir']}/curve.cert")
    scripts = os.environ.get("FLUXINFRA_SCRIPTS_SHA256", "")
    members = Membership(settings)
    backoff = 1.0
    while True:
        try:
            listing = json.load(api.get("/api/v1/nodes", timeout=30))
            members.relist(listing["items"])
            version = listing["metadata"]["resourceVersion"]
            dirty, changed_at = True, 0.0
            while True:
                heartbeat()
                if dirty and time.monotonic() - changed_at >= settings["settleSeconds"]:
                    hosts = members.hosts()
                    if any(h["name"] == me for h in hosts):
                        sync_broker(hosts, settings, root=root, start=start,
                                    public_key=public_key, scripts=scripts)
                    else:
                        log(f"this node ({me}) is not eligible; broker not started")
                    dirty = False
                # A short watch window while a change settles, a long one otherwise.
                window = 5 if dirty else 300
                stream = api.get(f"/api/v1/nodes?watch=1&allowWatchBookmarks=true"
                                 f"&resourceVersion={version}&timeoutSeconds={window}",
                                 timeout=window + 30)
                for line in stream:
                    event = json.loads(line)
                    obj = event["object"]
                    if event["type"] == "ERROR":
                        raise urllib.error.HTTPError("", obj.get("code", 500), obj.get("message"),
                                                     None, None)  # type: ignore[arg-type]
                    version = obj["metadata"]["resourceVersion"]
                    if event["type"] != "BOOKMARK" and members.apply(event):
                        dirty, changed_at = True, time.monotonic()
                backoff = 1.0
        except urllib.error.HTTPError as exc:
            if exc.code == 410:  # resourceVersion too old: relist
                continue
            log(f"API error {exc.code}: {exc.reason}; retrying in {backoff:.0f}s")
        except (OSError, ValueError, KeyError, subprocess.CalledProcessError) as exc:
            log(f"{type(exc).__name__}: {exc}; retrying in {backoff:.0f}s")
        heartbeat()  # an unreachable API server is not a reason to restart this pod
        time.sleep(backoff)
        backoff = min(backoff * 2, 60.0)


if __name__ == "__main__":
    with open(sys.argv[1]) as cfg:
        run(json.load(cfg))
