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
import sys
import time
from pathlib import Path
from typing import Any

from . import hollow
from .control_plane import ControlPlane, make_pki
from .images import normalize_ref
from .layout import Layout, allocate, bed_records, find_binary, registry_root, release
from .node import Node, node_teardown
from .procs import CommandError, Proc, launch, run
from .rest import Rest

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
    def has_node(self) -> bool:
        return "kubelet" in self.record.get("procs", {})

    @property
    def node_name(self) -> str | None:
        return self.layout.node_name if self.has_node else None

    @property
    def audit_log(self) -> Path:
        """The API server's audit log: every request made by a ServiceAccount outside
        kube-system, one JSON event per line (``user``, ``verb``, ``objectRef``,
        ``responseStatus``)."""
        return self.state / "logs" / "audit.log"

    def rest(self) -> Rest:
        p = self.pki
        return Rest(self.layout.server, p["ca"], p["admin"], p["admin_key"])

    def ctr(self, *args: str) -> list[str]:
        """argv of ``ctr`` against this bed's containerd (namespace ``k8s.io``)."""
        if not self.has_node:
            raise BedError(f"bed {self.layout.name} has no real node (started with --no-node)")
        return Node(self.layout, self.pki, self._made).ctr(*args)

    def import_image(self, tar: Path, *, tags: dict[str, str] | None = None) -> None:
        """Load a docker-archive or OCI tar into the node's containerd; ``tags`` maps an
        imported name to another name for it (e.g. the short name a manifest uses)."""
        run(self.ctr("images", "import", str(tar)), timeout=900)
        for source, target in (tags or {}).items():
            self.tag_image(source, target)

    def tag_image(self, source: str, *targets: str) -> None:
        """Give an image in the node's containerd more names; short names are completed the
        way the kubelet does (``x:1`` is ``docker.io/library/x:1``)."""
        for target in targets:
            if normalize_ref(target) != normalize_ref(source):
                run(self.ctr("images", "tag", "--force", normalize_ref(source),
                             normalize_ref(target)))

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
                "node": self.node_name, "timings": self.record.get("timings", {})}

    # -- up ----------------------------------------------------------------------------------
    @classmethod
    def up(cls, name: str, *, real_node: bool = True, scheduler: bool = True,
           node_monitor_grace: int = 40, state_dir: Path | None = None,
           hollow_nodes: list[dict[str, Any]] | None = None, log=lambda msg: None) -> Bed:
        """Start a bed; on any failure everything already started is taken down again."""
        preflight(real_node=real_node)
        t0 = time.monotonic()
        layout = allocate(name, state_dir)
        bed = cls(layout, {"made": {}, "procs": {}, "grace": node_monitor_grace,
                           "options": {"real_node": real_node, "scheduler": scheduler},
                           "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())})
        bed.save()
        try:
            bed._start(t0, real_node=real_node, scheduler=scheduler, log=log)
            if hollow_nodes:
                bed.add_hollow_nodes(hollow_nodes)
        except BaseException:
            log("start failed; taking the bed down again")
            with contextlib.suppress(Exception):
                bed.down(keep_logs=os.environ.get("FLUXINFRA_KUBE_KEEP_LOGS"))
            raise
        return bed

    def _start(self, t0: float, *, real_node: bool, scheduler: bool, log) -> None:
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
        self._proc(launch("hollow-keeper", [sys.executable, "-m", "kubebed.hollow",
                                            str(lay.state)],
                          lay.state / "logs", cwd=SCRIPTS))
        cp.wait_for_default_service_account()
        mark("control_plane")
        if real_node:
            rest = self.rest()
            node = Node(lay, self.pki, self._made)
            node.start(self._proc, rest)
            rest.close()
            mark("node_ready")

    # -- down --------------------------------------------------------------------------------
    def down(self, *, keep_logs: str | None = None) -> None:
        """Stop everything, undo every host change, forget the slot. Raises BedError naming
        what could not be removed (the bed then stays registered, so ``down`` can be rerun)."""
        procs = self.procs()
        made = self.record.get("made", {})
        problems: list[str] = []
        if "hollow-keeper" in procs:
            procs["hollow-keeper"].stop(timeout=5)
        try:
            problems += node_teardown(self.layout, procs, made)
        except CommandError as err:
            problems.append(str(err))
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
