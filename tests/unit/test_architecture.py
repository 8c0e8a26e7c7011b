"""The dependency direction of ARCHITECTURE.md, read from the source (every ``import``, also the
ones inside functions, which are dependencies all the same):

- no import circle between fluxinfra's packages, nor between two modules;
- no import from a lower layer back up: the matcher, ``hostlist`` and ``idset`` are leaves,
  the matcher knows no Kubernetes (no ``kube``, no ``k8s``, no Kubernetes client: Node and Pod
  objects become graphs in ``kube``), ``kube`` builds on the matcher's graph, the ``k8s``
  components never import the scheduler, service or queue they deploy, the scheduler never
  imports the queue, the service never imports the scheduler or the queue, and nothing imports
  ``cli``; a program (a ``__main__`` module, ``python -m fluxinfra...``) is above every
  layer: it may import ``cli``, and nothing imports it;
- no private name (``_x``) imported across packages;
- inside the scheduler, the core's pieces import downwards only: config, then the cache and the
  scheduling queue, the gangs, binding, the cycle, and the core on top.

What breaks these today is listed below, each with the reason and the way out: a new violation
fails, and so does an entry that no longer happens (delete it when the code is fixed).
"""

from __future__ import annotations

import ast
import functools
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2] / "fluxinfra"

#: base modules anything may import (fluxinfra's own toolbox, no layer of their own)
BASE = {"fluxinfra", "errors", "inputs", "hostlist", "idset", "console", "signals", "compiled"}
#: package -> the fluxinfra packages it may import (besides itself); None: any but FORBIDDEN's
ALLOWED: dict[str, set[str] | None] = {
    "hostlist": set(), "idset": set(),
    "matcher": BASE - {"console", "signals"},
    "kube": {"fluxinfra", "errors", "inputs", "hostlist", "idset", "matcher"},
}
#: package -> packages it must never import
FORBIDDEN = {
    "k8s": {"scheduler", "service", "queue", "cli"},
    "scheduler": {"queue", "cli"},
    "service": {"scheduler", "queue", "cli"},
}
_MAKES_CLI_CALLS = {"cli", "__main__"}

#: (importing module, imported module) -> why it is still so: an import up a layer, or one
#: that closes a circle between packages
KNOWN_EDGES: dict[tuple[str, str], str] = {}
#: (importing module, imported module, name) -> why
KNOWN_PRIVATE: dict[tuple[str, str, str], str] = {}
#: modules importing each other -> why
KNOWN_MODULE_CYCLES: dict[frozenset[str], str] = {}


def _name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@functools.cache
def _imports() -> list[tuple[str, str, str | None]]:
    """(importing module, imported fluxinfra module, name imported from it or None)."""
    files = [p for p in ROOT.rglob("*.py") if "_generated" not in p.parts]
    modules = {_name(p) for p in files}
    out = []
    for path in files:
        here = _name(path)
        package = here.split(".") if path.name == "__init__.py" else here.split(".")[:-1]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                out += [(here, a.name, None) for a in node.names if a.name in modules]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    base = ".".join(package[:len(package) - node.level + 1]
                                    + ([node.module] if node.module else []))
                for alias in node.names:
                    sub = f"{base}.{alias.name}"
                    if sub in modules:
                        out.append((here, sub, None))
                    elif base in modules:
                        out.append((here, base, alias.name))
    return out


def _package(module: str) -> str:
    """The layer ``module`` is in: its package under fluxinfra, or ``__main__`` for a program
    (``fluxinfra/__main__.py``, ``fluxinfra/scheduler/__main__.py``: run, never imported)."""
    parts = module.split(".")
    if parts[-1] == "__main__":
        return "__main__"
    return parts[1] if len(parts) > 1 else "fluxinfra"


