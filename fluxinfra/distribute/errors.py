"""Errors of ``fluxinfra distribute``: input a user can fix, and Flux commands that failed."""

from __future__ import annotations

from collections.abc import Sequence

from fluxinfra.errors import FluxinfraError

__all__ = ["DistributeError", "FluxCommandError", "last_line"]


def last_line(text: str) -> str:
    """The last non-blank line a command printed (where its error message is)."""
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    return lines[-1] if lines else ""


class DistributeError(FluxinfraError):
    """Bad input or an instance that cannot take the distribution; one line naming the fix."""


class FluxCommandError(DistributeError):
    """A ``flux`` subcommand exited non-zero; ``message`` is the last line it printed."""

    def __init__(self, args: Sequence[str], returncode: int, stderr: str):
        self.args_ = list(args)
        self.returncode = returncode
        self.message = last_line(stderr) or f"exit {returncode}"
        super().__init__(f"flux {' '.join(self.args_[:2])}: {self.message}")
