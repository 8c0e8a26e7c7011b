"""``fluxinfra queue``: see :mod:`fluxinfra.queue.cli`."""

from fluxinfra.queue.cli import main

__all__ = ["main"]
