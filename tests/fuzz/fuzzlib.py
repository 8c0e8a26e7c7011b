"""What every fuzz test shares: a time budget, a hard per-input deadline, the contract check.

A fuzz test is a hypothesis property with :func:`fuzz` on top::

    from fuzzlib import fuzz, clean

    @fuzz(st.binary())                   # as hypothesis' @given
    @example(b"\\xff")                    # found inputs, kept: tried first
    def test_jobspec_bytes(data):
        clean(Jobspec.parse, data)       # a Jobspec, or a FluxinfraError with a message

:func:`fuzz` runs the property in rounds until the test's budget is spent:

``FLUXINFRA_FUZZ_SECONDS``   seconds per test (default 3: the whole directory then stays at
                             about two minutes; ``make fuzz`` gives each test 60)
``FLUXINFRA_FUZZ_EXAMPLES``  instead, exactly this many inputs per test (one round)
``FLUXINFRA_FUZZ_DEADLINE``  seconds one input may take before it fails as a hang (default 10)

Every input runs under a hard deadline (SIGALRM): one that does not finish fails the test
with :class:`Hang`, naming the input, without shrinking (each try would wait the deadline
out). Other failures are shrunk by hypothesis to a small input, printed; keep each one as an
``@example`` of its test (or a unit test), so it is tried first from then on.

:data:`STATS` counts, per test, inputs tried, rounds and seconds; ``conftest.py`` prints them
at the end of the session, with the failures, by surface (the test module's name after
``test_fuzz_``).
"""

from __future__ import annotations

import functools
import json
import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from fluxinfra.errors import FluxinfraError

__all__ = ["fuzz", "clean", "Hang", "STATS", "SECONDS", "EXAMPLES", "DEADLINE",
           "EDGE_INTS", "EDGE_FLOATS", "scalars", "json_values", "mutated", "mutations", "nested"]

SECONDS = float(os.environ.get("FLUXINFRA_FUZZ_SECONDS") or 3)
EXAMPLES = int(os.environ.get("FLUXINFRA_FUZZ_EXAMPLES") or 0)
DEADLINE = float(os.environ.get("FLUXINFRA_FUZZ_DEADLINE") or 10)
#: inputs in a test's first hypothesis run (a round), and at most in any other: a test runs
#: rounds until its budget is spent, each sized to what is left of it at the pace so far
FIRST_ROUND = 20
ROUND = 1000

settings.register_profile(
    "fluxinfra-fuzz",
    # (the hard deadline below replaces hypothesis' own, which a loaded machine trips)
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                           HealthCheck.filter_too_much, HealthCheck.large_base_example],
    print_blob=True,
)


@dataclass
class Stat:
    surface: str
    tried: int = 0
    rounds: int = 0
    seconds: float = 0.0
    failed: bool = False


#: "module::test" -> Stat
STATS: dict[str, Stat] = {}


class Hang(BaseException):
    """An input ran past the deadline (a BaseException: hypothesis passes it on unshrunk)."""


