"""Images from this machine's podman into a bed's nodes (``scripts/kube load-image``), and a
Flux image from a Flux build already on this machine (``scripts/kube flux-image``): a bed's
nodes pull nothing, so what a stack runs is loaded into every node's containerd under the name
the stack uses.

A Flux image is the Debian base image (``scripts/base-image``) plus a view of the prefix
(:mod:`.fluxview`) at the same path, with the view's environment as the image's own: what a
MiniCluster expects of an image with Flux in it (``flux`` on PATH), named as the stack names its
image (for example the dev stack's ``fluxrm/flux-sched`` tag), so the stack runs unchanged.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from .bed import BedError
from .fluxview import assemble_view
from .procs import run

#: The Debian base image ``scripts/base-image`` makes (no registry is reachable here).
BASE_IMAGE = os.environ.get("FLUXINFRA_BASE_IMAGE", "localhost/fluxinfra-base:bookworm")
REPO = Path(__file__).resolve().parents[2]


def _podman(*argv: str, timeout: float = 900) -> str:
    if shutil.which("podman") is None:
        raise BedError("podman not found: scripts/kube deps installs it")
    env = {**os.environ}
    env.setdefault("CONTAINERS_CONF", str(REPO / "tests" / "image" / "containers.conf"))
    return run(["podman", *argv], timeout=timeout, env=env).stdout


def load_image(bed, image: str, names: list[str]) -> None:
    """``podman save`` ``image`` and import it into every node of ``bed``, also as ``names``."""
    if not _podman("images", "--quiet", image, timeout=60).strip():
        raise BedError(f"{image}: no such image in podman (podman images lists them; `make "
                       "image` builds localhost/fluxinfra:<version>)")
    with tempfile.TemporaryDirectory(prefix="kube-image-") as tmp:
        tar = Path(tmp) / "image.tar"
        _podman("save", "--format", "docker-archive", "-o", str(tar), image)
        bed.import_image(tar)
    if names:
        bed.tag_image(image, *names)


def flux_env(prefix: Path) -> list[tuple[str, str]]:
    """The view's ``fluxinfra-view.env`` as (name, value) pairs for an image's ENV."""
    return [("PATH", f"{prefix}/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"),
            ("LD_LIBRARY_PATH", f"{prefix}/lib/fluxinfra-deps"),
            ("PYTHONPATH", f"{prefix}/lib/fluxinfra-python"),
            ("LUA_PATH", f"{prefix}/share/fluxinfra-lua/?.lua;"
                         f"{prefix}/share/fluxinfra-lua/?/init.lua;;"),
            ("LUA_CPATH", f"{prefix}/lib/fluxinfra-lua/?.so;;")]


def build_flux_image(prefix: Path, tag: str) -> str:
    """Build ``tag``: the base image with a view of the Flux build at ``prefix``."""
    prefix = prefix.resolve()
    if not (prefix / "bin" / "flux").is_file():
        raise BedError(f"--prefix {prefix}: no bin/flux there; name the prefix of a Flux build "
                       "(flux-core and flux-sched installed into it)")
    if not _podman("images", "--quiet", BASE_IMAGE, timeout=60).strip():
        raise BedError(f"{BASE_IMAGE}: no base image; scripts/base-image makes it")
    with tempfile.TemporaryDirectory(prefix="kube-flux-image-") as tmp:
        context = Path(tmp)
        assemble_view(prefix, context / "view")
        env = "".join(f'ENV {k}="{v}"\n' for k, v in flux_env(prefix))
        (context / "Containerfile").write_text(
            f"FROM {BASE_IMAGE}\nCOPY view {prefix}\n{env}"
            f'LABEL org.opencontainers.image.description="Flux from {prefix}"\n')
        _podman("build", "--network=none", "--ulimit", "nofile=16384:16384", "--tag", tag,
                str(context), timeout=1800)
    return tag
