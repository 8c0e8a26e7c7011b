"""Match writers: RFC 20 R (Rv1), JGF, and resource-query's ``simple`` / ``pretty_simple`` text.

Every writer takes the emitted vertex list of a job, ``(level, vertex, amount, exclusive,
exclusive_parent)`` in Fluxion's post-order, so the text writers reproduce resource-query byte
for byte.
"""

from __future__ import annotations

from fluxinfra.matcher.graph import CONTAINMENT, ResourceGraph

__all__ = ["write_simple", "write_pretty_simple", "write_jgf", "write_rv1", "idset",
           "hostlist", "MATCH_FORMATS"]

MATCH_FORMATS = ("simple", "pretty_simple", "jgf", "rlite", "rv1", "rv1_nosched", "rv1_sched")
Emitted = list[tuple[int, int, int, bool, bool]]


def write_simple(g: ResourceGraph, emitted: Emitted) -> str:
    out = []
    for level, v, amount, excl, _ in emitted:
        out.append(f"      {'---' * level}{g.name[v]}[{amount}:{'x' if excl else 's'}]\n")
    return "".join(out)


def write_pretty_simple(g: ResourceGraph, emitted: Emitted) -> str:
    """resource-query's pretty_simple: the simple lines reversed, modes spelled out."""
    out = []
    for level, v, amount, excl, _ in reversed(emitted):
        mode = "exclusive" if excl else "shared"
        out.append(f"      {'---' * level}{g.name[v]}[{amount}:{mode}]\n")
    return "".join(out)


def idset(ids: list[int]) -> str:
    """Compress integers into an RFC 22 idset (``0-3,7``)."""
    ids = sorted(set(ids))
    parts = []
    i = 0
    while i < len(ids):
        j = i
        while j + 1 < len(ids) and ids[j + 1] == ids[j] + 1:
            j += 1
        parts.append(str(ids[i]) if i == j else f"{ids[i]}-{ids[j]}")
        i = j + 1
    return ",".join(parts)


def hostlist(names: list[str]) -> str:
    """Compress host names into an RFC 29 hostlist (``node[0-3,7]``)."""
    groups: dict[str, list[tuple[int, str]]] = {}
    order: list[str] = []
    plain = []
    for name in names:
        end = len(name)
        start = end
        while start > 0 and name[start - 1].isdigit():
            start -= 1
        if start == end:
            plain.append(name)
            continue
        prefix = name[:start]
        if prefix not in groups:
            groups[prefix] = []
            order.append(prefix)
        groups[prefix].append((int(name[start:]), name[start:]))
    out = list(plain)
    for prefix in order:
        nums = groups[prefix]
        if len(nums) == 1:
            out.append(prefix + nums[0][1])
        else:
            out.append(f"{prefix}[{idset([n for n, _ in nums])}]")
    return ",".join(out)


def _vertex_json(g: ResourceGraph, v: int, amount: int, excl: bool, compact: bool) -> dict:
    """One JGF vertex. ``compact`` is Fluxion's match writer: fields equal to the reader's
    defaults (basename = type, name = basename + id, size 1, not exclusive, no unit) omitted.
    Otherwise every field is written (what R's ``scheduling`` key carries here)."""
    if not compact:
        md = {"type": g.type[v], "basename": g.basename[v], "name": g.name[v], "id": g.id[v],
              "uniq_id": g.uniq_id[v], "rank": g.rank[v], "exclusive": bool(excl),
              "unit": g.unit[v], "size": amount}
        if g.properties[v]:
            md["properties"] = dict(g.properties[v])
        md["paths"] = _paths(g, v) if len(g.parent) > 1 else {CONTAINMENT: g.path(v)}
        return {"id": str(g.uniq_id[v]), "metadata": md}
    md = {"type": g.type[v]}
    if g.basename[v] != g.type[v]:
        md["basename"] = g.basename[v]
    if g.name[v] != f"{g.basename[v]}{g.id[v]}":
        md["name"] = g.name[v]
    md["id"] = g.id[v]
    md["rank"] = g.rank[v]
    if g.properties[v]:
        md["properties"] = dict(g.properties[v])
    if g.unit[v]:
        md["unit"] = g.unit[v]
    if excl:
        md["exclusive"] = True
    if amount != 1:
        md["size"] = amount
    md["paths"] = _paths(g, v)
    return {"id": str(g.uniq_id[v]), "metadata": md}


def _paths(g: ResourceGraph, v: int) -> dict[str, str]:
    return {sub: g.path(v, sub) for sub in g.children
            if sub == CONTAINMENT or g.parent[sub][v] != -1 or g.roots.get(sub) == v}


def write_jgf(g: ResourceGraph, emitted: Emitted, compact: bool = True) -> dict:
    """JGF of a match: the emitted vertices (children first) and the edges among them."""
    for entry in reversed(emitted):  # parents first: each path is its parent's plus a name
        g.path(entry[1])
    nodes = [_vertex_json(g, v, amount, excl, compact) for _, v, amount, excl, _ in emitted]
    present = {v for _, v, _, _, _ in emitted}
    edges = []
    uid = g.uniq_id
    subsystems = list(g.parent.items())
    for _, v, _, _, _ in emitted:
        for sub, parents in subsystems:
            p = parents[v]
            if p != -1 and p in present:
                edges.append({"source": str(uid[p]), "target": str(uid[v]),
                              "metadata": {"subsystem": sub}})
    return {"graph": {"nodes": nodes, "edges": edges}}


def _rlite(g: ResourceGraph, emitted: Emitted) -> tuple[list[dict], list[str]]:
    parent = g.parent[CONTAINMENT]
    by_rank: dict[int, dict[str, list[int]]] = {}
    hosts: dict[int, str] = {}
    for _, v, _, _, _ in emitted:
        t = g.type[v]
        if t == "node":
            hosts.setdefault(g.rank[v], g.name[v])
            by_rank.setdefault(g.rank[v], {})
            continue
        if g.children[CONTAINMENT][v]:
            continue
        # leaf: count it under the rank of its node
        a = parent[v]
        while a != -1 and g.type[a] != "node":
            a = parent[a]
        if a == -1:
            continue
        hosts.setdefault(g.rank[a], g.name[a])
        by_rank.setdefault(g.rank[a], {}).setdefault(t, []).append(g.id[v])
    # group ranks with identical children
    groups: list[tuple[list[int], dict[str, str]]] = []
    for rank in sorted(by_rank):
        children = {t: idset(ids) for t, ids in sorted(by_rank[rank].items())}
        if groups and groups[-1][1] == children:
            groups[-1][0].append(rank)
        else:
            groups.append(([rank], children))
    rlite = [{"rank": idset(ranks), "children": children} for ranks, children in groups]
    return rlite, [hosts[r] for r in sorted(hosts)]


def write_rv1(g: ResourceGraph, emitted: Emitted, starttime: int, expiration: int,
              scheduling: bool = True) -> dict:
    """RFC 20 R version 1 with the ``scheduling`` JGF key (Fluxion's rv1 writer)."""
    rlite, nodes = _rlite(g, emitted)
    r: dict = {"version": 1, "execution": {"R_lite": rlite, "nodelist": [hostlist(nodes)] if nodes
                                            else [], "starttime": starttime,
                                            "expiration": expiration}}
    if scheduling:
        r["scheduling"] = write_jgf(g, emitted, compact=False)
    return r
