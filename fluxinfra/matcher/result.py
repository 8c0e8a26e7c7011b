"""What a match hands back: :class:`MatchResult`, and the job ids it may carry.

Fluxion's match operations answer with a job id, a status, a start time and the R they
selected (``reapi``'s ``match_allocate`` out-parameters); :class:`MatchResult` holds those, with
R (RFC 20 Rv1) and the JGF written on first read, since most callers read one of them or none.
:func:`check_jobid` keeps job ids to what Fluxion holds (``jobid_t``, a 64-bit signed integer).

>>> check_jobid(7)
7
>>> try:
...     check_jobid("7", "jobid")
... except MatcherError as err:
...     print(err)
jobid: '7' is a string; give an integer from 1 to 9223372036854775807
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from fluxinfra.inputs import INT64_MAX, INT64_MIN, shown, type_name
from fluxinfra.matcher.errors import MatcherError
from fluxinfra.matcher.graph import ResourceGraph
from fluxinfra.matcher.writers import write_jgf, write_rv1

__all__ = ["MatchResult", "check_jobid"]


def check_jobid(jobid: Any, what: str = "job id") -> int:
    """``jobid`` if it is a job id Fluxion can hold (a 64-bit signed integer), else
    MatcherError naming it."""
    if jobid.__class__ is not int:
        if isinstance(jobid, bool) or not isinstance(jobid, int):
            raise MatcherError(f"{what}: {shown(jobid)} is {type_name(jobid)}; give an integer "
                               f"from 1 to {INT64_MAX}")
        jobid = int(jobid)
    if not INT64_MIN <= jobid <= INT64_MAX:
        raise MatcherError(f"{what}: {jobid} is outside Fluxion's job ids (64-bit signed "
                           f"integers); give one from 1 to {INT64_MAX}")
    return jobid


@dataclass(slots=True)
class MatchResult:
    """The outcome of one match (or of ``info`` / ``update_allocate``). (Slots: one is kept
    per job, and a dict per instance was the larger part of it.)"""

    jobid: int
    status: str  # ALLOCATED | RESERVED | MATCHED (without_allocating) | SATISFIABLE | CANCELED
    at: int
    overhead: float
    nodes: list[str]
    #: slots and emitted vertices: lists, or None until first read, then built from the
    #: job ``_source`` committed (no closure kept per job for that)
    _slots: Any = field(default=None, repr=False)
    _emitted: Any = field(default=None, repr=False)
    duration: int = 0
    _graph: ResourceGraph | None = field(default=None, repr=False)
    _r: dict | None = field(default=None, repr=False)
    _job: Any = field(default=None, repr=False)  # the JobState committed
    _source: Any = field(default=None, repr=False)  # the Matcher that committed it

    @property
    def slots(self) -> list[dict[str, dict[str, int]]]:
        """Per slot instance (one pod of a group): node name -> {type: amount}."""
        if self._slots is None and self._source is not None:
            self._slots = self._source._slots(self._job)
        return self._slots or []

    @property
    def emitted(self) -> list:
        """The vertices held: (level, vertex, amount, exclusive, exclusive parent),
        post-order (what the writers print)."""
        if self._emitted is None:
            self._emitted = self._job.vertices if self._job is not None else []
        return self._emitted

    @property
    def raw_emitted(self) -> list:
        """:attr:`emitted` as the commit left it: a subtree held whole may still be one lazy
        entry (``Traverser``'s ``HeldSubtree``, with ``simple_text``) standing for every vertex
        below it; :func:`~fluxinfra.matcher.writers.write_simple` takes either form."""
        if self._emitted is None and self._job is not None:
            return self._job.raw_vertices
        return self.emitted

    @property
    def R(self) -> dict:  # noqa: N802 - RFC 20 calls it R
        """RFC 20 Rv1 (``execution`` + ``scheduling`` JGF), built on first use."""
        if self._r is None:
            self._r = write_rv1(self._graph, self.emitted, self.at, self.at + self.duration)
        return self._r

    @property
    def jgf(self) -> dict:
        return write_jgf(self._graph, self.emitted)

    def to_dict(self) -> dict[str, Any]:
        return {"jobid": self.jobid, "status": self.status, "at": self.at,
                "overhead": self.overhead, "nodes": self.nodes, "slots": self.slots, "R": self.R}
