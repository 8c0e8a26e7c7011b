"""Run this node's share of the installer's Flux instance (standard library + fluxconf.py only,
which imports the shipped hostlist.py, idset.py and tomli_w.py).

Every fluxinfra installer pod (a DaemonSet) runs this. It keeps Flux ranks stable across node
joins and leaves with a **rank map**: one ConfigMap (``<installer>-ranks``) that every pod reads
and changes only by compare-and-swap on its ``resourceVersion``, so concurrent changes never
lose each other. The instance is sized ahead: it always has ``maxNodes`` ranks, broker hostnames
``<hostPrefix><rank>`` (the broker's ``hostname`` attribute), so its bootstrap config never has
to change shape when nodes come and go.

* A node that becomes eligible (the DaemonSet would run there) takes the lowest free rank: one
  no node holds, or one whose node is gone. Its broker starts and joins; nothing else restarts.
* A node that goes away leaves its rank held but down (Flux shows it offline) until a new node
  reuses it. Jobs on other ranks keep running.
* Rank 0 (the lead) never moves while its node is eligible. If it goes, the live node with the
  lowest rank becomes rank 0 in a new **epoch**, and every broker restarts once (their parent
  chain ended with the old lead anyway). A new ``maxNodes`` or ``generation`` also starts a
  new epoch.
* The lead writes the epoch's R (RFC 20) into the map before its broker starts: each held rank
  gets its node's real cores and GPUs (``flux R encode --local`` on that node), free ranks the
  ``spareCores``/``spareGpus`` shape (default: the lead's own). Only the lead is configured with
  R (``[resource] path``, which wins over any R its restored statedir holds); the other ranks
  fetch it from their parent and check their own hardware against their share.
* A broker restarts only when what it was started with changes: the epoch, its rank, its
  parent's address, the keys or the installer scripts.

Before all that it installs Flux on the node (``flux-install.sh``, run through
``fluxinfra-host.sh`` outside this pod's cgroup: a transient systemd unit where the node runs
systemd, else a cgroup of its own, with ``installMemory`` and ``installTimeoutSeconds``), with the
install's output in this pod's log and the reason in the pod's termination message if it fails.

Usage: python3 node-watch.py node-watch.json            (the DaemonSet's container)
       python3 node-watch.py --pre-stop node-watch.json (its preStop hook)
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import json
import os
import re
import ssl
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
try:
    import fluxconf  # shipped beside this file in the installer's ConfigMap
except ImportError:  # run from the fluxinfra package (tests)
    from fluxinfra.k8s import fluxconf

SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
#: Touched on every pass of the watch loop (and during the install); the liveness probe checks it.
HEARTBEAT = "/tmp/node-watch.alive"
TERMINATION_LOG = "/dev/termination-log"
# Taints the DaemonSet controller tolerates on its own (node conditions), so they never exclude.
AUTO_TOLERATED_PREFIX = "node.kubernetes.io/"
MAP_KEY = "ranks.json"
#: The connect address of a rank no node holds: TEST-NET-1 (RFC 5737) never answers, so a broker
#: whose parent rank is free waits, offline, instead of reaching anything.
UNHELD_ADDRESS = "192.0.2.1"
MAP_VERSION = 1


def log(msg: str) -> None:
    print(f"node-watch: {msg}", file=sys.stderr, flush=True)


# -- which nodes get a broker --------------------------------------------------------------------

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


def node_address(node: dict[str, Any]) -> str | None:
    """The first InternalIP: on a dual-stack node, the cluster's primary family."""
    return next((a["address"] for a in node.get("status", {}).get("addresses", [])
                 if a["type"] == "InternalIP"), None)


def eligible_nodes(nodes: list[dict[str, Any]], settings: dict[str, Any]) -> dict[str, str]:
    """Node name -> InternalIP of every node that gets a broker."""
    out = {}
    for node in nodes:
        address = node_address(node)
        if address and eligible(node, settings["nodeSelector"], settings["tolerations"]):
            out[node["metadata"]["name"]] = address
    return dict(sorted(out.items()))


