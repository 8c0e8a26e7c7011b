"""Session fixtures for the playbook tests: a private ssh lab and a Flux prefix install.

See lab_harness.py for what runs for real and what is skipped without a real Flux.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
from lab_harness import (
    DOUBLE,
    LAB_ENV,
    LAB_HOSTS,
    FluxInstall,
    Lab,
    lab_command,
    lab_unavailable,
    real_flux_prefix,
)


@pytest.fixture(scope="session")
def lab():
    reason = lab_unavailable()
    if reason:
        pytest.skip(reason)
    lab_command("down")
    started = lab_command("up", str(LAB_HOSTS))
    if started.returncode != 0:
        lab_command("down")
        pytest.fail(f"scripts/lab up failed: {started.stderr}")
    state = json.loads(Path(LAB_ENV["FLUXINFRA_LAB_DIR"], "lab.json").read_text())
    yield Lab(hosts=state["hosts"], known_hosts=state["known_hosts"])
    down = lab_command("down")
    assert down.returncode == 0, down.stderr


@pytest.fixture(scope="session")
def flux_install():
    """A prefix install: a real Flux when present, else one whose bin/flux is the test double."""
    real = real_flux_prefix()
    if real:
        out = subprocess.run([f"{real}/bin/flux", "version"], capture_output=True, text=True)
        version = next(
            line.split()[-1] for line in out.stdout.splitlines() if line.startswith("commands:")
        )
        yield FluxInstall(prefix=real, version=version, real=True)
        return
    prefix = Path(tempfile.mkdtemp(prefix="fluxinfra-flux-double-"))
    (prefix / "bin").mkdir()
    shutil.copy(DOUBLE, prefix / "bin" / "flux")
    for path in (prefix, prefix / "bin"):
        path.chmod(0o755)
    yield FluxInstall(prefix=str(prefix), version="0.76.0", real=False)
    shutil.rmtree(prefix, ignore_errors=True)


@pytest.fixture(scope="session")
def group_vars(flux_install) -> dict:
    return {
        "flux_install_method": "prefix",
        "flux_install_prefix": flux_install.prefix,
        "flux_install_core_version": flux_install.version,
        "flux_broker_start": flux_install.real,
        "flux_broker_quorum_timeout": 60,
    }
