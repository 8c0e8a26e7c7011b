"""Post-provisioning checks of a Flux system instance built by playbooks/site.yml.

One behaviour per test. Checks that need a running broker skip, with the reason, on hosts whose
inventory sets flux_broker_start=false (e.g. CI, where `flux` is a test double).
"""

from __future__ import annotations

import importlib.util
import tomllib

import pytest
from flux_expect import (
    ROLES,
    expand_hostlist,
    expected,
    explained_by_service_log,
    flux,
    flux_as_owner,
    host_variables,
    is_true,
    require_live_broker,
)


def _config(host) -> str:
    return host.file(f"{expected(host, 'flux_broker_config_dir')}/system.toml").content_string


def _comparable(text: str) -> list[str]:
    """Config lines that must be identical on every host (lines marked per-host excepted)."""
    return [line for line in text.splitlines() if "per-host" not in line]


def _curve_parser():
    path = ROLES / "flux_broker" / "filter_plugins" / "flux_broker.py"
    spec = importlib.util.spec_from_file_location("_fluxinfra_flux_broker_filters", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.flux_curve_cert_parse


# --- installation -----------------------------------------------------------------------------


def _reported_version(out) -> str:
    """flux-core's version in the result of `flux version` ('' when it names none)."""
    lines = [line.split() for line in out.stdout.splitlines() if line.startswith("commands:")]
    return lines[0][-1] if out.rc == 0 and lines and len(lines[0]) > 1 else ""


def test_flux_version_answers(host):
    out = host.run("%s version", flux(host))
    assert out.rc == 0, f"`{flux(host)} version` failed (rc={out.rc}): {out.stderr.strip()}"
    assert _reported_version(out), f"`{flux(host)} version` names no flux-core: {out.stdout}"


def test_flux_is_the_pinned_version(host):
    """The pin, where the playbook was asked to enforce it (flux_install_verify_version)."""
    installed = _reported_version(host.run("%s version", flux(host)))
    pin = str(expected(host, "flux_install_core_version"))
    if not is_true(expected(host, "flux_install_verify_version")):
        pytest.skip(
            f"flux_install_verify_version is false for "
            f"{host_variables(host)['inventory_hostname']}: flux-core {installed or '?'} is "
            f"installed; the pin flux_install_core_version={pin} is not enforced"
        )
    assert installed == pin, (
        f"{flux(host)} reports flux-core {installed or '?'} but flux_install_core_version is "
        f"{pin} and flux_install_verify_version is true: the install changed after the playbook "
        "verified it; re-run playbooks/site.yml (its preflight names the fix)"
    )


def test_login_shells_find_flux_on_path(host):
    found = host.check_output("bash -lc 'command -v flux'")
    assert found == flux(host)


def test_flux_system_user_exists(host):
    user = host.user(expected(host, "flux_install_user"))
    assert user.exists
    assert user.group == expected(host, "flux_install_group")
    assert user.home == expected(host, "flux_install_statedir")


@pytest.mark.parametrize(
    ("variable", "mode"),
    [
        ("flux_install_statedir", 0o700),
        ("flux_install_rundir", 0o755),
        ("flux_install_logdir", 0o750),
    ],
)
def test_flux_directory_is_owned_by_flux(host, variable, mode):
    directory = host.file(expected(host, variable))
    assert directory.is_directory
    assert directory.user == expected(host, "flux_install_user")
    assert directory.mode == mode


# --- configuration ----------------------------------------------------------------------------


def test_config_is_valid_toml(host):
    config = tomllib.loads(_config(host))
    assert {"bootstrap", "tbon", "resource"} <= set(config)


def test_config_lists_every_broker_in_rank_order(host, broker_names):
    hosts = tomllib.loads(_config(host))["bootstrap"]["hosts"]
    assert [entry["host"] for entry in hosts] == broker_names


def test_config_gives_every_broker_bind_and_connect_uris(host):
    for entry in tomllib.loads(_config(host))["bootstrap"]["hosts"]:
        assert entry["bind"].startswith("tcp://"), entry
        assert entry["connect"].startswith("tcp://"), entry


def test_config_is_identical_to_rank0(host, rank0):
    assert _comparable(_config(host)) == _comparable(_config(rank0))


def test_config_points_at_the_curve_cert(host):
    bootstrap = tomllib.loads(_config(host))["bootstrap"]
    assert bootstrap["curve_cert"] == expected(host, "flux_broker_curve_cert_path")


# --- secrets ----------------------------------------------------------------------------------


def _secrets(host):
    secrets = {
        "curve": (
            expected(host, "flux_broker_curve_cert_path"),
            expected(host, "flux_install_user"),
        )
    }
    if is_true(expected(host, "flux_broker_munge_enabled")):
        secrets["munge"] = (
            expected(host, "flux_broker_munge_key_path"),
            expected(host, "flux_broker_munge_user"),
        )
    return secrets


@pytest.mark.parametrize("secret", ["curve", "munge"])
def test_secret_is_readable_only_by_its_owner(host, secret):
    if secret not in _secrets(host):
        pytest.skip(
            f"flux_broker_munge_enabled is false on {host_variables(host)['inventory_hostname']}"
        )
    path, owner = _secrets(host)[secret]
    secret_file = host.file(path)
    assert secret_file.exists, path
    assert secret_file.user == owner
    assert secret_file.mode == 0o400


@pytest.mark.parametrize("secret", ["curve", "munge"])
def test_secret_is_identical_to_rank0(host, rank0, secret):
    if secret not in _secrets(host):
        pytest.skip(
            f"flux_broker_munge_enabled is false on {host_variables(host)['inventory_hostname']}"
        )
    path, _ = _secrets(host)[secret]
    assert host.file(path).sha256sum == rank0.file(path).sha256sum


def test_curve_cert_is_a_valid_key_pair(host):
    text = host.file(expected(host, "flux_broker_curve_cert_path")).content_string
    try:
        parsed = _curve_parser()(text)
    except Exception as exc:  # the message never contains key material
        pytest.fail(f"CURVE certificate does not parse: {type(exc).__name__}")
    assert len(parsed["public"]) == 40


def test_munge_credential_roundtrips_locally(host):
    if "munge" not in _secrets(host):
        pytest.skip("flux_broker_munge_enabled is false")
    result = host.run("munge -n | unmunge")
    assert result.rc == 0, result.stderr


def test_munge_credential_from_this_host_decodes_on_rank0(host, rank0):
    if "munge" not in _secrets(host):
        pytest.skip("flux_broker_munge_enabled is false")
    credential = host.check_output("munge -n")
    result = rank0.run("echo %s | unmunge", credential)
    assert result.rc == 0, result.stderr


# --- service ----------------------------------------------------------------------------------


def test_broker_service_is_defined(host):
    supervisor = host.file(expected(host, "flux_broker_supervisor_path"))
    unit = host.file(expected(host, "flux_broker_unit_path"))
    assert supervisor.exists or unit.exists
    if supervisor.exists:
        assert supervisor.mode & 0o111, "supervisor script is not executable"
        assert flux(host) in supervisor.content_string


def test_broker_is_running(host):
    require_live_broker(host)
    with explained_by_service_log(host):
        if host.file(expected(host, "flux_broker_supervisor_path")).exists:
            status = host.run("%s status", expected(host, "flux_broker_supervisor_path"))
            assert status.rc == 0, status.stdout
        else:
            assert host.service("flux").is_running
        assert (
            host.run("pgrep -u %s -f 'flux.*broker'", expected(host, "flux_install_user")).rc == 0
        )


def test_broker_local_socket_exists(host):
    require_live_broker(host)
    with explained_by_service_log(host):
        assert host.file(f"{expected(host, 'flux_install_rundir')}/local").is_socket


def test_every_rank_is_online(host):
    require_live_broker(host)
    with explained_by_service_log(host):
        result = flux_as_owner(
            host,
            "resource",
            "status",
            "--states=offline",
            "--no-header",
            "--skip-empty",
            "--format={ranks} {nodelist}",
        )
        assert result.rc == 0, result.stderr
        assert result.stdout.strip() == "", f"offline ranks/hosts: {result.stdout.strip()}"


def test_resource_list_shows_every_host(host, broker_names):
    require_live_broker(host)
    with explained_by_service_log(host):
        result = flux_as_owner(
            host, "resource", "list", "--states=all", "--no-header", "--format={nodelist}"
        )
        assert result.rc == 0, result.stderr
        listed = {n for line in result.stdout.split() for n in expand_hostlist(line)}
        assert listed == set(broker_names)


def test_job_runs_on_every_host(rank0, broker_names):
    require_live_broker(rank0)
    with explained_by_service_log(rank0):
        count = str(len(broker_names))
        result = flux_as_owner(rank0, "run", f"--nodes={count}", f"--ntasks={count}", "hostname")
        assert result.rc == 0, result.stderr
        assert sorted(result.stdout.split()) == sorted(broker_names)