class Membership:
    """The watched Nodes and the eligible set they give."""

    def __init__(self, settings: dict[str, Any]) -> None:
        self.settings = settings
        self.nodes: dict[str, dict[str, Any]] = {}

    def relist(self, items: list[dict[str, Any]]) -> None:
        self.nodes = {n["metadata"]["name"]: n for n in items}

    def eligible(self) -> dict[str, str]:
        return eligible_nodes(list(self.nodes.values()), self.settings)

    def apply(self, event: dict[str, Any]) -> bool:
        """Apply one watch event (ADDED, MODIFIED, DELETED); True if the eligible set changed
        (readiness alone never changes it: a NotReady node keeps its rank, Flux sees it down)."""
        before = self.eligible()
        obj = event["object"]
        if event["type"] == "DELETED":
            self.nodes.pop(obj["metadata"]["name"], None)
        else:
            self.nodes[obj["metadata"]["name"]] = obj
        return self.eligible() != before


# -- the rank map (pure functions) ---------------------------------------------------------------

#: Settings every broker must agree on: they live in the map, so a rolling update of the
#: installer never mixes them (old pods follow the map, not their own settings).
INSTANCE_KEYS = ("size", "generation", "hostPrefix", "topology", "brokerPort")


def instance_settings(settings: dict[str, Any]) -> dict[str, Any]:
    return {"size": settings["maxNodes"], "generation": settings["generation"],
            "hostPrefix": settings["hostPrefix"], "topology": settings["topology"],
            "brokerPort": settings["brokerPort"]}


def new_map(settings: dict[str, Any]) -> dict[str, Any]:
    return {"version": MAP_VERSION, "epoch": 0, "leadSince": 0,
            "templateGeneration": settings["templateGeneration"],
            **instance_settings(settings), "slots": {}, "R": None}


def parent_rank(rank: int, topology: str) -> int | None:
    """The rank's TBON parent under ``tbon.topo`` (flux-core's kary and binomial plugins)."""
    if rank == 0:
        return None
    if topology == "binomial":
        return rank & (rank - 1)
    k = int(topology.split(":", 1)[1])
    if k == 0:       # kary:0: rank 0 is every rank's parent (a flat tree)
        return 0
    return rank - 1 if k == 1 else (rank - 1) // k


def rank_of(ranks: dict[str, Any], node: str) -> int | None:
    return next((int(r) for r, slot in ranks["slots"].items() if slot["node"] == node), None)


def _new_epoch(ranks: dict[str, Any], live: dict[str, str], why: str,
               notes: list[str]) -> None:
    """Start a new epoch: every broker restarts anyway, so the live nodes close ranks up (in
    their old order, the lead first if it lives) and gone nodes' ranks are let go."""
    ranks["epoch"] += 1
    ranks["R"] = None
    notes.append(f"epoch {ranks['epoch']}: {why}")
    kept = [(int(r), slot) for r, slot in sorted(ranks["slots"].items(), key=lambda kv: int(kv[0]))
            if slot["node"] in live]
    ranks["slots"] = {}
    for new, (old, slot) in enumerate(kept):
        if new >= ranks["size"]:
            notes.append(f"{slot['node']} loses rank {old}: maxNodes is {ranks['size']}")
            continue
        ranks["slots"][str(new)] = slot
        if new != old:
            notes.append(f"{slot['node']}: rank {old} -> {new}")


def first_host(live: dict[str, str]) -> str:
    """The first of the eligible nodes in name order, numbers compared as numbers
    (``kind-worker``, ``kind-worker2``, ..., ``kind-worker10``): the node that leads a new
    instance.

    >>> first_host({"w10": "a", "w2": "b", "w": "c"})
    'w'
    """
    def key(name: str) -> list[Any]:
        parts = re.split(r"(\d+)", name)
        return [(0, int(p)) if p.isdigit() else (1, p) for p in parts]
    return min(live, key=key)


