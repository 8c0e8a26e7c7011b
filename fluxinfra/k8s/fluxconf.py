"""Flux's own formats, written without Flux: RFC 22 idsets, RFC 29 hostlists, RFC 20 R (version 1)
and the small TOML subset broker configs use.

Standard library only and no fluxinfra imports: the installer ships this file next to
``node-watch.py`` in its ConfigMap, and node-watch imports it from there, so the lead broker's R
and every broker's config are written by the same code the components use.

>>> idset_encode([0, 1, 2, 5, 7, 8])
'0-2,5,7-8'
>>> hostlist_encode(["node1", "node2", "node3", "login"])
'node[1-3],login'
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

import json
import re
from collections.abc import Iterable
from typing import Any

__all__ = ["idset_encode", "idset_decode", "hostlist_encode", "hostlist_decode", "rv1",
           "rv1_slots", "dump_toml", "toml_string"]


def idset_encode(ids: Iterable[int]) -> str:
    """RFC 22 idset, ranges compressed: ``[0, 1, 2, 5]`` -> ``"0-2,5"`` ('' for none)."""
    out: list[str] = []
    run: list[int] = []
    for i in sorted(set(ids)):
        if run and i == run[-1] + 1:
            run.append(i)
            continue
        if run:
            out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
        run = [i]
    if run:
        out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
    return ",".join(out)


def idset_decode(text: str) -> list[int]:
    """``"0-2,5"`` -> ``[0, 1, 2, 5]``; raises ValueError on anything else."""
    ids: list[int] = []
    for part in filter(None, text.strip("[]").split(",")):
        lo, _, hi = part.partition("-")
        if not lo.isdigit() or (hi and not hi.isdigit()) or (hi and int(hi) < int(lo)):
            raise ValueError(f"not an idset: {text!r}")
        ids.extend(range(int(lo), int(hi or lo) + 1))
    return sorted(set(ids))


_NUMBERED = re.compile(r"^(.*?)(\d+)$")


def hostlist_encode(hosts: Iterable[str]) -> str:
    """RFC 29 hostlist in the given order: consecutive names ``pre<N>`` with one prefix and
    width merge into ``pre[a-b]``; order is kept (it is the rank order)."""
    groups: list[tuple[str, str, list[int]]] = []   # (prefix, width-or-'', numbers)
    for host in hosts:
        m = _NUMBERED.match(host)
        if m is None:
            groups.append((host, "", []))
            continue
        prefix, digits = m.group(1), m.group(2)
        width = str(len(digits)) if digits.startswith("0") and len(digits) > 1 else ""
        if groups and groups[-1][0] == prefix and groups[-1][2] and groups[-1][1] == width \
                and int(digits) > groups[-1][2][-1]:
            groups[-1][2].append(int(digits))
        else:
            groups.append((prefix, width, [int(digits)]))
    out = []
    for prefix, width, numbers in groups:
        if not numbers:
            out.append(prefix)
            continue
        fmt = f"{{:0{width}d}}" if width else "{}"
        if len(numbers) == 1:
            out.append(prefix + fmt.format(numbers[0]))
            continue
        parts = []
        run = [numbers[0]]
        for n in numbers[1:] + [None]:
            if n is not None and n == run[-1] + 1:
                run.append(n)
                continue
            parts.append(fmt.format(run[0]) if len(run) == 1
                         else f"{fmt.format(run[0])}-{fmt.format(run[-1])}")
            if n is not None:
                run = [n]
        out.append(f"{prefix}[{','.join(parts)}]")
    return ",".join(out)


def _top_level_items(text: str) -> list[str]:
    items, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
        elif ch == "," and depth == 0:
            items.append(text[start:i])
            start = i + 1
        if depth not in (0, 1):
            raise ValueError(f"not a hostlist: {text!r}")
    if depth:
        raise ValueError(f"not a hostlist: {text!r}")
    return [*items, text[start:]]


def hostlist_decode(text: str) -> list[str]:
    """``"node[1-3,07],login"`` -> every host, in order; raises ValueError on a malformed one."""
    hosts: list[str] = []
    for item in _top_level_items(text):
        if not item:
            raise ValueError(f"not a hostlist: {text!r}")
        m = re.fullmatch(r"([^\[\]]*)\[([^\]]+)\]([^\[\]]*)", item)
        if m is None:
            if "[" in item or "]" in item:
                raise ValueError(f"not a hostlist: {text!r}")
            hosts.append(item)
            continue
        prefix, ranges, suffix = m.groups()
        for part in ranges.split(","):
            lo, _, hi = part.partition("-")
            if not lo.isdigit() or (hi and not hi.isdigit()) or (hi and int(hi) < int(lo)):
                raise ValueError(f"not a hostlist: {text!r}")
            width = len(lo) if lo.startswith("0") else 0
            for n in range(int(lo), int(hi or lo) + 1):
                hosts.append(f"{prefix}{n:0{width}d}{suffix}")
    return hosts


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


def toml_string(value: str) -> str:
    """A TOML basic string (JSON escapes are valid TOML escapes for these characters)."""
    return json.dumps(value, ensure_ascii=False)


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return toml_string(value)
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{_key(k)} = {_toml_value(v)}" for k, v in value.items()) + " }"
    if isinstance(value, list):
        if len(value) > 1 and all(isinstance(v, dict) for v in value):
            return "[\n" + "".join(f"  {_toml_value(v)},\n" for v in value) + "]"
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    raise TypeError(f"no TOML form for {type(value).__name__}")


def _key(key: str) -> str:
    return key if re.fullmatch(r"[A-Za-z0-9_-]+", key) else toml_string(key)


def dump_toml(doc: dict[str, dict[str, Any]], header: str = "") -> str:
    """Top-level tables (one level of nested tables: ``{"resource": {"verify": {...}}}`` becomes
    ``[resource.verify]``), each key in the order given; ``header`` lines become comments."""
    lines = [f"# {line}".rstrip() for line in header.splitlines()]
    for table, body in doc.items():
        plain = {k: v for k, v in body.items() if not isinstance(v, dict)}
        nested = {k: v for k, v in body.items() if isinstance(v, dict)}
        if plain or not nested:
            if lines:
                lines.append("")
            lines.append(f"[{_key(table)}]")
            lines += [f"{_key(k)} = {_toml_value(v)}" for k, v in plain.items()]
        for sub, sub_body in nested.items():
            if lines:
                lines.append("")
            lines.append(f"[{_key(table)}.{_key(sub)}]")
            lines += [f"{_key(k)} = {_toml_value(v)}" for k, v in sub_body.items()]
    return "\n".join(lines) + "\n"
