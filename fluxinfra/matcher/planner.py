"""Time planners: how much of a resource is in use at every instant.

A :class:`Planner` keeps a piecewise-constant usage function as two parallel sorted arrays
(``times[i]`` .. ``times[i+1]`` is used ``usage[i]``), so "how much is free during
[at, at+duration)" is two bisections and a max over the points inside the window, and adding or
removing a span touches only the points it covers. Fluxion keeps one such planner per vertex
(its own units), one exclusivity checker per vertex, and one aggregate planner per subtree; the
matcher does the same, creating them lazily so an untouched vertex costs nothing.

>>> p = Planner(4)
>>> s = p.add_span(0, 10, 3)
>>> p.avail_during(0, 5), p.avail_during(10, 5), p.earliest(0, 5, 2)
(1, 4, 10)
>>> p.remove_span(s); p.avail_during(0, 5)
4
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right

__all__ = ["Planner", "HORIZON"]

#: End of the planning horizon (seconds); a duration of 0 means "until the horizon".
HORIZON = 1 << 62


class Planner:
    """Usage over time of a resource pool of ``total`` units."""

    __slots__ = ("total", "times", "usage", "spans", "_next_id")

    def __init__(self, total: int) -> None:
        self.total = total
        self.times: list[int] = [0]
        self.usage: list[int] = [0]
        self.spans: dict[int, tuple[int, int, int]] = {}
        self._next_id = 0

    def _split(self, t: int) -> int:
        times = self.times
        i = bisect_left(times, t)
        if i < len(times) and times[i] == t:
            return i
        times.insert(i, t)
        self.usage.insert(i, self.usage[i - 1])
        return i

    def add_span(self, at: int, duration: int, amount: int) -> int:
        """Use ``amount`` units during [at, at+duration); returns the span id."""
        end = at + duration
        if end > HORIZON:
            end = HORIZON
        if not self.spans and at < end:
            # first span on an idle planner (the common case on big graphs): build directly
            if at > 0:
                self.times, self.usage = [0, at, end], [0, amount, 0]
            else:
                self.times, self.usage = [at, end], [amount, 0]
            span_id = self._next_id
            self._next_id += 1
            self.spans[span_id] = (at, end, amount)
            return span_id
        # the boundaries usually exist already (jobs share windows): split inline
        times, usage = self.times, self.usage
        i = bisect_left(times, at)
        if i == len(times) or times[i] != at:
            times.insert(i, at)
            usage.insert(i, usage[i - 1])
        j = bisect_left(times, end, i)
        if j == len(times) or times[j] != end:
            times.insert(j, end)
            usage.insert(j, usage[j - 1])
        for k in range(i, j):
            usage[k] += amount
        span_id = self._next_id
        self._next_id += 1
        self.spans[span_id] = (at, end, amount)
        return span_id

    def remove_span(self, span_id: int) -> None:
        at, end, amount = self.spans.pop(span_id)
        # the span's boundary points may have been merged away while other spans changed the
        # usage around them: restore them before subtracting
        i = self._split(at)
        j = self._split(end)
        times, usage = self.times, self.usage
        for k in range(i, j):
            usage[k] -= amount
        # drop points that no longer change the usage (keeps searches short)
        for k in (j, i):
            if 0 < k < len(times) and usage[k] == usage[k - 1]:
                del times[k]
                del usage[k]

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

    @property
    def empty(self) -> bool:
        return not self.spans
