"""Fast checks of the roles and playbooks that need no hosts: syntax, conventions, filters,
template rendering. They run everywhere (no root, no lab)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import tomllib
from pathlib import Path

import jinja2
import pytest
import yaml
from lab_harness import REPO, VENV_BIN, lab_script

ROLES = ("flux_install", "flux_broker")
PREFIX = {"flux_install": "Flux install | ", "flux_broker": "Flux broker | "}
TASK_FILES = sorted(
    (role, path) for role in ROLES for path in (REPO / "roles" / role / "tasks").glob("*.yml")
) + [("flux_broker", REPO / "roles" / "flux_broker" / "handlers" / "main.yml")]
TEMPLATES = sorted((REPO / "roles").glob("*/templates/*.j2"))
BLOCK_KEYS = {"block", "rescue", "always"}
TASK_KEYWORDS = {
    "name",
    "when",
    "tags",
    "register",
    "vars",
    "loop",
    "loop_control",
    "notify",
    "listen",
    "changed_when",
    "failed_when",
    "check_mode",
    "no_log",
    "run_once",
    "delegate_to",
    "become",
    "ignore_errors",
    "ignore_unreachable",
    "until",
    "retries",
    "delay",
    "environment",
    *BLOCK_KEYS,
}


def _filters():
    path = REPO / "roles" / "flux_broker" / "filter_plugins" / "flux_broker.py"
    spec = importlib.util.spec_from_file_location("flux_broker_filters", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


FILTERS = _filters()


def _tasks(items):
    for task in items or []:
        yield task
        for key in BLOCK_KEYS:
            yield from _tasks(task.get(key))


def _module(task) -> str:
    keys = [k for k in task if k not in TASK_KEYWORDS]
    assert len(keys) == 1, f"task {task.get('name')!r} has action keys {keys}"
    return keys[0]


def _ansible(*args: str) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
        "PATH": f"{VENV_BIN}:{os.environ.get('PATH', '')}",
    }
    return subprocess.run(
        [str(VENV_BIN / "ansible-playbook"), *args],
        cwd=REPO,
        env=env,
        text=True,
        capture_output=True,
        timeout=120,
    )


# --- playbooks --------------------------------------------------------------------------------


def test_site_playbook_passes_syntax_check():
    result = _ansible("-i", "playbooks/inventory/hosts.ini", "playbooks/site.yml", "--syntax-check")
    assert result.returncode == 0, result.stderr


def test_site_lists_every_stage_with_tags():
    result = _ansible("-i", "playbooks/inventory/hosts.ini", "playbooks/site.yml", "--list-tasks")
    assert result.returncode == 0, result.stderr
    for tag in ("preflight", "install", "configure"):
        assert tag in result.stdout
    for play in (
        "Check the inventory",
        "Preflight checks on every host",
        "Install flux-core",
        "Bootstrap the system instance",
        "Verify the system instance",
    ):
        assert play in result.stdout


@pytest.mark.parametrize("role", ROLES)
def test_argument_specs_mirror_defaults(role):
    defaults = yaml.safe_load((REPO / "roles" / role / "defaults" / "main.yml").read_text())
    specs = yaml.safe_load((REPO / "roles" / role / "meta" / "argument_specs.yml").read_text())
    options = specs["argument_specs"]["main"]["options"]
    assert set(options) == set(defaults)
    for name, option in options.items():
        assert option.get("description"), f"{name} lacks a description"
        assert option.get("default") == defaults[name], f"{name}: spec default differs"


@pytest.mark.parametrize("role", ROLES)
def test_public_variables_carry_the_role_prefix(role):
    defaults = yaml.safe_load((REPO / "roles" / role / "defaults" / "main.yml").read_text())
    assert all(name.startswith(f"{role}_") for name in defaults)
    derived = yaml.safe_load((REPO / "roles" / role / "vars" / "main.yml").read_text())
    assert all(name.startswith(f"_{role}_") for name in derived)


@pytest.mark.parametrize(("role", "path"), TASK_FILES, ids=lambda p: getattr(p, "name", p))
def test_tasks_are_named_sentences_with_fqcn_modules(role, path):
    for task in _tasks(yaml.safe_load(path.read_text())):
        assert str(task.get("name", "")).startswith(PREFIX[role]), f"{path.name}: {task}"
        if not BLOCK_KEYS & set(task):
            assert _module(task).startswith("ansible.builtin."), f"{path.name}: {task['name']}"


@pytest.mark.parametrize(("role", "path"), TASK_FILES, ids=lambda p: getattr(p, "name", p))
def test_commands_declare_whether_they_change_anything(role, path):
    for task in _tasks(yaml.safe_load(path.read_text())):
        if BLOCK_KEYS & set(task) or _module(task) not in (
            "ansible.builtin.command",
            "ansible.builtin.shell",
        ):
            continue
        args = task[_module(task)]
        assert "changed_when" in task or "creates" in args, f"{path.name}: {task['name']}"
        if task.get("changed_when") is False:
            assert task.get("check_mode") is False, f"read-only probe runs in --check: {task}"


@pytest.mark.parametrize("path", TEMPLATES, ids=lambda p: p.name)
def test_templates_start_with_ansible_managed(path):
    lines = path.read_text().splitlines()
    start = 1 if lines[0].startswith("#!") else 0
    assert lines[start] == "{{ ansible_managed | comment }}"


def test_every_task_that_touches_a_secret_is_no_log():
    tasks = list(
        _tasks(
            yaml.safe_load((REPO / "roles" / "flux_broker" / "tasks" / "secret.yml").read_text())
        )
    )
    touching = [
        t
        for t in tasks
        if not BLOCK_KEYS & set(t)
        and _module(t) in ("ansible.builtin.copy", "ansible.builtin.fetch")
    ]
    assert len(touching) == 4
    assert all(t.get("no_log") is True for t in touching), [t["name"] for t in touching]


def test_controller_temp_files_are_private():
    tasks = list(
        _tasks(
            yaml.safe_load((REPO / "roles" / "flux_broker" / "tasks" / "secret.yml").read_text())
        )
    )
    local_copies = [
        t
        for t in tasks
        if t.get("delegate_to") == "localhost" and _module(t) == "ansible.builtin.copy"
    ]
    assert local_copies and all(t[_module(t)]["mode"] == "0600" for t in local_copies)


# --- filters ----------------------------------------------------------------------------------


def test_generated_curve_cert_parses_as_a_key_pair():
    cert = FILTERS.flux_curve_cert("cluster-a")
    parsed = FILTERS.flux_curve_cert_parse(cert)
    assert 'name = "cluster-a"' in cert
    assert len(parsed["public"]) == len(parsed["secret"]) == 40


def test_curve_certs_are_fresh_each_time():
    assert FILTERS.flux_curve_cert("x") != FILTERS.flux_curve_cert("x")


def test_curve_cert_with_mismatched_keys_is_invalid():
    one, two = FILTERS.flux_curve_cert("a"), FILTERS.flux_curve_cert("a")
    public_two = next(line for line in two.splitlines() if "public-key" in line)
    forged = "\n".join(public_two if "public-key" in line else line for line in one.splitlines())
    assert FILTERS.flux_curve_cert_valid(one)
    assert not FILTERS.flux_curve_cert_valid(forged)


def test_curve_cert_metadata_flux_would_reject_is_refused():
    with pytest.raises(Exception, match="flux rejects"):
        FILTERS.flux_curve_cert("a,b")
    assert not FILTERS.flux_curve_cert_valid(FILTERS.flux_curve_cert("a").replace('"a"', '"a,b"'))


@pytest.mark.parametrize(
    ("value", "toml"),
    [
        (True, "true"),
        (3, "3"),
        ('a"b', '"a\\"b"'),
        (["x", 1], '["x", 1]'),
        ({"host": "n1", "bind": "tcp://*:1"}, '{ host = "n1", bind = "tcp://*:1" }'),
    ],
)
def test_flux_toml_renders_values(value, toml):
    assert FILTERS.flux_toml(value) == toml


def test_duplicates_are_reported_once_in_order():
    assert FILTERS.flux_duplicates(["a", "b", "a", "c", "b", "a"]) == ["a", "b"]


# --- template rendering -----------------------------------------------------------------------


def test_system_config_renders_to_the_flux_schema():
    env = jinja2.Environment(
        trim_blocks=True,
        lstrip_blocks=True,
        undefined=jinja2.StrictUndefined,
        loader=jinja2.FileSystemLoader(REPO / "roles/flux_broker/templates"),
    )
    env.filters.update(
        flux_toml=FILTERS.flux_toml, bool=bool, comment=lambda text: f"#\n# {text}\n#"
    )
    hosts = [
        {"host": f"n{i}", "bind": f"tcp://10.0.0.{i}:8050", "connect": f"tcp://10.0.0.{i}:8050"}
        for i in range(3)
    ]
    text = env.get_template("system.toml.j2").render(
        ansible_managed="Ansible managed",
        flux_broker_inventory_group="flux",
        flux_broker_curve_cert_path="/etc/flux/system/curve.cert",
        _flux_broker_hosts=hosts,
        _flux_broker_tbon_topo="kary:2",
        flux_broker_tbon_settings={"tcp_user_timeout": "20s"},
        flux_broker_resource_norestrict=False,
        flux_broker_resource_exclude="n0",
        flux_broker_resource_verify={"default": "allow-extra"},
        _flux_broker_resource_config=[{"hosts": "n[0-2]", "cores": "0-3"}],
        flux_broker_extra_config={"sched-fluxion-resource": {"match-policy": "lonodex"}},
    )
    config = tomllib.loads(text)
    assert config["bootstrap"]["hosts"] == hosts
    assert config["bootstrap"]["curve_cert"] == "/etc/flux/system/curve.cert"
    assert config["tbon"] == {"topo": "kary:2", "tcp_user_timeout": "20s"}
    assert config["resource"]["exclude"] == "n0"
    assert config["resource"]["verify"] == {"default": "allow-extra"}
    assert config["resource"]["config"] == [{"hosts": "n[0-2]", "cores": "0-3"}]
    assert config["sched-fluxion-resource"] == {"match-policy": "lonodex"}


# --- lab script -------------------------------------------------------------------------------


def test_lab_script_documents_its_commands():
    result = subprocess.run(
        [str(REPO / "scripts" / "lab"), "--help"], text=True, capture_output=True
    )
    assert result.returncode == 0
    for command in ("up", "down", "status", "inventory", "exec"):
        assert command in result.stdout


def test_lab_refuses_a_silly_host_count():
    result = subprocess.run(
        [str(REPO / "scripts" / "lab"), "up", "0"],
        text=True,
        capture_output=True,
        env={**os.environ, "FLUXINFRA_LAB_DIR": "/nonexistent/lab"},
    )
    assert result.returncode == 2
    assert result.stderr.startswith("lab: ")
    assert not Path("/nonexistent/lab").exists()


def test_lab_hides_what_the_roles_create():
    """New lab hosts must not see this machine's copies of the roles' accounts and paths."""
    lab = lab_script()
    defaults = {}
    for role in ROLES:
        path = REPO / "roles" / role / "defaults" / "main.yml"
        defaults.update(yaml.safe_load(path.read_text()))
    assert {defaults["flux_install_user"], defaults["flux_install_group"]} <= set(
        lab.HIDDEN_ACCOUNTS
    )
    owned = [
        defaults[name]
        for name in (
            "flux_install_prefix",
            "flux_install_profile_script",
            "flux_install_statedir",
            "flux_install_logdir",
            "flux_broker_config_dir",
            "flux_broker_curve_cert_path",
            "flux_broker_munge_key_path",
            "flux_broker_supervisor_path",
            "flux_broker_unit_path",
        )
    ]
    for path in owned:
        assert any(path == h or path.startswith(h + "/") for h in lab.HIDDEN_PATHS), path
    # the run directory needs no hiding: /run is an empty tmpfs on every lab host
    assert defaults["flux_install_rundir"].startswith("/run/")


def test_lab_account_files_drop_the_hidden_accounts_and_memberships():
    lab = lab_script()
    passwd = "root:x:0:0:root:/root:/bin/bash\nflux:x:999:995::/var/lib/flux:/usr/sbin/nologin\n"
    group = "root:x:0:\nflux:x:995:\nadm:x:4:syslog,flux,alice\nstaff:x:50:flux\n"
    gshadow = "adm:*:flux:syslog,flux\nflux:!::\n"
    assert lab.without_accounts(passwd, "passwd") == "root:x:0:0:root:/root:/bin/bash\n"
    assert lab.without_accounts(group, "group") == "root:x:0:\nadm:x:4:syslog,alice\nstaff:x:50:\n"
    assert lab.without_accounts(gshadow, "gshadow") == "adm:*::syslog\n"
    # a file without them comes back byte for byte
    assert lab.without_accounts(group.replace("flux", "fluxx"), "group") == group.replace(
        "flux", "fluxx"
    )


@pytest.mark.parametrize(
    ("share", "shared"),
    [
        (["/opt/flux"], True),
        (["/opt/flux/0.88"], True),  # a prefix below a hidden path keeps the path
        (["/opt"], True),  # sharing a parent shares what lies below it
        (["/opt/flux-0.88"], False),  # a sibling is not the hidden path
        ([], False),
    ],
)
def test_lab_share_keeps_a_hidden_path_visible(share, shared):
    assert lab_script().shared_by("/opt/flux", share) is shared
