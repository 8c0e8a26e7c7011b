"""Graph readers by format name: ``jgf``, ``jgf_shorthand``, ``grug``, ``rv1exec``, ``hwloc``.

Loading a graph, ``jgf_shorthand`` reads like ``jgf`` (as in Fluxion, the shorthand only
matters when an R updates an allocation: see ``Matcher.update_allocate(reader=...)``).
"""

from __future__ import annotations

import gc
import os
from collections.abc import Iterator
from contextlib import contextmanager

from fluxinfra.inputs import MAX_GRAPH_BYTES, decode, read_text
from fluxinfra.matcher.errors import GraphError
from fluxinfra.matcher.graph import ResourceGraph, read_jgf

__all__ = ["load_graph", "FORMATS", "collector_paused"]

FORMATS = ("jgf", "jgf_shorthand", "grug", "rv1exec", "hwloc")


def _text(source) -> str:
    """The text of a graph given as bytes, a path, or text (read at most MAX_GRAPH_BYTES)."""
    if isinstance(source, (bytes, bytearray)):
        return decode(source, "graph", GraphError)
    if isinstance(source, os.PathLike) or (
            isinstance(source, str) and "\n" not in source and len(source) < 4096
            and not source.lstrip().startswith(("{", "<"))):
        return read_text(source, f"graph file {os.fsdecode(source)}", GraphError,
                         MAX_GRAPH_BYTES)
    if not isinstance(source, str):
        raise GraphError(f"graph: expected a path, text or bytes, got {type(source).__name__}")
    return source


@contextmanager
def collector_paused() -> Iterator[None]:
    """The cyclic garbage collector off while a graph is built, back on after (if it was).

    Building a graph allocates millions of objects, keeps what lasts in long lists that
    live as long as the graph, and makes almost no reference cycles (a few hundred
    unreachable objects after a 16,384-node GRUG graph), while the collector's young
    collections would keep walking those lists as they grow: about a fifth of a 16,384-node
    start, finding next to nothing (docs/design/matcher-performance.md). The few cycles a
    load leaves are collected by the next collection after it (or stay frozen with the graph
    when a Matcher freezes it)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def load_graph(source, fmt: str = "jgf", **options) -> ResourceGraph:
    """Load a resource graph from a path, text, or (for jgf/rv1exec) a dict (the collector
    paused meanwhile: :func:`collector_paused`)."""
    if fmt not in FORMATS:
        raise GraphError(f"unknown graph format {fmt!r}; use one of {', '.join(FORMATS)}")
    with collector_paused():
        return _load(source, fmt, **options)


def _load(source, fmt: str, **options) -> ResourceGraph:
    if fmt in ("jgf", "jgf_shorthand"):
        return read_jgf(source if isinstance(source, dict) else _text(source))
    if fmt == "grug":
        from fluxinfra.matcher.grug import read_grug
        return read_grug(_text(source))
    if fmt == "rv1exec":
        from fluxinfra.matcher.rv1exec import read_rv1exec
        return read_rv1exec(source if isinstance(source, dict) else _text(source))
    from fluxinfra.matcher.hwloc import read_hwloc
    return read_hwloc(_text(source), **options)
