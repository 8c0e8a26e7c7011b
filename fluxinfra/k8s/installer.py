"""``FluxInstaller``: Flux on every (selected) node of a cluster, from a privileged DaemonSet.

The flux-distribute idea done right: the CURVE certificate and munge key come from a per-stack
``ClusterKeys`` resource into a Secret mounted 0400 (never a script or a ConfigMap); the
ClusterRole is ``get/list/watch nodes`` and nothing more (a namespaced Role adds the rank map
ConfigMap and reading this DaemonSet); only this namespace is ``privileged`` for Pod Security.
Each pod copies the scripts (ConfigMap) and keys onto its node and runs ``node-watch``, which
claims a stable Flux rank in the rank map, installs pinned flux-core and flux-sched on the node
(micromamba from conda-forge, or an existing prefix) outside the pod's cgroup, and keeps the
node's broker in step with the map: a join starts one broker, a leave stops one, nothing else
restarts (see ``fluxinfra/templates/node-watch.py`` and docs/kubernetes.md).
"""

from __future__ import annotations

import base64
import hashlib
import json
from dataclasses import dataclass, field
from importlib import resources as package_files
from typing import Any

import pulumi

from fluxinfra.k8s import manifests as m
from fluxinfra.k8s.config import (
    at_least,
    dns1123_label,
    one_of,
    option,
    pinned_image,
    quantity,
    quantity_bytes,
    resource_requirements,
    string_map,
    toleration_list,
)
from fluxinfra.k8s.keys import ClusterKeys
from fluxinfra.k8s.resources import declare_all

__all__ = ["FluxInstallerArgs", "FluxInstaller", "installer_manifests", "installer_scripts",
           "installer_keys_secret", "topology", "node_watch_settings"]

COMPONENT = "flux-installer"
SCRIPTS_DIR = "/opt/fluxinfra/scripts"
KEYS_DIR = "/opt/fluxinfra/keys"
HEARTBEAT = "/tmp/node-watch.alive"
LEDGER_HEARTBEAT = "/tmp/ledger.alive"


def _fresh(path: str, seconds: int) -> str:
    return f"import os, sys, time; sys.exit(time.time() - os.path.getmtime('{path}') > {seconds})"


_HEARTBEAT_FRESH = _fresh(HEARTBEAT, 600)


def _topology(value: str) -> str | None:
    if value in ("", "binomial") or (value.startswith("kary:") and value[5:].isdigit()):
        return None
    return "'' (use fanout), 'binomial' or 'kary:<k>' (kary:0 = flat)"


def _host_target(value: str) -> str | None:
    if value.isdigit() and int(value) >= 1:
        return None
    if value and len(value) <= 15 and "/" not in value and " " not in value:
        return None   # a command name as /proc/<pid>/comm holds it (at most 15 characters)
    return "a PID ('1') or the command name of a host process (e.g. 'kubelet', at most 15 " \
           "characters)"


def _host_prefix(value: str) -> str | None:
    label = dns1123_label(50)(value)
    if label is None and not value[-1:].isdigit():
        return None
    return "a DNS-1123 label of at most 50 characters not ending in a digit (the rank follows)"


