"""The few names of Cython's pure Python mode that ``bytepart`` uses, for an environment
without Cython (the scheduler image): there they are what Cython's own shadow module makes
them, no-ops, and the module runs as the plain Python it is."""

from __future__ import annotations

compiled = False


class _Type:
    """A C type's name; ``T[::1]`` (a typed memoryview) is a name too."""

    def __getitem__(self, _dims) -> _Type:
        return self


uchar = int = longlong = Py_ssize_t = _Type()  # noqa: A001 (Cython's own names)


def locals(**_types):  # noqa: A001 (Cython's name)
    """``@cython.locals(...)``: types for the compiler; nothing at run time."""
    def keep(func):
        return func
    return keep
