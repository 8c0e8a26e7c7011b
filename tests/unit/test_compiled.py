"""fluxinfra.compiled and setup.py: the matcher's modules compiled from their own source by the
package's build, beside the ``.py`` files, seen as stale when built from older sources, and
giving the same bytes as plain Python.

The probe tests build a small package of their own for real (Cython and the C compiler, with
setup.py's own build command) and import it in a fresh process (an extension module is loaded
once per process); the wheel test builds a wheel of a clean copy of this repository and
installs it; the last test runs the real `fluxinfra query` both ways on the same commands.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import io
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from fluxinfra import compiled

REPO = Path(__file__).resolve().parents[2]
PROBE = "fxcprobe.mod"
SUFFIX = importlib.machinery.EXTENSION_SUFFIXES[0]


def _can_compile() -> str | None:
    """Why this machine cannot compile (None: it can)."""
    if importlib.util.find_spec("Cython") is None:
        return "Cython is not installed (the 'compiled' extra)"
    cc = (sysconfig.get_config_var("CC") or "cc").split()[0]
    if shutil.which(cc) is None:
        return f"no C compiler ({cc!r} is not on PATH)"
    return None


needs_compiler = pytest.mark.skipif(_can_compile() is not None, reason=str(_can_compile()))


def _setup():
    """The repository's setup.py as a module (its build command and :func:`build`)."""
    spec = importlib.util.spec_from_file_location("_fluxinfra_setup_under_test",
                                                  REPO / "setup.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def probe(tmp_path, monkeypatch):
    """A package ``fxcprobe`` with one module under ``src``, importable, forgotten afterwards;
    and ``build(names)``: setup.py's in-place build of modules of it."""
    root = tmp_path / "src"
    pkg = root / "fxcprobe"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "mod.py").write_text("def answer(xs: list) -> int:\n    return sum(xs) + 1\n")
    monkeypatch.syspath_prepend(str(root))
    monkeypatch.delenv("FLUXINFRA_PURE_PYTHON", raising=False)  # (make test's second pass)
    setup = _setup()

    def build(names):
        return setup.build(tuple(names), root, jobs=1, log=io.StringIO())

    yield pkg / "mod.py", build
    for name in [n for n in sys.modules if n.partition(".")[0] == "fxcprobe"]:
        sys.modules.pop(name, None)


def _run(root: Path, code: str, **env) -> str:
    """``code`` in a fresh interpreter with ``root`` first on its path: its stdout."""
    environ = {k: v for k, v in os.environ.items() if k != "FLUXINFRA_PURE_PYTHON"}
    environ.update(env, PYTHONPATH=str(root))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=environ, timeout=120, cwd=root)  # (-c: the cwd is first on the path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout.strip()


@needs_compiler
def test_a_compiled_form_is_what_an_import_loads_and_is_seen_stale_after_an_edit(probe):
    source, build = probe
    root = source.parents[1]
    names = (PROBE,)
    assert compiled.status(names) == {PROBE: "missing"}
    assert build(names) == [PROBE]
    assert build(names) == []  # up to date
    assert compiled.status(names) == {PROBE: "compiled"}
    built = compiled.extension(root, PROBE)
    assert built == source.with_name("mod" + SUFFIX)
    # Python's own import picks it over the .py; annotations stay documentation, as in
    # Python: a tuple where `list` is written
    assert _run(root, "import fxcprobe.mod as m; print(type(m.__loader__).__name__, "
                      "m.__file__, m.answer((1, 2)))").split() == [
        "ExtensionFileLoader", str(built), "4"]
    record = json.loads((root / "fxcprobe" / compiled.RECORD).read_text())
    assert record == {PROBE: compiled.digest(root, PROBE)}

    source.write_text(source.read_text() + "# edited\n")
    assert compiled.status(names) == {PROBE: "stale"}  # the old build would be loaded: seen
    assert build(names) == [PROBE]
    assert compiled.status(names) == {PROBE: "compiled"}
    assert _run(root, "import fxcprobe.mod as m; print(m.answer([2]))") == "3"
    assert set(source.parent.glob("mod.*")) == {source, built}  # one build: the current one


