"""``MiniCluster``: a Flux instance in Kubernetes, one broker per pod (the Flux Operator's design).

An Indexed Job of ``size`` pods (index = Flux rank, pod hostname ``<name>-<index>``) behind a
headless Service, so every broker has a stable name ``<name>-<i>.<name>.<ns>.svc.<domain>``. The
broker config (a ConfigMap) lists ``maxSize`` such hosts in RFC 29 form, so the Job can grow to
``maxSize`` later without a new config: ranks not running yet are offline, and the instance
starts once ``broker.quorum`` ranks are up. Rank 0 writes the instance's R for all ``maxSize``
hosts (``flux R encode``, with each broker's cores from ``coresPerBroker`` or from rank 0's own
hardware) and is the only rank configured with it (``[resource] path``): every other rank fetches
R from rank 0 and checks its own hardware against it, so a pod with fewer cores than R claims is
drained with the reason rather than oversubscribed, and a statedir restored from an earlier run
never wins over the configured R.

``ephemeral`` runs ``command`` on rank 0 through ``flux run`` (``-N``/``-n``/``-c``/``-g``) once
every broker is up; its exit status is rank 0's and so the Job's (a pod failure policy fails the
Job at once on a non-zero status; the workers' brokers exit 0 when rank 0 shuts the instance
down). ``persistent`` keeps the instance up (``broker.rc2_none``) until the MiniCluster is removed;
``flux-connect`` in every pod opens a shell on it, and ``size`` can be raised or lowered up to
``maxSize`` with ``pulumi up``: only the Job's completions/parallelism, the PodGroup's
``minMember`` and the ConfigMap's quorum change, never the pod template, so running brokers stay.

Flux itself comes from the runner image, or from a Flux "view" image: an init container copies
the view into a shared volume mounted at the prefix it was built for, so the application image
needs no Flux. Extra ``services`` run as native sidecars (init containers with ``restartPolicy:
Always``): started before the broker, stopped after it, never holding an ephemeral Job open.
"""

from __future__ import annotations

import base64
import hashlib
import json
import shlex
from dataclasses import dataclass
from typing import Any

import pulumi

from fluxinfra.k8s import manifests as m
from fluxinfra.k8s.config import (
    at_least,
    container_list,
    dns1123_label,
    dns1123_subdomain,
    name_list,
    one_of,
    option,
    pinned_image,
    quantity,
    resource_requirements,
    string_map,
    toleration_list,
    volume_list,
)
from fluxinfra.k8s.fluxconf import dump_toml, hostlist_encode
from fluxinfra.k8s.keys import ClusterKeys
from fluxinfra.k8s.resources import declare_all

__all__ = ["MiniClusterArgs", "MiniCluster", "minicluster_manifests", "broker_config",
           "minicluster_hosts", "flux_run_argv", "RESERVED_VOLUMES", "connect_command"]

COMPONENT = "flux-minicluster"


@dataclass(frozen=True)
class Paths:
    """Where the pod mounts the MiniCluster's parts (a test harness runs the same scripts with
    its own directories)."""

    config: str = "/etc/flux/minicluster"   # the ConfigMap: broker.toml, scripts, quorum
    keys: str = "/etc/flux/keys"            # the curve Secret (0400)
    work: str = "/var/lib/flux-minicluster" # emptyDir: conf.d, R, rundir, statedir


POD_PATHS = Paths()
CONFIG_DIR, KEYS_DIR, WORK_DIR = POD_PATHS.config, POD_PATHS.keys, POD_PATHS.work
VIEW_STAGING = "/mnt/flux-view"          # where the view init container fills the view volume
#: Pod volumes the MiniCluster itself declares; user volumes take other names.
RESERVED_VOLUMES = ("config", "curve", "work", "flux-view", "shm")
#: A container exit code of the runner that is not the command's: Flux is missing.
EXIT_NO_FLUX = 127
POD_GROUP_LABEL = "scheduling.x-k8s.io/pod-group"
QUEUE_POLICIES = ("fcfs", "easy", "conservative", "hybrid")


def _flux_flags(value: list) -> str | None:
    if all(isinstance(v, str) and v.startswith("-") and "\n" not in v for v in value):
        return None
    return "a list of flux run options, each starting with '-' (e.g. '--exclusive', " \
           "'-o cpu-affinity=per-task')"


