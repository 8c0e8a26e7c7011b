"""The shell and Python the components ship in ConfigMaps parse (bash -n, compile), and the
broker configs are valid TOML."""

import shutil
import subprocess
import tomllib

import pytest

from fluxinfra.k8s.installer import FluxInstallerArgs, installer_scripts
from fluxinfra.k8s.minicluster import MiniClusterArgs, broker_config, minicluster_manifests

INSTALLERS = {"conda": FluxInstallerArgs(), "prefix": FluxInstallerArgs(source="prefix")}
MINICLUSTERS = {
    "ephemeral": MiniClusterArgs(name="e", size=2, max_size=3,
                                 command="flux run -N2 sh -c 'echo \"$HOSTNAME\" $((1+1))'"),
    "persistent": MiniClusterArgs(name="p", mode="persistent", size=1),
}


def shell_scripts():
    for variant, args in INSTALLERS.items():
        for name, text in installer_scripts(args).items():
            if name.endswith(".sh") or name == "flux-connect":
                yield f"installer-{variant}-{name}", text
    for variant, args in MINICLUSTERS.items():
        config = next(m for m in minicluster_manifests(args) if m["kind"] == "ConfigMap")
        yield f"minicluster-{variant}-start.sh", config["data"]["start.sh"]


@pytest.mark.skipif(shutil.which("bash") is None, reason="bash is not installed")
@pytest.mark.parametrize("name, text", list(shell_scripts()), ids=lambda v: v if
                         isinstance(v, str) and len(v) < 60 else "")
def test_shell_script_parses(name, text):
    proc = subprocess.run(["bash", "-n"], input=text, text=True, capture_output=True)
    assert proc.returncode == 0, f"{name}: {proc.stderr}"
    assert text.startswith("#!/bin/"), name


@pytest.mark.skipif(shutil.which("shellcheck") is None,
                    reason="shellcheck is not installed (scripts/apt-packages.txt lists it)")
@pytest.mark.parametrize("name, text", list(shell_scripts()), ids=lambda v: v if
                         isinstance(v, str) and len(v) < 60 else "")
def test_shell_script_passes_shellcheck(name, text):
    shell = "bash" if "bash" in text.splitlines()[0] else "sh"
    proc = subprocess.run(["shellcheck", "--severity=warning", "-s", shell, "-"], input=text,
                          text=True, capture_output=True)
    assert proc.returncode == 0, f"{name}:\n{proc.stdout}"


def test_node_watch_compiles_and_settings_are_json():
    import json
    scripts = installer_scripts(FluxInstallerArgs(fanout=4))
    compile(scripts["node-watch.py"], "node-watch.py", "exec")
    assert json.loads(scripts["node-watch.json"])["topology"] == "kary:4"


def test_minicluster_command_is_quoted_once_for_bash():
    args = MINICLUSTERS["ephemeral"]
    start = next(m for m in minicluster_manifests(args) if m["kind"] == "ConfigMap")["data"][
        "start.sh"]
    line = next(ln for ln in start.splitlines() if "bash -c" in ln)
    quoted = line.split("bash -c ", 1)[1]
    echoed = subprocess.run(["bash", "-c", f"printf %s {quoted}"], capture_output=True, text=True)
    assert echoed.stdout == args.command


@pytest.mark.parametrize("variant", list(MINICLUSTERS))
def test_minicluster_broker_config_is_toml(variant):
    args = MINICLUSTERS[variant]
    config = tomllib.loads(broker_config(args))
    assert len(config["bootstrap"]["hosts"]) == args.hosts
    assert config["bootstrap"]["hosts"][0]["host"] == f"{args.name}-0"


def test_minicluster_fqdns_follow_the_cluster_domain():
    args = MiniClusterArgs(name="m", namespace="ns", size=1, cluster_domain="hpc.example",
                           mode="persistent")
    hosts = tomllib.loads(broker_config(args))["bootstrap"]["hosts"]
    assert hosts[0]["connect"] == "tcp://m-0.m.ns.svc.hpc.example:8050"
