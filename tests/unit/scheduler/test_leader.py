"""Leader election on a Lease (validated against the schema by the API double)."""

from __future__ import annotations

import threading

from fluxinfra.scheduler.leader import LeaderElector

from .kube_double import KubeApiDouble


class Clock:
    def __init__(self) -> None:
        self.t = 1_000_000.0

    def __call__(self) -> float:
        return self.t


def electors(api: KubeApiDouble, clock: Clock) -> tuple[LeaderElector, LeaderElector]:
    return tuple(LeaderElector(api, "kube-system", "fluxion", who, lease_seconds=15,
                               renew_seconds=10, clock=clock) for who in ("a", "b"))


def test_one_leader_at_a_time_and_renewal_keeps_it() -> None:
    api, clock = KubeApiDouble(), Clock()
    a, b = electors(api, clock)
    assert a.try_acquire() and not b.try_acquire()
    clock.t += 10
    assert a.try_acquire(), "the holder renews"
    clock.t += 10
    assert not b.try_acquire(), "renewed 10 s ago: not expired"
    assert api.leases["kube-system/fluxion"]["spec"]["holderIdentity"] == "a"


def test_expired_lease_is_taken_over_and_the_old_leader_steps_down() -> None:
    api, clock = KubeApiDouble(), Clock()
    a, b = electors(api, clock)
    a.try_acquire()
    clock.t += 16
    assert b.try_acquire()
    spec = api.leases["kube-system/fluxion"]["spec"]
    assert spec["holderIdentity"] == "b" and spec["leaseTransitions"] == 1
    assert not a.try_acquire() and not a.leading.is_set()


def test_racing_standbys_cannot_both_win() -> None:
    api, clock = KubeApiDouble(), Clock()
    a, b = electors(api, clock)
    a.try_acquire()
    clock.t += 16
    stale = api.get_lease("kube-system", "fluxion")
    assert b.try_acquire()
    real_get = api.get_lease
    api.get_lease = lambda ns, name: stale  # type: ignore[method-assign]
    c = LeaderElector(api, "kube-system", "fluxion", "c", clock=clock)
    assert not c.try_acquire(), "a write with a stale resourceVersion gets 409"
    api.get_lease = real_get  # type: ignore[method-assign]


def test_api_errors_keep_leadership_until_the_renew_deadline() -> None:
    api, clock = KubeApiDouble(), Clock()
    a, _ = electors(api, clock)
    a.try_acquire()
    api.fail_next("get_lease", 503, times=10)
    clock.t += 5
    assert a.try_acquire(), "one failed renewal is tolerated"
    clock.t += 6
    assert not a.try_acquire(), "11 s without a renewal: step down"


def test_release_hands_over_immediately() -> None:
    api, clock = KubeApiDouble(), Clock()
    a, b = electors(api, clock)
    a.try_acquire()
    a.release()
    clock.t += 2
    assert b.try_acquire()


def test_keep_calls_on_lost_when_the_lease_is_taken() -> None:
    api, clock = KubeApiDouble(), Clock()
    a = LeaderElector(api, "ns", "l", "a", retry_seconds=0.01, renew_seconds=0, clock=clock)
    assert a.acquire(threading.Event())
    api.leases["ns/l"]["spec"]["holderIdentity"] = "intruder"
    lost = threading.Event()
    stop = threading.Event()
    a.keep(stop, lost.set)
    assert lost.wait(5)
    stop.set()
