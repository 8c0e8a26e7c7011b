# Declarations Cython reads beside order.py when ``fluxinfra compile`` makes it C (the .py
# stays plain Python; this file is never imported). The classes are extension types in the
# compiled form holding exactly their __slots__ (tests/unit/matcher/test_declarations.py keeps
# the two in step), so an attribute read through ``self`` is a field of the object.

cdef class ChildOrder:
    cdef public object chunks, _kchunks, _maxes, _make, ver

cdef class HeldKids:
    cdef public object kids, starts, ends, max_start, min_end
