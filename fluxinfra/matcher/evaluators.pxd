# Declarations Cython reads beside evaluators.py when ``fluxinfra compile`` makes it C (the .py
# stays plain Python; this file is never imported). The classes are extension types in the
# compiled form holding exactly their __slots__ (tests/unit/matcher/test_declarations.py keeps
# the two in step), so an attribute read through ``self`` is a field of the object.

cdef class Candidate:
    cdef public object score, count, needs, exclusive, root, edges

cdef class Evals:
    cdef public object eg, qual, total, best_k, best_i, it, parts, n, _scores
    cdef public object _ranked, _bounds, _distinct, _keys, _starts, _runs

cdef class Scoring:
    cdef public object ev, avail, overall, hier, used
