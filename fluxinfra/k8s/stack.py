"""The stack-config schema: ``stacks/Pulumi.<stack>.yaml`` -> validated, typed settings.

Top-level keys (namespace ``fluxinfra:``) and the Args class each one fills:

==================  =====================================================================
``cluster``         :class:`fluxinfra.k8s.cluster.ClusterArgs`
``namespace``       namespace for the Fluxion service and scheduler (restricted Pod Security)
``image``           :class:`ImageArgs`, the fluxinfra image the service and scheduler run
``kubernetesVersions``  :class:`VersionsArgs`, the versions ``fluxinfra render`` validates for
``installer``       :class:`fluxinfra.k8s.installer.FluxInstallerArgs` (+ ``enabled``)
``fluxionService``  :class:`fluxinfra.k8s.fluxion_service.FluxionServiceArgs` (+ ``enabled``)
``scheduler``       :class:`fluxinfra.k8s.scheduler.FluxSchedulerArgs` (+ ``enabled``)
``queue``           :class:`fluxinfra.k8s.queue.FluxQueueArgs` (+ ``enabled``; needs the scheduler)
``miniclusters``    a list of :class:`fluxinfra.k8s.minicluster.MiniClusterArgs`
==================  =====================================================================

:func:`load_stack_settings` checks everything (unknown keys, types, ranges, cross-field rules)
before the program declares a single resource and raises a one-line ConfigError otherwise.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from typing import Any

from fluxinfra import __version__
from fluxinfra.errors import ConfigError
from fluxinfra.inputs import shown
from fluxinfra.k8s.cluster import ClusterArgs
from fluxinfra.k8s.config import (
    config_json,
    config_key,
    dns1123_label,
    image_digest,
    kube_version,
    load_args,
    option,
)
from fluxinfra.k8s.fluxion_service import (
    FluxionServiceArgs,
    client_tls_secret_name,
    fluxion_service_address,
)
from fluxinfra.k8s.installer import FluxInstallerArgs
from fluxinfra.k8s.manifests import DEFAULT_NAMESPACE, image_ref
from fluxinfra.k8s.minicluster import MiniClusterArgs
from fluxinfra.k8s.queue import FluxQueueArgs
from fluxinfra.k8s.scheduler import FluxSchedulerArgs

__all__ = ["ImageArgs", "VersionsArgs", "StackSettings", "TOP_LEVEL", "load_stack_settings",
           "stack_file"]

PROJECT = "fluxinfra"
#: The resource name ``__main__.py`` gives the FluxionService (its Service's DNS name).
SERVICE_NAME = "fluxion-service"
#: ... the FluxScheduler (its ServiceAccount: the queue controller's identity), the FluxQueue.
SCHEDULER_NAME = "fluxion-scheduler"
QUEUE_NAME = "fluxion-queue"


def _tag(value: str) -> str | None:
    return None if value and value != "latest" else "a tag other than '' and 'latest'"


@dataclass
class ImageArgs:
    repository: str = option("localhost/fluxinfra", "image repository (make image builds "
                             "localhost/fluxinfra; a registry path for clusters that pull)")
    """Repository of the fluxinfra image."""
    tag: str = option(__version__, "image tag (pinned; not 'latest')", check=_tag)
    """Tag; defaults to this fluxinfra version."""
    digest: str = option("", "image digest sha256:... ('' = tag only)", check=image_digest)
    """Digest to pin the exact image."""

    @property
    def ref(self) -> str:
        return image_ref(self.repository, self.tag, self.digest)


@dataclass
class VersionsArgs:
    min: str = option("1.29", "oldest Kubernetes minor version to validate for",
                      check=kube_version)
    """Oldest minor version the render validates against."""
    max: str = option("", "newest minor version ('' = newest kubernetes-validate bundles)",
                      check=lambda v: None if v == "" else kube_version(v))
    """Newest minor version ('' = newest bundled)."""


@dataclass
class StackSettings:
    """Everything ``__main__.py`` needs, validated."""

    stack: str
    cluster: ClusterArgs
    namespace: str
    image: ImageArgs
    kubernetes_versions: VersionsArgs
    installer: FluxInstallerArgs | None
    fluxion_service: FluxionServiceArgs | None
    scheduler: FluxSchedulerArgs | None
    queue: FluxQueueArgs | None = None
    miniclusters: list[MiniClusterArgs] = field(default_factory=list)


#: top-level key -> one-line description (the docs and the unknown-key message use this)
TOP_LEVEL = {
    "cluster": "where to deploy: a kind cluster or an existing one",
    "namespace": "namespace of the Fluxion service and scheduler",
    "image": "the fluxinfra image (repository, tag, digest)",
    "kubernetesVersions": "Kubernetes versions the render validates against (min, max)",
    "installer": "FluxInstaller settings (+ enabled)",
    "fluxionService": "FluxionService settings (+ enabled)",
    "scheduler": "FluxScheduler settings (+ enabled)",
    "queue": "FluxQueue settings (+ enabled; needs the scheduler)",
    "miniclusters": "list of MiniCluster settings",
}


def stack_file(stack: str) -> str:
    return f"stacks/Pulumi.{stack}.yaml"


def _parse(value: Any) -> Any:
    """A config value Pulumi passes as JSON text, parsed; other text as it is."""
    if isinstance(value, str):
        try:
            return config_json(value)
        except ConfigError:
            return value
    return value


def _component(cls: type, raw: Any, where: str, **extra: Any) -> Any | None:
    """Args for an optional component, or None when ``enabled: false``."""
    raw = _parse(raw)
    if isinstance(raw, dict) and "enabled" in raw:
        raw = dict(raw)
        enabled = raw.pop("enabled")
        if str(enabled).lower() not in ("true", "false"):
            raise ConfigError(f"{where}.enabled: {enabled!r} is not accepted; accepted: true or "
                              "false")
        if str(enabled).lower() == "false":
            return None
    return load_args(cls, raw, where=where, extra=extra)


def _minicluster_problem(mc: MiniClusterArgs) -> tuple[str, Any, str] | None:
    """(key, value, accepted) for the first cross-field rule ``mc`` breaks."""
    if not 1 <= mc.size <= mc.hosts:
        return "size", mc.size, f"an integer from 1 to maxSize ({mc.max_size})"
    if mc.min_size and mc.mode != "persistent":
        return "minSize", mc.min_size, "0 in ephemeral mode (the command waits for every broker)"
    if mc.min_size > mc.size:
        return "minSize", mc.min_size, f"an integer from 0 to size ({mc.size})"
    if mc.mode == "ephemeral" and not mc.command.strip():
        return ("command", mc.command, "the command rank 0 runs (e.g. 'hostname', run with "
                "flux run -N <size>), or set mode: persistent")
    if mc.mode == "persistent" and mc.command.strip():
        return ("command", mc.command, "'' in persistent mode (submit work through "
                "flux-connect), or set mode: ephemeral")
    if not mc.launcher and mc.command.split()[:1] == ["flux"]:
        return ("command", mc.command, "the program itself (it is started with flux run -N "
                "<nodes>); for a script that calls flux itself set launcher: true")
    if "\n" in mc.command and not mc.launcher:
        return "command", mc.command, "one line (or set launcher: true to run a script)"
    if mc.nodes > mc.size:
        return "nodes", mc.nodes, f"an integer from 0 to size ({mc.size})"
    if mc.gpus_per_broker and not mc.cores_per_broker:
        return ("gpusPerBroker", mc.gpus_per_broker, "0 unless coresPerBroker is set (with "
                "coresPerBroker 0, R takes rank 0's own cores and GPUs)")
    if mc.dns_policy == "None" and not mc.dns_config.get("nameservers"):
        return ("dnsConfig", mc.dns_config, "a mapping with nameservers when dnsPolicy is "
                "None (the brokers resolve each other's names)")
    if mc.pod_group and not mc.scheduler_name:
        return ("podGroup", True, "false, or set schedulerName to a scheduler that reads "
                "PodGroups (the stack's scheduler, e.g. fluxion)")
    return None


def _miniclusters(raw: Any, where: str) -> list[MiniClusterArgs]:
    raw = _parse(raw)
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise ConfigError(f"{where}: {raw!r} is not accepted; accepted: a list of MiniCluster "
                          "mappings")
    out: list[MiniClusterArgs] = []
    seen: set[tuple[str, str]] = set()
    for i, item in enumerate(raw):
        at = f"{where}[{i}]"
        mc = _component(MiniClusterArgs, item, at)
        if mc is None:
            continue
        if (problem := _minicluster_problem(mc)) is not None:
            key, value, accepted = problem
            raise ConfigError(f"{at}.{key}: {value!r} is not accepted; accepted: {accepted}")
        if (mc.namespace, mc.name) in seen:
            raise ConfigError(f"{at}.name: {mc.name!r} is not accepted; accepted: a name not "
                              f"already used in namespace {mc.namespace!r}")
        seen.add((mc.namespace, mc.name))
        out.append(mc)
    return out


#: Native sidecars (init containers with restartPolicy Always) are on by default from 1.29.
SIDECAR_MIN_VERSION = (1, 29)


def _check_sidecars(miniclusters: list[MiniClusterArgs], versions: VersionsArgs,
                    where: str, at_versions: str) -> None:
    oldest = tuple(int(p) for p in versions.min.split("."))
    for i, mc in enumerate(miniclusters):
        if mc.services and oldest < SIDECAR_MIN_VERSION:
            raise ConfigError(
                f"{at_versions}.min: {versions.min!r} is not accepted while "
                f"{where}[{i}].services is set; accepted: '1.29' or later (services run as "
                "native sidecars, on by default from Kubernetes 1.29; on 1.28 enable the "
                "SidecarContainers feature gate and set min to 1.29)")


def load_stack_settings(stack: str, config: dict[str, Any]) -> StackSettings:
    """Validate ``config`` (``"fluxinfra:<key>" -> value``, values as Pulumi passes them: strings,
    JSON text for objects, or already-parsed values) for ``stack``."""
    src = stack_file(stack)
    raw: dict[str, Any] = {}
    for key, value in config.items():
        project, _, name = key.partition(":")
        if project != PROJECT:
            continue  # other providers' config (kubernetes:..., pulumi:...) is not ours
        if name not in TOP_LEVEL:
            raise ConfigError(f"{src}: {config_key(key)}: unknown key (value {shown(value)}); "
                              "accepted keys: " + ", ".join(f"{PROJECT}:{k}" for k in TOP_LEVEL))
        raw[name] = value

    def at(key: str) -> str:
        return f"{src}: {PROJECT}:{key}"

    namespace = str(raw.get("namespace", DEFAULT_NAMESPACE))
    if (problem := dns1123_label()(namespace)) is not None:
        raise ConfigError(f"{at('namespace')}: {namespace!r} is not accepted; accepted: {problem}")
    image = load_args(ImageArgs, _parse(raw.get("image")), where=at("image"))
    shared = {"namespace": namespace, "image": image.ref}
    service = _component(FluxionServiceArgs, raw.get("fluxionService"), at("fluxionService"),
                         **shared)
    scheduler = _component(FluxSchedulerArgs, raw.get("scheduler"), at("scheduler"), **shared)
    if scheduler is not None and scheduler.fluxion_service == "stack":
        if service is None:
            raise ConfigError(f"{at('scheduler')}.fluxionService: 'stack' is not accepted while "
                              "fluxinfra:fluxionService.enabled is false; accepted: '' (match "
                              "in process) or HOST:PORT, or enable the service")
        if service.replicas != 1:
            raise ConfigError(f"{at('fluxionService')}.replicas: {service.replicas} is not "
                              "accepted while the scheduler uses the service (each replica "
                              "holds its own graph); accepted: 1")
        scheduler = replace(scheduler, fluxion_service=fluxion_service_address(
            SERVICE_NAME, service), fluxion_tls_secret=client_tls_secret_name(SERVICE_NAME))
    versions = load_args(VersionsArgs, _parse(raw.get("kubernetesVersions")),
                         where=at("kubernetesVersions"))
    miniclusters = _miniclusters(raw.get("miniclusters"), at("miniclusters"))
    _check_sidecars(miniclusters, versions, at("miniclusters"), at("kubernetesVersions"))
    queue = None
    if scheduler is not None:
        queue = _component(FluxQueueArgs, raw.get("queue"), at("queue"), **shared,
                           scheduler_name=scheduler.scheduler_name,
                           scheduler_account=SCHEDULER_NAME)
        if queue is not None:
            scheduler = replace(scheduler, queue=True, queues=list(queue.queues))
    elif _component(FluxQueueArgs, raw.get("queue"), at("queue"), **shared) is not None \
            and "queue" in raw:
        raise ConfigError(f"{at('queue')}.enabled: true is not accepted while "
                          "fluxinfra:scheduler.enabled is false (the queue runs inside the "
                          "scheduler); accepted: false, or enable the scheduler")
    installer = _component(FluxInstallerArgs, raw.get("installer"), at("installer"),
                           image=image.ref)
    if installer is not None and installer.ledger and \
            (installer.resources.get("requests") or {}).get("cpu") not in (None, 0, "0"):
        cpu = installer.resources["requests"]["cpu"]
        raise ConfigError(f"{at('installer')}.resources.requests.cpu: {cpu!r} is not accepted "
                          "while installer.ledger is true; accepted: no CPU request (a job "
                          "holding every core of a node gets a placeholder pod requesting all "
                          "of them, which the installer pod's own request would keep out), or "
                          "set installer.ledger: false")
    return StackSettings(
        stack=stack,
        cluster=load_args(ClusterArgs, _parse(raw.get("cluster")), where=at("cluster")),
        namespace=namespace,
        image=image,
        kubernetes_versions=versions,
        installer=installer,
        fluxion_service=service,
        scheduler=scheduler,
        queue=queue,
        miniclusters=miniclusters,
    )

def stack_config() -> dict[str, Any]:
    """All config the Pulumi runtime holds for this run (``pulumi up`` passes it in the
    environment; the render's mock runtime sets it), so unknown keys can be refused."""
    from pulumi.runtime import config as runtime_config

    merged = dict(runtime_config.get_config_env())
    merged.update(runtime_config.CONFIG.get())
    return merged


_TYPE_NAMES = {str: "string", int: "integer", bool: "bool", list: "list", dict: "mapping"}
_REFERENCE_SECTIONS = [
    ("cluster", ClusterArgs, ""),
    ("image", ImageArgs, ""),
    ("kubernetesVersions", VersionsArgs, ""),
    ("installer", FluxInstallerArgs, "enabled"),
    ("fluxionService", FluxionServiceArgs, "enabled"),
    ("scheduler", FluxSchedulerArgs, "enabled"),
    ("queue", FluxQueueArgs, "enabled"),
    ("miniclusters", MiniClusterArgs, "list"),
]


def config_reference() -> str:
    """The config schema as Markdown tables (docs/kubernetes.md embeds this text verbatim)."""
    from fluxinfra.k8s.config import default_of, options_of

    def show(value: Any) -> str:
        return "`" + json.dumps(value) + "`"

    out = ["| key | type | default | description |", "| --- | --- | --- | --- |",
           f'| `namespace` | string | `"{DEFAULT_NAMESPACE}"` | '
           f"{TOP_LEVEL['namespace']} (DNS-1123 label) |"]
    for key, cls, extra in _REFERENCE_SECTIONS:
        out += ["", f"`fluxinfra:{key}`" + (" (a list of mappings, each:)" if extra == "list"
                                             else ""), "",
                "| key | type | default | description |", "| --- | --- | --- | --- |"]
        if extra in ("enabled", "list"):
            out.append("| `enabled` | bool | `true` | declare this component at all |")
        for name, (fld, opt) in options_of(cls).items():
            out.append(f"| `{name}` | {_TYPE_NAMES[opt.type]} | {show(default_of(fld))} | "
                       f"{opt.doc} |")
    return "\n".join(out) + "\n"
