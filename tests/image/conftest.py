"""Fixtures for the container image tests: podman with this directory's settings, the local base
image (scripts/base-image, cached) and the fluxinfra image built from host-made wheels.

Everything here needs root and podman; without them every test in the directory is skipped with
the reason shown in the pytest summary.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from image_podman import (
    BASE_IMAGE,
    INSTALL_STAGE_LABEL,
    REPO,
    TEST_IMAGE,
    ULIMITS,
    build_wheels,
    podman,
    run,
)

from fluxinfra import __version__


@pytest.fixture(scope="session")
def base_image() -> str:
    run(["bash", "scripts/base-image"], timeout=900)
    return BASE_IMAGE


@pytest.fixture(scope="session")
def revision() -> str:
    """The commit the image is labelled with (read once: others may commit while tests run)."""
    return run(["git", "rev-parse", "HEAD"], check=False).stdout.strip() or "unknown"


@pytest.fixture(scope="session")
def image(base_image: str, revision: str) -> Iterator[str]:
    build_wheels(REPO / "build" / "wheels")
    start = time.monotonic()
    podman("build", "--network=none", *ULIMITS, "--file", "Containerfile",
           "--build-arg", f"BASE={base_image}",
           "--build-arg", f"VERSION={__version__}",
           "--build-arg", f"REVISION={revision}",
           "--build-arg", f"CREATED={time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}",
           "--tag", TEST_IMAGE, ".", timeout=900)
    elapsed = time.monotonic() - start
    # Leftovers of this and earlier runs: install stages, and test images a new build untagged.
    for label in (INSTALL_STAGE_LABEL, "org.opencontainers.image.title=fluxinfra"):
        podman("image", "prune", "--force", "--filter", f"label={label}", check=False)
    size = podman("image", "inspect", "--format", "{{.Size}}", TEST_IMAGE).stdout.strip()
    print(f"\nimage: built {TEST_IMAGE} in {elapsed:.1f}s, {int(size) / 1e6:.0f} MB")
    yield TEST_IMAGE
    podman("rmi", "--force", TEST_IMAGE, check=False, timeout=120)