@dataclass
class FluxInstallerArgs:
    namespace: str = option("flux-installer", "namespace of the installer (privileged Pod "
                            "Security)", check=dns1123_label())
    """Namespace for the DaemonSet; the only namespace labelled privileged."""
    image: str = option(m.DEFAULT_IMAGE, "installer image (default: the stack's image); needs "
                        "bash, python3, nsenter", check=pinned_image)
    """Installer container image (the stack's top-level ``image`` unless set here)."""
    source: str = option("conda-forge", "where Flux comes from: conda-forge (micromamba) or "
                         "prefix (already on the node)", check=one_of("conda-forge", "prefix"))
    """conda-forge (micromamba installs the pins) or prefix (use what is on the node)."""
    prefix: str = option("/opt/fluxinfra/flux", "install prefix on the node (or the existing "
                         "prefix for source=prefix)")
    """Flux prefix on the node."""
    flux_core_version: str = option("0.85.0", "pinned flux-core version")
    """Pinned flux-core version."""
    flux_sched_version: str = option("0.54.0", "pinned flux-sched version")
    """Pinned flux-sched version (conda-forge builds pin flux-core to the minor they were built
    against: flux-sched 0.54.0 goes with flux-core 0.85)."""
    micromamba_version: str = option("2.0.5", "pinned micromamba version")
    """Pinned micromamba version (fetched from micro.mamba.pm)."""
    micromamba_sha256: str = option("", "sha256 of the micromamba download ('' = not checked)",
                                    check=lambda v: None if v == "" or (
                                        len(v) == 64 and all(c in "0123456789abcdef" for c in v))
                                    else "'' or 64 lower-case hex digits")
    """Expected sha256 of the micromamba tarball (recommended for production)."""
    channel: str = option("conda-forge", "conda channel")
    """Conda channel to install from."""
    broker_port: int = option(8050, "broker TCP port on every node", check=at_least(1024, 65535))
    """TCP port each broker binds on its node."""
    fanout: int = option(0, "tree fan-out, tbon.topo kary:<fanout>; 0 = flat (rank 0 is every "
                         "rank's parent, so no node's leave cuts others off)",
                         check=at_least(0, 1024))
    """Overlay tree fan-out, used when topology is ''. In a tree, an interior rank's leave takes
    its subtree offline until a node reuses the rank (joiners take the lowest free rank)."""
    topology: str = option("", "tbon.topo: '' (kary:<fanout>), binomial, kary:<k>",
                           check=_topology)
    """Overlay topology; '' means kary:<fanout>."""
    settle_seconds: int = option(10, "seconds node-watch waits for a burst of node changes to "
                                 "end, and the lead for every node's hardware before fixing R",
                                 check=at_least(0, 3600))
    """Debounce for node join/leave bursts; the lead's wait for the nodes' shapes."""
    max_nodes: int = option(16, "ranks the instance has (sized ahead): a node that joins takes a "
                            "free one and only its broker starts", check=at_least(1, 16384))
    """Instance size; nodes beyond it get no rank (raise it: one restart of every broker)."""
    host_prefix: str = option("fluxnode", "brokers' hostnames in Flux are <hostPrefix><rank> "
                              "(stable while nodes come and go; the rank map names the node)",
                              check=_host_prefix)
    """Flux hostname prefix; rank r is <hostPrefix><r>."""
    spare_cores: int = option(0, "cores R gives a rank no node holds when the instance starts "
                              "(0 = the lead's own cores)", check=at_least(0, 4096))
    """Cores of a spare rank in R."""
    spare_gpus: int = option(0, "GPUs R gives a spare rank (with spareCores)",
                             check=at_least(0, 64))
    """GPUs of a spare rank in R."""
    generation: int = option(0, "raise it to restart the whole instance once (new epoch: R is "
                             "read again from the nodes)", check=at_least(0))
    """Instance generation; a higher one starts a new epoch."""
    host_target: str = option("1", "the host process whose namespaces are the node's: a PID or "
                              "a command name (where PID 1 refuses nsenter)", check=_host_target)
    """nsenter target on the node."""
    install_memory: str = option("4Gi", "memory limit of the install on the node (a conda "
                                 "solve needs 1-3 GiB); outside the pod's own limit",
                                 check=quantity)
    """MemoryMax of the install's unit or cgroup."""
    install_timeout_seconds: int = option(3600, "the install is stopped after this long and "
                                          "retried", check=at_least(60, 86400))
    """RuntimeMaxSec of the install."""
    resync_seconds: int = option(30, "seconds between node-watch's full passes (re-read the "
                                 "rank map, ensure the broker runs)", check=at_least(5, 3600))
    """Watch window / resync period."""
    node_selector: dict = option({}, "nodeSelector for the DaemonSet (and the broker list)",
                                 check=string_map)
    """Only nodes with these labels run a broker."""
    tolerations: list = option([], "tolerations for the DaemonSet (and the broker list)",
                               check=toleration_list)
    """Tolerations, e.g. to include control-plane nodes."""
    flux_user: str = option("flux", "system user that owns the Flux instance on each node",
                            check=dns1123_label(32))
    """Instance owner on the nodes."""
    resources: dict = option({"requests": {"memory": "64Mi"}, "limits": {"memory": "256Mi"}},
                             "installer container resources (the install and the broker run "
                             "outside them, on the node); no CPU request while the ledger is on",
                             check=resource_requirements)
    """Resources of the installer container (node-watch only). No CPU request by default: with
    the ledger on, a job holding every core of a node has a placeholder pod requesting all of
    them, which a CPU request of the installer's own pod would keep from fitting."""
    ledger: bool = option(True, "one ledger for Flux jobs and pods on the nodes: running jobs "
                          "get placeholder pods, pods' nodes are withheld from Flux")
    """Keep Flux jobs and Kubernetes pods on the same nodes in one ledger (docs/kubernetes.md,
    "One ledger"): a placeholder pod per (running job, node), bound to the node with the job's
    cores and GPUs; every core of a node where other pods request CPU marked down in Fluxion;
    a job-manager prolog that starts a job only once its placeholders are admitted."""
    lib_dir: str = field(default="/var/lib/fluxinfra")
    """Scripts and micromamba on the node."""
    etc_dir: str = field(default="/etc/fluxinfra")
    """Keys and broker config on the node."""
    state_dir: str = field(default="/var/lib/flux")
    """The broker's statedir on the node (content store kept across restarts)."""
    run_dir: str = field(default="/run/flux")
    """The broker's rundir on the node (holds the local:// socket)."""
    munge_dir: str = field(default="/etc/munge")
    """Where the node's munged reads its key."""
    bin_dir: str = field(default="/usr/local/bin")
    """Where flux-connect goes on the node."""
    log_file: str = field(default="/var/log/fluxinfra-broker.log")
    """The broker's log on a node without systemd (with systemd: journalctl -u
    fluxinfra-broker)."""


