"""The cyclic collector's settings beside a large matcher, for the process that owns it.

A matcher on a large graph keeps millions of long-lived objects that make almost no reference
cycles; at CPython's default thresholds the collector keeps walking them and its pauses land on
random matches (17-120 ms at 16,384 nodes). Changing the collector is a change to the whole
process, so a :class:`~fluxinfra.matcher.Matcher` never does it: the commands that own their
process call :func:`tune_for` after building one (``fluxinfra query``, ``match``, ``draw``,
``simulate``, the Fluxion service and the scheduler, each time it builds a new matcher). A
program that embeds the matcher may call it too, knowing it freezes everything alive.

>>> import gc
>>> from fluxinfra.matcher import Matcher, ResourceGraph
>>> g = ResourceGraph()
>>> g.add_edge(g.add_vertex(type="cluster", name="c0"), g.add_vertex(type="core", id=0))
>>> tune_for(Matcher(g))  # a small graph: nothing to do
False
"""

from __future__ import annotations

import gc
from typing import Any

__all__ = ["LARGE_GRAPH", "freeze_alive", "tune_for"]

#: above this many vertices the cyclic collector is told to leave the (long-lived) graph alone
LARGE_GRAPH = 50_000


def freeze_alive() -> None:
    """Move what is alive out of the cyclic collector's sight (``gc.freeze``). Frozen objects
    are never collected, so what an earlier freeze kept and is garbage in cycles by now (the
    matcher a service replaced when the cluster changed, the sessions of an in-process
    replay) would stay for good, and each freeze would add to it: when anything is frozen,
    it is unfrozen and collected first (a full collection: about 0.1 s beside a
    16,384-node graph). The first freeze of a process skips that."""
    if gc.get_freeze_count():
        gc.unfreeze()
        gc.collect()
    gc.freeze()


def tune_for(matcher: Any) -> bool:
    """Settle the collector beside ``matcher`` (a :class:`~fluxinfra.matcher.Matcher`) if
    its graph has more than :data:`LARGE_GRAPH` vertices; True when it did.

    What is alive is frozen (:func:`freeze_alive`): call this before the collector runs
    again after the build (inside :func:`~fluxinfra.matcher.readers.collector_paused`), or
    a young collection walks every object the load made. The older generations are then
    collected less often: a middle-generation collection walks every survivor since the
    last one and a full one every object the matcher made since the freeze (74-120 ms at
    16,384 nodes); at CPython's defaults (700, 10, 10) they landed on random matches, a
    64-node fill's p99 29-146 ms. Young collections stay small (each costs a fraction of a
    microsecond per young object, so 10,000 of them made a pause of milliseconds in one
    match in ten of a 64-node fill) and the middle generation comes once per million
    allocations, as with (10,000, 100). Thresholds are only ever raised (never lowered),
    and left alone when automatic collection is off (a threshold of 0)."""
    if len(matcher.graph) <= LARGE_GRAPH:
        return False
    freeze_alive()
    limits = gc.get_threshold()
    if limits[0]:
        gc.set_threshold(max(limits[0], 1_000), max(limits[1], 1_000), max(limits[2], 100))
    return True
