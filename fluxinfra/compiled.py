"""The matcher's hot modules compiled from their own, unchanged Python source (Cython).

The matcher is Python; nothing in it needs a compiler. The package's own build (``setup.py``:
setuptools ``ext_modules`` made by ``cythonize``) compiles the modules in :data:`MODULES`, as
they are, into extension modules placed beside their ``.py`` files: in a wheel
(``pip wheel .``, ``pip install .``) or in place in a source checkout (``make setup``, which
runs ``fluxinfra compile``). Python's own import then loads the extension (``planner.cpython-
311-...so``) rather than the ``.py`` beside it; nothing is installed on ``sys.meta_path``.
Without Cython or a C compiler, or with ``FLUXINFRA_BUILD_PURE=1`` at build time, the build is
plain Python, with the same answers.

One of them, ``matcher.bytepart`` (the partition of byte keys), is written for it: its
``@cython.locals`` types make its loops C, and its ``.pxd`` adds a kernel in C for processors
with AVX2 (a ``.pxd`` beside a module is part of what its compiled form is made from). The
``.pxd`` files of ``matcher.planner``, ``matcher.evaluators``, the ``matcher.traverser``
modules and ``matcher.express`` declare their per-match classes as extension types, so an
attribute read through ``self`` is a field of the object rather than a look-up
(``tests/unit/matcher/test_declarations.py`` keeps them in step with the classes); the rest
of the code is plain Python, compiled as it is. ``express.pxd`` cimports
``traverser/dfu.pxd`` and ``traverser/job.pxd``, and both cimport ``planner.pxd``: the express
lane's traverser is a typed field, and the methods a 1-core match calls most are C methods
(``cpdef``) called directly from typed locals. The compiled forms are built together (one
that fails to compile leaves all of them plain Python): a compiled module checks, when
imported, that the types it cimports have the layout it was compiled against.

The build records, in ``_build_digests.json`` beside the top package's ``__init__.py``, the
SHA-256 of the sources each compiled form was made from (its ``.py``, its ``.pxd``, the
``.pxd`` files it cimports, and the compiler directives and flags). :func:`status` compares it
with the sources as they are: an in-place build older than an edit is ``stale`` (it would run
the old code), which the test suite refuses to run on (``tests/conftest.py``) and
``make setup`` rebuilds. The compiled form saves part of the interpreter's dispatch
(measured: 6-10% of a match in a fill, 20-27% of a steady cancel + match pair;
docs/matcher.md).

``FLUXINFRA_PURE_PYTHON=1`` is the explicit choice of plain Python for a process (the test
suite's second pass runs so): with it, and only with it, ``import fluxinfra`` puts a finder
first on ``sys.meta_path`` (:func:`install`) that loads the ``.py`` of each of
:data:`MODULES` where an extension is beside it. ``fluxinfra compile --status`` says, per
module, which form a process loads and whether it matches its source.
"""

from __future__ import annotations

import importlib.machinery
import json
import os
import re
import sys
from pathlib import Path

__all__ = ["MODULES", "DIRECTIVES", "CFLAGS", "RECORD", "digest", "status", "loaded",
           "install", "pure_python"]

#: what is compiled: the per-match path of ``fluxinfra query`` and the matcher's graph reader
MODULES = (
    "fluxinfra.matcher.planner",
    "fluxinfra.matcher.evaluators",
    "fluxinfra.matcher.traverser.job",
    "fluxinfra.matcher.traverser.order",
    "fluxinfra.matcher.traverser.text",
    "fluxinfra.matcher.traverser.memo",
    "fluxinfra.matcher.traverser.update",
    "fluxinfra.matcher.traverser.dfu",
    "fluxinfra.matcher.traverser.flexible",
    "fluxinfra.matcher.express",
    "fluxinfra.matcher.matcher",
    "fluxinfra.matcher.result",
    "fluxinfra.matcher.register",
    "fluxinfra.matcher.elastic",
    "fluxinfra.matcher.stdsort",
    "fluxinfra.matcher.prefixsort",
    "fluxinfra.matcher.bytepart",
    "fluxinfra.matcher.policies",
    "fluxinfra.matcher.jobspec",
    "fluxinfra.matcher.writers",
    "fluxinfra.matcher.graph",
    "fluxinfra.matcher.grug",
    "fluxinfra.cli.query",
    "fluxinfra.cli.query_session",
)

#: Cython's compiler directives. Annotations stay documentation: a parameter annotated
#: ``list`` still takes a tuple, as in Python.
DIRECTIVES = {"language_level": 3, "annotation_typing": False, "binding": True}

#: the C compiler's flags: a C method passed where a plain function of other arguments is
#: expected (a ``cpdef`` method of a typed object read as a value: Cython converts it with
#: one argument too few) is an error, not a warning
CFLAGS = ["-Werror=incompatible-pointer-types"]

#: the build's record of what each compiled form was made from, beside the top package's
#: ``__init__.py``: ``{module: digest}``
RECORD = "_build_digests.json"

#: part of every digest: changing how modules are compiled makes the built ones stale
_RECIPE = repr((sorted(DIRECTIVES.items()), CFLAGS)).encode()


def pure_python() -> bool:
    """``FLUXINFRA_PURE_PYTHON`` asks this process for plain Python."""
    return os.environ.get("FLUXINFRA_PURE_PYTHON", "") not in ("", "0")


