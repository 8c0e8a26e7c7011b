"""Jobspecs (RFC 14/25 YAML, JSON or dicts) through ``Jobspec.parse`` and ``Matcher.match``:
a match result, or a JobspecError / Busy / Unsatisfiable with a message."""

from __future__ import annotations

import glob
from pathlib import Path

from fuzzlib import EDGE_INTS, clean, fuzz, json_values, mutated, nested, scalars
from hypothesis import example
from hypothesis import strategies as st

from fluxinfra.matcher import Jobspec, Matcher, load_graph
from fluxinfra.matcher.jobspec import UINT_MAX
from fluxinfra.matcher.matcher import OPS

ROOT = Path(__file__).resolve().parents[2]
GRAPH = load_graph(str(ROOT / "examples" / "graph.json"))
SEEDS = [Path(p).read_text() for p in sorted(glob.glob(str(ROOT / "examples" / "*.yaml")))
         if "resources:" in Path(p).read_text()]
#: YAML that breaks readers: aliases, tags, dates, sets, NaN, flow openers, big numbers
SNIPPETS = ["&a ", "*a", "<<: *a\n", "!!set {a, b}", "!!binary aGk=", "2024-01-01",
            "2024-13-45", ".nan", ".inf", "-.inf", "[", "{", "]", "}", "- ", ": ", "\n  ", "\t",
            "~", "null", "yes", "'", '"', "1e400", "99999999999999999999", "0x1F", "!!python/none",
            "%YAML 1.1\n", "---\n", "...\n", "? ", "|\n", ">\n", "\x00", "\ufeff", "\u2028"]


def one_core(**extra) -> dict:
    return {"version": 1, "resources": [{"type": "core", "count": 1, **extra}]}


@st.composite
def counts(draw):
    """A count: an integer or {min, max, operator, operand}, often at the edges."""
    number = st.one_of(st.integers(-3, 40), st.sampled_from(EDGE_INTS + [UINT_MAX]), scalars())
    if draw(st.booleans()):
        return draw(number)
    out = {}
    for key in draw(st.lists(st.sampled_from(["min", "max", "operator", "operand", "x"]),
                             unique=True, max_size=5)):
        out[key] = draw(st.sampled_from(["+", "*", "^", "-", ""]) | number) \
            if key == "operator" else draw(number)
    return out


@st.composite
def resources(draw, depth: int = 0):
    """A resource list nesting up to a few levels, each field valid or hostile."""
    out = []
    for _ in range(draw(st.integers(1, 3))):
        r = {"type": draw(st.sampled_from(["node", "slot", "core", "socket", "gpu", "memory",
                                           "cluster", "rack", ""]) | scalars()),
             "count": draw(counts())}
        for key in draw(st.lists(st.sampled_from(["exclusive", "label", "unit", "id", "x"]),
                                 unique=True, max_size=3)):
            r[key] = draw(st.sampled_from([True, False, "true", "default", "task"]) | scalars())
        if r["type"] == "slot" and draw(st.booleans()):
            r["label"] = "task"
        if depth < 4 and draw(st.booleans()):
            r["with"] = draw(resources(depth + 1)) if draw(st.integers(0, 9)) else \
                draw(json_values(4))
        out.append(r)
    return out


