"""Resource graphs from a compact recipe: cluster -> rack -> node -> socket -> core/gpu/memory.

The recipe plays the role of Fluxion's GRUG GraphML files for the regular machines tests and
benchmarks need, and :func:`graph_from_recipe` emits the vertices in the order, with the names, ids
and ranks, that Fluxion's GRUG reader gives the equivalent GraphML (:func:`recipe_to_grug` writes
that GraphML, so ``resource-query -f grug`` can load the same machine).

Recipe schema (a dict, or YAML/JSON text or file for :func:`load_recipe`)::

    cluster:           str   basename of the root vertex (named "<cluster>0")   default "cluster"
    racks:             int   racks under the cluster; 0 puts nodes directly under it   default 1
    nodes_per_rack:    int   nodes in each rack (or in the cluster when racks is 0)    required
    sockets:           int   sockets per node; 0 hangs cores/gpus/memory on the node   default 1
    cores_per_socket:  int   core vertices per socket (per node when sockets is 0)     default 1
    gpus_per_socket:   int   gpu vertices per socket                                    default 0
    memory_per_socket: [count, size] | count | {count, size, unit}
                             memory pool vertices per socket, each of ``size`` units    default none
    memory_unit:       str   unit of the memory vertices' size                          default "GB"
    node_properties:   {str: str}  properties set on every node vertex                  default none

Ids follow GRUG's ``id_scope`` conventions: racks are numbered across the cluster, nodes across the
cluster (``id_scope=1`` below the rack), sockets within their node, and cores, gpus and memory
within their node (``id_scope=1`` below the socket), so node ``k`` holds ``core0 ..
core{sockets*cores_per_socket-1}``. Node ``k`` has rank ``k``; other vertices have rank -1, as in
GRUG-generated graphs. Vertex indices are assigned level by level: cluster, racks, nodes, sockets,
cores, gpus, memory.

>>> g = graph_from_recipe({"cluster": "tiny", "nodes_per_rack": 2, "sockets": 2,
...                        "cores_per_socket": 18, "gpus_per_socket": 1,
...                        "memory_per_socket": [4, 2]})   # Fluxion's tiny.graphml
>>> len(g), g.path(g.resolve("node1"))
(100, '/tiny0/rack0/node1')
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from xml.sax.saxutils import escape

from fluxinfra.inputs import MAX_VERTICES, parse_json, parse_yaml, read_text

__all__ = [
    "Recipe",
    "RecipeError",
    "parse_recipe",
    "load_recipe",
    "graph_from_recipe",
    "recipe_to_grug",
    "recipe_vertex_count",
]


def _error_base() -> type[Exception]:
    # GraphError lives in the matcher core; fall back to the project base until it exists.
    try:
        from fluxinfra.matcher.errors import GraphError
    except ImportError:
        from fluxinfra.errors import FluxinfraError as GraphError
    return GraphError


class RecipeError(_error_base(), ValueError):  # type: ignore[misc]
    """A recipe field has a wrong type or value (names the field, the value and the fix)."""


_INT_FIELDS = {
    "racks": (1, 0),
    "nodes_per_rack": (None, 1),
    "sockets": (1, 0),
    "cores_per_socket": (1, 0),
    "gpus_per_socket": (0, 0),
}
_KNOWN = {"cluster", "memory_per_socket", "memory_unit", "node_properties", *_INT_FIELDS}


@dataclass(frozen=True)
class Recipe:
    """A validated recipe (see the module docstring for the meaning of each field)."""

    cluster: str = "cluster"
    racks: int = 1
    nodes_per_rack: int = 1
    sockets: int = 1
    cores_per_socket: int = 1
    gpus_per_socket: int = 0
    memory_count: int = 0
    memory_size: int = 1
    memory_unit: str = "GB"
    node_properties: tuple[tuple[str, str], ...] = ()

    @property
    def nodes(self) -> int:
        return max(self.racks, 1) * self.nodes_per_rack

    @property
    def per_socket(self) -> int:
        return self.cores_per_socket + self.gpus_per_socket + self.memory_count


def _int_field(recipe: Mapping[str, Any], key: str, default: int | None, minimum: int) -> int:
    if key not in recipe:
        if default is None:
            raise RecipeError(f"recipe.{key}: missing; give an integer >= {minimum}, e.g. 4")
        return default
    value = recipe[key]
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise RecipeError(f"recipe.{key}: {value!r} is not an integer >= {minimum}")
    return value


def _name_field(value: Any, field: str) -> str:
    if not isinstance(value, str) or not value or any(c in value for c in "/ \t\n"):
        raise RecipeError(
            f"recipe.{field}: {value!r} must be a non-empty string without '/' or spaces"
        )
    return value


def _memory(value: Any, unit: str) -> tuple[int, int, str]:
    if value is None:
        return 0, 1, unit
    count, size = value, 1
    if isinstance(value, Mapping):
        unknown = set(value) - {"count", "size", "unit"}
        if unknown:
            raise RecipeError(
                f"recipe.memory_per_socket: unknown key(s) {sorted(unknown)}; use count, size, unit"
            )
        count, size = value.get("count"), value.get("size", 1)
        unit = _name_field(value.get("unit", unit), "memory_per_socket.unit")
    elif isinstance(value, list | tuple):
        if len(value) != 2:
            raise RecipeError(
                f"recipe.memory_per_socket: {value!r}; give [count, size], e.g. [4, 16] "
                "for four 16 GB pools per socket"
            )
        count, size = value
    for name, number, minimum in (("count", count, 0), ("size", size, 1)):
        if isinstance(number, bool) or not isinstance(number, int) or number < minimum:
            raise RecipeError(
                f"recipe.memory_per_socket: {name} {number!r} is not an integer >= {minimum}; "
                "give [count, size], e.g. [4, 16]"
            )
    return count, size, unit


def parse_recipe(recipe: Mapping[str, Any] | Recipe) -> Recipe:
    """Validate a recipe dict; raise :class:`RecipeError` naming the field, value and fix."""
    if isinstance(recipe, Recipe):
        return recipe
    if not isinstance(recipe, Mapping):
        raise RecipeError(
            f"recipe: {type(recipe).__name__} {recipe!r:.60} is not a mapping; give e.g. "
            "{'nodes_per_rack': 4, 'sockets': 2, 'cores_per_socket': 32}"
        )
    unknown = set(recipe) - _KNOWN
    if unknown:
        raise RecipeError(f"recipe: unknown key(s) {sorted(unknown)}; known: {sorted(_KNOWN)}")
    ints = {key: _int_field(recipe, key, *spec) for key, spec in _INT_FIELDS.items()}
    unit = _name_field(recipe.get("memory_unit", "GB"), "memory_unit")
    count, size, unit = _memory(recipe.get("memory_per_socket"), unit)
    props = recipe.get("node_properties") or {}
    if not isinstance(props, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str | int) for k, v in props.items()
    ):
        raise RecipeError(f"recipe.node_properties: {props!r} must map property names to strings")
    parsed = Recipe(
        cluster=_name_field(recipe.get("cluster", "cluster"), "cluster"),
        memory_count=count,
        memory_size=size,
        memory_unit=unit,
        node_properties=tuple((k, str(v)) for k, v in props.items()),
        **ints,
    )
    total = recipe_vertex_count(parsed)
    if total > MAX_VERTICES:
        raise RecipeError(
            f"recipe: {total:,} vertices exceeds the {MAX_VERTICES:,} limit; lower "
            "nodes_per_rack/racks or the per-socket counts"
        )
    return parsed


def recipe_vertex_count(recipe: Recipe) -> int:
    """Number of vertices the recipe generates."""
    sockets = recipe.sockets
    per_node = 1 + sockets + max(sockets, 1) * recipe.per_socket
    return 1 + recipe.racks + recipe.nodes * per_node


def load_recipe(source: str | Path | Mapping[str, Any]) -> Recipe:
    """A recipe from a dict, a YAML/JSON file path, or YAML/JSON text."""
    if isinstance(source, Mapping):
        return parse_recipe(source)
    text = str(source)
    path = Path(text) if isinstance(source, Path) or "\n" not in text else None
    if path is not None and (isinstance(source, Path) or path.suffix in (".yaml", ".yml", ".json")):
        if not path.exists():
            raise RecipeError(f"recipe file {str(path)!r}: no such file; check the path")
        text = read_text(path, f"recipe file {str(path)!r}", RecipeError)
    if text.lstrip().startswith("{"):
        data = parse_json(text, "recipe", RecipeError, "fix the syntax")
    else:
        data = parse_yaml(text, "recipe", RecipeError, fix="fix the syntax")
    return parse_recipe(data)


def graph_from_recipe(recipe: Mapping[str, Any] | Recipe):
    """Build and finalize the :class:`~fluxinfra.matcher.ResourceGraph` a recipe describes."""
    from fluxinfra.matcher.graph import ResourceGraph

    r = parse_recipe(recipe)
    g = ResourceGraph()
    add_vertex, add_edge = g.add_vertex, g.add_edge
    node_props = dict(r.node_properties) or None
    root = add_vertex(type="cluster", basename=r.cluster, name=f"{r.cluster}0", id=0)
    if r.racks:
        racks = [
            add_vertex(type="rack", basename="rack", name=f"rack{i}", id=i) for i in range(r.racks)
        ]
        for rack in racks:
            add_edge(root, rack)
    else:
        racks = [root]
    nodes: list[int] = []
    k = 0
    for rack in racks:
        for _ in range(r.nodes_per_rack):
            v = add_vertex(
                type="node", basename="node", name=f"node{k}", id=k, rank=k, properties=node_props
            )
            add_edge(rack, v)
            nodes.append(v)
            k += 1
    # Sockets (or the node itself when sockets == 0) carry the leaves; leaf ids are node-local.
    if r.sockets:
        parents = []
        for node in nodes:
            for s in range(r.sockets):
                v = add_vertex(type="socket", basename="socket", name=f"socket{s}", id=s)
                add_edge(node, v)
                parents.append(v)
        per_node = r.sockets
    else:
        parents, per_node = nodes, 1
    for kind, count, size, unit in (
        ("core", r.cores_per_socket, 1, ""),
        ("gpu", r.gpus_per_socket, 1, ""),
        ("memory", r.memory_count, r.memory_size, r.memory_unit),
    ):
        if not count:
            continue
        names = [f"{kind}{i}" for i in range(per_node * count)]
        for j, parent in enumerate(parents):
            base = (j % per_node) * count
            for i in range(base, base + count):
                add_edge(
                    parent,
                    add_vertex(type=kind, basename=kind, name=names[i], id=i, size=size, unit=unit),
                )
    g.finalize()
    g.layouts = dict.fromkeys(nodes, 0)  # every node is built alike (node-local leaf ids)
    return g


def recipe_to_grug(recipe: Mapping[str, Any] | Recipe) -> str:
    """GRUG GraphML text that makes Fluxion's GRUG reader generate the same graph."""
    r = parse_recipe(recipe)
    keys = [
        ("root", "node", "int", "0"),
        ("type", "node", "string", None),
        ("basename", "node", "string", None),
        ("unit", "node", "string", None),
        ("size", "node", "long", "1"),
        ("subsystem", "node", "string", "containment"),
        ("e_subsystem", "edge", "string", "containment"),
        ("relation", "edge", "string", "contains"),
        ("rrelation", "edge", "string", "in"),
        ("id_scope", "edge", "int", "0"),
        ("id_start", "edge", "int", "0"),
        ("id_stride", "edge", "int", "1"),
        ("gen_method", "edge", "string", "MULTIPLY"),
        ("multi_scale", "edge", "int", "1"),
    ]
    out = [
        '<?xml version="1.0" encoding="UTF-8"?>',
        '<graphml xmlns="http://graphml.graphdrawing.org/xmlns">',
    ]
    for key, for_, kind, default in keys:
        attr = f'<key id="{key}" for="{for_}" attr.name="{key}" attr.type="{kind}"'
        out.append(f"  {attr}><default>{default}</default></key>" if default else f"  {attr}/>")
    out.append(f'  <graph id="{escape(r.cluster)}" edgedefault="directed">')

    def vertex(vid: str, kind: str, basename: str, size: int = 1, unit: str = "", root=False):
        data = [("root", "1")] if root else []
        data += [("type", kind), ("basename", basename)]
        if size != 1:
            data.append(("size", str(size)))
        if unit:
            data.append(("unit", unit))
        body = "".join(f'<data key="{k}">{escape(v)}</data>' for k, v in data)
        out.append(f'    <node id="{vid}">{body}</node>')

    def edge(src: str, tgt: str, scale: int, scope: int = 0):
        body = f'<data key="multi_scale">{scale}</data>'
        if scope:
            body += f'<data key="id_scope">{scope}</data>'
        out.append(f'    <edge id="{src}2{tgt}" source="{src}" target="{tgt}">{body}</edge>')

    vertex("cluster", "cluster", r.cluster, root=True)
    above_node = "cluster"
    if r.racks:
        vertex("rack", "rack", "rack")
        edge("cluster", "rack", r.racks)
        above_node = "rack"
    vertex("node", "node", "node")
    edge(above_node, "node", r.nodes_per_rack, scope=1 if r.racks else 0)
    leaf_parent = "node"
    if r.sockets:
        vertex("socket", "socket", "socket")
        edge("node", "socket", r.sockets)
        leaf_parent = "socket"
    for kind, count, size, unit in (
        ("core", r.cores_per_socket, 1, ""),
        ("gpu", r.gpus_per_socket, 1, ""),
        ("memory", r.memory_count, r.memory_size, r.memory_unit),
    ):
        if count:
            vertex(kind, kind, kind, size, unit)
            edge(leaf_parent, kind, count, scope=1 if r.sockets else 0)
    out += ["  </graph>", "</graphml>", ""]
    return "\n".join(out)
