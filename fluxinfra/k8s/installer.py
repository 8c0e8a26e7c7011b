"""``FluxInstaller``: Flux on every (selected) node of a cluster, from a privileged DaemonSet.

The flux-distribute idea done right: the CURVE certificate and munge key come from a per-stack
``ClusterKeys`` resource into a Secret mounted 0400 (never a script or a ConfigMap); the ClusterRole
is ``get/list/watch nodes`` and nothing more; only this namespace is ``privileged`` for Pod
Security. Each pod copies the scripts (ConfigMap) and keys onto its node, installs pinned flux-core
and flux-sched there (micromamba from conda-forge, or an existing prefix), then runs ``node-watch``,
which writes the broker config from the sorted node list and restarts the broker when nodes join
or leave.
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
    resource_requirements,
    string_map,
    toleration_list,
)
from fluxinfra.k8s.keys import ClusterKeys
from fluxinfra.k8s.resources import declare_all

__all__ = ["FluxInstallerArgs", "FluxInstaller", "installer_manifests", "installer_scripts",
           "installer_keys_secret", "topology"]

COMPONENT = "flux-installer"
SCRIPTS_DIR = "/opt/fluxinfra/scripts"
KEYS_DIR = "/opt/fluxinfra/keys"
HEARTBEAT = "/tmp/node-watch.alive"
_HEARTBEAT_FRESH = (f"import os, sys, time; "
                    f"sys.exit(time.time() - os.path.getmtime('{HEARTBEAT}') > 600)")


def _topology(value: str) -> str | None:
    if value in ("", "binomial") or (value.startswith("kary:") and value[5:].isdigit()
                                     and int(value[5:]) >= 1):
        return None
    return "'' (use fanout), 'binomial' or 'kary:<k>'"


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
    fanout: int = option(2, "tree fan-out (tbon.topo kary:<fanout>)", check=at_least(1, 1024))
    """Overlay tree fan-out, used when topology is ''."""
    topology: str = option("", "tbon.topo: '' (kary:<fanout>), binomial, kary:<k>",
                           check=_topology)
    """Overlay topology; '' means kary:<fanout>."""
    settle_seconds: int = option(10, "seconds node-watch waits for a burst of node changes to "
                                 "end before reconfiguring", check=at_least(0, 3600))
    """Debounce for node join/leave bursts."""
    node_selector: dict = option({}, "nodeSelector for the DaemonSet (and the broker list)",
                                 check=string_map)
    """Only nodes with these labels run a broker."""
    tolerations: list = option([], "tolerations for the DaemonSet (and the broker list)",
                               check=toleration_list)
    """Tolerations, e.g. to include control-plane nodes."""
    flux_user: str = option("flux", "system user that owns the Flux instance on each node",
                            check=dns1123_label(32))
    """Instance owner on the nodes."""
    resources: dict = option({"requests": {"cpu": "50m", "memory": "64Mi"},
                              "limits": {"memory": "256Mi"}}, "installer container resources",
                             check=resource_requirements)
    """Resources of the installer container (the broker runs outside it, on the node)."""
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
            "run_dir": args.run_dir, "munge_dir": args.munge_dir, "bin_dir": args.bin_dir}


def installer_scripts(args: FluxInstallerArgs) -> dict[str, str]:
    """ConfigMap data: entrypoint, install/start scripts, flux-connect, node-watch (+ settings)."""
    ctx = _template_context(args)
    watch = {"nodeSelector": args.node_selector, "tolerations": args.tolerations,
             "brokerPort": args.broker_port, "topology": topology(args),
             "settleSeconds": args.settle_seconds, "etcDir": args.etc_dir, "libDir": args.lib_dir,
             "keysDir": KEYS_DIR}
    return {
        "entrypoint.sh": m.render_template("installer-entrypoint.sh.j2", **ctx),
        "flux-install.sh": m.render_template("flux-install.sh.j2", **ctx),
        "flux-start.sh": m.render_template("flux-start.sh.j2", **ctx),
        "flux-connect": m.render_template("flux-connect.j2", **ctx),
        "node-watch.py": package_files.files("fluxinfra.templates").joinpath("node-watch.py")
        .read_text(),
        "node-watch.json": json.dumps(watch, indent=2, sort_keys=True) + "\n",
    }


def installer_keys_secret(name: str, args: FluxInstallerArgs, curve_cert: str,
                          munge_key: bytes) -> dict[str, Any]:
    return m.secret(f"{name}-keys", args.namespace,
                    {"curve.cert": curve_cert, "munge.key": munge_key},
                    m.labels(COMPONENT, name))


def installer_manifests(name: str, args: FluxInstallerArgs,
                        keys_fingerprint: Any = "") -> list[dict[str, Any]]:
    """Namespace, RBAC, scripts ConfigMap and DaemonSet (the keys Secret comes separately).

    The pod template carries a digest of the scripts and ``keys_fingerprint`` (the CURVE public
    key, not secret) as annotations, so new scripts or rotated keys roll the DaemonSet."""
    lbls = m.labels(COMPONENT, name)
    scripts = installer_scripts(args)
    digest = hashlib.sha256(json.dumps(scripts, sort_keys=True).encode()).hexdigest()[:16]
    annotations = {"fluxinfra.io/scripts-sha256": digest}
    if keys_fingerprint:
        annotations["fluxinfra.io/curve-public-key"] = keys_fingerprint
    ns = args.namespace
    rules = [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch"]}]
    container = {
        "name": "installer",
        "image": args.image,
        "imagePullPolicy": "IfNotPresent",
        "command": ["/bin/bash", f"{SCRIPTS_DIR}/entrypoint.sh"],
        "env": [{"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
                # node-watch records it in the broker config: new scripts (new pins, new broker
                # flags) restart the broker once this pod has installed them
                {"name": "FLUXINFRA_SCRIPTS_SHA256", "valueFrom": {"fieldRef": {
                    "fieldPath": "metadata.annotations['fluxinfra.io/scripts-sha256']"}}},
                {"name": "PYTHONUNBUFFERED", "value": "1"}],
        # nsenter into PID 1's namespaces needs a privileged container in the host PID namespace;
        # this is the only privileged workload fluxinfra runs.
        "securityContext": {"privileged": True, "runAsUser": 0},
        "resources": args.resources,
        "volumeMounts": [
            {"name": "scripts", "mountPath": SCRIPTS_DIR, "readOnly": True},
            {"name": "keys", "mountPath": KEYS_DIR, "readOnly": True},
            {"name": "host-lib", "mountPath": f"/host{args.lib_dir}"},
            {"name": "host-etc", "mountPath": f"/host{args.etc_dir}"},
        ],
        # node-watch starts once Flux is installed (up to 15 minutes for the first download) and
        # then touches its heartbeat at least every 5 minutes (one watch window).
        "startupProbe": {"exec": {"command": ["test", "-e", HEARTBEAT]},
                         "periodSeconds": 10, "failureThreshold": 90},
        "livenessProbe": {"exec": {"command": ["python3", "-c", _HEARTBEAT_FRESH]},
                          "periodSeconds": 60, "timeoutSeconds": 10},
        # The broker lives as long as this pod: a node leaving the selector, an uninstall
        # (pulumi destroy) or an upgrade stops it; a new pod starts it again.
        "lifecycle": {"preStop": {"exec": {"command": [
            "nsenter", "-t", "1", "-m", "-u", "-i", "-n", "-p", "--",
            f"{args.lib_dir}/flux-start.sh", "stop"]}}},
    }
    pod_spec = {
        "serviceAccountName": name,
        "hostPID": True,
        "priorityClassName": "system-node-critical",
        "terminationGracePeriodSeconds": 100,  # the broker unit's own stop timeout is 90 s
        "containers": [container],
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
    return [
        m.namespace(ns, "privileged", lbls),
        m.service_account(name, ns, lbls),
        m.cluster_role(f"{name}-nodes", rules, lbls),
        m.cluster_role_binding(f"{name}-nodes", name, ns, lbls),
        {"apiVersion": "v1", "kind": "ConfigMap",
         "metadata": m.metadata(f"{name}-scripts", ns, lbls), "data": scripts},
        daemonset,
    ]


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
        self.resources = declare_all(manifests, name, self)
        self.namespace = pulumi.Output.from_input(args.namespace)
        self.register_outputs({"namespace": self.namespace})


def _keys_secret(name: str, args: FluxInstallerArgs, keys: ClusterKeys) -> dict[str, Any]:
    """The Secret manifest with its data as a secret Output of the keys resource."""
    data = pulumi.Output.all(keys.curve_cert, keys.munge_key).apply(
        lambda kv: installer_keys_secret(name, args, kv[0], base64.b64decode(kv[1]))["data"])
    return {**installer_keys_secret(name, args, "", b""), "data": pulumi.Output.secret(data)}