def _dns_config(value: dict) -> str | None:
    if set(value) <= {"nameservers", "searches", "options"} and all(
            isinstance(v, list) for v in value.values()):
        return None
    return "a mapping of nameservers, searches and options (lists), as a pod's dnsConfig"


def _absolute_path(value: str) -> str | None:
    return None if value.startswith("/") and ".." not in value.split("/") else \
        "an absolute path without '..'"


@dataclass
class MiniClusterArgs:
    # -- identity and size ------------------------------------------------------------------
    name: str = option("flux-sample", "MiniCluster name (Job, Service, pod prefix)",
                       check=dns1123_label(40))
    """Name of the Job, the headless Service and the pods' hostname prefix."""
    namespace: str = option("default", "namespace to run in (must exist)", check=dns1123_label())
    """Namespace (must exist)."""
    size: int = option(2, "brokers (pods) to run now; change it to resize a persistent "
                       "MiniCluster in place", check=at_least(1))
    """Pods now; 1 <= size <= maxSize."""
    max_size: int = option(0, "brokers the config and R list, so the cluster can grow (0 = "
                           "size)", check=at_least(0, 1024))
    """Hosts in the broker config and in R (0 means size)."""
    min_size: int = option(0, "persistent mode: brokers that must be up before the instance "
                           "starts (0 = size)", check=at_least(0, 1024))
    """broker.quorum of a persistent MiniCluster (ephemeral always waits for size)."""
    mode: str = option("ephemeral", "ephemeral (run command, then finish) or persistent",
                       check=one_of("ephemeral", "persistent"))
    """ephemeral: rank 0 runs command, then everything ends; persistent: stays up."""
    # -- what runs --------------------------------------------------------------------------
    command: str = option("", "ephemeral mode: the program flux run starts (e.g. 'hostname'); "
                          "with launcher, a bash script run as the instance's initial program")
    """The command (a shell line)."""
    launcher: bool = option(False, "run command itself as the initial program (for tools that "
                            "submit their own Flux jobs) instead of through flux run")
    """True: bash -c command on rank 0; False: flux run ... -- command."""
    nodes: int = option(0, "flux run -N (0 = size)", check=at_least(0, 1024))
    """Nodes for flux run."""
    tasks: int = option(0, "flux run -n (0 = one task per node)", check=at_least(0))
    """Tasks for flux run."""
    cores_per_task: int = option(0, "flux run -c (0 = Flux's default, 1)", check=at_least(0))
    """Cores per task for flux run."""
    gpus_per_task: int = option(0, "flux run -g (0 = none)", check=at_least(0))
    """GPUs per task for flux run."""
    flux_flags: list = option([], "extra flux run options, e.g. ['--exclusive']",
                              check=_flux_flags)
    """Extra flux run options."""
    pre_command: str = option("", "shell line every pod runs before its broker starts")
    """Run before the broker in every pod (e.g. to prepare data)."""
    working_dir: str = option("", "working directory of the runner ('' = the image's)",
                              check=lambda v: None if v == "" else _absolute_path(v))
    """Runner working directory."""
    environment: dict = option({}, "environment variables of the runner (and the command)",
                               check=string_map)
    """Runner environment."""
    # -- images -----------------------------------------------------------------------------
    image: str = option("fluxrm/flux-sched:noble-v0.48.0-amd64",
                        "application image; it needs Flux unless fluxViewImage is set",
                        check=pinned_image)
    """The runner (application) image; runs as root in its container (see docs)."""
    flux_view_image: str = option("", "image holding a Flux view at fluxViewPath, copied into "
                                  "the pod so the application image needs no Flux ('' = none)",
                                  check=lambda v: None if v == "" else pinned_image(v))
    """Flux view image ('' = the application image has Flux)."""
    flux_view_path: str = option("/opt/flux", "prefix the Flux view was built for (mounted "
                                 "there in the runner)", check=_absolute_path)
    """Where the view lives in its image and is mounted in the runner."""
    image_pull_secrets: list = option([], "names of Secrets to pull the images with",
                                      check=name_list)
    """imagePullSecrets (names)."""
    image_pull_policy: str = option("IfNotPresent", "pull policy of the runner and view images",
                                    check=one_of("IfNotPresent", "Always", "Never"))
    """imagePullPolicy."""
    # -- Flux -------------------------------------------------------------------------------
    broker_port: int = option(8050, "broker TCP port", check=at_least(1024, 65535))
    """Broker port."""
    fanout: int = option(0, "tree fan-out, tbon.topo kary:<fanout>; 0 = flat (rank 0 is every "
                         "broker's parent)", check=at_least(0, 1024))
    """Overlay tree fan-out; flat suits up to a few hundred brokers."""
    cores_per_broker: int = option(0, "cores R gives each broker (0 = rank 0's own cores, as "
                                   "flux R encode --local sees them)", check=at_least(0, 4096))
    """Cores per broker in R."""
    gpus_per_broker: int = option(0, "GPUs R gives each broker (with coresPerBroker)",
                                  check=at_least(0, 64))
    """GPUs per broker in R (only with coresPerBroker; --local finds GPUs itself)."""
    queue_policy: str = option("fcfs", "Fluxion queue policy", check=one_of(*QUEUE_POLICIES))
    """sched-fluxion-qmanager queue-policy."""
    log_level: int = option(6, "broker log level on stderr (0-7)", check=at_least(0, 7))
    """-Slog-stderr-level."""
    cluster_domain: str = option("cluster.local", "the cluster's DNS domain (kubelet "
                                 "--cluster-domain)", check=dns1123_subdomain)
    """DNS domain of the cluster, for the brokers' FQDNs."""
    # -- pod --------------------------------------------------------------------------------
    resources: dict = option({}, "runner container resources", check=resource_requirements)
    """Runner container resources."""
    services: list = option([], "sidecar containers (Kubernetes container objects), run as "
                            "native sidecars beside the broker", check=container_list)
    """Service containers started before the runner and stopped after it, in every pod."""
    volumes: list = option([], "volumes: {name, mountPath, readOnly?, subPath?, and one of "
                           "persistentVolumeClaim, hostPath, configMap, secret, emptyDir}",
                           check=volume_list(RESERVED_VOLUMES))
    """User volumes, mounted in the runner."""
    shm_size: str = option("", "size of a memory-backed /dev/shm ('' = the runtime's 64Mi)",
                           check=lambda v: None if v == "" else quantity(v))
    """Memory-backed /dev/shm."""
    node_selector: dict = option({}, "pod nodeSelector", check=string_map)
    """Pod nodeSelector."""
    tolerations: list = option([], "pod tolerations", check=toleration_list)
    """Pod tolerations."""
    service_account_name: str = option("", "pod ServiceAccount ('' = none mounted)",
                                       check=lambda v: None if v == "" else
                                       dns1123_subdomain(v))
    """Pod ServiceAccount; '' mounts no token."""
    runtime_class_name: str = option("", "pod runtimeClassName", check=lambda v: None if v == ""
                                     else dns1123_subdomain(v))
    """RuntimeClass."""
    priority_class_name: str = option("", "pod priorityClassName",
                                      check=lambda v: None if v == "" else dns1123_subdomain(v))
    """PriorityClass."""
    host_network: bool = option(False, "pods use the node's network (brokers bind brokerPort "
                                "on the node)")
    """hostNetwork."""
    dns_policy: str = option("", "pod dnsPolicy ('' = ClusterFirst, or ClusterFirstWithHostNet "
                             "with hostNetwork); the brokers find each other by DNS name",
                             check=lambda v: None if v == "" else one_of(
                                 "ClusterFirst", "ClusterFirstWithHostNet", "Default",
                                 "None")(v))
    """dnsPolicy."""
    dns_config: dict = option({}, "pod dnsConfig (nameservers, searches, options), e.g. with "
                              "dnsPolicy None", check=_dns_config)
    """dnsConfig."""
    one_broker_per_node: bool = option(True, "required pod anti-affinity: never two brokers "
                                       "of this MiniCluster on one node")
    """Anti-affinity on kubernetes.io/hostname."""
    scheduler_name: str = option("", "pod schedulerName ('' = the default scheduler), e.g. "
                                 "fluxion", check=lambda v: None if v == "" else
                                 dns1123_label()(v))
    """Scheduler for the pods."""
    pod_group: bool = option(False, "gang-schedule: a PodGroup (scheduling.x-k8s.io) of minMember "
                             "size, the pods labelled into it")
    """Create a PodGroup and label the pods (needs the PodGroup CRD)."""
    pod_labels: dict = option({}, "extra pod labels", check=string_map)
    """Extra pod labels."""
    pod_annotations: dict = option({}, "extra pod annotations", check=string_map)
    """Extra pod annotations."""
    # -- Job and Pulumi ---------------------------------------------------------------------
    ttl_seconds_after_finished: int = option(-1, "seconds a finished Job stays (-1 = until "
                                             "removed from the stack; a TTL makes the next "
                                             "pulumi up --refresh run it again)",
                                             check=at_least(-1))
    """Job ttlSecondsAfterFinished (-1 = unset)."""
    backoff_limit: int = option(6, "pod failures tolerated before the Job fails (ephemeral: the "
                                "command's failure fails the Job at once regardless)",
                                check=at_least(0, 1000))
    """Job backoffLimit."""
    deadline_seconds: int = option(0, "Job activeDeadlineSeconds (0 = none)", check=at_least(0))
    """Job activeDeadlineSeconds."""
    timeout_seconds: int = option(1800, "ephemeral: how long pulumi up waits for the Job to "
                                  "complete", check=at_least(60))
    """Pulumi customTimeouts for the Job (ephemeral)."""

    @property
    def hosts(self) -> int:
        return self.max_size or self.size

    @property
    def quorum(self) -> int:
        return self.min_size if self.mode == "persistent" and self.min_size else self.size


