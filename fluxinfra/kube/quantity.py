"""Kubernetes resource quantities ("1500m", "16Gi", "1e3", "0.5") as exact numbers.

The grammar is the one ``k8s.io/apimachinery/pkg/api/resource`` accepts: an optionally signed
decimal number followed by a binary-SI suffix (``Ki Mi Gi Ti Pi Ei``), a decimal-SI suffix
(``n u m k M G T P E``) or a decimal exponent (``e3``, ``E-2``). Values are kept as
:class:`fractions.Fraction` so ``"0.1"`` is exactly one tenth, and the rounding to integers is the
one Kubernetes applies: millicores and bytes round *up* (``Quantity.MilliValue`` / ``Value``).

>>> parse_quantity("1500m")
Fraction(3, 2)
>>> cpu_millicores("2"), cpu_millicores("250m"), memory_bytes("1Gi"), memory_bytes("1k")
(2000, 250, 1073741824, 1000)
"""

from __future__ import annotations

import functools
import math
import re
from fractions import Fraction

from fluxinfra.errors import FluxinfraError
from fluxinfra.inputs import shown

__all__ = ["QuantityError", "parse_quantity", "cpu_millicores", "memory_bytes", "integer_quantity"]

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 10**3),
    "": Fraction(1),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
}
_QUANTITY = re.compile(
    r"^(?P<num>[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+))"
    r"(?:(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE])|[eE](?P<exp>[+-]?[0-9]+))?$"
)


#: most characters of a quantity's number: Kubernetes keeps at most 64 bits of it (19 digits)
#: plus a fraction; far longer text is no quantity (and Python would not read it as one)
_MAX_DIGITS = 64


class QuantityError(FluxinfraError, ValueError):
    """A Kubernetes quantity string that does not parse (names the field and the value)."""


def parse_quantity(value: str | int | float, field: str = "quantity") -> Fraction:
    """Parse a Kubernetes quantity exactly; ``field`` names it in the error message."""
    if isinstance(value, bool):
        raise QuantityError(f"{field}: {shown(value)} is not a quantity; use a number or e.g. "
                            "'500m'")
    if isinstance(value, int):
        return Fraction(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise QuantityError(f"{field}: {shown(value)} is not finite; use a number such as '2'")
        return Fraction(str(value))
    if not isinstance(value, str):
        raise QuantityError(
            f"{field}: {shown(value)} is a {type(value).__name__}, not a quantity string like "
            "'1500m'"
        )
    amount = _parse_text(value)
    if amount is None:
        raise QuantityError(
            f"{field}: {shown(value)} is not a Kubernetes quantity; use digits with an optional "
            "suffix Ki/Mi/Gi/Ti/Pi/Ei, n/u/m/k/M/G/T/P/E or an exponent within ±64 "
            "(e.g. '1500m', '16Gi')"
        )
    return amount


@functools.lru_cache(maxsize=4096)
def _parse_text(text: str) -> Fraction | None:
    # Cached: a cluster's pods repeat the same few quantities ("500m", "1Gi") thousands of times.
    match = _QUANTITY.match(text.strip())
    if match is None or len(match["num"]) > _MAX_DIGITS or len(match["exp"] or "") > 3:
        return None
    number = Fraction(match["num"])
    if match["exp"] is not None:
        exponent = int(match["exp"])
        return None if abs(exponent) > 64 else number * Fraction(10) ** exponent
    suffix = match["suffix"] or ""
    return number * (_BINARY.get(suffix) or _DECIMAL[suffix])


def _nonnegative(amount: Fraction, value: object, field: str) -> Fraction:
    if amount < 0:
        raise QuantityError(f"{field}: {shown(value)} is negative; resource quantities must be "
                            ">= 0")
    return amount


def cpu_millicores(value: str | int | float, field: str = "cpu") -> int:
    """CPU quantity in millicores, rounded up like ``Quantity.MilliValue``."""
    amount = _nonnegative(parse_quantity(value, field), value, field)
    return math.ceil(amount * 1000)


def memory_bytes(value: str | int | float, field: str = "memory") -> int:
    """Memory (or any byte-valued) quantity in bytes, rounded up like ``Quantity.Value``."""
    amount = _nonnegative(parse_quantity(value, field), value, field)
    return math.ceil(amount)


def integer_quantity(value: str | int | float, field: str) -> int:
    """A count-valued resource (``nvidia.com/gpu``, ``pods``) as an integer, rounded up."""
    return memory_bytes(value, field)
