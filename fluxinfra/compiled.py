"""The matcher's hot modules compiled from their own, unchanged Python source (Cython).

The matcher is Python; nothing in it needs a compiler. Where one is at hand, ``make setup``
(``fluxinfra compile``) compiles the modules in :data:`MODULES` with Cython,
as they are, into extension modules kept with the environment (``<sys.prefix>/fluxinfra-
compiled``, or ``$FLUXINFRA_COMPILED_DIR``), each under the SHA-256 of the source it came from.
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
(``cpdef``) called directly from typed locals. A module compiled against another's
declarations has those ``.pxd`` files (direct or through others) in its digest and loads
compiled only beside their modules' compiled forms (else it loads as Python; ``--status``
says ``waiting``).
An import of one of those modules then loads the compiled form if, and only if, one was made
from the source file as it is now; an edited file, a missing build or another interpreter
loads the ``.py`` as before. The same source, the same answers (the test suite runs both
ways); the compiled form saves part of the interpreter's dispatch (measured: 6-10% of a match
in a fill, 20-27% of a steady cancel + match pair; docs/matcher.md).

``FLUXINFRA_PURE_PYTHON=1`` turns the compiled forms off for a process. ``fluxinfra compile
--status`` says which modules a process would load compiled.
"""

from __future__ import annotations

import importlib.machinery
import os
import re
import sys
from pathlib import Path

__all__ = ["MODULES", "cache_dir", "install", "loaded", "status", "build"]

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
)

#: Cython's compiler directives. Annotations stay documentation: a parameter annotated
#: ``list`` still takes a tuple, as in Python.
DIRECTIVES = {"language_level": 3, "annotation_typing": False, "binding": True}

#: the C compiler's flags: a C method passed where a plain function of other arguments is
#: expected (a ``cpdef`` method of a typed object read as a value: Cython converts it with
#: one argument too few) is an error, not a warning
CFLAGS = ["-Werror=incompatible-pointer-types"]

#: part of every digest: changing how modules are compiled makes new ones
_RECIPE = repr((sorted(DIRECTIVES.items()), CFLAGS)).encode()

#: compiled forms kept per module (of its most recent sources)
_KEEP = 4

_SUFFIX = importlib.machinery.EXTENSION_SUFFIXES[0]  # this interpreter's (.cpython-311-...so)


def cache_dir() -> Path:
    """Where the compiled modules of this environment are kept."""
    given = os.environ.get("FLUXINFRA_COMPILED_DIR")
    return Path(given) if given else Path(sys.prefix) / "fluxinfra-compiled"


def _digest(source: bytes) -> str:
    import hashlib  # (here: `import fluxinfra` installs the finder and should stay cheap)

    return hashlib.sha256(_RECIPE + b"\0" + source).hexdigest()[:24]


def _target(root: Path, name: str, source: bytes) -> Path:
    """The compiled form of module ``name`` made from ``source``."""
    return root / f"{name}-{_digest(source)}" / (name.rpartition(".")[2] + _SUFFIX)


def _current(root: Path, name: str) -> tuple[Path, Path, dict[str, Path]] | None:
    """(the ``.py`` of module ``name``, where the compiled form of its current source goes,
    the ``.pxd`` of each module whose types it cimports), or None when the module is not a
    plain, readable ``.py`` file here."""
    source = _source_path(name)
    if source is None:
        return None
    try:
        declared, deps = _declarations(source)
        return source, _target(root, name, source.read_bytes() + declared), deps
    except OSError:
        return None


def _declarations(source: Path) -> tuple[bytes, dict[str, Path]]:
    """The ``.pxd`` beside a module's source (C declarations Cython reads with it: part of
    what the compiled form is made from) and those of the modules it ``cimport``s (their
    types' layouts are compiled into it), or nothing; and where the latter are."""
    try:
        own = source.with_suffix(".pxd").read_bytes()
    except FileNotFoundError:
        return b"", {}
    out = [b"\0pxd\0", own]
    deps = _cimported(own)
    for name, (_, text) in deps.items():
        out += [b"\0", name.encode(), b"\0", text]
    return b"".join(out), {name: path for name, (path, _) in deps.items()}