def minicluster_hosts(args: MiniClusterArgs) -> list[str]:
    """Every broker's FQDN, rank order, ``maxSize`` of them."""
    return [f"{args.name}-{i}.{args.name}.{args.namespace}.svc.{args.cluster_domain}"
            for i in range(args.hosts)]


def broker_config(args: MiniClusterArgs, paths: Paths = POD_PATHS) -> str:
    """The config every rank shares (rank 0 adds ``[resource] path`` for R at start-up)."""
    domain = f"{args.name}.{args.namespace}.svc.{args.cluster_domain}"
    doc: dict[str, dict[str, Any]] = {
        "access": {"allow-guest-user": True, "allow-root-owner": True},
        "bootstrap": {
            "curve_cert": f"{paths.keys}/curve.cert",
            "default_port": args.broker_port,
            "default_bind": "tcp://*:%p",
            "default_connect": f"tcp://%h.{domain}:%p",
            "hosts": [{"host": hostlist_encode(f"{args.name}-{i}" for i in range(args.hosts))}],
        },
        "tbon": {"topo": f"kary:{args.fanout}"},
        "sched-fluxion-qmanager": {"queue-policy": args.queue_policy},
    }
    if args.host_network:
        # With the node's network the pod's kernel hostname is the node's, while the broker
        # goes by <name>-<i> (-Shostname); cores and GPUs are still verified against R.
        doc["resource"] = {"verify": {"default": "allow-extra", "gpu": "ignore",
                                      "hostname": "ignore"}}
    return dump_toml(doc, header=(
        f"Written by fluxinfra for MiniCluster {args.namespace}/{args.name}: rank i is pod "
        f"{args.name}-<i>\nof the indexed Job; {args.hosts} hosts, so the Job can grow to "
        "maxSize without a new config."))


