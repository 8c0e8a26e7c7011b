"""RFC 22 idsets (``0-3,7``) as Flux's libidset reads and writes them, once for all of fluxinfra.

A leaf: standard library only, no fluxinfra imports (the installer ships this file beside
``node-watch.py``, which imports it from there). Errors are :class:`IdsetError` (a
``ValueError``) saying what is wrong; callers re-raise them in their own terms, naming the field.

Two readings of the text:

``strict=True`` is ``idset_decode()`` of flux-core: items separated by commas (empty items
skipped), each ``N`` or ``N-M`` with ``M > N``, no leading zeros, items ascending without
overlap, the whole optionally in one pair of brackets, ids below 2^31.

``strict=False`` (what fluxinfra's readers of R, constraints and options take) also accepts
items in any order or overlapping, ``N-N``, leading zeros and spaces around an item; the ids
are bounded by ``max_id`` instead.

Where flux-core 0.88 accepts an id of 2^32 or more it keeps only its low 32 bits (a C cast);
here such an id is an error instead.

>>> encode([7, 0, 1, 2, 3])
'0-3,7'
>>> decode("[0-2,5]")
[0, 1, 2, 5]
>>> decode("3,0-1", strict=False), count("0-99999")
([0, 1, 3], 100000)
>>> try:
...     decode("3,0-1")
... except IdsetError as exc:
...     print(exc)
range '0-1' is out of order (ranges ascend: '0-3,7')
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["FLUX_MAX_ID", "INT64_MAX", "IdsetError", "count", "decode", "encode", "merge",
           "ranges"]

#: the largest id flux-core's idsets hold (``IDSET_MAX_UNIVERSE - 1``)
FLUX_MAX_ID = (1 << 31) - 1
INT64_MAX = (1 << 63) - 1
#: the most digits one id may have (far past any bound: only keeps int() of the text cheap)
_DIGITS = 40


class IdsetError(ValueError):
    """Text that is not an RFC 22 idset; the message says why."""


def ranges(text: str | int, *, strict: bool = True,
           max_id: int | None = None) -> list[tuple[int, int]]:
    """The ``(lo, hi)`` ranges of an idset in the order written (none for ``""``).

    ``max_id`` defaults to Flux's bound when ``strict``, else to 2^63-1. A lone id may be
    given as an ``int`` when not ``strict``."""
    if max_id is None:
        max_id = FLUX_MAX_ID if strict else INT64_MAX
    if isinstance(text, int) and not isinstance(text, bool) and not strict:
        text = str(text)
    if not isinstance(text, str):
        raise IdsetError(f"an idset is a string like '0-3,7', not {type(text).__name__}")
    body = text.strip() if not strict else text
    if len(body) >= 2 and body[0] == "[" and body[-1] == "]":
        body = body[1:-1]
    if "[" in body or "]" in body:
        raise IdsetError("mismatched or nested brackets (write '0-3,7' or '[0-3,7]')")
    out: list[tuple[int, int]] = []
    for item in body.split(","):
        if not strict:
            item = item.strip()
        if not item:
            continue
        lo_text, dash, hi_text = item.partition("-")
        if not (_number(lo_text, strict) and (not dash or _number(hi_text, strict))):
            raise IdsetError(f"error parsing range {item!r} (write ids and ranges like '0-3,7')")
        lo = int(lo_text)
        hi = int(hi_text) if dash else lo
        if hi < lo or (strict and dash and hi == lo):
            raise IdsetError(f"range {item!r} runs backwards (write it low-high)")
        if hi > max_id:
            raise IdsetError(f"id {hi} in {item!r} is more than {max_id}, the largest id")
        if strict and out and lo <= out[-1][1]:
            raise IdsetError(f"range {item!r} is out of order (ranges ascend: '0-3,7')")
        out.append((lo, hi))
    return out


def _number(text: str, strict: bool) -> bool:
    if not text.isascii() or not text.isdigit() or len(text) > _DIGITS:
        return False
    return not (strict and len(text) > 1 and text[0] == "0")


def merge(spans: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    """Ranges sorted, overlapping and adjacent ones joined: ``[(3, 4), (0, 2)]`` -> ``[(0, 4)]``."""
    out: list[tuple[int, int]] = []
    for lo, hi in sorted(spans):
        if out and lo <= out[-1][1] + 1:
            if hi > out[-1][1]:
                out[-1] = (out[-1][0], hi)
        else:
            out.append((lo, hi))
    return out


def count(text: str | int, *, strict: bool = True, max_id: int | None = None) -> int:
    """How many distinct ids the idset names, without listing them."""
    return sum(hi - lo + 1 for lo, hi in merge(ranges(text, strict=strict, max_id=max_id)))


def decode(text: str | int, *, strict: bool = True, max_id: int | None = None,
           limit: int | None = None) -> list[int]:
    """The ids of an idset, sorted, each once; more than ``limit`` of them is an error."""
    spans = merge(ranges(text, strict=strict, max_id=max_id))
    total = sum(hi - lo + 1 for lo, hi in spans)
    if limit is not None and total > limit:
        raise IdsetError(f"names more than {limit:,} ids")
    return [i for lo, hi in spans for i in range(lo, hi + 1)]


def encode(ids: Iterable[int], *, brackets: bool = False) -> str:
    """The RFC 22 text of a set of non-negative ids, ranges compressed, ascending
    (``idset_encode(IDSET_FLAG_RANGE)``); ``brackets`` encloses more than one id in ``[]``
    (``IDSET_FLAG_BRACKETS``)."""
    ordered = sorted(set(ids))
    if ordered and ordered[0] < 0:
        raise IdsetError(f"id {ordered[0]} is negative; an idset holds ids from 0")
    out: list[str] = []
    i, n = 0, len(ordered)
    while i < n:
        j = i
        while j + 1 < n and ordered[j + 1] == ordered[j] + 1:
            j += 1
        out.append(str(ordered[i]) if i == j else f"{ordered[i]}-{ordered[j]}")
        i = j + 1
    text = ",".join(out)
    return f"[{text}]" if brackets and n > 1 else text
