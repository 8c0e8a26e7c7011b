"""Leader election on a ``coordination.k8s.io/v1`` Lease (client-go's leaderelection, in small).

Only the holder of the lease schedules; other replicas stand by (healthy, not binding). The
holder renews every ``retry_seconds``; if it cannot renew for ``renew_seconds`` it stops (and the
process exits, as kube-scheduler does, so it restarts clean).

**Expiry is judged on the local clock only.** A replica never compares the holder's
``renewTime`` with its own wall clock (their clocks may disagree by minutes). It remembers the
lease record it last saw and *when it saw it change*, on its own monotonic clock; the lease has
expired once the record has not changed for ``leaseDurationSeconds`` of local time. That is
client-go's ``observedTime`` rule: clock skew between replicas cannot make a standby steal a
live lease, nor keep it waiting on a dead one. A standby that has just started therefore waits
one full lease duration before taking over an abandoned lease. ``renewTime`` and
``acquireTime`` are still written (wall-clock MicroTimes, for people and tools to read).

Every write carries the lease's resourceVersion, so two standbys racing for an expired lease
cannot both win (409). On a clean shutdown the holder releases the lease (empty holder, 1 s
duration) for a fast hand-over. A holder whose scheduling loop has stalled stops renewing
(``keep(..., healthy=...)``), so a standby takes over instead of a stuck leader keeping the
lease alive. Becoming and stopping leader are reported as Events on the Lease (reason
``LeaderElection``), as client-go does.

>>> lease_body("ns", "fluxion", "pod-a", now=0.0, acquired=0.0, transitions=0,
...            duration=15)["spec"]["renewTime"]
'1970-01-01T00:00:00.000000Z'
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from fluxinfra.scheduler.events import lease_event, micro_time
from fluxinfra.scheduler.kube import ApiError, KubeApi

__all__ = ["LeaderElector", "lease_body"]

log = logging.getLogger(__name__)

_RECORD = ("holderIdentity", "leaseDurationSeconds", "acquireTime", "renewTime",
           "leaseTransitions")


def lease_body(namespace: str, name: str, holder: str, *, now: float, acquired: float,
               transitions: int, duration: int, resource_version: str = "") -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": namespace}
    if resource_version:
        meta["resourceVersion"] = resource_version
    return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": meta,
            "spec": {"holderIdentity": holder, "leaseDurationSeconds": duration,
                     "acquireTime": micro_time(acquired), "renewTime": micro_time(now),
                     "leaseTransitions": transitions}}


def _record(lease: dict[str, Any]) -> tuple[Any, ...]:
    spec = lease.get("spec") or {}
    return tuple(spec.get(k) for k in _RECORD)


class LeaderElector:
    """``clock`` is local and monotonic (expiry); ``wall_clock`` only stamps what is written."""

    def __init__(self, api: KubeApi, namespace: str, name: str, identity: str, *,
                 lease_seconds: int = 15, renew_seconds: float = 10.0,
                 retry_seconds: float = 2.0, clock: Callable[[], float] = time.monotonic,
                 wall_clock: Callable[[], float] = time.time,
                 controller: str = "fluxion") -> None:
        self.api, self.namespace, self.name, self.identity = api, namespace, name, identity
        self.lease_seconds = lease_seconds
        self.renew_seconds = renew_seconds
        self.retry_seconds = retry_seconds
        self.clock = clock
        self.wall_clock = wall_clock
        self.controller = controller
        self.renewed_at = 0.0
        self.leading = threading.Event()
        #: the lease record last seen, and when (local clock) it was last seen to change
        self.observed: tuple[Any, ...] | None = None
        self.observed_at = 0.0

    def _observe(self, lease: dict[str, Any], now: float) -> None:
        record = _record(lease)
        if record != self.observed:
            self.observed, self.observed_at = record, now

    def try_acquire(self) -> bool:
        """One attempt to take or renew the lease; True while we hold it."""
        now = self.clock()
        wall = self.wall_clock()
        try:
            lease = self.api.get_lease(self.namespace, self.name)
            if lease is None:
                body = lease_body(self.namespace, self.name, self.identity, now=wall,
                                  acquired=wall, transitions=0, duration=self.lease_seconds)
                self.api.create_lease(self.namespace, body)
            else:
                self._observe(lease, now)
                spec = lease.get("spec") or {}
                holder = spec.get("holderIdentity") or ""
                duration = float(spec.get("leaseDurationSeconds") or self.lease_seconds)
                valid = self.observed_at + duration > now
                if holder and holder != self.identity and valid:
                    return self._lost()
                mine = holder == self.identity
                transitions = int(spec.get("leaseTransitions") or 0) + (0 if mine else 1)
                acquire_time = spec.get("acquireTime") if mine else None
                rv = str((lease.get("metadata") or {}).get("resourceVersion") or "")
                body = lease_body(self.namespace, self.name, self.identity, now=wall,
                                  acquired=wall, transitions=transitions,
                                  duration=self.lease_seconds, resource_version=rv)
                if acquire_time:
                    body["spec"]["acquireTime"] = acquire_time
                self.api.replace_lease(self.namespace, self.name, body)
        except ApiError as exc:
            if not exc.conflict:
                log.warning("lease %s/%s: %s", self.namespace, self.name, exc)
            return self._lost()
        self._observe(body, now)
        self.renewed_at = now
        if not self.leading.is_set():
            log.info("%s now leads (lease %s/%s)", self.identity, self.namespace, self.name)
            self.leading.set()
            self._event(lease, f"{self.identity} became leader")
        return True

    def _lost(self) -> bool:
        """Failed attempt: still leading only while the last renewal is recent enough."""
        if self.leading.is_set() and self.clock() - self.renewed_at >= self.renew_seconds:
            self.leading.clear()
        return self.leading.is_set()

    def _event(self, lease: dict[str, Any] | None, note: str) -> None:
        """An Event on the Lease (best effort: a failure is logged, never raised)."""
        uid = str(((lease or {}).get("metadata") or {}).get("uid") or "")
        try:
            self.api.create_event(self.namespace, lease_event(
                self.namespace, self.name, uid, "LeaderElection", note, self.controller,
                self.identity))
        except ApiError as exc:
            log.warning("lease %s/%s: recording %r failed: %s", self.namespace, self.name,
                        note, exc)

    def acquire(self, stop: threading.Event) -> bool:
        """Block until we lead (True) or ``stop`` is set (False)."""
        while not stop.is_set():
            if self.try_acquire():
                return True
            stop.wait(self.retry_seconds)
        return False

    def keep(self, stop: threading.Event, on_lost: Callable[[], None],
             healthy: Callable[[], bool] | None = None) -> threading.Thread:
        """Renew in a daemon thread; call ``on_lost`` once if the lease slips away. While
        ``healthy()`` is False (a stalled scheduling loop) the lease is not renewed, so it
        slips away after ``renew_seconds`` and a standby takes over."""
        def loop() -> None:
            while not stop.wait(self.retry_seconds):
                if healthy is not None and not healthy():
                    log.error("%s: the scheduler is unhealthy; not renewing the lease %s/%s",
                              self.identity, self.namespace, self.name)
                    still = self._lost()
                else:
                    still = self.try_acquire()
                if not still:
                    log.error("%s lost the lease %s/%s; stopping", self.identity,
                              self.namespace, self.name)
                    on_lost()
                    # Only after stopping: recording it may wait out a client timeout.
                    self._event(None, f"{self.identity} stopped leading")
                    return
        thread = threading.Thread(target=loop, name="leader-renew", daemon=True)
        thread.start()
        return thread

    def release(self) -> None:
        """Hand the lease over at once (clean shutdown)."""
        if not self.leading.is_set():
            return
        try:
            lease = self.api.get_lease(self.namespace, self.name)
            if lease and (lease.get("spec") or {}).get("holderIdentity") == self.identity:
                wall = self.wall_clock()
                spec = lease["spec"]
                self.api.replace_lease(self.namespace, self.name, lease_body(
                    self.namespace, self.name, "", now=wall, acquired=wall,
                    transitions=int(spec.get("leaseTransitions") or 0), duration=1,
                    resource_version=str(lease["metadata"].get("resourceVersion") or "")))
        except ApiError as exc:
            log.warning("releasing lease %s/%s: %s", self.namespace, self.name, exc)
        self.leading.clear()