def flux_run_argv(args: MiniClusterArgs) -> list[str]:
    """``flux run`` with the node/task/core/GPU counts (the command follows ``--``)."""
    argv = ["flux", "run", "-N", str(args.nodes or args.size)]
    if args.tasks:
        argv += ["-n", str(args.tasks)]
    if args.cores_per_task:
        argv += ["-c", str(args.cores_per_task)]
    if args.gpus_per_task:
        argv += ["-g", str(args.gpus_per_task)]
    return argv + list(args.flux_flags)


def _r_encode(args: MiniClusterArgs) -> str:
    hosts = f"{args.name}-[0-{args.hosts - 1}]" if args.hosts > 1 else f"{args.name}-0"
    cmd = ["flux", "R", "encode", f"--hosts={hosts}"]
    if args.cores_per_broker:
        cmd.append(f"--cores=0-{args.cores_per_broker - 1}" if args.cores_per_broker > 1
                   else "--cores=0")
        if args.gpus_per_broker:
            cmd.append(f"--gpus=0-{args.gpus_per_broker - 1}" if args.gpus_per_broker > 1
                       else "--gpus=0")
    else:
        cmd.append("--local")
    return shlex.join(cmd)


def _scripts(args: MiniClusterArgs, paths: Paths) -> dict[str, str]:
    view = args.flux_view_path if args.flux_view_image else ""
    ctx = {"name": args.name, "mode": args.mode, "config_dir": paths.config,
           "work_dir": paths.work, "view": view, "log_level": args.log_level,
           "r_encode": _r_encode(args), "pre_command": args.pre_command,
           "pre_command_quoted": shlex.quote(args.pre_command),
           "exit_no_flux": EXIT_NO_FLUX, "hosts": args.hosts}
    run = m.render_template(
        "minicluster-run.sh.j2", name=args.name, launcher=args.launcher,
        command_quoted=shlex.quote(args.command),
        run_argv=shlex.join(flux_run_argv(args)), command=args.command)
    scripts = {"start.sh": m.render_template("minicluster-start.sh.j2", **ctx),
               "flux-connect": m.render_template("minicluster-connect.j2", **ctx)}
    if args.mode == "ephemeral":
        scripts["run.sh"] = run
    return scripts


