"""flux-install.sh, run for real against a temporary node layout: micromamba, useradd, chown and
systemctl are stand-ins on PATH (the script itself, its idempotence, upgrades by symlink switch
and its refusals are what is under test)."""

import os
import shutil
import stat
import subprocess
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
