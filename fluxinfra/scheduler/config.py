"""The scheduler core's settings (kube-scheduler's ``KubeSchedulerConfiguration``, the part the
core reads): one dataclass, filled by ``fluxinfra scheduler``'s flags, the simulator and tests.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["SchedulerConfig"]


@dataclass
class SchedulerConfig:
    scheduler_name: str = "fluxion"
    #: seconds a pod is expected to run when it has no ``fluxinfra.io/duration`` annotation
    default_duration: int = 3600
    #: reservations per cycle: 1 is EASY backfill, 0 plain first-fit with skipping
    reserve_depth: int = 1
    #: groups tried per cycle (Fluxion's queue depth), bounding a cycle's cost
    queue_depth: int = 1000
    #: how long to hold an overrunning job's resources each time it is extended
    extension: int = 600
    #: seconds before the first retry of a failed bind (doubling, up to 30 s)
    bind_retry_after: float = 1.0
    #: seconds a failed bind is retried to its reserved node, when the group sets no
    #: ``scheduleTimeoutSeconds``
    bind_timeout: int = 60
    #: lone pods with identical requests matched together (1 disables batching)
    batch_size: int = 64
    #: preempt lower-priority pods (kube-scheduler's DefaultPreemption)
    preemption: bool = True
    #: bind while the loop goes on (when the binder can: ``submit``), the pods assumed
    async_binds: bool = True
    #: seconds between two status writes of a PodGroup whose phase stays (only its counts
    #: move, as members turn Running); a new phase is written at once
    podgroup_status_interval: float = 1.0
