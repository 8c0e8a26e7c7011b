"""rv1exec reader: a resource graph from the ``execution`` part of an RFC 20 R.

``cluster0 -> node per rank (named from the nodelist) -> one vertex per child id`` — the shape
Fluxion's rv1exec reader builds (no sockets), with node properties from ``properties``.

>>> g = read_rv1exec({"version": 1, "execution": {"R_lite": [{"rank": "0-1",
...     "children": {"core": "0-1"}}], "nodelist": ["n[3-4]"]}})
>>> [g.name[v] for v in g.preorder(g.root)]
['cluster0', 'n3', 'core0', 'core1', 'n4', 'core0', 'core1']
"""

from __future__ import annotations

from itertools import islice

from fluxinfra import hostlist, idset
from fluxinfra.inputs import INT64_MAX, MAX_VERTICES, parse_json, shown
from fluxinfra.matcher.errors import GraphError, MatcherError
from fluxinfra.matcher.graph import ResourceGraph

__all__ = ["read_rv1exec", "parse_idset", "rlite_entries"]


def parse_idset(text: str | int, where: str = "R", limit: int = MAX_VERTICES,
                error: type[MatcherError] = GraphError) -> list[int]:
    """RFC 22 idset (``0-3,7``) -> sorted ids, at most ``limit`` of them; raises ``error``
    naming ``where``."""
    if isinstance(text, bool) or not isinstance(text, (str, int)):
        raise error(f"{where}: an idset is a string like '0-3,7', got {shown(text)}")
    try:
        spans = idset.merge(idset.ranges(text, strict=False))
    except idset.IdsetError:
        raise error(f"{where}: invalid idset {shown(text)}; write ids as '0-3,7'") from None
    if sum(hi - lo + 1 for lo, hi in spans) > limit:
        raise error(f"{where}: idset {shown(text)} names more than {limit:,} ids")
    return [i for lo, hi in spans for i in range(lo, hi + 1)]


def rlite_entries(doc: dict):
    """Yield (rank, hostname, {type: [ids]}) for every rank of an R's ``execution``, each
    field checked (GraphError naming it), at most MAX_VERTICES vertices in all."""
    execution = doc.get("execution") if isinstance(doc, dict) else None
    if not isinstance(execution, dict) or not isinstance(execution.get("R_lite"), list):
        raise GraphError("R: 'execution.R_lite' (a list) is missing")
    entries: list[tuple[list[int], dict[str, list[int]]]] = []
    ranks: set[int] = set()
    total = 0
    for i, entry in enumerate(execution["R_lite"]):
        where = f"R: execution.R_lite[{i}]"
        if not isinstance(entry, dict):
            raise GraphError(f"{where}: must be an object with rank and children, got "
                             f"{shown(entry)}")
        mine = parse_idset(entry.get("rank", ""), f"{where}.rank")
        children = entry.get("children") or {}
        if not isinstance(children, dict):
            raise GraphError(f"{where}.children: must be an object of type -> idset, got "
                             f"{shown(children)}")
        kids = {t: parse_idset(ids, f"{where}.children.{t}") for t, ids in children.items()}
        total += len(mine) * (1 + sum(map(len, kids.values())))
        if total > MAX_VERTICES:
            raise GraphError(f"{where}: R names more than {MAX_VERTICES:,} vertices; no graph "
                             "is that large")
        ranks.update(mine)
        entries.append((mine, kids))
    order = {r: i for i, r in enumerate(sorted(ranks))}
    nodelist = execution.get("nodelist", [])
    if not isinstance(nodelist, list):
        raise GraphError(f"R: execution.nodelist: must be a list of hostlists, got "
                         f"{shown(nodelist)}")
    parts: list[hostlist.Part] = []
    for i, item in enumerate(nodelist):
        try:
            parts += hostlist.parse(item)
        except hostlist.HostlistError as exc:
            raise GraphError(f"R: execution.nodelist[{i}]: Invalid hostlist {shown(item)} "
                             f"({exc})") from None
    hosts = list(islice(hostlist.expand(parts), len(order)))  # (one per rank: no more)
    for mine, kids in entries:
        for rank in mine:
            i = order[rank]
            if i >= len(hosts):
                raise GraphError(f"R: rank {rank} has no host in execution.nodelist")
            yield rank, hosts[i], kids


def split_hostname(host: str) -> tuple[str, int]:
    """(basename, id) of a host name as Fluxion's readers split it: ``node12`` -> ("node", 12);
    no numeric suffix -> (the name, -1); all digits -> (the name, its value)."""
    digits = len(host) - len(host.rstrip("0123456789"))
    if not digits:
        return host, -1
    value = int(host[-digits:]) if digits <= 19 else INT64_MAX + 1
    if value > INT64_MAX:
        raise GraphError(f"rv1exec: host name {shown(host)}: numeric suffix out of range")
    return (host if digits == len(host) else host[:-digits]), value


def read_rv1exec(source: str | bytes | dict) -> ResourceGraph:
    """Build a graph from an R (dict or JSON text)."""
    doc = source if isinstance(source, dict) else parse_json(source, "rv1exec", GraphError)
    if not isinstance(doc, dict):
        raise GraphError(f"rv1exec: an R is a JSON object with an 'execution' key, got "
                         f"{type(doc).__name__}")
    execution = doc.get("execution")
    properties = execution.get("properties") if isinstance(execution, dict) else None
    if properties is not None and not isinstance(properties, dict):
        raise GraphError(f"R: execution.properties: must be an object of name -> idset, got "
                         f"{shown(properties)}")
    props: dict[int, dict[str, str]] = {}
    for name, ranks in (properties or {}).items():
        for rank in parse_idset(ranks, f"R: execution.properties.{name}"):
            props.setdefault(rank, {})[name] = ""
    g = ResourceGraph()
    root = g.add_vertex(type="cluster", basename="cluster", id=0)
    for rank, host, children in rlite_entries(doc):
        basename, node_id = split_hostname(host)
        node = g.add_vertex(type="node", basename=basename, name=host, id=node_id, rank=rank,
                            properties=props.get(rank))
        g.add_edge(root, node)
        for rtype, ids in children.items():
            for i in ids:
                g.add_edge(node, g.add_vertex(type=rtype, id=i, rank=rank))
    g.finalize()
    return g
