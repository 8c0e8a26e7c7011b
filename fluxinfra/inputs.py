"""Input from outside the program, read within bounds: files, text, JSON and YAML documents.

Every reader of a user's file or document (graphs, jobspecs, R, stack files, command input)
takes its bytes, text and parsed documents from here, so bad input ends in one
:class:`~fluxinfra.errors.FluxinfraError` (the subclass the caller names) whose message says
what was read, what is wrong with it and what to give instead; never a traceback, a hang or
memory without bound.

>>> from fluxinfra.errors import ConfigError
>>> parse_yaml("a: [1, 2]", "stack.yaml", ConfigError)
{'a': [1, 2]}
>>> try:
...     parse_yaml("when: 2024-01-01", "stack.yaml", ConfigError)
... except ConfigError as exc:
...     print(exc)
stack.yaml: when: 2024-01-01 is a YAML date; quote it to make it a string
>>> try:
...     decode(b"ok\\xff", "job.yaml", ConfigError)
... except ConfigError as exc:
...     print(exc)
job.yaml: not UTF-8 text (byte 0xff at offset 2); save the file as UTF-8

The limits (module constants, the same everywhere):

==========================  =========================================================
``MAX_GRAPH_BYTES`` 4 GiB   a graph file or a JSON graph document (JGF, R, hwloc XML)
``MAX_TEXT_BYTES`` 1 MiB    a jobspec, a stack file, a ``cat``-ed file, one command line
``MAX_DEPTH`` 100           nesting of a YAML or JSON document read as a jobspec or stack
                            file (lists and mappings inside each other)
``MAX_VALUES`` 1,000,000    values in such a document, each alias counted where it is used
``MAX_VERTICES`` 2**24      vertices in one graph, or names in one hostlist or idset that
                            builds one
==========================  =========================================================
"""

from __future__ import annotations

import datetime
import json
import math
import os
import re
import reprlib
import stat
from typing import Any

from fluxinfra.errors import FluxinfraError

__all__ = ["MAX_GRAPH_BYTES", "MAX_TEXT_BYTES", "MAX_DEPTH", "MAX_VALUES", "MAX_VERTICES",
           "INT64_MIN", "INT64_MAX", "read_bytes", "read_stream", "read_text", "decode",
           "parse_json", "parse_yaml", "check_plain", "type_name", "shown", "finite"]

#: the largest graph file (JGF, GRUG, hwloc, R) or JSON graph document read: JGF takes about
#: 530 bytes a vertex (Fluxion's power.json), so 4 GiB holds about 8 million vertices, six
#: times a 16,384-node graph
MAX_GRAPH_BYTES = 4 << 30
#: the largest jobspec, stack file or command line: about 400 times the largest of Fluxion's
#: test jobspecs (2,700 bytes)
MAX_TEXT_BYTES = 1 << 20
#: nesting of a YAML/JSON document read as a jobspec or stack file (a jobspec nests two levels
#: per ``with``; the deepest of Fluxion's test jobspecs nests 15 levels)
MAX_DEPTH = 100
#: values in such a document, each alias counted where it is used (what expanding it makes)
MAX_VALUES = 1_000_000
#: vertices in one graph (and names a hostlist or idset that makes one may expand to): 14
#: times the 16,384-node graph of the benchmarks (1.2 million vertices)
MAX_VERTICES = 1 << 24
INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1

_CHUNK = 1 << 20


_SHOWN = reprlib.Repr()
_SHOWN.maxstring = _SHOWN.maxother = _SHOWN.maxlong = 60
_SHOWN.maxlevel = 3


def shown(value: Any) -> str:
    """``repr(value)`` for a message: short (long strings, numbers and lists cut with
    ``...``), and safe for any value (nested past the recursion limit, or referring to
    itself)."""
    try:
        return _SHOWN.repr(value)
    except (RecursionError, ValueError, TypeError):
        return f"<{type_name(value)}>"


