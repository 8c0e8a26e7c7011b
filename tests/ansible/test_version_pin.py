"""flux_install_verify_version, end to end on this machine (no lab, no root, no Flux): the role's
version checks and the testinfra version checks, against a prefix whose bin/flux is the test
double answering a version that is not the role's default pin.

Both run over Ansible's local connection, so they run in CI: with the pin enforced the role
refuses the prefix with a message naming the variables, both versions and the fix; without it the
role reports the version it found, and the testinfra suite checks that `flux version` answers and
reports the installed version instead of failing on the default pin.
"""

from __future__ import annotations

import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import yaml
from lab_harness import (
    DEFAULT_PIN,
    DOUBLE_VERSION,
    REPO,
    VENV_BIN,
    double_prefix,
    pin_refusal,
    run_playbook,
)

pytestmark = [pytest.mark.slow]

#: The role's prefix checks on their own (the tasks preflight runs for the prefix method).
PLAYBOOK = """\
- name: Flux | Check a prefix install as preflight does
  hosts: flux
  gather_facts: false
  tasks:
    - name: Flux | Run the prefix checks of flux_install
      ansible.builtin.include_role:
        name: flux_install
        tasks_from: preflight_prefix.yml
"""


def test_the_double_is_off_the_default_pin():
    # The premise of every test here.
    assert DOUBLE_VERSION != DEFAULT_PIN


@pytest.fixture(scope="module")
def prefix(tmp_path_factory) -> Path:
    return double_prefix(tmp_path_factory.mktemp("off-pin") / "flux")


@pytest.fixture
def local_inventory(tmp_path, prefix):
    """An inventory of this machine (local connection) as the one host of group flux."""

    def write(**group_vars) -> Path:
        inventory = {
            "all": {
                "children": {
                    "flux": {
                        "hosts": {
                            "fluxhost": {
                                "ansible_connection": "local",
                                "ansible_python_interpreter": sys.executable,
                            }
                        },
                        "vars": {
                            "flux_install_method": "prefix",
                            "flux_install_prefix": str(prefix),
                            **group_vars,
                        },
                    }
                }
            }
        }
        path = tmp_path / "inventory.yml"
        path.write_text(yaml.safe_dump(inventory, sort_keys=False))
        return path

    return write


def check_prefix(inventory: Path, tmp_path: Path):
    playbook = tmp_path / "check-prefix.yml"
    playbook.write_text(PLAYBOOK)
    return run_playbook(inventory, str(playbook), timeout=300)


# --- the role ---------------------------------------------------------------------------------


def test_role_accepts_an_off_pin_prefix_without_verify_and_reports_its_version(
    local_inventory, tmp_path, prefix
):
    run = check_prefix(local_inventory(flux_install_verify_version=False), tmp_path)
    assert run.rc == 0, run.output[-3000:]
    assert f"{prefix}/bin/flux on fluxhost reports flux-core {DOUBLE_VERSION}" in run.flat, run.flat
    assert f"the pin flux_install_core_version={DEFAULT_PIN} is not enforced" in run.flat


def test_role_refuses_an_off_pin_prefix_with_verify(local_inventory, tmp_path, prefix):
    run = check_prefix(local_inventory(flux_install_verify_version=True), tmp_path)
    assert run.rc != 0, run.flat[-3000:]
    assert f"{prefix}/bin/flux on fluxhost reports flux-core '{DOUBLE_VERSION}'" in run.flat
    for phrase in pin_refusal(DOUBLE_VERSION, DEFAULT_PIN):
        assert phrase in run.flat, run.flat[-3000:]


def test_role_accepts_an_off_pin_prefix_pinned_to_its_version(local_inventory, tmp_path):
    run = check_prefix(
        local_inventory(flux_install_verify_version=True, flux_install_core_version=DOUBLE_VERSION),
        tmp_path,
    )
    assert run.rc == 0, run.output[-3000:]


def test_role_refuses_a_flux_without_a_version_even_without_verify(
    local_inventory, tmp_path, tmp_path_factory
):
    broken = tmp_path_factory.mktemp("broken") / "flux"
    (broken / "bin").mkdir(parents=True)
    flux = broken / "bin" / "flux"
    flux.write_text("#!/bin/sh\necho 'flux: cannot load libflux' >&2\nexit 1\n")
    flux.chmod(0o755)
    run = check_prefix(
        local_inventory(flux_install_verify_version=False, flux_install_prefix=str(broken)),
        tmp_path,
    )
    assert run.rc != 0, run.flat[-3000:]
    assert f"`{broken}/bin/flux version` on fluxhost did not report a flux-core version" in run.flat
    assert "(rc=1: flux: cannot load libflux)" in run.flat
    assert f"flux_install_prefix ('{broken}') is broken or not Flux" in run.flat


# --- the testinfra suite ----------------------------------------------------------------------


def run_version_checks(inventory: Path, tmp_path: Path) -> dict[str, tuple[str, str]]:
    """tests/infra's two version checks against the inventory: outcome and message by check."""
    report = tmp_path / "junit.xml"
    proc = subprocess.run(
        [str(VENV_BIN / "python"), "-m", "pytest", "tests/infra", "-q", "-p", "no:cacheprovider",
         "-k", "test_flux_version_answers or test_flux_is_the_pinned_version",
         "--hosts=ansible://flux", f"--ansible-inventory={inventory}", f"--junitxml={report}"],
        cwd=REPO, text=True, capture_output=True, timeout=300,
        env={**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
             "PATH": f"{VENV_BIN}:{os.environ.get('PATH', '')}"},
    )
    assert report.exists(), proc.stdout[-3000:] + proc.stderr[-2000:]
    outcomes = {}
    for case in ET.parse(report).getroot().iter("testcase"):
        mark = next((c for c in case if c.tag in ("failure", "error", "skipped")), None)
        outcome = "passed" if mark is None else mark.tag
        detail = "" if mark is None else (mark.get("message") or "")
        outcomes[case.get("name", "").split("[")[0]] = (outcome, detail)
    return outcomes


def test_testinfra_reports_the_installed_version_without_verify(local_inventory, tmp_path):
    outcomes = run_version_checks(
        local_inventory(flux_install_verify_version=False), tmp_path
    )
    assert outcomes["test_flux_version_answers"] == ("passed", ""), outcomes
    outcome, reason = outcomes["test_flux_is_the_pinned_version"]
    assert outcome == "skipped", outcomes
    assert (
        f"flux_install_verify_version is false for fluxhost: flux-core {DOUBLE_VERSION} is "
        f"installed; the pin flux_install_core_version={DEFAULT_PIN} is not enforced"
    ) in reason


def test_testinfra_fails_on_the_default_pin_with_verify(local_inventory, tmp_path, prefix):
    outcomes = run_version_checks(local_inventory(flux_install_verify_version=True), tmp_path)
    outcome, message = outcomes["test_flux_is_the_pinned_version"]
    assert outcome == "failure", outcomes
    assert (
        f"{prefix}/bin/flux reports flux-core {DOUBLE_VERSION} but flux_install_core_version is "
        f"{DEFAULT_PIN} and flux_install_verify_version is true"
    ) in message


def test_testinfra_passes_on_a_pin_that_matches(local_inventory, tmp_path):
    outcomes = run_version_checks(
        local_inventory(flux_install_core_version=DOUBLE_VERSION), tmp_path
    )
    assert outcomes == {
        "test_flux_version_answers": ("passed", ""),
        "test_flux_is_the_pinned_version": ("passed", ""),
    }