def topology(args: FluxInstallerArgs) -> str:
    return args.topology or f"kary:{args.fanout}"


def _template_context(args: FluxInstallerArgs) -> dict[str, Any]:
    return {"prefix": args.prefix, "lib_dir": args.lib_dir, "etc_dir": args.etc_dir,
            "scripts_dir": SCRIPTS_DIR, "keys_dir": KEYS_DIR, "source": args.source,
            "flux_core_version": args.flux_core_version,
            "flux_sched_version": args.flux_sched_version,
            "micromamba_version": args.micromamba_version,
            "micromamba_sha256": args.micromamba_sha256, "channel": args.channel,
            "flux_user": args.flux_user, "unit": "fluxinfra-broker", "state_dir": args.state_dir,
            "run_dir": args.run_dir, "munge_dir": args.munge_dir, "bin_dir": args.bin_dir,
            "heartbeat": HEARTBEAT, "log_file": args.log_file, "ledger": args.ledger,
            "ledger_dir": f"{args.lib_dir}/ledger"}


def _broker_digest(args: FluxInstallerArgs, start_script: str) -> str:
    """What the broker runs: its flags (flux-start.sh) and the Flux it runs. A change restarts
    each broker once its node has it; other installer changes restart none."""
    what = {"start": start_script, "source": args.source, "prefix": args.prefix,
            "core": args.flux_core_version, "sched": args.flux_sched_version,
            "user": args.flux_user, "ledger": args.ledger}
    return hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()[:16]


def rank_map_name(name: str) -> str:
    return f"{name}-ranks"


def priority_class_name(name: str) -> str:
    """The PriorityClass of the ledger's placeholder pods."""
    return f"{name}-flux-jobs"


#: Above every ordinary pod (so no scheduler preempts a placeholder for one), below the
#: system-*-critical classes (from 2,000,000,000 on, for which the kubelet itself evicts pods
#: to admit one: a placeholder must wait for a pod, never push it out).
PLACEHOLDER_PRIORITY = 1_000_000_000