def type_name(value: Any) -> str:
    """A JSON-ish name for ``value``'s type, for messages (``an object``, ``a list`` ...)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, (list, tuple)):
        return "a list"
    return f"a {type(value).__name__}"


def read_bytes(path: str | os.PathLike, what: str, error: type[FluxinfraError] = FluxinfraError,
               limit: int = MAX_TEXT_BYTES) -> bytes:
    """The bytes of file ``path``, at most ``limit`` of them; ``what`` starts every message.

    A regular file larger than ``limit`` is refused before it is read; a pipe (``/dev/stdin``,
    ``<(command)``) is read up to ``limit`` bytes and refused past them (a named pipe nobody
    writes to reads as empty rather than waiting for a writer). A directory, a device
    (``/dev/zero`` would never end), a missing file, a name with a NUL byte: refused, the
    error says which."""
    name = repr(os.fsdecode(path)) if isinstance(path, (str, bytes, os.PathLike)) else repr(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except ValueError:
        raise error(f"{what}: the file name contains a NUL byte; give a path without one") \
            from None
    except TypeError:
        raise error(f"{what}: {name} is not a file name; give a path") from None
    except OSError as exc:
        raise error(f"{what}: cannot read {name}: {exc.strerror}") from None
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise error(f"{what}: {name} is a directory; give a file")
        if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode):
            raise error(f"{what}: {name} is a device, not a file; give a regular file or a "
                        "pipe")
        if stat.S_ISREG(st.st_mode) and st.st_size > limit:
            raise error(f"{what}: {name} has {st.st_size:,} bytes, more than the {limit:,} "
                        "read; give a smaller file")
        os.set_blocking(fd, True)
        with os.fdopen(fd, "rb", closefd=False) as fh:
            return read_stream(fh, what, error, limit, name)
    except OSError as exc:
        raise error(f"{what}: cannot read {name}: {exc.strerror}") from None
    finally:
        os.close(fd)


def read_stream(fh: Any, what: str, error: type[FluxinfraError] = FluxinfraError,
                limit: int = MAX_TEXT_BYTES, name: str = "the input") -> bytes:
    """What binary stream ``fh`` holds (standard input, a pipe), refused past ``limit``
    bytes."""
    parts, size = [], 0
    while size <= limit:
        chunk = fh.read(min(_CHUNK, limit + 1 - size))
        if not chunk:
            break
        parts.append(chunk)
        size += len(chunk)
    if size > limit:
        raise error(f"{what}: {name} goes on past {limit:,} bytes, more than is read; give "
                    "at most that much")
    return b"".join(parts)


def decode(data: bytes | bytearray, what: str,
           error: type[FluxinfraError] = FluxinfraError) -> str:
    """``data`` as UTF-8 text (a leading byte-order mark dropped); refuses anything else."""
    try:
        return bytes(data).decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        bad = data[exc.start]
        raise error(f"{what}: not UTF-8 text (byte 0x{bad:02x} at offset {exc.start}); save "
                    "the file as UTF-8") from None


def read_text(path: str | os.PathLike, what: str, error: type[FluxinfraError] = FluxinfraError,
              limit: int = MAX_TEXT_BYTES) -> str:
    """:func:`read_bytes`, then :func:`decode`."""
    return decode(read_bytes(path, what, error, limit), what, error)


def _no_constant(name: str):
    raise ValueError(f"{name} is not a JSON number")


def parse_json(text: str | bytes, what: str, error: type[FluxinfraError] = FluxinfraError,
               fix: str = "check that it is valid JSON") -> Any:
    """The JSON document ``text`` (``NaN``/``Infinity`` refused, as JSON has no such numbers;
    nesting past the interpreter's recursion limit refused)."""
    if isinstance(text, (bytes, bytearray)):
        text = decode(text, what, error)
    try:
        return json.loads(text, parse_constant=_no_constant)
    except RecursionError:
        raise error(f"{what}: JSON nested too deeply to read; {fix}") from None
    except ValueError as exc:  # (JSONDecodeError, and an integer past Python's digit limit)
        raise error(f"{what}: malformed JSON ({exc}); {fix}") from None


def parse_yaml(text: str | bytes, what: str, error: type[FluxinfraError] = FluxinfraError,
               max_depth: int = MAX_DEPTH, max_values: int = MAX_VALUES,
               fix: str = "") -> Any:
    """The YAML (or JSON) document ``text``, holding only what JSON can (mappings with string
    keys, lists, strings, numbers, booleans, null; :func:`check_plain`); ``fix`` follows the
    message of text that is no YAML."""
    tail = f"; {fix}" if fix else ""
    import yaml

    if isinstance(text, (bytes, bytearray)):
        text = decode(text, what, error)
    if text.count("[") + text.count("{") > max_depth and _flow_depth(text) > max_depth:
        # (before the parser: PyYAML's takes time quadratic in the flow nesting)
        raise error(f"{what}: [ and {{ nested more than {max_depth} levels deep; flatten it")
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise error(f"{what}: malformed YAML{where}: {problem}{tail}") from None
    except RecursionError:
        raise error(f"{what}: YAML nested too deeply to read (more than {max_depth} levels "
                    "are refused anyway); flatten it") from None
    except ValueError as exc:  # an integer past Python's digit limit, a date out of range
        raise error(f"{what}: malformed YAML: {exc}{tail}") from None
    check_plain(doc, what, error, max_depth, max_values)
    return doc


_FLOW = re.compile(r"""[\[\]{}'"#\n]""")


def _flow_depth(text: str) -> int:
    """How deep ``[`` and ``{`` nest in YAML ``text`` (outside quotes and comments)."""
    depth = deepest = 0
    pos, end = 0, len(text)
    while pos < end:
        m = _FLOW.search(text, pos)
        if m is None:
            break
        ch, pos = m.group(), m.end()
        if ch in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in "]}":
            depth = max(depth - 1, 0)
        elif ch == "#":
            if m.start() == 0 or text[m.start() - 1] in " \t\n":
                nl = text.find("\n", pos)
                pos = end if nl < 0 else nl
        elif ch in "'\"":
            while pos < end:  # to the closing quote ('' and \" do not close)
                q = text.find(ch, pos)
                if q < 0:
                    pos = end
                elif ch == "'" and text.startswith("''", q):
                    pos = q + 2
                    continue
                elif ch == '"' and _escaped(text, q):
                    pos = q + 1
                    continue
                else:
                    pos = q + 1
                break
    return deepest


def _escaped(text: str, at: int) -> bool:
    """The character at ``at`` follows an odd number of backslashes."""
    start = at
    while start > 0 and text[start - 1] == "\\":
        start -= 1
    return (at - start) % 2 == 1


def check_plain(doc: Any, what: str, error: type[FluxinfraError] = FluxinfraError,
                max_depth: int = MAX_DEPTH, max_values: int = MAX_VALUES) -> None:
    """Raise unless ``doc`` is plain data: dicts with string keys, lists, strings, ints,
    floats, booleans and None, nested at most ``max_depth`` deep and ``max_values`` values in
    all (a YAML alias counts each time it is used, so a document that refers to itself, or
    whose aliases multiply, is refused). Iterative: any depth is safe to check."""
    if type(doc) in _SCALARS:
        return
    stack: list[tuple[Any, int, Any]] = [(doc, 0, None)]
    pop, push = stack.pop, stack.append
    scalars = _SCALARS
    seen = 1
    while stack:
        value, depth, path = pop()
        if depth > max_depth:
            raise error(f"{what}: {_path(path)}: nested more than {max_depth} levels deep (or "
                        "a YAML alias refers to itself); flatten it")
        cls = type(value)
        if cls is not dict and cls is not list:
            if isinstance(value, dict):
                value = dict(value)
            elif isinstance(value, list):
                value = list(value)
            else:
                _refuse(value, what, error, path)
                continue
            cls = type(value)
        seen += len(value)
        if seen > max_values:
            raise error(f"{what}: more than {max_values:,} values (YAML aliases count each "
                        "time they are used); give a smaller document")
        depth += 1
        if cls is dict:
            for key, item in value.items():
                if type(key) is not str and not isinstance(key, str):
                    raise error(f"{what}: {_path(path)}: key {shown(key)} is "
                                f"{type_name(key)}, not a string; quote it")
                if type(item) not in scalars:
                    push((item, depth, (path, key)))
        else:
            for i, item in enumerate(value):
                if type(item) not in scalars:
                    push((item, depth, (path, i)))


#: the types plain data's scalars have (subclasses are looked at one by one)
_SCALARS = frozenset({str, int, float, bool, type(None)})


def _refuse(value: Any, what: str, error: type[FluxinfraError], path: Any) -> None:
    """Raise for a value plain data cannot hold (unless it is a scalar of a subclass)."""
    if isinstance(value, (str, int, float)):
        return  # (a float NaN or infinity: the field that reads it says if it takes one)
    at = _path(path)
    if isinstance(value, (datetime.date, datetime.datetime)):
        raise error(f"{what}: {at}: {value} is a YAML date; quote it to make it a string")
    if isinstance(value, (set, frozenset)):
        raise error(f"{what}: {at}: a YAML set (!!set); write a list instead")
    if isinstance(value, (bytes, bytearray)):
        raise error(f"{what}: {at}: YAML binary data (!!binary); give text instead")
    raise error(f"{what}: {at}: {type_name(value)} is not plain data; give a mapping, list, "
                "string, number, boolean or null")


def _path(link: Any) -> str:
    """``a.b[2].c`` from the (parent, key) chain :func:`check_plain` keeps."""
    parts: list[str] = []
    while link is not None:
        link, key = link
        if isinstance(key, int):
            parts.append(f"[{key}]")
        else:  # (a key that is no plain word is quoted: a message stays one line)
            plain = key.isprintable() and key.strip() == key and key
            parts.append(f".{key}" if plain else f".{key!r}")
    parts.reverse()
    if len(parts) > 12:
        parts[6:-6] = [f"...({len(parts) - 12} more)..."]
    text = "".join(parts).lstrip(".")
    return text or "the document"


def finite(value: Any) -> bool:
    """``value`` is an int, or a float that is neither NaN nor infinite (bools are not)."""
    return (isinstance(value, int) and not isinstance(value, bool)) or (
        isinstance(value, float) and math.isfinite(value))
