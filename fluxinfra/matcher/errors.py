"""Typed errors of the matcher (all subclass :class:`fluxinfra.errors.FluxinfraError`).

``Busy`` is Fluxion's EBUSY ("not now": the request fits the graph but not its current state) and
``Unsatisfiable`` is ENODEV ("never": the request cannot fit even an empty graph).
"""

from __future__ import annotations

from fluxinfra.errors import FluxinfraError

__all__ = ["MatcherError", "GraphError", "JobspecError", "Busy", "Unsatisfiable", "UnknownJob"]


class MatcherError(FluxinfraError):
    """Base class of every matcher error."""


class GraphError(MatcherError):
    """A resource graph is malformed (duplicate id, two roots, dangling edge, bad file)."""


class JobspecError(MatcherError):
    """A jobspec is malformed; the message starts with the path of the offending key."""


class Busy(MatcherError):
    """The request is satisfiable but not with the resources free now (EBUSY)."""


class Unsatisfiable(MatcherError):
    """The request can never be satisfied by this graph (ENODEV)."""


class UnknownJob(MatcherError):
    """A job id that the matcher does not know (cancel, info, partial_cancel)."""
