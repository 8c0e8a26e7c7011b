"""The cluster the e2e suite runs against, and the helpers tests share.

:func:`open_cluster` returns either a bed this session starts (control plane + real node, from
the Kubernetes binaries in ``$FLUXINFRA_KUBE_BIN`` or on ``PATH``) or, when
```$FLUXINFRA_E2E_KUBECONFIG`` names one, an existing cluster, which is used as it is: nothing is
started and nothing but the tests' own namespaces and objects is changed.
``$FLUXINFRA_E2E_BED`` names a bed already running (``scripts/kube up --name NAME``) to reuse
and leave running. When none can be had, it says why, and the suite is skipped with that reason
(CI has none).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "scripts"))

import kubebed  # noqa: E402
from kubebed import hoststate  # noqa: E402
from kubebed.layout import find_binary  # noqa: E402

from fluxinfra import __version__  # noqa: E402

__all__ = ["REPO", "STACK_IMAGE", "Cluster", "E2EUnavailable", "build_project_image",
           "open_cluster", "take_down", "wait_for"]

#: The image name the rendered stacks run (a short name: docker.io/library/...).
STACK_IMAGE = f"fluxinfra:{__version__}"


class E2EUnavailable(Exception):
    """No cluster can be had here; the message is the skip reason."""


def wait_for(predicate: Callable[[], Any], timeout: float, what: str,
             interval: float = 0.2) -> Any:
    """Poll until ``predicate()`` is truthy and return it; fail naming ``what`` otherwise."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = predicate()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what} (last: {last!r})")


def build_project_image(tar: Path) -> str:
    """``make image`` under a tag of this session's own, ``podman save`` to ``tar``
    (docker-archive), then the tag is removed again; returns the tag the archive holds.

    ``make image`` alone tags ``localhost/fluxinfra:<version>``, which a build in another
    worktree may retag at any moment; a private tag cannot be. Only making the base image, when
    it is missing, waits for the image tests' lock."""
    ref = f"localhost/fluxinfra:e2e-{os.getpid()}"
    env = dict(os.environ, CONTAINERS_CONF=str(REPO / "tests" / "image" / "containers.conf"))
    base = subprocess.run(["bash", "scripts/base-image", "--print"], cwd=REPO, env=env,
                          capture_output=True, text=True, check=False).stdout.strip()
    steps = [["make", "-s", "image", f"IMAGE_TAG={ref}"],
             ["podman", "save", "--format", "docker-archive", "-o", str(tar), ref]]
    if subprocess.run(["podman", "image", "exists", base], env=env, check=False).returncode:
        # Making the base image writes a shared cache: the image tests take this lock for it.
        steps.insert(0, ["flock", "/tmp/fluxinfra-lab.lock", "bash", "scripts/base-image"])
    try:
        for argv in steps:
            proc = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True,
                                  timeout=1800, check=False)
            if proc.returncode != 0:
                raise AssertionError(f"{' '.join(argv)} exited {proc.returncode}:\n"
                                     f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    finally:
        subprocess.run(["podman", "rmi", "--ignore", ref], env=env, capture_output=True,
                       timeout=120, check=False)
    return ref


class Cluster:
    """A kubeconfig, a ``kubectl`` bound to it, and (for a bed) the bed itself."""

    def __init__(self, kubeconfig: Path, cache_dir: Path, bed: kubebed.Bed | None = None, *,
                 owned: bool = True) -> None:
        self.kubeconfig = kubeconfig
        self.bed = bed
        #: whether this session started the bed (and so takes it down)
        self.owned = owned and bed is not None
        #: the machine before the bed started (for the check after teardown)
        self.machine_before: dict[str, set[str]] = {}
        kubectl = find_binary("kubectl")
        if kubectl is None:
            raise E2EUnavailable("kubectl not found in $FLUXINFRA_KUBE_BIN or on PATH")
        self.kubectl_path = kubectl
        # kubectl caches discovery under ~/.kube unless told otherwise: keep it in the session.
        self.env = dict(os.environ, KUBECONFIG=str(kubeconfig), KUBECACHEDIR=str(cache_dir))

    def with_cache(self, cache_dir: Path) -> Cluster:
        """The same cluster seen by a kubectl with an empty discovery cache, as a new user's
        (a warm cache can still map a kind whose CRD is gone, or not yet there)."""
        other = Cluster(self.kubeconfig, cache_dir, self.bed, owned=False)
        other.machine_before = self.machine_before
        return other

    @property
    def real_node(self) -> str | None:
        """The bed's first kubelet node, or None (an existing cluster: nodes are not ours to
        use)."""
        return self.bed.node_name if self.bed else None

    @property
    def real_nodes(self) -> list[str]:
        """Every real node of the bed, first node first ([] for an existing cluster)."""
        return self.bed.node_names if self.bed else []

    def kubectl(self, *args: str, input_text: str | None = None, check: bool = True,
                timeout: float = 120) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run([self.kubectl_path, *args], env=self.env, input=input_text,
                              capture_output=True, text=True, timeout=timeout, check=False)
        if check and proc.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} exited {proc.returncode}:\n"
                                 f"{proc.stderr.strip()}\n{proc.stdout.strip()[-3000:]}")
        return proc

    def get(self, *args: str) -> dict[str, Any]:
        return json.loads(self.kubectl("get", "-o", "json", *args).stdout)

    def apply(self, manifests: str | Path, *extra: str) -> subprocess.CompletedProcess[str]:
        """Server-side apply of a YAML string or a file/directory, as field manager
        ``fluxinfra-e2e``."""
        args = ["apply", "--server-side", "--field-manager=fluxinfra-e2e", *extra]
        if isinstance(manifests, Path):
            flag = "-k" if (manifests / "kustomization.yaml").exists() else "-f"
            return self.kubectl(*args, flag, str(manifests))
        return self.kubectl(*args, "-f", "-", input_text=manifests)

    def client(self) -> Any:
        """An official ``kubernetes`` ApiClient for this cluster."""
        from kubernetes import client, config

        cfg = client.Configuration()
        config.load_kube_config(config_file=str(self.kubeconfig), client_configuration=cfg)
        return client.ApiClient(cfg)

    def add_hollow_nodes(self, names: Iterable[str], **shape: Any) -> list[str]:
        if self.bed is None:
            raise E2EUnavailable("hollow nodes are made only on a bed this session started")
        return self.bed.add_hollow_nodes([kubebed.node_object(n, **shape) for n in names])

    def node_ready(self, name: str) -> bool:
        node = self.get("node", name)
        return any(c["type"] == "Ready" and c["status"] == "True"
                   for c in node["status"].get("conditions", []))


