"""fluxinfra.matcher: a pure-Python, Fluxion-compatible resource-graph matcher (docs below)."""

from fluxinfra.matcher.errors import (
    Busy,
    GraphError,
    JobspecError,
    MatcherError,
    UnknownJob,
    Unsatisfiable,
)
from fluxinfra.matcher.graph import ResourceGraph, read_jgf
from fluxinfra.matcher.jobspec import Jobspec
from fluxinfra.matcher.matcher import Matcher, MatchResult

__all__ = ["ResourceGraph", "Matcher", "Jobspec", "MatchResult", "load_graph", "read_jgf",
           "MatcherError", "GraphError", "JobspecError", "Busy", "Unsatisfiable", "UnknownJob"]


def load_graph(source, fmt: str = "jgf", **options) -> ResourceGraph:
    """Load a graph from a path or text: ``jgf`` | ``grug`` | ``rv1exec`` | ``hwloc``."""
    from fluxinfra.matcher.readers import load_graph as _load

    return _load(source, fmt, **options)