def config_data(args: MiniClusterArgs, paths: Paths = POD_PATHS) -> dict[str, str]:
    """The ConfigMap's data. ``quorum`` is the only key that depends on ``size``."""
    return {"broker.toml": broker_config(args, paths), **_scripts(args, paths),
            "quorum": f"{args.quorum}\n"}


def config_digest(data: dict[str, str]) -> str:
    """Digest of everything a running broker was started with, ``quorum`` aside: new values
    roll the pods (a new Job), a resize does not."""
    fixed = {k: v for k, v in data.items() if k != "quorum"}
    return hashlib.sha256(json.dumps(fixed, sort_keys=True).encode()).hexdigest()[:16]


def minicluster_keys_secret(args: MiniClusterArgs, curve_cert: str) -> dict[str, Any]:
    return m.secret(f"{args.name}-curve", args.namespace, {"curve.cert": curve_cert},
                    m.labels(COMPONENT, args.name))


def _user_mounts(args: MiniClusterArgs) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    volumes, mounts = [], []
    for vol in args.volumes:
        source = {k: v for k, v in vol.items() if k not in ("mountPath", "readOnly", "subPath")}
        volumes.append(source)
        mount = {"name": vol["name"], "mountPath": vol["mountPath"]}
        if vol.get("readOnly"):
            mount["readOnly"] = True
        if vol.get("subPath"):
            mount["subPath"] = vol["subPath"]
        mounts.append(mount)
    return volumes, mounts


def pod_labels(args: MiniClusterArgs) -> dict[str, str]:
    lbls = {**args.pod_labels, **m.labels(COMPONENT, args.name)}
    if args.pod_group:
        lbls[POD_GROUP_LABEL] = args.name
    return lbls


