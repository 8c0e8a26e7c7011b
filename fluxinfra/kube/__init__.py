"""Kubernetes objects as fluxinfra reads them, shared by the scheduler, the queue's webhook and
the Fluxion service (none of which may import another for this).

- :mod:`~fluxinfra.kube.shapes` - type checks for the fields read from Node and Pod objects:
  a field of the wrong type, or a quantity no Kubernetes server could hold, becomes one
  :class:`~fluxinfra.kube.shapes.ShapeError` naming the field, the value and the fix.
- :mod:`~fluxinfra.kube.selectors` - label selectors, node affinity, taints and tolerations as
  kube-scheduler evaluates them: the one copy of those rules (the scheduler's filters and the
  graph built from Node objects both use it).

A leaf beside the matcher: it imports only :mod:`fluxinfra.errors` and the matcher's quantity
parser. Importing it has no side effects.
"""