def source_root(name: str) -> Path | None:
    """The directory holding module ``name``'s top package (None: not a plain package on
    disk). Imports nothing."""
    import importlib.util

    top = name.partition(".")[0]
    module = sys.modules.get(top)
    origin = getattr(module, "__file__", None) if module is not None else None
    if origin is None:
        spec = importlib.util.find_spec(top)
        origin = spec.origin if spec is not None else None
    if not origin or not origin.endswith("__init__.py"):
        return None
    return Path(origin).parent.parent


def _py(root: Path, name: str) -> Path:
    return root.joinpath(*name.split(".")).with_suffix(".py")


def extension(root: Path, name: str) -> Path | None:
    """The extension module of ``name`` beside its ``.py`` that Python's import would load
    (the first of this interpreter's suffixes present), or None."""
    base = root.joinpath(*name.split("."))
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        path = base.with_name(base.name + suffix)
        if path.is_file():
            return path
    return None


def digest(root: Path, name: str) -> str:
    """The SHA-256 (24 hex digits) of what module ``name``'s compiled form is made from:
    the directives and flags, its ``.py``, the ``.pxd`` beside it and those it cimports
    (directly or through others: their types' layouts are compiled into it). Raises
    OSError when its ``.py`` cannot be read."""
    import hashlib

    source = _py(root, name)
    parts = [_RECIPE, b"\0", source.read_bytes()]
    own = _read(source.with_suffix(".pxd"))
    if own:
        parts += [b"\0pxd\0", own]
        for dep, (_, text) in cimported(root, own).items():
            parts += [b"\0", dep.encode(), b"\0", text]
    return hashlib.sha256(b"".join(parts)).hexdigest()[:24]


#: ``from <module> cimport ...`` / ``cimport <module>`` in a .pxd
_CIMPORT = re.compile(rb"^\s*(?:from\s+([\w.]+)\s+cimport|cimport\s+([\w.]+))", re.M)


def cimported(root: Path, pxd: bytes) -> dict[str, tuple[Path, bytes]]:
    """The modules under ``root`` whose declarations (a ``.pxd`` beside their ``.py``) a
    ``.pxd`` cimports, directly or through theirs, each with that ``.pxd`` (path and text):
    their compiled forms are built with it. Cython's own declarations (``libc``,
    ``cpython``) are not modules here."""
    out: dict[str, tuple[Path, bytes]] = {}
    todo = [pxd]
    while todo:
        for m in _CIMPORT.finditer(todo.pop()):
            name = (m[1] or m[2]).decode()
            if name in out or "." not in name:
                continue
            path = _py(root, name).with_suffix(".pxd")
            text = _read(path)
            if text and _py(root, name).is_file():
                out[name] = (path, text)
                todo.append(text)
    return out


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return b""


def recorded(root: Path, top: str) -> dict[str, str]:
    """The build's record of package ``top`` under ``root`` (empty: none, or unreadable)."""
    try:
        data = json.loads((root / top / RECORD).read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def status(names: tuple[str, ...] = MODULES) -> dict[str, str]:
    """Per module: ``compiled`` (an extension beside its ``.py``, built from its files as they
    are: what an import loads), ``stale`` (an extension built from other sources, or not
    recorded by the build: an import loads it, old code and all), ``missing`` (none: it loads
    as Python) or ``off`` (``FLUXINFRA_PURE_PYTHON``: it loads as Python)."""
    if pure_python():
        return dict.fromkeys(names, "off")
    out = {}
    records: dict[tuple[Path, str], dict[str, str]] = {}
    for name in names:
        root = source_root(name)
        built = extension(root, name) if root is not None else None
        if built is None:
            out[name] = "missing"
            continue
        top = name.partition(".")[0]
        record = records.setdefault((root, top), recorded(root, top))
        try:
            same = record.get(name) == digest(root, name)
        except OSError:  # (no .py beside it: nothing to compare with)
            same = False
        out[name] = "compiled" if same else "stale"
    return out


def loaded() -> dict[str, bool]:
    """Each of :data:`MODULES` this process has imported: compiled (True) or Python (False)."""
    return {name: _is_extension(sys.modules[name]) for name in MODULES if name in sys.modules}


def _is_extension(module) -> bool:
    file = getattr(module, "__file__", None) or ""
    return file.endswith(tuple(importlib.machinery.EXTENSION_SUFFIXES))


class _PurePython:
    """A meta-path finder for :data:`MODULES`: the ``.py`` file of the module, where one is
    in its package (the extension beside it is passed over). Installed only by the explicit
    ``FLUXINFRA_PURE_PYTHON`` (:func:`install`)."""

    def __init__(self, names: tuple[str, ...] = MODULES) -> None:
        self.names = frozenset(names)

    def find_spec(self, name, path=None, target=None):
        if name not in self.names or not path:
            return None
        import importlib.util

        leaf = name.rpartition(".")[2] + ".py"
        for folder in path:
            source = Path(folder) / leaf
            if source.is_file():
                return importlib.util.spec_from_file_location(name, source)
        return None

    def invalidate_caches(self) -> None:
        pass


def install() -> None:
    """With ``FLUXINFRA_PURE_PYTHON`` set, put the plain-Python finder first on
    ``sys.meta_path`` (once); without it, nothing: Python's import loads the compiled
    forms the build placed beside the sources."""
    if not pure_python():
        return
    if not any(isinstance(f, _PurePython) for f in sys.meta_path):
        sys.meta_path.insert(0, _PurePython())