#: ``from <module> cimport ...`` / ``cimport <module>`` in a .pxd
_CIMPORT = re.compile(rb"^\s*(?:from\s+([\w.]+)\s+cimport|cimport\s+([\w.]+))", re.M)


def _cimported(pxd: bytes) -> dict[str, tuple[Path, bytes]]:
    """The modules of this environment whose declarations (a ``.pxd`` beside their ``.py``)
    a ``.pxd`` cimports, directly or through theirs, each with that ``.pxd`` (path and text):
    their compiled forms must be the ones loaded beside it (a compiled module checks, when
    imported, that a cimported type has the layout it was compiled against, and calls its C
    methods through the declared table). Cython's own declarations (``libc``, ``cpython``)
    are not modules here."""
    out: dict[str, tuple[Path, bytes]] = {}
    todo = [pxd]
    while todo:
        for m in _CIMPORT.finditer(todo.pop()):
            name = (m[1] or m[2]).decode()
            if name in out or "." not in name:
                continue
            try:
                source = _source_path(name)
            except (ImportError, ValueError):
                continue
            if source is None:
                continue
            path = source.with_suffix(".pxd")
            text = _read(path)
            if text:
                out[name] = (path, text)
                todo.append(text)
    return out


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return b""


def _source_path(name: str) -> Path | None:
    """The ``.py`` file the normal import of ``name`` would read (None: not a plain file)."""
    import importlib.util

    parent = name.rpartition(".")[0]
    package = sys.modules.get(parent)
    if package is not None:
        where = package.__path__
    else:  # (not imported: its spec says where it is, without importing it)
        found = importlib.util.find_spec(parent)
        where = found.submodule_search_locations if found is not None else None
    if not where:
        return None
    spec = importlib.machinery.PathFinder.find_spec(name, where)
    if spec is None or not isinstance(spec.loader, importlib.machinery.SourceFileLoader):
        return None
    return Path(spec.origin)


class _Finder:
    """A meta-path finder for :data:`MODULES`: the compiled form when it was made from the
    source file as it is, else nothing (the normal finders load the ``.py``)."""

    def __init__(self, root: Path, names: tuple[str, ...] = MODULES) -> None:
        self.root = root
        self.names = frozenset(names)

    def find_spec(self, name, path=None, target=None):
        if name not in self.names:
            return None
        current = _current(self.root, name)
        if current is None or not current[1].is_file():
            return None
        for dep in current[2]:
            # a module compiled against another's types loads only beside that one's
            # compiled form (the .py of either, once edited, is loaded as Python: both are)
            if not self._compiled(dep):
                return None
        import importlib.util

        built = current[1]
        loader = importlib.machinery.ExtensionFileLoader(name, str(built))
        return importlib.util.spec_from_file_location(name, built, loader=loader)

    def _compiled(self, name: str) -> bool:
        """Module ``name`` is, or will be when imported, its compiled form."""
        if name not in self.names:
            return False
        module = sys.modules.get(name)
        if module is not None:
            return (getattr(module, "__file__", None) or "").endswith(_SUFFIX)
        current = _current(self.root, name)
        return current is not None and current[1].is_file()

    def invalidate_caches(self) -> None:
        pass


def _off() -> bool:
    return os.environ.get("FLUXINFRA_PURE_PYTHON", "") not in ("", "0")


def install() -> None:
    """Put the finder first on ``sys.meta_path`` (once; only if this environment has compiled
    modules and ``FLUXINFRA_PURE_PYTHON`` is not set). Costs one ``stat``."""
    if _off():
        return
    if any(isinstance(f, _Finder) for f in sys.meta_path):
        return
    root = cache_dir()
    if root.is_dir():
        sys.meta_path.insert(0, _Finder(root))


def loaded() -> dict[str, bool]:
    """Each of :data:`MODULES` this process has imported: compiled (True) or Python (False)."""
    return {name: sys.modules[name].__file__.endswith(_SUFFIX)
            for name in MODULES if name in sys.modules}


