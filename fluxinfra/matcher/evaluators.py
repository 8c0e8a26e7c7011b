"""Scoring and ranking of candidates: Fluxion's ``resource/evaluators/``.

:class:`Evals` mirrors ``edge_eval_api`` (``evals_t``: the candidate edge groups of one
resource type found below a vertex, and ``choose_best_k``, which ranks them as ``std::sort``
leaves them and gives the first ones the units asked for); :class:`Scoring` mirrors
``scoring_api_t`` (the evals of every type gathered below one vertex). :func:`std_sorted`
replays libstdc++'s ``std::sort`` where ties make its order differ from a stable sort's, and
the run helpers give the ``locality`` policy's top-level ranking (candidates ranked by the run
of consecutive scores each falls in). The scores themselves come from the policies
(``fluxinfra.matcher.policies``) and the walk (``traverser.dfu``).

    >>> ev = Evals()
    >>> for score, count in ((3, 1), (7, 1), (5, 1)):
    ...     ev.add(Candidate(score, count, 0, False, False, ()))
    >>> ev.choose_best_k(2, high=True)
    True
    >>> [(g.score, g.needs) for g in ev.eg[:ev.best_i]]
    [(7, 1), (5, 1)]
"""

from __future__ import annotations

from bisect import bisect_right
from itertools import accumulate, chain, groupby, islice, repeat
from operator import add, attrgetter, gt, lt, sub

from fluxinfra.matcher.prefixsort import sorted_prefix, sorted_prefix_bytes, sorted_prefix_words
from fluxinfra.matcher.stdsort import equal_prefix, introsort

__all__ = ["Candidate", "Evals", "Scoring", "std_sorted", "worse", "score_runs", "perf_class",
           "cmod", "MATCH_MET", "MATCH_UNMET"]

MATCH_UNMET, MATCH_MET = 0, 1


class Candidate:
    """One candidate of a ranking (Fluxion's ``eval_egroup_t``): a child that qualified below
    a vertex, or a slot formed there, offered to the ranking of its resource type.

    ``score`` ranks it (policies and the walk compute it); ``count``: the units it offers;
    ``needs``: the units the ranking gave it (0 until :meth:`Evals.choose_best_k` chooses it);
    ``exclusive``: it is to be held exclusively; ``root``: it stands for the graph's root (the
    root's own entry, never marked); ``edges``: the edges it stands for (one for a child, one
    per member for a slot), a tuple of ``(count, needs, exclusive, vertex, parent)`` tuples
    (Fluxion's ``eval_edg_t``). Edges are only read and stay plain tuples of ints, which the
    cyclic collector stops tracking (a node's candidates outlive many matches)."""

    __slots__ = ("score", "count", "needs", "exclusive", "root", "edges")

    def __init__(self, score: int, count: int, needs: int, exclusive: bool, root: bool,
                 edges: tuple) -> None:
        self.score = score
        self.count = count
        self.needs = needs
        self.exclusive = exclusive
        self.root = root
        self.edges = edges

    def __repr__(self) -> str:
        return (f"Candidate(score={self.score}, count={self.count}, needs={self.needs}, "
                f"exclusive={self.exclusive}, root={self.root}, edges={self.edges})")


