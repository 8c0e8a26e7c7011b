"""The fluxinfra Pulumi program: read the stack config, wire the components, export outputs.

Deploy with ``pulumi up --stack dev`` (see docs/kubernetes.md), or render offline with
``fluxinfra render --stack dev --out build/manifests``. Components never read config; this file
is the only place that does, and it validates all of it before declaring anything.
"""

import pulumi

from fluxinfra.errors import ConfigError
from fluxinfra.k8s.cluster import Cluster
from fluxinfra.k8s.fluxion_service import FluxionService
from fluxinfra.k8s.installer import FluxInstaller
from fluxinfra.k8s.manifests import labels, namespace
from fluxinfra.k8s.minicluster import MiniCluster
from fluxinfra.k8s.queue import FluxQueue
from fluxinfra.k8s.resources import declare
from fluxinfra.k8s.scheduler import FluxScheduler
from fluxinfra.k8s.stack import (
    QUEUE_NAME,
    SCHEDULER_NAME,
    SERVICE_NAME,
    load_stack_settings,
    stack_config,
)

try:
    settings = load_stack_settings(pulumi.get_stack(), stack_config())
except ConfigError as exc:
    # pulumi prints a RunError's message alone (no traceback); fluxinfra render re-raises the
    # ConfigError it carries.
    raise pulumi.RunError(str(exc)) from exc

cluster = Cluster("cluster", settings.cluster)
pulumi.export("kubeconfig", cluster.kubeconfig)
on_cluster = pulumi.ResourceOptions(providers={"kubernetes": cluster.provider})

if settings.installer is not None:
    # The installer has its own (privileged) namespace.
    installer = FluxInstaller("flux-installer", settings.installer, opts=on_cluster)
    pulumi.export("installerNamespace", installer.namespace)
    pulumi.export("curvePublicKey", installer.keys.curve_public)

if settings.fluxion_service is not None or settings.scheduler is not None:
    # The service and the scheduler share one namespace, held to the restricted Pod Security level.
    system_namespace = declare(
        namespace(settings.namespace, "restricted", labels("fluxinfra", settings.namespace)),
        "system-namespace", on_cluster)
    in_system_namespace = pulumi.ResourceOptions.merge(
        on_cluster, pulumi.ResourceOptions(depends_on=[system_namespace]))

    if settings.fluxion_service is not None:
        service = FluxionService(SERVICE_NAME, settings.fluxion_service,
                                 opts=in_system_namespace)
        pulumi.export("fluxionServiceAddress", service.address)

    if settings.scheduler is not None:
        scheduler = FluxScheduler(SCHEDULER_NAME, settings.scheduler, opts=in_system_namespace)
        pulumi.export("schedulerName", scheduler.scheduler_name)

    if settings.queue is not None:
        queue = FluxQueue(QUEUE_NAME, settings.queue, opts=in_system_namespace)
        pulumi.export("queueWebhook", queue.webhook)

for mc_args in settings.miniclusters:
    mc_opts = on_cluster
    if mc_args.pod_group and settings.scheduler is not None and \
            mc_args.scheduler_name == settings.scheduler.scheduler_name:
        # Its PodGroup needs the CRD, and its pods the scheduler, that this stack installs.
        mc_opts = pulumi.ResourceOptions.merge(on_cluster,
                                               pulumi.ResourceOptions(depends_on=[scheduler]))
    minicluster = MiniCluster(f"minicluster-{mc_args.namespace}-{mc_args.name}", mc_args,
                              opts=mc_opts)
    pulumi.export(f"minicluster-{mc_args.name}-lead", minicluster.lead)
    pulumi.export(f"minicluster-{mc_args.name}-connect", minicluster.connect)
