"""Kubernetes objects as fluxinfra reads them, shared by the scheduler, the queue, the
Fluxion service and the Pulumi components (none of which may import another for this), and
the graphs built from them.

- :mod:`~fluxinfra.kube.quantity` - Kubernetes quantities (``"1500m"``, ``"16Gi"``) as exact
  numbers, rounded as Kubernetes rounds.
- :mod:`~fluxinfra.kube.resources` - what a Pod requests (``resource.PodRequests``) and what a
  Node offers, in base units (millicores, bytes, counts).
- :mod:`~fluxinfra.kube.shapes` - type checks for the fields read from Node and Pod objects:
  a field of the wrong type, or a quantity no Kubernetes server could hold, becomes one
  :class:`~fluxinfra.kube.shapes.ShapeError` naming the field, the value and the fix.
- :mod:`~fluxinfra.kube.selectors` - label selectors, node affinity, taints and tolerations as
  kube-scheduler evaluates them: the one copy of those rules (the scheduler's filters and the
  graphs built from Node objects both use it).
- :mod:`~fluxinfra.kube.graph` - Nodes (and bound Pods) -> the whole-core resource graph
  (cores, memory chunks, GPUs per node; what the Fluxion service and ``fluxinfra query -f k8s``
  load), node inventories, their differences and node insertion plans.
- :mod:`~fluxinfra.kube.pools` - Nodes -> the scheduler's exact graph: one pool per resource
  name per node, under configurable topology levels, and the jobspecs and JGFs that go with it.
- :mod:`~fluxinfra.kube.names` - Kubernetes naming rules (DNS-1123 labels and subdomains),
  the one copy the stack's checks, the queue's webhook and the test bed use.
- :mod:`~fluxinfra.kube.fluxjob` - the queue's API: its labels, the scheduling gate, the
  FluxJob and FluxJobQueue custom resources (CRDs and object builders), read by the queue and
  by the Pulumi component that installs them.

The matcher knows no Kubernetes: this package builds on it (the graphs are the matcher's
:class:`~fluxinfra.matcher.graph.ResourceGraph`), never the other way round. Besides the
matcher it imports only fluxinfra's base modules (``errors``, ``inputs``). Importing it has no
side effects.
"""
