"""RFC 29 hostlists (``node[0-3,7],login1``) as Flux's libhostlist reads and writes them, once
for all of fluxinfra.

A leaf: standard library only, no fluxinfra imports (the installer ships this file beside
``node-watch.py``, which imports it from there). Errors are :class:`HostlistError` (a
``ValueError``) saying what is wrong; callers re-raise them in their own terms, naming the field.

Reading (``hostlist_decode()``): items are separated by commas, spaces or tabs (empty items
skipped); an item is a host name or ``prefix[ranges]suffix`` where ranges are ``N`` or ``N-M``
(``M >= N``) separated by commas and each range is written as wide as its ``N`` is
(``n[08-10]`` is ``n08 n09 n10``). Order is kept and nothing is removed: a hostlist is a list.

Writing (``hostlist_encode()`` of hosts appended in order): a host whose name ends in digits
joins the range before it when the prefix is the same, the number is the next one and the
digits have the same zero padding; consecutive ranges of one prefix share one bracket. So
``n3 n1 n2 n10`` is ``n[3,1-2,10]``, never sorted.

Where flux-core accepts text whose hosts would be nonsense, this module refuses it: a second
bracket group or a bracket in the suffix (Flux makes hosts named ``n1[3-4]``), a sign, a space or
a dangling ``-`` inside brackets. Flux caps one range at 2^20 hosts; here callers cap the total
they expand (:func:`decode`'s ``limit``), so counting a large hostlist never lists it.

>>> encode(["n3", "n1", "n2", "n10"])
'n[3,1-2,10]'
>>> decode("n[1-2]-ib,login")
['n1-ib', 'n2-ib', 'login']
>>> count(parse("node[0-99999999],login1"))
100000001
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import NamedTuple

__all__ = ["HostlistError", "Part", "count", "decode", "encode", "expand", "parse"]

#: the most digits one range bound may have (only keeps int() of the text cheap)
_DIGITS = 40
#: characters no host name holds (hostname.c's INVALID_CHARS)
_INVALID = frozenset(",[]\t ")
_ULONG_MAX = (1 << 64) - 1


class HostlistError(ValueError):
    """Text that is not an RFC 29 hostlist; the message says why."""


class Part(NamedTuple):
    """One item of a hostlist: a plain host (``ranges`` None) or ``prefix[ranges]suffix``
    with ``(lo, hi, width)`` ranges."""

    prefix: str
    ranges: tuple[tuple[int, int, int], ...] | None
    suffix: str


def _tokens(text: str) -> Iterator[str]:
    """hostlist.c's ``next_tok``: split at commas, spaces and tabs outside brackets."""
    depth, start = 0, None
    for i, ch in enumerate(text):
        if ch in ", \t" and depth == 0:
            if start is not None:
                yield text[start:i]
                start = None
            continue
        if start is None:
            start = i
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
    if start is not None:
        yield text[start:]


def parse(text: str) -> list[Part]:
    """The items of a hostlist, checked, nothing expanded."""
    if not isinstance(text, str):
        raise HostlistError(f"a hostlist is a string like 'node[0-3,7]', not "
                            f"{type(text).__name__}")
    parts: list[Part] = []
    for token in _tokens(text):
        open_at = token.find("[")
        if open_at < 0:
            if "]" in token:
                raise HostlistError(f"{token!r} has a ']' without a '[' (write e.g. "
                                    "'node[0-3,7]')")
            parts.append(Part(token, None, ""))
            continue
        close_at = token.find("]", open_at)
        if close_at < 0:
            raise HostlistError(f"{token!r} has a '[' without a ']' (write e.g. 'node[0-3,7]')")
        prefix, inside, suffix = token[:open_at], token[open_at + 1:close_at], token[close_at + 1:]
        if "]" in prefix or "[" in suffix or "]" in suffix:
            raise HostlistError(f"{token!r} has more than one bracket group (write one per "
                                "host name, e.g. 'node[0-3]-ib')")
        parts.append(Part(prefix, tuple(_range(item, token) for item in inside.split(",")),
                          suffix))
    return parts