def node_watch_settings(name: str, args: FluxInstallerArgs, start_script: str) -> dict[str, Any]:
    """node-watch.json: everything node-watch needs besides the cluster's state."""
    return {"nodeSelector": args.node_selector, "tolerations": args.tolerations,
            "brokerPort": args.broker_port, "topology": topology(args),
            "settleSeconds": args.settle_seconds, "resyncSeconds": args.resync_seconds,
            "etcDir": args.etc_dir, "libDir": args.lib_dir, "keysDir": KEYS_DIR,
            "prefix": args.prefix, "maxNodes": args.max_nodes, "hostPrefix": args.host_prefix,
            "spareCores": args.spare_cores, "spareGpus": args.spare_gpus,
            "generation": args.generation, "hostTarget": args.host_target,
            "installMemoryBytes": quantity_bytes(args.install_memory),
            "installTimeoutSeconds": args.install_timeout_seconds,
            "rankMap": rank_map_name(name), "daemonSet": name,
            "brokerDigest": _broker_digest(args, start_script),
            "ledger": args.ledger, "ledgerDir": f"{args.lib_dir}/ledger",
            "ledgerImage": args.image, "ledgerPriorityClass": priority_class_name(name),
            "fluxUser": args.flux_user, "runDir": args.run_dir}


def _package_text(package: str, name: str) -> str:
    return package_files.files(package).joinpath(name).read_text()


def installer_scripts(args: FluxInstallerArgs, name: str = COMPONENT) -> dict[str, str]:
    """ConfigMap data: entrypoint, install/start/host scripts, flux-connect, node-watch with the
    fluxconf module it imports (and the hostlist, idset and TOML writer modules fluxconf
    imports), and node-watch's settings."""
    ctx = _template_context(args)
    start = m.render_template("flux-start.sh.j2", **ctx)
    ledger = {
        "flux_ledger.py": _package_text("fluxinfra.templates", "flux_ledger.py"),
        "ledger-feed.py": _package_text("fluxinfra.templates", "ledger-feed.py"),
        "ledger-prolog.sh": m.render_template("ledger-prolog.sh.j2", **ctx),
    } if args.ledger else {}
    return {
        "entrypoint.sh": m.render_template("installer-entrypoint.sh.j2", **ctx),
        "flux-install.sh": m.render_template("flux-install.sh.j2", **ctx),
        "flux-start.sh": start,
        "fluxinfra-host.sh": m.render_template("fluxinfra-host.sh.j2", **ctx),
        "flux-connect": m.render_template("flux-connect.j2", **ctx),
        "node-watch.py": _package_text("fluxinfra.templates", "node-watch.py"),
        "fluxconf.py": _package_text("fluxinfra.k8s", "fluxconf.py"),
        # the modules fluxconf imports, vendored as they are installed (tomli_w's is its writer,
        # standard library only, which its package's __init__ only re-exports)
        "hostlist.py": _package_text("fluxinfra", "hostlist.py"),
        "idset.py": _package_text("fluxinfra", "idset.py"),
        "tomli_w.py": _package_text("tomli_w", "_writer.py"),
        "node-watch.json": json.dumps(node_watch_settings(name, args, start), indent=2,
                                      sort_keys=True) + "\n",
        **ledger,
    }


def installer_keys_secret(name: str, args: FluxInstallerArgs, curve_cert: str,
                          munge_key: bytes) -> dict[str, Any]:
    return m.secret(f"{name}-keys", args.namespace,
                    {"curve.cert": curve_cert, "munge.key": munge_key},
                    m.labels(COMPONENT, name))


