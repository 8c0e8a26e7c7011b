"""The shell and Python the components ship in ConfigMaps parse (bash -n, shellcheck, compile),
and every broker config they write is TOML that flux-core 0.88's parsers accept."""

import json
import shutil
import subprocess
import tomllib

import pytest
from flux_config_schema import host_count, problems

from fluxinfra.k8s.installer import FluxInstallerArgs, installer_scripts
from fluxinfra.k8s.minicluster import MiniClusterArgs, broker_config, config_data

INSTALLERS = {"conda": FluxInstallerArgs(), "prefix": FluxInstallerArgs(source="prefix")}
MINICLUSTERS = {
    "ephemeral": MiniClusterArgs(name="e", size=2, max_size=3,
                                 command="sh -c 'echo \"$HOSTNAME\" $((1+1))'"),
    "launcher": MiniClusterArgs(name="l", size=2, launcher=True,
                                command="flux submit -N2 hostname\nflux queue drain"),
    "persistent": MiniClusterArgs(name="p", mode="persistent", size=1, max_size=8),
    "view": MiniClusterArgs(name="v", size=4, command="./a.out", flux_view_image="view:1",
                            pre_command="mkdir -p /scratch/$HOSTNAME", cores_per_broker=8,
                            gpus_per_broker=2, tasks=16, host_network=True,
                            queue_policy="easy", fanout=16),
}


def shell_scripts():
    for variant, args in INSTALLERS.items():
        for name, text in installer_scripts(args).items():
            if name.endswith(".sh") or name == "flux-connect":
                yield f"installer-{variant}-{name}", text
    for variant, args in MINICLUSTERS.items():
        for name, text in config_data(args).items():
            if name.endswith(".sh") or name == "flux-connect":
                yield f"minicluster-{variant}-{name}", text


SCRIPTS = list(shell_scripts())
IDS = [name for name, _ in SCRIPTS]


@pytest.mark.skipif(shutil.which("bash") is None, reason="bash is not installed")
@pytest.mark.parametrize("name, text", SCRIPTS, ids=IDS)
def test_shell_script_parses(name, text):
    proc = subprocess.run(["bash", "-n"], input=text, text=True, capture_output=True)
    assert proc.returncode == 0, f"{name}: {proc.stderr}"
    assert text.startswith("#!/bin/"), name


@pytest.mark.skipif(shutil.which("shellcheck") is None,
                    reason="shellcheck is not installed (scripts/apt-packages.txt lists it)")
@pytest.mark.parametrize("name, text", SCRIPTS, ids=IDS)
def test_shell_script_passes_shellcheck(name, text):
    shell = "bash" if "bash" in text.splitlines()[0] else "sh"
    proc = subprocess.run(["shellcheck", "--severity=warning", "-s", shell, "-"], input=text,
                          text=True, capture_output=True)
    assert proc.returncode == 0, f"{name}:\n{proc.stdout}"


def test_node_watch_and_fluxconf_compile_and_settings_are_json():
    scripts = installer_scripts(FluxInstallerArgs(fanout=4, install_memory="3Gi"))
    compile(scripts["node-watch.py"], "node-watch.py", "exec")
    compile(scripts["fluxconf.py"], "fluxconf.py", "exec")
    settings = json.loads(scripts["node-watch.json"])
    assert settings["topology"] == "kary:4"
    assert settings["installMemoryBytes"] == 3 * 2**30
    assert settings["rankMap"] == "flux-installer-ranks" and settings["maxNodes"] == 16


def test_broker_digest_changes_with_what_the_broker_runs_only():
    def digest(**kw):
        return json.loads(installer_scripts(FluxInstallerArgs(**kw))["node-watch.json"])[
            "brokerDigest"]

    base = digest()
    assert digest(flux_core_version="0.86.0") != base
    assert digest(prefix="/opt/other") != base
    assert digest(settle_seconds=99) == base, "node-watch settings restart no broker"
    assert digest(install_memory="8Gi") == base


def _bash(script: str) -> str:
    return subprocess.run(["bash", "-c", script], capture_output=True, text=True,
                          check=True).stdout


def test_minicluster_command_runs_verbatim_after_flux_run():
    args = MINICLUSTERS["ephemeral"]
    run = config_data(args)["run.sh"]
    assert f"flux run -N 2 -- {args.command}\n" in run
    line = next(ln for ln in run.splitlines() if ln.startswith('log "running:'))
    assert _bash(f'log() {{ echo "$*"; }}; {line}') == \
        f"running: flux run -N 2 -- {args.command}\n", "the log shows the command as given"


def test_launcher_runs_its_script_through_bash_quoted_once():
    args = MINICLUSTERS["launcher"]
    run = config_data(args)["run.sh"]
    start = run.index("\nbash -c ") + len("\nbash -c ")
    quoted = run[start:run.index("\nstatus=$?")]
    assert _bash(f"printf %s {quoted}") == args.command


@pytest.mark.parametrize("variant", list(MINICLUSTERS))
def test_minicluster_broker_config_is_flux_toml(variant):
    args = MINICLUSTERS[variant]
    config = tomllib.loads(broker_config(args))
    assert problems(config) == []
    assert host_count(config) == args.hosts
    assert "noverify" not in config.get("resource", {})
    assert config["bootstrap"]["hosts"][0]["host"].startswith(f"{args.name}-")


def test_minicluster_fqdns_follow_the_cluster_domain():
    args = MiniClusterArgs(name="m", namespace="ns", size=1, cluster_domain="hpc.example",
                           mode="persistent")
    boot = tomllib.loads(broker_config(args))["bootstrap"]
    assert boot["default_connect"] == "tcp://%h.m.ns.svc.hpc.example:%p"
    assert boot["hosts"] == [{"host": "m-0"}]


def test_r_comes_from_the_pods_or_from_the_stack():
    local = config_data(MiniClusterArgs(name="a", size=2, max_size=5, command="x"))["start.sh"]
    assert "flux R encode '--hosts=a-[0-4]' --local" in local
    fixed = config_data(MINICLUSTERS["view"])["start.sh"]
    assert "flux R encode '--hosts=v-[0-3]' --cores=0-7 --gpus=0-1" in fixed
    one = config_data(MiniClusterArgs(name="o", size=1, command="x", cores_per_broker=1))
    assert "flux R encode --hosts=o-0 --cores=0" in one["start.sh"]


def test_schema_catches_what_flux_would_refuse():
    bad = tomllib.loads('[bootstrap]\ncurve_cert = "/c"\nport = 1\nhosts = [{host = "a[1"}]\n'
                        '[resource]\nnoverify = "yes"\nverify = {hostname = "loose"}\n'
                        '[tbon]\ntopo = "ring"\n')
    found = "\n".join(problems(bad))
    for needle in ("[bootstrap] port: unknown key", "hosts[0].host", "noverify: 'yes'",
                   "hostname = 'loose'", "'ring'"):
        assert needle in found, found
