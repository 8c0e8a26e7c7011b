"""The error hierarchy shared by every fluxinfra subpackage.

Every error a user can cause (bad jobspec, bad graph, bad stack config, bad inventory value) is a
``FluxinfraError`` whose message names the field, the value and the fix. The CLI turns any of them
into one line on stderr and exit code 2; library callers catch the typed subclass.
"""

__all__ = ["FluxinfraError", "ConfigError"]


class FluxinfraError(Exception):
    """Base class for errors caused by input a user can correct."""


class ConfigError(FluxinfraError):
    """A stack config or other configuration value is wrong (names the file, key, value, fix)."""
