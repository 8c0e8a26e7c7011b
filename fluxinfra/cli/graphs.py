"""How the commands find a graph's format and load it: one rule for ``match``, ``query``,
``draw`` and ``service``.

The format is ``-f`` when given, else the file name's: ``.graphml`` GRUG, ``.xml`` hwloc,
anything else JGF. A JSON file that is no JGF but an R (``execution``) or a Kubernetes node
list (``kubectl get nodes -o json``) is read as what it is. A YAML file is no graph: the error
says so rather than what a JSON parser thinks of it.

>>> guess_format("tiny.graphml"), guess_format("node.xml"), guess_format("cluster.json")
('grug', 'hwloc', 'jgf')
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fluxinfra.inputs import MAX_GRAPH_BYTES, parse_json, read_bytes
from fluxinfra.matcher.errors import GraphError
from fluxinfra.matcher.readers import FORMATS

__all__ = ["LOAD_FORMATS", "guess_format", "load_graph_file", "graph_from_node_list"]

#: what ``-f`` accepts: the matcher's readers; resource-query's ``rv1exec_force``, which it
#: loads with its rv1exec reader (the "force" matters only to the Fluxion module, which
#: otherwise prefers an R's scheduling key); and ``k8s``, a Kubernetes node list
LOAD_FORMATS = (*FORMATS, "rv1exec_force", "k8s")
_YAML = (".yaml", ".yml")


def guess_format(path: str) -> str:
    """The graph format a file name suggests: .graphml grug, .xml hwloc, otherwise jgf."""
    if path.endswith((".graphml", ".grug")):
        return "grug"
    if path.endswith(".xml"):
        return "hwloc"
    return "jgf"


def graph_from_node_list(doc: Any, source: str = "node list"):
    """The graph of ``kubectl get nodes[,pods] -o json`` output (a ``List``/``NodeList``, or a
    plain list of Node objects); pods listed with the nodes hold what they request."""
    from fluxinfra.kube.graph import graph_from_k8s

    items = doc.get("items") if isinstance(doc, dict) else doc
    if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
        raise GraphError(f"{source}: a Kubernetes node list is a list of Node objects or "
                         "{'items': [...]} as kubectl get nodes -o json prints")
    nodes = [i for i in items if i.get("kind", "Node") == "Node"]
    pods = [i for i in items if i.get("kind") == "Pod"]
    if not nodes:
        raise GraphError(f"{source}: the list holds no Node objects")
    try:
        return graph_from_k8s(nodes, pods, subtract_pods=bool(pods))
    except (TypeError, KeyError, AttributeError, ValueError) as exc:
        raise GraphError(f"{source}: not a list of Kubernetes Node objects ({exc})") from None


def load_graph_file(path: str, fmt: str | None, option: str = "graph", hint: str = "",
                    **options):
    """Load the graph file ``path`` (format ``fmt``, else as the module docstring says).

    Errors name ``option``; ``hint`` (e.g. the argument order) follows the YAML message.
    """
    from fluxinfra.matcher import load_graph

    if fmt is None and path.endswith(_YAML):
        raise GraphError(f"{option} {path}: a YAML file is not a resource graph; a graph is JGF "
                         "(.json), GRUG GraphML (.graphml), hwloc XML (.xml), an R (-f rv1exec) "
                         f"or a Kubernetes node list (-f k8s){'; ' + hint if hint else ''}")
    if not isinstance(path, str) or "\0" in path or not Path(path).exists():
        raise GraphError(f"{option} {path}: no such file; give the path of a resource graph")
    if fmt == "k8s":
        return graph_from_node_list(_json(path, option), f"{option} {path}")
    if fmt is not None:
        return load_graph(path, "rv1exec" if fmt == "rv1exec_force" else fmt, **options)
    guessed = guess_format(path)
    try:
        return load_graph(path, guessed, **options)
    except GraphError:
        if guessed != "jgf":
            raise
        other = _json_kind(path)
        if other == "rv1exec":
            return load_graph(path, "rv1exec")
        if other == "k8s":
            return graph_from_node_list(_json(path, option), f"{option} {path}")
        raise


def _json(path: str, option: str) -> Any:
    return parse_json(read_bytes(path, f"{option} {path}", GraphError, MAX_GRAPH_BYTES),
                      f"{option} {path}", GraphError, "give a JSON file")


def _json_kind(path: str) -> str | None:
    """What a JSON file that failed as JGF is instead: an R, a node list, or None."""
    try:
        doc = _json(path, "graph")
    except GraphError:
        return None
    if isinstance(doc, dict) and isinstance(doc.get("execution"), dict):
        return "rv1exec"
    items = doc.get("items") if isinstance(doc, dict) else doc
    if isinstance(items, list) and items and all(isinstance(i, dict) for i in items) \
            and any(i.get("kind", "Node") == "Node" and "status" in i for i in items):
        return "k8s"
    return None
