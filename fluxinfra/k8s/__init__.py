"""fluxinfra's Pulumi components for Kubernetes.

One component per module (``Cluster``, ``FluxInstaller``, ``FluxionService``, ``FluxScheduler``,
``MiniCluster``), each with its ``XArgs`` dataclass and pure manifest builders beside it. Import the
component modules directly (``from fluxinfra.k8s.scheduler import FluxScheduler``); this package's
``__init__`` imports nothing, so the pure helpers load without Pulumi.
"""