class LeadRule:
    """Whether this node may take rank 0 of a new instance: the first host may at once;
    another node once it has waited 3 x settleSeconds (its first question starts the wait), so
    a first host whose installer pod cannot run never blocks the instance."""

    def __init__(self, me: str, settle_seconds: float) -> None:
        self.me = me
        self.patience = 3 * settle_seconds
        self.since: float | None = None

    def __call__(self, live: dict[str, str], now: float | None = None) -> bool:
        now = time.monotonic() if now is None else now
        if self.me in live and self.me == first_host(live):
            return True
        if self.since is None:
            self.since = now
        return now - self.since >= self.patience


def plan(current: dict[str, Any] | None, live: dict[str, str], me: str,
         shape: dict[str, str] | None, settings: dict[str, Any],
         notes: list[str] | None = None, *, may_lead: bool = True) -> dict[str, Any]:
    """The rank map after this node's pass: ``live`` are the eligible nodes (name -> address),
    ``shape`` this node's ``{"cores", "gpus"}`` once Flux is installed. Changes only what this
    pass is entitled to: epochs (the lead gone, new instance settings), this node's own slot.
    A new instance's rank 0 is taken only by a node that ``may_lead`` (:func:`first_host`, or
    any node once the first host has left it unclaimed too long); the others take ranks from 1.
    ``notes`` collects one line per change, for the log."""
    notes = [] if notes is None else notes
    ranks = copy.deepcopy(current) if current else new_map(settings)
    why = None
    # Only a pod of a newer DaemonSet template changes the instance's settings: during a rolling
    # update the old pods follow the map instead of turning it back.
    if settings["templateGeneration"] > ranks["templateGeneration"]:
        ranks["templateGeneration"] = settings["templateGeneration"]
        wanted = instance_settings(settings)
        changed = {k: wanted[k] for k in INSTANCE_KEYS if ranks[k] != wanted[k]}
        if changed:
            ranks.update(changed)
            why = "new settings " + json.dumps(changed, sort_keys=True)
    lead = ranks["slots"].get("0")
    if lead is not None and lead["node"] not in live:
        why = f"lead {lead['node']} is gone"
    if why is not None:
        _new_epoch(ranks, live, why, notes)
    slots = ranks["slots"]
    if "0" not in slots and me in live and may_lead:
        slots["0"] = {"node": me, "address": live[me], "shape": shape}
        notes.append(f"rank 0 is now {me}")
        if why is None:
            _new_epoch(ranks, live, "first lead", notes)
            slots = ranks["slots"]
    if "0" in slots and (lead is None or slots["0"]["node"] != lead["node"]):
        ranks["leadSince"] = ranks["epoch"]
    if me in live:
        mine = rank_of(ranks, me)
        if mine is None:
            free = [r for r in range(1, ranks["size"])
                    if str(r) not in slots or slots[str(r)]["node"] not in live]
            if free:
                mine = free[0]
                old = slots.get(str(mine))
                slots[str(mine)] = {"node": me, "address": live[me], "shape": shape}
                notes.append(f"{me} takes rank {mine}" + (f" (was {old['node']}'s)" if old
                                                          else ""))
        if mine is not None:
            slot = slots[str(mine)]
            if slot["address"] != live[me] or (shape is not None and slot["shape"] != shape):
                slot.update(address=live[me], shape=shape if shape is not None else slot["shape"])
                notes.append(f"rank {mine} ({me}) now at {slot['address']}, shape {slot['shape']}")
    return ranks