def status(names: tuple[str, ...] = MODULES, root: Path | None = None) -> dict[str, str]:
    """Per module: ``compiled`` (a compiled form of the current source exists), ``waiting``
    (one exists, but a module whose types it cimports has none: it loads as Python until
    that one is compiled), ``stale`` (only of other sources), ``missing`` (none) or ``off``
    (FLUXINFRA_PURE_PYTHON)."""
    off = _off()
    root = root or cache_dir()
    finder = _Finder(root, tuple(names))
    out = {}
    for name in names:
        current = None if off else _current(root, name)
        if off:
            out[name] = "off"
        elif current is not None and current[1].is_file():
            waits = [dep for dep in current[2] if not finder._compiled(dep)]
            out[name] = "waiting" if waits else "compiled"
        elif any(root.glob(f"{name}-*")):
            out[name] = "stale"
        else:
            out[name] = "missing"
    return out


def build(names: tuple[str, ...] = MODULES, root: Path | None = None, jobs: int = 2,
          log=sys.stderr) -> list[str]:
    """Compile each of ``names`` whose current source has no compiled form yet; drop the
    forms of all but the most recent sources. Returns the names compiled. Raises
    RuntimeError (with the compiler's words) when Cython or the C compiler fails,
    ModuleNotFoundError without Cython (the ``compiled`` extra)."""
    import shutil
    import tempfile

    from Cython.Build import cythonize
    from setuptools import Distribution, Extension

    root = root or cache_dir()
    todo = []
    for name in names:
        current = _current(root, name)
        if current is None:
            raise RuntimeError(f"{name} is not a plain, readable .py file here; cannot "
                               "compile it")
        if not current[1].is_file():
            todo.append((name, *current))
    if not todo:
        return []
    with tempfile.TemporaryDirectory(prefix="fluxinfra-cython-") as tmp:
        work = Path(tmp)
        exts = []
        for name, source, _, deps in todo:
            # the module's own name and source; the C file is written in the scratch folder
            copy = work / "src" / Path(*name.split(".")).with_suffix(".py")
            copy.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, copy)
            pxd = source.with_suffix(".pxd")
            if pxd.is_file():  # (read with it: bytepart's SIMD kernel, the classes' layouts)
                shutil.copyfile(pxd, copy.with_suffix(".pxd"))
                for dep, dep_pxd in deps.items():  # (the types it compiles against)
                    dep_copy = work / "src" / Path(*dep.split(".")).with_suffix(".pxd")
                    dep_copy.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copyfile(dep_pxd, dep_copy)
            exts.append(Extension(name, [str(copy)], extra_compile_args=CFLAGS))
        for pkg in {p.parent for p in (work / "src").rglob("*.py")}:
            for up in (pkg, *pkg.parents):
                if up == work / "src":
                    break
                (up / "__init__.py").touch(exist_ok=True)
        try:
            modules = cythonize(exts, compiler_directives=DIRECTIVES, quiet=True,
                                nthreads=jobs, build_dir=str(work / "c"))
        except Exception as exc:  # Cython's CompileError (its messages went to stderr)
            raise RuntimeError(f"Cython could not compile "
                               f"{', '.join(t[0] for t in todo)}: {exc}") from exc
        dist = Distribution({"name": "fluxinfra-compiled", "ext_modules": modules})
        cmd = dist.get_command_obj("build_ext")
        cmd.build_lib, cmd.build_temp, cmd.parallel = str(work / "lib"), str(work / "o"), jobs
        cmd.ensure_finalized()
        try:
            cmd.run()
        except Exception as exc:  # distutils' CompileError / LinkError carry the compiler's words
            raise RuntimeError(f"compiling {', '.join(t[0] for t in todo)} failed: {exc}") \
                from exc
        for name, _, target, _ in todo:
            made = Path(cmd.get_ext_fullpath(name))
            # the forms of a few recent sources stay (switching branches back and forth
            # compiles nothing again), the oldest go
            older = sorted(root.glob(f"{name}-*"), key=lambda p: p.stat().st_mtime)
            for old in older[:max(0, len(older) - _KEEP + 1)]:
                shutil.rmtree(old, ignore_errors=True)
            target.parent.mkdir(parents=True, exist_ok=True)
            partial = target.with_name(f"{target.name}.{os.getpid()}.partial")
            shutil.copyfile(made, partial)
            partial.replace(target)  # whole or not at all: a finder never sees half a file
            print(f"compiled {name}", file=log)
    return [t[0] for t in todo]
