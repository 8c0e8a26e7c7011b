"""What the commands print to a terminal: coloured warnings, aligned tables, and a quiet end when
a pipe closes.

>>> import io
>>> stream = io.StringIO()   # not a terminal: no escape codes
>>> warn("keys derived from the stack name", stream)
>>> stream.getvalue()
'warning: keys derived from the stack name\\n'
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Container, Iterable, Sequence
from typing import TextIO

__all__ = ["colour", "format_table", "warn", "quiet_broken_pipe", "SIGPIPE_STATUS"]

#: what a shell reports for a command killed by SIGPIPE (128 + 13), as `yes | head` does
SIGPIPE_STATUS = 141
_YELLOW_BOLD = "1;33"


def colour(text: str, code: str, stream: TextIO) -> str:
    """``text`` in SGR colour ``code`` when ``stream`` is a terminal (and $NO_COLOR is unset)."""
    isatty = getattr(stream, "isatty", None)
    if (isatty is None or not isatty() or "NO_COLOR" in os.environ
            or os.environ.get("TERM") == "dumb"):
        return text
    return f"\033[{code}m{text}\033[0m"


def warn(text: str, stream: TextIO | None = None) -> None:
    """One ``warning: ...`` line, the prefix in bold yellow on a terminal."""
    stream = sys.stderr if stream is None else stream
    print(colour("warning:", _YELLOW_BOLD, stream) + " " + text, file=stream)


def format_table(headers: Sequence[str], rows: Iterable[Sequence[str]], *,
                 right: Container[int] = (), rule: bool = False, gap: str = "  ") -> str:
    """The one table printer: columns as wide as their widest cell (header included), cells
    left-aligned except the columns in ``right``, ``gap`` between columns, no trailing blanks;
    ``rule`` puts a line of dashes under the header.

    >>> print(format_table(["name", "ms"], [["first", "1.5"], ["low", "12.25"]], right={1},
    ...                    rule=True))
    name      ms
    -----  -----
    first    1.5
    low    12.25
    """
    table = [list(headers), *(list(r) for r in rows)]
    widths = [max(len(line[i]) for line in table) for i in range(len(headers))]
    if rule:
        table.insert(1, ["-" * w for w in widths])

    def line(cells: list[str]) -> str:
        return gap.join(cell.rjust(w) if i in right else cell.ljust(w)
                        for i, (cell, w) in enumerate(zip(cells, widths, strict=True))).rstrip()
    return "\n".join(line(cells) for cells in table)


def quiet_broken_pipe(run: Callable[[], int]) -> int:
    """``run()``, but a reader that closed the pipe early (``| head``) ends it quietly.

    Python would print a ``BrokenPipeError`` traceback, and another one when it flushes stdout
    at exit; here the rest of the output goes to /dev/null and the status is
    :data:`SIGPIPE_STATUS`, what the shell reports for C tools in the same place.
    """
    try:
        status = run()
        sys.stdout.flush()
        return status
    except BrokenPipeError:
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        except (OSError, ValueError):  # stdout is no file (captured): nothing left to flush
            pass
        return SIGPIPE_STATUS
