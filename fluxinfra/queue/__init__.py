"""fluxinfra's queue: admission for Jobs and pods, FluxJobs, placement by Fluxion ahead of time.

The flow (docs/queue.md has the user's view, side by side with fluxqueue and Kueue):

1. :mod:`~fluxinfra.queue.webhook` - the admission webhook (HTTPS, ``admission.k8s.io/v1``):
   a batch Job in an opted-in namespace (or labelled ``fluxinfra.io/queue-name``) is created
   suspended, a pod of any other owner gets the scheduling gate ``fluxinfra.io/queue``; bad
   requests are refused with a message naming the field;
2. :mod:`~fluxinfra.queue.controller` - inside the scheduler process (``fluxinfra scheduler
   --queue``): one ``FluxJob`` per unit of work; its pods are placed by the scheduler's own core,
   matcher and books (one set of Fluxion books for queued and unqueued pods alike), FCFS with
   EASY backfill and priorities; admitted work is un-suspended / un-gated with its nodes pinned
   and bound by the scheduler to exactly those nodes; finished pods release their share. It
   wires the pieces laid out as Kueue's ``jobframework``: the two integrations behind one
   interface (:mod:`~fluxinfra.queue.workload`; :mod:`~fluxinfra.queue.jobs`,
   :mod:`~fluxinfra.queue.gated`), :mod:`~fluxinfra.queue.admission`, the FluxJob state
   machine (:mod:`~fluxinfra.queue.states`), the status writer
   (:mod:`~fluxinfra.queue.status`), the pool of API writes (:mod:`~fluxinfra.queue.writes`)
   and the core's binder (:mod:`~fluxinfra.queue.binding`);
3. :mod:`~fluxinfra.queue.policy` - per-namespace queues (``FluxJobQueue``: how many running,
   cores, memory, GPUs) and the order people see;
4. :mod:`~fluxinfra.kube.fluxjob` (beside the other Kubernetes objects, not in this package) -
   the API definition: labels, annotations, the FluxJob and FluxJobQueue CRDs (structural
   schemas) and object builders; the Pulumi component (:mod:`fluxinfra.k8s.queue`) installs
   them from there without importing the queue;
5. :mod:`~fluxinfra.queue.kube` - the queue's narrow interface to the API server and its client;
6. :mod:`~fluxinfra.queue.cli` - ``fluxinfra queue`` and the ``kubectl flux-queue`` plugin.

Importing this package has no side effects and loads no Kubernetes, Pulumi or gRPC code.
"""
