"""flux-install.sh, run for real against a temporary node layout: micromamba, useradd, chown and
systemctl are stand-ins on PATH (the script itself, its idempotence, upgrades by symlink switch
and its refusals are what is under test)."""

import os
import shutil
import stat
import subprocess
import time
from dataclasses import replace
from pathlib import Path

import pytest

from fluxinfra.k8s.installer import FluxInstallerArgs, installer_scripts

pytestmark = pytest.mark.skipif(shutil.which("bash") is None, reason="bash is not installed")

FAKES = {
    # Creates the environment with a `flux` that reports the requested flux-core version.
    "micromamba": r"""#!/bin/bash
prefix= core=
while [ $# -gt 0 ]; do
  case "$1" in
    --prefix) prefix=$2; shift 2 ;;
    flux-core=*) core=${1#flux-core=}; shift ;;
    *) shift ;;
  esac
done
mkdir -p "$prefix/bin"
printf '#!/bin/sh\necho "commands:    %s"\necho "libflux-core: %s"\n' "$core" "$core" \
  > "$prefix/bin/flux"
chmod 0755 "$prefix/bin/flux"
echo "$prefix" >> "$FAKE_LOG/micromamba"
""",
    "id": "#!/bin/sh\nexit 0\n",                      # every user exists
    "useradd": "#!/bin/sh\nexit 0\n",
    "chown": "#!/bin/sh\nexit 0\n",
    "munged": "#!/bin/sh\nexit 0\n",                  # the node runs munge
    "systemctl": '#!/bin/sh\necho "$*" >> "$FAKE_LOG/systemctl"\n',
    # install without -o/-g (the test is not root-owned)
    "install": r"""#!/bin/bash
args=()
while [ $# -gt 0 ]; do
  case "$1" in -o|-g) shift 2 ;; *) args+=("$1"); shift ;; esac
done
exec /usr/bin/install "${args[@]}"
""",
}


@pytest.fixture
def node(tmp_path):
    """A node layout under tmp_path, the stand-ins, and a function that runs the script."""
    fakes = tmp_path / "fakes"
    fakes.mkdir()
    for name, text in FAKES.items():
        (fakes / name).write_text(text)
        (fakes / name).chmod(0o755)
    (tmp_path / "log").mkdir()
    args = FluxInstallerArgs(prefix=str(tmp_path / "opt/flux"), lib_dir=str(tmp_path / "lib"),
                             etc_dir=str(tmp_path / "etc"), state_dir=str(tmp_path / "state"),
                             run_dir=str(tmp_path / "run"), munge_dir=str(tmp_path / "munge"),
                             bin_dir=str(tmp_path / "bin"))
    for d in ("lib/bin", "etc", "bin", "opt"):
        (tmp_path / d).mkdir(parents=True, exist_ok=True)
    shutil.copy(fakes / "micromamba", tmp_path / "lib/bin/micromamba")
    (tmp_path / "etc/curve.cert").write_text("cert")
    (tmp_path / "etc/munge.key").write_bytes(os.urandom(1024))

    def run(a: FluxInstallerArgs = args) -> subprocess.CompletedProcess:
        scripts = installer_scripts(a)
        for name in ("flux-install.sh", "flux-connect"):
            (tmp_path / "lib" / name).write_text(scripts[name])
        env = {**os.environ, "PATH": f"{fakes}:{os.environ['PATH']}",
               "FAKE_LOG": str(tmp_path / "log")}
        return subprocess.run(["bash", str(tmp_path / "lib/flux-install.sh")], env=env,
                              capture_output=True, text=True, timeout=60)

    return tmp_path, args, run


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def test_first_run_installs_the_pins_behind_a_symlink(node):
    root, args, run = node
    proc = run()
    assert proc.returncode == 0, proc.stderr
    env = root / "opt/flux.envs/flux-core-0.85.0_flux-sched-0.54.0"
    assert os.readlink(root / "opt/flux") == str(env)
    assert (env / ".fluxinfra-complete").exists()
    assert "ok: commands:    0.85.0" in proc.stderr
    assert stat.S_IMODE((root / "munge/munge.key").stat().st_mode) == 0o400
    assert (root / "munge/munge.key").read_bytes() == (root / "etc/munge.key").read_bytes()
    assert stat.S_IMODE((root / "etc/curve.cert").stat().st_mode) == 0o400
    assert os.access(root / "bin/flux-connect", os.X_OK)
    assert (root / "state").is_dir() and (root / "run").is_dir()