def installer_rules(name: str, ledger: bool = False
                    ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(cluster rules, rules in the installer's namespace). Nodes are read cluster-wide; the
    rank map is read and replaced (compare-and-swap on resourceVersion) by name, created once
    (RBAC cannot restrict create by name: the object does not exist when it is authorized);
    the preStop hook reads this DaemonSet to tell an uninstall from a rolling update. With the
    ledger, pods are listed and watched cluster-wide (what they request on each node) and its
    placeholder pods created and deleted in the installer's namespace only."""
    cluster = [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch"]}]
    if ledger:
        cluster.append({"apiGroups": [""], "resources": ["pods"], "verbs": ["list", "watch"]})
    local = [
        {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "update"],
         "resourceNames": [rank_map_name(name)]},
        {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["create"]},
        {"apiGroups": ["apps"], "resources": ["daemonsets"], "verbs": ["get"],
         "resourceNames": [name]},
    ]
    if ledger:
        local.append({"apiGroups": [""], "resources": ["pods"], "verbs": ["create", "delete"]})
    return cluster, local


def installer_manifests(name: str, args: FluxInstallerArgs,
                        keys_fingerprint: Any = "") -> list[dict[str, Any]]:
    """Namespace, RBAC, scripts ConfigMap and DaemonSet (the keys Secret comes separately).

    The pod template carries a digest of the scripts and ``keys_fingerprint`` (the CURVE public
    key, not secret) as annotations, so new scripts or rotated keys roll the DaemonSet."""
    lbls = m.labels(COMPONENT, name)
    scripts = installer_scripts(args, name)
    digest = hashlib.sha256(json.dumps(scripts, sort_keys=True).encode()).hexdigest()[:16]
    annotations = {"fluxinfra.io/scripts-sha256": digest}
    if keys_fingerprint:
        annotations["fluxinfra.io/curve-public-key"] = keys_fingerprint
    ns = args.namespace
    cluster_rules, local_rules = installer_rules(name, args.ledger)
    watch = [f"{SCRIPTS_DIR}/node-watch.py", f"{SCRIPTS_DIR}/node-watch.json"]
    container = {
        "name": "installer",
        "image": args.image,
        "imagePullPolicy": "IfNotPresent",
        "command": ["/bin/bash", f"{SCRIPTS_DIR}/entrypoint.sh"],
        "env": [{"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
                # Orders the installer's own versions: only a pod of a newer template changes
                # the instance's settings in the rank map (a rolling update never flip-flops).
                {"name": "TEMPLATE_GENERATION", "valueFrom": {"fieldRef": {
                    "fieldPath": "metadata.labels['pod-template-generation']"}}},
                {"name": "PYTHONUNBUFFERED", "value": "1"}],
        # nsenter into the node's namespaces needs a privileged container in the host PID
        # namespace; this is the only privileged workload fluxinfra runs.
        "securityContext": {"privileged": True, "runAsUser": 0},
        "resources": args.resources,
        "volumeMounts": [
            {"name": "scripts", "mountPath": SCRIPTS_DIR, "readOnly": True},
            {"name": "keys", "mountPath": KEYS_DIR, "readOnly": True},
            {"name": "host-lib", "mountPath": f"/host{args.lib_dir}"},
            {"name": "host-etc", "mountPath": f"/host{args.etc_dir}"},
        ],
        # The heartbeat exists from the entrypoint's first line and stays fresh through the
        # micromamba download and the install (a background beat), then with every watch pass.
        "startupProbe": {"exec": {"command": ["test", "-e", HEARTBEAT]},
                         "periodSeconds": 5, "failureThreshold": 60},
        "livenessProbe": {"exec": {"command": ["python3", "-c", _HEARTBEAT_FRESH]},
                          "periodSeconds": 60, "timeoutSeconds": 10},
        # The broker outlives the pod through rolling updates and restarts (jobs on it
        # survive); it stops when its node leaves the instance or the installer is removed.
        "lifecycle": {"preStop": {"exec": {"command": ["python3", watch[0], "--pre-stop",
                                                       watch[1]]}}},
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }
    containers = [container]
    if args.ledger:
        containers.append(_ledger_container(args))
    pod_spec = {
        "serviceAccountName": name,
        "hostPID": True,
        "priorityClassName": "system-node-critical",
        "terminationGracePeriodSeconds": 100,  # the broker unit's own stop timeout is 90 s
        "containers": containers,
        "volumes": [
            {"name": "scripts", "configMap": {"name": f"{name}-scripts", "defaultMode": 0o555}},
            {"name": "keys", "secret": {"secretName": f"{name}-keys", "defaultMode": 0o400}},
            {"name": "host-lib", "hostPath": {"path": args.lib_dir, "type": "DirectoryOrCreate"}},
            {"name": "host-etc", "hostPath": {"path": args.etc_dir, "type": "DirectoryOrCreate"}},
        ],
    }
    if args.node_selector:
        pod_spec["nodeSelector"] = args.node_selector
    if args.tolerations:
        pod_spec["tolerations"] = args.tolerations
    daemonset = {
        "apiVersion": "apps/v1", "kind": "DaemonSet",
        "metadata": m.metadata(name, ns, lbls),
        "spec": {
            "selector": {"matchLabels": m.selector(COMPONENT, name)},
            "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1}},
            "template": {"metadata": {"labels": lbls, "annotations": annotations},
                         "spec": pod_spec},
        },
    }
    ledger_docs = [_priority_class(name, lbls)] if args.ledger else []
    return [
        m.namespace(ns, "privileged", lbls),
        *ledger_docs,
        m.service_account(name, ns, lbls),
        m.cluster_role(f"{name}-nodes", cluster_rules, lbls),
        m.cluster_role_binding(f"{name}-nodes", name, ns, lbls),
        m.role(f"{name}-rank-map", ns, local_rules, lbls),
        m.role_binding(f"{name}-rank-map", ns, name, lbls),
        {"apiVersion": "v1", "kind": "ConfigMap",
         "metadata": m.metadata(f"{name}-scripts", ns, lbls), "data": scripts},
        daemonset,
    ]


def _ledger_container(args: FluxInstallerArgs) -> dict[str, Any]:
    """The ledger beside node-watch (fluxinfra/templates/flux_ledger.py): it acts on the lead's
    node only. Privileged for the same reason: it runs ledger-feed.py on the node (nsenter)."""
    return {
        "name": "ledger",
        "image": args.image,
        "imagePullPolicy": "IfNotPresent",
        "command": ["python3", f"{SCRIPTS_DIR}/flux_ledger.py", f"{SCRIPTS_DIR}/node-watch.json"],
        "env": [{"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
                {"name": "PYTHONUNBUFFERED", "value": "1"}],
        "securityContext": {"privileged": True, "runAsUser": 0},
        "resources": {"requests": {"memory": "32Mi"}, "limits": {"memory": "128Mi"}},
        # Touched on every pass, idle or leading (a pass is at most a few seconds).
        "livenessProbe": {"exec": {"command": ["python3", "-c", _fresh(LEDGER_HEARTBEAT, 120)]},
                          "periodSeconds": 30, "timeoutSeconds": 10},
        "volumeMounts": [
            {"name": "scripts", "mountPath": SCRIPTS_DIR, "readOnly": True},
            {"name": "host-lib", "mountPath": f"/host{args.lib_dir}"},
        ],
    }


def _priority_class(name: str, lbls: dict[str, str]) -> dict[str, Any]:
    return {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
            "metadata": {"name": priority_class_name(name), "labels": dict(lbls)},
            "value": PLACEHOLDER_PRIORITY, "globalDefault": False,
            "preemptionPolicy": "Never",
            "description": "fluxinfra ledger: what a running Flux job holds on a node"}


class FluxInstaller(pulumi.ComponentResource):
    """Installs and runs Flux on the nodes; ``keys`` holds the cluster's CURVE cert + munge key."""

    keys: ClusterKeys
    namespace: pulumi.Output[str]

    def __init__(self, name: str, args: FluxInstallerArgs,
                 opts: pulumi.ResourceOptions | None = None):
        super().__init__("fluxinfra:k8s:FluxInstaller", name, {}, opts)
        self.keys = ClusterKeys(f"{name}-keys", label=name,
                                opts=pulumi.ResourceOptions(parent=self))
        manifests = installer_manifests(name, args, self.keys.curve_public)
        manifests.insert(-1, _keys_secret(name, args, self.keys))
        # pulumi up waits for the DaemonSet's rollout: the first install on a node (a conda
        # download and solve) can take many minutes.
        wait = f"{args.install_timeout_seconds + 600}s"
        self.resources = declare_all(manifests, name, self,
                                     workload_timeouts=pulumi.CustomTimeouts(create=wait,
                                                                             update=wait))
        self.namespace = pulumi.Output.from_input(args.namespace)
        self.register_outputs({"namespace": self.namespace})


def _keys_secret(name: str, args: FluxInstallerArgs, keys: ClusterKeys) -> dict[str, Any]:
    """The Secret manifest with its data as a secret Output of the keys resource."""
    data = pulumi.Output.all(keys.curve_cert, keys.munge_key).apply(
        lambda kv: installer_keys_secret(name, args, kv[0], base64.b64decode(kv[1]))["data"])
    return {**installer_keys_secret(name, args, "", b""), "data": pulumi.Output.secret(data)}