def clean(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``fn(*args, **kwargs)``: its result, or the FluxinfraError it raised when that error
    has a one-line message. Any other exception propagates (and fails the test)."""
    try:
        return fn(*args, **kwargs)
    except FluxinfraError as exc:
        text = str(exc)
        assert text.strip(), f"{type(exc).__name__} without a message"
        return exc


def _alarm(signum, frame):
    raise Hang(f"an input took more than {DEADLINE:g} s")


def fuzz(*strategies: st.SearchStrategy, **named: st.SearchStrategy):
    """``@fuzz(strategy, ...)`` in place of hypothesis' ``@given(strategy, ...)``: the test
    runs for its budget (rounds of inputs, each round sized to what is left of it; the
    ``@example`` inputs in the first round only), each input under the hard deadline,
    counted in :data:`STATS`."""
    def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
        module = fn.__module__
        key = f"{module}::{fn.__name__}"
        surface = module.rpartition(".")[2].removeprefix("test_fuzz_")

        @functools.wraps(fn)
        def counted(*args: Any, **kwargs: Any) -> Any:
            STATS[key].tried += 1
            previous = signal.signal(signal.SIGALRM, _alarm)
            signal.setitimer(signal.ITIMER_REAL, DEADLINE)
            try:
                return fn(*args, **kwargs)
            except Hang:
                shown = ", ".join([repr(a)[:500] for a in args]
                                  + [f"{k}={v!r}"[:500] for k, v in kwargs.items()])
                raise Hang(f"{key}: an input took more than {DEADLINE:g} s: {shown}") from None
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
                signal.signal(signal.SIGALRM, previous)

        def run() -> None:
            stat = STATS[key] = Stat(surface)
            start = time.monotonic()
            size, phases = EXAMPLES or FIRST_ROUND, tuple(Phase)
            try:
                while True:
                    began, tried = time.monotonic(), stat.tried
                    test = given(*strategies, **named)(counted)
                    settings(settings.get_profile("fluxinfra-fuzz"), max_examples=size,
                             phases=phases)(test)()
                    stat.rounds += 1
                    left = SECONDS - (time.monotonic() - start)
                    if EXAMPLES or left <= 0:
                        break
                    # half of what is left, at this round's pace (later inputs are larger
                    # and slower: rounds shrink as the budget runs out, and end near it)
                    each = (time.monotonic() - began) / max(1, stat.tried - tried)
                    size = int(min(ROUND, max(5, left / each / 2)))
                    phases = tuple(p for p in Phase if p is not Phase.explicit)
            except BaseException:
                stat.failed = True
                raise
            finally:
                stat.seconds = time.monotonic() - start

        # (not functools.wraps: pytest would read the property's arguments as fixtures)
        run.__name__, run.__qualname__ = fn.__name__, fn.__qualname__
        run.__module__, run.__doc__ = module, fn.__doc__
        return run
    return decorate


# -- strategies every surface uses --------------------------------------------------------------

#: integers where readers break: around 0, int32, uint32, int64, uint64 and past them
EDGE_INTS = [0, 1, -1, 2, 2**31 - 1, 2**31, 2**32 - 1, 2**32, 2**53 + 1, 2**62, 2**63 - 1,
             2**63, 2**64, -(2**63), -(2**63) - 1, 10**20, 10**30, 10**100]
#: floats where readers break
EDGE_FLOATS = [0.0, -0.0, 0.5, 1.5, 1e30, -1e30, 1e308, float("nan"), float("inf"),
               float("-inf")]


def scalars() -> st.SearchStrategy:
    """Any JSON scalar, edge values often."""
    return st.one_of(st.none(), st.booleans(), st.sampled_from(EDGE_INTS), st.integers(),
                     st.sampled_from(EDGE_FLOATS), st.floats(), st.text(max_size=20),
                     st.sampled_from(["", "0", "-1", "1e400", "node[0-3]", "0-3", "up",
                                      "down", "core", "a\x00b", "é"]))


def json_values(max_leaves: int = 12) -> st.SearchStrategy:
    """Any JSON-like value: scalars, lists and string-keyed objects of them."""
    return st.recursive(scalars(), lambda kids: st.lists(kids, max_size=4)
                        | st.dictionaries(st.text(max_size=8), kids, max_size=4),
                        max_leaves=max_leaves)


def mutated(seeds: list[str], snippets: list[str]) -> st.SearchStrategy:
    """Texts made from one of ``seeds`` by a few edits: a snippet inserted, a span deleted
    or replaced (the shapes a hand-edited file takes)."""
    @st.composite
    def build(draw):
        text = draw(st.sampled_from(seeds))
        for _ in range(draw(st.integers(0, 4))):
            at = draw(st.integers(0, len(text)))
            kind = draw(st.sampled_from(["insert", "delete", "replace"]))
            piece = draw(st.one_of(st.sampled_from(snippets), st.text(max_size=6)))
            if kind == "insert":
                text = text[:at] + piece + text[at:]
            else:
                end = min(len(text), at + draw(st.integers(0, 12)))
                text = text[:at] + (piece if kind == "replace" else "") + text[end:]
        return text
    return build()


def nested(depth: int, leaf: Any = 1) -> Any:
    """A list nested ``depth`` deep around ``leaf`` (past any recursion limit if asked)."""
    out = leaf
    for _ in range(depth):
        out = [out]
    return out


def _places(doc: Any, path: tuple = ()) -> list[tuple]:
    """Every path to a value inside ``doc`` (lists and dicts), the document itself first."""
    out = [path]
    if isinstance(doc, dict):
        for k, v in doc.items():
            out += _places(v, path + (k,))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            out += _places(v, path + (i,))
    return out


def mutations(doc: Any, values: st.SearchStrategy | None = None) -> st.SearchStrategy:
    """``doc`` (plain data, left as it is) with one to three of its values replaced by
    anything, dropped, or given a sibling: the shapes a valid document takes when a field is
    of the wrong type, missing or unexpected."""
    values = values if values is not None else json_values(6)

    @st.composite
    def build(draw):
        out = json.loads(json.dumps(doc))
        for _ in range(draw(st.integers(1, 3))):
            path = draw(st.sampled_from(_places(out)))
            if not path:
                return draw(values)
            parent = out
            for key in path[:-1]:
                parent = parent[key]
            kind = draw(st.sampled_from(["replace", "drop", "add"]))
            if kind == "replace":
                parent[path[-1]] = draw(values)
            elif kind == "drop":
                del parent[path[-1]]
            elif isinstance(parent, dict):
                parent[draw(st.text(max_size=8))] = draw(values)
            else:
                parent.append(draw(values))
        return out
    return build()
