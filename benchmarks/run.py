"""Run fluxinfra's benchmarks: every module in ``benchmarks/``, or the ones named.

    .venv/bin/python benchmarks/run.py --quick                 # all, small sizes (`make bench`)
    .venv/bin/python benchmarks/run.py                         # all, full sizes (`make bench-full`)
    .venv/bin/python benchmarks/run.py matcher --sizes 256     # one, with its own options
    .venv/bin/python benchmarks/run.py --list                  # names and one-line summaries
    .venv/bin/python benchmarks/run.py --help                  # every benchmark and its options

A benchmark module is any ``benchmarks/<name>.py`` (not starting with ``_``, not this file)
that defines ``main(argv: list[str]) -> int``. ``run.py --help`` lists every module's options:
its ``parser()`` when it has one, else the argparse parser its ``main`` builds (caught before
anything runs), else the options its source tests ``argv`` for. Arguments
that name a module select it; every other argument is passed to each selected module's
``main`` (so ``--quick`` reaches them all). Each prints its own tables (``benchmarks/_table.py``:
no ``nan``, no empty columns, ~100 columns wide, a legend); the exit status is the worst of
theirs.

What a benchmark prints is also written as JSON, ``benchmarks/results/<name>.json`` (with
``--quick``: ``<name>-quick.json``, so a quick run never replaces a full one): the command line,
when and where it ran (host, processors, memory, Python, load averages before and after), its
exit status, and every table it printed, as columns and rows of values; and the versions of the
outside programs the benchmark used (a module's ``tools(argv)`` names them: ``flux``,
``resource-query``, ``kubernetes``). ``--label L`` names the file ``<name>-L.json``, so runs
of one benchmark with different options keep a file each. ``--results-dir DIR`` writes them
elsewhere, ``--no-results`` not at all; these options are run.py's own and are not passed on.
``benchmarks/run.py --tables`` writes docs/benchmarks.md's tables (and the README's headline
figures) from the committed results (``benchmarks/_docs.py``). A run that prints no table (a
benchmark that skipped: no Kubernetes or Flux on this machine) keeps the results file already
there.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import importlib.util
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from unittest import mock

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
#: _table.py's variable (kept in step by a test; run.py does not import _table before a module)
RECORD_ENV = "FLUXINFRA_BENCH_RECORD"


def discover() -> dict[str, Path]:
    """Benchmark module name -> file."""
    return {
        path.stem: path
        for path in sorted(HERE.glob("*.py"))
        if not path.stem.startswith("_") and path.name != Path(__file__).name
    }


def _load(name: str, path: Path):
    for folder in (str(HERE.parent), str(HERE)):
        if folder not in sys.path:
            sys.path.insert(0, folder)
    spec = importlib.util.spec_from_file_location(f"fluxinfra_benchmarks.{name}", path)
    module = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(module)
    return module


def _summary(module) -> str:
    return (module.__doc__ or "").strip().splitlines()[0] if module.__doc__ else ""


class _ParserBuilt(Exception):
    """Raised instead of parsing: carries the parser a module's ``main`` built."""

    def __init__(self, parser: argparse.ArgumentParser) -> None:
        super().__init__("parser built")
        self.parser = parser


def _parser_of(module) -> argparse.ArgumentParser | None:
    """A module's argparse parser: its ``parser()``, else the one its ``main`` builds (caught
    as it starts parsing, so nothing runs); None for a module without argparse."""
    if hasattr(module, "parser"):
        return module.parser()
    if getattr(module, "argparse", None) is not argparse:
        return None

    def built(self, *args, **kwargs):
        raise _ParserBuilt(self)

    with mock.patch.object(argparse.ArgumentParser, "parse_known_args", built):
        try:
            module.main([])
        except _ParserBuilt as done:
            return done.parser
    return None


def _options(module) -> list[str]:
    """The option lines of a module's help (argparse's "options:" section); for a module that
    reads its arguments itself, the options its source tests argv for."""
    parser = _parser_of(module)
    if parser is None:
        named = sorted(set(re.findall(r"[\"'](--[a-z][a-z0-9-]*=?)[\"']\s*(?:in argv|\))",
                                      Path(module.__file__).read_text())))
        return [f"{', '.join(named) or '(none)'}   (see its docstring)"]
    text = parser.format_help()
    if "options:\n" not in text:
        return ["(no options)"]
    lines = text.split("options:\n", 1)[1].splitlines()
    return [line for line in lines if line.strip() and "-h, --help" not in line
            and "show this help message" not in line]


