"""Fixtures for the post-provisioning testinfra suite (see flux_expect.py for the helpers).

Run it against the hosts an inventory describes, after `playbooks/site.yml`:

    pytest tests/infra --hosts='ansible://flux' --ansible-inventory=INVENTORY
"""

from __future__ import annotations

from pathlib import Path

import pytest
from flux_expect import expected


def pytest_collection_modifyitems(config, items):
    if config.getoption("hosts") or config.getoption("ansible_inventory"):
        return
    skip = pytest.mark.skip(
        reason="tests/infra verifies provisioned hosts: run it with "
        "--hosts='ansible://flux' --ansible-inventory=INVENTORY "
        "(tests/ansible runs it against the lab)"
    )
    for item in items:
        if Path(str(item.fspath)).is_relative_to(Path(__file__).parent):
            item.add_marker(skip)


@pytest.fixture(scope="session")
def inventory(request) -> str:
    return request.config.getoption("ansible_inventory")


@pytest.fixture(scope="session")
def members(request, inventory) -> list[str]:
    """The instance's hosts in rank order (the inventory group, first host is rank 0)."""
    from testinfra.utils.ansible_runner import AnsibleRunner

    runner = AnsibleRunner(inventory)
    group = "flux"
    first = runner.get_hosts("all")[0] if runner.get_hosts("all") else None
    if first is not None:
        group = runner.get_variables(first).get("flux_broker_inventory_group", "flux")
    hosts = runner.get_hosts(group)
    if not hosts:
        pytest.fail(f"inventory {inventory} has no hosts in group '{group}'")
    return hosts


@pytest.fixture(scope="session")
def rank0(inventory, members):
    import testinfra

    return testinfra.get_host(f"ansible://{members[0]}", ansible_inventory=inventory)


@pytest.fixture(scope="session")
def broker_names(inventory, members) -> list[str]:
    """flux_broker_hostname of every member, in rank order."""
    import testinfra

    return [
        expected(
            testinfra.get_host(f"ansible://{m}", ansible_inventory=inventory),
            "flux_broker_hostname",
        )
        for m in members
    ]
