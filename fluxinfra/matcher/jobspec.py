"""Jobspec (RFC 14 / RFC 25) parsing with errors that name the offending path.

>>> js = Jobspec.parse({"version": 1, "resources": [{"type": "slot", "count": 2, "label": "x",
...     "with": [{"type": "core", "count": 4}]}], "tasks": [{"command": ["a"], "slot": "x",
...     "count": {"per_slot": 1}}]})
>>> js.resources[0].type, js.resources[0].with_[0].count_min, js.duration
('slot', 4, 0)
>>> Jobspec.parse({"version": 1, "resources": [{"type": "core", "count": {"min": 0}}]})
Traceback (most recent call last):
...
fluxinfra.matcher.errors.JobspecError: resources[0].count.min: must be >= 1, got 0
"""

from __future__ import annotations

import json
import math
from typing import Any

from fluxinfra.inputs import MAX_DEPTH, check_plain, parse_yaml, shown
from fluxinfra.matcher.constraint import parse_constraint
from fluxinfra.matcher.errors import JobspecError

__all__ = ["Jobspec", "Resource", "UINT_MAX"]

#: the largest count (min, max, operand) a jobspec may give: Fluxion reads counts as C unsigned
UINT_MAX = 0xFFFFFFFF
_RESOURCE_KEYS = {"type", "count", "unit", "exclusive", "with", "label", "id", "requires"}
_TOP_KEYS = {"version", "resources", "tasks", "attributes"}


class Resource:
    """One request vertex: ``type``, count range, exclusivity (None = unspecified), children."""

    __slots__ = ("type", "count_min", "count_max", "oper", "operand", "unit", "exclusive",
                 "label", "with_", "id", "user_data", "path")

    def __init__(self, type: str, count_min: int = 1, count_max: int | None = None,  # noqa: A002
                 oper: str = "+", operand: int = 1, unit: str = "",
                 exclusive: bool | None = None, label: str = "",
                 with_: list[Resource] | None = None, path: str = "") -> None:
        self.type = type
        self.count_min = count_min
        self.count_max = count_min if count_max is None else count_max
        self.oper = oper
        self.operand = operand
        self.unit = unit
        self.exclusive = exclusive
        self.label = label
        self.with_ = with_ or []
        self.id = ""
        self.path = path
        self.user_data: dict[str, int] = {}

    def calc_count(self, qc: int) -> int:
        """Largest count in this request's sequence that ``qc`` available units allow (0: none)."""
        lo, hi = self.count_min, self.count_max
        if lo > hi or lo > qc:
            return 0
        if self.oper == "+":
            count = qc if qc < hi else hi
            return count - ((count - lo) % self.operand)
        cur, count = lo, 0
        if self.oper == "*":
            if self.operand == 1:
                return cur
            while cur <= qc and cur <= hi:
                count = cur
                cur *= self.operand
            return count
        if self.oper == "^":
            if self.operand < 2 or cur == 1:
                return cur
            top = qc if qc < hi else hi
            while cur <= top:
                base = cur
                count = cur
                for _ in range(1, self.operand):
                    cur *= base
                    if cur > top:
                        break  # (the rest of the power only grows past it: base >= 2)
            return count
        return 0

    @property
    def effective_max(self) -> int:
        return self.calc_count(UINT_MAX)

    def to_dict(self) -> dict:
        if self.count_max == self.count_min:
            count: Any = self.count_min
        else:
            count = {"min": self.count_min, "max": self.count_max, "operator": self.oper,
                     "operand": self.operand}
        out: dict[str, Any] = {"type": self.type, "count": count}
        if self.unit:
            out["unit"] = self.unit
        if self.exclusive is not None:
            out["exclusive"] = self.exclusive
        if self.label:
            out["label"] = self.label
        if self.with_:
            out["with"] = [w.to_dict() for w in self.with_]
        return out

    def __repr__(self) -> str:
        return f"Resource({self.type}[{self.count_min}], with={shown(self.with_)})"


