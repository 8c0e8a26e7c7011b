"""The ``.pxd`` files beside the matcher's modules declare some of their classes as extension
types for the compiled form (``fluxinfra compile``): an attribute read through ``self`` is then
a field of the object, not a look-up. A class without ``cdef dict __dict__`` can hold only
what is declared, so its declaration and its ``__slots__`` must name the same attributes, and
a declared attribute must be one the class really sets: a slot added to the ``.py`` alone
would fail only in the compiled form. Read from the source, so this runs either way."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import fluxinfra.matcher as matcher_pkg

PKG = Path(matcher_pkg.__file__).parent
DECLARED = sorted(p.relative_to(PKG).with_suffix("").as_posix() for p in PKG.rglob("*.pxd"))


def class_lines(stem: str):
    """(class, its base, line) for each line of a ``.pxd`` inside a ``cdef class`` block
    (comments dropped); a block's head line comes with the line None."""
    current = None
    for line in (PKG / f"{stem}.pxd").read_text().splitlines():
        line = line.split("#", 1)[0].rstrip()
        head = re.match(r"cdef class (\w+)(?:\((\w+)\))?:$", line)
        if head:
            current = head[1]
            yield current, head[2], None
        elif line and not line.startswith((" ", "cdef extern", '"""')):
            current = None
        elif current is not None:
            yield current, None, line


def declarations(stem: str) -> dict[str, tuple[str | None, set[str], bool]]:
    """class -> (its declared base, its declared attributes, has a __dict__)."""
    out: dict[str, tuple[str | None, set[str], bool]] = {}
    for name, base, line in class_lines(stem):
        if line is None:
            out[name] = (base, set(), False)
            continue
        field = re.match(r"\s+cdef (?:public |readonly )?(\w+) (.+)$", line)
        if field:
            base, attrs, has_dict = out[name]
            names = {n.strip() for n in field[2].split(",")}
            if names == {"__dict__"}:
                out[name] = (base, attrs, True)
            else:
                attrs |= names
    return out


def classes(stem: str) -> dict[str, ast.ClassDef]:
    tree = ast.parse((PKG / f"{stem}.py").read_text())
    return {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}


def slots(cls: ast.ClassDef) -> set[str] | None:
    for node in cls.body:
        if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "__slots__" for t in node.targets):
            return set(ast.literal_eval(node.value))
    return None


def assigned(cls: ast.ClassDef) -> set[str]:
    """Every ``self.<name>`` the class's methods assign."""
    out = set()
    for node in ast.walk(cls):
        targets = node.targets if isinstance(node, ast.Assign) else \
            [node.target] if isinstance(node, (ast.AnnAssign, ast.AugAssign)) else []
        for t in targets:
            for e in ast.walk(t):
                if isinstance(e, ast.Attribute) and isinstance(e.value, ast.Name) \
                        and e.value.id == "self":
                    out.add(e.attr)
    return out


def test_the_declared_modules_are_the_typed_ones() -> None:
    assert {"bytepart", "planner", "traverser/dfu", "express"} <= set(DECLARED)


def every_declaration() -> dict[str, tuple[str | None, set[str], bool]]:
    """class -> its declaration, over every ``.pxd`` (a base may be declared in another)."""
    out: dict[str, tuple[str | None, set[str], bool]] = {}
    for stem in DECLARED:
        out.update(declarations(stem))
    return out


@pytest.mark.parametrize("stem", DECLARED)
def test_declared_attributes_are_the_classes_own(stem: str) -> None:
    decl, source = declarations(stem), classes(stem)
    every = every_declaration()
    for name, (base, attrs, has_dict) in decl.items():
        assert name in source, f"{stem}.pxd declares {name}, which {stem}.py does not define"
        cls = source[name]
        bases = [b.id for b in cls.bases if isinstance(b, ast.Name)]
        assert bases == ([base] if base else []), (
            f"{stem}.pxd: {name}'s base {base} is not the .py's {bases}")
        inherited: set[str] = set()
        b = base
        while b is not None:
            inherited |= every[b][1]
            has_dict = has_dict or every[b][2]  # (a base's __dict__ is the subclass's too)
            b = every[b][0]
        own = slots(cls)
        if has_dict:
            # the rest live in the instance's dict; what is declared must really be set
            unknown = attrs - assigned(cls)
            assert not unknown, f"{stem}.pxd declares {sorted(unknown)} on {name}, never set"
        elif own is not None and own:
            assert attrs | inherited == own | inherited, (
                f"{stem}.pxd and {stem}.py disagree on {name}'s attributes: declared "
                f"{sorted(attrs)}, __slots__ {sorted(own)}")
        else:
            # no slots of its own: it sets only what it and its bases declare
            extra = assigned(cls) - attrs - inherited
            assert not extra, f"{name} sets {sorted(extra)}, not declared in {stem}.pxd"


def c_methods(stem: str) -> dict[tuple[str, str], list[str]]:
    """(class, method) -> the parameter names of each ``cpdef`` method a ``.pxd`` declares
    (a type before a name dropped: ``Meta meta`` is ``meta``)."""
    out: dict[tuple[str, str], list[str]] = {}
    for name, _, line in class_lines(stem):
        method = re.match(r"\s+cpdef (?:\w+ )?(\w+)\((.*)\)$", line or "")
        if method:
            out[(name, method[1])] = [p.split()[-1] for p in method[2].split(",")]
    return out


@pytest.mark.parametrize("stem", DECLARED)
def test_c_methods_are_the_classes_own_with_the_same_parameters(stem: str) -> None:
    """A ``cpdef`` in a ``.pxd`` makes the ``.py``'s method of that name a C method (typed
    callers call it directly): it must exist on that class, with the same parameters in the
    same order (Cython refuses a mismatch only when it compiles, which plain CI skips), and
    hold no closure (Cython cannot compile one inside a C method)."""
    source = classes(stem)
    for (cls_name, name), params in c_methods(stem).items():
        found = [n for n in source[cls_name].body
                 if isinstance(n, ast.FunctionDef) and n.name == name]
        assert found, f"{stem}.pxd: cpdef {cls_name}.{name}, not defined in {stem}.py"
        func = found[0]
        assert [a.arg for a in func.args.args] == params, (
            f"{stem}.pxd: {cls_name}.{name}({', '.join(params)}) is "
            f"({', '.join(a.arg for a in func.args.args)}) in {stem}.py")
        inner = [n for n in ast.walk(func) if n is not func and isinstance(
            n, (ast.Lambda, ast.GeneratorExp, ast.FunctionDef))]
        assert not inner, (f"{stem}.py: {cls_name}.{name} is a C method ({stem}.pxd) and "
                           f"holds a closure at line {inner[0].lineno}")


def test_the_c_methods_are_declared() -> None:
    assert ("Express", "_commit_slot") in c_methods("express")
    assert ("MultiPlanner", "used_during") in c_methods("planner")
