"""Helpers for the post-provisioning testinfra suite (expected values, flux commands, logs).

Run it against the hosts an inventory describes, after `playbooks/site.yml`:

    pytest tests/infra --hosts='ansible://flux' --ansible-inventory=INVENTORY

Expected values (prefix, version, paths, users) come from the inventory's variables for each host
and otherwise from the roles' defaults, so the suite checks what the playbooks were asked to do.
"""

from __future__ import annotations

import contextlib
import functools
from pathlib import Path

import pytest
import yaml

ROLES = Path(__file__).resolve().parents[2] / "roles"


@functools.cache
def role_defaults() -> dict:
    """Literal defaults of both roles (templated defaults are resolved by `expected`)."""
    merged: dict = {}
    for role in ("flux_install", "flux_broker"):
        merged.update(yaml.safe_load((ROLES / role / "defaults" / "main.yml").read_text()))
    return merged


# flux_broker defaults that derive from flux_install variables.
_DERIVED = {
    "flux_broker_prefix": "flux_install_prefix",
    "flux_broker_user": "flux_install_user",
    "flux_broker_rundir": "flux_install_rundir",
    "flux_broker_statedir": "flux_install_statedir",
    "flux_broker_logdir": "flux_install_logdir",
}


def expected(host, name: str):
    """The value of role variable `name` for `host`: inventory first, then the role default."""
    variables = host_variables(host)
    if name in variables:
        return variables[name]
    if name in _DERIVED:
        return expected(host, _DERIVED[name])
    if name == "flux_broker_hostname":
        return variables["inventory_hostname"]
    return role_defaults()[name]


def host_variables(host) -> dict:
    cache = host.__dict__.setdefault("_fluxinfra_vars", {})
    if not cache:
        cache.update(host.ansible.get_variables())
    return cache


def is_true(value) -> bool:
    return str(value).strip().lower() in ("1", "true", "yes", "on")


def flux(host) -> str:
    return f"{expected(host, 'flux_install_prefix')}/bin/flux"


def flux_as_owner(host, *args: str):
    """Run `flux ARGS` as the instance owner against the local broker."""
    uri = f"local://{expected(host, 'flux_install_rundir')}/local"
    return host.run(
        "runuser -u %s -- env FLUX_URI=%s %s " + " ".join(["%s"] * len(args)),
        expected(host, "flux_install_user"),
        uri,
        flux(host),
        *args,
    )


def require_live_broker(host) -> None:
    """Skip, with the reason, when this host is not meant to run a broker."""
    if not is_true(expected(host, "flux_broker_start")):
        pytest.skip(
            f"flux_broker_start is false for {host_variables(host)['inventory_hostname']}: "
            "the broker was not started (no real flux, e.g. CI's test double)"
        )
    if not host.file(flux(host)).exists:
        pytest.skip(f"{flux(host)} is not installed")


def service_log(host) -> str:
    if host.file(expected(host, "flux_broker_supervisor_path")).exists:
        logfile = f"{expected(host, 'flux_install_logdir')}/broker.log"
        return host.run("tail -n 60 %s", logfile).stdout
    return host.run("journalctl -u flux --no-pager -n 60").stdout


@contextlib.contextmanager
def explained_by_service_log(host):
    """On a failed check, print the broker's log before re-raising, so the red run explains."""
    try:
        yield
    except AssertionError:
        print(f"----- flux broker log on {host_variables(host)['inventory_hostname']} -----")
        print(service_log(host))
        raise


def expand_hostlist(text: str) -> list[str]:
    """Expand an RFC 29 hostlist such as ``lab[1-3,5],other`` into host names."""
    names: list[str] = []
    depth, token = 0, ""
    for char in text.strip() + ",":
        if char == "," and depth == 0:
            if token:
                names.extend(_expand_one(token))
            token = ""
            continue
        depth += {"[": 1, "]": -1}.get(char, 0)
        token += char
    return names


def _expand_one(token: str) -> list[str]:
    if "[" not in token:
        return [token]
    prefix, rest = token.split("[", 1)
    ranges, suffix = rest.split("]", 1)
    out = []
    for part in ranges.split(","):
        lo, _, hi = part.partition("-")
        width = len(lo)
        for number in range(int(lo), int(hi or lo) + 1):
            out.append(f"{prefix}{number:0{width}d}{suffix}")
    return out
