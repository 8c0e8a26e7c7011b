"""TEST DOUBLE of the ``flux`` Python package for ``flux python`` under tests/unit/distribute's
flux double: ``flux.Flux().rpc("overlay.topology", {"rank": 0}).get()`` answers the instance's
tree in flux-core 0.88's shape; every other RPC fails as an unknown service does (ENOSYS)."""

import errno
import json
import os
import sys
from pathlib import Path

_REPO = Path(__file__).resolve().parents[5]
sys.path.insert(0, str(_REPO))

from fluxinfra.distribute.topology import Tree  # noqa: E402


class _Future:
    def __init__(self, value):
        self.value = value

    def get(self):
        return self.value


class Flux:
    def __init__(self, url=None):
        state = Path(os.environ["FLUX_DOUBLE_DIR"]) / "instance.json"
        self.instance = json.loads(state.read_text())

    def rpc(self, topic, payload=None, nodeid=0, flags=0):
        if topic != "overlay.topology":
            raise OSError(errno.ENOSYS, f"{topic}: Function not implemented")
        tree = Tree.from_spec(self.instance["topo"], self.instance["size"])
        return _Future(tree.to_json((payload or {}).get("rank", 0)))
