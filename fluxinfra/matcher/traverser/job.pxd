# Declarations Cython reads beside job.py when ``fluxinfra compile`` makes it C (the .py stays
# plain Python; this file is never imported). Meta and JobState are extension types in the
# compiled form holding exactly their __slots__ (tests/unit/matcher/test_declarations.py keeps
# the two in step); dfu.pxd and express.pxd cimport them to type the C methods' arguments.

cdef class Meta:
    cdef public object at, now, duration, alloc_type, jobid, constraint

cdef class JobState:
    cdef public object jobid, sched, xspans, agg, used, reweigh, reweigh_inner, now
    cdef public object raw_vertices, at, duration, reserved, slots, slot_edges, whole, node_hint
