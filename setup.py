"""The package's build of the matcher's compiled modules (everything else is in pyproject.toml).

When Cython is importable at build time (``[build-system] requires`` brings it to ``pip
install .`` and ``pip wheel .``), each of ``fluxinfra.compiled.MODULES`` is cythonized from
its own ``.py`` (with the ``.pxd`` beside it and those it cimports, the directives and C flags
of ``fluxinfra/compiled.py``) into an extension module placed beside the ``.py``: in the wheel,
or in place in a source checkout (``setup.py build_ext --inplace``, ``fluxinfra compile``,
``make setup``). The build records in ``fluxinfra/_build_digests.json`` what each was made
from, so ``fluxinfra compile --status`` sees an in-place build older than an edit.

The compiled forms are built together or not at all: if Cython or the C compiler fails, the
build says why on stderr and is plain Python (the same answers, slower). Without Cython, or
with ``FLUXINFRA_BUILD_PURE=1``, there are no extensions and the wheel is pure Python.

Importable as a module (the tests build probe packages with :func:`build`); ``setup()`` runs
only as a script, which is how setuptools' build backend runs it.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from setuptools import Distribution, Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.errors import ExecError

HERE = Path(__file__).resolve().parent


def _load_compiled():
    """fluxinfra/compiled.py, read by path: the build does not import the package (its build
    environment need not hold the package's dependencies)."""
    name = "fluxinfra.compiled"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location("_fluxinfra_build_compiled",
                                                  HERE / "fluxinfra" / "compiled.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


compiled = _load_compiled()


class BuildFailed(RuntimeError):
    """Cython or the C compiler failed; the message has their words."""


def extensions(root: Path, names=compiled.MODULES) -> list[Extension]:
    """One extension per module, from its ``.py`` under ``root``."""
    return [Extension(name, [str(root.joinpath(*name.split(".")).with_suffix(".py"))],
                      extra_compile_args=list(compiled.CFLAGS)) for name in names]


class _Failed(subprocess.CalledProcessError):
    """A compiler or linker run that failed, with its words."""

    def __str__(self) -> str:
        return f"{Path(str(self.cmd[0])).name} failed:\n{self.output}"


def _call(cmd, *, env=None, **_kwargs):
    """The compiler and linker run with their output kept: a failure carries its words
    (setuptools' ``Compiler.call``; its older ``spawn`` below)."""
    proc = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, env=env)
    if proc.returncode:
        words = (proc.stderr + proc.stdout).strip()[-4000:]
        raise _Failed(proc.returncode, cmd, output=words)


def _spawn(cmd, **kwargs):
    try:
        _call(cmd, **kwargs)
    except _Failed as exc:
        raise ExecError(str(exc)) from exc


class BuildCompiled(build_ext):
    """``build_ext`` for the compiled modules: cythonizes and compiles only those whose
    sources changed since the build in ``build_lib`` (the record says), all of them or none,
    and writes the record beside the extensions (and, in place, beside the sources)."""

    def initialize_options(self):
        super().initialize_options()
        self.compiled_now: list[str] = []
        self.failure: BuildFailed | None = None

    def finalize_options(self):
        super().finalize_options()
        if not self.parallel:  # (one module at a time is minutes; -j N still chooses)
            self.parallel = os.cpu_count() or 1

    def _root(self) -> Path:
        return Path(self.distribution.package_dir.get("", ".") if
                    self.distribution.package_dir else ".").resolve()

    def build_extensions(self):
        root, out = self._root(), Path(self.build_lib)
        names = [ext.name for ext in self.extensions]
        records = {top: compiled.recorded(out, top) for top in _tops(names)}
        todo = []
        try:
            for ext in self.extensions:
                want = _digest(root, ext.name)
                have = records[_top(ext.name)].get(ext.name)
                if not (Path(self.get_ext_fullpath(ext.name)).is_file() and have == want):
                    todo.append((ext, want))
            self._compile(root, [ext for ext, _ in todo])
        except BuildFailed as exc:
            self.failure = exc
            for name in names:  # none or all: a module checks its cimported types' layouts
                Path(self.get_ext_fullpath(name)).unlink(missing_ok=True)
                records[_top(name)].pop(name, None)
        else:
            for ext, want in todo:
                records[_top(ext.name)][ext.name] = want
            self.compiled_now = [ext.name for ext, _ in todo]
        for top, record in records.items():
            _write_record(out / top, record)

    def _compile(self, root: Path, exts: list[Extension]) -> None:
        if not exts:
            return
        from Cython.Build import cythonize

        what = ", ".join(ext.name for ext in exts)
        jobs = max(1, int(self.parallel or 1))
        try:
            made = cythonize(exts, compiler_directives=compiled.DIRECTIVES, quiet=True,
                             force=True, nthreads=jobs if jobs > 1 else 0,
                             include_path=[str(root)],
                             build_dir=str(Path(self.build_temp) / "cython"))
        except Exception as exc:  # Cython's CompileError (its messages went to stderr)
            raise BuildFailed(f"Cython could not compile {what}: {exc}") from exc
        c_sources = {c.name: list(c.sources) for c in made}
        for ext in exts:
            ext.sources = c_sources[ext.name]
        self.compiler.call, self.compiler.spawn = _call, _spawn
        self.force = True  # (the record said these are out of date, whatever the times say)
        failed: dict[str, Exception] = {}

        def one(ext):
            try:
                self.build_extension(ext)
            except Exception as exc:  # distutils' CompileError / LinkError
                failed[ext.name] = exc

        with ThreadPoolExecutor(max_workers=jobs) as pool:
            list(pool.map(one, exts))
        if failed:
            raise BuildFailed("compiling " + ", ".join(sorted(failed)) + " failed: " +
                              "\n".join(str(exc) for exc in failed.values()))

    def copy_extensions_to_source(self):
        """In place: the extensions and the record beside the sources, or, after a failure,
        none of them (an older build left there would run old code)."""
        root = self._root()
        names = [ext.name for ext in self.extensions]
        if self.failure is None:
            super().copy_extensions_to_source()
            for top in _tops(names):
                _write_record(root / top, compiled.recorded(Path(self.build_lib), top))
            return
        for name in names:
            found = compiled.extension(root, name)
            while found is not None:
                found.unlink()
                found = compiled.extension(root, name)
        for top in _tops(names):
            record = compiled.recorded(root, top)
            _write_record(root / top, {k: v for k, v in record.items() if k not in names})


def _digest(root: Path, name: str) -> str:
    try:
        return compiled.digest(root, name)
    except OSError as exc:
        raise BuildFailed(f"{name}: its source cannot be read ({exc}); compiled.MODULES names "
                          "modules of plain .py files") from exc


def _top(name: str) -> str:
    return name.partition(".")[0]


def _tops(names) -> set[str]:
    return {_top(name) for name in names}


def _write_record(folder: Path, record: dict[str, str]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / compiled.RECORD
    if not record:
        path.unlink(missing_ok=True)
        return
    partial = path.with_name(f"{path.name}.{os.getpid()}.partial")
    partial.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
    partial.replace(path)


def build(names=compiled.MODULES, root: Path = HERE, jobs: int = 2, log=sys.stderr) -> list[str]:
    """Build ``names`` (modules under ``root``) in place, as ``setup.py build_ext --inplace``
    does (its work in ``root/build``). Returns the names compiled now (none: all were up to
    date). Raises RuntimeError with Cython's or the compiler's words when one fails (then
    none of them is left compiled), ModuleNotFoundError without Cython."""
    import Cython  # noqa: F401 (first: without it, say so before any work)

    dist = Distribution({"name": "fluxinfra-inplace", "package_dir": {"": str(root)},
                         "ext_modules": extensions(root, names),
                         "script_name": str(root / "setup.py")})
    dist.cmdclass["build_ext"] = BuildCompiled
    dist.get_command_obj("build").build_base = str(root / "build")
    cmd = dist.get_command_obj("build_ext")
    cmd.inplace, cmd.parallel = True, jobs
    cmd.ensure_finalized()
    cmd.run()
    if cmd.failure is not None:
        raise RuntimeError(str(cmd.failure))
    for name in cmd.compiled_now:
        print(f"compiled {name}", file=log)
    return list(cmd.compiled_now)


def _wanted() -> tuple[bool, str]:
    """(build the compiled modules, why not)"""
    if os.environ.get("FLUXINFRA_BUILD_PURE", "") not in ("", "0"):
        return False, "FLUXINFRA_BUILD_PURE is set"
    if importlib.util.find_spec("Cython") is None:
        return False, "Cython is not installed"
    return True, ""


class _BuildOrSay(BuildCompiled):
    """The script's build_ext: a failure leaves a plain-Python build and says why."""

    def run(self):
        super().run()
        if self.failure is not None:
            print(f"fluxinfra: the matcher's compiled modules were not built; this build runs "
                  f"them as plain Python ({self.failure})", file=sys.stderr)


if __name__ == "__main__":
    wanted, why = _wanted()
    if not wanted:
        print(f"fluxinfra: a plain-Python build ({why})", file=sys.stderr)
    # (sources relative to this folder, where setuptools' backend runs this script)
    setup(ext_modules=extensions(Path(".")) if wanted else [],
          cmdclass={"build_ext": _BuildOrSay})