def _cycles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """Tarjan's strongly connected components of more than one vertex."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = set()
            while True:
                w = stack.pop()
                comp.add(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(frozenset(comp))
    for v in list(graph):
        if v not in index:
            visit(v)
    return found


def _upward(src: str, dst: str) -> bool:
    a, b = _package(src), _package(dst)
    if a == b:
        return False
    if b == "__main__":
        return True
    if b == "cli" and a not in _MAKES_CLI_CALLS:
        return True
    allowed = ALLOWED.get(a)
    if allowed is not None and b not in allowed:
        return True
    return b in FORBIDDEN.get(a, set())


def test_no_import_goes_up_a_layer() -> None:
    edges = {(src, dst) for src, dst, _ in _imports()}
    upward = {(src, dst) for src, dst in edges if _upward(src, dst)}
    assert upward - KNOWN_EDGES.keys() == set(), "imports against ARCHITECTURE.md's direction"
    assert KNOWN_EDGES.keys() - edges == set(), "fixed: delete these from KNOWN_EDGES"


def test_no_import_circle_between_packages() -> None:
    graph: dict[str, set[str]] = defaultdict(set)
    for src, dst, _ in _imports():
        if _package(src) != _package(dst) and (src, dst) not in KNOWN_EDGES:
            graph[_package(src)].add(_package(dst))
    assert _cycles(graph) == []


def test_no_import_circle_between_modules() -> None:
    graph: dict[str, set[str]] = defaultdict(set)
    for src, dst, _ in _imports():
        if src != dst:
            graph[src].add(dst)
    cycles = set(_cycles(graph))
    assert cycles - KNOWN_MODULE_CYCLES.keys() == set()
    assert KNOWN_MODULE_CYCLES.keys() - cycles == set(), "fixed: delete from KNOWN_MODULE_CYCLES"


def test_no_private_name_crosses_a_package() -> None:
    private = {(src, dst, name) for src, dst, name in _imports()
               if name and name.startswith("_") and not name.startswith("__")
               and _package(src) != _package(dst)}
    assert private - KNOWN_PRIVATE.keys() == set()
    assert KNOWN_PRIVATE.keys() - private == set(), "fixed: delete these from KNOWN_PRIVATE"


#: top-level modules of Kubernetes clients and Pulumi's Kubernetes provider
KUBERNETES_CLIENTS = {"kubernetes", "kubernetes_asyncio", "kr8s", "lightkube", "pykube",
                      "pulumi_kubernetes"}


def _third_party_imports(package: str) -> set[tuple[str, str]]:
    """(module, imported top-level name) for every import in ``fluxinfra/<package>``."""
    out = set()
    for path in (ROOT / package).rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                out |= {(_name(path), a.name.split(".")[0]) for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                out.add((_name(path), node.module.split(".")[0]))
    return out


def test_the_matcher_knows_no_kubernetes() -> None:
    """Kubernetes objects become graphs in ``fluxinfra.kube``; the matcher imports neither
    ``kube`` nor ``k8s`` nor any Kubernetes client, and has no module of its own for them."""
    kube_edges = {(src, dst) for src, dst, _ in _imports()
                  if _package(src) == "matcher" and _package(dst) in ("kube", "k8s")}
    assert kube_edges == set()
    clients = {(src, top) for src, top in _third_party_imports("matcher")
               if top in KUBERNETES_CLIENTS}
    assert clients == set()
    assert not [p.name for p in (ROOT / "matcher").iterdir()
                if p.stem in ("k8s", "kube", "kubernetes")]


#: the scheduler core's pieces, lowest first: each imports only pieces of a lower rank, so the
#: cache, the queue and the gangs never reach the cycle, binding or the core above them
SCHEDULER_CORE = {"config": 0, "cache": 1, "scheduling_queue": 1, "gangs": 2, "binding": 3,
                  "cycle": 4, "core": 5}


def _core_upward(src: str, dst: str) -> bool:
    prefix = "fluxinfra.scheduler."
    a, b = src.removeprefix(prefix), dst.removeprefix(prefix)
    if not (src.startswith(prefix) and dst.startswith(prefix)) or \
            a not in SCHEDULER_CORE or b not in SCHEDULER_CORE:
        return False
    return SCHEDULER_CORE[b] >= SCHEDULER_CORE[a]


def test_scheduler_core_pieces_import_downwards() -> None:
    upward = {(src, dst) for src, dst, _ in _imports() if _core_upward(src, dst)}
    assert upward == set(), "a piece of the scheduler core imports one at its level or above"
    pieces = {f"fluxinfra.scheduler.{m}" for m in SCHEDULER_CORE}
    assert pieces <= {src for src, _, _ in _imports()} | {dst for _, dst, _ in _imports()}


def test_the_rules_catch_what_they_are_for() -> None:
    """The checks themselves: a matcher importing the scheduler, anything importing cli, a
    circle of two packages."""
    assert _upward("fluxinfra.matcher.graph", "fluxinfra.scheduler.core")
    assert _upward("fluxinfra.matcher.readers", "fluxinfra.kube.graph")
    assert _upward("fluxinfra.matcher.matcher", "fluxinfra.k8s.config")
    assert not _upward("fluxinfra.kube.pools", "fluxinfra.matcher.graph")
    assert _upward("fluxinfra.scheduler.core", "fluxinfra.cli.query")
    assert _upward("fluxinfra.k8s.stack", "fluxinfra.service.server")
    assert not _upward("fluxinfra.scheduler.core", "fluxinfra.matcher.graph")
    assert not _upward("fluxinfra.cli.query", "fluxinfra.scheduler.core")
    assert not _upward("fluxinfra.scheduler.__main__", "fluxinfra.cli.scheduler")
    assert _upward("fluxinfra.scheduler.main", "fluxinfra.cli.scheduler")
    assert _upward("fluxinfra.cli.scheduler", "fluxinfra.scheduler.__main__")
    assert _upward("fluxinfra.scheduler.main", "fluxinfra.queue.controller")
    assert _cycles({"a": {"b"}, "b": {"a"}, "c": {"a"}}) == [frozenset({"a", "b"})]
    assert _core_upward("fluxinfra.scheduler.cache", "fluxinfra.scheduler.cycle")
    assert _core_upward("fluxinfra.scheduler.cache", "fluxinfra.scheduler.scheduling_queue")
    assert not _core_upward("fluxinfra.scheduler.core", "fluxinfra.scheduler.cache")
    assert not _core_upward("fluxinfra.scheduler.cache", "fluxinfra.scheduler.ledger")