def lead_r(ranks: dict[str, Any], settings: dict[str, Any]) -> dict[str, Any]:
    """The epoch's R: every held rank with its node's shape, free ranks the spare shape."""
    lead_shape = (ranks["slots"].get("0") or {}).get("shape") or {"cores": "0", "gpus": ""}
    spare = dict(lead_shape)
    if settings["spareCores"]:
        spare["cores"] = fluxconf.idset_encode(range(settings["spareCores"]))
        spare["gpus"] = fluxconf.idset_encode(range(settings["spareGpus"]))
    slots = []
    for rank in range(ranks["size"]):
        shape = (ranks["slots"].get(str(rank)) or {}).get("shape") or spare
        slots.append((rank, f"{ranks['hostPrefix']}{rank}", shape["cores"], shape["gpus"]))
    return fluxconf.rv1(slots)


def shapes_known(ranks: dict[str, Any], live: dict[str, str]) -> bool:
    """Has every live node's slot reported its hardware? (The lead waits for this, up to
    settleSeconds, before fixing R.)"""
    return all(slot.get("shape") for slot in ranks["slots"].values() if slot["node"] in live)


def _address_url(address: str, port: int) -> str:
    return f"tcp://[{address}]:{port}" if ":" in address else f"tcp://{address}:{port}"


def connect_url(ranks: dict[str, Any], rank: int, port: int) -> str:
    slot = ranks["slots"].get(str(rank))
    return _address_url(slot["address"] if slot else UNHELD_ADDRESS, port)


def broker_identity(ranks: dict[str, Any], rank: int, settings: dict[str, Any],
                    public_key: str) -> dict[str, Any]:
    """What a running broker was started with; any change restarts it. ``brokerDigest`` covers
    what the broker runs (Flux's pins and prefix, flux-start.sh's flags), not the installer's
    other scripts, so most installer upgrades restart no broker."""
    parent = parent_rank(rank, ranks["topology"])
    ident = {"epoch": ranks["epoch"], "rank": rank,
             "parent": None if parent is None else connect_url(ranks, parent,
                                                               ranks["brokerPort"]),
             "curve": public_key, "broker": settings["brokerDigest"]}
    if rank == 0:
        ident["R"] = hashlib.sha256(json.dumps(ranks["R"], sort_keys=True).encode()).hexdigest()
    return ident


def bootstrap_toml(ranks: dict[str, Any], rank: int, settings: dict[str, Any],
                   identity: dict[str, Any]) -> str:
    """This broker's config: ``maxNodes`` hosts ``<prefix><rank>``, each held rank's connect
    address; the lead also points ``[resource] path`` at the epoch's R."""
    port = ranks["brokerPort"]
    hosts = [{"host": f"{ranks['hostPrefix']}{r}", "bind": f"tcp://*:{port}",
              "connect": connect_url(ranks, r, port)} for r in range(ranks["size"])]
    bootstrap: dict[str, Any] = {"curve_cert": f"{settings['etcDir']}/curve.cert"}
    if any(":" in slot["address"] for slot in ranks["slots"].values()):
        bootstrap["enable_ipv6"] = True  # else ZeroMQ binds IPv4 only
    bootstrap["hosts"] = hosts
    resource: dict[str, Any] = {}
    if rank == 0:
        resource["path"] = f"{settings['etcDir']}/R.json"
    # Brokers go by <prefix><rank>, not the node's own hostname: hostnames are not verified;
    # cores (and, as Flux does by default, not GPUs) are.
    resource["verify"] = {"default": "allow-extra", "gpu": "ignore", "hostname": "ignore"}
    doc: dict[str, Any] = {
        "bootstrap": bootstrap,
        "tbon": {"topo": ranks["topology"]},
        "access": {"allow-guest-user": True, "allow-root-owner": True},
        "resource": resource,
    }
    if settings.get("ledger"):
        # The lead's job-manager starts a job only once the ledger has its placeholder pods
        # admitted (flux_ledger.py); no timeout: the job waits as long as a pod holds its cores.
        doc["job-manager"] = {"plugins": [{"load": "perilog.so"}],
                              "prolog": {"command": [f"{settings['libDir']}/ledger-prolog.sh"],
                                         "timeout": "0"}}
    header = (f"Written by fluxinfra node-watch: rank {rank} of {ranks['size']}, epoch "
              f"{ranks['epoch']}.\nidentity: {json.dumps(identity, sort_keys=True)}")
    return fluxconf.dump_toml(doc, header=header)


