"""The broker tree (TBON) a distribution fans out over: from ``tbon.topo`` or from the live overlay.

``flux archive extract`` on a rank loads each blob from its own broker's content cache, which loads
a miss from its TBON parent (concurrent misses for one blob are coalesced into one upstream load).
So with every target extracting at once, each blob crosses each tree edge once: the lead sends one
copy per child, not one per host. This module knows the tree, so the report can say what each
broker sends and which ranks a down broker cuts off.

The tree is computed exactly as flux-core 0.88 does (``src/modules/overlay/topology.c``):
``kary:K`` (parent of rank *i* is ``(i - 1) // K``; ``kary:0`` is flat), ``binomial``,
``mincrit[:K]`` and flat ``custom`` (every parent rank 0, which is what a ``custom`` topology
without ``parent`` keys means); or read from the live instance (``overlay.topology`` RPC, whose
JSON shape :meth:`Tree.from_json` takes).

>>> t = Tree.from_spec("kary:2", 8)
>>> t.children(0), t.children(3), t.depth()
([1, 2], [7], 3)
>>> t.copies_sent(range(8))[0]     # the lead sends one copy to each of its two children
2
>>> sorted(t.cut_off([3]))         # rank 3 down: rank 7 below it cannot be reached
[7]
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from fluxinfra.errors import FluxinfraError

__all__ = ["Tree", "TopologyError", "parse_topo"]


class TopologyError(FluxinfraError):
    """A tbon.topo value or an overlay topology that cannot be used."""


def parse_topo(spec: str) -> tuple[str, int | None]:
    """``'kary:2'`` -> ``('kary', 2)``; ``'binomial'`` -> ``('binomial', None)``."""
    scheme, _, arg = str(spec).partition(":")
    if scheme not in ("kary", "binomial", "mincrit", "custom"):
        raise TopologyError(f"tbon.topo {spec!r}: unknown scheme {scheme!r}; use kary:K, "
                            "binomial, mincrit[:K] or custom")
    if scheme in ("binomial", "custom"):
        if arg:
            raise TopologyError(f"tbon.topo {spec!r}: {scheme} takes no argument")
        return scheme, None
    if scheme == "kary" and not arg:
        raise TopologyError(f"tbon.topo {spec!r}: kary needs a fanout, e.g. kary:2")
    if arg and not arg.isdigit():
        raise TopologyError(f"tbon.topo {spec!r}: {scheme} takes an integer >= 0, got {arg!r}")
    return scheme, int(arg) if arg else None


def _mincrit_k(size: int, max_fanout: int = 1024) -> int:
    def router_fanout(k: int) -> int:
        leaves = size - (1 + k)
        return leaves // k + (1 if leaves % k else 0)

    k = 0
    if size > max_fanout + 1:
        k = 2
        while router_fanout(k) > max_fanout:
            k += 1
    return k


@dataclasses.dataclass(frozen=True)
class Tree:
    """Parent of every rank (``parents[0] == -1``)."""

    parents: tuple[int, ...]

    @property
    def size(self) -> int:
        return len(self.parents)

    @classmethod
    def from_spec(cls, spec: str, size: int) -> Tree:
        if size < 1:
            raise TopologyError(f"instance size {size}: must be at least 1")
        scheme, k = parse_topo(spec)
        parents = [-1] + [0] * (size - 1)
        if scheme == "kary" and k:
            parents = [-1] + [(i - 1) // k for i in range(1, size)]
        elif scheme == "mincrit":
            k = _mincrit_k(size) if k is None else k
            if k > 0:
                for i in range(k + 1, size):
                    parents[i] = (i - k - 1) % k + 1
        elif scheme == "binomial":
            order = max(size - 1, 0).bit_length()

            def generate(root: int, k: int) -> None:
                for j in range(k):
                    child = root + (1 << j)
                    if child < size:
                        parents[child] = root
                        generate(child, j)

            generate(0, order)
        return cls(tuple(parents))

    @classmethod
    def from_json(cls, topology: dict) -> Tree:
        """The ``overlay.topology`` RPC's answer: ``{"rank", "size", "children": [...]}``."""
        try:
            size = int(topology["size"])
            parents = [-1] * size
            seen = set()
            stack = [(topology, -1)]
            while stack:
                node, parent = stack.pop()
                rank = int(node["rank"])
                if rank in seen or not 0 <= rank < size:
                    raise TopologyError(f"overlay topology: rank {rank} is repeated or outside "
                                        f"0..{size - 1}")
                seen.add(rank)
                parents[rank] = parent
                stack.extend((child, rank) for child in node["children"])
        except (KeyError, TypeError, ValueError) as exc:
            raise TopologyError(f"overlay topology: unexpected shape ({exc})") from None
        if len(seen) != size or parents[0] != -1:
            raise TopologyError(f"overlay topology: lists {len(seen)} of {size} ranks")
        return cls(tuple(parents))

    def to_json(self, rank: int = 0) -> dict:
        """The ``overlay.topology`` shape (used by the flux test double)."""
        children = [self.to_json(c) for c in self.children(rank)]
        return {"rank": rank, "size": 1 + sum(c["size"] for c in children),
                "children": children}

    def children(self, rank: int) -> list[int]:
        return [r for r, p in enumerate(self.parents) if p == rank]

    def level(self, rank: int) -> int:
        level = 0
        while rank > 0:
            rank = self.parents[rank]
            level += 1
        return level

    def depth(self) -> int:
        return max(self.level(r) for r in range(self.size))

    def ancestors(self, rank: int) -> list[int]:
        out = []
        while self.parents[rank] >= 0:
            rank = self.parents[rank]
            out.append(rank)
        return out

    def cut_off(self, down: Iterable[int]) -> set[int]:
        """Ranks that are not down themselves but sit below a down rank."""
        down = set(down)
        return {r for r in range(self.size)
                if r not in down and any(a in down for a in self.ancestors(r))}

    def copies_sent(self, targets: Iterable[int]) -> dict[int, int]:
        """Copies of the content each broker sends: one per child whose subtree holds a target.

        Interior brokers relay through their content cache even when they are not targets."""
        wanted = set(targets)
        needs = [False] * self.size
        for rank in sorted(range(self.size), key=self.level, reverse=True):
            needs[rank] = rank in wanted or any(needs[c] for c in self.children(rank))
        return {r: sum(needs[c] for c in self.children(r)) for r in range(self.size)}
