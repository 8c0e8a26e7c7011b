"""What ``--resume`` needs from an earlier run: the payload, its checksum and each rank's outcome.

One JSON file per (SOURCE, --dest, instance) in the state directory, written when a run ends with
ranks left to do (or is interrupted) and deleted once every rank has the content.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import time
from pathlib import Path

from fluxinfra.distribute.errors import DistributeError

__all__ = ["RunState", "StateStore", "default_state_dir", "state_key"]


def default_state_dir() -> Path:
    if os.environ.get("FLUXINFRA_STATE_DIR"):
        return Path(os.environ["FLUXINFRA_STATE_DIR"])
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local",
                                                            "state")
    return Path(base) / "fluxinfra" / "distribute"


def state_key(source: str, dest: str, lead_host: str) -> str:
    return hashlib.sha256(json.dumps([source, dest, lead_host]).encode()).hexdigest()[:16]


@dataclasses.dataclass
class RunState:
    key: str
    source: str
    dest: str
    importer: str
    digest: str
    payload: dict
    targets: list[int]
    ranks: dict[int, dict] = dataclasses.field(default_factory=dict)
    updated: float = dataclasses.field(default_factory=time.time)

    def done(self) -> set[int]:
        return {r for r, v in self.ranks.items() if v.get("status") in ("ok", "present")}


class StateStore:
    def __init__(self, directory: str | Path):
        self.directory = Path(directory)

    def path(self, key: str) -> Path:
        return self.directory / f"{key}.json"

    def load(self, key: str) -> RunState | None:
        path = self.path(key)
        try:
            raw = json.loads(path.read_text())
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            raise DistributeError(f"--resume: cannot read {path}: {exc}; delete it and run "
                                  "without --resume") from None
        raw["ranks"] = {int(r): v for r, v in raw.get("ranks", {}).items()}
        try:
            return RunState(**raw)
        except TypeError as exc:
            raise DistributeError(f"--resume: {path} is not a state file this version wrote "
                                  f"({exc}); delete it and run without --resume") from None

    def save(self, state: RunState) -> Path:
        self.directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        state.updated = time.time()
        path = self.path(state.key)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(dataclasses.asdict(state), indent=1, sort_keys=True) + "\n")
        os.replace(tmp, path)
        return path

    def delete(self, key: str) -> None:
        self.path(key).unlink(missing_ok=True)
