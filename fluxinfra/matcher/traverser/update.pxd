# Declarations Cython reads beside update.py when ``fluxinfra compile`` makes it C (the .py
# stays plain Python; this file is never imported). Booking is an extension type in the
# compiled form, so an attribute read through ``self`` is a field of the object: it declares
# the attributes the hot paths of the commit, the cancel and the selection walk read (its
# subclass Traverser, dfu.pxd, adds the methods of the walk) and keeps a __dict__ for the
# rest (and for FlexibleTraverser, a Python subclass); tests/unit/matcher/test_declarations.py
# checks that each declared attribute is one the class sets. ``dict`` fields take only a
# dict: one a caller may replace by anything else is declared ``object``. The planner types
# are cimported for the typed locals of the C methods below (see planner.pxd).

cimport cython

from fluxinfra.matcher.planner cimport MultiPlanner


cdef class Booking:
    cdef dict __dict__
    cdef public object g, exact_pools, policy, sub, totals, prune_types
    cdef public dict sched, allocs, resvs, xcheck, agg
    cdef public object excl_types
    cdef public dict weights
    cdef public object _weighted
    cdef public dict _order_cache, _weigh_type, _policy_cache, _kid_types
    cdef public object fast, marks, chosen_slots, root_mark, preorder, postorder, _ml
    cdef public object _shapes, _bulk
    cdef public dict _post_cache, _inner_cache, _kid_pos, _free, _held_texts
    cdef public object _held_kids  # (a test double replaces it by a dict subclass)
    cdef public object _marked_kids
    cdef public dict _whole, _whole_alloc
    cdef public object express, post_below
    cdef public object _dirty
    # the re-ranking a 1-core commit calls, C calls from typed callers (the express lane); a
    # Python subclass may still override them
    @cython.locals(held=MultiPlanner)
    cpdef rerank(self, u, c, now, totals)
    cpdef _weigh(self, u, c, avail)
    cpdef _move_child(self, u, w, c, old, avail)
