"""Kubernetes selectors as kube-scheduler v1.28 evaluates them (pure functions on API JSON), the
one copy of these rules for the scheduler, the queue and the graph built from Node objects.

- :class:`LabelSelector`: a ``metav1.LabelSelector`` (``matchLabels`` + ``matchExpressions``
  with In, NotIn, Exists, DoesNotExist). A missing selector (``None``) selects nothing, an
  empty one (``{}``) everything (``metav1.LabelSelectorAsSelector``).
  :meth:`LabelSelector.from_text` reads the string form ``kubectl -l`` takes
  (``labels.Parse``: ``a=b,c!=d,e,!f,g in (x,y)``).
- :class:`NodeSelector`: ``requiredDuringSchedulingIgnoredDuringExecution`` of a node affinity:
  terms are ORed, a term's ``matchExpressions`` (In, NotIn, Exists, DoesNotExist, Gt, Lt) and
  ``matchFields`` (``metadata.name`` In/NotIn with one value) are ANDed; an empty term is
  skipped and a selector with no usable term selects nothing (component-helpers'
  ``nodeaffinity``).
- :func:`tolerates`: one toleration against one taint (``v1.Toleration.ToleratesTaint``): an
  empty effect matches every effect, an empty key with ``Exists`` every key.

Malformed selectors raise :class:`SelectorError` naming the field (the API server validates
pods, so this only meets hand-made objects).

>>> sel = LabelSelector.parse({"matchExpressions": [{"key": "app", "operator": "In",
...                                                  "values": ["web"]}]}, "selector")
>>> sel.matches({"app": "web"}), sel.matches({}), LabelSelector.parse(None, "x").matches({})
(True, False, False)
>>> ns = NodeSelector.parse({"nodeSelectorTerms": [{"matchExpressions": [
...     {"key": "cores", "operator": "Gt", "values": ["8"]}]}]}, "affinity")
>>> ns.matches("n1", {"cores": "16"}), ns.matches("n1", {"cores": "x"})
(True, False)
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from fluxinfra.errors import FluxinfraError

__all__ = ["LabelSelector", "NodeSelector", "SelectorError", "Toleration", "Taint",
           "tolerates", "untolerated_taint"]


class SelectorError(FluxinfraError):
    """A selector, toleration or taint that cannot be read (names the field)."""


_LABEL_OPS = ("In", "NotIn", "Exists", "DoesNotExist")
# one requirement of the string form, at the start of what is left to read
_SET_REQ = re.compile(r"^\s*([^\s!=(),]+)\s+(in|notin)\s+\(([^)]*)\)\s*")
_EQ_REQ = re.compile(r"^\s*([^\s!=(),]+)\s*(==|=|!=)\s*([^\s,]*)\s*")
_EXISTS_REQ = re.compile(r"^\s*(!?)\s*([^\s!=(),]+)\s*")
_NODE_OPS = _LABEL_OPS + ("Gt", "Lt")


def _list(value: Any, where: str) -> list[Any]:
    """A list of requirements (``[]`` for an absent one)."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise SelectorError(f"{where}: {value!r} is not a list of requirements (key, "
                            "operator, values)")
    return value


def _requirement(expr: Any, where: str, ops: tuple[str, ...]) -> tuple[str, str, frozenset]:
    if not isinstance(expr, Mapping):
        raise SelectorError(f"{where}: {expr!r} is not a requirement (key, operator, values)")
    key, op = expr.get("key"), expr.get("operator")
    values = expr.get("values") or []
    if not isinstance(key, str) or not key:
        raise SelectorError(f"{where}.key: {key!r}; every requirement names a label key")
    if op not in ops:
        raise SelectorError(f"{where}.operator: {op!r}; use one of {', '.join(ops)}")
    if not isinstance(values, list):
        raise SelectorError(f"{where}.values: {values!r} is not a list")
    if op in ("In", "NotIn") and not values:
        raise SelectorError(f"{where}.values: {op} needs at least one value")
    if op in ("Exists", "DoesNotExist") and values:
        raise SelectorError(f"{where}.values: {op} takes no values")
    if op in ("Gt", "Lt") and (len(values) != 1 or not _is_int(values[0])):
        raise SelectorError(f"{where}.values: {op} needs exactly one integer value, got "
                            f"{values!r}")
    return key, op, frozenset(str(v) for v in values)


def _is_int(value: Any) -> bool:
    try:
        int(str(value), 10)
    except ValueError:
        return False
    return True


