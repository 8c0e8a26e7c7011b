"""Container images made without a registry: a one-layer docker-archive from files on this
machine, which ``ctr images import`` loads into the node's containerd.

>>> import tempfile, pathlib
>>> out = pathlib.Path(tempfile.mkdtemp()) / "true.tar"
>>> docker_archive(out, "localhost/true:1", {"/bin/true": "bin/true"}, entrypoint=["/bin/true"])
'localhost/true:1'
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import tarfile
from pathlib import Path

from .procs import run

__all__ = ["BUSYBOX_IMAGE", "PAUSE_IMAGE", "busybox_image", "docker_archive", "normalize_ref",
           "pause_image"]

PAUSE_IMAGE = "localhost/fluxinfra-bed/pause:1"
BUSYBOX_IMAGE = "localhost/fluxinfra-bed/busybox:1"
PAUSE_SOURCE = Path(__file__).with_name("pause.c")


def normalize_ref(ref: str) -> str:
    """The full name containerd stores for an image reference, as the kubelet completes it.

    >>> normalize_ref("fluxinfra:0.1.0"), normalize_ref("hpc/x:1"), normalize_ref("r.org/a/b:2")
    ('docker.io/library/fluxinfra:0.1.0', 'docker.io/hpc/x:1', 'r.org/a/b:2')
    """
    first, _, rest = ref.partition("/")
    if not rest:
        return f"docker.io/library/{ref}"
    if "." in first or ":" in first or first == "localhost":
        return ref
    return f"docker.io/{ref}"


def _layer(files: dict[str, str], links: dict[str, str]) -> bytes:
    """An uncompressed tar: host file -> path in the image, plus symlinks; owner root,
    mtime 0, so the same inputs give the same bytes."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        dirs = sorted({str(Path(p).parent) for p in [*files.values(), *links]} - {"."})
        for d in dirs:
            info = tarfile.TarInfo(d)
            info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, 0
            tar.addfile(info)
        for src, dest in sorted(files.items(), key=lambda kv: kv[1]):
            data = Path(src).read_bytes()
            info = tarfile.TarInfo(dest)
            info.size, info.mode, info.mtime = len(data), os.stat(src).st_mode & 0o7777, 0
            tar.addfile(info, io.BytesIO(data))
        for dest, target in sorted(links.items()):
            info = tarfile.TarInfo(dest)
            info.type, info.linkname, info.mode, info.mtime = tarfile.SYMTYPE, target, 0o777, 0
            tar.addfile(info)
    return buf.getvalue()


def docker_archive(out: Path, ref: str, files: dict[str, str], *,
                   links: dict[str, str] | None = None, entrypoint: list[str] | None = None,
                   cmd: list[str] | None = None) -> str:
    """Write a docker-archive (``docker save`` format) holding one image ``ref``."""
    layer = _layer(files, links or {})
    diff_id = "sha256:" + hashlib.sha256(layer).hexdigest()
    config = json.dumps({
        "architecture": "amd64", "os": "linux",
        "config": {"Env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],
                   "Entrypoint": entrypoint, "Cmd": cmd},
        "rootfs": {"type": "layers", "diff_ids": [diff_id]},
        "history": [{"created_by": "fluxinfra bed", "created": "1970-01-01T00:00:00Z"}],
        "created": "1970-01-01T00:00:00Z",
    }, sort_keys=True).encode()
    config_name = hashlib.sha256(config).hexdigest() + ".json"
    layer_name = diff_id.split(":")[1] + "/layer.tar"
    manifest = json.dumps([{"Config": config_name, "RepoTags": [ref],
                            "Layers": [layer_name]}]).encode()
    with tarfile.open(out, "w") as tar:
        for name, data in ((config_name, config), (layer_name, layer),
                           ("manifest.json", manifest)):
            info = tarfile.TarInfo(name)
            info.size, info.mtime = len(data), 0
            tar.addfile(info, io.BytesIO(data))
    return ref


def pause_image(work: Path) -> Path:
    """Compile ``pause.c`` statically and wrap it as :data:`PAUSE_IMAGE`; returns the tar."""
    work.mkdir(parents=True, exist_ok=True)
    binary = work / "pause"
    run(["gcc", "-static", "-Os", "-s", "-o", str(binary), str(PAUSE_SOURCE)], timeout=120)
    tar = work / "pause.tar"
    docker_archive(tar, PAUSE_IMAGE, {str(binary): "pause"}, entrypoint=["/pause"])
    return tar


def busybox_image(work: Path, busybox: str = "/bin/busybox") -> Path:
    """A shell image for test pods: the static busybox (Debian's busybox-static) with a link
    for every applet, as :data:`BUSYBOX_IMAGE`; returns the tar."""
    if not Path(busybox).is_file():
        raise FileNotFoundError(f"{busybox}: install Debian's busybox-static")
    applets = run([busybox, "--list"]).stdout.split()
    links = {f"bin/{a}": "busybox" for a in applets if a != "busybox"}
    work.mkdir(parents=True, exist_ok=True)
    tar = work / "busybox.tar"
    docker_archive(tar, BUSYBOX_IMAGE, {busybox: "bin/busybox"}, links=links, cmd=["sh"])
    return tar
