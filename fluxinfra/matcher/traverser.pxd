# Declarations Cython reads beside traverser.py when ``fluxinfra compile`` makes it C (the .py
# stays plain Python; this file is never imported). The per-match classes are extension
# types in the compiled form, so an attribute read through ``self`` is a field of the object.
# Traverser declares the attributes its hot paths read and keeps a __dict__ for the rest (and
# for FlexibleTraverser, a Python subclass); the others hold exactly their __slots__
# (tests/unit/matcher/test_declarations.py keeps the two in step). ``dict`` fields take only
# a dict: one a caller may replace by anything else is declared ``object``. The planner
# types are cimported for the typed locals of the C methods below (see planner.pxd).

cimport cython

from fluxinfra.matcher.planner cimport MultiPlanner, Planner


cdef class Meta:
    cdef public object at, now, duration, alloc_type, jobid, constraint

cdef class Traverser:
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
    cdef public object express, post_below, visited
    cdef public object _dirty
    # the methods a match calls most, C calls from typed callers (the express lane); a
    # Python subclass may still override them
    @cython.locals(p=Planner)
    cpdef _leaf(self, Meta meta, c, r, excl)
    @cython.locals(p=Planner)
    cpdef _by_excl(self, Meta meta, u, x_in, r)
    cpdef unheld_children(self, u, children, at)
    @cython.locals(held=MultiPlanner)
    cpdef rerank(self, u, c, now, totals)
    cpdef _weigh(self, u, c, avail)
    cpdef _move_child(self, u, w, c, old, avail)

cdef class JobState:
    cdef public object jobid, sched, xspans, agg, used, reweigh, reweigh_inner, now
    cdef public object raw_vertices, at, duration, reserved, slots, slot_edges, whole, node_hint

cdef class _Order:
    cdef public object chunks, _kchunks, _maxes, _make, ver

cdef class _Evals:
    cdef public object eg, qual, total, best_k, best_i, it, parts, n, _scores
    cdef public object _ranked, _bounds, _distinct, _keys, _starts, _runs

cdef class _Dfu:
    cdef public object ev, avail, overall, hier, used

cdef class _HeldKids:
    cdef public object kids, starts, ends, max_start, min_end

cdef class _Rebound:
    cdef public object kind, post_below, root, n, qual, total, parts
