"""The matcher's modules import one another without a circle: every import, at module level
or inside a function (a lazy import only hides a circle), and every ``cimport`` of a ``.pxd``
(a compiled module imports the modules whose types it cimports when it loads). Imports made
only for type checkers (``if TYPE_CHECKING:``) are not run and do not count. Read from the
source, so this runs without importing anything."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import fluxinfra.matcher as matcher_pkg

PKG = Path(matcher_pkg.__file__).parent
ROOT = PKG.parent.parent
_CIMPORT = re.compile(r"^\s*from\s+([\w.]+)\s+cimport\b", re.M)


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in sorted(PKG.rglob("*.py"))}


def _typing_only(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(tree: ast.AST):
    """Every import statement run when the code runs (not those under TYPE_CHECKING)."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and _typing_only(node):
            yield from (n for branch in node.orelse for n in _imports_in(branch))
            continue
        yield from _imports_in(node)


def _imports_in(node: ast.AST):
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        yield node
    else:
        yield from _imports(node)


def _target(name: str) -> str | None:
    """The matcher module ``name`` names (a submodule, else the package that holds it)."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def imported(name: str) -> set[str]:
    """The matcher modules module ``name`` imports (and, compiled, cimports)."""
    path = MODULES[name]
    out: set[str] = set()
    for node in _imports(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            if node.level:  # (relative: resolved against this module's package)
                base = name.rsplit(".", node.level - (path.name == "__init__.py"))[0]
                stem = f"{base}.{node.module}" if node.module else base
            else:
                stem = node.module
            # ``from X import Y``: module X.Y if there is one, else a name of X
            names = [f"{stem}.{a.name}" if f"{stem}.{a.name}" in MODULES else stem
                     for a in node.names]
        out |= {t for n in names if (t := _target(n)) is not None}
    pxd = path.with_suffix(".pxd")
    if pxd.is_file():
        out |= {t for m in _CIMPORT.findall(pxd.read_text()) if (t := _target(m))}
    # a package is initialised before any module in it: a module naming its own package (or
    # one above) makes no edge of its own, and the package's __init__ may import its modules
    return {t for t in out if t != name and not name.startswith(t + ".")}


def circles() -> list[list[str]]:
    """Each import circle among the matcher's modules, once (as the modules on it)."""
    graph = {name: imported(name) for name in MODULES}
    found: list[list[str]] = []
    seen: set[frozenset[str]] = set()

    def walk(start: str, at: str, path: list[str]) -> None:
        for nxt in sorted(graph[at]):
            if nxt == start:
                key = frozenset(path)
                if key not in seen:
                    seen.add(key)
                    found.append(path + [start])
            elif nxt not in path and nxt > start:  # (each circle from its least module)
                walk(start, nxt, path + [nxt])

    for name in sorted(graph):
        walk(name, name, [name])
    return found


def test_the_matcher_has_no_import_circle() -> None:
    assert circles() == []


def test_the_express_lane_sits_above_the_traverser() -> None:
    """The lane imports the traverser's modules; none of them imports the lane (the Matcher
    attaches it to its traverser)."""
    lane = "fluxinfra.matcher.express"
    assert "fluxinfra.matcher.traverser.dfu" in imported(lane)
    users = {name for name in MODULES if lane in imported(name)}
    assert users == {"fluxinfra.matcher.matcher"}, users


#: a module longer than this says in its docstring why it is one file
LONGEST = 800


def test_a_long_module_says_why_it_is_one_file() -> None:
    """Each concern has a module of its own, in the matcher and in every other package; one
    longer than LONGEST lines is a single concern that cannot be cut (the methods of one
    compiled extension type stay in its module), and its docstring says so. Generated gRPC
    code is not ours to cut."""
    package = PKG.parent
    unexplained = [str(path.relative_to(ROOT)) for path in sorted(package.rglob("*.py"))
                   if "_generated" not in path.parts
                   and len(path.read_text().splitlines()) > LONGEST
                   and "Why this file is long" not in (ast.get_docstring(
                       ast.parse(path.read_text())) or "")]
    assert unexplained == []
