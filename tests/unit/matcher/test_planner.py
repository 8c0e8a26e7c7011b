"""Planner: usage over time agrees with a brute-force count under random add/remove."""

from __future__ import annotations

import random

import pytest

from fluxinfra.matcher.planner import Planner


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
