"""The ``fluxinfra`` command.

Each subcommand lives in its own module (``fluxinfra/cli/<name>.py``) exposing ``main(argv) -> int``
and is imported only when invoked, so ``fluxinfra query`` never pays for Pulumi or gRPC imports.
``pip install fluxinfra`` brings only the matcher's needs (``query``, ``match``, ``draw``,
``simulate``); a command that needs an extra says which one when its modules are missing.
"""

from __future__ import annotations

import atexit
import importlib
import os
import sys
from typing import NoReturn

from fluxinfra import __version__
from fluxinfra.console import quiet_broken_pipe
from fluxinfra.errors import FluxinfraError

#: subcommand -> (module, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "query": ("fluxinfra.cli.query", "resource-query compatible shell over the matcher"),
    "match": ("fluxinfra.cli.match", "one-shot match of a jobspec against a graph (JSON out)"),
    "draw": ("fluxinfra.cli.draw", "draw a graph and jobs' allocations (SVG, PNG, dot)"),
    "render": ("fluxinfra.cli.render", "render a stack offline to validated Kubernetes YAML"),
    "scheduler": ("fluxinfra.cli.scheduler", "run the Kubernetes scheduler"),
    "service": ("fluxinfra.cli.service", "run the Fluxion gRPC service"),
    "simulate": ("fluxinfra.cli.simulate", "replay a workload through the scheduler core"),
    "distribute": ("fluxinfra.cli.distribute",
                   "fan content out to every node through the Flux broker tree"),
    "queue": ("fluxinfra.cli.queue", "the Fluxion queue (FluxJobs), or serve its webhook"),
    "ledger": ("fluxinfra.cli.ledger",
               "per node: what Flux jobs hold, what pods hold, what is free"),
    "compile": ("fluxinfra.cli.compile",
                "compile the matcher's hot modules with Cython (optional), or show which are"),
}

#: pyproject.toml's extras -> the top-level modules their packages provide
EXTRA_MODULES: dict[str, tuple[str, ...]] = {
    "pulumi": ("pulumi", "pulumi_kubernetes", "pulumi_command", "kubernetes_validate",
               "cryptography", "tomli_w"),
    "scheduler": ("kubernetes", "grpc", "google", "grpc_health", "numpy"),
    "fast": ("numpy",),  # optional everywhere: the matcher ranks in plain Python without it
    "compiled": ("Cython", "setuptools"),  # optional: the same modules run as plain Python
}


#: commands whose process ends, once its output is flushed and its exit handlers have run,
#: without the interpreter's teardown (:func:`script`)
QUICK_EXIT = frozenset({"query"})


def missing_extra(exc: ModuleNotFoundError) -> str | None:
    """The extra that provides the module ``exc`` could not import, if one does."""
    top = (exc.name or "").split(".")[0]
    return next((extra for extra, modules in EXTRA_MODULES.items() if top in modules), None)


def _usage() -> str:
    lines = ["usage: fluxinfra [--version] <command> [options]", "", "commands:"]
    lines += [f"  {name:<10} {help_}" for name, (_, help_) in COMMANDS.items()]
    lines += ["", "Run 'fluxinfra <command> --help' for a command's options."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(_usage())
        return 0
    if argv[0] in ("-V", "--version"):
        print(f"fluxinfra {__version__}")
        return 0
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        print(f"fluxinfra: unknown command {name!r}; choose one of: {', '.join(COMMANDS)}",
              file=sys.stderr)
        return 2
    return quiet_broken_pipe(lambda: _run(name, rest))


def _run(name: str, rest: list[str]) -> int:
    try:
        module = importlib.import_module(COMMANDS[name][0])
        return int(module.main(rest) or 0)
    except FluxinfraError as exc:
        print(f"fluxinfra {name}: error: {exc}", file=sys.stderr)
        return 2
    except ModuleNotFoundError as exc:
        extra = missing_extra(exc)
        if extra is None:
            raise
        print(f"fluxinfra {name}: needs the '{extra}' extra (Python module {exc.name!r} is not "
              f"installed); install it with: pip install 'fluxinfra[{extra}]'", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


def script() -> NoReturn:
    """The ``fluxinfra`` program (and ``python -m fluxinfra``): :func:`main` on the process's
    arguments, then the end of the process.

    A query session holds a graph and its jobs: millions of objects at 16,384 nodes. The
    interpreter's teardown would collect them all once more and free them one by one (1.3 s
    of a 5.6 s run of 20,000 matches there); the operating system takes the memory back at
    once. So a command of :data:`QUICK_EXIT` flushes stdout and stderr, runs the exit
    handlers (``atexit``: logging's, for one) and ends the process with its status; a
    failed flush makes the status 120 when it was 0, as Python's own exit does. In-process
    callers of :func:`main` are unaffected."""
    argv = sys.argv[1:]
    status = main(argv)
    if argv and argv[0] in QUICK_EXIT:
        for stream in (sys.stdout, sys.stderr):
            try:
                if stream is not None:
                    stream.flush()
            except (OSError, ValueError):
                status = status or 120
        atexit._run_exitfuncs()
        os._exit(status)
    sys.exit(status)


if __name__ == "__main__":  # pragma: no cover
    script()
