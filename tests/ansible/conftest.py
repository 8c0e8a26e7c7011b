"""Session fixtures for the playbook tests: a private ssh lab and a Flux prefix install.

See lab_harness.py for what runs for real and what is skipped without a real Flux.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
from lab_harness import (
    DOUBLE_VERSION,
    LAB_HOSTS,
    FluxInstall,
    double_prefix,
    lab_command,
    lab_unavailable,
    real_flux_prefix,
    start_lab,
)


@pytest.fixture(scope="session")
def lab(flux_install):
    """Fresh lab hosts: none sees this machine's flux account or Flux paths (scripts/lab hides
    them), except the prefix install the tests use."""
    reason = lab_unavailable()
    if reason:
        pytest.skip(reason)
    try:
        started = start_lab(LAB_HOSTS, share=[flux_install.prefix])
    except RuntimeError as exc:
        pytest.fail(str(exc))
    yield started
    down = lab_command("down")
    assert down.returncode == 0, down.stderr


@pytest.fixture(scope="session")
def flux_install():
    """A prefix install: a real Flux when present, else one whose bin/flux is the test double
    (answering DOUBLE_VERSION, which is not the roles' default pin)."""
    real = real_flux_prefix()
    if real:
        out = subprocess.run([f"{real}/bin/flux", "version"], capture_output=True, text=True)
        version = next(
            line.split()[-1] for line in out.stdout.splitlines() if line.startswith("commands:")
        )
        yield FluxInstall(prefix=real, version=version, real=True)
        return
    prefix = double_prefix(Path(tempfile.mkdtemp(prefix="fluxinfra-flux-double-")))
    yield FluxInstall(prefix=str(prefix), version=DOUBLE_VERSION, real=False)
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