def test_second_run_changes_nothing(node):
    root, args, run = node
    assert run().returncode == 0
    assert run().returncode == 0
    assert len(lines(root / "log/micromamba")) == 1
    assert lines(root / "log/systemctl") == ["restart munge"]  # only when the key changed


def test_new_pins_install_beside_and_switch_the_link(node):
    root, args, run = node
    assert run().returncode == 0
    newer = replace(args, flux_core_version="0.86.0", flux_sched_version="0.55.0")
    proc = run(newer)
    assert proc.returncode == 0, proc.stderr
    assert os.readlink(root / "opt/flux").endswith("flux-core-0.86.0_flux-sched-0.55.0")
    assert (root / "opt/flux.envs/flux-core-0.85.0_flux-sched-0.54.0/bin/flux").exists()
    assert len(lines(root / "log/micromamba")) == 2
    back = run()  # going back is only a relink
    assert back.returncode == 0 and len(lines(root / "log/micromamba")) == 2
    assert os.readlink(root / "opt/flux").endswith("flux-core-0.85.0_flux-sched-0.54.0")


def test_an_interrupted_install_is_redone(node):
    root, args, run = node
    env = root / "opt/flux.envs/flux-core-0.85.0_flux-sched-0.54.0"
    (env / "bin").mkdir(parents=True)  # left by a crash: no completion marker
    assert run().returncode == 0
    assert len(lines(root / "log/micromamba")) == 1 and (env / ".fluxinfra-complete").exists()


def test_a_foreign_prefix_is_left_alone(node):
    root, args, run = node
    (root / "opt/flux").mkdir(parents=True)
    proc = run()
    assert proc.returncode == 1
    assert "is not a fluxinfra-managed symlink" in proc.stderr
    assert not lines(root / "log/micromamba")


def test_source_prefix_needs_flux_there(node):
    root, args, run = node
    proc = run(replace(args, source="prefix"))
    assert proc.returncode == 1 and "bin/flux is missing" in proc.stderr


def test_a_failed_install_removes_its_partial_environment_and_says_why(node):
    root, args, run = node
    assert run().returncode == 0
    failing = root / "lib/bin/micromamba"
    failing.write_text('#!/bin/bash\nfor a; do case $a in --prefix) p=1;; *) [ "$p" = 1 ] && '
                       'mkdir -p "$a/bin" && p=;; esac; done\necho "solve failed" >&2\nexit 3\n')
    proc = run(replace(args, flux_core_version="0.86.0"))
    assert proc.returncode == 3
    assert "removed the partial" in proc.stderr and "is unchanged" in proc.stderr
    assert not (root / "opt/flux.envs/flux-core-0.86.0_flux-sched-0.54.0").exists()
    assert os.readlink(root / "opt/flux").endswith("flux-core-0.85.0_flux-sched-0.54.0"), \
        "the node keeps the Flux it had"


REAL_FLUX = os.environ.get("FLUXINFRA_FLUX_PREFIX", "/opt/flux")


@pytest.mark.skipif(not os.access(f"{REAL_FLUX}/bin/flux", os.X_OK),
                    reason=f"no Flux build at {REAL_FLUX} (FLUXINFRA_FLUX_PREFIX; CI has none)")
def test_source_prefix_uses_a_real_flux_where_it_is(node):
    root, args, run = node
    proc = run(replace(args, source="prefix", prefix=REAL_FLUX, flux_core_version="0.88.0"))
    assert proc.returncode == 0, proc.stderr
    assert f"using the Flux already installed at {REAL_FLUX}" in proc.stderr
    assert "ok: commands:" in proc.stderr and "0.88.0" in proc.stderr
    assert "warning" not in proc.stderr


# -- fluxinfra-host.sh and flux-start.sh against stand-in file trees ----------------------------

