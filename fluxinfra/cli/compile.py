"""``fluxinfra compile``: compile the matcher's hot modules with Cython (:mod:`fluxinfra.compiled`).

Optional: without it (or without Cython or a C compiler) the same modules run as plain Python.
``make setup`` runs it; it compiles only modules whose source changed since their last build.
"""

from __future__ import annotations

import argparse

from fluxinfra import compiled


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(
        prog="fluxinfra compile",
        description="Compile the matcher's hot modules from their unchanged Python source with "
                    "Cython, into this environment (only those whose source changed). Without "
                    "it the same modules run as plain Python: the same answers, 6-27%% slower "
                    "per match (docs/matcher.md).")
    ap.add_argument("--status", action="store_true",
                    help="only say, per module, whether a compiled form of its current source "
                         "exists (compiled), only of older sources (stale) or none (missing); "
                         "waiting: compiled, but against another module's types whose own "
                         "compiled form is stale or missing (both load as Python until it is "
                         "compiled)")
    ap.add_argument("-j", "--jobs", type=int, default=2, metavar="N",
                    help="compile N modules at a time (default 2)")
    args = ap.parse_args(argv)
    if args.status:
        for name, state in compiled.status().items():
            print(f"{state:9} {name}")
        print(f"(kept in {compiled.cache_dir()})")
        return 0
    if args.jobs < 1:
        ap.error(f"--jobs {args.jobs}: give 1 or more")
    try:
        made = compiled.build(jobs=args.jobs)
    except (RuntimeError, OSError) as exc:
        print(f"fluxinfra compile: {exc}\nThe matcher runs as plain Python.")
        return 1
    print(f"fluxinfra compile: {len(made)} module(s) compiled, "
          f"{len(compiled.MODULES) - len(made)} up to date ({compiled.cache_dir()})")
    return 0
