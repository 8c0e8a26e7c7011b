"""hwloc XML reader: one node's topology as a resource graph (Fluxion's hwloc reader shape).

``cluster0 -> node (HostName) -> [group/numanode/socket/cache] -> core -> pu`` plus GPUs
(CoProc OS devices, and AMD ``rsmi`` GPU devices). ``allowlist`` (``-W node,socket,core``)
keeps only the listed types; children of a dropped object hang on its nearest kept ancestor.
Ids are per-type logical indices in document order.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

from fluxinfra.inputs import MAX_VERTICES, shown
from fluxinfra.matcher.errors import GraphError
from fluxinfra.matcher.graph import ResourceGraph

__all__ = ["read_hwloc"]

_OSDEV_GPU, _OSDEV_COPROC = 1, 5
_INTEGER = re.compile(r"-?[0-9]{1,18}")


def _classify(obj) -> tuple[str, str, int] | None:
    """(type, basename, size) of an hwloc object, or None if Fluxion ignores it."""
    kind = obj.get("type")
    if kind == "Machine":
        return ("node", "node", 1)
    if kind == "Group":
        return ("group", "group", 1)
    if kind == "NUMANode":
        return ("numanode", "numanode", 1)
    if kind == "Package":
        return ("socket", "socket", 1)
    if kind in ("Cache", "L1Cache", "L2Cache", "L3Cache"):
        depth = obj.get("depth") or kind[1]
        return ("cache", f"L{depth}cache", _int_attr(obj, "cache_size", 0) // 1024)
    if kind == "Core":
        return ("core", "core", 1)
    if kind == "PU":
        return ("pu", "pu", 1)
    if kind == "OSDev":
        osdev = _int_attr(obj, "osdev_type", -1)
        name = obj.get("name", "")
        if osdev == _OSDEV_COPROC or (osdev == _OSDEV_GPU and name.startswith("rsmi")):
            return ("gpu", "gpu", 1)
    return None


def _int_attr(obj, name: str, default: int) -> int:
    """Integer attribute ``name`` of an hwloc object (GraphError naming it otherwise)."""
    text = obj.get(name)
    if text is None:
        return default
    body = text.strip()
    if _INTEGER.fullmatch(body) is None:
        raise GraphError(f"hwloc: <object type={obj.get('type')!r}> {name}={shown(text)}: must be "
                         "an integer")
    return int(body)


def _digits(text: str) -> int | None:
    """``text`` (all digits) as a number, None when empty or past int64."""
    return int(text) if text and len(text) <= 18 else None


def _allow_key(kind: str, basename: str) -> str:
    return basename if kind == "cache" else kind


def read_hwloc(text: str, allowlist: str | None = None, rank: int = 0) -> ResourceGraph:
    """Build ``cluster0 -> node -> ...`` from hwloc XML text."""
    try:
        root = ET.fromstring(text)
    except ET.ParseError as exc:
        raise GraphError(f"hwloc: malformed XML ({exc})") from None
    allowed = {t.strip() for t in allowlist.split(",")} if allowlist else None
    if allowed is not None:
        allowed.add("cluster")
    g = ResourceGraph()
    cluster = g.add_vertex(type="cluster", basename="cluster", id=0)
    counters: dict[str, int] = {}

    def visit(obj, parent: int) -> int:
        """Add ``obj``'s vertex below ``parent``; returns the vertex its children hang on."""
        here = parent
        info = _classify(obj)
        if info is not None:
            kind, basename, size = info
            index = counters.get(basename, 0)
            counters[basename] = index + 1
            if allowed is None or _allow_key(kind, basename) in allowed:
                name = None
                vid = index
                if kind == "node":
                    host = next((i.get("value") for i in obj.findall("info")
                                 if i.get("name") == "HostName"), None)
                    if host is None:
                        info = None
                    else:
                        name = host
                        digits = len(host) - len(host.rstrip("0123456789"))
                        basename = host[:-digits] if digits else host
                        vid = _digits(host[-digits:] if digits else "") or 0
                elif kind == "gpu":
                    name_attr = obj.get("name", "")
                    digits = "".join(ch for ch in name_attr if ch in "0123456789")
                    vid = _digits(digits) if digits else index
                    if vid is None:
                        raise GraphError(f"hwloc: GPU {shown(name_attr)}: the number in its name "
                                         "is too large")
                if info is not None:
                    if len(g) >= MAX_VERTICES:
                        raise GraphError(f"hwloc: more than {MAX_VERTICES:,} objects; no graph "
                                         "is that large")
                    v = g.add_vertex(type=kind, basename=basename, name=name, id=vid,
                                     rank=rank, size=size)
                    g.add_edge(parent, v)
                    here = v
        return here

    top = root.find("object")
    if top is None:
        raise GraphError("hwloc: no <object> in the topology XML")
    # (children in document order, parents first, without recursion: XML may nest deeper
    # than Python's stack)
    stack = [(top, cluster)]
    while stack:
        obj, parent = stack.pop()
        here = visit(obj, parent)
        stack.extend((child, here) for child in reversed(obj.findall("object")))
    g.finalize()
    return g
