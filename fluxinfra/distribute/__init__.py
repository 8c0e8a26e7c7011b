"""Content distribution over a Flux instance's broker tree: pull once, fan out through Flux.

``fluxinfra distribute SOURCE`` puts SOURCE (a file, a directory, an image archive, or an image
the lead node pulls once) into the instance's content store with ``flux archive create``, runs
``flux archive extract`` on every target rank at once through ``flux exec`` (each rank's broker
loads the blobs from its TBON parent's cache, so every blob crosses each tree edge once), checks
a sha256 manifest on every rank, renames the content into place, optionally imports images into
containerd or podman, removes the archive and reports per rank; ``--resume`` retries only the
ranks left undone. No Pulumi, no Kubernetes client: Kubernetes is reached through ``kubectl``.

    from fluxinfra.distribute import Options, distribute
    report = distribute(Options("/data/model.tar", dest="/scratch/models"))
    report.ok, {r: x.status for r, x in report.results.items()}

Modules: :mod:`.run` (the orchestration), :mod:`.agent` (the per-rank side, shipped to the nodes
as source), :mod:`.flux` (the flux commands), :mod:`.topology` (the tree), :mod:`.source`
(SOURCE on the lead node), :mod:`.state` (``--resume``), :mod:`.report` (output),
:mod:`.kube` (the installer's instance through ``kubectl exec``).
"""

from fluxinfra.distribute.errors import DistributeError, FluxCommandError
from fluxinfra.distribute.flux import FluxClient, Instance
from fluxinfra.distribute.run import (
    Distribution,
    Options,
    RankResult,
    Report,
    distribute,
    parse_ranks,
    parse_size,
)
from fluxinfra.distribute.topology import Tree

__all__ = ["DistributeError", "FluxCommandError", "FluxClient", "Instance", "Distribution",
           "Options", "RankResult", "Report", "distribute", "parse_ranks", "parse_size", "Tree"]
