# Declarations Cython reads beside express.py when ``fluxinfra compile`` makes it C (the .py
# stays plain Python; this file is never imported). Express is an extension type in the
# compiled form: its caches are fields of the object; a __dict__ keeps anything else.

cdef class Express:
    cdef public object t
    cdef public dict _plans, _slot_tpl, _chains, _node_facts, _above, _busy, _path_facts
    cdef public object _pending, _hit
    cdef dict __dict__
