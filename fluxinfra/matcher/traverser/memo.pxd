# Declarations Cython reads beside memo.py when ``fluxinfra compile`` makes it C (the .py
# stays plain Python; this file is never imported). Rebound is an extension type in the
# compiled form holding exactly its __slots__ (tests/unit/matcher/test_declarations.py keeps
# the two in step).

cdef class Rebound:
    cdef public object kind, post_below, root, n, qual, total, parts
