"""Type checks for the fields fluxinfra reads from Kubernetes objects.

A real API server only stores objects that passed its schema, but fluxinfra also reads objects
that never went through one: a Node list sent to the Fluxion service, an AdmissionReview posted
to the webhook by anything that reaches it, a hand-made manifest, a server of another version.
Every reader checks the fields it is about to use with these helpers first, so a field of the
wrong type is one :class:`ShapeError` naming the field, the value and the fix, and never a
``TypeError`` from deep inside a reader.

Quantities are held to what a Kubernetes ``Quantity`` can give as an integer
(``Quantity.Value()`` / ``MilliValue()`` are int64): at most 2^63-1 base units (millicores for
cpu, bytes or counts for the rest).

>>> check_node({"metadata": {"name": "n1"}, "status": {"allocatable": {"cpu": "4"}}})
'n1'
>>> try:
...     check_node({"metadata": {"name": "n1"}, "status": {"allocatable": {"cpu": "16Ei"}}})
... except ShapeError as exc:
...     print(exc)  # doctest: +ELLIPSIS
node n1: status.allocatable.cpu: '16Ei' is 1.84e+22 millicores, more than ... holds (2^63-1)...
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from fluxinfra.errors import FluxinfraError
from fluxinfra.kube.quantity import parse_quantity

__all__ = ["INT64_MAX", "ShapeError", "boolean", "check_node", "integer", "mapping", "mappings",
           "node_label", "quantity", "quantity_map", "string", "string_list", "string_map"]

INT64_MAX = (1 << 63) - 1
#: the longest value shown in a message (the rest elided): a 5,000-digit "quantity" would
#: otherwise be the whole log line
_SHOWN = 60


class ShapeError(FluxinfraError, ValueError):
    """A field of a Kubernetes object has a type or value fluxinfra cannot read."""


def shown(value: Any) -> str:
    """``repr(value)``, cut to a readable length."""
    text = repr(value)
    return text if len(text) <= _SHOWN else f"{text[:_SHOWN - 15]}...({len(text)} chars)"


def _kind(value: Any) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean",
            int: "a number", float: "a number", type(None): "null"}.get(type(value),
                                                                          type(value).__name__)


def mapping(value: Any, where: str) -> Mapping[str, Any]:
    """An object (``{}`` for an absent one)."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ShapeError(f"{where}: {shown(value)} is {_kind(value)}, not an object")
    return value


def mappings(value: Any, where: str) -> list[Mapping[str, Any]]:
    """A list of objects (``[]`` for an absent one)."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise ShapeError(f"{where}: {shown(value)} is {_kind(value)}, not a list of objects")
    for i, item in enumerate(value):
        if not isinstance(item, Mapping):
            raise ShapeError(f"{where}[{i}]: {shown(item)} is {_kind(item)}, not an object")
    return value


def string(value: Any, where: str, *, required: bool = False) -> str:
    """A string (``""`` for an absent one unless ``required``)."""
    if value is None and not required:
        return ""
    if not isinstance(value, str) or (required and not value):
        raise ShapeError(f"{where}: {shown(value)} is {_kind(value)}; give a non-empty string"
                         if required else f"{where}: {shown(value)} is {_kind(value)}, "
                         "not a string")
    return value


def string_list(value: Any, where: str) -> list[str]:
    """A list of strings (``[]`` for an absent one)."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise ShapeError(f"{where}: {shown(value)} is {_kind(value)}, not a list of strings")
    for i, item in enumerate(value):
        if not isinstance(item, str):
            raise ShapeError(f"{where}[{i}]: {shown(item)} is {_kind(item)}, not a string")
    return value


def string_map(value: Any, where: str) -> Mapping[str, str]:
    """Labels, annotations, a nodeSelector: string keys to string values."""
    value = mapping(value, where)
    for key, item in value.items():
        if not isinstance(key, str):
            raise ShapeError(f"{where}: key {shown(key)} is not a string")
        if not isinstance(item, str):
            raise ShapeError(f"{where}[{key}]: {shown(item)} is {_kind(item)}; label and "
                             "annotation values are strings (quote numbers and booleans)")
    return value


def boolean(value: Any, where: str) -> bool:
    """A boolean (False for an absent one)."""
    if value is None:
        return False
    if not isinstance(value, bool):
        raise ShapeError(f"{where}: {shown(value)} is {_kind(value)}; give true or false")
    return value


