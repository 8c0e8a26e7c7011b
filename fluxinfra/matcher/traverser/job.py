"""One match's parameters and what a committed match holds.

:class:`Meta` mirrors Fluxion's ``jobmeta_t`` (``resource/traversers/dfu_impl.hpp``): when, for
how long, which kind of allocation and which RFC 31 constraint. :class:`JobState` is what the
commit walk (``Traverser.update``) books for one job, so a cancel or a partial cancel
(``Traverser.release``) can undo exactly that: Fluxion keeps the same in its planners' span
ids per job (``job_info_t`` and the ``jobid -> span`` maps of each vertex's schedule).
"""

from __future__ import annotations

from fluxinfra.matcher.graph import CONTAINMENT, ResourceGraph
from fluxinfra.matcher.traverser.text import HeldSubtree

__all__ = ["Meta", "JobState", "AT_ALLOC", "AT_RESERVE", "AT_SAT", "AT_NO_ALLOC"]

AT_ALLOC, AT_RESERVE, AT_SAT, AT_NO_ALLOC = range(4)


_NO_VERTICES: frozenset[int] = frozenset()  # JobState.whole until the job holds one


class Meta:
    """One traversal's parameters (Fluxion's jobmeta)."""

    __slots__ = ("at", "now", "duration", "alloc_type", "jobid", "constraint")

    def __init__(self, at: int, duration: int, alloc_type: int = AT_ALLOC, jobid: int = 0,
                 now: int | None = None, constraint=None) -> None:
        self.at = at
        self.now = at if now is None else now
        self.duration = duration
        self.alloc_type = alloc_type
        self.jobid = jobid
        #: RFC 31 constraint (fluxinfra.matcher.constraint.Constraint) or None
        self.constraint = constraint


class JobState:
    """What a committed match holds, so cancel can undo it exactly."""

    __slots__ = ("jobid", "sched", "xspans", "agg", "used", "reweigh", "reweigh_inner", "now",
                 "raw_vertices", "at", "duration", "reserved", "slots", "slot_edges", "whole",
                 "node_hint")

    def __init__(self, jobid: int, now: int = 0) -> None:
        self.jobid = jobid
        self.now = now
        self.at = now
        self.duration = 0
        self.reserved = False
        self.sched: dict[int, int] = {}  # vertex -> span in its own planner
        #: vertex -> span in its exclusivity checker (None: tagged, held whole, no span needed)
        self.xspans: dict[int, int | None] = {}
        #: vertex -> span in its aggregate planner (what it holds below of each type: that
        #: planner's MultiPlanner.amounts of the span)
        self.agg: dict[int, int] = {}
        self.used: dict[int, dict[str, int]] = {}  # vertex -> {its type: amount held}
        self.reweigh: list[tuple[int, int]] = []
        #: the edges inside the subtrees held whole (see Traverser.reweigh)
        self.reweigh_inner: list[tuple[int, int]] = []
        #: per slot instance: {vertex: amount} (None once released); resolved lazily from
        #: slot_edges, the (vertex, amount) members the selection chose
        self.slots: list[dict[int, int] | None] | None = []
        self.slot_edges: list = []
        #: emitted (level, vertex, needs, exclusive, exclusive_parent) in post-order; held
        #: subtrees stay one HeldSubtree entry until ``vertices`` is read
        self.raw_vertices: list = []
        #: vertices this job holds whole without aggregate spans on them (Traverser._whole);
        #: a set once there is one (most jobs hold none: no empty set kept per job)
        self.whole: set[int] | frozenset[int] = _NO_VERTICES
        #: the node vertices, when the commit knew them (cleared by any release)
        self.node_hint: list[int] | None = None

    @property
    def agg_owners(self):
        """The vertices with an aggregate span of this job (``jobid-span``)."""
        return self.agg.keys()

    def hold_whole(self, u: int) -> None:
        """Note that this job holds ``u`` whole (see :attr:`whole`)."""
        whole = self.whole
        if not whole:
            self.whole = whole = set()
        whole.add(u)

    @property
    def vertices(self) -> list[tuple[int, int, int, bool, bool]]:
        raw = self.raw_vertices
        if any(type(e) is HeldSubtree for e in raw):
            out: list = []
            for e in raw:
                if type(e) is HeldSubtree:
                    out.extend(e.entries())
                else:
                    out.append(e)
            self.raw_vertices = raw = out
        return raw

    @vertices.setter
    def vertices(self, value: list) -> None:
        self.raw_vertices = value

    def node_vertices(self, graph: ResourceGraph, subsystem: str = CONTAINMENT) -> list[int]:
        """The ``node`` vertices held, in emission order (without listing held subtrees
        walked in ``subsystem``)."""
        if self.node_hint is not None:
            return self.node_hint
        gtype = graph.type
        out = []
        for e in self.raw_vertices:
            if type(e) is HeldSubtree:
                u = e[2]
                if graph.subtree_totals(u, subsystem).get("node", 0) > (gtype[u] == "node"):
                    out += [v for v in e.post() if gtype[v] == "node"]
            elif gtype[e[1]] == "node":
                out.append(e[1])
        return out
