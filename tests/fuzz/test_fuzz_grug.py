"""GRUG GraphML recipes through ``load_graph(..., "grug")``: a graph that can be matched and
written, or a GraphError with a message (never a recipe that expands without bound)."""

from __future__ import annotations

from xml.sax.saxutils import escape

from fuzzlib import EDGE_INTS, clean, fuzz, mutated
from graphgen import usable
from hypothesis import example
from hypothesis import strategies as st

from fluxinfra.matcher import ResourceGraph, load_graph

HEAD = ('<?xml version="1.0" encoding="UTF-8"?>\n'
        '<graphml xmlns="http://graphml.graphdrawing.org/xmlns">\n'
        '<key id="root" for="node" attr.name="root" attr.type="int"><default>0</default></key>\n'
        + "".join(f'<key id="{k}" for="node" attr.name="{k}" attr.type="string"/>\n'
                  for k in ("type", "basename", "unit", "size", "subsystem"))
        + "".join(f'<key id="{k}" for="edge" attr.name="{k}" attr.type="string"/>\n'
                  for k in ("e_subsystem", "relation", "rrelation", "id_scope", "id_start",
                            "id_stride", "gen_method", "multi_scale", "as_tgt_subsystem",
                            "as_tgt_uplvl", "as_src_uplvl"))
        + '<graph id="g" edgedefault="directed">\n')
TAIL = "</graph>\n</graphml>\n"
KINDS = ["cluster", "rack", "node", "socket", "core", "gpu", "memory", "pdu"]


def small_int():
    return st.integers(-2, 6).map(str)


def hostile_text():
    return st.one_of(st.sampled_from([str(i) for i in EDGE_INTS] + [
        "", "x", "1e20", "1.5", "-0", " 7 ", "0x10", "9" * 30, "MULTIPLY", "ASSOCIATE_IN",
        "ASSOCIATE_BY_PATH_IN", "containment", "power", "&amp;", "&#0;"]),
        st.text(st.characters(exclude_categories=("Cc", "Cs")), max_size=8))


def sometimes(draw, usual, hostile):
    """Mostly ``usual``, one draw in ten ``hostile`` (most recipes then get as far as a
    graph)."""
    return draw(hostile if draw(st.integers(0, 9)) == 5 else usual)


def _data(key: str, value: str) -> str:
    return f'<data key="{key}">{escape(value)}</data>'


@st.composite
def recipes(draw) -> str:
    """A recipe: a tree of kinds (k0 the root) and a few more edges, fields mostly valid."""
    n = draw(st.integers(1, 6))
    names = [f"k{i}" for i in range(n)]
    parts = [HEAD]
    for i, name in enumerate(names):
        kind = draw(st.sampled_from(KINDS))
        fields = {"type": kind, "basename": kind}
        if i == 0:
            fields["root"] = "1"
        for key in draw(st.lists(st.sampled_from(["size", "unit", "subsystem", "root", "type",
                                                  "basename"]), unique=True, max_size=2)):
            fields[key] = sometimes(draw, small_int(), hostile_text())
        parts.append(f'<node id="{name}">' + "".join(_data(k, v) for k, v in fields.items())
                     + "</node>\n")
    pairs = [(f"k{draw(st.integers(0, i - 1))}", f"k{i}") for i in range(1, n)]
    pairs += [(draw(st.sampled_from(names)), draw(st.sampled_from(names + ["nowhere"])))
              for _ in range(draw(st.integers(0, 2)))]
    for j, (src, tgt) in enumerate(pairs):
        fields = {"multi_scale": sometimes(draw, st.integers(0, 4).map(str), hostile_text())}
        for key in draw(st.lists(st.sampled_from(
                ["id_scope", "id_start", "id_stride", "gen_method", "e_subsystem",
                 "as_tgt_subsystem", "as_tgt_uplvl", "as_src_uplvl"]), unique=True, max_size=3)):
            usual = (st.sampled_from(["MULTIPLY", "ASSOCIATE_IN", "ASSOCIATE_BY_PATH_IN"])
                     if key == "gen_method" else st.sampled_from(["containment", "power"])
                     if "subsystem" in key else small_int())
            fields[key] = sometimes(draw, usual, hostile_text())
        parts.append(f'<edge id="e{j}" source="{src}" target="{tgt}">'
                     + "".join(_data(k, v) for k, v in fields.items()) + "</edge>\n")
    parts.append(TAIL)
    return "".join(parts)


def _load(text):
    g = load_graph(text, "grug")
    assert isinstance(g, ResourceGraph) and g.finalized
    usable(g)
    return g


def _chain(scales: list[str]) -> str:
    nodes = "".join(f'<node id="k{i}">{_data("type", "node" if i else "cluster")}'
                    f'{_data("basename", f"b{i}")}{_data("root", "1" if i == 0 else "0")}</node>'
                    for i in range(len(scales) + 1))
    edges = "".join(f'<edge id="e{i}" source="k{i}" target="k{i + 1}">'
                    f'{_data("multi_scale", s)}</edge>' for i, s in enumerate(scales))
    return HEAD + nodes + edges + TAIL


@fuzz(recipes() | mutated([_chain(["2", "3"])], ["<", ">", "</node>", "<data key=", '"',
                                                  "&", "<!DOCTYPE x [", "]]>", "\x00"]))
@example(_chain(["100000000000000000000"]))
@example(_chain(["0", "999999999999999999"]))
@example(_chain(["4096", "4096", "4096"]))
@example(_chain(["-3"]))
@example(_chain(["1"] * 300))
@example(HEAD + "".join(f'<node id="k{i}">{_data("type", "cluster")}{_data("basename", "cluster")}'
                        f'{_data("root", "1") if i in (0, 2) else ""}</node>' for i in range(6))
         + "".join(f'<edge id="e{i}" source="k0" target="k{i + 1}">{_data("multi_scale", "0")}'
                   "</edge>" for i in range(4))
         + f'<edge id="e4" source="k2" target="k5">{_data("multi_scale", "1")}'
         f'{_data("id_scope", "1")}</edge>' + TAIL)
# a node whose child has no id (id_scope -1): R's writer keeps it as -1, as it always has
@example(HEAD + f'<node id="k0">{_data("type", "node")}{_data("basename", "node")}'
         f'{_data("root", "1")}</node><node id="k1">{_data("type", "cluster")}'
         f'{_data("basename", "cluster")}</node><edge id="e0" source="k0" target="k1">'
         f'{_data("id_scope", "-1")}</edge>' + TAIL)
def test_grug_recipes(text):
    clean(_load, text)
