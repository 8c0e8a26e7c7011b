# Declarations Cython reads beside planner.py when ``fluxinfra compile`` makes it C (the .py
# stays plain Python; this file is never imported). The planners are extension types in the
# compiled form: ``self.times``, ``self.spans``, ... are fields of the object, not look-ups
# (a match books about ten spans). The attributes are the classes' __slots__
# (tests/unit/matcher/test_declarations.py keeps the two in step). The span methods are C
# methods (cpdef): the express lane and the traverser, whose .pxd files cimport these
# declarations, call them directly on planners held in typed locals; from Python they are
# the same methods. Their arguments stay Python objects (ints of any size, as in Python);
# the positions in a timeline are C integers (``Py_ssize_t``: what a list's length is), so
# its rows are read by index without an int object or a ``range`` made per step.

cimport cython

cdef class _Timeline:
    cdef public list times
    cdef public list usage
    cdef public dict spans
    cdef public object _next_id
    cdef public bint _shared
    @cython.locals(times=list, i=Py_ssize_t)
    cpdef _split(self, t)
    @cython.locals(times=list, i=Py_ssize_t, j=Py_ssize_t)
    cpdef _window(self, at, end)

cdef class Planner(_Timeline):
    cdef public object total
    @cython.locals(usage=list, i=Py_ssize_t, j=Py_ssize_t, k=Py_ssize_t)
    cpdef add_span(self, at, duration, amount)
    @cython.locals(times=list, i=Py_ssize_t, j=Py_ssize_t)
    cpdef used_during(self, at, duration)
    cpdef avail_during(self, at, duration)

cdef class MultiPlanner(_Timeline):
    cdef public frozenset types
    @cython.locals(usage=list, row=dict, i=Py_ssize_t, j=Py_ssize_t, k=Py_ssize_t)
    cpdef add_span(self, at, duration, amounts)
    @cython.locals(times=list, usage=list, i=Py_ssize_t, j=Py_ssize_t, k=Py_ssize_t)
    cpdef used_during(self, rtype, at, duration)
