"""``python -m fluxinfra.scheduler`` = ``fluxinfra scheduler``.

A program, not a module of the scheduler package: nothing imports it, and it runs the same
process as the command, queue included (:mod:`fluxinfra.cli.scheduler` wires the scheduler
and the queue, which the scheduler package never imports).
"""

import sys

from fluxinfra.cli.scheduler import run

sys.exit(run())
