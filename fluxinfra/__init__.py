"""fluxinfra: Flux Framework and Fluxion on Kubernetes (Pulumi) and on bare hosts (Ansible).

Subpackages, one concern each (the map and the dependency direction: docs/design/architecture.md):

- ``fluxinfra.matcher``   the Fluxion-compatible resource-graph matcher (a leaf: no Pulumi, no k8s).
- ``fluxinfra.k8s``       Pulumi ComponentResources and the pure manifest builders beside them.
- ``fluxinfra.scheduler`` the Kubernetes scheduler for pods and pod groups.
- ``fluxinfra.service``   the gRPC Fluxion service and its client.
- ``fluxinfra.queue``     the Fluxion queue: admission webhook, FluxJobs, a controller the scheduler
                          hosts.
- ``fluxinfra.distribute`` content fanned out to every node through the Flux broker tree.
- ``fluxinfra.cli``       the ``fluxinfra`` command; nothing imports it.

Importing this package does no work: subpackages are imported only when used. It only lets
the matcher's compiled modules be found, where this environment has them (one ``stat``:
:mod:`fluxinfra.compiled`).
"""

from fluxinfra import compiled as _compiled

__version__ = "0.1.0"

_compiled.install()
