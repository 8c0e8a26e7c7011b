"""``python -m fluxinfra.scheduler`` = ``fluxinfra scheduler``."""

import sys

from fluxinfra.scheduler.main import run

sys.exit(run())