class Evals:
    """Candidate edge groups of one resource type (Fluxion's evals_t).

    Flat (``eg``, the groups) or, once a large candidate list of a remembered subtree is
    merged in (see Traverser._visit), a concatenation of ``parts`` (other Evals, never
    changed again, and lists of groups) read in order without copying them: a root that
    gathers a million slots merges the racks' lists, not the slots."""

    __slots__ = ("eg", "qual", "total", "best_k", "best_i", "it", "parts", "n", "_scores",
                 "_ranked", "_bounds", "_distinct", "_keys", "_starts", "_runs")

    def __init__(self) -> None:
        self.eg: list[Candidate] = []
        self.qual = 0
        self.total = 0
        self.best_k = 0
        self.best_i = 0
        self.it = -1
        self.parts: list | None = None
        self.n = 0  # groups in all
        self._scores = None
        #: a concatenation ranked by _choose_merged: (high, runs) it was ranked by
        self._ranked: tuple[bool, bool] | None = None
        self._bounds: tuple[int, int] | None = None  # (lowest, highest score), kept
        self._distinct: frozenset[int] | None = None  # the scores, kept
        self._keys: tuple | None = None  # ((base, high), key bytes), kept
        self._starts: list[int] | None = None  # where each part starts (group() bisects)
        self._runs: tuple | None | bool = False  # runs(), kept (False: not worked out)

    def add(self, group: Candidate) -> None:
        self.total += group.count
        if group.score > MATCH_UNMET:
            self.qual += group.count
        self.n += 1
        parts = self.parts
        if parts is None:
            self.eg.append(group)  # (no parts: nothing kept of where they start)
            return
        self._starts = None
        if parts and type(parts[-1]) is list:
            parts[-1].append(group)
        else:
            parts.append([group])

    def merge(self, other: Evals, kept: bool = False) -> None:
        """Append ``other``'s groups; a ``kept`` list (remembered, never changed again) is
        referred to rather than copied unless it is tiny."""
        self.qual += other.qual
        self.total += other.total
        self.n += other.n
        self._starts = None
        if self.parts is None and other.parts is None and other.n <= (
                _TINY if kept else _FLAT):
            self.eg.extend(other.eg)
            return
        if self.parts is None:
            self.parts = [self.eg] if self.eg else []
            self.eg = []
        self.parts.append(other)  # by reference: ``other`` is never changed again

    def groups(self) -> list[Candidate]:
        """Every group, in order (flattening a concatenation)."""
        if self.parts is None:
            return self.eg
        out: list[Candidate] = []
        for part in self.parts:
            out += part if type(part) is list else part.groups()
        return out

    def scores(self) -> list[int]:
        """Every group's score, in order (kept once built: a merged part never changes)."""
        got = self._scores
        if got is None:
            if self.parts is None:
                got = list(map(_score, self.eg))
            else:
                got = []
                for part in self.parts:
                    got += list(map(_score, part)) if type(part) is list else part.scores()
            self._scores = got
        return got

    def key_bytes(self, base: int, high: bool) -> bytes:
        """Each group's key as one byte: its score less ``base`` (``high``: ``base`` less
        its score); kept for the last base asked (scores of every group must fit)."""
        got = self._keys
        if got is None or got[0] != (base, high):
            if self.parts is None:
                data = _key_bytes(self.scores(), base, high)
            else:
                data = b"".join(self._part_keys(base, high))
            got = self._keys = ((base, high), data)
        return got[1]

    def key_array(self, base: int, high: bool) -> bytearray:
        """key_bytes in a bytearray of its own, for a ranking that partitions it in place:
        joined straight into it when not kept (a concatenation ranked once, such as the
        machine's cores under a top-level slot: one copy of a million keys, not two)."""
        got = self._keys
        if self.parts is None or got is not None and got[0] == (base, high):
            return bytearray(self.key_bytes(base, high))
        return bytearray().join(self._part_keys(base, high))

    def _part_keys(self, base: int, high: bool):
        """Each part's key bytes, in order."""
        return (_key_bytes(list(map(_score, part)), base, high) if type(part) is list
                else part.key_bytes(base, high) for part in self.parts)

    def bounds(self) -> tuple[int, int]:
        """(lowest, highest) score of a non-empty list (kept once worked out)."""
        got = self._bounds
        if got is None:
            if self.parts is None:
                scores = self.scores()
                got = (min(scores), max(scores))
            else:
                los, his = [], []
                for part in self.parts:
                    if type(part) is list:
                        scores = list(map(_score, part))
                        lo, hi = min(scores), max(scores)
                    else:
                        lo, hi = part.bounds()
                    los.append(lo)
                    his.append(hi)
                got = (min(los), max(his))
            self._bounds = got
        return got

    def distinct(self) -> frozenset[int]:
        """The distinct scores (kept once worked out)."""
        got = self._distinct
        if got is None:
            if self.parts is None:
                got = frozenset(self.scores())
            else:
                got = frozenset().union(*(set(map(_score, part)) if type(part) is list
                                          else part.distinct() for part in self.parts))
            self._distinct = got
        return got

    def runs(self) -> tuple | None:
        """The scores' runs when they are strictly monotonic in group order (see _runs_of),
        else None. A concatenation joins its parts' runs (kept by each part once worked
        out): a root's list of 16,384 nodes is read once per part, not once per match."""
        got = self._runs
        if got is False:
            if self.parts is None:
                got = _runs_of(self.scores())
            else:
                got = _join_runs([_runs_of(list(map(_score, part))) if type(part) is list
                                  else part.runs() for part in self.parts])
            self._runs = got
        return got

    def group(self, i: int) -> Candidate:
        """Group ``i`` (in order): its part found by bisecting where the parts start."""
        parts = self.parts
        if parts is None:
            return self.eg[i]
        starts = self._starts
        if starts is None:
            starts = self._starts = list(accumulate(
                [len(part) if type(part) is list else part.n for part in parts], initial=0))
        if not 0 <= i < starts[-1]:
            raise IndexError(i)
        b = bisect_right(starts, i) - 1
        part = parts[b]
        return part[i - starts[b]] if type(part) is list else part.group(i - starts[b])

    def choose_best_k(self, k: int, high: bool, runs: bool = False, full: bool = False) -> bool:
        """Rank the groups (std::sort's order) and give the first ones ``k`` units. ``eg`` is
        then the ranked groups: all of them when ``full`` (slot members), else at least the
        chosen ones and the next."""
        if k == 0 or k > self.qual:
            return False
        if self.parts is not None and self.n > _FLAT and not full and self._ranked is None:
            return self._choose_merged(k, high, runs)
        eg = self.eg = self.groups()
        self.parts = None
        if self._ranked is not None:
            # ranked again (or-slots rank one list per alternative): Fluxion sorts the list
            # the first ranking left, so that ranking is done in full first
            eg = _rank(eg, *self._ranked)
            self._ranked = None
        # locality at the top level ranks by the run of consecutive scores each candidate
        # falls in (higher runs first; candidates of one run tie)
        eg = self.eg = _rank(eg, high, runs)
        left, i = k, 0
        while left > 0:
            group = self.eg[i]
            count = group.count
            group.needs = left if left <= count else count
            left -= count
            i += 1
        self.best_k, self.best_i = k, i
        return True

    def _choose_merged(self, k: int, high: bool, runs: bool) -> bool:
        """choose_best_k over a large concatenation: std::sort's first groups worked out from
        the scores alone (see prefixsort.sorted_prefix), then only those groups read."""
        n = self.n
        in_order = None
        if runs:
            # scores strictly monotonic in group order (locality walks ids in order): the
            # runs read off the parts as they are; otherwise ranked through the distinct
            # scores (kept per part: cheap when many groups share few scores)
            in_order = self.runs()
            if in_order is not None:
                lengths = in_order[3]
                nruns = len(lengths)
                # rank 0 is the highest run: the first when descending, else the last
                ranks = range(nruns) if in_order[0] <= 0 else range(nruns - 1, -1, -1)
            else:
                rank_of, nruns = _run_ranks(self.distinct())
            one = nruns == 1
        else:
            lo, hi = self.bounds()
            one = lo == hi
        taken = [0, 0, -1]  # groups counted, their units, how many groups made k units
        eg: list = []  # the ranked groups read so far (each read once: a look-up per part)

        def enough(order: list[int]) -> bool:
            """The ranked groups so far give k units, and one more group follows (each
            group read once, and none past the one that follows)."""
            for i in order[taken[0]:]:
                if 0 <= taken[2] < taken[0]:
                    break
                taken[0] += 1
                group = self.group(i)
                eg.append(group)
                taken[1] += group.count
                if taken[2] < 0 and taken[1] >= k:
                    taken[2] = taken[0]
            return 0 <= taken[2] < taken[0] or taken[0] >= n

        if one:  # one key: std::sort's order of equal elements, by arithmetic
            take = k + 1
            while True:
                order = equal_prefix(n, min(take, n))
                if enough(order):
                    break
                take *= 2
        elif not runs and hi - lo < 256:
            # keys in a byte: (score - lowest) or (highest - score), at C speed
            order = sorted_prefix_bytes(self.key_array(hi if high else lo, high), enough,
                                        owned=True)
        else:
            if runs:
                if in_order is None:
                    keys = map(rank_of.__getitem__, self.scores())
                elif nruns <= 256:  # a run's keys at memset speed
                    keys = b"".join([_BYTE[r] * count
                                     for r, count in zip(ranks, lengths, strict=True)])
                else:
                    keys = chain.from_iterable(map(repeat, ranks, lengths))
                if nruns <= 256:
                    order = sorted_prefix_bytes(bytearray(keys), enough, owned=True)
                elif nruns <= 65_536:
                    order = sorted_prefix_words(keys, enough)
                else:
                    order = sorted_prefix(list(keys), enough)
            else:
                scores = self.scores()
                order = sorted_prefix([-s for s in scores] if high else scores, enough)
        enough(order)  # (each way above has asked already: this reads nothing more)
        left, i = k, 0
        while left > 0:
            group = eg[i]
            count = group.count
            group.needs = left if left <= count else count
            left -= count
            i += 1
        self.eg, self._ranked = eg, (high, runs)  # parts stay: groups() is still the list
        self.best_k, self.best_i = k, i
        return True