def host_script(tmp_path, args=None):
    path = tmp_path / "fluxinfra-host.sh"
    path.write_text(installer_scripts(args or FluxInstallerArgs())["fluxinfra-host.sh"])
    return path


def cgroup_v2(tmp_path):
    root = tmp_path / "cg"
    root.mkdir()
    (root / "cgroup.controllers").write_text("cpu memory pids\n")
    (root / "cgroup.subtree_control").write_text("cpu\n")
    return root


def test_host_run_without_systemd_moves_into_a_v2_cgroup_with_the_memory_limit(tmp_path):
    root = cgroup_v2(tmp_path)
    # On a real cgroupfs the kernel creates the control files; here mkdir makes the directory
    # and the script's writes are what is checked.
    env = {**os.environ, "FLUXINFRA_CGROUP_ROOT": str(root), "PATH": "/usr/bin:/bin"}
    proc = subprocess.run(["bash", str(host_script(tmp_path)), "run", "fluxinfra-install",
                           str(4 * 2**30), "60", "sh", "-c", "echo installing; exit 5"],
                          env=env, capture_output=True, text=True)
    assert proc.returncode == 5 and proc.stdout == "installing\n", proc.stderr
    assert "in the cgroup /fluxinfra/fluxinfra-install (no systemd)" in proc.stderr
    group = root / "fluxinfra/fluxinfra-install"
    assert (group / "memory.max").read_text() == f"{4 * 2**30}\n"
    assert (group / "cgroup.procs").read_text().strip().isdigit()
    assert "+memory" in (root / "fluxinfra/cgroup.subtree_control").read_text()
    assert "+memory" in (root / "cgroup.subtree_control").read_text()


