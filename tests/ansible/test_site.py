"""playbooks/site.yml against three lab hosts over real ssh: converge, converge again with no
change, --check with no change, the testinfra suite, then grow to four hosts and shrink back."""

from __future__ import annotations

import os
import re
import subprocess
import tomllib

import pytest
from lab_harness import REPO, VENV_BIN, run_playbook, write_inventory

pytestmark = [pytest.mark.lab, pytest.mark.slow]

INSTANCE = ["lab1", "lab2", "lab3"]


@pytest.fixture(scope="module")
def inventory(lab, group_vars, tmp_path_factory):
    return write_inventory(
        tmp_path_factory.mktemp("site") / "inventory.yml", lab, INSTANCE, group_vars
    )


@pytest.fixture(scope="module")
def first_run(inventory):
    return run_playbook(inventory)


def bootstrap_hosts(lab, host: str) -> list[str]:
    config = tomllib.loads(lab.read(host, "/etc/flux/system/conf.d/system.toml"))
    return [entry["host"] for entry in config["bootstrap"]["hosts"]]


def test_first_run_converges(first_run):
    assert first_run.rc == 0, first_run.output[-4000:]
    assert set(first_run.recap) >= set(INSTANCE)
    assert all(first_run.recap[h]["changed"] > 0 for h in INSTANCE), first_run.recap


def test_broker_start_is_skipped_visibly_without_real_flux(first_run, flux_install):
    if flux_install.real:
        pytest.skip("a real Flux is installed: the broker was started")
    assert "flux_broker_start is false" in first_run.output


def test_second_run_changes_nothing(first_run, inventory):
    second = run_playbook(inventory)
    assert second.rc == 0, second.output[-4000:]
    assert second.changed_hosts() == {}, second.output[-6000:]


def test_check_mode_reports_no_changes(first_run, inventory):
    check = run_playbook(inventory, "site.yml", "--check")
    assert check.rc == 0, check.output[-4000:]
    assert check.changed_hosts() == {}, check.output[-6000:]


def test_every_host_lists_the_instance_in_inventory_order(first_run, lab):
    for host in INSTANCE:
        assert bootstrap_hosts(lab, host) == INSTANCE


def test_secrets_never_appear_in_the_output(first_run, lab):
    cert = lab.read("lab1", "/etc/flux/system/curve.cert")
    secret = re.search(r'secret-key = "(.+)"', cert).group(1)
    assert secret not in first_run.output


def test_testinfra_suite_passes_against_the_lab(first_run, inventory, flux_install):
    proc = subprocess.run(
        [
            str(VENV_BIN / "python"),
            "-m",
            "pytest",
            "tests/infra",
            "-q",
            "-rs",
            "-p",
            "no:cacheprovider",
            "--hosts=ansible://flux",
            f"--ansible-inventory={inventory}",
        ],
        cwd=REPO,
        text=True,
        capture_output=True,
        timeout=600,
        env={**os.environ, "PATH": f"{VENV_BIN}:{os.environ.get('PATH', '')}"},
    )
    summary = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else proc.stderr
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-2000:]
    passed = int(re.search(r"(\d+) passed", summary).group(1))
    assert passed >= 40, summary
    if not flux_install.real:
        assert "flux_broker_start is false" in proc.stdout, "live-broker skips must say why"


def test_adding_a_host_reconfigures_the_overlay(first_run, lab, group_vars, tmp_path):
    grown = write_inventory(tmp_path / "grown.yml", lab, [*INSTANCE, "lab4"], group_vars)
    run = run_playbook(grown)
    assert run.rc == 0, run.output[-4000:]
    for host in [*INSTANCE, "lab4"]:
        assert bootstrap_hosts(lab, host) == [*INSTANCE, "lab4"]
    assert lab.read("lab4", "/etc/flux/system/curve.cert") == lab.read(
        "lab1", "/etc/flux/system/curve.cert"
    ), "the new host must get the existing certificate"


def test_removing_a_host_reconfigures_the_overlay(first_run, lab, inventory):
    run = run_playbook(inventory)
    assert run.rc == 0, run.output[-4000:]
    for host in INSTANCE:
        assert bootstrap_hosts(lab, host) == INSTANCE
    assert run.recap["lab1"]["changed"] > 0, "the config change must be applied"
