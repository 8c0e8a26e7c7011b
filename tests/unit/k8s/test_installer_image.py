"""The installer DaemonSet runs the fluxinfra image as root with its own command, not the image's
ENTRYPOINT: everything that command, its scripts and its probes call inside the container must be
in the image, and its mounts must not hide a directory of the image.

Runs the local image (``make image`` builds ``localhost/fluxinfra:<version>``) with podman;
skipped, with the reason, where there is no root, no podman or no such image.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from fluxinfra.k8s.installer import FluxInstallerArgs, installer_manifests, installer_scripts
from fluxinfra.k8s.manifests import DEFAULT_IMAGE

ROOT = Path(__file__).resolve().parents[3]
IMAGE = f"localhost/{DEFAULT_IMAGE}"
#: Commands the installer's entrypoint script runs inside the container (the Flux install and
#: the broker run on the host, through nsenter), with a word of the script that shows the use.
SCRIPT_COMMANDS = {"install": "install -m", "cat": "$(cat ", "chmod": "chmod 0755",
                   "mv": "mv \"$mamba.tmp\"", "nsenter": "nsenter -t 1", "python3": "python3 "}
#: Standard-library modules the in-container Python (micromamba fetch, node-watch.py) imports.
PYTHON_MODULES = ("bz2", "hashlib", "io", "json", "platform", "ssl", "subprocess", "tarfile",
                  "urllib.request")


def why_not() -> str | None:
    if os.geteuid() != 0:
        return "needs root for podman's storage"
    if shutil.which("podman") is None:
        return "needs podman (scripts/apt-packages.txt)"
    if podman("image", "exists", IMAGE).returncode != 0:
        return f"no local image {IMAGE}; build it with `make image`"
    return None


def podman(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ}
    env.setdefault("CONTAINERS_CONF", str(ROOT / "tests" / "image" / "containers.conf"))
    return subprocess.run(["podman", *args], env=env, capture_output=True, text=True,
                          timeout=120, check=False)


def as_root(script: str) -> subprocess.CompletedProcess[str]:
    return podman("run", "--rm", "--network=none", "--user", "0", "--entrypoint", "/bin/bash",
                  IMAGE, "-c", script)


@pytest.fixture(scope="module")
def installer():
    if reason := why_not():
        pytest.skip(reason)
    args = FluxInstallerArgs(source="conda-forge")
    daemonset = next(mf for mf in installer_manifests("flux", args) if mf["kind"] == "DaemonSet")
    return args, daemonset["spec"]["template"]["spec"]["containers"][0]


def test_what_the_installer_runs_is_in_the_image(installer):
    args, container = installer
    entry = installer_scripts(args)["entrypoint.sh"]
    for command, use in SCRIPT_COMMANDS.items():
        assert use in entry, f"entrypoint.sh no longer runs {command!r}; update SCRIPT_COMMANDS"
    needed = {container["command"][0], *SCRIPT_COMMANDS}
    needed |= {container[p]["exec"]["command"][0] for p in ("startupProbe", "livenessProbe")}
    # Probes are exec'd without a shell, so a shell builtin (test) must exist as a file too.
    script = "; ".join(f"p=$(type -P {shlex.quote(c)}) || p=MISSING; echo {shlex.quote(c)} $p"
                       for c in sorted(needed))
    script += "; python3 -c " + shlex.quote("import " + ", ".join(PYTHON_MODULES))
    script += " && echo python3-modules ok"
    proc = as_root(script)
    found = dict(line.split(" ", 1) for line in proc.stdout.splitlines())
    missing = sorted(c for c in needed if found.get(c, "MISSING") == "MISSING")
    assert not missing, f"{IMAGE} lacks {missing} (the base image's packages: scripts/base-image)"
    assert found.get("python3-modules") == "ok", f"{IMAGE}: {proc.stderr.strip()}"


def test_installer_mounts_hide_nothing_of_the_image(installer):
    _, container = installer
    paths = [v["mountPath"] for v in container["volumeMounts"]
             if not v["mountPath"].startswith("/host")]
    proc = as_root("; ".join(f"[ -e {shlex.quote(p)} ] && echo {shlex.quote(p)}" for p in paths)
                   + "; true")
    assert proc.returncode == 0, proc.stderr
    shadowed = [p for p in proc.stdout.split() if p != "/tmp"]
    assert not shadowed, f"installer mounts hide {shadowed} of {IMAGE}"
