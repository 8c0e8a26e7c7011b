"""The ``simple`` text of subtrees held whole, made once per shape.

Fluxion's ``simple`` match writer (``resource/writers/match_writers.cpp``) prints one line per
allocated vertex, indented by its depth. A subtree the commit holds whole is kept in a job's
vertex list as one :class:`HeldSubtree` entry until someone reads it; its lines are made once per
(level, layout) and reused, since subtrees built alike print the same names and sizes.
"""

from __future__ import annotations

from array import array
from itertools import repeat

__all__ = ["HeldSubtree", "simple_lines"]

class HeldSubtree(tuple):
    """The vertices below a subtree held whole, emitted lazily: (level of its children,
    the traverser, the subtree root)."""

    __slots__ = ()

    def entries(self):
        level, trav, u = self
        depths, post = trav.post_below(u)
        return zip(map(level.__add__, depths), post, map(trav.g.size.__getitem__, post),
                   repeat(True), repeat(True))

    def post(self) -> array:
        return self[1].post_below(self[2])[1]

    def simple_text(self, names: list[str]) -> str:
        """The ``simple`` writer's lines of these vertices (each held whole, exclusive)."""
        level, trav, u = self
        return trav.held_text(level, u, names)


def simple_lines(level: int, depths, post: array, names: list[str], size: list[int]) -> str:
    """The ``simple`` lines of held vertices ``post`` (``depths`` below ``level``). Subtrees
    built alike print the same lines: the last text written for a tree of the same depths
    is reused when the names and sizes below match too (compared at C speed, much cheaper
    than formatting the lines)."""
    these = list(map(names.__getitem__, post))
    sizes = list(map(size.__getitem__, post))
    key = (level, depths)
    hit = _SIMPLE_TEXT.get(key)
    if hit is not None and hit[0] == these and hit[1] == sizes:
        return hit[2]
    pads = _pads(level, max(depths, default=0))
    text = "".join([f"{pads[d]}{name}[{n}:x]\n"
                    for d, name, n in zip(depths, these, sizes, strict=True)])
    if len(_SIMPLE_TEXT) >= 64:
        _SIMPLE_TEXT.clear()
    _SIMPLE_TEXT[key] = (these, sizes, text)
    return text


#: (level, depths) -> (names, sizes, the simple text) last written for held subtrees
_SIMPLE_TEXT: dict[tuple, tuple[list[str], list[int], str]] = {}


_PADS: dict[int, list[str]] = {}


def _pads(level: int, deepest: int) -> list[str]:
    """The ``simple`` writer's indents for levels ``level``, ``level + 1``, ... (by depth)."""
    got = _PADS.get(level)
    if got is None or len(got) <= deepest:
        got = _PADS[level] = ["      " + "---" * (level + d) for d in range(deepest + 8)]
    return got
