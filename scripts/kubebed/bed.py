"""One bed: bring it up, describe it, take it down.

Everything a bed starts or makes is written to ``<state>/bed.json`` *before* it is made, so
``down`` undoes exactly that, also after a crash half-way through ``up`` and also from another
process (``scripts/kube down`` for a bed a test session left behind).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import sys
import time
from pathlib import Path
from typing import Any

from . import hollow
from .control_plane import ControlPlane, make_pki
from .images import normalize_ref, pause_image
from .layout import (
    MAX_NODES,
    Layout,
    NodeSpec,
    allocate,
    bed_records,
    find_binary,
    registry_root,
    release,
    require_binary,
)
from .node import Node, node_teardown, remove_cgroup, wait_all_ready
from .procs import CommandError, Proc, launch, run, wait_until
from .rest import ApiStatus, Rest
from .services import host_rules

__all__ = ["Bed", "BedError"]

SCRIPTS = Path(__file__).resolve().parents[1]


class BedError(Exception):
    """A bed could not be brought up or taken down; the message says what to do."""


class Bed:
    """A running (or half-started) bed, backed by its ``bed.json``."""

    def __init__(self, layout: Layout, record: dict[str, Any]) -> None:
        self.layout = layout
        self.record = record

    # -- persistence -------------------------------------------------------------------------
    @property
    def state(self) -> Path:
        return self.layout.state

    def save(self) -> None:
        self.record["layout"] = self.layout.to_json()
        tmp = self.state / "bed.json.tmp"
        tmp.write_text(json.dumps(self.record, indent=1))
        tmp.replace(self.state / "bed.json")

    @classmethod
    def load(cls, name: str) -> Bed:
        for rec in bed_records():
            if rec.get("name") == name:
                path = Path(str(rec["state_dir"])) / "bed.json"
                try:
                    record = json.loads(path.read_text())
                except (OSError, ValueError):
                    # Registered but never written (a crash right after allocation).
                    record = {"made": {}, "procs": {},
                              "layout": Layout.for_slot(name, int(rec["slot"]),
                                                        Path(str(rec["state_dir"]))).to_json()}
                return cls(Layout(**record["layout"]), record)
        raise BedError(f"no bed named {name!r} (scripts/kube status lists them)")

    def _made(self, key: str, value: object = True) -> None:
        self.record.setdefault("made", {})[key] = value
        self.save()

    def _proc(self, proc: Proc) -> Proc:
        self.record.setdefault("procs", {})[proc.name] = proc.to_json()
        self.save()
        return proc

    def procs(self) -> dict[str, Proc]:
        return {name: Proc(**p) for name, p in self.record.get("procs", {}).items()}

    # -- what tests and the CLI use ----------------------------------------------------------
    @property
    def kubeconfig(self) -> Path:
        return Path(self.record["pki"]["admin_kubeconfig"])

    @property
    def pki(self) -> dict[str, str]:
        return self.record["pki"]

    @property
    def node_specs(self) -> list[NodeSpec]:
        """The real nodes, in the order they joined (the first is the bed's first node)."""
        specs = [NodeSpec(**n["spec"]) for n in self.record.get("nodes", {}).values()]
        return sorted(specs, key=lambda n: n.index)

    @property
    def node_names(self) -> list[str]:
        return [n.name for n in self.node_specs]

    @property
    def has_node(self) -> bool:
        return bool(self.record.get("nodes"))

    @property
    def node_name(self) -> str | None:
        """The first real node (where single-node tests put their pods), or None."""
        names = self.node_names
        return names[0] if names else None

    def node(self, name: str | None = None) -> Node:
        """The running node ``name`` (default: the first), to enter or to import into."""
        specs = {n.name: n for n in self.node_specs}
        if not specs:
            raise BedError(f"bed {self.layout.name} has no real node (started with --no-node)")
        spec = specs.get(name or self.node_name)
        if spec is None:
            raise BedError(f"bed {self.layout.name} has no node {name!r}; its nodes: "
                           f"{', '.join(specs)}")
        node = Node(self.layout, spec, self.pki, lambda key: None, lambda proc: None)
        node.init = self.procs().get(f"{spec.name}/init")
        return node

    @property
    def audit_log(self) -> Path:
        """The API server's audit log: every request made by a ServiceAccount outside
        kube-system, one JSON event per line (``user``, ``verb``, ``objectRef``,
        ``responseStatus``)."""
        return self.state / "logs" / "audit.log"

    def rest(self) -> Rest:
        p = self.pki
        return Rest(self.layout.server, p["ca"], p["admin"], p["admin_key"])

    def ctr(self, *args: str, node: str | None = None) -> list[str]:
        """argv of ``ctr`` against a node's containerd (namespace ``k8s.io``; default: the
        first node)."""
        return self.node(node).ctr(*args)

    def import_image(self, tar: Path, *, tags: dict[str, str] | None = None) -> None:
        """Load a docker-archive or OCI tar into every node's containerd (a node that joins
        later gets a copy of the first node's images); ``tags`` maps an imported name to
        another name for it (e.g. the short name a manifest uses)."""
        for name in self.node_names:
            run(self.ctr("images", "import", str(tar), node=name), timeout=900)
        for source, target in (tags or {}).items():
            self.tag_image(source, target)

    def tag_image(self, source: str, *targets: str) -> None:
        """Give an image in every node's containerd more names; short names are completed the
        way the kubelet does (``x:1`` is ``docker.io/library/x:1``)."""
        for name in self.node_names:
            for target in targets:
                if normalize_ref(target) != normalize_ref(source):
                    run(self.ctr("images", "tag", "--force", normalize_ref(source),
                                 normalize_ref(target), node=name))

    def exec_on(self, node: str, argv: list[str], *, timeout: float = 120,
                check: bool = True):
        """Run ``argv`` on a node as its own processes do (its namespaces and cgroup)."""
        return run(self.node(node).enter(argv), timeout=timeout, check=check)

    # -- nodes joining and leaving -----------------------------------------------------------
    def add_node(self, *, log=lambda msg: None) -> str:
        """Start one more real node (the lowest free index) and wait until it is Ready, with
        the images every other node was given; returns its name."""
        used = {n.index for n in self.node_specs}
        free = [i for i in range(MAX_NODES) if i not in used]
        if not free:
            raise BedError(f"bed {self.layout.name}: {MAX_NODES} nodes already")
        node = self._start_nodes([free[0]], log=log)[0]
        rest = self.rest()
        try:
            wait_all_ready([node], rest)
        finally:
            rest.close()
        return node.spec.name

    def remove_node(self, name: str, *, drain: bool = True, delete: bool = True,
                    log=lambda msg: None) -> None:
        """Take a node away as an operator would: cordon and drain it (its pods deleted, not
        DaemonSet pods, which go with the kubelet), stop its kubelet and everything on it,
        then delete the Node object."""
        spec = next((n for n in self.node_specs if n.name == name), None)
        if spec is None:
            raise BedError(f"bed {self.layout.name} has no node {name!r}; its nodes: "
                           f"{', '.join(self.node_names)}")
        rest = self.rest()
        try:
            if drain:
                _drain(rest, name, log)
            procs = self.procs()
            entry = self.record["nodes"][name]
            problems = node_teardown(self.layout, spec, procs, entry.get("made", {}))
            if problems:
                raise BedError(f"node {name}: teardown left: " + "; ".join(problems))
            for key in [k for k in self.record.get("procs", {}) if k.startswith(f"{name}/")]:
                del self.record["procs"][key]
            del self.record["nodes"][name]
            self.save()
            if delete:
                with contextlib.suppress(ApiStatus):
                    rest.delete(f"/api/v1/nodes/{name}")
        finally:
            rest.close()
        shutil.rmtree(spec.state, ignore_errors=True)
        log(f"node {name} removed")

    def stop_kubelet(self, name: str) -> None:
        """Stop the kubelet of node ``name`` and leave everything else on it running (its
        containers, containerd, its network): what the control plane sees when a kubelet
        crashes or hangs. The node turns NotReady after the node-monitor grace period."""
        procs = self.procs()
        key = f"{name}/kubelet"
        if key not in procs:
            raise BedError(f"bed {self.layout.name} has no kubelet on {name!r}; its nodes: "
                           f"{', '.join(self.node_names)}")
        for proc in (procs[key], procs.get(f"{name}/kubelet-nsenter")):
            if proc is not None:
                proc.stop()

    def start_kubelet(self, name: str) -> None:
        """Start the kubelet of node ``name`` again (after :meth:`stop_kubelet`); the caller
        waits for the node to be Ready."""
        node = self.node(name)
        if node.init is None or not node.init.alive():
            raise BedError(f"node {name}: its init is not running; remove-node and add-node "
                           "make a new node")
        node.started = self._proc
        node.start_kubelet()

    # -- control-plane faults ----------------------------------------------------------------
    def restart(self, name: str, *, sig: int = signal.SIGKILL) -> float:
        """Stop control-plane process ``name`` (etcd, kube-apiserver, kube-controller-manager,
        kube-scheduler) with ``sig`` (default SIGKILL: a crash, nothing flushed) and start it
        again with the same flags, certificates and data; returns the seconds from the signal
        until it answers again (etcd ``/health``, the API server ``/readyz``)."""
        starters = {"etcd": "start_etcd", "kube-apiserver": "start_apiserver",
                    "kube-controller-manager": "start_controller_manager",
                    "kube-scheduler": "start_scheduler"}
        proc = self.procs().get(name)
        if name not in starters or proc is None:
            raise BedError(f"bed {self.layout.name}: no control-plane process {name!r}; it "
                           f"runs {', '.join(n for n in starters if n in self.procs())}")
        began = time.monotonic()
        proc.signal(sig)
        if not wait_until(lambda: not proc.alive(), 15):
            proc.stop(timeout=5)
        # the port can outlive the killed process by a moment (the new server then fails to
        # bind): wait for it, and start again if it was still taken, as a supervisor would
        port = self.layout.ports[name.removeprefix("kube-").replace("-", "_")]
        wait_until(lambda: all(_port_free(a, port) for a in (self.layout.node_ip,
                                                             "127.0.0.1")), 15)
        cp = ControlPlane(self.layout, self.pki, node_monitor_grace=self.record["grace"])
        for attempt in range(5):
            try:
                self._proc(getattr(cp, starters[name])())
                break
            except CommandError as err:
                if "address already in use" not in str(err) or attempt == 4:
                    raise
                time.sleep(1)
        return time.monotonic() - began

    def add_hollow_nodes(self, nodes: list[dict[str, Any]]) -> list[str]:
        """Create hollow nodes (from :func:`kubebed.hollow.node_object`) the keeper keeps
        Ready."""
        rest = self.rest()
        try:
            return hollow.add(rest, self.state, nodes, grace=self.record["grace"])
        finally:
            rest.close()

    def remove_hollow_nodes(self, names: list[str], *, delete: bool = True) -> None:
        rest = self.rest()
        try:
            hollow.remove(rest, self.state, names, delete=delete)
        finally:
            rest.close()

    def status(self) -> dict[str, Any]:
        procs = self.procs()
        return {"name": self.layout.name, "slot": self.layout.slot,
                "server": self.layout.server, "kubeconfig": str(self.kubeconfig)
                if "pki" in self.record else None,
                "processes": {n: ("running" if p.alive() else "gone") for n, p in procs.items()},
                "node": self.node_name, "nodes": self.node_names,
                "timings": self.record.get("timings", {})}

    # -- up ----------------------------------------------------------------------------------
    @classmethod
    def up(cls, name: str, *, real_node: bool = True, scheduler: bool = True,
           node_monitor_grace: int = 40, state_dir: Path | None = None,
           hollow_nodes: list[dict[str, Any]] | None = None, nodes: int | None = None,
           hollow_kubelet: bool = True, log=lambda msg: None) -> Bed:
        """Start a bed with ``nodes`` real nodes (default 1, or 0 when ``real_node`` is
        false); on any failure everything already started is taken down again. Without
        ``hollow_kubelet`` the keeper only renews the hollow nodes' Leases: pods bound to
        them stay Pending (:mod:`kubebed.hollow`)."""
        count = (1 if real_node else 0) if nodes is None else nodes
        if not 0 <= count <= MAX_NODES:
            raise BedError(f"nodes {count}: a bed has 0..{MAX_NODES} real nodes")
        preflight(real_node=count > 0)
        t0 = time.monotonic()
        layout = allocate(name, state_dir)
        bed = cls(layout, {"made": {}, "procs": {}, "nodes": {}, "grace": node_monitor_grace,
                           "options": {"nodes": count, "scheduler": scheduler,
                                       "hollow_kubelet": hollow_kubelet},
                           "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())})
        bed.save()
        try:
            bed._start(t0, nodes=count, scheduler=scheduler, hollow_kubelet=hollow_kubelet, log=log)
            if hollow_nodes:
                bed.add_hollow_nodes(hollow_nodes)
        except BaseException:
            log("start failed; taking the bed down again")
            with contextlib.suppress(Exception):
                bed.down(keep_logs=os.environ.get("FLUXINFRA_KUBE_KEEP_LOGS"))
            raise
        return bed

    def _start(self, t0: float, *, nodes: int, scheduler: bool, hollow_kubelet: bool,
               log) -> None:
        lay = self.layout
        timings: dict[str, float] = {}
        self.record["timings"] = timings

        def mark(what: str) -> None:
            timings[what] = round(time.monotonic() - t0, 2)
            self.save()
            log(f"{what}: {timings[what]:.1f}s")

        self.record["pki"] = make_pki(lay)
        self._made("address")
        run(["ip", "addr", "add", f"{lay.node_ip}/32", "dev", "lo"])
        self._made("etcd_dir")
        cp = ControlPlane(lay, self.pki, node_monitor_grace=self.record["grace"])
        self._proc(cp.start_etcd())
        mark("etcd")
        self._proc(cp.start_apiserver())
        mark("apiserver")
        self._proc(cp.start_controller_manager())
        mark("controller_manager")
        if scheduler:
            self._proc(cp.start_scheduler())
            mark("scheduler")
        leases_only = [] if hollow_kubelet else ["--leases-only"]
        self._proc(launch("hollow-keeper", [sys.executable, "-m", "kubebed.hollow",
                                            str(lay.state), *leases_only],
                          lay.state / "logs", cwd=SCRIPTS))
        cp.wait_for_default_service_account()
        mark("control_plane")
        if nodes:
            self._make_node_network()
            started = self._start_nodes(list(range(nodes)), log=log)
            mark("nodes_started")
            rest = self.rest()
            try:
                wait_all_ready(started, rest)
            finally:
                rest.close()
            mark("nodes_ready")

    def _make_node_network(self) -> None:
        """The machine's side of the node network: the bridge every node's ``eth0`` joins, its
        address (cluster DNS answers there), forwarding on that bridge only, and the bed's nft
        table that keeps the nodes' traffic on it; then the services process."""
        lay = self.layout
        self._made("lan_bridge")
        run(["ip", "link", "add", lay.lan_bridge, "type", "bridge"])
        run(["ip", "addr", "add", f"{lay.lan_gateway}/{lay.lan_cidr.split('/')[1]}", "dev",
             lay.lan_bridge])
        run(["ip", "link", "set", lay.lan_bridge, "up"])
        self._made("nft_table")
        run([require_binary("nft"), "-f", "-"], input_text=host_rules(lay))
        Path(f"/proc/sys/net/ipv4/conf/{lay.lan_bridge}/forwarding").write_text("1\n")
        proc = self._proc(launch("services", [sys.executable, "-m", "kubebed.services",
                                              str(lay.state)], lay.state / "logs", cwd=SCRIPTS))
        if not wait_until(lambda: (lay.state / "services.ready").exists()
                          or not proc.alive(), 15) or not proc.alive():
            raise CommandError(f"the services process did not come up:\n{proc.log_tail()}")

    def _start_nodes(self, indexes: list[int], *, log) -> list[Node]:
        """Start nodes ``indexes`` one after another (each is recorded before anything of it
        is made), each given the pause image and the images imported so far."""
        lay = self.layout
        if not self.record.get("made", {}).get("lan_bridge"):
            self._make_node_network()
        pause = lay.state / "images" / "pause.tar"
        if not pause.exists():
            pause = pause_image(lay.state / "images")
        started = []
        running = [n for n in self.node_specs if n.index not in indexes]
        for index in indexes:
            spec = lay.node(index)
            entry = self.record.setdefault("nodes", {}).setdefault(
                spec.name, {"spec": spec.to_json(), "made": {}})

            def made(key: str, entry=entry) -> None:
                entry["made"][key] = True
                self.save()
            node = Node(lay, spec, self.pki, made, self._proc)
            self.save()
            node.start(pause)
            if running:
                self._copy_images(self.node(running[0].name), node)
            log(f"node {spec.name} started ({spec.ip}, pods {spec.pod_cidr})")
            started.append(node)
        return started

    # -- down --------------------------------------------------------------------------------
    def down(self, *, keep_logs: str | None = None) -> None:
        """Stop everything, undo every host change, forget the slot. Raises BedError naming
        what could not be removed (the bed then stays registered, so ``down`` can be rerun)."""
        procs = self.procs()
        made = self.record.get("made", {})
        problems: list[str] = []
        if "hollow-keeper" in procs:
            procs["hollow-keeper"].stop(timeout=5)
        if "services" in procs:
            procs["services"].stop(timeout=10)
        for spec in self.node_specs:
            try:
                problems += node_teardown(self.layout, spec, procs,
                                          self.record["nodes"][spec.name].get("made", {}))
            except CommandError as err:
                problems.append(str(err))
        problems += self._remove_node_network(made)
        for name in ("kube-scheduler", "kube-controller-manager", "kube-apiserver", "etcd"):
            if name in procs:
                try:
                    procs[name].stop(timeout=15)
                except CommandError as err:
                    problems.append(str(err))
        if made.get("etcd_dir"):
            shutil.rmtree(self.layout.etcd_dir, ignore_errors=True)
        if made.get("address"):
            addr = f"{self.layout.node_ip}/32"
            shown = run(["ip", "-o", "addr", "show", "dev", "lo"], check=False).stdout
            if f" {addr} " in shown:
                run(["ip", "addr", "del", addr, "dev", "lo"], check=False)
        if problems:
            raise BedError(f"bed {self.layout.name}: teardown left: " + "; ".join(problems)
                           + f" (state kept in {self.state}; fix and rerun scripts/kube down "
                           f"--name {self.layout.name})")
        if keep_logs:
            dest = Path(keep_logs) / self.layout.name
            shutil.copytree(self.state / "logs", dest, dirs_exist_ok=True)
        shutil.rmtree(self.state, ignore_errors=True)
        release(self.layout)


    def _copy_images(self, source: Node, target: Node) -> None:
        """Every image of ``source``'s containerd, with all its names, into ``target``'s (what
        an operator's node image or a registry would give a new node)."""
        refs = run(source.ctr("images", "ls", "-q")).stdout.split()
        if not refs:
            return
        tar = self.layout.state / "images" / f"to-{target.spec.name}.tar"
        tar.parent.mkdir(parents=True, exist_ok=True)
        try:
            run(source.ctr("images", "export", str(tar), *refs), timeout=900)
            target.import_image(tar)
        finally:
            tar.unlink(missing_ok=True)

    def _remove_node_network(self, made: dict[str, Any]) -> list[str]:
        lay, problems = self.layout, []
        if made.get("nft_table"):
            nft = find_binary("nft")
            if nft and run([nft, "list", "table", "ip", lay.nft_table],
                           check=False).returncode == 0:
                run([nft, "delete", "table", "ip", lay.nft_table], check=False)
        if made.get("lan_bridge") and Path(f"/sys/class/net/{lay.lan_bridge}").exists():
            for port in Path(f"/sys/class/net/{lay.lan_bridge}/brif").iterdir():
                run(["ip", "link", "del", port.name], check=False)
            run(["ip", "link", "del", lay.lan_bridge], check=False)
            if Path(f"/sys/class/net/{lay.lan_bridge}").exists():
                problems.append(f"link {lay.lan_bridge} remains")
        if self.record.get("nodes") is not None:
            problems += [f"cgroup {p} remains" for p in remove_cgroup(lay.cgroup_root)]
        return problems


def _drain(rest: Rest, name: str, log) -> None:
    """``kubectl drain --ignore-daemonsets --delete-emptydir-data --force``, in short: cordon,
    delete every pod on the node but DaemonSet pods, wait until they are gone."""
    rest.patch(f"/api/v1/nodes/{name}", {"spec": {"unschedulable": True}})

    def remaining() -> list[dict[str, Any]]:
        pods = rest.get(f"/api/v1/pods?fieldSelector=spec.nodeName%3D{name}")["items"]
        return [p for p in pods if not any(o.get("kind") == "DaemonSet" for o in
                                           p["metadata"].get("ownerReferences") or [])]
    for pod in remaining():
        meta = pod["metadata"]
        with contextlib.suppress(ApiStatus):
            rest.delete(f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}")
    if not wait_until(lambda: not remaining(), 120):
        log(f"drain {name}: pods still there after 120s: "
            f"{[p['metadata']['name'] for p in remaining()]}")


def preflight(*, real_node: bool) -> None:
    """Refuse early, with what to install, instead of failing half-way."""
    if os.geteuid() != 0:
        raise BedError("the bed needs root (addresses on lo, cgroups, mount namespaces)")
    missing = [b for b in ("etcd", "kube-apiserver", "kube-controller-manager",
                           "kube-scheduler") if find_binary(b) is None]
    if real_node:
        missing += [b for b in ("kubelet", "containerd", "runc", "ctr", "nft", "gcc",
                                "unshare", "nsenter", "ip") if find_binary(b) is None]
    if missing:
        raise BedError(f"missing {', '.join(missing)}: put the Kubernetes v1.28 binaries in "
                       "$FLUXINFRA_KUBE_BIN (or on PATH) and run `scripts/kube deps` for the "
                       "Debian packages")


def all_beds() -> list[str]:
    return [str(r["name"]) for r in bed_records()]


__all__ += ["all_beds", "preflight", "registry_root"]


def _port_free(address: str, port: int) -> bool:
    """Whether a server could listen on ``address:port`` now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((address, port))
        except OSError:
            return False
    return True
