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
"""

from __future__ import annotations

import argparse
import importlib.util
import re
import sys
import time
from pathlib import Path
from unittest import mock

HERE = Path(__file__).resolve().parent


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
    lines = ["usage: benchmarks/run.py [--list] [--help] [BENCHMARK ...] [OPTION ...]", "",
             __doc__.strip().splitlines()[0], "",
             "Options not naming a benchmark go to every selected one (e.g. --quick).", "",
             "benchmarks and their options:"]
    for name, path in modules.items():
        module = _load(name, path)
        lines += ["", f"{name}: {_summary(module)}", *("  " + o for o in _options(module))]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    modules = discover()
    if "-h" in argv or "--help" in argv:
        chosen = {n: p for n, p in modules.items() if n in argv} or modules
        print(full_help(chosen))
        return 0
    if "--list" in argv:
        for name, path in modules.items():
            print(f"{name:<14} {_summary(_load(name, path))}")
        return 0
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
        started = time.perf_counter()
        print(f"== benchmark {name} ==", flush=True)
        rc = module.main(passed)
        print(f"== {name}: {time.perf_counter() - started:.1f} s, exit {rc} ==", flush=True)
        status = max(status, rc or 0)
    return status


if __name__ == "__main__":
    sys.exit(main())
