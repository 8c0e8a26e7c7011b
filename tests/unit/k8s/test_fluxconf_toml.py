"""The broker configs' TOML, now written by tomli_w, reads as it did when fluxinfra wrote it by
hand: fixtures/broker-toml-hand-written.json holds the hand writer's text of each config below
(captured before the switch), and both parse to the same document."""

from __future__ import annotations

import importlib.util
import json
import tomllib
from pathlib import Path

import pytest

from fluxinfra.k8s.fluxconf import dump_toml
from fluxinfra.k8s.minicluster import MiniClusterArgs, broker_config

HERE = Path(__file__).parent
BEFORE = json.loads((HERE / "fixtures" / "broker-toml-hand-written.json").read_text())
MINICLUSTERS = {"mini0": {}, "mini1": {"host_network": True},
                "mini2": {"size": 3, "max_size": 7, "fanout": 3}}
RANKS = {"brokerPort": 8050, "hostPrefix": "flux-", "size": 4, "epoch": 3, "topology": "kary:2",
         "slots": {"0": {"node": "a", "address": "10.0.0.1"},
                   "1": {"node": "b", "address": "fd00::2"}}}


def _node_watch():
    path = HERE.parents[2] / "fluxinfra" / "templates" / "node-watch.py"
    spec = importlib.util.spec_from_file_location("node_watch_toml", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _comments(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("#")]


@pytest.mark.parametrize("case", sorted(MINICLUSTERS))
def test_a_minicluster_config_reads_as_the_hand_written_one(case) -> None:
    now = broker_config(MiniClusterArgs(name="mc", **MINICLUSTERS[case]))
    assert tomllib.loads(now) == tomllib.loads(BEFORE[case])
    assert _comments(now) == _comments(BEFORE[case])


@pytest.mark.parametrize("rank", [0, 2])
def test_a_node_watch_bootstrap_config_reads_as_the_hand_written_one(rank) -> None:
    now = _node_watch().bootstrap_toml(RANKS, rank, {"etcDir": "/etc/flux"},
                                       {"epoch": 3, "k": 'v"x'})
    assert tomllib.loads(now) == tomllib.loads(BEFORE[f"nw{rank}"])
    assert _comments(now) == _comments(BEFORE[f"nw{rank}"])


def test_keys_and_strings_toml_must_quote_survive() -> None:
    doc = {"t": {"a b": 'é\n"', "l": [1, 2], "e": [], "one": [{"h": "c"}],
                 "d": {"x": [{"h": "a"}, {"h": "b"}]}}}
    assert tomllib.loads(dump_toml(doc, header="h1\nh2")) == doc
