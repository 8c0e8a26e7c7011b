"""Fixtures for ``fluxinfra distribute``: an instance of the flux double, and a real Flux.

``double_instance(size, topo)`` starts the named test double of ``flux`` (flux_double.py): one
placeholder process per rank stands in for its broker (kill it to kill the broker), and an
environment whose ``flux`` is the double, connected to rank 0. ``real_flux`` is the path of a
real ``flux`` (``$FLUXINFRA_FLUX_PREFIX/bin/flux`` or ``/opt/flux/bin/flux``) or skips with the
reason; with it, ``flux start --test-size=N`` runs a real instance of N brokers on this machine.
"""

from __future__ import annotations

import dataclasses
import io
import json
import os
import signal
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
DOUBLE = HERE / "flux_double.py"


@dataclasses.dataclass
class DoubleInstance:
    dir: Path
    bin: Path
    size: int
    topo: str
    placeholders: list[subprocess.Popen]

    @property
    def env(self) -> dict[str, str]:
        return {**os.environ, "PATH": f"{self.bin}{os.pathsep}{os.environ['PATH']}",
                "FLUX_DOUBLE_DIR": str(self.dir),
                "FLUX_URI": f"local://{self.dir}/rank0/local"}

    @property
    def flux(self) -> str:
        return str(self.bin / "flux")

    def kill(self, rank: int) -> None:
        """The broker of ``rank`` dies (SIGKILL), as ``kill -9 $(flux getattr broker.pid)``."""
        self.placeholders[rank].send_signal(signal.SIGKILL)
        self.placeholders[rank].wait()

    def kvs(self) -> dict:
        return json.loads((self.dir / "instance.json").read_text())["kvs"]

    def stop(self) -> None:
        for proc in self.placeholders:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def make_double(root: Path, size: int, topo: str, hosts: list[str] | None = None) -> DoubleInstance:
    root.mkdir(parents=True, exist_ok=True)
    bin_dir = root / "bin"
    bin_dir.mkdir(exist_ok=True)
    wrapper = bin_dir / "flux"
    wrapper.write_text(f'#!/bin/sh\nexec {sys.executable} {DOUBLE} "$@"\n')
    wrapper.chmod(0o755)
    placeholders = [subprocess.Popen(["sleep", "3600"]) for _ in range(size)]
    state = {"size": size, "topo": topo, "hosts": hosts or [f"node{r}" for r in range(size)],
             "pids": [p.pid for p in placeholders], "kvs": {}}
    (root / "instance.json").write_text(json.dumps(state))
    return DoubleInstance(root, bin_dir, size, topo, placeholders)


@pytest.fixture
def double_instance(tmp_path):
    made: list[DoubleInstance] = []

    def factory(size: int = 4, topo: str = "kary:2", hosts: list[str] | None = None):
        inst = make_double(tmp_path / f"flux-double-{len(made)}", size, topo, hosts)
        made.append(inst)
        return inst

    yield factory
    for inst in made:
        inst.stop()


def make_tar(path: Path, members: dict[str, bytes]) -> Path:
    """A tar holding ``members`` (name -> bytes), e.g. a stand-in image archive."""
    with tarfile.open(path, "w") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def real_flux_path() -> str | None:
    if os.environ.get("FLUXINFRA_FLUX_DOUBLE") == "1":
        return None
    for prefix in (os.environ.get("FLUXINFRA_FLUX_PREFIX"), "/opt/flux"):
        if prefix and Path(prefix, "bin", "flux").exists():
            out = subprocess.run([f"{prefix}/bin/flux", "version"], capture_output=True,
                                 text=True)
            if out.returncode == 0 and "fluxinfra-test-double" not in out.stdout:
                return f"{prefix}/bin/flux"
    return None


@pytest.fixture
def real_flux():
    path = real_flux_path()
    if path is None:
        pytest.skip("no real Flux build (set FLUXINFRA_FLUX_PREFIX or install to /opt/flux; CI "
                    "has none): the double is checked against it where one exists")
    return path