def _unavailable_reason() -> str | None:
    if os.geteuid() != 0:
        return "the e2e bed needs root (or name a cluster in FLUXINFRA_E2E_KUBECONFIG)"
    try:
        kubebed.preflight(real_node=True)
    except kubebed.BedError as err:
        return (f"no Kubernetes to test against: {err}; or name a cluster in "
                "FLUXINFRA_E2E_KUBECONFIG")
    return None


def e2e_nodes() -> int:
    """How many real nodes the session's bed gets: ``$FLUXINFRA_E2E_NODES`` (``make e2e``
    sets 4), else 1."""
    raw = os.environ.get("FLUXINFRA_E2E_NODES", "1")
    if not raw.isdigit() or not 1 <= int(raw) <= kubebed.MAX_NODES:
        raise E2EUnavailable(f"FLUXINFRA_E2E_NODES={raw!r}: use a count from 1 to "
                             f"{kubebed.MAX_NODES}")
    return int(raw)


def open_cluster(cache_dir: Path) -> Cluster:
    """The session's cluster (see the module docstring); raises E2EUnavailable with the reason
    when there is none."""
    attach = os.environ.get("FLUXINFRA_E2E_BED")
    if attach:
        # A bed started with `scripts/kube up --name NAME`: used, and left running.
        try:
            bed = kubebed.Bed.load(attach)
        except kubebed.BedError as err:
            raise E2EUnavailable(f"FLUXINFRA_E2E_BED={attach}: {err}") from None
        return Cluster(bed.kubeconfig, cache_dir, bed, owned=False)
    named = os.environ.get("FLUXINFRA_E2E_KUBECONFIG")
    if named:
        if not Path(named).is_file():
            raise E2EUnavailable(f"FLUXINFRA_E2E_KUBECONFIG={named}: no such file")
        return Cluster(Path(named), cache_dir)
    if os.geteuid() == 0 and find_binary("kube-apiserver"):
        from kubebed.deps import ensure_packages

        ensure_packages(log=lambda m: print(f"e2e: {m}", file=sys.stderr))
    reason = _unavailable_reason()
    if reason:
        raise E2EUnavailable(reason)
    # Short grace: the suite checks that the keeper keeps hollow nodes Ready and that the
    # real controller notices one it stops renewing, without waiting the default 40 s.
    before = hoststate.snapshot()
    bed = kubebed.Bed.up(f"e2e-{os.getpid()}", node_monitor_grace=20, nodes=e2e_nodes(),
                         log=lambda m: print(f"e2e bed: {m}", file=sys.stderr))
    cluster = Cluster(bed.kubeconfig, cache_dir, bed)
    cluster.machine_before = before
    return cluster


def take_down(cluster: Cluster) -> list[str]:
    """Take the session's bed down; returns what it left on the machine (should be nothing),
    after printing what others changed meanwhile."""
    started = time.monotonic()
    cluster.bed.down(keep_logs=os.environ.get("FLUXINFRA_KUBE_KEEP_LOGS"))
    took = time.monotonic() - started
    diff = hoststate.changes(cluster.machine_before, hoststate.snapshot())
    ours, theirs = hoststate.attribute(diff, [cluster.bed.layout])
    timings = cluster.bed.record.get("timings", {})
    print(f"\ne2e bed: control plane {timings.get('control_plane', 0):.1f}s, "
          f"{len(cluster.bed.node_names)} nodes Ready "
          f"{timings.get('nodes_ready', 0):.1f}s after start; teardown {took:.1f}s; "
          f"{len(theirs)} machine changes by others during the run", file=sys.stderr)
    return ours
