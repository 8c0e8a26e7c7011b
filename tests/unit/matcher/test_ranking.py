"""Ranking candidates as Fluxion does, without sorting them all.

``prefixsort.sorted_prefix`` and ``stdsort.equal_prefix`` give the first elements of libstdc++'s
``std::sort`` without sorting the rest; a candidate list merged by reference from remembered
subtrees (``Evals`` parts) is ranked from its scores alone. Each must give exactly what
``introsort`` (the replay of std::sort) of the whole flat list gives. The prefixes are checked
both ways they can be worked out: in plain Python and, where numpy is installed, vectorized
(which the matcher uses from ``prefixsort.VECTOR_FROM`` keys on, from ``BYTES_FROM`` for byte
keys; here from the first key), and for byte keys also mixed: numpy partitioning the parts of
``PART_FROM`` keys or more, plain Python the shorter ones, in one ranking.
"""

from __future__ import annotations

import random
from itertools import pairwise

import pytest

from fluxinfra.matcher import bytepart, prefixsort
from fluxinfra.matcher.evaluators import _FLAT, Candidate, Evals
from fluxinfra.matcher.prefixsort import sorted_prefix, sorted_prefix_bytes, sorted_prefix_words
from fluxinfra.matcher.stdsort import equal_prefix, introsort

HAVE_NUMPY = prefixsort.vectorized()


@pytest.fixture(params=["python", "numpy", "mixed", "typed"])
def way(request, monkeypatch) -> str:
    """Rank in plain Python, with numpy for every list and part, (``mixed``) with numpy
    for every list but byte keys' parts of fewer than 40 keys partitioned in plain Python,
    or (``typed``) byte keys with ``bytepart``'s kernel, compiled where ``fluxinfra compile``
    made it C and as Python where not (the numpy ways are skipped, saying so, where numpy is
    not installed: ``pip install 'fluxinfra[fast]'``)."""
    monkeypatch.setattr(prefixsort, "TYPED", request.param == "typed")
    if request.param == "typed":
        monkeypatch.setattr(prefixsort, "VECTOR_FROM", 1 << 62)
        monkeypatch.setattr(prefixsort, "BYTES_FROM", 1 << 62)
    elif request.param != "python":
        if not HAVE_NUMPY:
            pytest.skip("numpy is not installed: the vectorized ranking is not available")
        monkeypatch.setattr(prefixsort, "VECTOR_FROM", 0)
        monkeypatch.setattr(prefixsort, "BYTES_FROM", 0)
        monkeypatch.setattr(prefixsort, "PART_FROM", 40 if request.param == "mixed" else 0)
    else:
        monkeypatch.setattr(prefixsort, "VECTOR_FROM", 1 << 62)
        monkeypatch.setattr(prefixsort, "BYTES_FROM", 1 << 62)
    used = {"numpy": 0, "python": 0, "typed": 0}

    def counted(name: str, real):
        def run(*args):
            used[name] += 1
            return real(*args)
        return run

    monkeypatch.setattr(prefixsort, "_sorted_prefix_np",
                        counted("numpy", prefixsort._sorted_prefix_np))
    for name in ("_partition_masked", "_partition_pair"):  # the plain Python ways
        monkeypatch.setattr(prefixsort, name, counted("python", getattr(prefixsort, name)))
    monkeypatch.setattr(bytepart, "partition", counted("typed", bytepart.partition))
    yield request.param
    # (typed: byte keys only; other keys are partitioned in plain Python)
    never = {"python": ("numpy", "typed"), "numpy": ("python", "typed"),
             "mixed": ("typed",), "typed": ("numpy",)}[request.param]
    for other in never:
        assert used[other] == 0, f"ranked the {other} way"


def std_order(keys: list[int]) -> list[int]:
    order = list(range(len(keys)))
    introsort(order, lambda a, b: keys[a] < keys[b])
    return order


