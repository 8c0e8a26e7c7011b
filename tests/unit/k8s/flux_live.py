"""Real Flux instances from fluxinfra's generated configs, on real network hosts of this machine
(``netns_hosts``): a MiniCluster's pods, or the installer's nodes, each a network namespace with
its own address and hostname. The brokers, their configs, R and the start scripts are the ones
the components ship; only the directories the pods mount (or the nodes hold) are temporary.
Shared by ``test_flux_live.py`` (behaviour) and ``benchmarks/flux_membership.py`` (join and
leave times).
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from netns_hosts import Hosts, flux_binary

from fluxinfra.k8s.fluxconf import rv1_slots
from fluxinfra.k8s.installer import FluxInstallerArgs, installer_scripts
from fluxinfra.k8s.minicluster import MiniClusterArgs, Paths, config_data, minicluster_hosts
from fluxinfra.secrets import derive_cluster_keys

CERT = derive_cluster_keys(b"fluxinfra live test seed ...... 32", "live").curve_cert


def flux_env(uri: str) -> dict[str, str]:
    prefix = str(Path(flux_binary()).parent)
    return {**os.environ, "FLUX_URI": uri, "PATH": f"{prefix}:{os.environ['PATH']}"}


def wait_for(predicate, timeout: float = 60.0, every: float = 0.05) -> float:
    """Seconds until ``predicate()`` is true; raises TimeoutError after ``timeout``."""
    start = time.monotonic()
    while not predicate():
        if time.monotonic() - start > timeout:
            raise TimeoutError(f"not true within {timeout}s: {predicate.__doc__ or predicate}")
        time.sleep(every)
    return time.monotonic() - start


class Instance:
    """Talks to a running instance through one broker's local URI."""

    def __init__(self, uri: str) -> None:
        self.uri = uri

    def flux(self, *argv: str, timeout: float = 60, check: bool = True) -> str:
        proc = subprocess.run([flux_binary(), *argv], env=flux_env(self.uri), text=True,
                              capture_output=True, timeout=timeout)
        if check and proc.returncode != 0:
            raise RuntimeError(f"flux {' '.join(argv)}: {proc.returncode}: {proc.stderr}")
        return proc.stdout

    def up(self) -> str:
        """The nodelist of the ranks that are up (empty before the instance answers)."""
        try:
            return self.flux("resource", "list", "-s", "up", "-no", "{nodelist}",
                             timeout=10).strip()
        except (RuntimeError, subprocess.TimeoutExpired):
            return ""


class LiveMiniCluster:
    """A MiniCluster's pods as hosts ``<name>-<i>`` (their FQDNs in every /etc/hosts)."""

    def __init__(self, args: MiniClusterArgs, root: Path) -> None:
        self.args, self.root = args, root
        self.names = [f"{args.name}-{i}" for i in range(args.hosts)]
        self.hosts = Hosts(self.names, {n: [f] for n, f in zip(self.names,
                                                               minicluster_hosts(args),
                                                               strict=True)})
        self.procs: dict[int, subprocess.Popen] = {}

    def __enter__(self) -> LiveMiniCluster:
        self.hosts.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.hosts.__exit__(*exc)

    def paths(self, rank: int) -> Paths:
        d = self.root / self.names[rank]
        return Paths(config=str(d / "config"), keys=str(d / "keys"), work=str(d / "work"))

    def start(self, rank: int, args: MiniClusterArgs | None = None) -> subprocess.Popen:
        """Start pod ``rank`` as the Job would (its ConfigMap written from ``args``, the size
        the stack has now)."""
        paths = self.paths(rank)
        for d in (paths.config, paths.keys, paths.work):
            Path(d).mkdir(parents=True, exist_ok=True)
        for key, text in config_data(args or self.args, paths).items():
            Path(paths.config, key).write_text(text)
        cert = Path(paths.keys, "curve.cert")
        if not cert.exists():
            cert.write_text(CERT)
            cert.chmod(0o400)
        env = {**flux_env(""), "JOB_COMPLETION_INDEX": str(rank)}
        env.pop("FLUX_URI")
        log = open(self.root / f"{self.names[rank]}.log", "ab")   # noqa: SIM115 (the pod's log)
        self.procs[rank] = self.hosts.popen(self.names[rank],
                                            ["bash", f"{paths.config}/start.sh"], env=env,
                                            stdout=log, stderr=subprocess.STDOUT)
        return self.procs[rank]

    def instance(self, rank: int = 0) -> Instance:
        return Instance(f"local://{self.paths(rank).work}/run/local")

    def log(self, rank: int) -> str:
        return (self.root / f"{self.names[rank]}.log").read_text(errors="replace")