# -- the Kubernetes API ----------------------------------------------------------------------------

class Conflict(Exception):
    """A write lost a compare-and-swap (HTTP 409): read again and retry."""


class Api:
    """The few Kubernetes API calls node-watch makes, with the pod's ServiceAccount."""

    def __init__(self, host: str | None = None, port: str | None = None,
                 sa_dir: str = SA_DIR) -> None:
        host = host or os.environ["KUBERNETES_SERVICE_HOST"]
        port = port or os.environ.get("KUBERNETES_SERVICE_PORT", "443")
        self.base = f"https://[{host}]:{port}" if ":" in host else f"https://{host}:{port}"
        self.sa_dir = sa_dir
        self.ctx = ssl.create_default_context(cafile=f"{sa_dir}/ca.crt")

    def request(self, method: str, path: str, timeout: float, body: Any = None) -> Any:
        with open(f"{self.sa_dir}/token") as f:  # re-read: projected tokens rotate
            token = f.read().strip()
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.base + path, data=data, method=method, headers={
            "Authorization": f"Bearer {token}", "Content-Type": "application/json",
            "Accept": "application/json"})
        return urllib.request.urlopen(req, context=self.ctx, timeout=timeout)

    def get(self, path: str, timeout: float) -> Any:
        return self.request("GET", path, timeout)

    def json(self, method: str, path: str, body: Any = None) -> Any:
        try:
            with self.request(method, path, 30, body) as resp:
                return json.load(resp)
        except urllib.error.HTTPError as exc:
            if exc.code == 409:
                raise Conflict(path) from None
            raise


class RankStore:
    """The rank map ConfigMap: read, and write only over the version read (409 otherwise)."""

    def __init__(self, api: Api, namespace: str, name: str) -> None:
        self.api, self.namespace, self.name = api, namespace, name
        self.path = f"/api/v1/namespaces/{namespace}/configmaps"

    def read(self) -> tuple[dict[str, Any] | None, str | None]:
        try:
            obj = self.api.json("GET", f"{self.path}/{self.name}")
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                return None, None
            raise
        return json.loads(obj.get("data", {}).get(MAP_KEY, "null")), \
            obj["metadata"]["resourceVersion"]

    def write(self, ranks: dict[str, Any], version: str | None) -> None:
        body: dict[str, Any] = {
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": self.name, "namespace": self.namespace,
                         "labels": {"app.kubernetes.io/part-of": "fluxinfra",
                                    "app.kubernetes.io/managed-by": "fluxinfra-node-watch"}},
            "data": {MAP_KEY: json.dumps(ranks, indent=1, sort_keys=True) + "\n"}}
        if version is None:
            self.api.json("POST", self.path, body)
        else:
            body["metadata"]["resourceVersion"] = version
            self.api.json("PUT", f"{self.path}/{self.name}", body)


def reconcile(store: RankStore, live: dict[str, str], me: str, shape: dict[str, str] | None,
              settings: dict[str, Any], write_r: Any = None, *, may_lead: bool = True
              ) -> dict[str, Any]:
    """Read the map, apply this node's :func:`plan` (and, if ``write_r(ranks)`` says so, the
    lead's R) and write it back; on a lost compare-and-swap read again. Returns the map."""
    while True:
        current, version = store.read()
        notes: list[str] = []
        ranks = plan(current, live, me, shape, settings, notes, may_lead=may_lead)
        if rank_of(ranks, me) == 0 and ranks["R"] is None and write_r is not None and \
                write_r(ranks):
            ranks["R"] = lead_r(ranks, settings)
            notes.append(f"epoch {ranks['epoch']}: R fixed for {ranks['size']} ranks")
        if ranks == current:
            return ranks
        try:
            store.write(ranks, version)
        except Conflict:
            continue
        for note in notes:
            log(note)
        return ranks


