"""Leader election on a ``coordination.k8s.io/v1`` Lease (client-go's leaderelection, in small).

Only the holder of the lease schedules; other replicas stand by (healthy, not binding). The
holder renews every ``retry_seconds``; if it cannot renew for ``renew_seconds`` it stops (and the
process exits, as kube-scheduler does, so it restarts clean). A standby takes the lease once the
holder's ``renewTime + leaseDurationSeconds`` has passed. Every write carries the lease's
resourceVersion, so two standbys racing for an expired lease cannot both win (409). On a clean
shutdown the holder releases the lease (empty holder, 1 s duration) for a fast hand-over.

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

from fluxinfra.scheduler.events import micro_time, parse_time
from fluxinfra.scheduler.kube import ApiError, KubeApi

__all__ = ["LeaderElector", "lease_body"]

log = logging.getLogger(__name__)


def lease_body(namespace: str, name: str, holder: str, *, now: float, acquired: float,
               transitions: int, duration: int, resource_version: str = "") -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": namespace}
    if resource_version:
        meta["resourceVersion"] = resource_version
    return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": meta,
            "spec": {"holderIdentity": holder, "leaseDurationSeconds": duration,
                     "acquireTime": micro_time(acquired), "renewTime": micro_time(now),
                     "leaseTransitions": transitions}}


class LeaderElector:
    def __init__(self, api: KubeApi, namespace: str, name: str, identity: str, *,
                 lease_seconds: int = 15, renew_seconds: float = 10.0,
                 retry_seconds: float = 2.0, clock: Callable[[], float] = time.time) -> None:
        self.api, self.namespace, self.name, self.identity = api, namespace, name, identity
        self.lease_seconds = lease_seconds
        self.renew_seconds = renew_seconds
        self.retry_seconds = retry_seconds
        self.clock = clock
        self.renewed_at = 0.0
        self.leading = threading.Event()

    def try_acquire(self) -> bool:
        """One attempt to take or renew the lease; True while we hold it."""
        now = self.clock()
        try:
            lease = self.api.get_lease(self.namespace, self.name)
            if lease is None:
                self.api.create_lease(self.namespace, lease_body(
                    self.namespace, self.name, self.identity, now=now, acquired=now,
                    transitions=0, duration=self.lease_seconds))
            else:
                spec = lease.get("spec") or {}
                holder = spec.get("holderIdentity") or ""
                expires = parse_time(spec.get("renewTime")) + float(
                    spec.get("leaseDurationSeconds") or self.lease_seconds)
                if holder and holder != self.identity and expires > now:
                    return self._lost()
                mine = holder == self.identity
                transitions = int(spec.get("leaseTransitions") or 0) + (0 if mine else 1)
                acquired = parse_time(spec.get("acquireTime")) if mine else now
                rv = str((lease.get("metadata") or {}).get("resourceVersion") or "")
                self.api.replace_lease(self.namespace, self.name, lease_body(
                    self.namespace, self.name, self.identity, now=now, acquired=acquired,
                    transitions=transitions, duration=self.lease_seconds,
                    resource_version=rv))
        except ApiError as exc:
            if not exc.conflict:
                log.warning("lease %s/%s: %s", self.namespace, self.name, exc)
            return self._lost()
        if not self.leading.is_set():
            log.info("%s now leads (lease %s/%s)", self.identity, self.namespace, self.name)
        self.renewed_at = now
        self.leading.set()
        return True

    def _lost(self) -> bool:
        """Failed attempt: still leading only while the last renewal is recent enough."""
        if self.leading.is_set() and self.clock() - self.renewed_at >= self.renew_seconds:
            self.leading.clear()
        return self.leading.is_set()

    def acquire(self, stop: threading.Event) -> bool:
        """Block until we lead (True) or ``stop`` is set (False)."""
        while not stop.is_set():
            if self.try_acquire():
                return True
            stop.wait(self.retry_seconds)
        return False

    def keep(self, stop: threading.Event, on_lost: Callable[[], None]) -> threading.Thread:
        """Renew in a daemon thread; call ``on_lost`` once if the lease slips away."""
        def loop() -> None:
            while not stop.wait(self.retry_seconds):
                if not self.try_acquire():
                    log.error("%s lost the lease %s/%s; stopping", self.identity,
                              self.namespace, self.name)
                    on_lost()
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
                now = self.clock()
                spec = lease["spec"]
                self.api.replace_lease(self.namespace, self.name, lease_body(
                    self.namespace, self.name, "", now=now, acquired=now,
                    transitions=int(spec.get("leaseTransitions") or 0), duration=1,
                    resource_version=str(lease["metadata"].get("resourceVersion") or "")))
        except ApiError as exc:
            log.warning("releasing lease %s/%s: %s", self.namespace, self.name, exc)
        self.leading.clear()
