"""playbooks/site.yml against three lab hosts over real ssh: converge, converge again with no
change, --check with no change, the testinfra suite, then grow to four hosts and shrink back.
Last, the prefix against the role's default pin (the prefix's flux-core is another version, real
or the double's): with flux_install_verify_version false site.yml and then the testinfra suite
pass; with it true the role refuses the prefix before any host changes."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import tomllib
import xml.etree.ElementTree as ET

import pytest
from lab_harness import DEFAULT_PIN, REPO, VENV_BIN, pin_refusal, run_playbook, write_inventory

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


def _infra_checks() -> list[str]:
    """The test functions of the users' testinfra suite (tests/infra), by name."""
    names = []
    for path in sorted((REPO / "tests" / "infra").glob("test_*.py")):
        tree = ast.parse(path.read_text())
        names += [node.name for node in tree.body
                  if isinstance(node, ast.FunctionDef) and node.name.startswith("test_")]
    return names


def run_testinfra(inventory, report) -> tuple[subprocess.CompletedProcess, dict]:
    """tests/infra against the lab, in its own pytest; its outcomes per check from JUnit XML."""
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
            f"--junitxml={report}",
        ],
        cwd=REPO,
        text=True,
        capture_output=True,
        timeout=600,
        env={**os.environ, "PATH": f"{VENV_BIN}:{os.environ.get('PATH', '')}"},
    )
    outcomes: dict[str, list[tuple[str, str]]] = {}
    if report.exists():
        for case in ET.parse(report).getroot().iter("testcase"):
            check = case.get("name", "").split("[")[0]
            mark = next((c for c in case if c.tag in ("failure", "error", "skipped")), None)
            outcome = "passed" if mark is None else mark.tag
            detail = "" if mark is None else (mark.get("message") or mark.text or "")
            outcomes.setdefault(check, []).append((outcome, detail))
    return proc, outcomes


@pytest.fixture(scope="module")
def testinfra_run(first_run, inventory, tmp_path_factory):
    return run_testinfra(inventory, tmp_path_factory.mktemp("testinfra") / "junit.xml")


def test_testinfra_suite_passes_against_the_lab(testinfra_run, flux_install):
    proc, _ = testinfra_run
    summary = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else proc.stderr
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-2000:]
    passed = int(re.search(r"(\d+) passed", summary).group(1))
    assert passed >= 40, summary
    if not flux_install.real:
        assert "flux_broker_start is false" in proc.stdout, "live-broker skips must say why"


@pytest.mark.parametrize("check", _infra_checks())
def test_testinfra_check_on_the_lab(testinfra_run, check):
    """Each check of the nested run, here: a check it skipped on every host is skipped in this
    summary too, with its reason (e.g. the live-broker checks without a real Flux)."""
    _, outcomes = testinfra_run
    results = outcomes.get(check)
    assert results, f"{check} did not run in the nested testinfra run"
    failed = [detail for outcome, detail in results if outcome in ("failure", "error")]
    assert not failed, failed[0][-2000:]
    if all(outcome == "skipped" for outcome, _ in results):
        reasons = sorted({detail.removeprefix("Skipped: ") for _, detail in results})
        more = f" (and {len(reasons) - 1} more like it)" if len(reasons) > 1 else ""
        pytest.skip(f"skipped inside the nested testinfra run: {reasons[0]}{more}")


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


# --- a prefix that is not the default pin ---------------------------------------------------

def off_pin_inventory(lab, group_vars, flux_install, path, verify: bool):
    """The instance with the pin left at the role's default and verify_version as given."""
    if flux_install.version == DEFAULT_PIN:
        pytest.skip(f"the prefix's flux-core is the default pin {DEFAULT_PIN}: nothing differs")
    variables = {k: v for k, v in group_vars.items() if k != "flux_install_core_version"}
    return write_inventory(
        path, lab, INSTANCE, {**variables, "flux_install_verify_version": verify}
    )


@pytest.fixture(scope="module")
def off_pin_run(first_run, lab, group_vars, flux_install, tmp_path_factory):
    inventory = off_pin_inventory(
        lab, group_vars, flux_install, tmp_path_factory.mktemp("off-pin") / "inventory.yml", False
    )
    return inventory, run_playbook(inventory)


def test_off_pin_prefix_without_verify_converges_and_reports_its_version(off_pin_run, flux_install):
    _, run = off_pin_run
    assert run.rc == 0, run.output[-4000:]
    for host in INSTANCE:
        assert f"on {host} reports flux-core {flux_install.version}" in run.flat, host
    assert f"the pin flux_install_core_version={DEFAULT_PIN} is not enforced" in run.flat


def test_off_pin_prefix_without_verify_passes_the_testinfra_suite(
    off_pin_run, flux_install, tmp_path
):
    inventory, run = off_pin_run
    assert run.rc == 0, "site.yml failed: see the test above"
    proc, outcomes = run_testinfra(inventory, tmp_path / "junit.xml")
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-2000:]
    assert outcomes["test_flux_version_answers"] == [("passed", "")] * len(INSTANCE)
    pinned = outcomes["test_flux_is_the_pinned_version"]
    assert [outcome for outcome, _ in pinned] == ["skipped"] * len(INSTANCE), pinned
    for host, (_, reason) in zip(INSTANCE, sorted(pinned, key=lambda r: r[1]), strict=True):
        assert (
            f"flux_install_verify_version is false for {host}: flux-core {flux_install.version} "
            f"is installed; the pin flux_install_core_version={DEFAULT_PIN} is not enforced"
        ) in reason


def test_off_pin_prefix_with_verify_is_refused_by_the_role(lab, group_vars, flux_install, tmp_path):
    inventory = off_pin_inventory(lab, group_vars, flux_install, tmp_path / "inv.yml", True)
    run = run_playbook(inventory)
    assert run.rc != 0, run.flat[-3000:]
    for phrase in pin_refusal(flux_install.version, DEFAULT_PIN):
        assert phrase in run.flat, run.flat[-3000:]
    assert run.changed_hosts() == {}, run.recap