def _matches(reqs: tuple[tuple[str, str, frozenset], ...], labels: Mapping[str, str]) -> bool:
    for key, op, values in reqs:
        value = labels.get(key)
        if op == "In":
            if value is None or value not in values:
                return False
        elif op == "NotIn":
            if value is not None and value in values:
                return False
        elif op == "Exists":
            if value is None:
                return False
        elif op == "DoesNotExist":
            if value is not None:
                return False
        else:  # Gt, Lt: integer comparison; a non-integer label never matches
            if value is None or not _is_int(value):
                return False
            bound = int(next(iter(values)))
            if (op == "Gt" and not int(value) > bound) or (op == "Lt" and not int(value) < bound):
                return False
    return True


@dataclass(frozen=True)
class LabelSelector:
    """A parsed ``metav1.LabelSelector``; ``nothing`` for a missing one."""

    reqs: tuple[tuple[str, str, frozenset], ...] = ()
    nothing: bool = False

    @classmethod
    def parse(cls, obj: Any, where: str) -> LabelSelector:
        if obj is None:
            return cls(nothing=True)
        if not isinstance(obj, Mapping):
            raise SelectorError(f"{where}: {obj!r} is not a label selector (matchLabels, "
                                "matchExpressions)")
        match_labels = obj.get("matchLabels") or {}
        if not isinstance(match_labels, Mapping):
            raise SelectorError(f"{where}.matchLabels: {match_labels!r} is not a mapping")
        reqs = [(str(k), "In", frozenset([str(v)])) for k, v in sorted(match_labels.items())]
        for i, expr in enumerate(_list(obj.get("matchExpressions"), f"{where}.matchExpressions")):
            reqs.append(_requirement(expr, f"{where}.matchExpressions[{i}]", _LABEL_OPS))
        return cls(tuple(reqs))

    @classmethod
    def from_text(cls, text: str, where: str) -> LabelSelector:
        """The string form ``kubectl -l`` takes: ``"a=b,c!=d,e,!f,g in (x,y),h notin (z)"``
        (empty: everything)."""
        reqs = []
        rest = text.strip()
        while rest:
            if m := _SET_REQ.match(rest):
                values = frozenset(v.strip() for v in m[3].split(",") if v.strip())
                reqs.append((m[1], "In" if m[2] == "in" else "NotIn", values))
            elif m := _EQ_REQ.match(rest):
                reqs.append((m[1], "NotIn" if m[2] == "!=" else "In", frozenset([m[3]])))
            elif m := _EXISTS_REQ.match(rest):
                reqs.append((m[2], "DoesNotExist" if m[1] else "Exists", frozenset()))
            else:
                m = None
            if m is None or (m.end() < len(rest) and rest[m.end()] != ","):
                raise SelectorError(
                    f"{where}: cannot parse {text!r} near {rest!r}; use comma-separated "
                    "'key=value', 'key!=value', 'key', '!key', 'key in (a,b)', 'key notin (a,b)'")
            rest = rest[m.end() + 1:].strip()
        return cls(tuple(reqs))

    @classmethod
    def from_any(cls, selector: Any, where: str = "node_selector") -> LabelSelector:
        """A selector in any form a caller of the graph builders writes: ``None`` (selects
        everything, as an absent option does), the string ``kubectl -l`` takes, a ``{key:
        value}`` mapping, a ``metav1.LabelSelector`` mapping or a parsed selector."""
        if selector is None:
            return cls()
        if isinstance(selector, LabelSelector):
            return selector
        if isinstance(selector, str):
            return cls.from_text(selector, where)
        if not isinstance(selector, Mapping):
            raise SelectorError(
                f"{where}: {selector!r} is not a label selector; use 'key=value,...' or "
                "{'key': 'value'} or {'matchLabels': ..., 'matchExpressions': [...]}")
        if "matchLabels" not in selector and "matchExpressions" not in selector:
            return cls.from_labels({str(k): str(v) for k, v in selector.items()})
        return cls.parse(selector, where)

    @classmethod
    def from_labels(cls, labels: Mapping[str, str]) -> LabelSelector:
        """``labels.SelectorFromSet``: every key equal to its value (empty: everything)."""
        return cls(tuple((k, "In", frozenset([v])) for k, v in sorted(labels.items())))

    def with_labels(self, labels: Mapping[str, str]) -> LabelSelector:
        """This selector AND the given key=value pairs (matchLabelKeys)."""
        if self.nothing:
            return self
        return LabelSelector(self.reqs + LabelSelector.from_labels(labels).reqs)

    @property
    def empty(self) -> bool:
        """Selects everything (``labels.Selector.Empty``)."""
        return not self.nothing and not self.reqs

    def matches(self, labels: Mapping[str, str]) -> bool:
        return not self.nothing and _matches(self.reqs, labels)


