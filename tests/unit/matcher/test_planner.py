"""Planner: usage over time agrees with a brute-force count under random add/remove."""

from __future__ import annotations

import random

import pytest

from fluxinfra.matcher.planner import MultiPlanner, Planner


def brute(spans, t):
    return sum(amount for at, end, amount in spans.values() if at <= t < end)


@pytest.mark.parametrize("seed", range(5))
def test_random_spans_match_brute_force(seed):
    rng = random.Random(seed)
    p = Planner(10)
    live = {}
    for _ in range(200):
        if live and rng.random() < 0.4:
            sid = rng.choice(list(live))
            p.remove_span(sid)
            del live[sid]
        else:
            at, dur, amount = rng.randrange(0, 50), rng.randrange(1, 20), rng.randrange(1, 3)
            if p.avail_during(at, dur) >= amount:
                live[p.add_span(at, dur, amount)] = (at, at + dur, amount)
        for t in range(0, 75, 7):
            assert p.avail_at(t) == 10 - brute(live, t)
    at = rng.randrange(0, 40)
    e = p.earliest(at, 5, 3)
    assert e >= at and all(10 - brute(live, t) >= 3 for t in range(e, e + 5))


def test_idle_planner_reuse_after_removal():
    p = Planner(1)
    s = p.add_span(5, 5, 1)
    p.remove_span(s)
    assert p.empty and p.avail_during(0, 100) == 1
    p.add_span(0, 3, 1)
    assert (p.avail_at(2), p.avail_at(3)) == (0, 1)


@pytest.mark.parametrize("seed", range(4))
def test_planners_sharing_timelines_stay_apart(seed):
    """Idle planners, and planners holding one span over the same window, share their
    timeline lists (copy on write): many planners driven through few windows, each checked
    against its own brute-force count after every step, and against every other."""
    rng = random.Random(seed)
    windows = [(0, 10), (0, 10), (5, 5), (0, 1 << 62)]
    singles = [Planner(4) for _ in range(6)]
    multis = [MultiPlanner(["core", "gpu"]) for _ in range(6)]
    live: list[dict] = [{} for _ in range(12)]
    for _ in range(300):
        k = rng.randrange(12)
        p = singles[k] if k < 6 else multis[k - 6]
        if live[k] and rng.random() < 0.45:
            sid = rng.choice(list(live[k]))
            p.remove_span(sid)
            del live[k][sid]
        else:
            at, dur = rng.choice(windows)
            if k < 6:
                amount = rng.randrange(1, 3)
                if p.avail_during(at, dur) >= amount:
                    live[k][p.add_span(at, dur, amount)] = (at, at + dur, amount)
            else:
                amounts = {"core": rng.randrange(1, 3)}
                if rng.random() < 0.3:
                    amounts["gpu"] = 1
                if rng.random() < 0.1:
                    amounts["memory"] = 16  # a type the planner did not count yet
                live[k][p.add_span(at, dur, amounts)] = (at, at + dur, amounts)
        for j in range(12):
            q = singles[j] if j < 6 else multis[j - 6]
            for t in (0, 4, 5, 9, 10, 12, 1 << 61):
                if j < 6:
                    assert q.avail_at(t) == 4 - brute(live[j], t), (seed, j, t)
                else:
                    for rtype in ("core", "gpu", "memory"):
                        want = sum(a.get(rtype, 0) for at, end, a in live[j].values()
                                   if at <= t < end)
                        assert q.used_during(rtype, t, 1) == want, (seed, j, rtype, t)
