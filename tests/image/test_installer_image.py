"""The installer DaemonSet runs the fluxinfra image as root with its own command, not the image's
ENTRYPOINT: everything that command, its scripts and its probes call inside the container must be
in the image, and its mounts must not hide a directory of the image.

Runs the image this directory's ``image`` fixture builds (the same Containerfile ``make image``
uses); skipped, with the reason, where there is no root or no podman.
"""

from __future__ import annotations

import shlex

import pytest
from image_podman import ULIMITS, podman, why_not_runnable

from fluxinfra.k8s.installer import FluxInstallerArgs, installer_manifests, installer_scripts

_SKIP_REASON = why_not_runnable()
pytestmark = [pytest.mark.image,
              pytest.mark.skipif(_SKIP_REASON is not None, reason=_SKIP_REASON or "")]
#: Commands the installer's entrypoint script runs inside the container (the Flux install and
#: the broker run on the host, through nsenter), with a word of the script that shows the use.
SCRIPT_COMMANDS = {"install": "install -m", "cat": "$(cat ", "chmod": "chmod 0755",
                   "mv": "mv \"$mamba.tmp\"", "python3": "python3 ", "touch": "touch ",
                   "sleep": "sleep 30"}
#: ... and bash builtins it relies on (no file needed): kill "$beat" ends the heartbeat loop.
#: Commands node-watch.py runs inside the container (the install and the broker run on the host).
NODE_WATCH_COMMANDS = {"nsenter": '["nsenter", "-t"'}
#: Standard-library modules the in-container Python (micromamba fetch, node-watch.py and the
#: fluxconf.py, hostlist.py, idset.py and tomli_w.py it imports) imports.
PYTHON_MODULES = ("bz2", "collections.abc", "contextlib", "copy", "datetime", "decimal",
                  "hashlib", "io", "json", "platform", "re", "ssl", "subprocess", "tarfile",
                  "threading", "types", "typing", "urllib.request")


def as_root(image: str, script: str) -> str:
    """Runs ``script`` with bash as root in ``image``, as the installer DaemonSet runs it."""
    return podman("run", "--rm", "--network=none", *ULIMITS, "--user", "0",
                  "--entrypoint", "/bin/bash", image, "-c", script).stdout


@pytest.fixture(scope="module")
def installer():
    args = FluxInstallerArgs(source="conda-forge")
    daemonset = next(mf for mf in installer_manifests("flux", args) if mf["kind"] == "DaemonSet")
    return args, daemonset["spec"]["template"]["spec"]["containers"][0]


def test_what_the_installer_runs_is_in_the_image(image, installer):
    args, container = installer
    entry = installer_scripts(args)["entrypoint.sh"]
    for command, use in SCRIPT_COMMANDS.items():
        assert use in entry, f"entrypoint.sh no longer runs {command!r}; update SCRIPT_COMMANDS"
    watch = installer_scripts(args)["node-watch.py"]
    for command, use in NODE_WATCH_COMMANDS.items():
        assert use in watch, f"node-watch.py no longer runs {command!r}; update the list"
    needed = {container["command"][0], *SCRIPT_COMMANDS, *NODE_WATCH_COMMANDS}
    needed |= {container[p]["exec"]["command"][0] for p in ("startupProbe", "livenessProbe")}
    # Probes are exec'd without a shell, so a shell builtin (test) must exist as a file too.
    script = "; ".join(f"p=$(type -P {shlex.quote(c)}) || p=MISSING; echo {shlex.quote(c)} $p"
                       for c in sorted(needed))
    script += "; python3 -c " + shlex.quote("import " + ", ".join(PYTHON_MODULES))
    script += " && echo python3-modules ok"
    found = dict(line.split(" ", 1) for line in as_root(image, script).splitlines())
    missing = sorted(c for c in needed if found.get(c, "MISSING") == "MISSING")
    assert not missing, f"{image} lacks {missing} (the base image's packages: scripts/base-image)"
    assert found.get("python3-modules") == "ok", f"{image}: the standard library lacks a module"


def test_installer_mounts_hide_nothing_of_the_image(image, installer):
    _, container = installer
    paths = [v["mountPath"] for v in container["volumeMounts"]
             if not v["mountPath"].startswith("/host")]
    out = as_root(image, "; ".join(f"[ -e {shlex.quote(p)} ] && echo {shlex.quote(p)}"
                                   for p in paths) + "; true")
    shadowed = [p for p in out.split() if p != "/tmp"]
    assert not shadowed, f"installer mounts hide {shadowed} of {image}"
