"""TEST DOUBLE of the ``flux`` Python package for ``flux python`` under tests/unit/distribute's
flux double. Two RPCs, in flux-core 0.88's shapes: ``overlay.topology`` (``{"rank": 0}``: the
instance's tree) and ``rexec.kill`` (``{"pid": P, "signum": S}`` to ``nodeid`` RANK: signals the
process group of a process the double's ``flux exec`` started on that rank and still runs; any other
pid is refused with ESRCH "pid P does not belong to any subprocess", a rank whose broker is lost
with EHOSTUNREACH). Every other RPC fails as an unknown service does (ENOSYS)."""

import errno
import json
import os
import sys
from pathlib import Path

_REPO = Path(__file__).resolve().parents[5]
sys.path.insert(0, str(_REPO))

from fluxinfra.distribute.topology import Tree  # noqa: E402


class _Future:
    def __init__(self, value=None, error=None):
        self.value = value
        self.error = error

    def get(self):
        if self.error is not None:
            raise self.error
        return self.value


class Flux:
    def __init__(self, url=None):
        state = Path(os.environ["FLUX_DOUBLE_DIR"]) / "instance.json"
        self.instance = json.loads(state.read_text())

    def rpc(self, topic, payload=None, nodeid=0, flags=0):
        payload = payload or {}
        tree = Tree.from_spec(self.instance["topo"], self.instance["size"])
        if topic == "overlay.topology":
            return _Future(tree.to_json(payload.get("rank", 0)))
        if topic == "rexec.kill":
            return self._kill(tree, int(nodeid), int(payload["pid"]), int(payload["signum"]))
        raise OSError(errno.ENOSYS, f"{topic}: Function not implemented")

    def _kill(self, tree, rank, pid, signum):
        dead = set()
        for r, broker in enumerate(self.instance["pids"]):
            try:
                os.kill(broker, 0)
            except OSError:
                dead.add(r)
        if rank in dead | tree.cut_off(dead):
            return _Future(error=OSError(errno.EHOSTUNREACH, "No route to host"))
        if pid not in self.instance.get("rexec", {}).get(str(rank), []):
            return _Future(error=OSError(errno.ESRCH,
                                         f"pid {pid} does not belong to any subprocess"))
        try:
            os.killpg(pid, signum)
        except ProcessLookupError:
            return _Future(error=OSError(errno.ESRCH,
                                         f"pid {pid} does not belong to any subprocess"))
        return _Future()
