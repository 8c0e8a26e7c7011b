"""rv1exec reader: a resource graph from the ``execution`` part of an RFC 20 R.

``cluster0 -> node per rank (named from the nodelist) -> one vertex per child id`` — the shape
Fluxion's rv1exec reader builds (no sockets), with node properties from ``properties``.

>>> g = read_rv1exec({"version": 1, "execution": {"R_lite": [{"rank": "0-1",
...     "children": {"core": "0-1"}}], "nodelist": ["n[3-4]"]}})
>>> [g.name[v] for v in g.preorder(g.root)]
['cluster0', 'n3', 'core0', 'core1', 'n4', 'core0', 'core1']
"""

from __future__ import annotations

import json

from fluxinfra.matcher.errors import GraphError
from fluxinfra.matcher.graph import ResourceGraph

__all__ = ["read_rv1exec", "parse_idset", "rlite_entries"]


def parse_idset(text: str) -> list[int]:
    """RFC 22 idset (``0-3,7``) -> sorted ids."""
    out: list[int] = []
    for part in str(text).split(","):
        part = part.strip()
        if not part:
            continue
        lo, _, hi = part.partition("-")
        try:
            out.extend(range(int(lo), int(hi or lo) + 1))
        except ValueError:
            raise GraphError(f"R: invalid idset {text!r}") from None
    return sorted(set(out))


def rlite_entries(doc: dict):
    """Yield (rank, hostname, {type: [ids]}) for every rank of an R's ``execution``."""
    from fluxinfra.matcher.matcher import _expand_hostlist

    execution = doc.get("execution") if isinstance(doc, dict) else None
    if not isinstance(execution, dict) or not isinstance(execution.get("R_lite"), list):
        raise GraphError("R: 'execution.R_lite' (a list) is missing")
    ranks: list[int] = []
    for entry in execution["R_lite"]:
        ranks.extend(parse_idset(entry.get("rank", "")))
    order = {r: i for i, r in enumerate(sorted(set(ranks)))}
    hosts = _expand_hostlist(execution.get("nodelist", []))
    for entry in execution["R_lite"]:
        children = entry.get("children") or {}
        for rank in parse_idset(entry.get("rank", "")):
            i = order[rank]
            if i >= len(hosts):
                raise GraphError(f"R: rank {rank} has no host in execution.nodelist")
            yield rank, hosts[i], {t: parse_idset(ids) for t, ids in children.items()}


def split_hostname(host: str) -> tuple[str, int]:
    """(basename, id) of a host name as Fluxion's readers split it: ``node12`` -> ("node", 12);
    no numeric suffix -> (the name, -1); all digits -> (the name, its value)."""
    digits = len(host) - len(host.rstrip("0123456789"))
    if not digits:
        return host, -1
    value = int(host[-digits:])
    if value > (1 << 63) - 1:
        raise GraphError(f"rv1exec: host name {host!r}: numeric suffix out of range")
    return (host if digits == len(host) else host[:-digits]), value


def read_rv1exec(source: str | bytes | dict) -> ResourceGraph:
    """Build a graph from an R (dict or JSON text)."""
    if isinstance(source, dict):
        doc = source
    else:
        try:
            doc = json.loads(source)
        except ValueError as exc:
            raise GraphError(f"rv1exec: malformed JSON ({exc})") from None
    props: dict[int, dict[str, str]] = {}
    for name, ranks in ((doc.get("execution") or {}).get("properties") or {}).items():
        for rank in parse_idset(ranks):
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
