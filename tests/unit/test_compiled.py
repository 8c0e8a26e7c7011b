"""fluxinfra.compiled: the matcher's modules compiled from their own source, loaded only when
made from the source as it is, and giving the same bytes as plain Python.

The finder tests compile a small module of their own for real (Cython and the C compiler);
the last test runs the real `fluxinfra query` both ways on the same commands.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import io
import os
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from fluxinfra import compiled

REPO = Path(__file__).resolve().parents[2]
PROBE = "fxcprobe.mod"


def _can_compile() -> str | None:
    """Why this machine cannot compile (None: it can)."""
    if importlib.util.find_spec("Cython") is None:
        return "Cython is not installed (the 'compiled' extra)"
    cc = (sysconfig.get_config_var("CC") or "cc").split()[0]
    if shutil.which(cc) is None:
        return f"no C compiler ({cc!r} is not on PATH)"
    return None


needs_compiler = pytest.mark.skipif(_can_compile() is not None, reason=str(_can_compile()))


@pytest.fixture
def probe(tmp_path, monkeypatch):
    """A package ``fxcprobe`` with one module, importable, forgotten afterwards."""
    pkg = tmp_path / "src" / "fxcprobe"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "mod.py").write_text("def answer(xs: list) -> int:\n    return sum(xs) + 1\n")
    monkeypatch.syspath_prepend(str(tmp_path / "src"))
    monkeypatch.delenv("FLUXINFRA_PURE_PYTHON", raising=False)  # (make test's second pass)
    yield pkg / "mod.py", tmp_path / "cache"
    for name in ("fxcprobe", PROBE):
        sys.modules.pop(name, None)


def _load(finder: compiled._Finder):
    spec = finder.find_spec(PROBE)
    if spec is None:
        return None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@needs_compiler
def test_a_compiled_form_is_loaded_only_for_the_source_it_was_made_from(probe):
    source, cache = probe
    names = (PROBE,)
    assert compiled.status(names, cache) == {PROBE: "missing"}
    assert compiled.build(names, cache, jobs=1, log=io.StringIO()) == [PROBE]
    assert compiled.build(names, cache, jobs=1, log=io.StringIO()) == []  # up to date
    assert compiled.status(names, cache) == {PROBE: "compiled"}
    finder = compiled._Finder(cache, names)
    module = _load(finder)
    assert isinstance(module.__loader__, importlib.machinery.ExtensionFileLoader)
    assert module.__file__.endswith(importlib.machinery.EXTENSION_SUFFIXES[0])
    # annotations stay documentation, as in Python: a tuple where `list` is written
    assert module.answer((1, 2)) == 4
    assert finder.find_spec("fxcprobe.other") is None  # not one of its names

    source.write_text(source.read_text() + "# edited\n")
    assert finder.find_spec(PROBE) is None  # the .py is loaded, as edited
    assert compiled.status(names, cache) == {PROBE: "stale"}
    assert compiled.build(names, cache, jobs=1, log=io.StringIO()) == [PROBE]
    assert _load(finder).answer([2]) == 3
    assert len(list(cache.glob(f"{PROBE}-*"))) == 2  # the older form is kept too


@needs_compiler
def test_a_pxd_beside_the_source_is_compiled_with_it_and_part_of_its_digest(probe):
    """A module's C declarations (bytepart.pxd's kernel) are read with its source: a C
    function declared there is called from the .py, and an edit of the .pxd alone makes the
    compiled form stale, as an edit of the .py does."""
    source, cache = probe
    names = (PROBE,)
    source.write_text("import cython\n\n"
                      "def twice(x):\n"
                      "    if cython.compiled:\n"
                      "        return fxc_twice(x)  # noqa: F821\n"
                      "    return -1\n")
    pxd = source.with_suffix(".pxd")
    pxd.write_text('cdef extern from *:\n    """\n    static long fxc_twice(long x) '
                   '{ return 2 * x; }\n    """\n    long fxc_twice(long x)\n')
    assert compiled.build(names, cache, jobs=1, log=io.StringIO()) == [PROBE]
    finder = compiled._Finder(cache, names)
    assert _load(finder).twice(21) == 42  # the C function, compiled in
    pxd.write_text(pxd.read_text().replace("2 * x", "3 * x"))
    assert finder.find_spec(PROBE) is None
    assert compiled.status(names, cache) == {PROBE: "stale"}
    assert compiled.build(names, cache, jobs=1, log=io.StringIO()) == [PROBE]
    sys.modules.pop(PROBE, None)
    assert _load(finder).twice(21) == 63


