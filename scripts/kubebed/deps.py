"""The Debian packages a bed needs (``scripts/apt-packages-kube.txt``), installed on demand.

Only ``scripts/kube up|deps`` and the e2e suite call this, never the default ``make test``
path: CI has no Kubernetes binaries, so it needs none of these packages.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from .procs import run

__all__ = ["PACKAGE_LIST", "ensure_packages", "missing_packages", "wanted_packages"]

PACKAGE_LIST = Path(__file__).resolve().parents[1] / "apt-packages-kube.txt"
APT_LOCK = "/tmp/fluxinfra-apt.lock"


def wanted_packages() -> list[str]:
    names = []
    for line in PACKAGE_LIST.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            names.append(line)
    return names


def missing_packages() -> list[str]:
    wanted = wanted_packages()
    out = run(["dpkg-query", "-W", "-f", "${Package} ${Status}\n", *wanted],
              check=False).stdout
    installed = {line.split()[0] for line in out.splitlines()
                 if line.endswith("install ok installed")}
    return [p for p in wanted if p not in installed]


def ensure_packages(log=print) -> list[str]:
    """Install what is missing (root + apt-get); returns what was installed."""
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        return []
    missing = missing_packages()
    if not missing:
        return []
    log(f"installing Debian packages: {' '.join(missing)}")
    # Others on this machine use apt at the same time; wait for them.
    run(["flock", APT_LOCK, "apt-get", "update", "-q"], timeout=900)
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    run(["flock", APT_LOCK, "apt-get", "install", "-y", "-q", "--no-install-recommends",
         *missing], timeout=1800, env=env)
    return missing