# -- the node ----------------------------------------------------------------------------------

def host_target(settings: dict[str, Any], proc: str = "/proc", node: str = "") -> str:
    """The PID whose namespaces are the node's: ``hostTarget`` as a number, or a process with
    that command name (the pod shares the host's PID namespace). Where several run (test beds
    with a kubelet each), the one whose command line names this node wins; then the oldest."""
    target = str(settings["hostTarget"])
    if target.isdigit():
        return target
    node = node or os.environ.get("NODE_NAME", "")
    found = []
    for pid in os.listdir(proc):
        if not pid.isdigit():
            continue
        try:
            with open(f"{proc}/{pid}/comm") as f:
                if f.read().strip() != target:
                    continue
            with open(f"{proc}/{pid}/cmdline", "rb") as f:
                args = f.read().split(b"\0")[1:]
        except OSError:
            continue
        mine = node.encode()
        names_node = bool(node) and any(a == mine or a.endswith(b"=" + mine) for a in args)
        found.append((not names_node, int(pid)))
    if not found:
        raise RuntimeError(f"installer.hostTarget {target!r}: no such process on this node")
    return str(min(found)[1])


def on_host(settings: dict[str, Any], argv: list[str]) -> list[str]:
    """``argv`` run in the node's namespaces (mount, UTS, IPC, network, PID)."""
    return ["nsenter", "-t", host_target(settings), "-m", "-u", "-i", "-n", "-p", "--", *argv]


def flux_start(settings: dict[str, Any], action: str) -> None:
    """Run flux-start.sh on the node."""
    subprocess.run(on_host(settings, [f"{settings['libDir']}/flux-start.sh", action]),
                   check=True)


def install(settings: dict[str, Any]) -> None:
    """flux-install.sh on the node, outside this pod's cgroup, its output in the pod log."""
    lib = settings["libDir"]
    argv = on_host(settings, [f"{lib}/fluxinfra-host.sh", "run", "fluxinfra-install",
                              str(settings["installMemoryBytes"]),
                              str(settings["installTimeoutSeconds"]), f"{lib}/flux-install.sh"])
    tail: list[str] = []
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          bufsize=1) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            print(line, end="", file=sys.stderr, flush=True)
            tail = (tail + [line.rstrip()])[-5:]
    subprocess.run(on_host(settings, [f"{lib}/fluxinfra-host.sh", "remove",
                                      "fluxinfra-install"]), check=False)
    if proc.returncode != 0:
        raise InstallFailed(f"flux-install.sh exited {proc.returncode}: " + " | ".join(tail))


class InstallFailed(Exception):
    """The install did not finish; the node is as it was (see flux-install.sh)."""


def local_shape(settings: dict[str, Any]) -> dict[str, str]:
    """This node's cores and GPUs as Flux sees them (``flux R encode --local``)."""
    out = subprocess.run(on_host(settings, [f"{settings['prefix']}/bin/flux", "R", "encode",
                                            "--local"]),
                         check=True, capture_output=True, text=True).stdout
    (_, _, cores, gpus), = fluxconf.rv1_slots(json.loads(out))
    return {"cores": cores, "gpus": gpus}


def heartbeat() -> None:
    with open(HEARTBEAT, "a"):
        os.utime(HEARTBEAT)


def _write(path: str, text: str) -> None:
    with open(path + ".tmp", "w") as f:
        f.write(text)
    os.replace(path + ".tmp", path)


def _read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read()
    except FileNotFoundError:
        return None