@pytest.mark.parametrize("seed", range(40))
def test_sorted_prefix_is_std_sorts_front(seed: int, way: str) -> None:
    rng = random.Random(seed)
    n = rng.choice([0, 1, 17, 100, 1000, 5000])
    spread = rng.choice([1, 2, 3, 64, 10_000])
    # runs of ascending scores, as slot lists of sockets merged one after the other
    keys: list[int] = []
    while len(keys) < n:
        run = sorted(rng.randrange(spread) for _ in range(rng.randint(1, 40)))
        keys += run
    keys = keys[:n]
    want = std_order(keys)
    k = rng.randint(1, max(1, n))
    got = sorted_prefix(keys, lambda order: len(order) >= k)
    assert got == want[:len(got)] and len(got) >= min(k, n)


@pytest.mark.parametrize("seed", range(60))
def test_sorted_prefix_bytes_is_std_sorts_front(seed: int, way: str) -> None:
    rng = random.Random(f"bytes/{seed}")
    n = rng.choice([0, 1, 16, 17, 200, 3000])
    keys: list[int] = []
    if rng.random() < 0.5:  # sorted runs, rotated (high's sockets come in that order)
        shift = rng.randrange(64)
        while len(keys) < n:
            run = sorted(rng.sample(range(64), rng.randint(40, 64)))
            keys += run[shift % len(run):] + run[:shift % len(run)]
    else:
        keys = [rng.randrange(rng.choice([1, 2, 3, 255])) for _ in range(n)]
    keys = keys[:n]
    want = std_order(keys)
    for k in (1, 2, rng.randint(1, max(1, n))):
        got = sorted_prefix_bytes(bytes(keys), lambda order, k=k: len(order) >= k)
        assert got == want[:len(got)] and len(got) >= min(k, n)


@pytest.mark.parametrize("seed", range(60))
def test_sorted_prefix_words_is_std_sorts_front(seed: int, way: str) -> None:
    """Two-byte keys (locality's run ranks past 255 runs): high bytes tie often, so the
    low bytes decide; runs, few distinct keys and keys spread over the whole range."""
    rng = random.Random(f"words/{seed}")
    n = rng.choice([0, 1, 16, 17, 200, 3000])
    shape = rng.random()
    if shape < 0.4:  # descending runs of ranks, as locality's keys come
        keys = sorted((rng.randrange(700) for _ in range(n)), reverse=True)
    elif shape < 0.7:
        keys = [rng.choice([255, 256, 257, 511, 512, 0, 65_535]) for _ in range(n)]
    else:
        keys = [rng.randrange(65_536) for _ in range(n)]
    want = std_order(keys)
    for k in (1, 2, rng.randint(1, max(1, n))):
        got = sorted_prefix_words(keys, lambda order, k=k: len(order) >= k)
        assert got == want[:len(got)] and len(got) >= min(k, n)


def killer(n: int) -> list[int]:
    """Keys that drive libstdc++'s quicksort to its depth limit (McIlroy's adversary: keys
    are fixed lazily as the sort compares them, always against the pivot candidate), so that
    introsort heap-sorts runs."""
    gas = n
    val = [gas] * n
    solid = [0]
    candidate = [-1]

    def less(x: int, y: int) -> bool:
        if val[x] == gas and val[y] == gas:
            z = x if x == candidate[0] else y
            val[z] = solid[0]
            solid[0] += 1
        if val[x] == gas:
            candidate[0] = x
        elif val[y] == gas:
            candidate[0] = y
        return val[x] < val[y]

    introsort(list(range(n)), less)
    return val


