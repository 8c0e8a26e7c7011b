"""The whole resource graph as resource-query's ``-g dot|graphml -o BASENAME`` writes it.

resource-query's ``write_to_graphviz`` is Boost's ``write_graphviz`` with each vertex labelled by
its name and each edge by a subsystem; its ``write_to_graphml`` is Boost's ``write_graphml``
over the vertex fields (paths, properties and subsystems flattened to ``{k=v,...}`` text). Both
number vertices by position and list each vertex's out-edges in insertion order. Fluxion
v0.54.0's resource-query still parses ``-g``/``-o`` but no longer calls the writer (it stopped
with v0.47.0); these functions write what its writer code and Boost 1.74 produce.

>>> from fluxinfra.matcher.graph import ResourceGraph
>>> g = ResourceGraph()
>>> c, n = g.add_vertex(type="cluster", name="c0"), g.add_vertex(type="node", id=0)
>>> g.add_edge(c, n)
>>> g.finalize()
>>> print(write_dot(g), end="")
digraph G {
0[label="c0"];
1[label="node0"];
0->1 [label="containment"];
}
"""

from __future__ import annotations

from fluxinfra.matcher.graph import CONTAINMENT, ResourceGraph

__all__ = ["write_dot", "write_graphml", "GRAPH_FORMATS"]

#: resource-query's ``-g`` values, and the file extension each writes
GRAPH_FORMATS = {"dot": "dot", "graphml": "graphml"}

#: Boost's write_graphml keys: dynamic_properties is a multimap, so keys come sorted by name
#: (resource-query registers ``member_of`` for vertices first, then for edges)
_GRAPHML_KEYS = (("basename", "node", "string"), ("id", "node", "long"),
                 ("member_of", "node", "string"), ("member_of", "edge", "string"),
                 ("name", "node", "string"), ("paths", "node", "string"),
                 ("props", "node", "string"), ("size", "node", "long"),
                 ("type", "node", "string"), ("uniq_id", "node", "long"),
                 ("unit", "node", "string"))
_XML_ENTITIES = {"<": "&lt;", ">": "&gt;", "&": "&amp;", '"': "&quot;", "'": "&apos;"}


def _live(g: ResourceGraph) -> list[int]:
    """Vertices still in the graph (Fluxion deletes removed ones; positions close up)."""
    return [v for v in range(len(g)) if not g.removed[v]]


def _out_edges(g: ResourceGraph, v: int) -> list[tuple[int, list[str]]]:
    """``v``'s out-edges in insertion order: (target, the subsystems the edge belongs to).
    One edge per target, as Fluxion's readers add an edge once and mark it per subsystem."""
    targets: dict[int, list[str]] = {}
    for sub, kids in g.children.items():
        for child in kids[v]:
            if not g.removed[child]:
                targets.setdefault(child, []).append(sub)
    return list(targets.items())


def _subsystems_of(g: ResourceGraph, v: int) -> list[str]:
    return [sub for sub, parents in g.parent.items()
            if parents[v] != -1 or g.roots.get(sub) == v]


def write_dot(g: ResourceGraph, dominant: str = CONTAINMENT) -> str:
    """resource-query's ``-g dot``: vertices labelled with their name; an edge is labelled with
    the first subsystem it belongs to, or with ``dominant`` when it is not in that one (what
    resource-query's edge label writer does)."""
    live = _live(g)
    index = {v: i for i, v in enumerate(live)}
    lines = ["digraph G {"]
    lines += [f'{index[v]}[label="{g.name[v]}"];' for v in live]
    for v in live:
        for child, subs in _out_edges(g, v):
            label = subs[0] if dominant in subs else dominant
            lines.append(f'{index[v]}->{index[child]} [label="{label}"];')
    lines.append("}")
    return "\n".join(lines) + "\n"


def _xml(text: str) -> str:
    """Boost property_tree's encode_char_entities."""
    if not text:
        return text
    if not text.strip(" "):
        return "&#32;" + text[1:]
    return "".join(_XML_ENTITIES.get(ch, ch) for ch in text)


def _braced(pairs: list[str], leading_comma: bool = False) -> str:
    """resource-query's flatten(): ``{k=v,...}``; its edge loop tests the length of a string
    that already holds ``{`` and so always starts with a comma."""
    return "{" + ("," if leading_comma and pairs else "") + ",".join(pairs) + "}"


def write_graphml(g: ResourceGraph) -> str:
    """resource-query's ``-g graphml``: Boost's write_graphml of every vertex and edge."""
    live = _live(g)
    index = {v: i for i, v in enumerate(live)}
    key_id = {(name, kind): f"key{i}" for i, (name, kind, _) in enumerate(_GRAPHML_KEYS)}
    out = ['<?xml version="1.0" encoding="UTF-8"?>',
           '<graphml xmlns="http://graphml.graphdrawing.org/xmlns" '
           'xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance" '
           'xsi:schemaLocation="http://graphml.graphdrawing.org/xmlns '
           'http://graphml.graphdrawing.org/xmlns/1.0/graphml.xsd">']
    out += [f'  <key id="{key_id[name, kind]}" for="{kind}" attr.name="{name}" '
            f'attr.type="{typ}" />' for name, kind, typ in _GRAPHML_KEYS]
    out.append('  <graph id="G" edgedefault="directed" parse.nodeids="canonical" '
               'parse.edgeids="canonical" parse.order="nodesfirst">')
    for v in live:
        subs = _subsystems_of(g, v)
        props = g.properties[v] or {}
        values = {"basename": g.basename[v], "id": str(g.id[v]),
                  "member_of": _braced([f"{s}={s}" for s in subs]), "name": g.name[v],
                  "paths": _braced([f"{s}={g.path(v, s)}" for s in subs]),
                  "props": _braced([f"{k}={props[k]}" for k in sorted(props)]),
                  "size": str(g.size[v]), "type": g.type[v], "uniq_id": str(g.uniq_id[v]),
                  "unit": g.unit[v]}
        out.append(f'    <node id="n{index[v]}">')
        out += [f'      <data key="{key_id[name, "node"]}">{_xml(values[name])}</data>'
                for name, kind, _ in _GRAPHML_KEYS if kind == "node"]
        out.append("    </node>")
    edge = 0
    for v in live:
        for child, subs in _out_edges(g, v):
            out.append(f'    <edge id="e{edge}" source="n{index[v]}" target="n{index[child]}">')
            member_of = _braced([f"{s}={s}" for s in subs], leading_comma=True)
            out.append(f'      <data key="{key_id["member_of", "edge"]}">{_xml(member_of)}</data>')
            out.append("    </edge>")
            edge += 1
    out += ["  </graph>", "</graphml>"]
    return "\n".join(out) + "\n"
