"""Leader election on a Lease (validated against the schema by the API double).

Each replica gets its own clocks, as separate machines have: a monotonic clock with its own
origin and a wall clock that may be skewed by an hour either way. Expiry must follow only the
local observation of the lease record changing (client-go's observedTime rule).
"""

from __future__ import annotations

import threading
import time

import pytest

from fluxinfra.scheduler.leader import LeaderElector

from .kube_double import KubeApiDouble

LEASE = "kube-system/fluxion"


class World:
    """True time; each replica reads it through its own offsets."""

    def __init__(self) -> None:
        self.t = 1_000_000.0


def elector(api: KubeApiDouble, world: World, who: str, *, skew: float = 0.0,
            origin: float = 0.0, **kw) -> LeaderElector:
    """A replica whose monotonic clock starts at ``origin`` and whose wall clock is off by
    ``skew`` seconds."""
    kw.setdefault("lease_seconds", 15)
    kw.setdefault("renew_seconds", 10)
    return LeaderElector(api, "kube-system", "fluxion", who,
                         clock=lambda: world.t - 1_000_000.0 + origin,
                         wall_clock=lambda: world.t + skew, **kw)


def holder(api: KubeApiDouble) -> str:
    return api.leases[LEASE]["spec"]["holderIdentity"]


def test_one_leader_at_a_time_and_renewal_keeps_it() -> None:
    api, world = KubeApiDouble(), World()
    a, b = elector(api, world, "a"), elector(api, world, "b")
    assert a.try_acquire() and not b.try_acquire()
    for _ in range(5):
        world.t += 10
        assert a.try_acquire(), "the holder renews"
        assert not b.try_acquire(), "the record changed 0 s ago (b's clock): not expired"
    assert holder(api) == "a"
    assert api.leases[LEASE]["spec"]["leaseTransitions"] == 0


def test_a_lease_expires_after_its_duration_without_change_on_the_local_clock() -> None:
    api, world = KubeApiDouble(), World()
    a, b = elector(api, world, "a"), elector(api, world, "b", origin=55.5)
    assert a.try_acquire() and not b.try_acquire()
    world.t += 14
    assert not b.try_acquire(), "14 s since b saw the record change"
    world.t += 2
    assert b.try_acquire(), "16 s without a change: expired"
    spec = api.leases[LEASE]["spec"]
    assert spec["holderIdentity"] == "b" and spec["leaseTransitions"] == 1
    assert not a.try_acquire() and not a.leading.is_set()


def test_a_standby_that_never_saw_the_record_change_waits_a_full_duration() -> None:
    """It cannot know how old the record is without trusting another machine's clock."""
    api, world = KubeApiDouble(), World()
    a = elector(api, world, "a")
    a.try_acquire()
    world.t += 3600  # a died long ago; its renewTime is an hour old
    late = elector(api, world, "late")
    assert not late.try_acquire()
    world.t += 15.5
    assert late.try_acquire()


@pytest.mark.parametrize("skew", [-3600.0, 3600.0], ids=["standby-ahead", "standby-behind"])
def test_skewed_wall_clocks_never_steal_a_live_lease(skew: float) -> None:
    """a's renewTime, read against b's wall clock, looks an hour stale (or an hour ahead);
    judged by renewTime, b would take the lease from a live holder (or wait an hour)."""
    api, world = KubeApiDouble(), World()
    a = elector(api, world, "a", skew=skew)
    b = elector(api, world, "b")
    assert a.try_acquire()
    for _ in range(20):
        world.t += 2
        assert a.try_acquire()
        assert not b.try_acquire(), f"b stole a live lease (a's wall clock off by {skew:+.0f}s)"
    assert holder(api) == "a"


@pytest.mark.parametrize("skew", [-3600.0, 3600.0], ids=["holder-behind", "holder-ahead"])
def test_skewed_wall_clocks_do_not_delay_taking_over_a_dead_leader(skew: float) -> None:
    api, world = KubeApiDouble(), World()
    a = elector(api, world, "a", skew=skew)
    b = elector(api, world, "b")
    a.try_acquire()
    assert not b.try_acquire()
    world.t += 16  # a is gone
    assert b.try_acquire(), "16 s without a change of the record, whatever its renewTime says"


