"""RFC 20 R (``execution``: R_lite, nodelist, properties) through ``load_graph(...,
"rv1exec")``: a graph that can be matched and written, or a GraphError with a message (never
a hostlist or idset expanded without bound)."""

from __future__ import annotations

import json

from fuzzlib import clean, fuzz, json_values, scalars
from graphgen import usable
from hypothesis import example
from hypothesis import strategies as st

from fluxinfra.matcher import ResourceGraph, load_graph

IDSETS = ["0", "0-3", "1,3", "0-1,4-5", "", "3-1", "-1", "a", "0-99999999", "0-16777216",
          "99999999999999999999", " 2 ", "0,,1", "1-2-3"]
HOSTLISTS = ["n[0-3]", "node[01-10]", "a,b,c", "n[0-99999999]", "n[", "n]", "n[[1]]", "x[3-1]",
             "n" + "9" * 30, "h[1-2]s", "", "n[0-2,5]"]


def idsets():
    return st.sampled_from(IDSETS) | st.integers(0, 5).map(str) | scalars()


@st.composite
def rs(draw) -> dict:
    entries = []
    for _ in range(draw(st.integers(0, 3))):
        entry = {"rank": draw(idsets())}
        if draw(st.booleans()):
            entry["children"] = draw(st.dictionaries(
                st.sampled_from(["core", "gpu", "memory", ""]), idsets(), max_size=3)
                | json_values(4))
        entries.append(entry if draw(st.integers(0, 9)) != 5 else draw(json_values(4)))
    execution = {"R_lite": entries,
                 "nodelist": draw(st.lists(st.sampled_from(HOSTLISTS) | scalars(), max_size=3)
                                  | json_values(4))}
    if draw(st.booleans()):
        execution["properties"] = draw(st.dictionaries(st.text(max_size=5), idsets(),
                                                       max_size=2) | json_values(4))
    doc = {"version": 1, "execution": execution}
    if draw(st.integers(0, 9)) == 5:
        doc["execution"] = draw(json_values(4))
    return doc


def _load(source):
    g = load_graph(source, "rv1exec")
    assert isinstance(g, ResourceGraph) and g.finalized
    usable(g)
    return g


def r(ranks: str, nodelist: list, children: dict | None = None) -> dict:
    return {"version": 1, "execution": {"R_lite": [{"rank": ranks, "children": children or
                                                    {"core": "0"}}], "nodelist": nodelist}}


@fuzz(rs(), st.booleans())
@example(r("0", ["n[0-99999999]"]), True)
@example(r("0-99999999", ["n[0-99999999]"]), True)
@example(r("0-3", ["n[0-3]"], {"core": "0-99999999"}), False)
@example({"version": 1, "execution": {"R_lite": [{"rank": 5, "children": [1]}],
                                      "nodelist": "n0"}}, False)
@example(r("0", ["n" + "9" * 30]), True)
@example(r("0", "n[0-3]"), True)
def test_r_documents(doc, as_text):
    clean(_load, json.dumps(doc) if as_text else doc)