@needs_compiler
def test_a_pxd_beside_the_source_is_compiled_with_it_and_part_of_its_digest(probe):
    """A module's C declarations (bytepart.pxd's kernel) are read with its source: a C
    function declared there is called from the .py, and an edit of the .pxd alone makes the
    compiled form stale, as an edit of the .py does."""
    source, build = probe
    root = source.parents[1]
    names = (PROBE,)
    source.write_text("import cython\n\n"
                      "def twice(x):\n"
                      "    if cython.compiled:\n"
                      "        return fxc_twice(x)  # noqa: F821\n"
                      "    return -1\n")
    pxd = source.with_suffix(".pxd")
    pxd.write_text('cdef extern from *:\n    """\n    static long fxc_twice(long x) '
                   '{ return 2 * x; }\n    """\n    long fxc_twice(long x)\n')
    assert build(names) == [PROBE]
    twice = "import fxcprobe.mod as m; print(m.twice(21))"
    assert _run(root, twice) == "42"  # the C function, compiled in
    pxd.write_text(pxd.read_text().replace("2 * x", "3 * x"))
    assert compiled.status(names) == {PROBE: "stale"}
    assert build(names) == [PROBE]
    assert _run(root, twice) == "63"


@needs_compiler
def test_a_module_compiled_against_another_modules_types_is_built_with_its_declarations(probe):
    """express.pxd cimports traverser.pxd (its traverser is a typed field): a compiled module
    checks, when imported, that a cimported type has the layout it was compiled against.
    The cimported .pxd is part of the user's digest: an edit of it makes both stale, an edit
    of the other module's .py only that one."""
    source, build = probe
    root, pkg = source.parents[1], source.parent
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
    found = compiled.cimported(root, (pkg / "user.pxd").read_bytes())
    assert found == {base: (pkg / "base.pxd", (pkg / "base.pxd").read_bytes())}
    # through another module's declarations too (express -> traverser -> planner)
    assert list(compiled.cimported(root, b"from fxcprobe.user cimport User\n")) == [user, base]
    assert compiled.cimported(root, b"from libc.stdint cimport int64_t\ncimport cython\n") == {}
    assert sorted(build(names)) == sorted(names)
    assert compiled.status(names) == {base: "compiled", user: "compiled"}
    use = ("from fxcprobe.base import Box; from fxcprobe.user import User; "
           "print(*User(Box({})).twice())")
    # the local read through the typed field is typed: a field access, not a look-up
    assert _run(root, use.format(21)) == "42 Box"
    (pkg / "base.py").write_text((pkg / "base.py").read_text() + "# edited\n")
    assert compiled.status(names) == {base: "stale", user: "compiled"}
    assert build(names) == [base]
    assert compiled.status(names) == {base: "compiled", user: "compiled"}
    # the cimported declarations are part of the user's digest
    (pkg / "base.pxd").write_text("cdef class Box:\n    cdef public object v, w\n")
    assert compiled.status(names) == {base: "stale", user: "stale"}
    assert sorted(build(names)) == sorted(names)
    assert _run(root, use.format(5)) == "10 Box"


@needs_compiler
def test_a_c_method_read_as_a_value_does_not_compile(probe):
    """A ``cpdef`` method of a typed object read as a value (``f = t.method``, then
    ``f(...)``): Cython converts the C method to a Python callable of one argument fewer than
    the C function takes, which C compilers only warn about. The flags make it an error
    (compiled so, a call would pass the method's last C argument from a stray register)."""
    source, build = probe
    pkg = source.parent
    base, user = "fxcprobe.base", "fxcprobe.user"
    (pkg / "base.py").write_text("class Box:\n    def get(self, v):\n        return v\n")
    (pkg / "base.pxd").write_text("cdef class Box:\n    cpdef get(self, v)\n")
    (pkg / "user.py").write_text("def twice(b, v):\n    get = b.get\n    return get(v) * 2\n")
    (pkg / "user.pxd").write_text("from fxcprobe.base cimport Box\n\n"
                                  "cpdef twice(Box b, v)\n")
    with pytest.raises(RuntimeError, match="incompatible-pointer-types"):
        build((base, user))
    (pkg / "user.py").write_text("def twice(b, v):\n    return b.get(v) * 2\n")
    assert sorted(build((base, user))) == [base, user]


