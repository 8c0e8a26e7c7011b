"""How a distribution shows itself: a progress bar on a terminal, one line per rank otherwise."""

from __future__ import annotations

import sys
import time
from typing import TextIO

from fluxinfra.distribute.flux import Instance
from fluxinfra.distribute.run import Listener, RankResult, Report
from fluxinfra.hostlist import encode as hostlist

__all__ = ["TextListener", "summary", "human_size"]


def human_size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def rank_line(result: RankResult) -> str:
    head = f"rank {result.rank} ({result.host}): {result.status}"
    if result.ok:
        parts = [f"{k} {v:.1f} s" for k, v in result.seconds.items()]
        extra = f" ({', '.join(parts)})" if parts else ""
        if result.imported:
            extra += f", imported {', '.join(result.imported)}"
        if result.status == "earlier":
            extra = f" ({result.reason})"
        return head + extra
    where = f" at {result.stage}" if result.stage and result.stage != result.status else ""
    return f"{head}{where}: {result.reason}"


def summary(report: Report) -> str:
    ok = [r for r in report.results.values() if r.ok]
    total = len(report.results)
    took = report.seconds.get("total", 0.0)
    if report.ok:
        return (f"{len(ok)} of {total} ranks have {report.source} ({human_size(report.bytes)}, "
                f"sha256 verified on each) in {took:.1f} s")
    failed = ", ".join(f"{r.rank} ({r.host}) {r.status}" for r in report.failed())
    text = f"{len(ok)} of {total} ranks ok; not done: {failed}."
    if report.interrupted:
        text += " Interrupted."
    if report.state_file:
        text += (" Once those brokers are back (flux overlay status), run the same command "
                 f"with --resume (state: {report.state_file}).")
    return text


class TextListener(Listener):
    """Per-rank lines as ranks finish; on a terminal also a progress bar, redrawn in place."""

    def __init__(self, out: TextIO = sys.stderr, tty: bool | None = None):
        self.out = out
        self.tty = out.isatty() if tty is None else tty
        self.done: dict[int, int] = {}
        self.total = 0
        self.live = 0
        self.finished = 0
        self.started = time.monotonic()
        self.last_draw = 0.0
        self.bar_visible = False

    def planned(self, report: Report, instance: Instance) -> None:
        self.total = report.bytes
        live = [r for r in report.targets if r not in report.results]
        self.live = len(live)
        names = hostlist([instance.host(r) for r in report.targets]) if report.targets else "-"
        self._print(f"distributing {report.source} ({report.kind}, {human_size(report.bytes)} in "
                    f"{report.files} file{'s' if report.files != 1 else ''}, sha256 "
                    f"{report.digest[:12]}...) to {len(report.targets)} rank(s) on {names}")
        self._print(f"tree {report.topo}, depth {report.depth}: the lead sends "
                    f"{report.lead_copies} cop{'y' if report.lead_copies == 1 else 'ies'} "
                    f"({human_size(report.lead_copies * report.bytes)})")
        for result in report.results.values():
            self._print(rank_line(result))

    def progress(self, rank: int, done: int, total: int) -> None:
        self.done[rank] = done
        self._bar()

    def rank_done(self, result: RankResult) -> None:
        self.finished += 1
        if result.ok:
            self.done[result.rank] = self.total
        self._print(rank_line(result))
        self._bar(force=True)

    def imported(self, result: RankResult) -> None:
        self._print(rank_line(result))

    def note(self, text: str) -> None:
        self._print(f"note: {text}")

    def close(self) -> None:
        if self.bar_visible:
            self.out.write("\r\033[K")
            self.out.flush()
            self.bar_visible = False

    # -- drawing -------------------------------------------------------------------------------
    def _print(self, text: str) -> None:
        if self.bar_visible:
            self.out.write("\r\033[K")
            self.bar_visible = False
        self.out.write(text + "\n")
        self.out.flush()

    def _bar(self, force: bool = False) -> None:
        now = time.monotonic()
        if not self.tty or not self.live or (not force and now - self.last_draw < 0.2):
            return
        whole = self.total * self.live or 1
        fraction = min(sum(self.done.values()) / whole, 1.0)
        width = 30
        filled = int(fraction * width)
        elapsed = now - self.started
        rate = f", {human_size(sum(self.done.values()) / elapsed)}/s" if elapsed >= 1 else ""
        self.out.write(f"\r\033[K[{'#' * filled}{'.' * (width - filled)}] {fraction:4.0%} "
                       f"{self.finished}/{self.live} ranks done{rate}, {elapsed:.0f} s")
        self.out.flush()
        self.last_draw = now
        self.bar_visible = True
