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

Importing this package does no work and changes nothing outside it: subpackages are imported
only when used, and the matcher's compiled modules, where the build made them, are found by
Python's own import beside their ``.py`` files. The one exception is asked for by name:
``FLUXINFRA_PURE_PYTHON=1`` installs a finder that loads those modules' ``.py`` instead
(:mod:`fluxinfra.compiled`).
"""

import os as _os

__version__ = "0.1.0"

if _os.environ.get("FLUXINFRA_PURE_PYTHON", "") not in ("", "0"):
    from fluxinfra import compiled as _compiled

    _compiled.install()
