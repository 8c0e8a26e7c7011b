"""Fluxion's flexible traversal: or-slots and xor-slots (``dfu_flexible.cpp``).

``resource-query -T flexible`` treats sibling slots as alternatives packed to fit the most
slots (:func:`_or_config`, Fluxion's ``dom_or_slot`` / ``get_or_config``) and expands
``xor_slot`` siblings into variants tried in order (:func:`_split_xor`). Everything else is the
simple traversal's (:class:`~fluxinfra.matcher.traverser.dfu.Traverser`).
"""

from __future__ import annotations

from fluxinfra.matcher.evaluators import MATCH_MET, Candidate, Scoring
from fluxinfra.matcher.jobspec import Resource
from fluxinfra.matcher.traverser.dfu import (
    NONE_MATCH,
    PRISTINE_NONE_MATCH,
    RESOURCE_MATCH,
    SLOT_MATCH,
    Traverser,
)
from fluxinfra.matcher.traverser.job import Meta

__all__ = ["FlexibleTraverser", "prime_flexible"]

class FlexibleTraverser(Traverser):
    """Fluxion's ``-T flexible`` traversal: sibling slots are alternatives ("or slots") packed
    to fit the most slots, and ``xor_slot`` siblings expand into variants tried in order."""

    MAX_VARIANTS = 1024

    def select(self, resources: list[Resource], meta: Meta, excl: bool) -> bool:
        variants = _split_xor(resources, self.MAX_VARIANTS)
        if not variants:
            return False
        for variant in variants:
            prime_flexible(variant)
            if super().select(variant, meta, excl):
                self.selected = variant
                return True
        return False

    def _test(self, u: int, resources: list[Resource], pristine: bool):
        utype = self.g.type[u]
        slots: list[Resource] | None = None
        match_res = None
        nslots = 0
        matched = or_matched = False
        for r in resources:
            if r.type == utype:
                if matched or or_matched:
                    return resources, 0, NONE_MATCH, pristine
                match_res = r
                for c in r.with_:
                    if c.type == "slot":
                        slots = r.with_
                        nslots = c.effective_max
                matched = True
            elif r.type == "slot":
                if matched:
                    return resources, 0, NONE_MATCH, pristine
                slots = resources
                nslots = r.effective_max
                or_matched = True
        if slots is not None:
            kind = PRISTINE_NONE_MATCH if pristine else NONE_MATCH
            ret = resources
            for r in slots:
                if self._slot_match(u, r):
                    kind, pristine, ret = SLOT_MATCH, False, slots
            return ret, nslots, kind, pristine
        if match_res is not None:
            return match_res.with_, nslots, RESOURCE_MATCH, False
        return resources, nslots, (PRISTINE_NONE_MATCH if pristine else NONE_MATCH), pristine

    def _prune_resources(self, meta: Meta, x_in: bool, u: int,
                         resources: list[Resource]) -> bool:
        g = self.g
        utype = g.type[u]
        pruned = False
        for r in resources:
            if r.type != utype and r.type != "slot":
                continue
            if r.type != "slot":
                if self._by_excl(meta, u, x_in, r):
                    return True
                if r.user_data and self.totals(u) and self._by_subplan(meta, u, r):
                    return True
                pruned = False
            else:
                # a failing or-slot does not prune the vertex unless it is the last checked;
                # as in Fluxion only the pruning-filter types (core by default) are checked
                totals = self.totals(u)
                pruned = bool(totals) and any(
                    self.sub_avail(u, t, meta.at, meta.duration) < n
                    for t, n in r.user_data.items() if t in self.prune_types and t in totals)
        return pruned

    def _dom_slot(self, meta: Meta, u: int, slots: list[Resource], nslots: int,
                  pristine: bool, dfu: Scoring) -> bool:
        union: dict[str, Resource] = {}
        for slot in slots:
            for r in slot.with_:
                have = union.get(r.type)
                if have is None or have.count_min < r.count_min:
                    union[r.type] = r
        shape = [union[t] for t in sorted(union)]
        slot_dfu = Scoring()
        self._explore(meta, u, shape, pristine, True, slot_dfu, nslots)
        high = self.policy.slot_high
        for ev in slot_dfu.ev.values():
            if ev.qual:
                ev.choose_best_k(ev.qual, high, full=True)
        counts = {t: slot_dfu.qual(t) for t in union}
        memo: dict = {}
        config = _or_config(slots, counts, nslots, memo)
        qual_slots = config[1]
        cursor = {t: 0 for t in union}
        made = []
        for _ in range(qual_slots):
            index = config[2]
            if index < 0:
                return False
            edges = []
            score = MATCH_MET
            for elem in slots[index].with_:
                ev = slot_dfu.ev.get(elem.type)
                count = elem.calc_count(slot_dfu.qual(elem.type))
                j = 0
                while j < count:
                    k = cursor[elem.type]
                    if ev is None or k >= len(ev.eg):
                        return False
                    cursor[elem.type] = k + 1
                    group = ev.eg[k]
                    edge = group.edges[0]
                    edges.append((edge[0], edge[0], True, edge[3], edge[4]))
                    score += group.score
                    j += edge[0]
            made.append(Candidate(score, 1, 0, True, False, tuple(edges)))
            config = memo.get(config[0], ((), 0, -1))
        ev = dfu.evals("slot")
        for group in made:
            ev.add(group)
        return qual_slots > 0


