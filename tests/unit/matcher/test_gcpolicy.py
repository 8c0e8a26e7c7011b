"""The cyclic collector beside a large matcher: settled by the commands that own their process
(:mod:`fluxinfra.matcher.gcpolicy`), never by building a :class:`Matcher`."""

from __future__ import annotations

import gc
import weakref
from pathlib import Path

import pytest
from matcher_testlib import build_cluster

from fluxinfra.matcher import Matcher, gcpolicy

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"


@pytest.fixture()
def collector():
    """The collector's settings as the test found them, restored after (and nothing frozen)."""
    before = gc.get_threshold()
    gc.unfreeze()
    yield before
    gc.set_threshold(*before)
    gc.unfreeze()


def test_building_a_matcher_on_a_large_graph_changes_nothing_process_wide(collector) -> None:
    """A library user who builds a Matcher on a graph past LARGE_GRAPH (a real one, not a
    lowered limit) finds the collector's thresholds and frozen set as they were."""
    graph = build_cluster(nodes=1, sockets=1, cores=gcpolicy.LARGE_GRAPH, gpus=0)
    assert len(graph) > gcpolicy.LARGE_GRAPH
    gc.set_threshold(700, 10, 10)
    Matcher(graph, policy="first")
    assert gc.get_threshold() == (700, 10, 10)
    assert gc.get_freeze_count() == 0
    assert gcpolicy.tune_for(Matcher(graph, policy="first"))  # the command's step does
    assert gc.get_freeze_count() > 0


def test_a_small_graph_is_left_in_the_collectors_sight(cluster, collector) -> None:
    gc.set_threshold(700, 10, 10)
    assert not gcpolicy.tune_for(Matcher(cluster, policy="first"))
    assert gc.get_threshold() == (700, 10, 10)
    assert gc.get_freeze_count() == 0


def test_a_large_graph_keeps_the_cyclic_collector_off_the_matchers_state(cluster, monkeypatch,
                                                                        collector):
    """Beside a graph past LARGE_GRAPH vertices, what exists is frozen and the collection
    thresholds of the older generations raised (never lowered), the young one only a little
    (its pause grows with it): at 16,384 nodes collections at CPython's defaults were 5-120
    ms pauses in random matches. The matcher's own arguments are untouched by it (``now``
    stays the caller's)."""
    monkeypatch.setattr(gcpolicy, "LARGE_GRAPH", 10)
    gc.set_threshold(700, 10, 10)
    m = Matcher(cluster, policy="first", now=7)
    assert gcpolicy.tune_for(m)
    assert m.now == 7
    assert gc.get_threshold() == (1_000, 1_000, 100)
    assert gc.get_freeze_count() > 0
    gc.set_threshold(50_000, 5_000, 200)
    gcpolicy.tune_for(Matcher(cluster, policy="first"))
    assert gc.get_threshold() == (50_000, 5_000, 200)  # higher already: left alone
    gc.set_threshold(0, 10, 10)
    gcpolicy.tune_for(Matcher(cluster, policy="first"))
    assert gc.get_threshold() == (0, 10, 10)  # automatic collection off: left off


class _Cycle:
    """An object in a reference cycle: only the cyclic collector frees it."""

    def __init__(self) -> None:
        self.me = self


def test_garbage_an_earlier_freeze_kept_is_collected_at_the_next(cluster, monkeypatch,
                                                                 collector):
    """Frozen objects are never collected: what was alive at one large matcher's freeze (the
    matcher a service replaces when the cluster changes, an in-process replay's earlier
    sessions) and is garbage in a cycle by the next must be collected then, or every freeze
    adds to what the process keeps for good (the conformance replays grew to 12 GB)."""
    monkeypatch.setattr(gcpolicy, "LARGE_GRAPH", 10)
    gcpolicy.tune_for(Matcher(cluster, policy="first"))  # (something frozen before, as in a
    old = _Cycle()                                       # process that already made one)
    gone = weakref.ref(old)
    gcpolicy.tune_for(Matcher(cluster, policy="first"))  # alive now: frozen
    del old
    gc.collect()
    assert gone() is not None  # frozen garbage: a collection does not see it
    gcpolicy.tune_for(Matcher(cluster, policy="first"))
    assert gone() is None


@pytest.mark.parametrize("command", ["match", "query"])
def test_a_command_settles_the_collector_beside_a_large_graph(command, monkeypatch, collector,
                                                              tmp_path, capsys) -> None:
    """The command owns its process: it freezes and raises the thresholds (the limit lowered
    so the example graph counts as large), with the collector still paused from the load."""
    from fluxinfra.cli import match, query

    monkeypatch.setattr(gcpolicy, "LARGE_GRAPH", 10)
    seen: list[bool] = []
    tune_for = gcpolicy.tune_for
    monkeypatch.setattr(gcpolicy, "tune_for",
                        lambda m: seen.append(gc.isenabled()) or tune_for(m))
    gc.set_threshold(700, 10, 10)
    graph, job = str(EXAMPLES / "graph.json"), str(EXAMPLES / "job.yaml")
    if command == "match":
        assert match.main([graph, job]) == 0
        assert '"status": "ALLOCATED"' in capsys.readouterr().out
    else:
        cmds = tmp_path / "cmds.in"
        cmds.write_text(f"match allocate {job}\nquit\n")
        assert query.main(["-L", graph, "-f", "jgf", "--commands", str(cmds)]) == 0
        assert "ALLOCATED" in capsys.readouterr().out
    assert seen == [False]
    assert gc.get_freeze_count() > 0
    # (query, a batch, then sets its own thresholds: query._batch_gc)
    assert gc.get_threshold() == {"match": (1_000, 1_000, 100),
                                  "query": (10_000, 100, 100)}[command]


def test_only_the_policy_module_and_the_commands_change_the_collector() -> None:
    """Library code never freezes, unfreezes or sets thresholds: those calls live in this
    policy module, for the commands to make, and in ``fluxinfra/cli`` (``collector_paused``
    only pauses, and restores what it found)."""
    import re

    package = Path(__file__).resolve().parents[3] / "fluxinfra"
    call = re.compile(r"\bgc\.(freeze|unfreeze|set_threshold)\(")
    offenders = [str(path.relative_to(package)) for path in sorted(package.rglob("*.py"))
                 if call.search(path.read_text(encoding="utf-8"))
                 and path.name != "gcpolicy.py" and path.parent.name != "cli"]
    assert offenders == []
