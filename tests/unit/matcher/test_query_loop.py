"""``fluxinfra query``'s command loop shortcuts give the bytes the plain path gives.

The ``simple`` writer takes the matcher's held subtrees without listing them vertex by vertex
(and reuses the text of subtrees built alike); a session remembers a jobspec file's text until
the file changes.
"""

from __future__ import annotations

import io
import json
import os
import time

from fluxinfra.cli.query import build_parser, open_session
from fluxinfra.matcher import Matcher
from fluxinfra.matcher.recipe import graph_from_recipe, recipe_to_grug
from fluxinfra.matcher.writers import write_simple

RECIPE = {"cluster": "c", "racks": 1, "nodes_per_rack": 3, "sockets": 2, "cores_per_socket": 4,
          "gpus_per_socket": 1, "memory_per_socket": [2, 16]}


def jobspec(resources: list) -> dict:
    return {"version": 1, "resources": resources, "attributes": {"system": {"duration": 60}},
            "tasks": [{"command": ["app"], "slot": "task", "count": {"per_slot": 1}}]}


ONE_CORE = jobspec([{"type": "slot", "count": 1, "label": "task",
                     "with": [{"type": "core", "count": 1}]}])
WHOLE_NODE = jobspec([{"type": "node", "count": 1, "exclusive": True,
                       "with": [{"type": "slot", "count": 1, "label": "task",
                                 "with": [{"type": "core", "count": 1}]}]}])


def test_simple_text_of_held_subtrees_is_the_vertex_by_vertex_text():
    for policy, spec in (("firstnodex", ONE_CORE), ("first", WHOLE_NODE), ("first", ONE_CORE)):
        m = Matcher(graph_from_recipe(RECIPE), policy=policy)
        for _ in range(3):  # every node: the second and third reuse the first one's text
            r = m.match(spec)
            raw = r.raw_emitted
            assert write_simple(m.graph, raw) == write_simple(m.graph, r.emitted), policy


def test_reused_simple_text_checks_the_names_below():
    plain = Matcher(graph_from_recipe(RECIPE), policy="firstnodex")
    write_simple(plain.graph, plain.match(ONE_CORE).raw_emitted)  # remembered
    g = graph_from_recipe(RECIPE)
    for v, name in enumerate(g.name):
        if name == "core1":  # every node's: the same depths and sizes, other names
            g.name[v] = "renamed7"
    m = Matcher(g, policy="firstnodex")
    r = m.match(ONE_CORE)
    text = write_simple(g, r.raw_emitted)
    assert "renamed7[1:x]" in text
    assert text == write_simple(g, r.emitted)


def session(tmp_path, policy: str = "firstnodex"):
    grug = tmp_path / "m.graphml"
    grug.write_text(recipe_to_grug(RECIPE))
    opts = build_parser().parse_args(["-L", str(grug), "-f", "grug", "-P", policy])
    out = io.StringIO()
    return open_session(opts, out, err=io.StringIO(), stdout=io.StringIO()), out


def test_a_jobspec_file_changed_during_the_session_is_read_again(tmp_path):
    s, out = session(tmp_path)
    spec = tmp_path / "job.json"
    spec.write_text(json.dumps(WHOLE_NODE))
    old = time.time() - 3600
    os.utime(spec, (old, old))  # settled: the session remembers its text
    s.run([f"match allocate {spec}\n"] * 2)
    assert out.getvalue().count("RESOURCES=ALLOCATED") == 2
    two = jobspec([{"type": "node", "count": 2, "exclusive": True,
                    "with": [{"type": "slot", "count": 1, "label": "task",
                              "with": [{"type": "core", "count": 1}]}]}])
    spec.write_text(json.dumps(two))  # 3 nodes, 2 held: two more do not fit
    s.run([f"match allocate {spec}\n"])
    assert out.getvalue().endswith("INFO: No matching resources found\nINFO: JOBID=3\n"
                                   "INFO: =============================\n")
    spec.unlink()
    s.run([f"match allocate {spec}\n"])
    assert s.err.getvalue() == f"ERROR: can't open {spec}\n"


def test_a_session_builds_its_matcher_with_the_collector_paused(tmp_path, monkeypatch):
    """The collector stays off from the load to the matcher (a large graph's matcher freezes
    what is alive first, so nothing walks the load's objects) and is on again after."""
    import gc

    from fluxinfra.cli import query

    seen = []

    class Spy(Matcher):
        def __init__(self, *args, **kwargs):
            seen.append(gc.isenabled())
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(query, "Matcher", Spy)
    assert gc.isenabled()
    s, _ = session(tmp_path)
    assert seen == [False] and gc.isenabled()
    assert isinstance(s.m, Spy)