class Jobspec:
    """A parsed jobspec: ``resources`` (list of :class:`Resource`), ``tasks``, ``duration``."""

    __slots__ = ("version", "resources", "tasks", "duration", "attributes", "text", "memo",
                 "constraint")

    def __init__(self, resources: list[Resource], tasks: list | None = None, duration: int = 0,
                 version: int = 1, attributes: dict | None = None) -> None:
        self.resources = resources
        self.tasks = tasks or []
        self.duration = duration
        self.version = version
        self.attributes = attributes or {}
        #: RFC 31 ``attributes.system.constraints`` (None: absent; see constraint.py)
        self.constraint = None
        #: facts matchers derive from this (immutable) request, computed once
        self.memo: dict[Any, Any] = {"need": _prime(self.resources), "primed": "plain"}

    @classmethod
    def parse(cls, source: str | bytes | dict | Jobspec) -> Jobspec:
        """Parse a jobspec given as a dict, YAML text or JSON text."""
        if isinstance(source, Jobspec):
            return source
        if isinstance(source, (str, bytes, bytearray)):
            doc = parse_yaml(source, "jobspec", JobspecError)  # (checked as check_plain does)
        else:
            doc = source
            check_plain(doc, "jobspec", JobspecError)
        if not isinstance(doc, dict):
            raise JobspecError(f"jobspec: must be a mapping, got {type(doc).__name__}")
        unknown = set(doc) - _TOP_KEYS
        if unknown:
            raise JobspecError(f"{sorted(unknown)[0]}: unknown top-level key; allowed: "
                               f"{', '.join(sorted(_TOP_KEYS))}")
        version = doc.get("version")
        if isinstance(version, bool) or not isinstance(version, int) or not 1 <= version <= 9999:
            raise JobspecError(f"version: must be an integer 1..9999, got {shown(version)}")
        if "resources" not in doc:
            raise JobspecError("resources: missing; a jobspec needs a resources list")
        resources = _parse_resources(doc["resources"], "resources")
        tasks = doc.get("tasks", [])
        if not isinstance(tasks, list):
            raise JobspecError(f"tasks: must be a list, got {type(tasks).__name__}")
        # like Fluxion, a task's slot need not name an existing label
        for i, task in enumerate(tasks):
            _check_task(task, f"tasks[{i}]")
        attributes = doc.get("attributes") or {}
        if not isinstance(attributes, dict):
            raise JobspecError("attributes: must be a mapping")
        system = attributes.get("system") or {}
        if not isinstance(system, dict):
            raise JobspecError("attributes.system: must be a mapping")
        duration = system.get("duration", 0)
        if isinstance(duration, bool) or not isinstance(duration, (int, float)) or \
                not duration >= 0 or duration == math.inf:
            raise JobspecError(f"attributes.system.duration: must be a finite number >= 0 "
                               f"(seconds), got {shown(duration)}")
        # (a fraction of a second is a whole one, as in Fluxion: 0 would mean "no limit")
        js = cls(resources, tasks, math.ceil(duration), version, attributes)
        if "constraints" in system:
            constraint = parse_constraint(system["constraints"])
            js.constraint = constraint if constraint.op else None  # {} matches everything
        return js

    def to_dict(self) -> dict:
        out = {"version": self.version, "resources": [r.to_dict() for r in self.resources],
               "tasks": self.tasks, "attributes": dict(self.attributes)}
        out["attributes"].setdefault("system", {})["duration"] = self.duration
        return out

    def to_json(self) -> str:
        return json.dumps(self.to_dict())


#: how deep ``with`` may nest (check_plain has bounded the document at MAX_DEPTH levels, two
#: of which each ``with`` takes)
_MAX_WITH = MAX_DEPTH // 2


def _parse_resources(value: Any, path: str, depth: int = 0) -> list[Resource]:
    if not isinstance(value, list) or not value:
        raise JobspecError(f"{path}: must be a non-empty list of resources")
    if depth > _MAX_WITH:
        raise JobspecError(f"{path}: resources nest more than {_MAX_WITH} levels deep; no "
                           "graph is that deep")
    return [_parse_resource(item, f"{path}[{i}]", depth) for i, item in enumerate(value)]