@dataclass(frozen=True)
class NodeSelector:
    """Required node affinity: a tuple of terms, each ``(label reqs, field reqs)``."""

    terms: tuple[tuple[tuple, tuple], ...]

    @classmethod
    def parse(cls, obj: Any, where: str) -> NodeSelector:
        if not isinstance(obj, Mapping):
            raise SelectorError(f"{where}: {obj!r} is not a NodeSelector (nodeSelectorTerms)")
        terms = []
        raw = obj.get("nodeSelectorTerms") or []
        if not isinstance(raw, list):
            raise SelectorError(f"{where}.nodeSelectorTerms: {raw!r} is not a list")
        for i, term in enumerate(raw):
            at = f"{where}.nodeSelectorTerms[{i}]"
            if not isinstance(term, Mapping):
                raise SelectorError(f"{at}: {term!r} is not a term")
            exprs = _list(term.get("matchExpressions"), f"{at}.matchExpressions")
            fields = _list(term.get("matchFields"), f"{at}.matchFields")
            if not exprs and not fields:
                continue  # an empty term matches nothing and is skipped
            labels = tuple(_requirement(e, f"{at}.matchExpressions[{j}]", _NODE_OPS)
                           for j, e in enumerate(exprs))
            field_reqs = []
            for j, f in enumerate(fields):
                key, op, values = _requirement(f, f"{at}.matchFields[{j}]", ("In", "NotIn"))
                if key != "metadata.name" or len(values) != 1:
                    raise SelectorError(f"{at}.matchFields[{j}]: only metadata.name In/NotIn "
                                        "with exactly one value is supported (as in Kubernetes)")
                field_reqs.append((key, op, values))
            terms.append((labels, tuple(field_reqs)))
        return cls(tuple(terms))

    def matches(self, node_name: str, labels: Mapping[str, str]) -> bool:
        fields = {"metadata.name": node_name}
        for label_reqs, field_reqs in self.terms:
            if label_reqs and not _matches(label_reqs, labels):
                continue
            if field_reqs and not _matches(field_reqs, fields):
                continue
            return True
        return False


@dataclass(frozen=True)
class Taint:
    key: str
    value: str
    effect: str

    @classmethod
    def parse(cls, obj: Any, where: str) -> Taint:
        if not isinstance(obj, Mapping) or not obj.get("effect"):
            raise SelectorError(f"{where}: {obj!r} is not a taint (key, value, effect)")
        return cls(str(obj.get("key") or ""), str(obj.get("value") or ""), str(obj["effect"]))

    def __str__(self) -> str:
        return f"{{{self.key}: {self.value}}}"


@dataclass(frozen=True)
class Toleration:
    key: str = ""
    operator: str = "Equal"
    value: str = ""
    effect: str = ""

    @classmethod
    def parse(cls, obj: Any, where: str) -> Toleration:
        if not isinstance(obj, Mapping):
            raise SelectorError(f"{where}: {obj!r} is not a toleration")
        op = obj.get("operator") or "Equal"
        if op not in ("Equal", "Exists"):
            raise SelectorError(f"{where}.operator: {op!r}; use Equal or Exists")
        key = str(obj.get("key") or "")
        if not key and op != "Exists":
            raise SelectorError(f"{where}: an empty key needs operator Exists (tolerates every "
                                "taint)")
        return cls(key, op, str(obj.get("value") or ""), str(obj.get("effect") or ""))


    @classmethod
    def from_entry(cls, entry: Any, where: str) -> Toleration:
        """A toleration as a caller of the graph builders writes one: a ``v1.Toleration``
        mapping, a taint key alone (``Exists``: that key whatever its value and effect), or
        ``"*"`` (every taint)."""
        if isinstance(entry, Toleration):
            return entry
        if isinstance(entry, str):
            return cls("" if entry == "*" else entry, "Exists")
        return cls.parse(entry, where)


def tolerates(toleration: Toleration, taint: Taint) -> bool:
    """``v1.Toleration.ToleratesTaint``."""
    if toleration.effect and toleration.effect != taint.effect:
        return False
    if toleration.key and toleration.key != taint.key:
        return False
    if toleration.operator == "Exists":
        return True
    return toleration.value == taint.value


def untolerated_taint(taints: tuple[Taint, ...], tolerations: tuple[Toleration, ...],
                      effects: tuple[str, ...] = ("NoSchedule", "NoExecute")) -> Taint | None:
    """The first taint with one of ``effects`` that no toleration tolerates, or None."""
    for taint in taints:
        if taint.effect in effects and not any(tolerates(t, taint) for t in tolerations):
            return taint
    return None