#: a candidate's score (a C-level getter: rankings read a million of them)
_score = attrgetter("score")


def _key_bytes(scores: list[int], base: int, high: bool) -> bytes:
    return bytes([base - s for s in scores] if high else [s - base for s in scores])


def _rank(groups: list[Candidate], high: bool, runs: bool) -> list[Candidate]:
    """``groups`` in std::sort's order by score (``runs``: by locality's runs)."""
    if runs:
        run = score_runs(groups)
        return std_sorted(groups, lambda g: run[g.score], True)
    return std_sorted(groups, _score, high)


def score_runs(groups: list[Candidate]) -> dict[int, tuple[int, int]]:
    """score -> (first, last) of the run of consecutive integers it belongs to, over the
    scores of ``groups`` (Fluxion's locality policy joins them in an interval set and compares
    the intervals lexicographically)."""
    return _score_runs_of(map(_score, groups))


def _runs_of(scores: list[int]) -> tuple | None:
    """locality's runs of ``scores`` when they are strictly monotonic in group order:
    (direction: 1 ascending, -1 descending, 0 at most one score; the first score; the last;
    the length of each run in order, a run being scores one apart), read off the list
    without sorting it; None otherwise (then _run_ranks)."""
    n = len(scores)
    if n < 2:
        return (0, scores[0], scores[0], [1]) if n else (0, None, None, [])
    rest = islice(scores, 1, None)
    if scores[0] < scores[1]:
        if not all(map(lt, scores, rest)):
            return None
        # ascending: score less position is the same all along a run
        return 1, scores[0], scores[-1], [
            len(list(run)) for _, run in groupby(map(sub, scores, range(n)))]
    if not all(map(gt, scores, rest)):
        return None
    return -1, scores[0], scores[-1], [
        len(list(run)) for _, run in groupby(map(add, scores, range(n)))]