class LiveNodes:
    """Installer nodes: each host has its own lib/etc/state/run directories, the installer's
    scripts rendered for them (``source: prefix`` on the real Flux), and node-watch's functions
    deciding ranks, config and restarts, as its loop does after each watch event."""

    def __init__(self, nw: Any, names: list[str], root: Path, **overrides: Any) -> None:
        self.nw, self.names, self.root = nw, names, root
        self.hosts = Hosts(names)
        self.overrides = overrides
        self.ranks: dict[str, Any] | None = None
        self.live: dict[str, str] = {}
        self.settings: dict[str, dict[str, Any]] = {}
        self.shapes: dict[str, dict[str, str]] = {}

    def __enter__(self) -> LiveNodes:
        self.hosts.__enter__()
        for name in self.names:
            args = self.args(name)
            for d in (args.lib_dir, f"{args.etc_dir}/conf.d", args.state_dir, args.run_dir):
                Path(d).mkdir(parents=True, exist_ok=True)
            for key, text in installer_scripts(args).items():
                path = Path(args.lib_dir, key)
                path.write_text(text)
                path.chmod(0o755)
            cert = Path(args.etc_dir, "curve.cert")
            cert.write_text(CERT)
            cert.chmod(0o400)
            settings = json.loads(installer_scripts(args)["node-watch.json"])
            self.settings[name] = {**settings, "keysDir": args.etc_dir, "templateGeneration": 1}
        (self.root / "cgroup").mkdir(exist_ok=True)
        return self

    def __exit__(self, *exc: object) -> None:
        for name in self.names:
            self.flux_start(name, "stop")
        self.hosts.__exit__(*exc)

    def args(self, name: str) -> FluxInstallerArgs:
        d = self.root / name
        prefix = str(Path(flux_binary()).parent.parent)
        # No Kubernetes here, so no ledger (its prolog would hold every job for placeholder
        # pods no one makes); tests/e2e/test_ledger.py runs it.
        base = FluxInstallerArgs(source="prefix", prefix=prefix, flux_core_version="0.88.0",
                                 flux_user="root", max_nodes=8, fanout=2, ledger=False)
        return replace(base, lib_dir=str(d / "lib"), etc_dir=str(d / "etc"),
                       state_dir=str(d / "state"), run_dir=str(d / "run"),
                       log_file=str(d / "broker.log"), **self.overrides)

    def flux_start(self, name: str, action: str) -> None:
        """flux-start.sh on node ``name`` (no systemd here: its supervisor, in a cgroup tree
        under the test's directory rather than this machine's)."""
        script = f"{self.settings[name]['libDir']}/flux-start.sh"
        self.hosts.run(name, ["env", f"FLUXINFRA_CGROUP_ROOT={self.root / 'cgroup'}", script,
                              action], check=True, capture_output=True, timeout=120)

    def shape(self, name: str) -> dict[str, str]:
        out = self.hosts.run(name, [flux_binary(), "R", "encode", "--local"], check=True,
                             capture_output=True, text=True).stdout
        (_, _, cores, gpus), = rv1_slots(json.loads(out))
        return {"cores": cores, "gpus": gpus}

    def node_pass(self, name: str) -> str:
        """One node-watch pass on ``name``: its plan over the shared map (the lead fixes R at
        once: every node has reported its shape), then its broker in step."""
        nw = self.nw
        if name in self.live and name not in self.shapes:
            self.shapes[name] = self.shape(name)
        ranks = nw.plan(self.ranks, self.live, name, self.shapes.get(name),
                        self.settings[name])
        if nw.rank_of(ranks, name) == 0 and ranks["R"] is None:
            ranks["R"] = nw.lead_r(ranks, self.settings[name])
        self.ranks = ranks
        return nw.sync_broker(ranks, name, self.settings[name], root="",
                              start=lambda s, a: self.flux_start(name, a), public_key="pk")

    def join(self, name: str) -> str:
        self.live[name] = self.hosts.address(name)
        return self.node_pass(name)

    def leave(self, name: str) -> None:
        """The node leaves: its pod's preStop stops the broker, the others see it go."""
        del self.live[name]
        self.flux_start(name, "stop")

    def instance(self) -> Instance:
        """The instance, through the lead's broker."""
        lead = self.ranks["slots"]["0"]["node"]
        return Instance(f"local://{self.args(lead).run_dir}/local")

    def broker_pid(self, name: str) -> int | None:
        """The PID of node ``name``'s broker (the supervisor's child), None if not running."""
        pidfile = Path(self.root / name / "run/broker-supervisor.pid")
        if not pidfile.exists():
            return None
        children = subprocess.run(["pgrep", "-P", pidfile.read_text().strip()],
                                  capture_output=True, text=True).stdout.split()
        return int(children[0]) if children else None
