"""fluxinfra.matcher: a pure-Python, Fluxion-compatible resource-graph matcher.

Plain data in and out; time is integer seconds. Everything a caller needs is importable here::

    from fluxinfra.matcher import (ResourceGraph, Matcher, Jobspec, MatchResult,
        load_graph, graph_from_recipe,
        MatcherError, GraphError, JobspecError, Busy, Unsatisfiable, UnknownJob)

Graphs
    ``ResourceGraph().add_vertex(type=, basename=, name=, id=, uniq_id=, rank=-1, size=1,
    unit="", exclusive=False, properties=None, status="up") -> int``, ``add_edge(parent, child,
    subsystem="containment")``, ``finalize()`` (one root per subsystem, no dangling edges, unique
    ids; a vertex may have two parents, e.g. nodes shared by two ``container`` vertices in a
    second subsystem). ``load_graph(path_or_text, fmt="jgf"|"grug"|"rv1exec"|"hwloc")`` reads
    Fluxion's formats with Fluxion's defaults; ``graph_from_recipe`` builds regular clusters
    (``recipe.py``). Graphs of Kubernetes Node lists are built outside the matcher, by
    :mod:`fluxinfra.kube.graph` and :mod:`fluxinfra.kube.pools`: the matcher knows no Kubernetes.

Matching
    ``m = Matcher(graph, policy="first", *, subsystem="containment", prune_filters=None,
    now=0, exact_pools=False, exact=None, flexible=False)``

    ``m.match(jobspec, op="allocate", jobid=None, now=None) -> MatchResult`` with ops
    ``allocate | allocate_orelse_reserve | allocate_with_satisfiability | satisfiability |
    without_allocating``. Raises :class:`Busy` ("not now", Fluxion's EBUSY) or
    :class:`Unsatisfiable` ("never", ENODEV). ``MatchResult``: ``jobid``, ``status``
    (``ALLOCATED``/``RESERVED``/``MATCHED``/``SATISFIABLE``), ``at``, ``overhead`` (seconds),
    ``R`` (RFC 20 Rv1: ``execution`` + ``scheduling`` JGF), ``nodes`` (node names),
    ``slots`` (one dict per slot instance: node name -> {type: amount}), ``jgf``.
    ``m.slot_R(jobid, i)`` is the R of slot instance *i* alone (for ``partial_cancel``).

    ``m.cancel(jobid)`` (raises :class:`UnknownJob`), ``m.partial_cancel(jobid, names_or_R) ->
    bool`` (True once nothing is left), ``m.update_allocate(jobid, R, at=0, duration=None)``
    (re-learn an existing allocation from the R this package wrote; vertices are found by
    ``uniq_id``; all or nothing: :class:`Busy` when another job holds R's vertices in the
    window, :class:`GraphError` naming a vertex the graph lacks or overfills; an id already
    held is replaced, so replaying registrations is idempotent),
    ``m.register_amounts(jobid, node, {"core": 3, "memory": 4096, "gpu": 1},
    at=None, duration=None)`` (hold amounts in use on a node: its lowest free vertices, whole,
    in the graph's units; raises Busy when they are not free), ``m.info(jobid)``,
    ``m.find("status=up and sched-now=free") -> R``, ``m.set_status(path_or_name, "up"|
    "down")``, ``m.add_subgraph(jgf)``, ``m.remove_subgraph(path)``, ``m.stat()``, ``m.now``.

Policies (one table; "score" is what is compared when choosing among candidates)

    ==============  =====================================================================
    policy          ordering
    ==============  =====================================================================
    ``low``         lowest score first; a vertex scores ``id + 1`` (slots: the sum of
                    their members), so lower ids win at every level
    ``high``        highest score first: higher ids win at every level
    ``lonode``      ``low`` with a node factor: everything under node *n* also scores
                    ``(n + 2) * 10000 + tie``, so the lowest node is filled first
    ``hinode``      ``high`` with the node factor: the highest node is filled first
    ``lonodex``     ``lonode`` and nodes are exclusive (a job gets whole nodes)
    ``hinodex``     ``hinode`` and nodes are exclusive
    ``first``       ``hinode``, but stop at the first match: children are tried untouched
                    first, then most free (of the last pruning type), higher uniq_id first
    ``firstnodex``  ``first`` with exclusive nodes
    ``variation``   lowest ``perf_class`` property first (missing: 9999); slots are packed
                    from the highest-scored members
    ``locality``    ``high`` below the top level; at the top level candidates are ranked
                    by the run of consecutive free scores (ids) they fall in, highest run
                    first, and tie within a run (in the order std::sort leaves them).
                    Not a custom-string option, as in Fluxion
    custom          ``policy=low|high node_centric=true|false node_exclusive=true|false
                    stop_on_1_matches=true|false`` (Fluxion's option string)
    ==============  =====================================================================

    Every choice is Fluxion's: the ranking policies score every candidate in Fluxion and
    break ties in libstdc++'s ``std::sort`` order; here children are explored in the
    policy's order and a level stops once it has what it needs, under a guard that proves
    the candidates left unexplored rank strictly after the chosen ones (bounds from the ids
    below them), and ranks every candidate otherwise (ties across subtrees: ``low``/``high``
    slots at the top, ``variation``, ``locality``). ``Matcher(..., exact=True)`` always
    takes Fluxion's full walk, vertex by vertex (the reference the tests compare with).

Pod groups (the Kubernetes scheduler's case)
    A group of N pods is ONE jobspec ``slot[N] -> {core[c], memory[m], gpu[g]}``: each slot
    instance lands wholly on one node (slots form below a node), several slots may share a
    node, and nodes stay shared with other jobs (nothing above the slot is exclusive). Use
    ``exact_pools=True`` so a pod's memory request takes ``m`` units of a node's memory pool
    rather than Fluxion's whole pool vertex. ``result.slots[i]`` is pod *i*'s placement;
    release one finished pod with ``partial_cancel(jobid, node_name)`` (or an R subset); a
    restarted scheduler re-learns running pods with ``update_allocate(jobid, R)``, or from
    their requests alone with ``register_amounts(jobid, node, amounts)``.

    >>> g = ResourceGraph()
    >>> root = g.add_vertex(type="cluster", name="k8s0")
    >>> for n in range(2):
    ...     node = g.add_vertex(type="node", id=n, rank=n)
    ...     g.add_edge(root, node)
    ...     for c in range(4):
    ...         g.add_edge(node, g.add_vertex(type="core", id=c))
    ...     g.add_edge(node, g.add_vertex(type="memory", id=n, size=16, unit="GiB"))
    >>> g.finalize()
    >>> m = Matcher(g, policy="lonode", exact_pools=True)
    >>> group = {"version": 1, "resources": [{"type": "slot", "count": 3, "label": "pod",
    ...          "with": [{"type": "core", "count": 1}, {"type": "memory", "count": 4}]}],
    ...          "attributes": {"system": {"duration": 3600}}}
    >>> r = m.match(group)
    >>> r.nodes, r.slots[2]           # the three pods share node0
    (['node0'], {'node0': {'core': 1, 'memory': 4}})
    >>> other = m.match(group)        # and node0 is shared with the next group
    >>> sorted(node for slot in other.slots for node in slot)
    ['node0', 'node1', 'node1']
    >>> again = Matcher(g, policy="lonode", exact_pools=True)
    >>> again.update_allocate(r.jobid, r.R).nodes     # a restarted scheduler re-learns it
    ['node0']
    >>> try:
    ...     again.update_allocate(99, r.R)        # the same R under another id: never twice
    ... except Busy as exc:
    ...     print(str(exc).split(",")[0])
    update_allocate: vertex /k8s0/node0/core0 has 0 of 1 free from 0 for 3600s
    >>> m.partial_cancel(r.jobid, m.slot_R(r.jobid, 1))   # pod 1 finished: its slot is freed
    False
    >>> m.info(r.jobid).slots         # pods 0 and 2 still hold theirs
    [{'node0': {'core': 1, 'memory': 4}}, {'node0': {'core': 1, 'memory': 4}}]
    >>> m.partial_cancel(r.jobid, "node0")          # the rest by node name
    True
"""

from fluxinfra.matcher.errors import (
    Busy,
    GraphError,
    JobspecError,
    MatcherError,
    UnknownJob,
    Unsatisfiable,
)
from fluxinfra.matcher.graph import ResourceGraph, read_jgf
from fluxinfra.matcher.jobspec import Jobspec
from fluxinfra.matcher.matcher import Matcher, MatchResult

__all__ = ["ResourceGraph", "Matcher", "Jobspec", "MatchResult", "load_graph", "read_jgf",
           "graph_from_recipe",
           "MatcherError", "GraphError", "JobspecError", "Busy", "Unsatisfiable", "UnknownJob"]


def load_graph(source, fmt: str = "jgf", **options) -> ResourceGraph:
    """Load a graph from a path or text: ``jgf`` | ``grug`` | ``rv1exec`` | ``hwloc``."""
    from fluxinfra.matcher.readers import load_graph as _load

    return _load(source, fmt, **options)


def graph_from_recipe(recipe, **kwargs) -> ResourceGraph:
    """A regular cluster from a compact recipe (see :mod:`fluxinfra.matcher.recipe`)."""
    from fluxinfra.matcher.recipe import graph_from_recipe as _build

    return _build(recipe, **kwargs)

