# Declarations Cython reads beside planner.py when ``fluxinfra compile`` makes it C (the .py
# stays plain Python; this file is never imported). The planners are extension types in the
# compiled form: ``self.times``, ``self.spans``, ... are fields of the object, not look-ups
# (a match books about ten spans). The attributes are the classes' __slots__
# (tests/unit/matcher/test_declarations.py keeps the two in step). The span methods are C
# methods (cpdef): the express lane and the traverser, whose .pxd files cimport these
# declarations, call them directly on planners held in typed locals; from Python they are
# the same methods. Their arguments stay Python objects (ints of any size, as in Python).

cdef class _Timeline:
    cdef public list times
    cdef public list usage
    cdef public dict spans
    cdef public object _next_id
    cdef public bint _shared

cdef class Planner(_Timeline):
    cdef public object total
    cpdef add_span(self, at, duration, amount)
    cpdef used_during(self, at, duration)
    cpdef avail_during(self, at, duration)

cdef class MultiPlanner(_Timeline):
    cdef public frozenset types
    cpdef add_span(self, at, duration, amounts)
    cpdef used_during(self, rtype, at, duration)