@needs_compiler
def test_a_module_compiled_against_another_modules_types_loads_only_beside_its_compiled_form(
        probe):
    """express.pxd cimports traverser.pxd (its traverser is a typed field): a compiled module
    checks, when imported, that a cimported type has the layout it was compiled against, so
    the two compiled forms go together. The cimported .pxd is part of the user's digest;
    while the other module loads as Python (its .py edited, not compiled again), the user
    loads as Python too ("waiting"), and both are compiled forms again once it is built."""
    source, cache = probe
    pkg = source.parent
    base, user = "fxcprobe.base", "fxcprobe.user"
    names = (base, user)
    (pkg / "base.py").write_text("class Box:\n    def __init__(self, v):\n"
                                 "        self.v = v\n")
    (pkg / "base.pxd").write_text("cdef class Box:\n    cdef public object v\n")
    (pkg / "user.py").write_text("import cython\n\n\nclass User:\n"
                                 "    def __init__(self, box):\n        self.box = box\n\n"
                                 "    def twice(self):\n        b = self.box\n"
                                 "        return (b.v * 2, cython.typeof(b))\n")
    (pkg / "user.pxd").write_text("from fxcprobe.base cimport Box\n\n\ncdef class User:\n"
                                  "    cdef public Box box\n")
    found = compiled._cimported((pkg / "user.pxd").read_bytes())
    assert found == {base: (pkg / "base.pxd", (pkg / "base.pxd").read_bytes())}
    # through another module's declarations too (express -> traverser -> planner)
    assert list(compiled._cimported(b"from fxcprobe.user cimport User\n")) == [user, base]
    assert compiled._cimported(b"from libc.stdint cimport int64_t\ncimport cython\n") == {}
    assert sorted(compiled.build(names, cache, jobs=1, log=io.StringIO())) == sorted(names)
    assert compiled.status(names, cache) == {base: "compiled", user: "compiled"}
    finder = compiled._Finder(cache, names)

    def load(name):
        spec = finder.find_spec(name)
        if spec is None:
            return None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
        return module

    def forget():
        for name in names:
            sys.modules.pop(name, None)

    try:
        box = load(base).Box(21)
        # the local read through the typed field is typed: a field access, not a look-up
        assert load(user).User(box).twice() == (42, "Box")
        forget()
        (pkg / "base.py").write_text((pkg / "base.py").read_text() + "# edited\n")
        assert compiled.status(names, cache) == {base: "stale", user: "waiting"}
        assert finder.find_spec(base) is None and finder.find_spec(user) is None
        compiled.build(names, cache, jobs=1, log=io.StringIO())
        assert compiled.status(names, cache) == {base: "compiled", user: "compiled"}
        # the cimported declarations are part of the user's digest
        (pkg / "base.pxd").write_text("cdef class Box:\n    cdef public object v, w\n")
        assert compiled.status(names, cache) == {base: "stale", user: "stale"}
        assert sorted(compiled.build(names, cache, jobs=1, log=io.StringIO())) == sorted(names)
        box = load(base).Box(5)  # (first: the user's import finds it in sys.modules)
        assert load(user).User(box).twice() == (10, "Box")
        forget()
        # a Python module of the same name already imported: the user stays Python too
        sys.modules[base] = importlib.import_module("fxcprobe")  # (a plain module)
        assert finder.find_spec(user) is None
    finally:
        forget()


@needs_compiler
def test_a_c_method_read_as_a_value_does_not_compile(probe):
    """A ``cpdef`` method of a typed object read as a value (``f = t.method``, then
    ``f(...)``): Cython converts the C method to a Python callable of one argument fewer than
    the C function takes, which C compilers only warn about. The flags make it an error
    (compiled so, a call would pass the method's last C argument from a stray register)."""
    source, cache = probe
    pkg = source.parent
    base, user = "fxcprobe.base", "fxcprobe.user"
    (pkg / "base.py").write_text("class Box:\n    def get(self, v):\n        return v\n")
    (pkg / "base.pxd").write_text("cdef class Box:\n    cpdef get(self, v)\n")
    (pkg / "user.py").write_text("def twice(b, v):\n    get = b.get\n    return get(v) * 2\n")
    (pkg / "user.pxd").write_text("from fxcprobe.base cimport Box\n\n"
                                  "cpdef twice(Box b, v)\n")
    with pytest.raises(RuntimeError, match="incompatible-pointer-types"):
        compiled.build((base, user), cache, jobs=1, log=io.StringIO())
    (pkg / "user.py").write_text("def twice(b, v):\n    return b.get(v) * 2\n")
    assert sorted(compiled.build((base, user), cache, jobs=1, log=io.StringIO())) == [base, user]


@needs_compiler
def test_a_module_that_does_not_compile_says_so(probe):
    source, cache = probe
    source.write_text("def broken(:\n")
    with pytest.raises(RuntimeError, match="fxcprobe.mod"):
        compiled.build((PROBE,), cache, jobs=1, log=io.StringIO())
    assert not cache.exists() or not list(cache.glob(f"{PROBE}-*/*"))


