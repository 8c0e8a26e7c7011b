"""A Flux "view" for the MiniCluster's ``fluxViewImage``, assembled from a Flux build that is
already on this machine (``/opt/flux``; built outside the repository, never committed): the
prefix as it is, plus what it needs from the host to run in an image that has no Flux (the
shared libraries its programs and modules link, outside glibc; the Lua modules flux-shell loads;
Python's cffi backend for Flux's Python bindings) and a ``fluxinfra-view.env`` that points the
loader, Lua and Python at them. The MiniCluster's start script sources that file. The view must
be mounted at the prefix it was built for (``fluxViewPath``), as Flux's paths are absolute.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

#: glibc's own libraries: every image that can run a dynamically linked program has them.
GLIBC = {"libc.so.6", "libm.so.6", "libpthread.so.0", "libdl.so.2", "librt.so.1",
         "libresolv.so.2", "ld-linux-x86-64.so.2", "libutil.so.1"}
LUA_DIRS = (("/usr/share/lua/5.1", "share/fluxinfra-lua"),
            ("/usr/lib/x86_64-linux-gnu/lua/5.1", "lib/fluxinfra-lua"))
#: What Flux's Python needs beyond the standard library (importing every flux.* module on the
#: host loads these from Debian's python3-cffi-backend, python3-yaml and python3-ply).
PYTHON_EXTRAS = ("_cffi_backend.cpython-311-x86_64-linux-gnu.so", "yaml", "ply",
                 "_yaml.cpython-311-x86_64-linux-gnu.so")
DIST_PACKAGES = Path("/usr/lib/python3/dist-packages")


def _elf_files(root: Path) -> list[Path]:
    out = []
    for path in root.rglob("*"):
        if path.is_file() and not path.is_symlink():
            with open(path, "rb") as f:
                if f.read(4) == b"\x7fELF":
                    out.append(path)
    return out


def _needed_libraries(files: list[Path], prefix: Path) -> set[Path]:
    libs: set[Path] = set()
    for path in files:
        out = subprocess.run(["ldd", str(path)], capture_output=True, text=True).stdout
        for line in out.splitlines():
            parts = line.split("=>")
            if len(parts) != 2 or not parts[1].strip().startswith("/"):
                continue
            lib = Path(parts[1].split()[0])
            if lib.name in GLIBC or prefix in lib.parents:
                continue
            libs.add(lib)
    return libs


def assemble_view(prefix: Path, out: Path) -> Path:
    """Copy ``prefix`` to ``out`` and add what it needs from the host; returns ``out``."""
    prefix = prefix.resolve()
    shutil.copytree(prefix, out, symlinks=True)
    deps = out / "lib" / "fluxinfra-deps"
    deps.mkdir(parents=True)
    python = out / "lib" / "fluxinfra-python"
    python.mkdir(parents=True)
    for extra in PYTHON_EXTRAS:
        src = DIST_PACKAGES / extra
        if src.is_dir():
            shutil.copytree(src, python / extra)
        elif src.exists():
            shutil.copy2(src, python)
    for lib in sorted(_needed_libraries(_elf_files(prefix) + _elf_files(python), prefix)):
        shutil.copy2(lib.resolve(), deps / lib.name)
    for src, dest in LUA_DIRS:
        if Path(src).is_dir():
            shutil.copytree(src, out / dest, symlinks=False)
    view = str(prefix)
    (out / "fluxinfra-view.env").write_text(
        "# Sourced by the MiniCluster's scripts: what this Flux needs beyond its prefix.\n"
        f"export LD_LIBRARY_PATH={view}/lib/fluxinfra-deps${{LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}}\n"
        f"export PYTHONPATH={view}/lib/fluxinfra-python${{PYTHONPATH:+:$PYTHONPATH}}\n"
        f"export LUA_PATH='{view}/share/fluxinfra-lua/?.lua;"
        f"{view}/share/fluxinfra-lua/?/init.lua;;'\n"
        f"export LUA_CPATH='{view}/lib/fluxinfra-lua/?.so;;'\n")
    return out