def pod_template(args: MiniClusterArgs, digest: str) -> dict[str, Any]:
    """The Job's pod template: nothing in it depends on ``size``."""
    name = args.name
    view = args.flux_view_path if args.flux_view_image else ""
    user_volumes, user_mounts = _user_mounts(args)
    work_mount = {"name": "work", "mountPath": WORK_DIR}
    mounts = [
        {"name": "config", "mountPath": CONFIG_DIR, "readOnly": True},
        {"name": "curve", "mountPath": KEYS_DIR, "readOnly": True},
        work_mount,
    ]
    if view:
        mounts.append({"name": "flux-view", "mountPath": view, "readOnly": True})
    if args.shm_size:
        mounts.append({"name": "shm", "mountPath": "/dev/shm"})
    env = [{"name": "FLUX_URI", "value": f"local://{WORK_DIR}/run/local"},
           *({"name": k, "value": v} for k, v in sorted(args.environment.items()))]
    runner: dict[str, Any] = {
        "name": "flux",
        "image": args.image,
        "imagePullPolicy": args.image_pull_policy,
        "command": ["/bin/bash", f"{CONFIG_DIR}/start.sh"],
        "env": env,
        "ports": [{"name": "broker", "containerPort": args.broker_port, "protocol": "TCP"}],
        "volumeMounts": mounts + user_mounts,
        # root in the container: the broker reads the 0400 certificate the Secret volume mounts
        # (owned by root) and writes its rundir; no privilege escalation, no added capabilities.
        "securityContext": {"runAsUser": 0, "allowPrivilegeEscalation": False,
                            "seccompProfile": {"type": "RuntimeDefault"}},
    }
    if args.working_dir:
        runner["workingDir"] = args.working_dir
    if args.resources:
        runner["resources"] = args.resources
    init: list[dict[str, Any]] = []
    if view:
        init.append({
            "name": "flux-view",
            "image": args.flux_view_image,
            "imagePullPolicy": args.image_pull_policy,
            "command": ["/bin/sh", "-c",
                        f'cp -a "{view}/." {VIEW_STAGING}/ && '
                        f"touch {VIEW_STAGING}/.fluxinfra-view-ready && "
                        f'echo "flux view: copied $(du -sh {VIEW_STAGING} | cut -f1) from {view}"'],
            "volumeMounts": [{"name": "flux-view", "mountPath": VIEW_STAGING}],
            "securityContext": {"allowPrivilegeEscalation": False,
                                "seccompProfile": {"type": "RuntimeDefault"}},
        })
    for service in args.services:
        sidecar = {"imagePullPolicy": "IfNotPresent", **service, "restartPolicy": "Always"}
        # Sidecars see the instance: the local socket lives in the shared work volume.
        sidecar["env"] = [*service.get("env", []),
                          {"name": "FLUX_URI", "value": f"local://{WORK_DIR}/run/local"}]
        sidecar["volumeMounts"] = [*service.get("volumeMounts", []),
                                   {**work_mount, "readOnly": True}]
        init.append(sidecar)
    volumes: list[dict[str, Any]] = [
        {"name": "config", "configMap": {"name": f"{name}-config", "defaultMode": 0o555}},
        {"name": "curve", "secret": {"secretName": f"{name}-curve", "defaultMode": 0o400}},
        {"name": "work", "emptyDir": {}},
    ]
    if view:
        volumes.append({"name": "flux-view", "emptyDir": {}})
    if args.shm_size:
        volumes.append({"name": "shm", "emptyDir": {"medium": "Memory",
                                                    "sizeLimit": args.shm_size}})
    spec: dict[str, Any] = {
        "subdomain": name,
        "restartPolicy": "Never" if args.mode == "ephemeral" else "OnFailure",
        "enableServiceLinks": False,
        "automountServiceAccountToken": bool(args.service_account_name),
        **({"initContainers": init} if init else {}),
        "containers": [runner],
        "volumes": volumes + user_volumes,
    }
    if args.service_account_name:
        spec["serviceAccountName"] = args.service_account_name
    for key, value in (("schedulerName", args.scheduler_name),
                       ("runtimeClassName", args.runtime_class_name),
                       ("priorityClassName", args.priority_class_name)):
        if value:
            spec[key] = value
    if args.node_selector:
        spec["nodeSelector"] = dict(args.node_selector)
    if args.tolerations:
        spec["tolerations"] = list(args.tolerations)
    if args.image_pull_secrets:
        spec["imagePullSecrets"] = [{"name": n} for n in args.image_pull_secrets]
    if args.host_network:
        spec["hostNetwork"] = True
        spec["dnsPolicy"] = "ClusterFirstWithHostNet"   # the brokers still resolve each other
    if args.dns_policy:
        spec["dnsPolicy"] = args.dns_policy
    if args.dns_config:
        spec["dnsConfig"] = dict(args.dns_config)
    if args.one_broker_per_node:
        spec["affinity"] = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": m.selector(COMPONENT, name)},
             "topologyKey": "kubernetes.io/hostname"}]}}
    annotations = {**args.pod_annotations, "fluxinfra.io/config-sha256": digest}
    return {"metadata": {"labels": pod_labels(args), "annotations": annotations}, "spec": spec}


