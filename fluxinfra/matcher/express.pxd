# Declarations Cython reads beside express.py when ``fluxinfra compile`` makes it C (the .py
# stays plain Python; this file is never imported). Express is an extension type in the
# compiled form: its caches are fields of the object; a __dict__ keeps anything else. Its
# traverser is typed (cimported from traverser/dfu.pxd), so ``t = self.t`` in its methods is
# a typed local and ``t.sched``, ``t.agg``, ... are field reads. The compiled express is then
# built against the layouts declared in traverser/dfu.pxd, traverser/update.pxd,
# traverser/job.pxd and planner.pxd: fluxinfra.compiled loads it only beside their compiled
# forms (its digest covers those .pxd files). The search and the commit
# of a 1-core slot are C methods whose meta, job and planners are typed, so their fields are
# read directly and the planners' span methods are C calls (a Python subclass may still
# override them: the express tests count calls that way).

cimport cython

from fluxinfra.matcher.planner cimport MultiPlanner, Planner
from fluxinfra.matcher.traverser.dfu cimport Traverser
from fluxinfra.matcher.traverser.job cimport JobState, Meta

cdef class Express:
    cdef public Traverser t
    cdef public dict _plans, _slot_tpl, _chains, _node_facts, _above, _busy, _path_facts
    cdef public object _pending, _hit
    cdef dict __dict__

    @cython.locals(p=Planner, below=MultiPlanner)
    cpdef _find_slot(self, root, plan, resources, Meta meta, path)
    @cython.locals(p=Planner)
    cpdef _slot_members(self, u, members, Meta meta)
    @cython.locals(pl=Planner, x=Planner, apl=MultiPlanner)
    cpdef _commit_slot(self, Meta meta, JobState job, path, leaves)
    @cython.locals(p=Planner, held=MultiPlanner)
    cpdef _pruned(self, plan, u, resources, Meta meta)