@pytest.mark.parametrize("n", [60, 200, 255])
def test_prefix_past_the_depth_limit_is_std_sorts_front(n: int, way: str, monkeypatch) -> None:
    """Runs std::sort heap-sorts (the depth limit reached) come out as introsort leaves
    them, both ways; the heap-sort is really reached."""
    keys = killer(n)
    want = std_order(keys)
    heaps = []
    real = prefixsort._heapsort
    monkeypatch.setattr(prefixsort, "_heapsort", lambda *a: heaps.append(1) or real(*a))
    for k in (1, n // 2, n):
        for prefix in (sorted_prefix, sorted_prefix_words, sorted_prefix_bytes):
            got = prefix(bytes(keys) if prefix is sorted_prefix_bytes else keys,
                         lambda order, k=k: len(order) >= k)
            assert got == want[:len(got)] and len(got) >= k
    assert heaps, "the adversary's keys never reached the depth limit"


def test_vectorized_rankings_of_growing_lengths_reuse_their_buffers(monkeypatch) -> None:
    """Each ranking reuses the last one's buffers (per thread) while they are long enough:
    one a few keys longer than the last gets new ones (the masks are sized by the keys)."""
    if not HAVE_NUMPY:
        pytest.skip("numpy is not installed: the vectorized ranking is not available")
    monkeypatch.setattr(prefixsort, "TYPED", False)
    monkeypatch.setattr(prefixsort, "BYTES_FROM", 0)
    monkeypatch.setattr(prefixsort, "PART_FROM", 0)
    rng = random.Random("grow")
    for n in (1000, 1001, 1020, 1064, 500, 1100):
        keys = [rng.randrange(4) for _ in range(n)]
        got = sorted_prefix_bytes(bytes(keys), lambda order: len(order) >= 3)
        assert got == std_order(keys)[:len(got)]


@pytest.mark.parametrize("seed", range(4))
def test_a_byte_ranking_partitions_long_parts_with_numpy_and_short_ones_in_python(
        seed: int, monkeypatch) -> None:
    """At the matcher's own thresholds, one ranking of byte keys as long as a 16,384-node
    machine's node list partitions its long parts with numpy and its short ones in plain
    Python, and gives std::sort's front."""
    if not HAVE_NUMPY:
        pytest.skip("numpy is not installed: the vectorized ranking is not available")
    monkeypatch.setattr(prefixsort, "TYPED", False)
    rng = random.Random(f"mixed/{seed}")
    keys = [rng.randrange(rng.choice([2, 3, 16, 255])) for _ in range(16_384)]
    want = std_order(keys)
    used = {"_partition_np": [], "_partition_masked": []}
    for name, sizes in used.items():
        real = getattr(prefixsort, name)
        monkeypatch.setattr(prefixsort, name, lambda *a, real=real, sizes=sizes:
                            sizes.append(a[3] - a[2]) or real(*a))
    for k in (1, 70, 600):
        got = sorted_prefix_bytes(bytes(keys), lambda order, k=k: len(order) >= k)
        assert got == want[:len(got)] and len(got) >= k
    assert used["_partition_np"] and used["_partition_masked"]
    assert min(used["_partition_np"]) >= prefixsort.PART_FROM > max(used["_partition_masked"])


@pytest.mark.parametrize("seed", range(6))
def test_vectorized_prefix_of_long_lists_is_the_python_prefix(seed: int) -> None:
    """Lists as long as the matcher hands to numpy (a core per position: free cores' ids,
    node after node, some taken), and longer than where the vectorized partition lists only
    the stops near the cut: the same positions as the plain Python prefix."""
    if not HAVE_NUMPY:
        pytest.skip("numpy is not installed: the vectorized ranking is not available")
    rng = random.Random(f"long/{seed}")
    n = rng.choice([prefixsort.VECTOR_FROM, 3 * prefixsort._NEAR_FROM, 300_000])
    if seed % 2:
        keys = [c for _ in range(n // 64 + 1) for c in range(64) if rng.random() > 0.1][:n]
    else:
        keys = [rng.randrange(rng.choice([2, 64, 255])) for _ in range(n)]
    for k in (1, 2, 300):
        def enough(order, k=k):
            return len(order) >= k
        prefixsort.vectorized(False)
        want = sorted_prefix_bytes(bytes(keys), enough)
        words = sorted_prefix_words([key * 257 for key in keys], enough)
        prefixsort.vectorized(True)
        assert sorted_prefix_bytes(bytes(keys), enough) == want
        assert sorted_prefix_words([key * 257 for key in keys], enough) == words == want


@pytest.mark.parametrize("n", [0, 1, 16, 17, 33, 100, 4097, 65_536])
def test_equal_prefix_is_std_sorts_order_of_equal_keys(n: int) -> None:
    want = std_order([7] * n) if n <= 5000 else None
    for count in (1, 2, 17, 64):
        got = equal_prefix(n, count)
        assert len(got) == min(n, count)
        if want is not None:
            assert got == want[:count]
    if n == 65_536:  # too long to sort here: the permutation is at least a permutation
        assert len(set(equal_prefix(n, 5000))) == 5000


def groups_of(scores: list[int], counts: list[int], tag: int) -> list[Candidate]:
    return [Candidate(s, c, 0, 1, False, [[c, c, 1, tag * 100_000 + i, -1]])
            for i, (s, c) in enumerate(zip(scores, counts, strict=True))]


def merged(pieces: list[list[list]]) -> Evals:
    """A candidate list built as the full walk builds it from remembered subtrees."""
    top = Evals()
    for piece in pieces:
        part = Evals()
        for g in piece:
            part.add(g)
        top.merge(part, kept=True)
    return top


def flat(pieces: list[list[list]]) -> Evals:
    ev = Evals()
    for piece in pieces:
        for g in piece:
            ev.add(Candidate(g.score, g.count, 0, g.exclusive, g.root, g.edges))
    return ev


def chosen(ev: Evals) -> list[tuple[int, int]]:
    return [(g.edges[0][3], g.needs) for g in ev.eg[:ev.best_i]]


@pytest.mark.parametrize("seed", range(60))
def test_a_merged_list_ranks_as_the_flat_list(seed: int) -> None:
    rng = random.Random(f"merged/{seed}")
    spread = rng.choice([1, 1, 2, 5, 40])
    pieces = []
    for tag in range(rng.randint(2, 30)):
        size = rng.randint(1, 24)
        scores = sorted(rng.randrange(spread) + 1 for _ in range(size))
        counts = [rng.choice([1, 1, 1, 4]) for _ in range(size)]
        pieces.append(groups_of(scores, counts, tag))
    top, ref = merged(pieces), flat(pieces)
    assert top.n == ref.n and top.qual == ref.qual
    high, runs = rng.random() < 0.5, rng.random() < 0.3
    k = rng.randint(1, top.qual)
    assert top.choose_best_k(k, high, runs) == ref.choose_best_k(k, high, runs)
    assert top.best_i == ref.best_i and chosen(top) == chosen(ref)
    if top.best_i < len(ref.eg):  # the next one (the guard reads it) is there too
        assert top.eg[top.best_i].edges == ref.eg[top.best_i].edges
    # ranked again (or-slots): Fluxion sorts what the first ranking left
    k2 = rng.randint(1, top.qual)
    assert top.choose_best_k(k2, not high) == ref.choose_best_k(k2, not high)
    assert chosen(top) == chosen(ref)


@pytest.mark.parametrize("seed", range(10))
def test_a_merged_list_reads_each_group_where_the_flat_list_has_it(seed: int) -> None:
    """group(i) finds its part by bisection over where the parts start (kept): every
    position reads the flat list's group, also after groups and lists are added to a list
    already read (what was kept is worked out again), and a position past the end raises."""
    rng = random.Random(f"group/{seed}")
    pieces = [groups_of([1] * (n := rng.randint(1, _FLAT + 40)), [1] * n, tag)
              for tag in range(rng.randint(1, 12))]
    top = merged(pieces)

    def reads_as_flat() -> None:
        ref = flat(pieces)
        assert [top.group(i).edges for i in range(top.n)] == [g.edges for g in ref.eg]
        with pytest.raises(IndexError):
            top.group(top.n)

    for _ in range(3):
        reads_as_flat()
        for _ in range(2):  # a list of groups after the last part, then one more group on it
            n = rng.randint(1, 3)
            extra = groups_of([2] * n, [1] * n, len(pieces))
            for g in extra:
                top.add(g)
            pieces.append(extra)
            reads_as_flat()
        more = groups_of([3] * _FLAT, [1] * _FLAT, len(pieces))
        part = Evals()
        for g in more:
            part.add(g)
        top.merge(part, kept=True)
        pieces.append(more)


class _CountedEvals(Evals):
    """An Evals part that counts the groups read from it (as a remembered node's lazy
    part builds each group it is asked for: its vertices' post-order, then the edges)."""

    read: list[int] = []

    def group(self, i: int) -> Candidate:
        self.read.append(i)
        return super().group(i)


@pytest.mark.parametrize("seed", range(30))
def test_a_merged_ranking_reads_the_chosen_groups_and_the_next_one_only(seed: int,
                                                                        monkeypatch) -> None:
    """A ranked concatenation reads each group once, the chosen ones and the one after
    them (what the guard compares), not the rest of the run std::sort's prefix ended on;
    what it chooses is the flat list's."""
    rng = random.Random(f"reads/{seed}")
    monkeypatch.setattr(_CountedEvals, "read", [])
    spread = rng.choice([1, 2, 5, 40, 200])
    pieces = []
    top = Evals()
    tags = rng.randint(3, 30)
    while len(pieces) < tags or top.n <= _FLAT:  # (longer than _FLAT: ranked merged)
        tag = len(pieces)
        size = rng.randint(9, 40)  # (more than _TINY: merged by reference)
        scores = [rng.randrange(spread) + 1 for _ in range(size)]
        counts = [rng.choice([1, 1, 1, 4]) for _ in range(size)]
        piece = groups_of(scores, counts, tag)
        pieces.append(piece)
        part = _CountedEvals()
        for g in piece:
            part.add(g)
        top.merge(part, kept=True)
    ref = flat(pieces)
    high = rng.random() < 0.5
    k = rng.randint(1, min(6, top.qual))
    assert top.choose_best_k(k, high) == ref.choose_best_k(k, high)
    assert top._ranked == (high, False)  # (ranked merged, from the scores)
    assert chosen(top) == chosen(ref)
    read = _CountedEvals.read
    assert len(read) == min(top.best_i + 1, top.n) == len(top.eg)
    if top.best_i < top.n:
        assert top.eg[top.best_i].edges == ref.eg[top.best_i].edges


def test_a_list_longer_than_flat_is_merged_by_reference() -> None:
    pieces = [groups_of([1] * (_FLAT + 1), [1] * (_FLAT + 1), 0)]
    top = merged(pieces)
    assert top.parts is not None and top.n == _FLAT + 1


def test_run_ranks_are_the_runs_in_reverse_order() -> None:
    """locality's top-level ranking keys (score -> rank of its run of consecutive scores,
    0 the highest run) as the per-run definition gives them, on random score sets."""
    import random

    from fluxinfra.matcher.evaluators import _run_ranks, _score_runs_of

    rng = random.Random(12)
    for _ in range(500):
        scores = set(rng.sample(range(-5, 80), rng.randint(0, 50)))
        run = _score_runs_of(scores)
        order = {r: i for i, r in enumerate(sorted(set(run.values()), reverse=True))}
        assert _run_ranks(scores) == ({s: order[run[s]] for s in scores}, len(order))


def test_runs_read_in_group_order_and_joined_over_parts_are_the_run_ranks() -> None:
    """Scores strictly descending or ascending in group order (locality walks ids in order):
    the runs read off the list, or joined from the runs of the pieces it is cut into (a
    root's list is its racks' lists), give each group the rank worked out through the sorted
    distinct scores; any other list is left to that general path (None)."""
    from fluxinfra.matcher.evaluators import _join_runs, _run_ranks, _runs_of

    def keys(runs: tuple) -> list[int]:  # as _choose_merged reads them
        direction, _, _, lengths = runs
        ranks = range(len(lengths)) if direction <= 0 else range(len(lengths) - 1, -1, -1)
        return [r for r, count in zip(ranks, lengths, strict=True) for _ in range(count)]

    rng = random.Random(13)
    for _ in range(2000):
        scores = sorted(rng.sample(range(-5, 300), rng.randint(0, 80)))
        if rng.random() < 0.5:
            scores.reverse()
        monotonic = True
        if len(scores) > 2 and rng.random() < 0.2:
            i = rng.randrange(len(scores) - 1)
            scores[i], scores[i + 1] = scores[i + 1], scores[i]
            monotonic = False
        elif len(scores) > 1 and rng.random() < 0.1:
            scores[rng.randrange(len(scores) - 1) + 1] = scores[0]  # a repeated score
            monotonic = False
        cuts = sorted(rng.choices(range(len(scores) + 1), k=rng.randint(0, 6)))
        pieces = [scores[a:b] for a, b in pairwise([0, *cuts, len(scores)])]
        for got in (_runs_of(scores), _join_runs([_runs_of(p) for p in pieces])):
            if not monotonic:
                assert got is None, (scores, pieces)
                continue
            rank_of, nruns = _run_ranks(set(scores))
            assert keys(got) == [rank_of[s] for s in scores], (scores, pieces)
            assert len(got[3]) == (nruns if scores else 0)


@pytest.mark.parametrize("policy", ["low", "high", "locality"])
def test_a_machine_ranked_with_numpy_or_typed_allocates_what_it_does_in_python(policy,
                                                                              monkeypatch):
    """The matcher on a 512-node GRUG machine (32,768 cores: one top-level list of them per
    1-core match under low/high, one of the 512 nodes under locality), numpy ranking every
    list past 256 keys and listing only the stops near each cut past 4,096, or bytepart's
    kernel partitioning every byte ranking: 1-core jobs and whole nodes, with cancels
    between, allocate the same vertices as with the plain Python ranking."""
    if not HAVE_NUMPY:
        pytest.skip("numpy is not installed: the vectorized ranking is not available")
    from fluxinfra.matcher import Matcher, load_graph
    from fluxinfra.matcher.recipe import recipe_to_grug

    recipe = {"cluster": "t", "racks": 2, "nodes_per_rack": 256, "sockets": 2,
              "cores_per_socket": 32, "gpus_per_socket": 2, "memory_per_socket": [4, 16]}
    core = {"version": 1, "resources": [{"type": "slot", "count": 1, "label": "task",
                                         "with": [{"type": "core", "count": 1}]}],
            "attributes": {"system": {"duration": 3600}},
            "tasks": [{"command": ["app"], "slot": "task", "count": {"per_slot": 1}}]}
    node = {**core, "resources": [{"type": "node", "count": 1, "exclusive": True,
                                   "with": core["resources"]}]}
    monkeypatch.setattr(prefixsort, "_NEAR_FROM", 4096)

    def run(vector_from: int, typed: bool = False) -> list:
        monkeypatch.setattr(prefixsort, "TYPED", typed)
        monkeypatch.setattr(prefixsort, "VECTOR_FROM", vector_from)
        monkeypatch.setattr(prefixsort, "BYTES_FROM", vector_from)
        m = Matcher(load_graph(recipe_to_grug(recipe), fmt="grug"), policy=policy)
        out = []
        for i in range(24):
            r = m.match(node if i % 6 == 5 else core)
            out.append(sorted(r.to_dict()["R"]["execution"]["R_lite"][0]["children"].items()))
            out.append(r.to_dict()["R"]["execution"]["nodelist"])
            if i % 4 == 3:
                m.cancel(r.jobid - 2)
        return out

    used = []
    real = prefixsort._sorted_prefix_np
    monkeypatch.setattr(prefixsort, "_sorted_prefix_np", lambda *a: used.append(1) or real(*a))
    typed = []
    monkeypatch.setattr(bytepart, "partition",
                        lambda *a, real=bytepart.partition: typed.append(1) or real(*a))
    want = run(1 << 62)
    assert not used and not typed
    assert run(256) == want
    assert used and not typed
    used.clear()
    assert run(1 << 62, typed=True) == want
    assert typed and not used


@pytest.mark.parametrize("policy,looked", [("low", True), ("locality", True), ("first", False)])
def test_a_matcher_that_will_rank_long_lists_imports_numpy_when_it_is_made(policy, looked,
                                                                          monkeypatch):
    """A ranking policy on a machine with BYTES_FROM or more of some type looks for numpy
    when its matcher is made (its import, about 60 ms, is not the first long match's);
    ``first`` ranks nothing that long and leaves it alone."""
    from fluxinfra.matcher import Matcher, load_graph
    from fluxinfra.matcher.recipe import recipe_to_grug

    graph = load_graph(recipe_to_grug({"cluster": "t", "racks": 1, "nodes_per_rack": 4,
                                       "sockets": 1, "cores_per_socket": 8}), fmt="grug")
    monkeypatch.setattr(prefixsort, "BYTES_FROM", 32)  # 32 cores
    monkeypatch.setattr(prefixsort, "_np_module", None)  # not looked for yet
    Matcher(graph, policy=policy)
    assert (prefixsort._np_module is not None) == looked
    monkeypatch.setattr(prefixsort, "BYTES_FROM", 33)
    monkeypatch.setattr(prefixsort, "_np_module", None)
    Matcher(graph, policy=policy)
    assert prefixsort._np_module is None  # fewer: nothing that long to rank


@pytest.mark.parametrize("seed", range(8))
def test_byte_keys_given_away_are_partitioned_in_place_and_others_copied(seed: int,
                                                                         way: str) -> None:
    """``owned=True`` hands the bytearray to the partitions (no copy: the ranking of a
    machine's cores under a top-level slot), which leave it changed; otherwise the caller's
    keys stay as they were. The order is the same either way."""
    rng = random.Random(f"owned/{seed}")
    keys = bytearray(rng.randrange(rng.choice([2, 64, 255]))
                     for _ in range(rng.choice([17, 3000, 40_000])))
    before = bytes(keys)

    def enough(order: list[int]) -> bool:
        return len(order) >= 5

    copied = sorted_prefix_bytes(keys, enough)
    assert keys == before  # not owned: partitioned in a copy
    given = sorted_prefix_bytes(keys, enough, owned=True)
    assert given == copied == std_order(list(before))[:len(given)]
    assert keys != before  # partitioned where it was (what it holds after is the store's)
    frozen = bytes(before)
    assert sorted_prefix_bytes(frozen, enough, owned=True) == copied  # bytes: copied anyway
    assert frozen == before


def test_a_merged_lists_key_array_is_its_key_bytes_in_a_bytearray_of_its_own() -> None:
    """key_array joins the parts' keys straight into a new bytearray when the list's own key
    bytes are not kept, copies the kept ones when they are; changing it changes nothing the
    list or its parts keep."""
    rng = random.Random("key_array")
    sizes = [rng.randint(1, 30) for _ in range(12)]
    pieces = [groups_of(sorted(rng.randrange(1, 50) for _ in range(size)), [1] * size, tag)
              for tag, size in enumerate(sizes)]
    for base, high in ((49, True), (1, False)):
        top = merged(pieces)
        fresh = top.key_array(base, high)
        assert type(fresh) is bytearray and top._keys is None  # not kept: a list ranked once
        kept = top.key_bytes(base, high)
        assert fresh == kept and type(kept) is bytes
        again = top.key_array(base, high)
        assert again == kept and again is not kept
        again[:] = bytes(len(again))
        fresh[:] = bytes(len(fresh))
        assert top.key_bytes(base, high) == kept != bytes(len(kept))
        assert b"".join(p.key_bytes(base, high) for p in top.parts) == kept
