"""The bed's pure parts (certificates, images, names, hollow objects, machine-state diffs) need
no Kubernetes binaries, so they are tested everywhere, CI included."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "scripts"))
