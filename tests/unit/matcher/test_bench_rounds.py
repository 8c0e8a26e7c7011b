"""The matcher benchmark's pooling of alternating rounds (``benchmarks/matcher.py --rounds``):
each side's samples are concatenated over the rounds, and the speedup compares our pooled
"same first n" prefixes (n = what Fluxion took in the paired round) with Fluxion's pooled
samples."""

from __future__ import annotations

import importlib.util
from pathlib import Path

BENCH = Path(__file__).resolve().parents[3] / "benchmarks" / "matcher.py"


def load_bench():
    spec = importlib.util.spec_from_file_location("fluxinfra_bench_matcher", BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def ours(fill: list[int], steady: list[int], full: bool = False) -> dict:
    return {"size": 8, "vertices": 10, "build_s": 1.0, "build_rss_mib": 1.0, "rss_mib": 2.0,
            "policies": {"low": {"init_s": 0.1, "1core": {
                "fill": fill, "steady": steady, "cancel": [1], "full": full}}}}


def fluxion(fill: list[int], steady: list[int]) -> dict:
    return {"size": 8, "load_s": 1.0, "load_rss_mib": 5.0,
            "policies": {"low": {"wall_s": 1.0, "failed": 0,
                                 "1core": {"fill": fill, "steady": steady}}}}


def test_rounds_pool_each_side_and_pair_the_prefixes() -> None:
    bench = load_bench()
    a, b = ours([1, 2, 3, 4], [5]), ours([10, 20, 30, 40], [50], full=True)
    fa, fb = fluxion([100, 200], [300]), fluxion([1000], [3000])
    pooled = bench.pool_rounds([a, b], [fa, fb])
    data = pooled["policies"]["low"]["1core"]
    assert data["fill"] == [1, 2, 3, 4, 10, 20, 30, 40]
    assert data["steady"] == [5, 50] and data["cancel"] == [1, 1] and data["full"]
    assert data["fill_same"] == [1, 2, 10]  # first 2 of round 1, first 1 of round 2
    assert pooled["rounds"] == 2 and a["policies"]["low"]["1core"]["fill"] == [1, 2, 3, 4]
    rq = bench.pool_rq_rounds([fa, fb])
    assert rq["policies"]["low"]["1core"]["fill"] == [100, 200, 1000]
    table = bench.match_table([pooled], {8: rq})
    # the table comes in parts ~100 columns wide, the key columns repeated in each
    row = " ".join(line for line in table.splitlines() if " low " in line)
    # fluxion median 200 ns vs ours over [1, 2, 10]: 2 ns -> 100x; steady 1650 / 27.5 -> 60x
    assert "100.0x" in row and "60.0x" in row


def test_one_round_without_fluxion_is_left_as_it_ran() -> None:
    bench = load_bench()
    a = ours([1, 2], [3])
    assert bench.pool_rounds([a], []) is a
