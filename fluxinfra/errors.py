"""The error hierarchy shared by every fluxinfra subpackage.

Every error a user can cause (bad jobspec, bad graph, bad stack config, bad inventory value) is a
``FluxinfraError`` whose message names the field, the value and the fix. The CLI turns any of them
into one line on stderr and exit code 2; library callers catch the typed subclass.
"""

import difflib

__all__ = ["FluxinfraError", "ConfigError", "did_you_mean"]


class FluxinfraError(Exception):
    """Base class for errors caused by input a user can correct."""


class ConfigError(FluxinfraError):
    """A stack config or other configuration value is wrong (names the file, key, value, fix)."""


def did_you_mean(word: str, choices) -> str:
    """``"; did you mean 'x'?"`` for the closest of ``choices`` to a mistyped ``word``, else ``""``.

    >>> did_you_mean("duraton", ["duration", "runtime"])
    "; did you mean 'duration'?"
    """
    close = difflib.get_close_matches(str(word), [str(c) for c in choices], n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""
