"""Elastic edits of the graph under a live matcher: resource-query's ``attach``, ``remove``,
``set-status`` and ``set-property``.

flux-sched's ``resource-query`` changes the graph it matches against with these commands
(``resource/utilities/command.cpp``): a JGF subgraph attached under the vertices its paths
name, a subtree removed (the jobs holding part of it lose that part first), a subtree marked
up or down, a property set on a vertex. Each edit here leaves the matcher as if it had been
built on the edited graph: what the traversal derived from the old one (subtree totals, memo,
templates, layouts, the count of nodes up) is dropped where it could have changed.

>>> from fluxinfra.matcher import Matcher, ResourceGraph
>>> g = ResourceGraph()
>>> root = g.add_vertex(type="cluster", name="c0")
>>> for n in range(2):
...     node = g.add_vertex(type="node", id=n)
...     g.add_edge(root, node)
...     g.add_edge(node, g.add_vertex(type="core", id=0))
>>> m = Matcher(g)
>>> two_nodes = {"version": 1, "resources": [{"type": "node", "count": 2, "with": [
...     {"type": "slot", "count": 1, "label": "a", "with": [{"type": "core", "count": 1}]}]}]}
>>> m.set_status("node1", "down")
>>> m.match(two_nodes)
Traceback (most recent call last):
...
fluxinfra.matcher.errors.Busy: the request needs 2 nodes but only 1 are up
>>> m.set_status("node1", "up")
>>> m.match(two_nodes).nodes
['node0', 'node1']
>>> m.remove_subgraph("node1"), m.stat()["vertices"]
(2, 3)
"""

from __future__ import annotations

from typing import Any

from fluxinfra.inputs import MAX_VERTICES, shown
from fluxinfra.matcher.errors import GraphError, MatcherError
from fluxinfra.matcher.graph import CONTAINMENT
from fluxinfra.matcher.traverser import JobState

__all__ = ["GraphEdits"]


class GraphEdits:
    """:class:`~fluxinfra.matcher.matcher.Matcher`'s graph edits (a mixin: it changes the
    matcher's ``graph``, releases from its ``jobs`` and resets what the matcher and its
    ``trav`` counted from the graph)."""

    def add_subgraph(self, jgf: Any) -> list[int]:
        """Attach a JGF subgraph (dict or text): vertices whose containment path already exists
        are reused, the others are added under their parents. Returns the new vertices.

        All or nothing: a subgraph the graph cannot take (malformed, a second root, a vertex
        left unattached, a cycle) raises GraphError and leaves the graph as it was."""
        from fluxinfra.matcher.graph import read_jgf_parts
        g = self.graph
        nodes, edges = read_jgf_parts(jgf)
        if len(g) + len(nodes) > MAX_VERTICES:
            raise GraphError(f"add_subgraph: {len(nodes):,} more vertices would make the graph "
                             f"larger than the {MAX_VERTICES:,} a graph may have")
        index: dict[str, int] = {}
        added: list[int] = []
        mark = g.checkpoint()
        next_uniq = None
        try:
            for vid, kwargs in nodes:
                path = (kwargs.get("paths") or {}).get(CONTAINMENT)
                v = self._by_path(path) if path else None
                if v is None:
                    uniq = kwargs.get("uniq_id")
                    if uniq is not None and g.by_uniq_id(uniq) is not None:
                        if next_uniq is None:
                            next_uniq = max(g.uniq_id) + 1
                        while g.by_uniq_id(next_uniq) is not None:
                            next_uniq += 1
                        kwargs["uniq_id"] = next_uniq
                    v = g.add_vertex(**kwargs)
                    added.append(v)
                index[vid] = v
            for src, tgt, sub in edges:
                g.add_edge_logged(index[src], index[tgt], sub, mark)
            g.finalize()
        except GraphError as exc:
            g.rollback(mark)
            raise GraphError(f"add_subgraph: {exc}; the graph is unchanged") from None
        self.trav.invalidate()
        self._node_cache = None
        self._up_count = None
        self._size = None
        return added

    def remove_subgraph(self, path_or_name: str) -> int:
        """Remove a vertex and everything below it (jobs lose those resources first).
        Returns how many vertices were removed."""
        g = self.graph
        top = g.resolve(path_or_name)
        if top == g.root:
            raise GraphError("remove_subgraph: cannot remove the root of the graph")
        doomed = set(g.preorder(top, CONTAINMENT))
        for jobid, job in list(self.jobs.items()):
            mine = doomed & (set(job.sched) | set(job.xspans))
            if mine and self.trav.release(job, self.trav_closure(job, mine)):
                del self.jobs[jobid]
                self.results.pop(jobid, None)
        for sub, kids in g.children.items():
            parents = g.parent[sub]
            for v in doomed:
                p = parents[v]
                if p != -1 and p not in doomed and v in kids[p]:
                    kids[p].remove(v)
        for v in doomed:
            g.removed[v] = True
        g.finalize()
        self.trav.invalidate()
        self._node_cache = None
        self._up_count = None
        self._size = None
        return len(doomed)

    def trav_closure(self, job: JobState, vertices: set[int]) -> set[int]:
        """``vertices`` and every ancestor of them left holding nothing of ``job``: what
        releasing them from the job frees."""
        held = set(job.sched) | set(job.xspans)
        return self._close_upwards(set(vertices), held)

    def set_status(self, path_or_name: str, status: str) -> None:
        """Mark a vertex and everything below it ``up`` or ``down`` (resource-query's
        ``set-status``): a match takes nothing that is down."""
        if status not in ("up", "down"):
            raise MatcherError(f"status must be 'up' or 'down', got {shown(status)}")
        v = self.graph.resolve(path_or_name)
        flag = 1 if status == "up" else 0
        for u in self.graph.preorder(v, self.trav.sub):
            self.graph.status[u] = flag
            self.graph.drop_layout(u)
            self.trav.mark_dirty(u)
        self.trav.invalidate_status()
        self._up_count = None

    def set_property(self, v: int, key: str, value: str) -> None:
        """Set property ``key`` of vertex ``v`` (resource-query's ``set-property``). What the
        traversal worked out from properties (``variation``'s perf classes, shapes shared by
        subtrees built alike) is forgotten."""
        g = self.graph
        props = dict(g.properties[v] or {})
        props[key] = value
        g.properties[v] = props
        g.drop_layout(v)
        self.trav.invalidate()
