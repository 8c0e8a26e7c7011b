"""Flux's own formats, written without Flux: RFC 22 idsets, RFC 29 hostlists, RFC 20 R (version 1)
and the broker configs' TOML.

Standard library only, besides the leaf modules :mod:`fluxinfra.hostlist` and
:mod:`fluxinfra.idset` and the TOML writer ``tomli_w`` (pure Python, one module): the installer
ships this file and those three next to ``node-watch.py`` in its ConfigMap, and node-watch
imports them from there, so the lead broker's R and every broker's config are written by the
same code the components use.

>>> idset_encode([0, 1, 2, 5, 7, 8])
'0-2,5,7-8'
>>> hostlist_encode(["node1", "node2", "node3", "login"])
'node[1-3],login'
>>> hostlist_encode(["n3", "n1", "n2", "n10"])
'n[3,1-2,10]'
>>> hostlist_decode("node[1-3],login")
['node1', 'node2', 'node3', 'login']
>>> R = rv1([(0, "a", "0-3", ""), (1, "b", "0-3", "")])
>>> R["execution"]["R_lite"], R["execution"]["nodelist"]
([{'rank': '0-1', 'children': {'core': '0-3'}}], ['a,b'])
>>> print(dump_toml({"tbon": {"topo": "kary:2"}, "resource": {"path": "/R"}}), end="")
[tbon]
topo = "kary:2"
<BLANKLINE>
[resource]
path = "/R"
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import tomli_w  # installed with fluxinfra; the installer ships tomli_w.py beside this file

if __package__:
    from fluxinfra import hostlist, idset
else:  # beside node-watch.py in the installer's ConfigMap (see its module docstring)
    import hostlist  # type: ignore[no-redef]
    import idset  # type: ignore[no-redef]

__all__ = ["idset_encode", "idset_decode", "hostlist_encode", "hostlist_decode", "rv1",
           "rv1_slots", "dump_toml"]


def idset_encode(ids: Iterable[int]) -> str:
    """RFC 22 idset, ranges compressed: ``[0, 1, 2, 5]`` -> ``"0-2,5"`` ('' for none)."""
    return idset.encode(ids)


def idset_decode(text: str) -> list[int]:
    """``"0-2,5"`` -> ``[0, 1, 2, 5]``; raises ValueError on anything else."""
    return idset.decode(text, strict=False)


def hostlist_encode(hosts: Iterable[str]) -> str:
    """RFC 29 hostlist in the given order (it is the rank order), as ``flux hostlist`` writes it."""
    return hostlist.encode(hosts)


def hostlist_decode(text: str) -> list[str]:
    """``"node[1-3,07],login"`` -> every host, in order; raises ValueError on a malformed one."""
    return hostlist.decode(text)


def rv1(slots: Iterable[tuple[int, str, str, str]]) -> dict[str, Any]:
    """RFC 20 R version 1 for ``(rank, host, cores idset, gpus idset)`` slots.

    Ranks with identical children share one ``R_lite`` entry; ``nodelist`` lists the hosts in
    rank order, as ``flux R encode`` writes it."""
    slots = sorted(slots)
    by_children: dict[tuple[str, str], list[int]] = {}
    for rank, _host, cores, gpus in slots:
        by_children.setdefault((cores, gpus), []).append(rank)
    lite = []
    for (cores, gpus), ranks in sorted(by_children.items(), key=lambda kv: kv[1][0]):
        children = {"core": cores}
        if gpus:
            children["gpu"] = gpus
        lite.append({"rank": idset_encode(ranks), "children": children})
    return {"version": 1,
            "execution": {"R_lite": lite, "starttime": 0.0, "expiration": 0.0,
                          "nodelist": [hostlist_encode(host for _, host, _, _ in slots)]}}


def rv1_slots(R: dict[str, Any]) -> list[tuple[int, str, str, str]]:
    """The inverse of :func:`rv1`: ``(rank, host, cores, gpus)`` per rank, rank order."""
    execution = R["execution"]
    hosts = [h for item in execution.get("nodelist", []) for h in hostlist_decode(item)]
    ranks: dict[int, tuple[str, str]] = {}
    for entry in execution["R_lite"]:
        children = entry["children"]
        for rank in idset_decode(entry["rank"]):
            ranks[rank] = (children.get("core", ""), children.get("gpu", ""))
    ordered = sorted(ranks)
    if hosts and len(hosts) != len(ordered):
        raise ValueError(f"R nodelist names {len(hosts)} hosts for {len(ordered)} ranks")
    return [(rank, hosts[i] if hosts else "", *ranks[rank]) for i, rank in enumerate(ordered)]


def dump_toml(doc: dict[str, dict[str, Any]], header: str = "") -> str:
    """The TOML of ``doc`` (``tomli_w``: a table per top-level key, ``[table.sub]`` for a
    nested one, each key in the order given); ``header`` lines become comments above it."""
    comments = "".join(f"# {line}".rstrip() + "\n" for line in header.splitlines())
    return comments + ("\n" if comments else "") + tomli_w.dumps(doc)
