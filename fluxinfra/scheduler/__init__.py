"""fluxinfra's Kubernetes scheduler: Fluxion's policies for pods and pod groups.

Modules, from the cluster inwards (docs/scheduler.md has the user's view):

- :mod:`~fluxinfra.scheduler.kube` - the one narrow interface to the API (a Protocol) and its
  error type; :mod:`~fluxinfra.scheduler.client` implements it over the ``kubernetes`` client;
- :mod:`~fluxinfra.scheduler.informer` - list-then-watch with resync and backoff;
- :mod:`~fluxinfra.scheduler.leader` - leader election on a Lease;
- :mod:`~fluxinfra.scheduler.runner` - start-up (rebuild before binding), the apply/schedule loop;
- :mod:`~fluxinfra.scheduler.core` - the scheduler and its event handlers, laid out as
  kube-scheduler's: :mod:`~fluxinfra.scheduler.cache` (cluster state, exact accounting),
  :mod:`~fluxinfra.scheduler.scheduling_queue` (groups in serve order),
  :mod:`~fluxinfra.scheduler.cycle` (one scheduling cycle, a typed result per group),
  :mod:`~fluxinfra.scheduler.binding` (binding, the ``Binder`` protocol),
  :mod:`~fluxinfra.scheduler.gangs` (Coscheduling: PodGroups), with
  :mod:`~fluxinfra.scheduler.config`'s settings;
- :mod:`~fluxinfra.scheduler.allocator` - the placement interface and the spread baseline;
  :mod:`~fluxinfra.scheduler.fluxion` - placement through Fluxion's matcher (in process or gRPC);
- :mod:`~fluxinfra.scheduler.binder` - binds, Events and conditions through the API;
- :mod:`~fluxinfra.scheduler.pods`, :mod:`~fluxinfra.scheduler.events`,
  :mod:`~fluxinfra.scheduler.metrics` - what is read from pods, what users see;
- :mod:`~fluxinfra.scheduler.simulator` - the core replaying a workload in simulated time;
- :mod:`~fluxinfra.scheduler.main` - the scheduler's process (flags, serving, leading,
  shutdown), with what it hosts handed in: ``fluxinfra scheduler`` and ``python -m
  fluxinfra.scheduler`` (:mod:`fluxinfra.cli.scheduler`) hand in the queue.

Importing this package has no side effects and loads no Kubernetes or gRPC code.
"""
