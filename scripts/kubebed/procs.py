"""Processes a bed starts: launched detached with a log file, remembered by pid *and* start time.

A pid alone can be reused after a crash or a reboot; the start time (field 22 of
``/proc/<pid>/stat``) makes ``(pid, start)`` name one process for the machine's uptime, so
``stop`` never signals a stranger. Nothing here matches processes by name.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from dataclasses import asdict, dataclass
from pathlib import Path

__all__ = ["Proc", "launch", "run", "start_time", "wait_until"]


class CommandError(Exception):
    """A command the bed ran failed; the message carries its output."""


def run(argv: list[str], *, check: bool = True, timeout: float = 120,
        input_text: str | None = None, env: dict[str, str] | None = None
        ) -> subprocess.CompletedProcess[str]:
    """Run a short command; on failure raise with its stderr, so a red run explains itself."""
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                              input=input_text, env=env, check=False)
    except FileNotFoundError:
        raise CommandError(f"{argv[0]}: not found (is its package installed?)") from None
    except subprocess.TimeoutExpired:
        raise CommandError(f"`{' '.join(argv)}` did not finish in {timeout:.0f}s") from None
    if check and proc.returncode != 0:
        raise CommandError(f"`{' '.join(argv)}` exited {proc.returncode}: "
                           f"{(proc.stderr or proc.stdout).strip()[-2000:]}")
    return proc


def start_time(pid: int) -> int | None:
    """The process's start time in clock ticks since boot, or None when it is gone (or a
    zombie)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2:].split()
    if fields[0] == "Z":
        return None
    return int(fields[19])


@dataclass
class Proc:
    """One started process."""

    name: str
    pid: int
    start: int
    log: str

    def alive(self) -> bool:
        self._reap()
        return start_time(self.pid) == self.start

    def _reap(self) -> None:
        # When we are the parent (pytest, not the CLI), collect the exit status so no zombie
        # is left; for other processes this is a harmless ECHILD.
        with contextlib.suppress(ChildProcessError, OSError):
            os.waitpid(self.pid, os.WNOHANG)

    def signal(self, sig: int) -> bool:
        if not self.alive():
            return False
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, sig)
        return True

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM, then SIGKILL after ``timeout`` seconds; returns when the process is gone."""
        if not self.signal(signal.SIGTERM):
            return
        if wait_until(lambda: not self.alive(), timeout):
            return
        self.signal(signal.SIGKILL)
        if not wait_until(lambda: not self.alive(), 10):
            raise CommandError(f"{self.name} (pid {self.pid}) survived SIGKILL")

    def log_tail(self, lines: int = 30) -> str:
        try:
            text = Path(self.log).read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def to_json(self) -> dict[str, object]:
        return asdict(self)


def launch(name: str, argv: list[str], log_dir: Path, *, cwd: Path | None = None,
           env: dict[str, str] | None = None) -> Proc:
    """Start ``argv`` in its own session (so it outlives a CLI that started it and ignores the
    terminal's ^C), stdout and stderr to ``log_dir/<name>.log``."""
    log_dir.mkdir(parents=True, exist_ok=True)
    log = log_dir / f"{name.replace('/', '.')}.log"
    with open(log, "ab") as out:
        try:
            child = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out,
                                     stderr=subprocess.STDOUT, cwd=cwd, env=env,
                                     start_new_session=True)
        except FileNotFoundError:
            raise CommandError(f"{name}: {argv[0]} not found") from None
    start = None
    for _ in range(100):
        start = start_time(child.pid)
        if start is not None:
            break
        if child.poll() is not None:
            break
        time.sleep(0.01)
    if start is None:
        raise CommandError(f"{name} exited at once (status {child.poll()}): "
                           f"{log.read_text(errors='replace')[-2000:]}")
    return Proc(name, child.pid, start, str(log))


def wait_until(predicate, timeout: float, interval: float = 0.05) -> bool:
    """Poll ``predicate`` until it is true (True) or ``timeout`` seconds pass (False). The
    interval grows to 0.5 s, so short waits are quick and long ones cheap."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            if predicate():
                return True
        except OSError:
            pass
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval)
        interval = min(interval * 1.5, 0.5)