def full_help(modules: dict[str, Path]) -> str:
    lines = ["usage: benchmarks/run.py [--list] [--help] [--tables] "
             "[--results-dir DIR | --no-results] [--label L] [BENCHMARK ...] [OPTION ...]", "",
             __doc__.strip().splitlines()[0], "",
             "Options not naming a benchmark go to every selected one (e.g. --quick).",
             "--results-dir DIR: where <name>.json goes "
             f"(default {RESULTS.relative_to(HERE.parent)}); --no-results: write none; "
             "--label L: write <name>-L.json.",
             "--tables: write docs/benchmarks.md's tables and the README's headline figures "
             "from the results (--check: only say whether they are current).", "",
             "benchmarks and their options:"]
    for name, path in modules.items():
        module = _load(name, path)
        lines += ["", f"{name}: {_summary(module)}", *("  " + o for o in _options(module))]
    return "\n".join(lines)


def machine() -> dict[str, object]:
    """Where a run happened: host, operating system, processors, memory, Python, niceness."""
    model = ""
    with contextlib.suppress(OSError):
        model = next((line.split(":", 1)[1].strip()
                      for line in Path("/proc/cpuinfo").read_text().splitlines()
                      if line.startswith("model name")), "")
    memory = None
    with contextlib.suppress(OSError, ValueError):
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    system = platform.platform()
    with contextlib.suppress(OSError):
        system = next((line.split("=", 1)[1].strip().strip('"')
                       for line in Path("/etc/os-release").read_text().splitlines()
                       if line.startswith("PRETTY_NAME=")), system)
    return {"host": platform.node(), "os": system, "kernel": platform.release(),
            "cpus": os.cpu_count(),
            "processor": model or platform.processor(), "memory_bytes": memory,
            "python": platform.python_version(), "niceness": os.nice(0)}


def _first_line(argv: list[str]) -> str | None:
    """The first line a program prints, or None when it cannot run."""
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    lines = (proc.stdout or proc.stderr).strip().splitlines()
    return lines[0].strip() if proc.returncode == 0 and lines else None


def _fluxion_version(prefix: Path) -> str | None:
    """flux-sched's version in a Flux prefix, from its shared library's name."""
    names = sorted(p.name for p in (prefix / "lib").glob("libfluxion-data.so.*.*.*"))
    return names[-1].split(".so.", 1)[1] if names else None


def _flux_prefix() -> Path | None:
    """The Flux build the benchmarks use: $FLUXINFRA_FLUX (a ``flux``), $FLUXINFRA_FLUX_PREFIX,
    /opt/flux, or the ``flux`` on PATH."""
    if os.environ.get("FLUXINFRA_FLUX"):
        return Path(os.environ["FLUXINFRA_FLUX"]).resolve().parent.parent
    if os.environ.get("FLUXINFRA_FLUX_PREFIX"):
        return Path(os.environ["FLUXINFRA_FLUX_PREFIX"])
    flux = "/opt/flux/bin/flux" if Path("/opt/flux/bin/flux").exists() else shutil.which("flux")
    return Path(flux).resolve().parent.parent if flux else None


def tool_versions(names: list[str], argv: list[str]) -> dict[str, str]:
    """The versions of the outside programs a benchmark names (``flux``, ``resource-query``,
    ``kubernetes``); ``not found`` for one that is not there."""
    versions = {}
    for name in names:
        found = None
        if name == "flux" and (prefix := _flux_prefix()):
            core = _first_line([str(prefix / "bin" / "flux"), "version"])
            sched = _fluxion_version(prefix)
            if core:
                found = f"flux-core {core.split()[-1]}" + (f", flux-sched {sched}" if sched else "")
        elif name == "resource-query" and (
                path := _pop_value(argv, "--resource-query", "a path")[1]):
            sched = _fluxion_version(Path(path).resolve().parent.parent)
            found = f"resource-query of flux-sched {sched}" if sched else None
        elif name == "kubernetes":
            folder = os.environ.get("FLUXINFRA_KUBE_BIN")
            apiserver = (str(Path(folder) / "kube-apiserver") if folder
                         else shutil.which("kube-apiserver"))
            found = _first_line([apiserver, "--version"]) if apiserver else None
        versions[name] = found or "not found"
    return versions


def _tools_of(module, argv: list[str]) -> list[str]:
    """The outside programs a benchmark module says a run with ``argv`` uses."""
    tools = getattr(module, "tools", None)
    return list(tools(argv) if callable(tools) else tools or [])


def _load_average() -> list[float] | None:
    try:
        return [round(v, 2) for v in os.getloadavg()]
    except OSError:
        return None


def results_path(name: str, passed: list[str], folder: Path, label: str | None = None) -> Path:
    stem = f"{name}-{label}" if label else name
    return folder / (f"{stem}-quick.json" if "--quick" in passed else f"{stem}.json")


