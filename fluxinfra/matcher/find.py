"""``find``: select graph vertices by predicates, as resource-query's ``find`` does.

Predicates: ``status=up|down``, ``sched-now=allocated|free``, ``sched-future=reserved|free``,
``names=HOSTLIST``, ``property=NAME``, ``jobid-alloc|jobid-reserved|jobid-span|jobid-tag=ID``,
``agfilter=true|false``; joined by ``and`` / ``or`` evaluated left to right, with parentheses.
A vertex that is down, allocated or reserved makes its whole subtree so. The result is every
matching vertex plus its ancestors, in post-order (children first).
"""

from __future__ import annotations

from fluxinfra.inputs import shown
from fluxinfra.matcher.constraint import parse_hostlist
from fluxinfra.matcher.errors import MatcherError

__all__ = ["parse_criteria", "find_vertices"]

_KEYS = {"status", "sched-now", "sched-future", "names", "property", "jobid-alloc",
         "jobid-reserved", "jobid-span", "jobid-tag", "agfilter"}


#: most levels parentheses may nest in a criteria expression
_MAX_NESTING = 64


def parse_criteria(text: str):
    """Parse into a nested list: [leaf, op, leaf, ...] where leaf is (key, value) or a list.

    Each ``(`` at an operand's place opens a group that ends at its matching ``)`` (every
    parenthesis counted, as in a value); groups nest at most _MAX_NESTING deep."""
    text = text.strip()
    match: dict[int, int] = {}
    opened: list[int] = []
    for i, ch in enumerate(text):
        if ch == "(":
            opened.append(i)
            if len(opened) > _MAX_NESTING:
                raise MatcherError(f"find: parentheses nest more than {_MAX_NESTING} deep in "
                                   f"{shown(text[:80])}...; flatten the expression")
        elif ch == ")" and opened:
            match[opened.pop()] = i

    def group(lo: int, hi: int):
        items: list = []
        i = lo
        expect_operand = True
        while i < hi:
            if text[i] in " \t":
                i += 1
                continue
            if expect_operand:
                if text[i] == "(":
                    j = match.get(i)
                    if j is None or j >= hi:
                        raise MatcherError(f"find: unbalanced parentheses in {shown(text)}")
                    items.append(group(i + 1, j))
                    i = j + 1
                else:
                    j = i
                    while j < hi and text[j] not in " \t":
                        j += 1
                    key, sep, value = text[i:j].partition("=")
                    if not sep or key not in _KEYS:
                        raise MatcherError(f"find: invalid criteria: {text}. (predicates: "
                                           f"{', '.join(sorted(_KEYS))})")
                    items.append((key, value))
                    i = j
                expect_operand = False
            else:
                j = i
                while j < hi and text[j] not in " \t(":
                    j += 1
                op = text[i:j]
                if op not in ("and", "or"):
                    raise MatcherError(f"find: invalid criteria: {text}. (join with and/or)")
                items.append(op)
                i = j
                expect_operand = True
        if expect_operand:
            raise MatcherError(f"find: invalid criteria: {text}")
        return items

    return group(0, len(text))


def _expand_names(value: str) -> set[str]:
    return set(parse_hostlist(value, f"find: names={value}", MatcherError))


def find_vertices(matcher, criteria: str) -> list[tuple[int, int]]:
    """(level, vertex) pairs in post-order for ``criteria``."""
    tree = parse_criteria(criteria)
    m = matcher
    g, trav = m.graph, m.trav
    names_cache: dict[str, set[str]] = {}
    by_job = {jobid: job for jobid, job in m.jobs.items()}
    kids = g.children[trav.sub]
    # subtrees held whole are booked on their root alone; Fluxion's commit tags, spans and
    # allocates every vertex below it for the job: vertex -> jobs holding it whole
    whole_of: dict[int, list[int]] = {}
    for jobid, job in by_job.items():
        for u in job.whole:
            whole_of.setdefault(u, []).append(jobid)

    def leaf(v: int, key: str, value: str, over: tuple[bool, bool, bool],
             held: tuple[int, ...]) -> bool:
        lv = value.lower()
        if key == "status":
            down = over[0] or not g.status[v]
            return down if lv == "down" else (not down if lv == "up" else False)
        if key == "sched-now":
            alloc = over[1] or bool(trav.allocs.get(v))
            return alloc if lv == "allocated" else (not alloc if lv == "free" else False)
        if key == "sched-future":
            resv = over[2] or bool(trav.resvs.get(v))
            return resv if lv == "reserved" else (not resv if lv == "free" else False)
        if key == "names":
            if value not in names_cache:
                names_cache[value] = _expand_names(lv)
            return g.name[v] in names_cache[value]
        if key == "property":
            return bool(g.properties[v]) and lv in g.properties[v]
        if key == "agfilter":
            return lv in ("true", "t")
        try:
            jobid = int(value)
        except ValueError:
            return False
        if key == "jobid-alloc":
            return jobid in trav.allocs.get(v, {}) or held_by(held, jobid, trav.allocs)
        if key == "jobid-reserved":
            return jobid in trav.resvs.get(v, {}) or held_by(held, jobid, trav.resvs)
        job = by_job.get(jobid)
        if job is None:
            return False
        if key == "jobid-tag":
            return v in job.xspans or jobid in held[1::2]
        # jobid-span: a vertex with something of the job below it
        return v in job.agg_owners or bool(kids[v]) and jobid in held[1::2]

    def held_by(held: tuple[int, ...], jobid: int, table: dict) -> bool:
        """``held`` = (root, jobid, root, jobid, ...): the job holds a root above (or at) the
        vertex whole, booked in ``table`` (allocations or reservations) on that root."""
        return any(j == jobid and jobid in table.get(r, ())
                   for r, j in zip(held[::2], held[1::2], strict=True))

    def evaluate(items, v, over, held) -> bool:
        result = None
        op = None
        for item in items:
            if item in ("and", "or"):
                op = item
                continue
            val = (evaluate(item, v, over, held) if isinstance(item, list)
                   else leaf(v, *item, over, held))
            if result is None:
                result = val
            elif op == "and":
                result = result and val
            else:
                result = result or val
        return bool(result)

    out: list[tuple[int, int]] = []
    seen: set[int] = set()

    def visit(v: int, level: int, over: tuple[bool, bool, bool], held: tuple[int, ...]) -> bool:
        over = (over[0] or not g.status[v], over[1] or bool(trav.allocs.get(v)),
                over[2] or bool(trav.resvs.get(v)))
        if v in whole_of:
            held = held + tuple(x for j in whole_of[v] for x in (v, j))
        nchildren = 0
        seen.add(v)
        for c in kids[v]:
            if c in seen:
                continue
            if visit(c, level + 1, over, held):
                nchildren += 1
        if not evaluate(tree, v, over, held) and not nchildren:
            return False
        out.append((level, v))
        return True

    import sys
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 10000))
    try:
        visit(g.roots[trav.sub], 1, (False, False, False), ())
    finally:
        sys.setrecursionlimit(limit)
    return out