@st.composite
def jobspecs(draw):
    doc = {"version": draw(st.just(1) | scalars()), "resources": draw(resources())}
    if draw(st.booleans()):
        doc["attributes"] = {"system": {"duration": draw(st.sampled_from(
            [0, 60, 3600.0, 0.1, -1, 1e30, float("nan"), float("inf"), 2**64]) | scalars())}}
        if draw(st.booleans()):
            doc["attributes"]["system"]["constraints"] = draw(st.one_of(
                st.fixed_dictionaries({"properties": st.lists(st.text(max_size=5) | scalars(),
                                                              max_size=3)}),
                st.fixed_dictionaries({"hostlist": st.lists(st.sampled_from(
                    ["node[0-3]", "node[0-99999999]", "n[", "x"]) | scalars(), max_size=2)}),
                st.fixed_dictionaries({"ranks": st.lists(st.sampled_from(
                    ["0-3", "1-", "99999999999999999999", "3-1"]) | scalars(), max_size=2)}),
                json_values(6)))
    if draw(st.booleans()):
        doc["tasks"] = draw(st.just([{"command": ["app"], "slot": "task",
                                      "count": {"per_slot": 1}}]) | json_values(6))
    for key in draw(st.lists(st.sampled_from(["version", "resources", "extra"]), max_size=1)):
        doc[key] = draw(json_values(6))
    return doc


def _match(doc, op: str):
    """A fresh matcher per input: what one request does, not what earlier ones left."""
    return Matcher(GRAPH, policy="first").match(doc, op=op)


@fuzz(jobspecs(), st.sampled_from(OPS))
@example({"version": 1, "resources": [{"type": "core", "count": {
    "min": 2, "max": 10**6, "operator": "^", "operand": 10**12}}]}, "allocate")
@example({"version": 1, "resources": [{"type": "core", "count": {
    "min": 2, "max": UINT_MAX, "operator": "^", "operand": UINT_MAX}}]}, "allocate")
@example({**one_core(), "attributes": {"system": {"duration": float("nan")}}}, "allocate")
@example({**one_core(), "attributes": {"system": {"duration": float("inf")}}}, "allocate")
@example({**one_core(), "attributes": {"system": {"duration": 10**400}}}, "allocate")
def test_jobspec_documents(doc, op):
    clean(_match, doc, op)


def test_a_jobspec_nested_past_the_recursion_limit_is_refused():
    """(Kept out of @example: hypothesis' printer recurses into what it is given.)"""
    doc = {"version": 1, "resources": nested(5000, {"type": "core", "count": 1})}
    assert "nested more than 100 levels" in str(clean(_match, doc, "allocate"))
    deep = {"type": "core", "count": 1}
    for _ in range(5000):
        deep = {"type": "core", "count": 1, "with": [deep]}
    assert "nested more than 100 levels" in str(clean(_match, {"version": 1,
                                                               "resources": [deep]}, "allocate"))


@fuzz(mutated(SEEDS, SNIPPETS) | st.text(max_size=300))
@example("version: 1\nresources: [{type: core, count: 1}]\n"
         "attributes: {system: {duration: .nan}}\n")
@example("a: &a [*a]\n")
@example("version: 1\nresources: " + "[" * 3000 + "]" * 3000 + "\n")
@example("version: 1\nresources: [{type: core, count: 99999999999999999999}]\n")
@example("version: 1\nresources: [{type: core, count: " + "9" * 5000 + "}]\n")
@example("version: 1\nresources: [{type: core, count: 1}]\nattributes: {system: {"
         "duration: 2024-01-01}}\n")
@example("l1: &l1 [a, a, a, a, a, a, a, a, a]\nl2: &l2 [*l1, *l1, *l1, *l1, *l1, *l1, *l1]\n"
         "l3: &l3 [*l2, *l2, *l2, *l2, *l2, *l2, *l2]\nl4: &l4 [*l3, *l3, *l3, *l3, *l3, *l3]\n"
         "l5: [*l4, *l4, *l4, *l4, *l4, *l4, *l4, *l4, *l4, *l4]\n")
def test_jobspec_text(text):
    clean(_match, text, "allocate")
    clean(Jobspec.parse, text)


@fuzz(st.binary(max_size=400) | mutated(SEEDS, SNIPPETS).map(
    lambda t: t.encode("utf-8", "surrogatepass")))
@example(bytes(range(200)))
@example(b"\xff\xfe\x00v\x00e\x00r")
def test_jobspec_bytes(data):
    clean(Jobspec.parse, data)