def _join_runs(parts: list) -> tuple | None:
    """The runs (see _runs_of) of the concatenation of lists whose runs are ``parts``."""
    out = None
    for part in parts:
        if part is None:
            return None
        if not part[3]:
            continue  # no groups
        if out is None:
            out = (part[0], part[1], part[2], list(part[3]))
            continue
        direction, first, last, lengths = out
        step = part[1] - last
        way = 1 if step > 0 else -1
        if step == 0 or direction == -way or part[0] == -way:
            return None
        if step == way:  # the last run goes on into the part's first
            lengths[-1] += part[3][0]
            lengths += part[3][1:]
        else:
            lengths += part[3]
        out = (way, first, part[2], lengths)
    return out if out is not None else (0, None, None, [])


def _run_ranks(distinct) -> tuple[dict[int, int], int]:
    """For locality's top-level ranking: score -> the rank of its run of consecutive
    integers among ``distinct`` (0: the highest run, as _score_runs_of's runs compared in
    reverse), and how many runs; worked out with C-speed iterators, not a loop per score
    (a 16,384-node machine ranks that many scores every match)."""
    scores = sorted(distinct)
    lengths = _runs_of(scores)[3]  # (ascending: always monotonic)
    ranks = range(len(lengths) - 1, -1, -1)
    return dict(zip(scores, chain.from_iterable(map(repeat, ranks, lengths)),
                    strict=True)), len(lengths)


