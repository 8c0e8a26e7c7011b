"""The traversal that matches a request against the resource graph: Fluxion's ``traversers/``.

Laid out as flux-sched's ``resource/traversers`` is, one concern per module:

=============  ==============================================================================
``dfu``        :class:`Traverser`: the selection walk (``dfu_impl.cpp``: test, prune, score,
               enforce)
``update``     ``Booking``, the traverser's books (planners, checkers, aggregates) and the
               walks that change them: commit, cancel, re-ranking (``dfu_impl_update.cpp``)
``flexible``   :class:`FlexibleTraverser`: or-slots and xor-slots (``dfu_flexible.cpp``)
``job``        :class:`Meta` (``jobmeta_t``) and :class:`JobState` (what a commit booked)
``order``      ``first``'s child order (edge weights), kept sorted in chunks
``memo``       what the walk remembers between matches (memo entries, templates)
``text``       the ``simple`` writer's lines of subtrees held whole
=============  ==============================================================================

Scoring and ranking live beside this package in :mod:`fluxinfra.matcher.evaluators`
(Fluxion's ``evaluators/``); the express lane that answers the commonest first-fit requests
without a walk is :mod:`fluxinfra.matcher.express`, which sits above the traverser and is
attached to it by its owner (:class:`~fluxinfra.matcher.matcher.Matcher`).

How ``Traverser.select`` chooses
--------------------------------
Every request takes the first of four paths that applies; each gives the selection Fluxion's
traversal gives, for the reason stated::

    select(resources, meta, excl)
      |
      +-- 1. express lane   first-fit policy, fast mode, no RFC 31 constraint, an allocation
      |      (express.py)   now, not exclusive at the top, a single-parent graph, the simple
      |                     traversal, and one of three shapes (node[k] held whole; one slot
      |                     in a node held whole; slot[1]{core[1],...}). Otherwise it
      |                     answers "not mine".
      |                     Why Fluxion's: for these shapes the outcome is fixed by the order
      |                     first visits children, the same pruning calls, where each level
      |                     has enough and the template recorded for an untouched node of the
      |                     same shape; it applies exactly those, and any fact off that
      |                     ground (a partly used node, an unrecorded shape) aborts to 2-4.
      |
      +-- 2. guarded walk   fast mode, a ranking policy (not first-fit; not locality or
      |      (_guard set)   variation), a single-parent graph, the simple traversal.
      |                     Children are explored in the policy's order and each level stops
      |                     as first-fit's does. Why Fluxion's: at every ranking the guard
      |                     (Traverser._check) requires the chosen not to tie with the next
      |                     one, and every candidate left unexplored to score strictly worse
      |                     than the last chosen by a bound from the ids below it; then
      |                     ranking all candidates would choose the same. If any check
      |                     fails (_GuardFailed), the selection starts over as path 4.
      |
      +-- 3. dynamic walk   first-fit policies (stop_on_k) when the lane declined: children
      |      (_explore_     in Fluxion's dynamic order (ChildOrder, re-ranked after each
      |       dynamic)      commit as Fluxion's dfu_impl_update does), stopping once a level
      |                     has what it needs. Why Fluxion's: it is Fluxion's own algorithm
      |                     for these policies, step for step.
      |
      +-- 4. full walk      everything else (and a failed guard): every child in graph order,
             (_static;      every candidate scored and ranked as std::sort leaves them
              memo when     (evaluators). In fast mode, on a single-parent graph, with no
              _memo_on)     policy factor, what each subtree found is remembered per
                            (vertex, request, window) and stamped invalid when anything below
                            it changes (_visit, _restamp). Why Fluxion's: it is Fluxion's
                            static walk; a remembered subtree is replayed only while nothing
                            it read has changed, so it finds what walking it again would.

``tests/conformance`` (387 of Fluxion's own cases), ``tests/unit/matcher/test_express.py``
(the lane against the walk), ``test_fast_paths.py`` and ``test_exact_default.py`` (the fast
paths against Fluxion's step-by-step walk, ``Matcher(exact=True)``) and the live differential
against ``resource-query`` hold the four to the same answers.
"""

from fluxinfra.matcher.traverser.dfu import Traverser
from fluxinfra.matcher.traverser.flexible import FlexibleTraverser, prime_flexible
from fluxinfra.matcher.traverser.job import (
    AT_ALLOC,
    AT_NO_ALLOC,
    AT_RESERVE,
    AT_SAT,
    JobState,
    Meta,
)
from fluxinfra.matcher.traverser.memo import expand_slots

__all__ = ["Traverser", "FlexibleTraverser", "Meta", "JobState", "AT_ALLOC", "AT_RESERVE",
           "AT_SAT", "AT_NO_ALLOC", "expand_slots", "prime_flexible"]
