# Declarations Cython reads beside dfu.py when ``fluxinfra compile`` makes it C (the .py
# stays plain Python; this file is never imported). Traverser is an extension type in the
# compiled form extending Booking (update.pxd), whose declaration holds the fields the walk
# reads; the records the walk passes around are declared beside their own modules (job.pxd,
# order.pxd, memo.pxd, ../evaluators.pxd). Meta is cimported to type the C methods'
# arguments, the planner type for their typed locals (see planner.pxd).

cimport cython

from fluxinfra.matcher.planner cimport Planner
from fluxinfra.matcher.traverser.job cimport Meta
from fluxinfra.matcher.traverser.update cimport Booking


cdef class Traverser(Booking):
    cdef public object visited
    # the methods a match calls most, C calls from typed callers (the express lane); a
    # Python subclass may still override them
    @cython.locals(p=Planner)
    cpdef _leaf(self, Meta meta, c, r, excl)
    @cython.locals(p=Planner)
    cpdef _by_excl(self, Meta meta, u, x_in, r)
    cpdef unheld_children(self, u, children, at)
