"""Time planners: how much of a resource is in use at every instant.

A :class:`Planner` keeps a piecewise-constant usage function as two parallel sorted arrays
(``times[i]`` .. ``times[i+1]`` is used ``usage[i]``), so "how much is free during
[at, at+duration)" is two bisections and a max over the points inside the window, and adding or
removing a span touches only the points it covers. Fluxion keeps one such planner per vertex
(its own units), one exclusivity checker per vertex, and one multi-type aggregate planner per
subtree (:class:`MultiPlanner`, every type on one time axis); the matcher does the same, creating
them lazily so an untouched vertex costs nothing.

>>> p = Planner(4)
>>> s = p.add_span(0, 10, 3)
>>> p.avail_during(0, 5), p.avail_during(10, 5), p.earliest(0, 5, 2)
(1, 4, 10)
>>> p.remove_span(s); p.avail_during(0, 5)
4
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right

__all__ = ["Planner", "MultiPlanner", "HORIZON", "type_set"]

#: End of the planning horizon (seconds); a duration of 0 means "until the horizon".
HORIZON = 1 << 62
#: sets of type names, each kept once (a planner per vertex, the child types of a million
#: vertices: a few distinct sets)
_TYPE_SETS: dict[frozenset[str], frozenset[str]] = {}


def type_set(types) -> frozenset[str]:
    """``types`` as a frozenset, the one kept for that combination (see _TYPE_SETS)."""
    types = frozenset(types)
    return _TYPE_SETS.setdefault(types, types)

#: Shared timelines (copy on write). Most planners are idle or hold one span over a window
#: every job shares ([0, 3600) on a 1-core job's core, socket and node): they use one pair of
#: lists per such state instead of two lists (and, for a MultiPlanner, two rows) each, and
#: take their own copy before changing them (``_own``). Keyed by (at, end, amount) for a
#: Planner, (types, at, end, amounts as items) for a MultiPlanner.
_SHARED: dict = {}
_MAX_SHARED = 4096


class _Timeline:
    """The time axis both planners share: sorted breakpoints ``times`` and, per breakpoint,
    the usage from there to the next (``usage``: an int, or a dict of them per type).
    While ``_shared``, the two lists (and rows) may be other planners' too: read them only,
    and call ``_own`` before changing them."""

    __slots__ = ()

    def _own(self) -> None:
        self.times = list(self.times)
        self.usage = list(self.usage)
        self._shared = False

    @staticmethod
    def _copy(row):
        return row  # an int; MultiPlanner's rows are dicts and copy themselves

    def _split(self, t: int) -> int:
        """The index of breakpoint ``t``, inserting it (same usage as before it) if new."""
        times = self.times
        i = bisect_left(times, t)
        if i < len(times) and times[i] == t:
            return i
        times.insert(i, t)
        self.usage.insert(i, self._copy(self.usage[i - 1]))
        return i

    def _window(self, at: int, end: int) -> tuple[int, int]:
        """Breakpoints at ``at`` and ``end`` (usually there already: jobs share windows)."""
        times = self.times
        i = bisect_left(times, at)
        if i == len(times) or times[i] != at:
            i = self._split(at)
        j = bisect_left(times, end, i)
        if j == len(times) or times[j] != end:
            j = self._split(end)
        return i, j

    def _merge(self, i: int, j: int) -> None:
        """Drop breakpoints ``j`` and ``i`` where the usage no longer changes (keeps the
        searches short)."""
        times, usage = self.times, self.usage
        for k in (j, i):
            if 0 < k < len(times) and usage[k] == usage[k - 1]:
                del times[k]
                del usage[k]

    def _first_span(self, key: tuple, at: int, end: int, amount) -> None:
        """Take the shared timeline (``key``: see _SHARED) of ``amount`` used during
        [at, end) and nothing else (an idle planner's first span: every vertex a job
        reaches first)."""
        pair = _SHARED.get(key)
        if pair is None:
            idle = self._idle()[1][0]
            busy = self._busy(idle, amount)
            pair = _share(key, ([0, at, end], [idle, busy, idle]) if at > 0 else
                          ([at, end], [busy, idle]))
        self.times, self.usage = pair
        self._shared = True

    def _drop_last(self, span_id: int) -> bool:
        """Remove span ``span_id`` if it is the only one (the shared idle timeline again);
        False (nothing done) when other spans remain."""
        if len(self.spans) != 1:
            return False
        del self.spans[span_id]
        self.times, self.usage = self._idle()
        self._shared = True
        return True

    def _span_window(self, span_id: int):
        """Pop a span; its window's indices (boundary points restored: they may have been
        merged away while other spans changed the usage around them) and its amount."""
        at, end, amount = self.spans.pop(span_id)
        i, j = self._window(at, end)
        return i, j, amount

    @property
    def empty(self) -> bool:
        return not self.spans


class Planner(_Timeline):
    """Usage over time of a resource pool of ``total`` units."""

    __slots__ = ("total", "times", "usage", "spans", "_next_id", "_shared")

    def __init__(self, total: int) -> None:
        self.total = total
        self.times: list[int] = _IDLE[0]
        self.usage: list[int] = _IDLE[1]
        self._shared = True
        self.spans: dict[int, tuple[int, int, int]] = {}
        self._next_id = 0

    def add_span(self, at: int, duration: int, amount: int) -> int:
        """Use ``amount`` units during [at, at+duration); returns the span id."""
        end = at + duration if at else duration  # (at 0: the caller's int, not a new one)
        if end > HORIZON:
            end = HORIZON
        spans = self.spans
        if not spans and at < end:
            self._first_span((at, end, amount), at, end, amount)
        else:
            if self._shared:
                self._own()
            i, j = self._window(at, end)
            usage = self.usage
            if j == i + 1:
                usage[i] += amount
            else:
                for k in range(i, j):
                    usage[k] += amount
        span_id = self._next_id
        self._next_id = span_id + 1
        spans[span_id] = (at, end, amount)
        return span_id

    def remove_span(self, span_id: int) -> None:
        if self._drop_last(span_id):
            return
        if self._shared:
            self._own()
        i, j, amount = self._span_window(span_id)
        usage = self.usage
        if j == i + 1:
            usage[i] -= amount
        else:
            for k in range(i, j):
                usage[k] -= amount
        self._merge(i, j)

    @staticmethod
    def _idle() -> tuple[list[int], list[int]]:
        return _IDLE

    @staticmethod
    def _busy(idle: int, amount: int) -> int:
        return amount

    def used_during(self, at: int, duration: int) -> int:
        times = self.times
        i = bisect_right(times, at) - 1
        j = bisect_left(times, at + duration) if duration > 0 else i + 1
        if j <= i + 1:
            return self.usage[i]
        return max(self.usage[i:j])

    def avail_during(self, at: int, duration: int) -> int:
        return self.total - self.used_during(at, duration)

    def used_without(self, at: int, duration: int, span_id: int | None) -> int:
        """:meth:`used_during` as if span ``span_id`` (if given and present) were removed;
        changes nothing (a re-registered job is checked against everyone but itself)."""
        span = self.spans.get(span_id) if span_id is not None else None
        if span is None:
            return self.used_during(at, duration)
        s_at, s_end, amount = span
        times, usage = self.times, self.usage
        end = at + duration if duration > 0 else at + 1
        # both functions are piecewise constant: look at every point where either changes
        i, j = bisect_right(times, at), bisect_left(times, end)
        points = {at, *times[i:j], *(t for t in (s_at, s_end) if at < t < end)}
        return max(usage[bisect_right(times, t) - 1] - (amount if s_at <= t < s_end else 0)
                   for t in points)

    def avail_at(self, at: int) -> int:
        return self.total - self.usage[bisect_right(self.times, at) - 1]

    def earliest(self, at: int, duration: int, amount: int) -> int:
        """Earliest start >= ``at`` with ``amount`` units free for ``duration``; -1 if never."""
        if amount > self.total:
            return -1
        for t in self.candidate_times(at):
            if self.avail_during(t, duration) >= amount:
                return t
        return -1

    def candidate_times(self, at: int):
        """``at`` then every later instant at which the usage changes."""
        yield at
        times = self.times
        for k in range(bisect_right(times, at), len(times)):
            yield times[k]


class MultiPlanner(_Timeline):
    """Usage over time of every resource type below one vertex (Fluxion's ``planner_multi``).

    One time axis for all types: a row per breakpoint maps each type to the amount in use, and
    a span carries one amount per type. A subtree aggregate changes every type at once (a job
    holding a node adds its sockets, cores, GPUs and memory to each ancestor), so one span per
    ancestor replaces one per ancestor and type.

    >>> p = MultiPlanner(["core", "gpu"])
    >>> s = p.add_span(0, 10, {"core": 3, "gpu": 1})
    >>> p.used_during("core", 0, 5), p.used_during("gpu", 10, 5)
    (3, 0)
    >>> p.remove_span(s); p.empty
    True
    """

    __slots__ = ("types", "times", "usage", "spans", "_next_id", "_shared")

    def __init__(self, types) -> None:
        self.types: frozenset[str] = type_set(types)  #: the types it counts
        self.times, self.usage = self._idle()
        self._shared = True
        self.spans: dict[int, tuple[int, int, dict[str, int]]] = {}
        self._next_id = 0

    _copy = staticmethod(dict.copy)

    def _idle(self) -> tuple[list[int], list[dict[str, int]]]:
        """The shared timeline of nothing used, for this planner's types."""
        pair = _SHARED.get(self.types)
        if pair is None:
            pair = _share(self.types, ([0], [dict.fromkeys(self.types, 0)]))
        return pair

    def _own(self) -> None:
        self.times = list(self.times)
        self.usage = [row.copy() for row in self.usage]
        self._shared = False

    def _add_types(self, amounts: dict[str, int]) -> None:
        if self._shared:
            self._own()
        new = [t for t in amounts if t not in self.types]
        self.types = type_set(self.types.union(new))
        for row in self.usage:
            for t in new:
                row[t] = 0

    def add_span(self, at: int, duration: int, amounts: dict[str, int]) -> int:
        """Use ``amounts`` (type -> units, kept by reference: do not change it afterwards)
        during [at, at+duration); returns the span id."""
        end = at + duration if at else duration
        if end > HORIZON:
            end = HORIZON
        if not self.types.issuperset(amounts):
            self._add_types(amounts)
        spans = self.spans
        if not spans and at < end:
            self._first_span((self.types, at, end, *amounts.items()), at, end, amounts)
        else:
            if self._shared:
                self._own()
            i, j = self._window(at, end)
            usage = self.usage
            if j == i + 1:
                row = usage[i]
                for t, n in amounts.items():
                    row[t] += n
            else:
                for k in range(i, j):
                    row = usage[k]
                    for t, n in amounts.items():
                        row[t] += n
        span_id = self._next_id
        self._next_id = span_id + 1
        spans[span_id] = (at, end, amounts)
        return span_id

    def remove_span(self, span_id: int) -> None:
        if self._drop_last(span_id):
            return
        if self._shared:
            self._own()
        i, j, amounts = self._span_window(span_id)
        usage = self.usage
        if j == i + 1:
            row = usage[i]
            for t, n in amounts.items():
                row[t] -= n
        else:
            for k in range(i, j):
                row = usage[k]
                for t, n in amounts.items():
                    row[t] -= n
        self._merge(i, j)

    @staticmethod
    def _busy(idle: dict[str, int], amounts: dict[str, int]) -> dict[str, int]:
        row = idle.copy()
        for t, n in amounts.items():
            row[t] += n
        return row

    def amounts(self, span_id: int) -> dict[str, int]:
        """What span ``span_id`` uses of each type (the dict it was given)."""
        return self.spans[span_id][2]

    def resize_span(self, span_id: int, amounts: dict[str, int]) -> int | None:
        """Replace a span by one of ``amounts`` over the same window (None: nothing left)."""
        at, end, _ = self.spans[span_id]
        self.remove_span(span_id)
        if not any(n > 0 for n in amounts.values()):
            return None
        return self.add_span(at, end - at, amounts)

    def used_during(self, rtype: str, at: int, duration: int) -> int:
        if rtype not in self.types:
            return 0
        times = self.times
        i = bisect_right(times, at) - 1
        j = bisect_left(times, at + duration) if duration > 0 else i + 1
        usage = self.usage
        most = usage[i][rtype]
        for k in range(i + 1, j):  # (a loop: a C method, planner.pxd, cannot hold a generator)
            n = usage[k][rtype]
            if n > most:
                most = n
        return most

    def column(self, rtype: str) -> list[int]:
        """The usage of one type at every breakpoint (``times``)."""
        return [row.get(rtype, 0) for row in self.usage]


#: the timeline of an idle Planner (shared: see _SHARED)
_IDLE: tuple[list[int], list[int]] = ([0], [0])


def _share(key, pair: tuple[list, list]) -> tuple[list, list]:
    """Keep ``pair`` as the shared timeline of ``key`` (a bounded table: once full it starts
    over; planners holding a dropped pair keep it, still shared, still never changed)."""
    if len(_SHARED) >= _MAX_SHARED:
        _SHARED.clear()
    _SHARED[key] = pair
    return pair