def _parse_resource(node: Any, path: str, depth: int = 0) -> Resource:
    if not isinstance(node, dict):
        raise JobspecError(f"{path}: resource must be a mapping, got {type(node).__name__}")
    unknown = set(node) - _RESOURCE_KEYS
    if unknown:
        key = sorted(unknown)[0]
        allowed = ", ".join(sorted(_RESOURCE_KEYS))
        raise JobspecError(f"{path}.{key}: unknown key; allowed: {allowed}")
    rtype = node.get("type")
    if not isinstance(rtype, str) or not rtype:
        raise JobspecError(f"{path}.type: missing or not a string")
    if "count" not in node:
        raise JobspecError(f"{path}.count: missing (an integer or {{min, max, operator, operand}})")
    res = Resource(rtype, path=path)
    _parse_count(res, node["count"], f"{path}.count")
    if "unit" in node:
        if not isinstance(node["unit"], str):
            raise JobspecError(f"{path}.unit: must be a string, got {node['unit']!r}")
        res.unit = node["unit"]
    if "exclusive" in node:
        excl = node["exclusive"]
        if isinstance(excl, str) and excl in ("true", "false"):
            excl = excl == "true"
        if not isinstance(excl, bool):
            raise JobspecError(f"{path}.exclusive: must be true or false, got {shown(excl)}")
        res.exclusive = excl
    if "label" in node:
        if isinstance(node["label"], bool) or not isinstance(node["label"], (str, int)):
            raise JobspecError(f"{path}.label: must be a string, got {node['label']!r}")
        res.label = str(node["label"])
    elif rtype == "slot":
        raise JobspecError(f"{path}.label: missing; every slot needs a label (tasks refer to it)")
    if "with" in node:
        res.with_ = _parse_resources(node["with"], f"{path}.with", depth + 1)
    return res


def _int(value: Any, path: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise JobspecError(f"{path}: must be an integer, got {shown(value)}")
    if value < minimum:
        raise JobspecError(f"{path}: must be >= {minimum}, got {value}")
    if value > UINT_MAX:
        told = value if value < 1 << 64 else f"about 2**{value.bit_length() - 1}"
        raise JobspecError(f"{path}: must be <= {UINT_MAX} (Fluxion's largest count), got "
                           f"{told}; ask for at most that many")
    return value


def _parse_count(res: Resource, count: Any, path: str) -> None:
    if not isinstance(count, dict):
        res.count_min = res.count_max = _int(count, path, 1)
        return
    unknown = set(count) - {"min", "max", "operator", "operand"}
    if unknown:
        raise JobspecError(f"{path}.{sorted(unknown)[0]}: unknown key; allowed: min, max, "
                           "operator, operand")
    if "min" not in count:
        raise JobspecError(f"{path}.min: missing")
    res.count_min = _int(count["min"], f"{path}.min", 1)
    extra = [k for k in ("max", "operator", "operand") if k in count]
    if extra and len(extra) != 3:
        missing = sorted({"max", "operator", "operand"} - set(extra))[0]
        raise JobspecError(f"{path}.{missing}: missing; give all or none of max, operator, "
                           "operand")
    if not extra:
        res.count_max = res.count_min
        return
    res.count_max = _int(count["max"], f"{path}.max", res.count_min)
    oper = count["operator"]
    if oper not in ("+", "*", "^"):
        raise JobspecError(f"{path}.operator: must be one of +, *, ^; got {shown(oper)}")
    floor = 1 if oper == "+" else 2
    res.oper = oper
    res.operand = _int(count["operand"], f"{path}.operand", floor)
    if oper == "^" and res.count_min < 2:
        raise JobspecError(f"{path}.min: must be >= 2 with operator '^', got {res.count_min}")


def _check_task(task: Any, path: str) -> None:
    if not isinstance(task, dict):
        raise JobspecError(f"{path}: task must be a mapping")
    unknown = set(task) - {"command", "slot", "count", "distribution", "attributes"}
    if unknown:
        raise JobspecError(f"{path}.{sorted(unknown)[0]}: unknown key")
    if not isinstance(task.get("command"), list):
        raise JobspecError(f"{path}.command: missing or not a list")
    slot = task.get("slot")
    if not isinstance(slot, str):
        raise JobspecError(f"{path}.slot: missing; name the slot label the task runs in")
    count = task.get("count")
    if count is not None and (not isinstance(count, dict) or len(count) != 1):
        raise JobspecError(f"{path}.count: must be a mapping with one entry "
                           "(per_slot or total)")


def _prime(resources: list[Resource]) -> dict[str, int]:
    """Fill ``user_data``: per resource, the minimum total of each type below one instance."""
    total: dict[str, int] = {}
    for r in resources:
        below = _prime(r.with_)
        r.user_data = below
        total[r.type] = total.get(r.type, 0) + r.count_min
        for t, n in below.items():
            total[t] = total.get(t, 0) + r.count_min * n
    return total


def aggregate(resources: list[Resource]) -> dict[str, int]:
    """Minimum total of each type the whole request needs."""
    return _prime(resources)
