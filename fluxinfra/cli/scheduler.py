"""``fluxinfra scheduler``: see :mod:`fluxinfra.scheduler.main` and docs/scheduler.md."""

from fluxinfra.scheduler.main import main, parser

__all__ = ["main", "parser"]
