import sys

from fluxinfra.cli import main

sys.exit(main())