def sync_broker(ranks: dict[str, Any], me: str, settings: dict[str, Any], root: str = "/host",
                start: Any = flux_start, public_key: str = "") -> str:
    """Make this node's broker match the map: write its config (and the lead's R); restart it
    when its identity changed, else start it if it is not running. Returns what it did:
    "restarted", "ensured", "waiting" (the lead's R is not fixed yet) or "no-rank"."""
    rank = rank_of(ranks, me)
    if rank is None:
        return "no-rank"
    if rank == 0 and ranks["R"] is None:
        return "waiting"
    etc = f"{root}{settings['etcDir']}"
    identity = broker_identity(ranks, rank, settings, public_key)
    if rank == 0:
        _write(f"{etc}/R.json", json.dumps(ranks["R"], indent=1) + "\n")
    env = (f"BROKER_HOSTNAME={ranks['hostPrefix']}{rank}\n"
           f"LEAD_EPOCH={ranks['leadSince'] if rank == 0 else ''}\n")
    _write(f"{etc}/broker.env", env)
    _write(f"{etc}/conf.d/bootstrap.toml", bootstrap_toml(ranks, rank, settings, identity))
    started = json.dumps(identity, sort_keys=True)
    if _read(f"{etc}/broker.identity") == started:
        start(settings, "ensure")
        return "ensured"
    log(f"{me}: rank {rank} of {ranks['size']}, epoch {ranks['epoch']}: (re)starting the broker")
    start(settings, "restart")
    _write(f"{etc}/broker.identity", started)
    return "restarted"


def pre_stop(settings: dict[str, Any], api: Api, me: str, namespace: str,
             start: Any = flux_start) -> str:
    """The pod is stopping. Stop the broker only if the node leaves the instance (no longer
    eligible) or the installer itself is going (its DaemonSet deleted); a rolling update or a
    pod restart leaves the broker running, so jobs on it survive."""
    reason = ""
    try:
        node = api.json("GET", f"/api/v1/nodes/{me}")
        if not eligible(node, settings["nodeSelector"], settings["tolerations"]):
            reason = "this node no longer gets a broker"
        ds = api.json("GET", f"/apis/apps/v1/namespaces/{namespace}/daemonsets/"
                             f"{settings['daemonSet']}")
        if ds["metadata"].get("deletionTimestamp"):
            reason = "the installer is being removed"
    except urllib.error.HTTPError as exc:
        reason = "the installer is being removed" if exc.code == 404 else f"API error {exc.code}"
    except (OSError, ValueError) as exc:
        reason = f"API unreachable ({exc})"
    if reason:
        log(f"stopping the broker: {reason}")
        start(settings, "stop")
        return "stopped"
    log("pod stopping, node stays in the instance: broker left running")
    return "kept"


def _heartbeat_while(done: threading.Event) -> None:
    while not done.wait(30):
        heartbeat()


def prepare(settings: dict[str, Any], install_fn: Any = install,
            shape_fn: Any = local_shape) -> dict[str, str]:
    """Install Flux on the node (heartbeat kept fresh meanwhile) and read its shape; an install
    that fails writes the reason to the termination log and exits the pod."""
    heartbeat()
    done = threading.Event()
    beat = threading.Thread(target=_heartbeat_while, args=(done,), daemon=True)
    beat.start()
    try:
        install_fn(settings)
        shape = shape_fn(settings)
    except (InstallFailed, subprocess.CalledProcessError, OSError, ValueError,
            RuntimeError) as exc:
        message = f"{type(exc).__name__}: {exc}"
        log(f"install failed, the node is left as it was: {message}")
        with contextlib.suppress(OSError):
            _write(TERMINATION_LOG, message[-2000:] + "\n")
        raise SystemExit(1) from None
    finally:
        done.set()
    log(f"Flux installed; this node has cores {shape['cores']}"
        + (f", GPUs {shape['gpus']}" if shape["gpus"] else ""))
    return shape


