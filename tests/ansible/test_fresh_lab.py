"""Lab hosts are fresh whatever this machine holds, and `site.yml --check` works on them.

This module gives this machine what an earlier Flux leaves behind (a `flux` user and group, and
/var/lib/flux, /var/log/flux, /opt/flux), each only where it is absent, and removes what it
created at the end. A lab started meanwhile shows none of it on its hosts, keeps every other
account, and `--check` on its hosts reports changes and writes nothing. Last, `--check` also
works on a host that holds Flux's directories and certificate but no flux user (tasks that
would chown to it predict the change instead of failing to look the user up).
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from lab_harness import (
    REPO,
    changed_entries,
    claim_lab,
    lab_command,
    lab_script,
    lab_unavailable,
    not_fresh,
    run_playbook,
    start_lab,
    write_inventory,
)

pytestmark = [pytest.mark.lab, pytest.mark.slow]

FRESH_ENV = claim_lab("fxf")  # a lab of this module's own, started after the leftovers exist
INSTANCE = ["lab1", "lab2", "lab3"]
LEFTOVER_DIRS = ("/var/lib/flux", "/var/log/flux", "/opt/flux")


def _has_account(database: str, name: str) -> bool:
    return subprocess.run(["getent", database, name], capture_output=True).returncode == 0


@pytest.fixture(scope="module")
def machine_with_flux_leftovers():
    """This machine with a flux account and Flux directories; what was created is removed."""
    reason = lab_unavailable()
    if reason:
        pytest.skip(reason)
    created_account = not _has_account("passwd", "flux") and not _has_account("group", "flux")
    if created_account:
        subprocess.run(
            ["useradd", "--system", "--user-group", "--no-create-home",
             "--home-dir", "/nonexistent", "--shell", "/usr/sbin/nologin", "flux"],
            check=True, capture_output=True,
        )
    created_dirs = [Path(d) for d in LEFTOVER_DIRS if not os.path.lexists(d)]
    try:
        for directory in created_dirs:
            directory.mkdir(mode=0o755)
        yield
    finally:
        for directory in created_dirs:
            shutil.rmtree(directory, ignore_errors=True)
        if created_account:
            # --force: lab hosts' own flux users may share its uid, and their brokers would
            # otherwise count as processes "using" it
            removed = subprocess.run(["userdel", "--force", "flux"], capture_output=True, text=True)
            if _has_account("group", "flux"):
                subprocess.run(["groupdel", "flux"], capture_output=True)
    assert not created_account or not _has_account("passwd", "flux"), (
        f"the flux user created on this machine is left behind: {removed.stderr.strip()}"
    )


@pytest.fixture(scope="module")
def fresh_lab(machine_with_flux_leftovers, flux_install):
    lab = start_lab(len(INSTANCE), FRESH_ENV, share=[flux_install.prefix])
    yield lab
    down = lab_command("down", env=FRESH_ENV)
    assert down.returncode == 0, down.stderr


def test_this_machine_holds_flux_leftovers(machine_with_flux_leftovers):
    # The premise: without it the tests below would prove nothing.
    assert _has_account("passwd", "flux") and _has_account("group", "flux")
    assert all(os.path.lexists(d) for d in LEFTOVER_DIRS)


@pytest.mark.parametrize("host", INSTANCE)
def test_host_sees_no_flux_account_or_path_of_this_machine(fresh_lab, flux_install, host):
    assert not_fresh(fresh_lab, host, [flux_install.prefix]) == []


@pytest.mark.parametrize("database", ["passwd", "group", "shadow", "gshadow"])
def test_host_keeps_every_other_account(fresh_lab, database):
    def names(text: str) -> list[str]:
        return [line.split(":")[0] for line in text.splitlines()]

    ours = names(Path("/etc", database).read_text())
    hidden = lab_script().HIDDEN_ACCOUNTS
    assert names(fresh_lab.read("lab1", f"/etc/{database}")) == [n for n in ours if n not in hidden]


def test_check_mode_reports_changes_and_makes_none(fresh_lab, group_vars, tmp_path):
    inventory = write_inventory(tmp_path / "inventory.yml", fresh_lab, INSTANCE, group_vars)
    before = {host: fresh_lab.state(host) for host in INSTANCE}
    run = run_playbook(inventory, "site.yml", "--check")
    assert run.rc == 0, run.output[-4000:]
    assert all(run.recap[h]["changed"] > 0 for h in INSTANCE), run.recap
    for host in INSTANCE:
        after = fresh_lab.state(host)
        assert changed_entries(before[host], after) == [], f"--check wrote on {host}"


def _curve_cert() -> str:
    path = REPO / "roles" / "flux_broker" / "filter_plugins" / "flux_broker.py"
    spec = importlib.util.spec_from_file_location("_fluxinfra_flux_broker_filters", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.flux_curve_cert("fluxinfra")


def test_check_mode_on_a_host_with_flux_leftovers_but_no_flux_user(fresh_lab, group_vars, tmp_path):
    # Runs after the fresh check above: it leaves lab1 holding what a removed Flux left behind.
    (tmp_path / "curve.cert").write_text(_curve_cert())
    (tmp_path / "curve.cert").chmod(0o644)
    made = fresh_lab.exec(
        "lab1",
        "mkdir -p /var/log/flux /var/lib/flux /etc/flux/system && "
        f"cp {tmp_path / 'curve.cert'} /etc/flux/system/curve.cert && "
        "chmod 0644 /etc/flux/system/curve.cert && ! getent passwd flux",
    )
    assert made.returncode == 0, made.stderr
    inventory = write_inventory(tmp_path / "inventory.yml", fresh_lab, ["lab1"], group_vars)
    before = fresh_lab.state("lab1")
    run = run_playbook(inventory, "site.yml", "--check")
    assert run.rc == 0, run.output[-4000:]
    assert "failed to look up" not in run.output
    assert run.recap["lab1"]["changed"] > 0, run.recap
    assert changed_entries(before, fresh_lab.state("lab1")) == [], "--check wrote on lab1"