def integer(value: Any, where: str, *, low: int = -INT64_MAX - 1, high: int = INT64_MAX,
            default: int = 0) -> int:
    """A whole number in ``[low, high]`` (``default`` for an absent one)."""
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise ShapeError(f"{where}: {shown(value)} is {_kind(value)}; give a whole number")
    if not low <= value <= high:
        raise ShapeError(f"{where}: {shown(value)} is out of range; give a whole number from "
                         f"{low} to {high}")
    return value


def quantity(value: Any, where: str, resource: str = "") -> int:
    """A non-negative quantity in base units (cpu: millicores), rounded up as Kubernetes
    rounds; at most 2^63-1 of them."""
    if isinstance(value, str) and len(value) > 100:
        # parsing would fail on Python's integer-digit limit, or take a while first
        raise ShapeError(f"{where}: {shown(value)} is not a Kubernetes quantity (no quantity "
                         "is that long); use e.g. '1500m' or '16Gi'")
    try:
        amount = parse_quantity(value, where)
    except ValueError as exc:  # QuantityError names the field already
        raise ShapeError(str(exc)) from None
    if amount < 0:
        raise ShapeError(f"{where}: {shown(value)} is negative; resource quantities must be "
                         ">= 0")
    base = math.ceil(amount * 1000) if resource == "cpu" else math.ceil(amount)
    if base > INT64_MAX:
        unit = "millicores" if resource == "cpu" else "units"
        raise ShapeError(f"{where}: {shown(value)} is {Decimal(base):.3g} {unit}, more than a "
                         f"Kubernetes quantity holds (2^63-1); use a realistic amount")
    return base


def quantity_map(value: Any, where: str) -> dict[str, int]:
    """``{resource name: quantity}`` (requests, limits, allocatable) in base units."""
    value = mapping(value, where)
    out = {}
    for name, item in value.items():
        if not isinstance(name, str) or not name:
            raise ShapeError(f"{where}: resource name {shown(name)} is not a non-empty string")
        out[name] = quantity(item, f"{where}.{name}", name)
    return out


def node_label(node: Any) -> str:
    """How a Node is named in a message: ``node NAME``, or ``a Node without a name``."""
    if isinstance(node, Mapping):
        meta = node.get("metadata")
        if isinstance(meta, Mapping) and isinstance(meta.get("name"), str) and meta["name"]:
            return f"node {meta['name']}"
    return "a Node without metadata.name"


def check_node(node: Any, where: str = "") -> str:
    """Check every field of a Node that fluxinfra reads; returns its name.

    Reads ``metadata.name`` (required), ``metadata.labels``, ``spec.unschedulable``,
    ``spec.taints`` (``key``, ``value``, ``effect``), ``status.allocatable`` and
    ``status.capacity`` (quantities), ``status.conditions`` (``type``, ``status``).
    ``where`` prefixes the message (e.g. ``nodes[3]``).
    """
    prefix = f"{where}: " if where else ""
    if not isinstance(node, Mapping):
        raise ShapeError(f"{prefix}{shown(node)} is {_kind(node)}, not a Node object")
    meta = node.get("metadata")
    if not isinstance(meta, Mapping):
        raise ShapeError(f"{prefix}metadata: {shown(meta)} is {_kind(meta)}; a Node needs "
                         "metadata with a name")
    name = string(meta.get("name"), f"{prefix}metadata.name", required=True)
    at = f"{where} (node {name})" if where else f"node {name}"
    string_map(meta.get("labels"), f"{at}: metadata.labels")
    spec = mapping(node.get("spec"), f"{at}: spec")
    boolean(spec.get("unschedulable"), f"{at}: spec.unschedulable")
    for i, taint in enumerate(mappings(spec.get("taints"), f"{at}: spec.taints")):
        string(taint.get("key"), f"{at}: spec.taints[{i}].key")
        string(taint.get("value"), f"{at}: spec.taints[{i}].value")
        string(taint.get("effect"), f"{at}: spec.taints[{i}].effect", required=True)
    status = mapping(node.get("status"), f"{at}: status")
    quantity_map(status.get("allocatable"), f"{at}: status.allocatable")
    quantity_map(status.get("capacity"), f"{at}: status.capacity")
    for i, condition in enumerate(mappings(status.get("conditions"), f"{at}: status.conditions")):
        string(condition.get("type"), f"{at}: status.conditions[{i}].type")
        string(condition.get("status"), f"{at}: status.conditions[{i}].status")
    return name
