"""fluxinfra's Kubernetes scheduler: Fluxion's policies for pods and pod groups.

Modules, from the cluster inwards:

- :mod:`~fluxinfra.scheduler.kube` - the one narrow interface to the API (a Protocol) and its
  error type; :mod:`~fluxinfra.scheduler.client` implements it over the ``kubernetes`` client;
- :mod:`~fluxinfra.scheduler.informer` - list-then-watch with resync and backoff;
- :mod:`~fluxinfra.scheduler.pods` - requests, groups, durations and priorities read from pods;
- :mod:`~fluxinfra.scheduler.events` and :mod:`~fluxinfra.scheduler.metrics` - what users see.

Importing this package has no side effects and loads no Kubernetes or gRPC code.
"""
