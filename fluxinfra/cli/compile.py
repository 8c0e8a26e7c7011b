"""``fluxinfra compile``: (re)build the matcher's compiled modules in place in a source checkout
(:mod:`fluxinfra.compiled`), or say which load compiled.

Optional: without it (or without Cython or a C compiler) the same modules run as plain Python.
It is the checkout's ``setup.py build_ext --inplace`` (the package's own build), compiling
only modules whose sources changed since their last build; ``make setup`` runs it. An
installed fluxinfra has the compiled modules its wheel brought.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path

from fluxinfra import compiled


def checkout() -> Path | None:
    """The source checkout this fluxinfra is imported from (its ``setup.py`` beside the
    package), or None (an installed package)."""
    root = compiled.source_root("fluxinfra")
    if root is None or not (root / "setup.py").is_file() or \
            not (root / "pyproject.toml").is_file():
        return None
    return root


def _load_setup(root: Path):
    spec = importlib.util.spec_from_file_location("_fluxinfra_setup", root / "setup.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(
        prog="fluxinfra compile",
        description="Compile the matcher's hot modules from their unchanged Python source with "
                    "Cython, in place in this source checkout (only those whose source "
                    "changed): setup.py build_ext --inplace. Without it the same modules run "
                    "as plain Python: the same answers, 6-27%% slower per match "
                    "(docs/matcher.md). An installed fluxinfra brings them in its wheel.")
    ap.add_argument("--status", action="store_true",
                    help="only say, per module, which form an import loads: compiled (built "
                         "from its sources as they are), stale (built from older sources: an "
                         "import loads that old code; rebuild), missing (plain Python) or off "
                         "(FLUXINFRA_PURE_PYTHON)")
    ap.add_argument("-j", "--jobs", type=int, default=2, metavar="N",
                    help="compile N modules at a time (default 2)")
    args = ap.parse_args(argv)
    root = checkout()
    if args.status:
        for name, state in compiled.status().items():
            print(f"{state:9} {name}")
        where = compiled.source_root("fluxinfra")
        kind = "built in place by fluxinfra compile" if root else "installed"
        print(f"({kind}: {where / 'fluxinfra' if where else 'fluxinfra'})")
        return 0
    if args.jobs < 1:
        ap.error(f"--jobs {args.jobs}: give 1 or more")
    if root is None:
        print("fluxinfra compile: this fluxinfra is installed, not a source checkout; its "
              "compiled modules come with its wheel (built where Cython and a C compiler are "
              "at hand; FLUXINFRA_BUILD_PURE=1 builds plain Python). See: fluxinfra compile "
              "--status", file=sys.stderr)
        return 1
    setup = _load_setup(root)
    try:
        made = setup.build(compiled.MODULES, root, jobs=args.jobs)
    except (RuntimeError, OSError) as exc:
        print(f"fluxinfra compile: {exc}\nThe matcher runs as plain Python.")
        return 1
    print(f"fluxinfra compile: {len(made)} module(s) compiled, "
          f"{len(compiled.MODULES) - len(made)} up to date (in place in {root / 'fluxinfra'})")
    return 0
