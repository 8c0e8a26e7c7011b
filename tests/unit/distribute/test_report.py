"""What a user sees: a progress bar on a terminal, one line per rank otherwise, one summary."""

from __future__ import annotations

import io

from fluxinfra.distribute.flux import Instance
from fluxinfra.distribute.report import TextListener, human_size, rank_line, summary
from fluxinfra.distribute.run import RankResult, Report
from fluxinfra.distribute.topology import Tree


def report(**kw) -> Report:
    base = dict(source="/data/model.bin", kind="file", name="fluxinfra-x", digest="ab" * 32,
                bytes=3 << 30, files=1, topo="kary:2", depth=2, targets=[0, 1, 2, 3],
                lead_copies=2, mmap=True, results={}, seconds={"total": 12.5})
    base.update(kw)
    return Report(**base)


INSTANCE = Instance(size=4, rank=0, topo="kary:2", tree=Tree.from_spec("kary:2", 4),
                    hosts={r: f"node{r}" for r in range(4)}, states={r: "full" for r in range(4)})


def test_sizes_read_like_sizes():
    assert [human_size(n) for n in (5, 2048, 3 << 30)] == ["5 B", "2.0 KiB", "3.0 GiB"]


def test_rank_lines_say_what_happened():
    ok = RankResult(1, "node1", "ok", seconds={"extract": 4.2, "verify": 1.0},
                    imported=["app.tar"])
    assert rank_line(ok) == "rank 1 (node1): ok (extract 4.2 s, verify 1.0 s), imported app.tar"
    lost = RankResult(3, "node3", "lost", "exec", "its broker went away")
    assert rank_line(lost) == "rank 3 (node3): lost at exec: its broker went away"
    down = RankResult(2, "node2", "down", "plan", "broker offline")
    assert rank_line(down) == "rank 2 (node2): down at plan: broker offline"


def test_summary_names_what_is_left_and_how_to_finish():
    done = {r: RankResult(r, f"node{r}", "ok") for r in range(4)}
    assert summary(report(results=done)) == (
        "4 of 4 ranks have /data/model.bin (3.0 GiB, sha256 verified on each) in 12.5 s")
    done[3] = RankResult(3, "node3", "lost", "exec", "gone")
    text = summary(report(results=done, state_file="/s/x.json"))
    assert text.startswith("3 of 4 ranks ok; not done: 3 (node3) lost.")
    assert text.endswith("run the same command with --resume (state: /s/x.json).")


def test_without_a_terminal_there_is_one_line_per_rank_and_no_bar():
    out = io.StringIO()
    listener = TextListener(out, tty=False)
    listener.planned(report(), INSTANCE)
    listener.progress(1, 1 << 30, 3 << 30)
    listener.rank_done(RankResult(1, "node1", "ok"))
    lines = out.getvalue().splitlines()
    assert lines[0] == ("distributing /data/model.bin (file, 3.0 GiB in 1 file, sha256 "
                        "abababababab...) to 4 rank(s) on node[0-3]")
    assert lines[1] == "tree kary:2, depth 2: the lead sends 2 copies (6.0 GiB)"
    assert lines[2] == "rank 1 (node1): ok"
    assert "\r" not in out.getvalue()


def test_on_a_terminal_a_bar_is_redrawn_in_place_and_cleared():
    out = io.StringIO()
    listener = TextListener(out, tty=True)
    listener.planned(report(), INSTANCE)
    listener.progress(0, 3 << 30, 3 << 30)
    bar = out.getvalue()[out.getvalue().rindex("\r"):]
    assert bar == "\r\033[K[#######.......................]  25% 0/4 ranks done, 0 s"
    listener.progress(1, 3 << 29, 3 << 30)  # within 0.2 s of the last draw: not redrawn
    assert out.getvalue().count("ranks done") == 1
    listener.rank_done(RankResult(0, "node0", "ok"))
    assert "\r\033[Krank 0 (node0): ok\n" in out.getvalue()
    assert out.getvalue().endswith("[###########...................]  38% 1/4 ranks done, 0 s")
    listener.close()
    assert out.getvalue().endswith("\r\033[K")


def test_a_failed_rank_whose_broker_then_went_away_is_reported_lost_once():
    """The extract below a dying broker fails and its report may come through before flux exec
    says the rank is unreachable: the loss of the tree is what the rank is reported for."""
    from fluxinfra.distribute.agent import EVENT_PREFIX
    from fluxinfra.distribute.run import Collector

    out = io.StringIO()
    listener = TextListener(out)
    collector = Collector(INSTANCE, [1, 3], listener)
    failed = '{"event": "done", "status": "failed", "stage": "extract", "reason": "reset"}'
    collector.line("err", f"3: {EVENT_PREFIX}{failed}\n")
    collector.line("err", "flux-exec: Error: rank 1: flux: No route to host\n")
    collector.line("err", "flux-exec: Error: rank 3: flux: No route to host\n")
    results = collector.results(120, 0)
    assert (results[1].status, results[3].status) == ("lost", "lost")
    assert "cut off when rank 1 (node1) above it went away" in results[3].reason
    assert listener.finished == 2, "each rank counted once"
    assert "rank 3 (node3) failed at extract (reset), then its broker was unreachable" in (
        out.getvalue())
