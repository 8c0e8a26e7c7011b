"""Bad input fails in preflight, before any host is changed, with a message that says what to fix.

Each case runs playbooks/site.yml against the lab with one thing wrong and checks the exit
status, the message, and that the recap reports no change on any host.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time

import pytest
from lab_harness import (
    LAB,
    LAB_ENV,
    LAB_NET,
    changed_entries,
    not_fresh,
    pin_refusal,
    run_playbook,
    write_inventory,
)

pytestmark = [pytest.mark.lab, pytest.mark.slow]

INSTANCE = ["lab1", "lab2", "lab3"]


@pytest.fixture
def site(lab, group_vars, tmp_path):
    """Run site.yml with the given hosts / variable overrides; returns the PlaybookRun."""

    def run(hosts=INSTANCE, host_vars=None, extra_group_vars=None, args=()):
        inventory = write_inventory(
            tmp_path / "inventory.yml",
            lab,
            list(hosts),
            {**group_vars, **(extra_group_vars or {})},
            host_vars,
        )
        return run_playbook(inventory, "site.yml", *args)

    return run


def assert_refused(run, *phrases: str) -> None:
    assert run.rc != 0, run.output[-3000:]
    for phrase in phrases:
        assert phrase in run.flat, f"{phrase!r} not in output:\n{run.output[-5000:]}"
    assert run.changed_hosts() == {}, f"a refused run changed hosts: {run.recap}"


def test_check_mode_on_fresh_hosts_reports_changes_and_makes_none(site, lab, flux_install):
    # Runs first in this module, while the lab hosts are still untouched; scripts/lab makes them
    # fresh whatever this machine holds (test_fresh_lab.py), and this checks that they are.
    for host in INSTANCE:
        assert not_fresh(lab, host, [flux_install.prefix]) == [], f"{host} is not fresh"
    before = {host: lab.state(host) for host in INSTANCE}
    run = site(args=("--check",))
    assert run.rc == 0, run.output[-4000:]
    assert all(run.recap[h]["changed"] > 0 for h in INSTANCE), run.recap
    for host in INSTANCE:
        assert changed_entries(before[host], lab.state(host)) == [], f"--check wrote on {host}"


def test_empty_group_is_refused(site):
    assert_refused(site(hosts=[]), "Inventory group 'flux' is empty or missing")


def test_unknown_install_method_is_refused(site):
    assert_refused(
        site(extra_group_vars={"flux_install_method": "rpm"}),
        "flux_install_method is 'rpm': choose one of conda, package, prefix",
    )


def test_prefix_without_flux_is_refused(site):
    assert_refused(
        site(extra_group_vars={"flux_install_prefix": "/nonexistent/flux"}),
        "flux_install_prefix is '/nonexistent/flux'",
        "/nonexistent/flux/bin/flux does not exist",
    )


def test_version_mismatch_is_refused(site, flux_install):
    assert_refused(
        site(extra_group_vars={"flux_install_core_version": "0.1.0"}),
        *pin_refusal(flux_install.version, "0.1.0"),
    )


def test_conda_without_micromamba_is_refused(site):
    # The lab has no route to the internet, so micromamba can neither be found nor downloaded.
    assert_refused(
        site(
            extra_group_vars={
                "flux_install_method": "conda",
                "flux_install_prefix": "/opt/fluxinfra-conda",
            }
        ),
        "flux_install_method is 'conda' but micromamba is not at",
    )


def test_conda_preflight_refuses_in_check_mode_too(site):
    assert_refused(
        site(
            extra_group_vars={
                "flux_install_method": "conda",
                "flux_install_prefix": "/opt/fluxinfra-conda",
            },
            args=("--check",),
        ),
        "micromamba is not at",
    )


def test_package_method_without_distro_packages_is_refused(site):
    assert_refused(
        site(extra_group_vars={"flux_install_method": "package", "flux_install_prefix": "/usr"}),
        "flux_install_method is 'package' but the package manager on lab1",
    )


def test_duplicate_hostnames_are_refused(site):
    assert_refused(
        site(host_vars={"lab2": {"flux_broker_hostname": "lab1"}}),
        "Duplicate flux_broker_hostname lab1",
    )


def test_hostname_mismatch_is_refused(site):
    assert_refused(
        site(host_vars={"lab2": {"flux_broker_hostname": "node2"}}),
        "flux_broker_hostname for lab2 is 'node2' but the host's hostname is 'lab2'",
    )


def test_shared_endpoint_is_refused_as_port_clash(site):
    assert_refused(
        site(host_vars={"lab2": {"flux_broker_address": f"{LAB_NET}.11"}}),
        f"Port clash: endpoint {LAB_NET}.11:8050",
        "lab1, lab2",
    )


def test_port_in_use_on_a_host_is_refused(site):
    listener = subprocess.Popen(
        [
            str(LAB),
            "exec",
            "lab2",
            "--",
            "python3",
            "-c",
            "import socket,time; s=socket.socket(); s.bind(('0.0.0.0', 8050)); s.listen(); "
            "time.sleep(120)",
        ],
        env={**os.environ, **LAB_ENV},
        start_new_session=True,  # so the listener inside the namespace stops with it
    )
    try:
        time.sleep(1.0)
        assert_refused(site(), "Port clash on lab2: flux_broker_port 8050 is in use by", "python3")
    finally:
        os.killpg(listener.pid, signal.SIGTERM)
        listener.wait(timeout=10)


def test_unreachable_host_is_refused(site):
    assert_refused(
        site(hosts=[*INSTANCE, "lab9"], extra_group_vars={"flux_install_connect_timeout": 3}),
        "unreachable: lab9",
        "Nothing was changed on any host",
    )


def test_partial_play_is_refused(site):
    assert_refused(
        site(args=("--limit", "lab1")), "Hosts lab2, lab3 of group 'flux' are not in this play"
    )


def test_failure_on_one_host_is_reported_with_the_hosts_left_behind(site):
    # Passes preflight, then fails on lab2 only, mid-bootstrap.
    run = site(host_vars={"lab2": {"flux_broker_config_dir": "/proc/fluxinfra-cannot-exist"}})
    assert run.rc != 0
    assert "Flux bootstrap failed on lab2" in run.output, run.output[-4000:]
    assert "may hold a partially applied config" in run.output
    assert "Flux bootstrap stopped on lab1 because another host failed" in run.output