def minicluster_job(args: MiniClusterArgs, digest: str) -> dict[str, Any]:
    lbls = m.labels(COMPONENT, args.name)
    spec: dict[str, Any] = {
        "completionMode": "Indexed",
        # Elastic indexed Job: completions and parallelism change together when size does.
        "completions": args.size,
        "parallelism": args.size,
        "backoffLimit": args.backoff_limit,
        "template": pod_template(args, digest),
    }
    if args.mode == "ephemeral":
        spec["podFailurePolicy"] = {"rules": [
            # Evicted or preempted pods are replaced without counting against backoffLimit.
            {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget",
                                                       "status": "True"}]},
            # Only rank 0 exits non-zero (workers retry their broker and exit 0 once rank 0
            # shuts the instance down): that is the command's status, final.
            {"action": "FailJob", "onExitCodes": {"containerName": "flux", "operator": "NotIn",
                                                  "values": [0]}},
        ]}
    if args.ttl_seconds_after_finished >= 0:
        spec["ttlSecondsAfterFinished"] = args.ttl_seconds_after_finished
    if args.deadline_seconds:
        spec["activeDeadlineSeconds"] = args.deadline_seconds
    annotations = {}
    if args.mode == "persistent":
        # A persistent Job never completes: Pulumi must not wait for it.
        annotations["pulumi.com/skipAwait"] = "true"
    meta = m.metadata(args.name, args.namespace, lbls)
    if annotations:
        meta["annotations"] = annotations
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta, "spec": spec}


def pod_group(args: MiniClusterArgs) -> dict[str, Any]:
    """scheduler-plugins' PodGroup: the pods start all together, ``size`` of them."""
    return {"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
            "metadata": m.metadata(args.name, args.namespace, m.labels(COMPONENT, args.name)),
            "spec": {"minMember": args.size}}


def minicluster_manifests(args: MiniClusterArgs) -> list[dict[str, Any]]:
    """Headless Service, ConfigMap, optional PodGroup and the indexed Job (the Secret comes
    separately)."""
    name, ns = args.name, args.namespace
    lbls = m.labels(COMPONENT, name)
    data = config_data(args)
    service = {
        "apiVersion": "v1", "kind": "Service",
        "metadata": m.metadata(name, ns, lbls),
        "spec": {"clusterIP": "None", "publishNotReadyAddresses": True,
                 "selector": m.selector(COMPONENT, name),
                 "ports": [{"name": "broker", "port": args.broker_port,
                            "targetPort": args.broker_port, "protocol": "TCP"}]},
    }
    config = {"apiVersion": "v1", "kind": "ConfigMap",
              "metadata": m.metadata(f"{name}-config", ns, lbls), "data": data}
    out = [service, config]
    if args.pod_group:
        out.append(pod_group(args))
    out.append(minicluster_job(args, config_digest(data)))
    return out


def connect_command(args: MiniClusterArgs) -> str:
    """The kubectl line that opens a shell on the instance (rank 0's pod)."""
    selector = f"job-name={args.name},batch.kubernetes.io/job-completion-index=0"
    return (f"kubectl exec -it -n {args.namespace} $(kubectl get pod -n {args.namespace} "
            f"-l {selector} -o name) -c flux -- {CONFIG_DIR}/flux-connect")


class MiniCluster(pulumi.ComponentResource):
    """A Flux instance of ``size`` pods; ``lead`` is rank 0's FQDN, ``connect`` a shell on it."""

    lead: pulumi.Output[str]
    connect: pulumi.Output[str]

    def __init__(self, name: str, args: MiniClusterArgs,
                 opts: pulumi.ResourceOptions | None = None):
        super().__init__("fluxinfra:k8s:MiniCluster", name, {}, opts)
        self.keys = ClusterKeys(f"{name}-keys", label=f"minicluster-{args.namespace}-{args.name}",
                                opts=pulumi.ResourceOptions(parent=self))
        cert_b64 = self.keys.curve_cert.apply(lambda c: base64.b64encode(c.encode()).decode())
        secret = {**minicluster_keys_secret(args, ""),
                  "data": pulumi.Output.secret(cert_b64.apply(lambda b: {"curve.cert": b}))}
        timeouts = None
        if args.mode == "ephemeral":
            wait = f"{args.timeout_seconds}s"
            timeouts = pulumi.CustomTimeouts(create=wait, update=wait)
        self.resources = declare_all([secret, *minicluster_manifests(args)], name, self,
                                     workload_timeouts=timeouts)
        self.lead = pulumi.Output.from_input(minicluster_hosts(args)[0])
        self.connect = pulumi.Output.from_input(connect_command(args))
        self.register_outputs({"lead": self.lead, "connect": self.connect})