def _pop_value(argv: list[str], name: str, what: str) -> tuple[list[str], str | None]:
    """``name VALUE`` (or ``name=VALUE``) taken out of ``argv``: the rest, and the value."""
    value = None
    rest = []
    it = iter(argv)
    for arg in it:
        if arg == name or arg.startswith(name + "="):
            value = arg.split("=", 1)[1] if "=" in arg else next(it, "")
            if not value:
                raise SystemExit(f"benchmarks/run.py: {name} needs {what}")
        else:
            rest.append(arg)
    return rest, value


def _pop_results_options(argv: list[str]) -> tuple[list[str], Path | None]:
    """run.py's own options out of ``argv``: the results folder, or None for none."""
    rest, value = _pop_value(argv, "--results-dir", "a directory")
    if "--no-results" in rest:
        return [a for a in rest if a != "--no-results"], None
    return rest, Path(value) if value else RESULTS


def _pop_label(argv: list[str]) -> tuple[list[str], str | None]:
    """run.py's ``--label L`` out of ``argv``: results go to ``<name>-L.json``."""
    rest, label = _pop_value(argv, "--label", "a name, e.g. --label ranking")
    if label and not re.fullmatch(r"[a-z0-9][a-z0-9_-]*", label):
        raise SystemExit(f"benchmarks/run.py: --label {label!r}: use lower-case letters, "
                         "digits, '-' and '_' (it becomes part of a file name)")
    return rest, label


def run_one(name: str, module, passed: list[str], folder: Path | None,
            label: str | None = None) -> int:
    """Run one benchmark's ``main``; with ``folder``, write what it printed as JSON there."""
    started = time.perf_counter()
    when = datetime.datetime.now(datetime.UTC)
    load_before = _load_average()
    print(f"== benchmark {name} ==", flush=True)
    with tempfile.TemporaryDirectory(prefix="fluxinfra-bench-") as scratch:
        record = Path(scratch) / "tables.jsonl"
        previous = os.environ.get(RECORD_ENV)
        if folder is not None:
            os.environ[RECORD_ENV] = str(record)
        try:
            rc = module.main(passed)
        finally:
            if previous is None:
                os.environ.pop(RECORD_ENV, None)
            else:
                os.environ[RECORD_ENV] = previous
        seconds = time.perf_counter() - started
        print(f"== {name}: {seconds:.1f} s, exit {rc} ==", flush=True)
        if folder is not None:
            tables = ([json.loads(line) for line in record.read_text().splitlines() if line]
                      if record.exists() else [])
            out = results_path(name, passed, folder, label)
            if not tables and out.exists():
                # a skipped run (no Kubernetes, no Flux here) must not wipe figures measured
                # where they were
                print(f"== {name}: no table printed; {out} kept ==", flush=True)
                return rc or 0
            out.parent.mkdir(parents=True, exist_ok=True)
            labelled = [f"--label {label}"] if label else []
            out.write_text(json.dumps({
                "benchmark": name, "label": label, "argv": passed,
                "command": " ".join(["benchmarks/run.py", name, *passed, *labelled]),
                "started": when.isoformat(timespec="seconds"), "seconds": round(seconds, 1),
                "exit": rc or 0, "machine": machine(),
                "tools": tool_versions(_tools_of(module, passed), passed),
                "load_average": {"before": load_before, "after": _load_average()},
                "tables": tables}, indent=1) + "\n")
            print(f"== {name}: results in {out} ==", flush=True)
    return rc or 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    modules = discover()
    if "-h" in argv or "--help" in argv:
        chosen = {n: p for n, p in modules.items() if n in argv} or modules
        print(full_help(chosen))
        return 0
    if "--tables" in argv:
        if str(HERE) not in sys.path:  # _docs imports _table beside it
            sys.path.insert(0, str(HERE))
        import _docs

        return _docs.main([a for a in argv if a != "--tables"])
    if "--list" in argv:
        for name, path in modules.items():
            print(f"{name:<14} {_summary(_load(name, path))}")
        return 0
    argv, folder = _pop_results_options(argv)
    argv, label = _pop_label(argv)
    chosen = [a for a in argv if a in modules]
    passed = [a for a in argv if a not in modules]
    if not chosen and any(not a.startswith("-") and a not in modules for a in argv[:1]):
        print(f"benchmarks/run.py: no benchmark named {argv[0]!r}; known: {', '.join(modules)}",
              file=sys.stderr)
        return 2
    status = 0
    for name in chosen or list(modules):
        module = _load(name, modules[name])
        if not hasattr(module, "main"):
            continue
        status = max(status, run_one(name, module, passed, folder, label))
    return status


if __name__ == "__main__":
    sys.exit(main())