def test_the_finder_is_installed_only_with_compiled_modules_and_not_when_turned_off(
        tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "meta_path",
                        [f for f in sys.meta_path if not isinstance(f, compiled._Finder)])
    ours = lambda: [f for f in sys.meta_path if isinstance(f, compiled._Finder)]  # noqa: E731
    monkeypatch.setenv("FLUXINFRA_COMPILED_DIR", str(tmp_path / "none"))
    monkeypatch.delenv("FLUXINFRA_PURE_PYTHON", raising=False)
    compiled.install()
    assert ours() == []  # no compiled modules in this environment: nothing to find
    (tmp_path / "none").mkdir()
    monkeypatch.setenv("FLUXINFRA_PURE_PYTHON", "1")
    compiled.install()
    assert ours() == []
    assert set(compiled.status().values()) == {"off"}
    monkeypatch.setenv("FLUXINFRA_PURE_PYTHON", "0")
    compiled.install()
    compiled.install()
    assert len(ours()) == 1 and sys.meta_path[0] is ours()[0]


def test_this_process_runs_what_status_says():
    for name in compiled.MODULES:  # (each of them, whatever other tests imported before)
        importlib.import_module(name)
    states, loaded = compiled.status(), compiled.loaded()
    assert set(loaded) == set(compiled.MODULES)
    for name in compiled.MODULES:
        assert loaded[name] == (states[name] == "compiled"), (name, states[name])


def test_compile_without_cython_names_the_extra(monkeypatch, capsys):
    from fluxinfra.cli import main

    monkeypatch.setitem(sys.modules, "Cython", None)
    monkeypatch.setitem(sys.modules, "Cython.Build", None)
    assert main(["compile"]) == 2
    assert "needs the 'compiled' extra" in capsys.readouterr().err


def test_compile_status_lists_every_module(capsys):
    from fluxinfra.cli import main

    assert main(["compile", "--status"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[1] for line in lines[:-1]] == list(compiled.MODULES)
    assert lines[-1] == f"(kept in {compiled.cache_dir()})"


def test_compiled_and_plain_python_give_the_same_bytes(tmp_path):
    """The real `fluxinfra query`, compiled and as plain Python, on one command stream over
    a generated machine under three policies: every -t output byte-identical."""
    if os.environ.get("FLUXINFRA_PURE_PYTHON", "") not in ("", "0") or \
            set(compiled.status().values()) != {"compiled"}:
        pytest.skip("the matcher's modules are not compiled here (fluxinfra compile --status): "
                    "nothing to compare")
    sys.path.insert(0, str(REPO))
    try:
        from benchmarks.matcher import jobspec_for, recipe_for
    finally:
        sys.path.remove(str(REPO))
    import yaml

    from fluxinfra.matcher.recipe import recipe_to_grug

    grug = tmp_path / "m.graphml"
    grug.write_text(recipe_to_grug(recipe_for(64)))
    specs = {}
    for stream in ("1core", "nodex", "64node"):
        specs[stream] = tmp_path / f"{stream}.yaml"
        specs[stream].write_text(yaml.safe_dump(jobspec_for(stream)))
    lines = [f"match allocate {specs['1core']}"] * 300
    lines += [f"cancel {j}" for j in range(1, 300, 7)]
    lines += [f"match allocate_orelse_reserve {specs['nodex']}"] * 80
    lines += [f"match allocate_orelse_reserve {specs['64node']}"] * 3
    lines += [f"match satisfiability {specs['64node']}", "find status=up", "info 3", "stat", "quit"]
    commands = "\n".join(lines) + "\n"
    outs = {}
    for policy in ("first", "low", "locality"):
        for mode in ("compiled", "plain"):
            env = dict(os.environ, FLUXINFRA_PURE_PYTHON="1" if mode == "plain" else "0")
            out = tmp_path / f"{policy}-{mode}.txt"
            proc = subprocess.run(
                [sys.executable, "-m", "fluxinfra", "query", "-L", str(grug), "-f", "grug",
                 "-P", policy, "-F", "simple", "-t", str(out)],
                input=commands, capture_output=True, text=True, env=env, timeout=300)
            assert proc.returncode == 0, proc.stderr[-2000:]
            # (stdout's match lines end in the match's own seconds)
            outs[mode] = (out.read_bytes(), re.sub(r"\d+\.\d+(e[-+]\d+)?", "T", proc.stdout))
        assert outs["compiled"] == outs["plain"], policy
        assert outs["plain"][0].count(b"\n") > 1000, "the stream matched too little to compare"
