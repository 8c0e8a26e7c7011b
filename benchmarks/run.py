"""Run fluxinfra's benchmarks: every module in ``benchmarks/``, or the ones named.

    .venv/bin/python benchmarks/run.py                       # all of them (what `make bench` runs)
    .venv/bin/python benchmarks/run.py matcher --quick       # one, with its own options
    .venv/bin/python benchmarks/run.py --list

A benchmark module is any ``benchmarks/<name>.py`` (not starting with ``_``, not this file) that
defines ``main(argv: list[str]) -> int``. Arguments that name a module select it; every other
argument is passed to each selected module's ``main`` (so ``--quick`` reaches them all). Each prints
its own table; the exit status is the worst of theirs.
"""

from __future__ import annotations

import importlib.util
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
    spec = importlib.util.spec_from_file_location(f"fluxinfra_benchmarks.{name}", path)
    module = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(module)
    return module


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    modules = discover()
    if "--list" in argv:
        print("\n".join(modules))
        return 0
    chosen = [a for a in argv if a in modules]
    passed = [a for a in argv if a not in modules]
    if not chosen and any(not a.startswith("-") and a not in modules for a in argv[:1]):
        print(f"benchmarks/run.py: no benchmark named {argv[0]!r}; known: {', '.join(modules)}",
              file=sys.stderr)
        return 2
    status = 0
    repo = str(HERE.parent)
    if repo not in sys.path:
        sys.path.insert(0, repo)
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