@needs_compiler
def test_a_module_that_does_not_compile_says_so_and_leaves_none_compiled(probe):
    """All or none: the one that compiled would check, when imported, the layouts of types
    of the one that did not; and an older build left in place would run old code."""
    source, build = probe
    root, pkg = source.parents[1], source.parent
    other = "fxcprobe.other"
    (pkg / "other.py").write_text("def one():\n    return 1\n")
    assert sorted(build((PROBE, other))) == [PROBE, other]
    source.write_text("def broken(:\n")
    with pytest.raises(RuntimeError, match="fxcprobe.mod"):
        build((PROBE, other))
    assert compiled.status((PROBE, other)) == {PROBE: "missing", other: "missing"}
    assert compiled.extension(root, PROBE) is None and compiled.extension(root, other) is None
    assert not (pkg / compiled.RECORD).exists()
    with pytest.raises(RuntimeError, match="fxcprobe.nothere: its source cannot be read"):
        build((other, "fxcprobe.nothere"))


def test_import_fluxinfra_installs_nothing_unless_plain_python_is_asked_for():
    """No finder by default; FLUXINFRA_PURE_PYTHON=1, the explicit choice, installs one."""
    code = ("import sys; before = list(sys.meta_path); import fluxinfra; "
            "print([type(f).__name__ for f in sys.meta_path if f not in before])")
    assert _run(REPO, code) == "[]"
    assert _run(REPO, code, FLUXINFRA_PURE_PYTHON="0") == "[]"
    assert _run(REPO, code, FLUXINFRA_PURE_PYTHON="1") == "['_PurePython']"


def test_the_plain_python_finder_loads_the_py_beside_an_extension(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "meta_path",
                        [f for f in sys.meta_path if not isinstance(f, compiled._PurePython)])
    ours = lambda: [f for f in sys.meta_path if isinstance(f, compiled._PurePython)]  # noqa: E731
    monkeypatch.delenv("FLUXINFRA_PURE_PYTHON", raising=False)
    compiled.install()
    assert ours() == []
    monkeypatch.setenv("FLUXINFRA_PURE_PYTHON", "1")
    assert set(compiled.status().values()) == {"off"}
    compiled.install()
    compiled.install()
    assert len(ours()) == 1 and sys.meta_path[0] is ours()[0]
    pkg = tmp_path / "fxcpure"
    pkg.mkdir()
    (pkg / "mod.py").write_text("X = 1\n")
    (pkg / ("mod" + SUFFIX)).write_bytes(b"not loaded")
    finder = compiled._PurePython(("fxcpure.mod",))
    spec = finder.find_spec("fxcpure.mod", [str(pkg)])
    assert isinstance(spec.loader, importlib.machinery.SourceFileLoader)
    assert spec.origin == str(pkg / "mod.py")
    assert finder.find_spec("fxcpure.other", [str(pkg)]) is None  # not one of its names


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
    assert lines[-1] == f"(built in place by fluxinfra compile: {REPO / 'fluxinfra'})"


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


def _clean_copy(dest: Path) -> Path:
    """The repository's files as a fresh clone would have them, with the working tree's
    edits (tracked and new files; nothing git ignores: no in-place build, no build/)."""
    listed = subprocess.run(["git", "-C", str(REPO), "ls-files", "-co", "--exclude-standard",
                             "-z"], capture_output=True, check=True).stdout
    for rel in filter(None, listed.decode().split("\0")):
        if (REPO / rel).is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / rel, dest / rel)
    return dest


def _wheel(src: Path, out: Path, **env) -> Path:
    environ = dict(os.environ, **env)
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps",
                           "--no-build-isolation", "-q", "-w", str(out), str(src)],
                          capture_output=True, text=True, env=environ, timeout=1800)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    (wheel,) = out.glob("fluxinfra-*.whl")
    return wheel


