"""``find`` criteria (resource-query's expression language) through ``Matcher.find`` and
``find_text``: vertices, or a MatcherError with a message (never a hostlist expanded without
bound, never a nesting that exhausts the stack)."""

from __future__ import annotations

from pathlib import Path

from fuzzlib import EDGE_INTS, clean, fuzz
from hypothesis import example
from hypothesis import strategies as st

from fluxinfra.matcher import Matcher, load_graph

GRAPH = load_graph(str(Path(__file__).resolve().parents[2] / "examples" / "graph.json"))
MATCHER = Matcher(GRAPH)
MATCHER.match({"version": 1, "resources": [{"type": "core", "count": 3}]})
KEYS = ["status", "sched-now", "sched-future", "names", "property", "jobid-alloc",
        "jobid-reserved", "jobid-span", "jobid-tag", "agfilter", "nope", ""]
VALUES = ["up", "down", "free", "allocated", "reserved", "true", "node[0-3]", "node1",
          "node[0-99999999]", "n[", "n[3-1]", "x[" + "9" * 30 + "]", "1", "gpu", ""] \
    + [str(i) for i in EDGE_INTS]


@st.composite
def criteria(draw, depth: int = 0) -> str:
    parts = []
    for i in range(draw(st.integers(1, 3))):
        if i:
            parts.append(draw(st.sampled_from(["and", "or", "nor", ""])))
        if depth < 3 and draw(st.integers(0, 4)) == 2:
            parts.append("(" + draw(criteria(depth + 1)) + draw(st.sampled_from([")", "", "))"])))
        else:
            parts.append(f"{draw(st.sampled_from(KEYS))}={draw(st.sampled_from(VALUES))}")
    return " ".join(parts)


@fuzz(criteria() | st.text(max_size=40))
@example("names=node[0-99999999]")
@example("(" * 5000 + "status=up" + ")" * 5000)
@example("(" * 60 + "status=up" + ")" * 60)
@example("status=up and (" * 3000)
def test_find_criteria(text):
    clean(MATCHER.find, text)
    clean(MATCHER.find_text, text, "pretty_simple")
