"""The broker tree: computed like flux-core's overlay, checked against a real one where built."""

from __future__ import annotations

import json
import subprocess

import pytest

from fluxinfra.distribute.topology import TopologyError, Tree, parse_topo


def test_kary_parents_follow_flux():
    assert Tree.from_spec("kary:2", 8).parents == (-1, 0, 0, 1, 1, 2, 2, 3)
    assert Tree.from_spec("kary:3", 5).parents == (-1, 0, 0, 0, 1)
    assert Tree.from_spec("kary:1", 4).parents == (-1, 0, 1, 2)
    assert Tree.from_spec("kary:0", 4).parents == (-1, 0, 0, 0)  # flat
    assert Tree.from_spec("custom", 3).parents == (-1, 0, 0)


def test_binomial_and_mincrit():
    assert Tree.from_spec("binomial", 8).parents == (-1, 0, 0, 2, 0, 4, 4, 6)
    assert Tree.from_spec("mincrit:2", 7).parents == (-1, 0, 0, 1, 2, 1, 2)
    assert Tree.from_spec("mincrit", 6).parents == (-1, 0, 0, 0, 0, 0)  # small: flat


@pytest.mark.parametrize(("spec", "message"), [
    ("star", "unknown scheme 'star'"),
    ("kary", "kary needs a fanout"),
    ("kary:x", "takes an integer >= 0, got 'x'"),
    ("binomial:3", "binomial takes no argument"),
])
def test_bad_topologies_say_what_is_accepted(spec, message):
    with pytest.raises(TopologyError, match=message):
        parse_topo(spec)


def test_copies_sent_count_children_that_lead_to_targets():
    tree = Tree.from_spec("kary:2", 8)
    assert tree.copies_sent(range(8)) == {0: 2, 1: 2, 2: 2, 3: 1, 4: 0, 5: 0, 6: 0, 7: 0}
    assert tree.copies_sent([7])[0] == 1 and tree.copies_sent([7])[3] == 1
    flat = Tree.from_spec("kary:0", 8)
    assert flat.copies_sent(range(8))[0] == 7  # a flat tree is the one-server case


def test_cut_off_and_json_round_trip():
    tree = Tree.from_spec("kary:2", 8)
    assert tree.cut_off([1]) == {3, 4, 7}
    assert tree.depth() == 3 and tree.level(7) == 3 and tree.ancestors(7) == [3, 1, 0]
    assert Tree.from_json(tree.to_json()) == tree


@pytest.mark.parametrize("bad", [
    {"rank": 0, "size": 2, "children": []},
    {"rank": 0, "size": 2, "children": [{"rank": 0, "size": 1, "children": []}]},
    {"rank": 0},
])
def test_inconsistent_overlay_answers_are_refused(bad):
    with pytest.raises(TopologyError):
        Tree.from_json(bad)


@pytest.mark.needs_flux
@pytest.mark.slow
@pytest.mark.parametrize(("spec", "size"), [("kary:2", 8), ("kary:3", 7), ("binomial", 8),
                                            ("mincrit:2", 7), ("kary:8", 8)])
def test_tree_matches_a_real_overlay(real_flux, spec, size):
    snippet = ("import json, flux; print(json.dumps(flux.Flux().rpc('overlay.topology', "
               "{'rank': 0}).get()))")
    proc = subprocess.run([real_flux, "start", f"-Stbon.topo={spec}", f"--test-size={size}",
                           real_flux, "python", "-c", snippet], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    live = Tree.from_json(json.loads(proc.stdout.strip().splitlines()[-1]))
    assert live == Tree.from_spec(spec, size)
