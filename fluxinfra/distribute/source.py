"""What SOURCE is, and the files on the lead node that ``flux archive create`` will read.

SOURCE is a file, a directory, an OCI or docker image archive (a tar with ``oci-layout`` or
``manifest.json``), or an image reference that the lead node pulls (when its runtime does not
have it yet) and saves to a docker archive once. Everything here runs through a :class:`Host`:
:class:`LocalHost` is this machine; :mod:`fluxinfra.distribute.kube` provides the lead node of a
Kubernetes instance.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import socket
import subprocess
from collections.abc import Sequence
from typing import Protocol

from fluxinfra.distribute import agent
from fluxinfra.distribute.errors import DistributeError

__all__ = ["Payload", "Host", "LocalHost", "resolve_source", "IMPORTERS", "looks_like_image_ref"]

#: --import choices
IMPORTERS = ("none", "containerd", "podman")

# A container image reference (distribution/reference, simplified): optional registry host
# (with a dot or port, or localhost), lower-case path components, optional tag and/or digest.
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_IMAGE_REF = re.compile(
    rf"^(?:(?:[a-zA-Z0-9.-]+\.[a-zA-Z0-9.-]+|localhost|[a-zA-Z0-9-]+:\d+)(?::\d+)?/)?"
    rf"{_COMPONENT}(?:/{_COMPONENT})*(?::[\w][\w.-]{{0,127}})?(?:@sha256:[0-9a-f]{{64}})?$"
)


def looks_like_image_ref(text: str) -> bool:
    """True for ``busybox:1.36``, ``docker.io/library/nginx@sha256:...``, ``localhost/x:1``."""
    return not text.startswith((".", "/", "~")) and bool(_IMAGE_REF.match(text))


class Host(Protocol):
    """The lead node: where SOURCE lives and where ``flux archive create`` reads it."""

    def inspect(self, path: str) -> dict: ...

    def manifest(self, root: str, entries: Sequence[str]) -> dict: ...

    def run(self, argv: Sequence[str]) -> subprocess.CompletedProcess: ...

    def which(self, program: str) -> bool: ...

    def make_dir(self, path: str) -> None: ...

    def remove(self, path: str) -> None: ...

    def hostname(self) -> str: ...


class LocalHost:
    """This machine."""

    def hostname(self) -> str:
        return socket.gethostname()

    def inspect(self, path: str) -> dict:
        return agent.inspect(path)

    def manifest(self, root: str, entries: Sequence[str]) -> dict:
        try:
            return agent.manifest(root, list(entries))
        except (OSError, ValueError) as exc:
            raise DistributeError(f"SOURCE: cannot read {exc}") from None

    def run(self, argv: Sequence[str]) -> subprocess.CompletedProcess:
        return subprocess.run(list(argv), capture_output=True, text=True)

    def which(self, program: str) -> bool:
        return shutil.which(program) is not None

    def make_dir(self, path: str) -> None:
        # World-readable: the broker (the instance owner) reads it for --mmap.
        os.makedirs(path, mode=0o755, exist_ok=True)
        os.chmod(path, 0o755)

    def remove(self, path: str) -> None:
        shutil.rmtree(path, ignore_errors=True)


@dataclasses.dataclass
class Payload:
    """Files under ``directory`` named by ``entries``; ``images`` are the image archives."""

    source: str
    kind: str  # file | directory | image-archive | image
    directory: str
    entries: list[str]
    images: list[str]
    staged: str | None = None  # a directory this run made (pulled images), removed at the end
    refs: list[str] = dataclasses.field(default_factory=list)  # image names inside, if known


def _image_file_name(ref: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", ref).strip("_") + ".tar"


def _pull_and_save(host: Host, ref: str, runtime: str, staging: str) -> str:
    """Save ``ref`` (pulling it first when the runtime lacks it) into ``staging``; the path."""
    host.make_dir(staging)
    path = os.path.join(staging, _image_file_name(ref))
    if runtime == "podman":
        steps = [(["podman", "image", "exists", ref], ["podman", "pull", ref]),
                 (None, ["podman", "save", "-o", path, ref])]
    else:
        ctr = ["ctr", "-n", "k8s.io"]
        full = ref if "/" in ref.split(":")[0] or "." in ref.split("/")[0] else \
            f"docker.io/library/{ref}"
        steps = [(ctr + ["images", "check", f"name=={full}"], ctr + ["images", "pull", full]),
                 (None, ctr + ["images", "export", path, full])]
    for probe, action in steps:
        if probe is not None:
            have = host.run(probe)
            if have.returncode == 0 and (runtime == "podman" or full in have.stdout):
                continue
        done = host.run(action)
        if done.returncode != 0:
            message = (done.stderr or done.stdout).strip().splitlines()
            raise DistributeError(f"SOURCE {ref!r}: `{' '.join(action[:4])}` failed: "
                                  f"{message[-1] if message else done.returncode}")
    return path


def resolve_source(source: str, *, importer: str, host: Host, staging: str) -> Payload:
    """Classify SOURCE and, for an image reference, pull and save it into ``staging``."""
    if importer not in IMPORTERS:
        raise DistributeError(f"--import {importer!r}: choose one of {', '.join(IMPORTERS)}")
    if not source:
        raise DistributeError("SOURCE is empty: give a file, a directory, an image archive or "
                              "an image reference")
    info = host.inspect(source)
    if info["kind"] == "missing":
        if not looks_like_image_ref(source):
            raise DistributeError(f"SOURCE {source!r}: no such file or directory, and not an "
                                  "image reference (e.g. docker.io/library/busybox:1.36)")
        runtime = importer if importer != "none" else next(
            (r for r in ("podman", "ctr") if host.which(r)), "")
        runtime = {"ctr": "containerd"}.get(runtime, runtime)
        if not runtime or not host.which("podman" if runtime == "podman" else "ctr"):
            raise DistributeError(f"SOURCE {source!r} is an image reference but the lead node has "
                                  f"no {runtime if runtime else 'podman or ctr'} to pull it: "
                                  "install one, or save the image to a file and pass that")
        path = _pull_and_save(host, source, runtime, staging)
        name = os.path.basename(path)
        return Payload(source, "image", staging, [name], [name] if importer != "none" else [],
                       staged=staging, refs=host.inspect(path)["refs"] or [source])
    if info["kind"] == "other":
        raise DistributeError(f"SOURCE {source!r}: not a regular file, directory or image "
                              "reference")
    path = os.path.normpath(source if os.path.isabs(source) else os.path.abspath(source))
    directory, name = os.path.split(path)
    if info["kind"] == "directory":
        if importer != "none":
            raise DistributeError(f"--import {importer}: SOURCE {source!r} is a directory; "
                                  "import takes an image archive (a tar from `podman save`, "
                                  "`docker save` or `ctr images export`) or --import none")
        return Payload(source, "directory", directory, [name], [])
    if importer != "none" and not info["image"]:
        raise DistributeError(f"--import {importer}: SOURCE {source!r} is not an OCI or docker "
                              "image archive (no oci-layout or manifest.json inside): pass "
                              "--import none to copy it as a plain file")
    kind = "image-archive" if info["image"] else "file"
    return Payload(source, kind, directory, [name], [name] if importer != "none" else [],
                   refs=info["refs"])
