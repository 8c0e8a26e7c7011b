"""The Flux installer's instance as the e2e tests see it: flux commands on a node of the bed,
as the instance owner, and where the rendered scripts keep the broker's run directory."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import yaml
from e2e_cluster import REPO, Cluster, wait_for

from fluxinfra.k8s.fluxconf import hostlist_decode

FLUX_PREFIX = Path(os.environ.get("FLUXINFRA_FLUX_PREFIX", "/opt/flux"))


def prefix_sets() -> list[str]:
    """The ``--set``s that point the installer at the Flux build at $FLUXINFRA_FLUX_PREFIX
    (``source: prefix``; conda-forge cannot be reached here), its version as the build says."""
    version = subprocess.run([str(FLUX_PREFIX / "bin" / "flux"), "version"], capture_output=True,
                             text=True, check=True).stdout
    core = next(line.split()[1] for line in version.splitlines()
                if line.startswith("libflux-core:"))
    return ["installer.source=prefix", f"installer.prefix={FLUX_PREFIX}",
            f"installer.fluxCoreVersion={core}"]


def render_dev_with_prefix(tmp: Path, *sets: str) -> Path:
    """``make render SET=...`` of the dev stack with :func:`prefix_sets` (and ``sets``); every
    other key as the dev stack has it. Returns the output directory."""
    out = tmp / "manifests"
    argv = [str(REPO / ".venv/bin/fluxinfra"), "render", "--stack", "dev", "--out", str(out),
            "--quiet"]
    for item in [*prefix_sets(), *sets]:
        argv += ["--set", item]
    subprocess.run(argv, check=True, capture_output=True, cwd=REPO)
    return out


class Instance:
    """The installer's instance seen from a node (the lead, unless told otherwise)."""

    def __init__(self, cluster: Cluster, lead: str, settings: dict) -> None:
        self.cluster = cluster
        self.lead = lead
        self.settings = settings

    def on(self, node: str, *argv: str, check: bool = True, timeout: float = 120) -> str:
        proc = self.cluster.bed.exec_on(node, list(argv), timeout=timeout, check=False)
        if check and proc.returncode != 0:
            raise AssertionError(f"{argv} on {node}: {proc.returncode}: {proc.stderr[-2000:]}")
        return proc.stdout

    def flux(self, *argv: str, node: str | None = None, check: bool = True,
             timeout: float = 120) -> str:
        """A flux command as the instance owner (the owner of its run directory): without
        flux-security only the owner may submit jobs."""
        node = node or self.lead
        run_dir = self.settings["runDir"]
        owner = self.on(node, "stat", "-c", "%U", run_dir).strip()
        return self.on(node, "runuser", "-u", owner, "--", "env", f"FLUX_URI=local://{run_dir}"
                       "/local", f"{self.settings['prefix']}/bin/flux", *argv, check=check,
                       timeout=timeout)

    def up(self) -> str:
        """The ranks up, or "" while the lead has no instance yet (no run directory)."""
        if self.cluster.bed.exec_on(self.lead, ["test", "-d", self.settings["runDir"]],
                                    check=False).returncode != 0:
            return ""
        return self.flux("resource", "list", "-s", "up", "-no", "{nodelist}",
                         check=False).strip()

    def broker_pid(self, node: str) -> str:
        return self.on(node, "cat", f"{self.settings['runDir']}/broker-supervisor.pid",
                       check=False).strip()


def expand(nodelist: str, settings: dict) -> set[str]:
    """``fluxnode[0-2,4]`` -> {"fluxnode0", "fluxnode1", "fluxnode2", "fluxnode4"}."""
    return set(hostlist_decode(nodelist)) if nodelist else set()


def start_settings(out: Path, settings: dict) -> dict:
    """Where the rendered flux-start.sh keeps the broker's run directory (its ``local://``
    socket and supervisor pid)."""
    scripts = next(yaml.safe_load(p.read_text()) for p in out.glob("configmap-*scripts*.yaml"))
    start = scripts["data"]["flux-start.sh"]
    run_dir = next(line.split("=", 1)[1].split("/broker-supervisor.pid")[0]
                   for line in start.splitlines() if line.startswith("pidfile="))
    return {**settings, "runDir": run_dir}


def apply_installer(cluster: Cluster, files: list[Path], namespace: str,
                    first: tuple[str, ...] = ("namespace-",)) -> None:
    """Apply the installer's rendered ``files``: those whose names start with ``first`` (its
    namespace, cluster-wide objects) before the rest. An earlier test's teardown deletes the
    installer's namespace without waiting, and nothing can be created in a namespace being
    terminated: that deletion is waited out first."""
    def gone_or_active() -> bool:
        proc = cluster.kubectl("get", "namespace", namespace, "-o", "jsonpath={.status.phase}",
                               check=False)
        return proc.returncode != 0 or proc.stdout.strip() != "Terminating"
    wait_for(gone_or_active, 300, f"namespace {namespace} left by an earlier test to go", 1.0)
    early = [p for p in files if p.name.startswith(first)]
    cluster.kubectl("apply", *[a for p in early for a in ("-f", str(p))])
    cluster.kubectl("apply", *[a for p in files if p not in early for a in ("-f", str(p))])


def remove_installer(cluster: Cluster, namespace: str, label: str, settings: dict,
                     *cluster_wide: tuple[str, str]) -> None:
    """Undo :func:`apply_installer`: its DaemonSets (waited out, so that no broker is left
    running), its namespace (not waited: :func:`apply_installer` waits when it comes next), its
    RBAC and the ``cluster_wide`` (kind, name) objects a test added; then every real node is
    cleared (:func:`clear_installer_nodes`)."""
    cluster.kubectl("delete", "daemonset", "-n", namespace, "--all", "--wait=true",
                    "--timeout=180s", check=False, timeout=200)
    cluster.kubectl("delete", "namespace", namespace, "--wait=false", check=False)
    cluster.kubectl("delete", "clusterrole,clusterrolebinding", "flux-installer-nodes",
                    check=False)
    for kind, name in cluster_wide:
        cluster.kubectl("delete", kind, name, check=False)
    clear_installer_nodes(cluster, label, settings)


def clear_installer_nodes(cluster: Cluster, label: str, settings: dict) -> None:
    """After an installer test: every real node loses ``label`` (the installer's nodeSelector
    key), its broker is stopped and the installer's files on it are removed."""
    for node in cluster.real_nodes:
        cluster.kubectl("label", "node", node, f"{label}-", check=False)
        cluster.bed.exec_on(node, ["sh", "-c", f"{settings['libDir']}/flux-start.sh stop; "
                                   f"rm -rf {settings['libDir']} {settings['etcDir']}"],
                            check=False, timeout=150)
