"""RFC 31 job constraints (``attributes.system.constraints``), as Fluxion v0.54 applies them.

A constraint is a mapping with at most one operator:

``{}``
    matches every vertex.
``{"properties": ["xx", "^yy"]}``
    the vertex has property ``xx`` and not ``yy`` (a leading ``^`` negates; only the property's
    name is tested, never its value; an empty list matches everything).
``{"hostlist": ["node[0-3,7]", "login1"]}``
    the vertex's name is in the RFC 29 hostlist.
``{"ranks": ["0-3", "7"]}``
    the vertex's rank is in the RFC 22 idset.
``{"and": [c1, c2]}``, ``{"or": [c1, c2]}``, ``{"not": [c1, c2]}``
    all of them (an empty list is true), any of them (an empty list is false), not all of them.

Fluxion (``resource/libjobspec/constraint.cpp``; ``dfu_impl_t::by_constraint``) tests the
constraint only at vertices of type ``node`` and ``storage_node``: a vertex of those types that
does not match is pruned (the walk does not descend below it), every other vertex is unaffected.
:meth:`Constraint.applies_to` says which types those are.

Errors name the path, the value and the fix (Fluxion's own wording in quotes where it has one)::

>>> c = parse_constraint({"and": [{"properties": ["gpu"]}, {"not": [{"ranks": ["0-1"]}]}]})
>>> c.matches("node2", 2, {"gpu": ""}), c.matches("node1", 1, {"gpu": ""})
(True, False)
>>> try:
...     parse_constraint({"ranks": ["1-"]})
... except JobspecError as exc:
...     print(exc)
attributes.system.constraints.ranks[0]: invalid idset '1-' (write ranks as '0-3,7')
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections.abc import Mapping
from typing import Any

from fluxinfra import hostlist, idset
from fluxinfra.inputs import shown
from fluxinfra.matcher.errors import JobspecError, MatcherError

__all__ = ["CONSTRAINED_TYPES", "Constraint", "format_idset", "parse_constraint", "parse_idset"]

#: the vertex types Fluxion tests constraints at
CONSTRAINED_TYPES = frozenset({"node", "storage_node"})
_WHERE = "attributes.system.constraints"
_BAD_PROPERTY = re.compile(r"[!&'\"^`|()]")
#: most names one hostlist may expand to (a constraint or a ``find names=``)
_MAX_HOSTS = 1_000_000


class Constraint:
    """A parsed RFC 31 constraint tree; ``matches(name, rank, properties)``."""

    __slots__ = ("op", "values", "ranges", "doc")

    def __init__(self, op: str, values: Any, doc: Any, ranges: list[int] | None = None) -> None:
        self.op = op            #: "", "properties", "hostlist", "ranks", "and", "or", "not"
        self.values = values    #: properties: [(name, negate)], hostlist: frozenset, ops: [...]
        self.ranges = ranges    #: ranks: flat sorted [lo0, hi0, lo1, hi1, ...]
        self.doc = doc          #: the mapping it was parsed from

    @staticmethod
    def applies_to(vertex_type: str) -> bool:
        return vertex_type in CONSTRAINED_TYPES

    def matches(self, name: str, rank: int, properties: Mapping[str, Any] | None) -> bool:
        op = self.op
        if op == "properties":
            props = properties or {}
            return all((key in props) != negate for key, negate in self.values)
        if op == "ranks":
            ranges = self.ranges
            i = bisect_right(ranges, rank)
            return rank >= 0 and (i % 2 == 1 or (i > 0 and ranges[i - 1] == rank))
        if op == "hostlist":
            return name in self.values
        if op == "and":
            return all(c.matches(name, rank, properties) for c in self.values)
        if op == "or":
            return any(c.matches(name, rank, properties) for c in self.values)
        if op == "not":
            return not all(c.matches(name, rank, properties) for c in self.values)
        return True

    def to_dict(self) -> Any:
        return self.doc

    def __repr__(self) -> str:
        return f"Constraint({shown(self.doc)})"


def parse_constraint(doc: Any, where: str = _WHERE) -> Constraint:
    """Parse an RFC 31 constraint mapping; raises :class:`JobspecError` naming the path."""
    if not isinstance(doc, Mapping):
        raise JobspecError(f"{where}: constraint is not a mapping (got {shown(doc)}); write e.g. "
                           "{\"properties\": [\"gpu\"]}")
    if len(doc) > 1:
        raise JobspecError(f"{where}: constraint map may not contain > 1 operation (got "
                           f"{', '.join(map(str, doc))}); combine them with \"and\"")
    if not doc:
        return Constraint("", None, {})
    op, operands = next(iter(doc.items()))
    path = f"{where}.{op}"
    if op not in ("properties", "hostlist", "ranks", "and", "or", "not"):
        raise JobspecError(f"{where}: unknown constraint operator: {op} (use properties, "
                           "hostlist, ranks, and, or, not)")
    if not isinstance(operands, list):
        raise JobspecError(f"{path}: {op} operator value must be an array, got {shown(operands)}")
    if op == "properties":
        props = []
        for i, prop in enumerate(operands):
            if not isinstance(prop, str):
                raise JobspecError(f"{path}[{i}]: non-string property specified ({shown(prop)}); "
                                   "quote it")
            bare = prop[1:] if prop.startswith("^") else prop
            if not bare or _BAD_PROPERTY.search(bare):
                raise JobspecError(f"{path}[{i}]: {prop} is invalid (a property name may not "
                                   "be empty or contain ! & ' \" ^ ` | ( ))")
            props.append((bare, prop.startswith("^")))
        return Constraint(op, props, dict(doc))
    if op == "hostlist":
        hosts: set[str] = set()
        for i, text in enumerate(operands):
            hosts.update(parse_hostlist(_scalar(text), f"{path}[{i}]"))
        return Constraint(op, frozenset(hosts), dict(doc))
    if op == "ranks":
        ids: list[tuple[int, int]] = []
        for i, text in enumerate(operands):
            ids += _idset_ranges(_scalar(text), f"{path}[{i}]")
        return Constraint(op, None, dict(doc), _merge(ids))
    subs = [parse_constraint(c, f"{path}[{i}]") for i, c in enumerate(operands)]
    return Constraint(op, subs, dict(doc))


def _scalar(value: Any) -> str:
    # yaml-cpp's as<std::string>() reads any scalar as its text (ranks: [3] is "3")
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value) if isinstance(value, (str, int, float)) else repr(value)


def _idset_ranges(text: str, where: str) -> list[tuple[int, int]]:
    try:
        return idset.ranges(text, strict=False)
    except idset.IdsetError:
        raise JobspecError(f"{where}: invalid idset {shown(text)} (write ranks as '0-3,7')"
                           ) from None


def _merge(ranges: list[tuple[int, int]]) -> list[int]:
    return [bound for span in idset.merge(ranges) for bound in span]


def parse_idset(text: str, where: str = "idset") -> list[int]:
    """The flat sorted ``[lo, hi, ...]`` ranges of an RFC 22 idset (``"0-3,7"``)."""
    return _merge(_idset_ranges(text, where))


def format_idset(ids: list[int] | set[int] | frozenset[int]) -> str:
    """RFC 22 text of a set of non-negative integers: ``[0, 1, 2, 3, 7]`` -> ``"0-3,7"``.

    >>> format_idset({7, 0, 1, 2, 3})
    '0-3,7'
    """
    return idset.encode(ids)


def parse_hostlist(text: str, where: str = "hostlist", error: type[MatcherError] = JobspecError,
                   limit: int = _MAX_HOSTS) -> list[str]:
    """Expand an RFC 29 hostlist (``"node[0-3,7],login1"``) of at most ``limit`` names;
    raises ``error`` naming ``where``."""
    if not isinstance(text, str):
        raise error(f"{where}: a hostlist is a string like 'node[0-3,7]', got {shown(text)}")
    try:
        parts = hostlist.parse(text)
    except hostlist.HostlistError as exc:
        raise error(f"{where}: Invalid hostlist `{text}' ({exc})") from None
    if hostlist.count(parts) > limit:
        raise error(f"{where}: hostlist `{text}' names more than {limit:,} hosts")
    return list(hostlist.expand(parts))