def run(settings: dict[str, Any], api: Api | None = None, me: str | None = None,
        root: str = "/host", start: Any = flux_start, namespace: str | None = None,
        shape: dict[str, str] | None = None, prepare_fn: Any = prepare) -> None:
    """Claim a rank, install, then list-and-watch Nodes forever, keeping the map and the
    broker in step (the parameters are for tests)."""
    api = api or Api()
    me = me or os.environ["NODE_NAME"]
    namespace = namespace or _read(f"{SA_DIR}/namespace") or "default"
    store = RankStore(api, namespace, settings["rankMap"])
    public_key = curve_public_key(f"{settings['keysDir']}/curve.cert")
    members = Membership(settings)
    backoff, r_wait_start = 1.0, None
    may_lead = LeadRule(me, settings["settleSeconds"])
    while True:
        try:
            listing = json.load(api.get("/api/v1/nodes", timeout=30))
            members.relist(listing["items"])
            version = listing["metadata"]["resourceVersion"]
            if shape is None:
                # Claim a rank first (so nodes starting together keep their order), install.
                live = members.eligible()
                reconcile(store, live, me, None, settings, may_lead=bool(live) and may_lead(live))
                shape = prepare_fn(settings)
            dirty, changed_at = True, 0.0
            while True:
                heartbeat()
                live = members.eligible()
                if dirty and time.monotonic() - changed_at >= settings["settleSeconds"]:
                    if me not in live:
                        log(f"this node ({me}) does not get a broker (selector, taints)")
                        dirty = False
                    else:
                        # The lead fixes R once every live node reported its hardware, or
                        # settleSeconds after it first could (late nodes get the spare shape).
                        since = r_wait_start or time.monotonic()
                        ranks = reconcile(store, live, me, shape, settings,
                                          lambda ranks, live=live, since=since: (
                                              shapes_known(ranks, live) or time.monotonic()
                                              - since >= settings["settleSeconds"]),
                                          may_lead=may_lead(live))
                        did = sync_broker(ranks, me, settings, root=root, start=start,
                                          public_key=public_key)
                        if did == "no-rank":
                            log(f"no free rank for {me}: all {ranks['size']} are held by "
                                "live nodes; raise installer.maxNodes")
                        dirty = did == "waiting"
                        r_wait_start = since if dirty else None
                # A short watch window while something is pending, a long one otherwise (the
                # map is re-read at least this often: other nodes' joins change it too).
                window = 5 if dirty else settings["resyncSeconds"]
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
                dirty = True  # every window: re-read the map, ensure the broker runs
                backoff = 1.0
        except urllib.error.HTTPError as exc:
            if exc.code == 410:  # resourceVersion too old: relist
                continue
            log(f"API error {exc.code}: {exc.reason}; retrying in {backoff:.0f}s")
        except (OSError, ValueError, KeyError, subprocess.CalledProcessError,
                RuntimeError) as exc:
            log(f"{type(exc).__name__}: {exc}; retrying in {backoff:.0f}s")
        heartbeat()  # an unreachable API server is not a reason to restart this pod
        time.sleep(backoff)
        backoff = min(backoff * 2, 60.0)


def curve_public_key(cert_path: str) -> str:
    """The public key of the CURVE certificate (public, so fine to record)."""
    with open(cert_path) as f:
        for line in f:
            key, _, value = line.strip().partition("=")
            if key.strip() == "public-key":
                return value.strip().strip('"')
    raise ValueError(f"{cert_path}: no public-key")


def main(argv: list[str]) -> None:
    stop = argv[:1] == ["--pre-stop"]
    with open(argv[-1]) as cfg:
        settings = json.load(cfg)
    generation = os.environ.get("TEMPLATE_GENERATION", "")
    settings["templateGeneration"] = int(generation) if generation.isdigit() else 0
    if stop:
        pre_stop(settings, Api(), os.environ["NODE_NAME"],
                 _read(f"{SA_DIR}/namespace") or "default")
    else:
        run(settings)


if __name__ == "__main__":
    main(sys.argv[1:])
