"""``first``'s chunked child order (``traverser.order.ChildOrder``) behaves like the flat sorted
lists it replaced: the same iteration order after any sequence of removals and insertions, ties
included, and the same answer when a child is not where its key says."""

from __future__ import annotations

import random
from bisect import bisect_left, bisect_right

import pytest

from fluxinfra.matcher.traverser.order import ChildOrder


class FlatOrder:
    """The reference: two parallel lists, bisected directly."""

    def __init__(self, kids: list[int], keys: list[int]) -> None:
        self.kids, self.keys = list(kids), list(keys)

    def remove(self, c: int, key: int) -> bool:
        i = bisect_left(self.keys, key)
        if i == len(self.kids) or self.kids[i] != c:
            return False
        del self.kids[i]
        del self.keys[i]
        return True

    def insert(self, c: int, key: int) -> None:
        j = bisect_right(self.keys, key)
        self.keys.insert(j, key)
        self.kids.insert(j, c)


@pytest.mark.parametrize("seed", range(20))
def test_chunked_order_is_the_flat_order(seed: int) -> None:
    rng = random.Random(seed)
    n = rng.choice([0, 1, 5, 300, 1500])
    spread = rng.choice([3, 50, 10**6])  # few distinct keys: many ties
    pairs = sorted((rng.randrange(spread), c) for c in range(n))
    kids, keys = [c for _, c in pairs], [k for k, _ in pairs]
    chunked, flat = ChildOrder(kids, keys), FlatOrder(kids, keys)
    where = dict(zip(kids, keys, strict=True))
    for _ in range(3000):
        if where and rng.random() < 0.5:
            c = rng.choice(list(where))
            key = where[c] if rng.random() < 0.9 else rng.randrange(spread)  # sometimes wrong
            got, want = chunked.remove(c, key), flat.remove(c, key)
            assert got == want
            if want:
                del where[c]
        else:
            c, key = n + rng.randrange(10**9), rng.randrange(spread)
            if c in where:
                continue
            chunked.insert(c, key)
            flat.insert(c, key)
            where[c] = key
        assert list(chunked) == flat.kids
    assert chunked.lists() == (flat.kids, flat.keys)
    assert len(chunked) == len(flat.kids)
    assert all(len(kc) <= 2 * ChildOrder.SIZE for kc in chunked.kchunks)
