# Declarations Cython reads beside express.py when ``fluxinfra compile`` makes it C (the .py
# stays plain Python; this file is never imported). Express is an extension type in the
# compiled form: its caches are fields of the object; a __dict__ keeps anything else. Its
# traverser is typed (cimported from traverser.pxd), so ``t = self.t`` in its methods is a
# typed local and ``t.sched``, ``t.agg``, ... are field reads. The compiled express is then
# built against traverser.pxd's layout: fluxinfra.compiled loads it only beside the compiled
# traverser (its digest covers traverser.pxd too).

from fluxinfra.matcher.traverser cimport Traverser

cdef class Express:
    cdef public Traverser t
    cdef public dict _plans, _slot_tpl, _chains, _node_facts, _above, _busy, _path_facts
    cdef public object _pending, _hit
    cdef dict __dict__
