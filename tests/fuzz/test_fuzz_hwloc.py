"""hwloc XML topologies through ``load_graph(..., "hwloc")``: a graph that can be matched and
written, or a GraphError with a message."""

from __future__ import annotations

from xml.sax.saxutils import quoteattr

from fuzzlib import EDGE_INTS, clean, fuzz, mutated
from graphgen import usable
from hypothesis import example
from hypothesis import strategies as st

from fluxinfra.matcher import ResourceGraph, load_graph

OBJECTS = ["Machine", "Package", "NUMANode", "Group", "Core", "PU", "Cache", "L1Cache",
           "L2Cache", "L3Cache", "OSDev", "PCIDev", "Bridge", "Misc"]
ATTRS = ["cache_size", "depth", "osdev_type", "name", "os_index"]


def attr_value():
    return st.one_of(st.integers(-1, 6).map(str), st.sampled_from(
        [str(i) for i in EDGE_INTS] + ["", "x", "--5", "1.5", " 3", "rsmi0", "card1",
                                       "9" * 40, "gpu" + "7" * 30]),
        st.text(st.characters(exclude_categories=("Cc", "Cs")), max_size=6))


@st.composite
def objects(draw, depth: int = 0) -> str:
    kind = draw(st.sampled_from(OBJECTS))
    attrs = "".join(f" {k}={quoteattr(draw(attr_value()))}"
                    for k in draw(st.lists(st.sampled_from(ATTRS), unique=True, max_size=3)))
    infos = ""
    if kind == "Machine" and draw(st.booleans()):
        infos = f'<info name="HostName" value={quoteattr(draw(attr_value()))}/>'
    kids = "".join(draw(objects(depth + 1)) for _ in range(draw(st.integers(0, 3)))) \
        if depth < 4 else ""
    return f'<object type="{kind}"{attrs}>{infos}{kids}</object>'


def topology(body: str) -> str:
    return f'<?xml version="1.0"?><topology>{body}</topology>'


def _load(text, allowlist):
    g = load_graph(text, "hwloc", allowlist=allowlist)
    assert isinstance(g, ResourceGraph) and g.finalized
    usable(g)
    return g


SEED = topology('<object type="Machine"><info name="HostName" value="node7"/>'
                '<object type="Package"><object type="Core"><object type="PU"/></object>'
                '<object type="OSDev" osdev_type="1" name="rsmi0"/></object></object>')


@fuzz(objects().map(topology) | mutated([SEED], ["<", ">", "</object>", '"', "&", "<object ",
                                                  "<!DOCTYPE t [<!ENTITY a 'b'>]>", "&a;"]),
       st.none() | st.sampled_from(["node,core", "core", "socket,pu,gpu", "L2cache", "", ","]))
@example(topology('<object type="Cache" cache_size="x"/>'), None)
@example(topology('<object type="OSDev" osdev_type="x"/>'), None)
@example(topology('<object type="OSDev" osdev_type="5" name="gpu' + "9" * 30 + '"/>'), None)
@example(topology('<object type="Machine"><info name="HostName" value="n' + "9" * 30
                  + '"/></object>'), None)
@example(topology('<object type="Core">' * 3000 + "</object>" * 3000), None)
def test_hwloc_topologies(text, allowlist):
    clean(_load, text, allowlist)