def test_host_run_moves_through_every_v1_hierarchy_and_fills_cpuset(tmp_path):
    root = tmp_path / "cg"
    for hier in ("memory", "cpu", "cpuset"):
        (root / hier).mkdir(parents=True)
        (root / hier / "cgroup.procs").write_text("")
    (root / "cpuset/cpuset.cpus").write_text("0-1\n")
    (root / "cpuset/cpuset.mems").write_text("0\n")
    (root / "cpuset/fluxinfra/unit").mkdir(parents=True)
    (root / "cpuset/fluxinfra/unit/cpuset.cpus").write_text("")   # the kernel makes it empty
    (root / "memory/fluxinfra/unit").mkdir(parents=True)
    (root / "memory/fluxinfra/unit/memory.limit_in_bytes").write_text("")
    env = {**os.environ, "FLUXINFRA_CGROUP_ROOT": str(root), "PATH": "/usr/bin:/bin"}
    proc = subprocess.run(["bash", str(host_script(tmp_path)), "run", "unit", "1000", "60",
                           "true"], env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    for hier in ("memory", "cpu", "cpuset"):
        assert (root / hier / "fluxinfra/unit/cgroup.procs").read_text().strip().isdigit()
    assert (root / "memory/fluxinfra/unit/memory.limit_in_bytes").read_text() == "1000\n"
    assert (root / "cpuset/fluxinfra/unit/cpuset.cpus").read_text() == "0-1\n"


def test_host_run_says_so_when_it_cannot_leave_the_pods_cgroup(tmp_path):
    root = cgroup_v2(tmp_path)
    (root / "fluxinfra").write_text("not a directory")
    env = {**os.environ, "FLUXINFRA_CGROUP_ROOT": str(root), "PATH": "/usr/bin:/bin"}
    proc = subprocess.run(["bash", str(host_script(tmp_path)), "run", "u", "0", "60", "true"],
                          env=env, capture_output=True, text=True)
    assert proc.returncode == 0
    assert "could not leave the pod's cgroup; running true inside it" in proc.stderr


def test_host_run_uses_a_transient_unit_where_systemd_runs(tmp_path):
    fakes = tmp_path / "bin"
    fakes.mkdir()
    for name in ("systemd-run", "systemctl"):
        (fakes / name).write_text(f'#!/bin/sh\necho "{name} $*" >> {tmp_path}/calls\n')
        (fakes / name).chmod(0o755)
    text = installer_scripts(FluxInstallerArgs())["fluxinfra-host.sh"].replace(
        "[ -d /run/systemd/system ]", "true")   # this machine's PID 1 is not systemd
    (tmp_path / "host.sh").write_text(text)
    env = {**os.environ, "PATH": f"{fakes}:/usr/bin:/bin"}
    proc = subprocess.run(["bash", str(tmp_path / "host.sh"), "run", "fluxinfra-install",
                           "4096", "600", "/x/flux-install.sh"], env=env, capture_output=True,
                          text=True)
    assert proc.returncode == 0, proc.stderr
    calls = (tmp_path / "calls").read_text().splitlines()
    assert calls[-1] == ("systemd-run --unit=fluxinfra-install --wait --pipe --collect --quiet "
                         "--property=RuntimeMaxSec=600 --property=MemoryMax=4096 -- "
                         "/x/flux-install.sh")
    assert "systemctl stop fluxinfra-install" in calls[0]


def test_a_new_lead_moves_an_earlier_instances_statedir_aside(tmp_path):
    args = FluxInstallerArgs(lib_dir=str(tmp_path / "lib"), etc_dir=str(tmp_path / "etc"),
                             state_dir=str(tmp_path / "state"), run_dir=str(tmp_path / "run"),
                             flux_user="root", prefix=str(tmp_path / "flux"))
    scripts = installer_scripts(args)
    for d in ("lib", "etc/conf.d", "state", "run", "flux/bin"):
        (tmp_path / d).mkdir(parents=True, exist_ok=True)
    for name in ("flux-start.sh", "fluxinfra-host.sh"):
        (tmp_path / "lib" / name).write_text(scripts[name])
        (tmp_path / "lib" / name).chmod(0o755)
    # a broker that records its arguments and exits 42 (exit-norestart: the supervisor stops)
    (tmp_path / "flux/bin/flux").write_text(f'#!/bin/sh\necho "$@" > {tmp_path}/argv\nexit 42\n')
    (tmp_path / "flux/bin/flux").chmod(0o755)
    (tmp_path / "etc/conf.d/bootstrap.toml").write_text("[bootstrap]\n")
    (tmp_path / "state/content.sqlite").write_text("old instance")
    cg = cgroup_v2(tmp_path)
    env = {**os.environ, "FLUXINFRA_CGROUP_ROOT": str(cg)}

    def start(epoch):
        (tmp_path / "etc/broker.env").write_text(f"BROKER_HOSTNAME=fluxnode0\nLEAD_EPOCH={epoch}\n")
        subprocess.run(["bash", str(tmp_path / "lib/flux-start.sh"), "restart"], env=env,
                       check=True, capture_output=True, text=True)
        for _ in range(100):
            if (tmp_path / "argv").exists():
                break
            time.sleep(0.05)

    start(3)
    assert (tmp_path / "state.before-epoch-3/content.sqlite").read_text() == "old instance"
    assert (tmp_path / "state/.fluxinfra-lead-epoch").read_text() == "3\n"
    argv = (tmp_path / "argv").read_text()
    assert "-Shostname=fluxnode0" in argv and f"-Sstatedir={tmp_path}/state" in argv
    (tmp_path / "state/content.sqlite").write_text("epoch 3")
    (tmp_path / "argv").unlink()
    start(3)  # the same instance: the statedir stays
    assert (tmp_path / "state/content.sqlite").read_text() == "epoch 3"
    assert (cg / "fluxinfra/fluxinfra-broker/cgroup.procs").exists(), "the broker's own cgroup"


def test_removing_a_units_cgroup_leaves_others_and_busy_ones(tmp_path):
    root = cgroup_v2(tmp_path)
    for unit in ("done", "busy"):
        (root / "fluxinfra" / unit).mkdir(parents=True)
    (root / "fluxinfra/busy/cgroup.procs").write_text("42\n")  # rmdir fails on a non-empty dir
    env = {**os.environ, "FLUXINFRA_CGROUP_ROOT": str(root), "PATH": "/usr/bin:/bin"}
    proc = subprocess.run(["bash", str(host_script(tmp_path)), "remove", "done"], env=env,
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert not (root / "fluxinfra/done").exists() and (root / "fluxinfra/busy").exists()