@pytest.mark.slow
@needs_compiler
def test_a_wheel_carries_one_extension_per_module_and_installs_them_compiled(tmp_path):
    """`pip wheel` of a clean copy: one extension per MODULES entry beside its .py, and the
    record of their sources; installed (--target), each imports compiled, its status says
    so, and `import fluxinfra` leaves sys.meta_path as it was."""
    src = _clean_copy(tmp_path / "repo")
    wheel = _wheel(src, tmp_path / "wheels")
    assert "-none-any" not in wheel.name, wheel.name  # a platform wheel: it holds C
    names = set(zipfile.ZipFile(wheel).namelist())
    for name in compiled.MODULES:
        path = "/".join(name.split("."))
        assert path + SUFFIX in names, name
        assert path + ".py" in names, name  # (the source: what the record is checked with)
    assert sum(n.endswith(SUFFIX) for n in names) == len(compiled.MODULES)
    record = json.loads(zipfile.ZipFile(wheel).read(f"fluxinfra/{compiled.RECORD}"))
    assert record == {name: compiled.digest(src, name) for name in compiled.MODULES}

    site = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target",
                    str(site), str(wheel)], check=True, capture_output=True, timeout=300)
    code = ("import importlib, json, sys; before = list(sys.meta_path); import fluxinfra; "
            "after = list(sys.meta_path); from fluxinfra import compiled; "
            "files = {n: importlib.import_module(n).__file__ for n in compiled.MODULES}; "
            "print(json.dumps([fluxinfra.__file__, after == before, files, "
            "compiled.status()]))")
    where, unchanged, files, states = json.loads(_run(site, code))
    assert where == str(site / "fluxinfra" / "__init__.py")
    assert unchanged, "import fluxinfra changed sys.meta_path"
    for name, file in files.items():
        assert file == str(site.joinpath(*name.split(".")).with_name(
            name.rpartition(".")[2] + SUFFIX)), (name, file)
    assert set(states.values()) == {"compiled"}, states


def test_a_build_asked_for_plain_python_makes_a_pure_wheel(tmp_path):
    """FLUXINFRA_BUILD_PURE=1: no extensions, a wheel for any platform, still installable
    (the image's build, and anyone's without a compiler)."""
    src = _clean_copy(tmp_path / "repo")
    wheel = _wheel(src, tmp_path / "wheels", FLUXINFRA_BUILD_PURE="1")
    assert wheel.name.endswith("-py3-none-any.whl"), wheel.name
    names = zipfile.ZipFile(wheel).namelist()
    assert not [n for n in names if n.endswith((".so", ".c", compiled.RECORD))]
    assert "fluxinfra/matcher/planner.py" in names and "fluxinfra/matcher/planner.pxd" in names
    # installed, `fluxinfra compile` says where compiled modules come from, and builds nothing
    site = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target",
                    str(site), str(wheel)], check=True, capture_output=True, timeout=300)
    environ = {k: v for k, v in os.environ.items() if k != "FLUXINFRA_PURE_PYTHON"}
    environ["PYTHONPATH"] = str(site)
    status = subprocess.run([sys.executable, "-c", "from fluxinfra.cli import main; "
                             "raise SystemExit(main(['compile', '--status']))"],
                            capture_output=True, text=True, env=environ, timeout=120, cwd=site)
    assert status.returncode == 0, status.stderr
    lines = status.stdout.splitlines()
    assert lines[:-1] == [f"missing   {name}" for name in compiled.MODULES]
    assert lines[-1] == f"(installed: {site / 'fluxinfra'})"
    proc = subprocess.run([sys.executable, "-c", "from fluxinfra.cli import main; "
                           "raise SystemExit(main(['compile']))"],
                          capture_output=True, text=True, env=environ, timeout=120, cwd=site)
    assert proc.returncode == 1 and "installed, not a source checkout" in proc.stderr, \
        proc.stderr
