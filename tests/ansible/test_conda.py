"""The conda method end to end on one lab host, with micromamba and flux replaced by the test
doubles in fixtures/ (conda-forge is unreachable here): the pinned specs and channels reach
micromamba, a converged host is left alone, and a new pin re-installs."""

from __future__ import annotations

import shutil

import pytest
from lab_harness import DOUBLE, run_playbook, write_inventory

pytestmark = [pytest.mark.lab, pytest.mark.slow]

HOST = "lab4"  # the spare host; test_site only adds it later, with the prefix method
PREFIX = "/var/lib/fluxinfra-conda"  # /var is per lab host, so this prefix is too


@pytest.fixture(scope="module")
def doubles(flux_install, tmp_path_factory):
    """A shared directory (/tmp is shared with the lab hosts, which run these as root) holding
    micromamba-double next to the flux double it installs."""
    bindir = tmp_path_factory.mktemp("conda-doubles")
    shutil.copy(DOUBLE.parent / "micromamba-double", bindir / "micromamba")
    shutil.copy(DOUBLE, bindir / "flux-double")
    return bindir


def conda_inventory(lab, tmp_path, doubles, version="0.76.0"):
    return write_inventory(
        tmp_path / "conda.yml",
        lab,
        [HOST],
        {
            "flux_install_method": "conda",
            "flux_install_prefix": PREFIX,
            "flux_install_core_version": version,
            "flux_install_micromamba_path": str(doubles / "micromamba"),
            "flux_install_conda_channels": ["conda-forge", "fluxinfra-mirror"],
        },
    )


def calls(lab) -> list[str]:
    return lab.read(HOST, f"{PREFIX}/fluxinfra-calls").splitlines()


def test_conda_method_installs_the_pins_from_the_channels(lab, tmp_path, doubles):
    run = run_playbook(conda_inventory(lab, tmp_path, doubles), "install.yml")
    assert run.rc == 0, run.output[-4000:]
    assert calls(lab) == [
        f"create --yes --prefix {PREFIX} --channel=conda-forge --channel=fluxinfra-mirror "
        "--override-channels flux-core==0.76.0 flux-sched==0.45.0"
    ]
    assert "0.76.0" in lab.exec(HOST, f"{PREFIX}/bin/flux version").stdout


def test_conda_method_leaves_a_converged_host_alone(lab, tmp_path, doubles):
    run = run_playbook(conda_inventory(lab, tmp_path, doubles), "install.yml")
    assert run.rc == 0, run.output[-4000:]
    assert run.changed_hosts() == {}
    assert len(calls(lab)) == 1


def test_conda_method_reinstalls_when_the_pin_moves(lab, tmp_path, doubles):
    run = run_playbook(conda_inventory(lab, tmp_path, doubles, version="0.77.0"), "install.yml")
    assert run.rc == 0, run.output[-4000:]
    assert calls(lab)[-1].startswith(f"install --yes --prefix {PREFIX} ")
    assert "flux-core==0.77.0" in calls(lab)[-1]