def _range(item: str, token: str) -> tuple[int, int, int]:
    lo, dash, hi = item.partition("-")
    if not _digits(lo) or (dash and not _digits(hi)):
        raise HostlistError(f"{token!r}: range {item!r} is not N or N-M (write e.g. "
                            "'node[0-3,7]')")
    first, last = int(lo), int(hi) if dash else int(lo)
    if last < first:
        raise HostlistError(f"{token!r}: range {item!r} runs backwards (write it low-high)")
    return first, last, len(lo)


def _digits(text: str) -> bool:
    return text.isascii() and text.isdigit() and len(text) <= _DIGITS


def count(parts: Iterable[Part]) -> int:
    """How many hosts the items name, without listing them."""
    return sum(1 if p.ranges is None else sum(hi - lo + 1 for lo, hi, _ in p.ranges)
               for p in parts)


def expand(parts: Iterable[Part]) -> Iterator[str]:
    """The host names of the items, in order, one at a time (take only what is needed)."""
    for prefix, spans, suffix in parts:
        if spans is None:
            yield prefix
            continue
        for lo, hi, width in spans:
            for n in range(lo, hi + 1):
                yield f"{prefix}{n:0{width}d}{suffix}"


def decode(text: str, limit: int | None = None) -> list[str]:
    """Every host of a hostlist, in order; more than ``limit`` of them is an error."""
    parts = parse(text)
    if limit is not None and count(parts) > limit:
        raise HostlistError(f"names more than {limit:,} hosts")
    return list(expand(parts))


def _padding(num: int, width: int) -> int:
    return max(width - len(str(num)), 0)


def encode(hosts: Iterable[str]) -> str:
    """The hostlist of these hosts in this order (flux-core's ``hostlist_append`` of each
    host, then ``hostlist_encode``).

    A name ending in more digits than 2^64-1 holds is kept whole (flux-core drops it)."""
    # [prefix, lo, hi, width, zero-padded] per range; lo is None for a host without a number
    spans: list[list] = []
    tail: list | None = None
    for host in hosts:
        if not isinstance(host, str) or not host or not _INVALID.isdisjoint(host):
            raise HostlistError(f"{host!r} is not a host name (no commas, brackets or spaces)")
        prefix = host.rstrip("0123456789")
        digits = len(host) - len(prefix)
        num = int(host[len(prefix):]) if 0 < digits <= 20 else -1
        if num < 0 or num > _ULONG_MAX:
            tail = None
            spans.append([host, None, None, 0, False])
            continue
        padded = digits > 1 and host[len(prefix)] == "0"
        # (widths without zero padding always join: the next number only has more digits)
        if (tail is not None and tail[2] == num - 1 and tail[0] == prefix
                and (tail[3] == digits or not (padded or tail[4])
                     or _joins(tail, num, digits))):
            tail[2] = num
        else:
            tail = [prefix, num, num, digits, padded]
            spans.append(tail)
    out: list[str] = []
    i = 0
    while i < len(spans):
        prefix, lo, hi, width, _ = spans[i]
        if lo is None:
            out.append(prefix)
            i += 1
            continue
        group = []
        while i < len(spans) and spans[i][1] is not None and spans[i][0] == prefix:
            _, lo, hi, width, _ = spans[i]
            group.append(f"{lo:0{width}d}" if lo == hi else f"{lo:0{width}d}-{hi:0{width}d}")
            i += 1
        single = len(group) == 1 and "-" not in group[0]
        out.append(prefix + group[0] if single else f"{prefix}[{','.join(group)}]")
    return ",".join(out)


def _joins(tail: list, num: int, width: int) -> bool:
    """util.c's ``width_equiv`` of the range's first number and the next host's: the same
    zero padding at either width (the range takes the narrower width where they differ)."""
    lo, tail_width = tail[1], tail[3]
    pad, pad_other = _padding(lo, tail_width), _padding(lo, width)
    new_pad, new_pad_other = _padding(num, width), _padding(num, tail_width)
    if pad != pad_other and new_pad != new_pad_other:
        return False
    if pad == pad_other:
        tail[3], tail[4] = width, pad_other > 0
    return True
