"""Every command that loads a graph and builds a matcher keeps the cyclic collector paused
from the load to the matcher (``fluxinfra query`` too: tests/unit/matcher/test_query_loop.py).

A large graph's matcher freezes what is alive; a young collection between the load and the
freeze walks every object the load made (about 0.18 s of a ``fluxinfra match`` at 16,384
nodes, measured with ``gc.callbacks``). Each test puts a spy in the command's place of
``Matcher`` that records whether the collector was on when it was called, then stops the
command (so ``service`` never starts serving), and checks the collector is on again after.
"""

from __future__ import annotations

import gc
from pathlib import Path

import pytest

import fluxinfra.matcher
from fluxinfra.cli import draw, match, service

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
GRAPH = str(EXAMPLES / "graph.json")
JOB = str(EXAMPLES / "job.yaml")


class _Stop(Exception):
    """Raised by the spy once it has seen how it was called."""


def _spy(seen: list[bool]):
    class Spy:
        def __init__(self, graph, *args, **kwargs):
            seen.append(gc.isenabled())
            assert len(graph) > 0  # the graph was loaded before the matcher, not after
            raise _Stop

    return Spy


@pytest.mark.parametrize("command, argv, where", [
    (match.main, [GRAPH, JOB], (match, "Matcher")),
    (draw.main, [GRAPH, JOB, "-o", "out.svg"], (fluxinfra.matcher, "Matcher")),
    (service.main, ["--graph", GRAPH, "--port", "0"], (fluxinfra.matcher, "Matcher")),
], ids=["match", "draw", "service"])
def test_the_matcher_is_built_with_the_collector_paused(command, argv, where, monkeypatch,
                                                        tmp_path):
    monkeypatch.chdir(tmp_path)
    seen: list[bool] = []
    monkeypatch.setattr(*where, _spy(seen))
    assert gc.isenabled()
    with pytest.raises(_Stop):
        command(argv)
    assert seen == [False]
    assert gc.isenabled()  # restored, though the build failed


def test_a_command_leaves_the_collector_off_when_its_caller_had_turned_it_off(monkeypatch,
                                                                              tmp_path):
    monkeypatch.chdir(tmp_path)
    seen: list[bool] = []
    monkeypatch.setattr(match, "Matcher", _spy(seen))
    gc.disable()
    try:
        with pytest.raises(_Stop):
            match.main([GRAPH, JOB])
        assert not gc.isenabled()
    finally:
        gc.enable()
    assert seen == [False]