def test_racing_standbys_cannot_both_win() -> None:
    api, world = KubeApiDouble(), World()
    a, b = elector(api, world, "a"), elector(api, world, "b")
    c = elector(api, world, "c")
    a.try_acquire()
    b.try_acquire(), c.try_acquire()  # both observe the record
    world.t += 16
    stale = api.get_lease("kube-system", "fluxion")
    assert b.try_acquire()
    real_get = api.get_lease
    api.get_lease = lambda ns, name: stale  # type: ignore[method-assign]
    try:
        assert not c.try_acquire(), "a write with a stale resourceVersion gets 409"
    finally:
        api.get_lease = real_get  # type: ignore[method-assign]
    assert holder(api) == "b"


def test_api_errors_keep_leadership_until_the_renew_deadline() -> None:
    api, world = KubeApiDouble(), World()
    a = elector(api, world, "a")
    a.try_acquire()
    api.fail_next("get_lease", 503, times=10)
    world.t += 5
    assert a.try_acquire(), "one failed renewal is tolerated"
    world.t += 6
    assert not a.try_acquire(), "11 s without a renewal: step down"


def test_release_hands_over_immediately() -> None:
    api, world = KubeApiDouble(), World()
    a, b = elector(api, world, "a"), elector(api, world, "b")
    a.try_acquire()
    a.release()
    assert b.try_acquire(), "an empty holder is free at once"


def test_leadership_changes_are_events_on_the_lease() -> None:
    api, world = KubeApiDouble(), World()
    a = elector(api, world, "a", retry_seconds=0.01, renew_seconds=10)
    b = elector(api, world, "b")
    assert a.acquire(threading.Event())
    b.try_acquire()
    stop, lost = threading.Event(), threading.Event()
    order: list[str] = []

    def on_lost() -> None:
        order.append(f"on_lost after {len(api.events)} events")
        lost.set()

    world.t += 16
    b.try_acquire()  # b takes over; a's next renewals fail, and 10 s on it steps down
    a.keep(stop, on_lost)
    assert lost.wait(5)
    stop.set()
    deadline = time.monotonic() + 5
    while len(api.events) < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    notes = [(e["regarding"]["kind"], e["regarding"]["name"], e["reason"], e["note"])
             for e in api.events]
    assert notes == [("Lease", "fluxion", "LeaderElection", "a became leader"),
                     ("Lease", "fluxion", "LeaderElection", "b became leader"),
                     ("Lease", "fluxion", "LeaderElection", "a stopped leading")]
    assert order == ["on_lost after 2 events"], "stepping down never waits on the Event"


def test_keep_calls_on_lost_when_the_lease_is_taken() -> None:
    api, world = KubeApiDouble(), World()
    a = elector(api, world, "a", retry_seconds=0.01, renew_seconds=0)
    assert a.acquire(threading.Event())
    api.leases[LEASE]["spec"]["holderIdentity"] = "intruder"
    lost = threading.Event()
    stop = threading.Event()
    a.keep(stop, lost.set)
    assert lost.wait(5)
    stop.set()


def test_an_unhealthy_leader_stops_renewing_and_a_standby_takes_over() -> None:
    """The Lease alone must not keep a stalled scheduler in charge."""
    api, world = KubeApiDouble(), World()
    a = elector(api, world, "a", retry_seconds=0.01, renew_seconds=10)
    b = elector(api, world, "b")
    assert a.acquire(threading.Event())
    b.try_acquire()
    renewed = api.leases[LEASE]["metadata"]["resourceVersion"]
    lost, stop, healthy = threading.Event(), threading.Event(), threading.Event()
    a.keep(stop, lost.set, healthy=healthy.is_set)
    try:
        assert not lost.wait(0.2), "within the renew deadline a is still leader"
        assert api.leases[LEASE]["metadata"]["resourceVersion"] == renewed, "not renewed"
        world.t += 10
        assert lost.wait(5), "past the renew deadline: a steps down"
        world.t += 6
        assert b.try_acquire() and holder(api) == "b"
    finally:
        stop.set()