def _or_config(slots: list[Resource], counts: dict[str, int], nslots: int, memo: dict):
    """Best packing of or-slots into ``counts``: (key of what is left, slots, slot index)."""
    key = tuple(sorted(counts.items()))
    hit = memo.get(key)
    if hit is not None:
        return hit
    if len(slots) == 1:
        most = nslots
        for elem in slots[0].with_:
            have = counts.get(elem.type)
            count = elem.calc_count(have or 0)
            if have is None or have < count or count <= 0:
                most = 0
                break
            most = min(most, have // count)
        memo[key] = (key, most, 0)
        return memo[key]
    best = -1
    for i, slot in enumerate(slots):
        left = dict(counts)
        fits = True
        for elem in slot.with_:
            count = elem.calc_count(counts.get(elem.type, 0))
            if count <= 0:
                fits = False
                break
            left[elem.type] = left.get(elem.type, 0) - count
        if not fits:
            continue
        test = _or_config(slots, left, nslots, memo)[1]
        if best < test:
            best = test
            memo[key] = (tuple(sorted(left.items())), best + 1, i)
    if best < 0:
        memo[key] = ((), 0, -1)
    return memo[key]


def prime_flexible(resources: list[Resource]) -> dict[str, int]:
    """Like jobspec priming, but alternative (or-) slots count their minimum, not their sum."""
    total: dict[str, int] = {}
    for r in resources:
        total[r.type] = total.get(r.type, 0) + r.count_min
        below = prime_flexible(r.with_)
        r.user_data = below
        if r.type in ("slot", "xor_slot"):
            for t, n in below.items():
                have = total.get(t)
                total[t] = r.count_min * n if have is None else min(have, r.count_min * n)
            for t in list(total):
                if t not in below and t != r.type:
                    total[t] = 0
        else:
            for t, n in below.items():
                total[t] = total.get(t, 0) + r.count_min * n
    return total


def _split_xor(resources: list[Resource], limit: int) -> list[list[Resource]]:
    """Expand ``xor_slot`` siblings into alternative resource lists (Fluxion's order)."""
    base: list[list[Resource]] = [[]]
    options: list[Resource] = []
    for r in resources:
        child_variants = _split_xor(r.with_, limit)
        if not child_variants:
            return []
        if r.type == "xor_slot":
            for cv in child_variants:
                options.append(_with(r, cv, "slot"))
                if len(options) > limit:
                    return []
            continue
        nxt = []
        for variant in base:
            for cv in child_variants:
                nxt.append(variant + [_with(r, cv, r.type)])
                if len(nxt) > limit:
                    return []
        base = nxt
    if not options:
        return base
    out = [variant + [opt] for variant in base for opt in options]
    return out if len(out) <= limit else []


def _with(r: Resource, children: list[Resource], rtype: str) -> Resource:
    return Resource(rtype, r.count_min, r.count_max, r.oper, r.operand, r.unit, r.exclusive,
                    r.label, list(children), r.path)
