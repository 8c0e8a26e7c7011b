"""The fluxinfra Kubernetes test bed: a real control plane, real nodes and hollow nodes on one
machine, for the e2e suite and benchmarks. ``scripts/kube`` is its command line.

>>> from kubebed import Bed                     # doctest: +SKIP
>>> bed = Bed.up("mine")                        # doctest: +SKIP
>>> bed.kubeconfig, bed.node_name               # doctest: +SKIP
>>> bed.down()                                  # doctest: +SKIP
"""

from .bed import Bed, BedError, all_beds, preflight
from .hollow import HOLLOW_LABEL, node_object
from .images import BUSYBOX_IMAGE, busybox_image, docker_archive
from .layout import MAX_NODES

__all__ = ["BUSYBOX_IMAGE", "HOLLOW_LABEL", "MAX_NODES", "Bed", "BedError", "all_beds",
           "busybox_image", "docker_archive", "node_object", "preflight"]
