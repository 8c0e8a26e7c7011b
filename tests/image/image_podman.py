"""podman for the image tests: this directory's settings, explicit ulimits, and a runner whose
failures carry the command's output."""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
BASE_IMAGE = "localhost/fluxinfra-base:bookworm"
#: this run's own tag (removed when the session ends), so two runs on one machine never build
#: over each other's image
TEST_IMAGE = f"localhost/fluxinfra:test-{os.getpid()}-{secrets.token_hex(3)}"
#: Explicit limits (see containers.conf for why they stay below the host's hard limits).
ULIMITS = ("--ulimit", "nofile=16384:16384", "--ulimit", "nproc=8192:8192")
#: The label of the Containerfile's throw-away install stage, so tests prune only their leftovers.
INSTALL_STAGE_LABEL = "io.fluxinfra.stage=install"


def podman_env() -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("CONTAINERS_CONF", str(HERE / "containers.conf"))
    return env


def run(argv: list[str], *, timeout: float = 120, check: bool = True,
        cwd: Path = REPO, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run a command (``env``: variables added to podman's); on failure the assertion message
    carries its output, so a red run explains itself."""
    proc = subprocess.run(argv, cwd=cwd, env={**podman_env(), **(env or {})},
                          capture_output=True, text=True,
                          timeout=timeout, check=False)
    if check and proc.returncode != 0:
        raise AssertionError(
            f"{' '.join(argv)} exited {proc.returncode}\n"
            f"--- stdout ---\n{proc.stdout[-4000:]}\n--- stderr ---\n{proc.stderr[-4000:]}")
    return proc


def podman(*args: str, timeout: float = 120,
           check: bool = True) -> subprocess.CompletedProcess[str]:
    return run(["podman", *args], timeout=timeout, check=check)


def why_not_runnable() -> str | None:
    if os.geteuid() != 0:
        return "image tests need root (podman storage and debootstrap)"
    for tool in ("podman", "debootstrap"):
        if shutil.which(tool) is None:
            return (f"image tests need '{tool}' "
                    "(scripts/apt-packages.txt, installed by scripts/setup)")
    return None


def build_wheels(dest: Path) -> None:
    """Wheels for fluxinfra[scheduler] and its dependencies, so the image build needs no network;
    fluxinfra's own plain Python (``FLUXINFRA_BUILD_PURE=1``), as ``make image`` builds it.

    setuptools builds in the tree's build/ directory and never deletes what it copied there
    before, so its staging directories are cleared first: a removed module must not live on in
    the wheel."""
    for stale in (REPO / "build" / "lib", *REPO.glob("build/bdist.*"), *dest.glob("fluxinfra-*")):
        if stale.is_dir():
            shutil.rmtree(stale)
        elif stale.exists():
            stale.unlink()
    run([sys.executable, "-m", "pip", "wheel", "--quiet", "--disable-pip-version-check",
         "--wheel-dir", str(dest), ".[scheduler]"], timeout=600,
        env={"FLUXINFRA_BUILD_PURE": "1"})