_RUNS = "runs"  # key of a layout's runs() in its kind's cache (the others: (base, high))


#: each byte value as a one-byte string (run keys are repeated at memset speed)
_BYTE = [bytes((i,)) for i in range(256)]


def _score_runs_of(all_scores) -> dict[int, tuple[int, int]]:
    scores = sorted(set(all_scores))
    out: dict[int, tuple[int, int]] = {}
    i = 0
    while i < len(scores):
        j = i
        while j + 1 < len(scores) and scores[j + 1] == scores[j] + 1:
            j += 1
        run = (scores[i], scores[j])
        for s in scores[i:j + 1]:
            out[s] = run
        i = j + 1
    return out


def std_sorted(items: list, key, high: bool) -> list:
    """``items`` in the order ``std::sort`` leaves them under "``key`` greater" (``high``) or
    "less". libstdc++ insertion-sorts up to 16 elements (stable), and distinct keys leave
    one order, so a stable sort gives its result then; otherwise introsort is replayed."""
    if len(items) <= _INSERTION:
        return sorted(items, key=key, reverse=high)
    keys = list(map(key, items))
    if len(set(keys)) == len(keys):
        return sorted(items, key=key, reverse=high)
    out = list(items)
    if key is _score:
        introsort(out, _greater if high else _less)
    elif high:
        introsort(out, lambda a, b: key(a) > key(b))
    else:
        introsort(out, lambda a, b: key(a) < key(b))
    return out


def worse(a: int, b: int, high: bool) -> bool:
    """Score ``a`` ranks strictly after score ``b``."""
    return a < b if high else a > b


def _greater(a: Candidate, b: Candidate) -> bool:
    return a.score > b.score


def _less(a: Candidate, b: Candidate) -> bool:
    return a.score < b.score


#: std::sort leaves runs this short in insertion-sorted (stable) order
_INSERTION = 16


#: candidate lists longer than this are merged by reference (see Evals); remembered ones
#: longer than _TINY
_FLAT = 64


_TINY = 8


class Scoring:
    """Scores gathered below one vertex (Fluxion's scoring_api_t, one subsystem)."""

    __slots__ = ("ev", "avail", "overall", "hier", "used")

    def __init__(self) -> None:
        self.ev: dict[str, Evals] = {}
        self.avail = 0
        self.overall = -1
        self.hier = False
        #: slot members: type -> how many ranked member groups the formed slots took
        self.used: dict[str, int] | None = None

    def evals(self, rtype: str) -> Evals:
        ev = self.ev.get(rtype)
        if ev is None:
            ev = self.ev[rtype] = Evals()
        return ev

    def qual(self, rtype: str) -> int:
        ev = self.ev.get(rtype)
        return ev.qual if ev else 0

    def merge(self, other: Scoring) -> None:
        for rtype, ev in other.ev.items():
            self.evals(rtype).merge(ev)


def perf_class(props: dict | None) -> int:
    """A vertex's ``perf_class`` property (0..9999; missing or invalid: 9999, the worst)."""
    try:
        value = int((props or {})["perf_class"])
    except (KeyError, ValueError, TypeError):
        return 9999
    return value if 0 <= value <= 9999 else 9999


def cmod(a: int, b: int) -> int:
    """C's ``%`` (truncating toward zero)."""
    r = abs(a) % b
    return -r if a < 0 else r
