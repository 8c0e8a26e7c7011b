"""Run fluxinfra's benchmarks: every module in ``benchmarks/``, or the ones named.

    .venv/bin/python benchmarks/run.py --quick                 # all, small sizes (`make bench`)
    .venv/bin/python benchmarks/run.py                         # all, full sizes (`make bench-full`)
    .venv/bin/python benchmarks/run.py matcher --sizes 256     # one, with its own options
    .venv/bin/python benchmarks/run.py --list                  # names and one-line summaries
    .venv/bin/python benchmarks/run.py --help                  # every benchmark and its options

A benchmark module is any ``benchmarks/<name>.py`` (not starting with ``_``, not this file)
that defines ``main(argv: list[str]) -> int``, whose ``--help`` is argparse's (``run.py --help``
lists every module's options; a ``parser()`` function is used when there is one). Arguments
that name a module select it; every other argument is passed to each selected module's
``main`` (so ``--quick`` reaches them all). Each prints its own tables (``benchmarks/_table.py``:
no ``nan``, no empty columns, ~100 columns wide, a legend); the exit status is the worst of
theirs.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import sys
import time
from pathlib import Path

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


def _options(module) -> list[str]:
    """The option lines of a module's help: its ``parser()``'s, else what ``main(["--help"])``
    prints (argparse's help, then SystemExit)."""
    if hasattr(module, "parser"):
        text = module.parser().format_help()
    else:
        out = io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):
            module.main(["--help"])
        text = out.getvalue()
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
