"""A small client for the Fluxion service, and its command line.

:class:`FluxionClient` mirrors the matcher calls the scheduler makes (``match``, ``cancel``,
``partial_cancel``, ``info``, ``update_allocate``, ``set_status``, ``dump``) and turns gRPC status
codes back into the matcher's typed errors, so the scheduler can use either interchangeably::

    python -m fluxinfra.service.client --target localhost:4242 match jobspec.yaml
    python -m fluxinfra.service.client --target localhost:4242 match --op allocate_orelse_reserve \
        jobspec.yaml
    python -m fluxinfra.service.client --target localhost:4242 cancel 1
    python -m fluxinfra.service.client --target localhost:4242 info 1
    python -m fluxinfra.service.client --target localhost:4242 dump
    python -m fluxinfra.service.client --target localhost:4242 health

Output is one JSON document on stdout; failures are one line on stderr and exit code 2. A reader
that stops early (``... dump --graph | head``) ends it quietly, with the shell's SIGPIPE status.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from fluxinfra.console import quiet_broken_pipe
from fluxinfra.errors import FluxinfraError
from fluxinfra.matcher.errors import (
    Busy,
    GraphError,
    JobspecError,
    MatcherError,
    UnknownJob,
    Unsatisfiable,
)
from fluxinfra.service._generated import fluxcli_pb2 as pb
from fluxinfra.service._generated import fluxcli_pb2_grpc as pb_grpc

__all__ = ["FluxionClient", "RemoteResult", "ServiceError", "main"]


class ServiceError(FluxinfraError):
    """The service could not be reached or failed internally (names the target and status)."""


@dataclass
class RemoteResult:
    """A MatchResponse as plain data (the same fields as the matcher's MatchResult)."""

    jobid: int
    status: str
    at: int
    overhead: float
    R: dict[str, Any] | None
    nodes: list[str]
    slots: list[dict[str, Any]] = field(default_factory=list)
    duration: int = 0
    tasks: dict[str, int] = field(default_factory=dict)

    @classmethod
    def from_pb(cls, resp: pb.MatchResponse) -> RemoteResult:
        tasks = {n.nodeID: n.tasks for n in resp.nodelist}
        slots = [{node: {}} for node, n in tasks.items() for _ in range(n)]
        return cls(jobid=int(resp.jobID), status=resp.status, at=int(resp.at),
                   overhead=resp.overhead, R=json.loads(resp.R) if resp.R else None,
                   nodes=list(tasks), slots=slots, duration=int(resp.duration), tasks=tasks)

    def as_dict(self) -> dict[str, Any]:
        return {"jobid": self.jobid, "status": self.status, "at": self.at,
                "overhead": self.overhead, "nodes": self.nodes, "tasks": self.tasks,
                "duration": self.duration, "R": self.R}


_ERRORS: dict[grpc.StatusCode, type[MatcherError]] = {
    grpc.StatusCode.RESOURCE_EXHAUSTED: Busy,
    grpc.StatusCode.FAILED_PRECONDITION: Unsatisfiable,
    grpc.StatusCode.NOT_FOUND: UnknownJob,
}


class FluxionClient:
    """Calls one Fluxion service; ``timeout`` seconds per call."""

    def __init__(self, target: str, *, timeout: float = 30.0,
                 channel: grpc.Channel | None = None) -> None:
        self.target = target
        self.timeout = timeout
        self.channel = channel or grpc.insecure_channel(target)
        self.stub = pb_grpc.FluxcliServiceStub(self.channel)

    def close(self) -> None:
        self.channel.close()

    def __enter__(self) -> FluxionClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _call(self, method: str, request: Any) -> Any:
        try:
            return getattr(self.stub, method)(request, timeout=self.timeout)
        except grpc.RpcError as exc:
            code, details = exc.code(), exc.details() or ""
            if code in _ERRORS:
                raise _ERRORS[code](details) from None
            if code == grpc.StatusCode.INVALID_ARGUMENT:
                error = JobspecError if details.startswith(("jobspec", "resources", "ps",
                                                            "count", "request", "version",
                                                            "tasks", "attributes")) \
                    else GraphError
                raise error(details) from None
            raise ServiceError(f"{self.target}: {method} failed with {code.name}: {details}"
                               ) from None

    def match(self, jobspec: dict[str, Any] | str, op: str = "allocate",
              jobid: int | None = None, duration: int = 0,
              now: int | None = None) -> RemoteResult:
        text = jobspec if isinstance(jobspec, str) else json.dumps(jobspec)
        req = pb.MatchRequest(request=op, jobspec=text, jobid=jobid or 0, duration=duration)
        if now is not None:
            req.now = now
        return RemoteResult.from_pb(self._call("Match", req))

    def register(self, jobid: int, node: str, *, cores: int, memory_mib: int = 0,
                 gpus: int = 0, at: int = 0, duration: int = 0) -> RemoteResult:
        req = pb.RegisterRequest(jobID=jobid, node=node, cores=cores, memory_mib=memory_mib,
                                 gpus=gpus, at=at, duration=duration)
        return RemoteResult.from_pb(self._call("Register", req))

    def load_nodes(self, nodes: list[dict[str, Any]]) -> None:
        req = pb.GraphUpdateRequest(load_nodes=pb.GraphUpdateRequest.LoadNodes(
            nodes_json=json.dumps(nodes)))
        self._call("UpdateGraph", req)

    def cancel(self, jobid: int) -> None:
        self._call("Cancel", pb.CancelRequest(jobID=jobid))

    def partial_cancel(self, jobid: int, what: dict[str, Any] | list[str] | None = None, *,
                       slots: list[int] | None = None) -> bool:
        """Release named nodes, an R (dict), or slot instances; True once the job is empty."""
        if slots:
            req = pb.PartialCancelRequest(jobID=jobid, slots=list(slots))
        elif isinstance(what, dict):
            req = pb.PartialCancelRequest(jobID=jobid, R=json.dumps(what))
        else:
            req = pb.PartialCancelRequest(jobID=jobid, nodes=list(what or []))
        return bool(self._call("PartialCancel", req).fully_released)

    def info(self, jobid: int) -> RemoteResult:
        return RemoteResult.from_pb(self._call("Info", pb.InfoRequest(jobID=jobid)))

    def update_allocate(self, jobid: int, rset: dict[str, Any], at: int = 0,
                        duration: int = 0) -> RemoteResult:
        """Re-learn an allocation from its R (``duration`` 0: the R's own window, else until
        the end of time). Raises ``Busy`` when another job holds R's vertices then,
        ``GraphError`` when R names vertices the graph lacks; the same id again replaces."""
        req = pb.UpdateAllocateRequest(jobID=jobid, R=json.dumps(rset), at=at, duration=duration)
        return RemoteResult.from_pb(self._call("UpdateAllocate", req))

    def set_status(self, target: str, status: str) -> None:
        req = pb.GraphUpdateRequest(set_status=pb.GraphUpdateRequest.SetStatus(
            target=target, status=status))
        self._call("UpdateGraph", req)

    def dump(self, include_graph: bool = False) -> dict[str, Any]:
        resp = self._call("Dump", pb.DumpRequest(include_graph=include_graph))
        return {"now": resp.now, "stat": json.loads(resp.stat or "{}"),
                "jobs": [{"jobid": j.jobID, "status": j.status, "at": j.at,
                          "duration": j.duration, "nodes": list(j.nodes)} for j in resp.jobs],
                **({"jgf": json.loads(resp.jgf)} if resp.jgf else {})}

    def health(self, service: str = "") -> str:
        stub = health_pb2_grpc.HealthStub(self.channel)
        try:
            resp = stub.Check(health_pb2.HealthCheckRequest(service=service),
                              timeout=self.timeout)
        except grpc.RpcError as exc:
            raise ServiceError(f"{self.target}: health check failed with {exc.code().name}: "
                               f"{exc.details()}") from None
        return health_pb2.HealthCheckResponse.ServingStatus.Name(resp.status)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m fluxinfra.service.client",
                                description="Call a fluxinfra Fluxion service.")
    p.add_argument("--target", default="localhost:4242", help="host:port of the service")
    p.add_argument("--timeout", type=float, default=30.0, help="seconds per call")
    sub = p.add_subparsers(dest="command", required=True)
    m = sub.add_parser("match", help="match a jobspec file (YAML or JSON; '-' = stdin)")
    m.add_argument("jobspec")
    m.add_argument("--op", default="allocate", help="allocate | allocate_orelse_reserve | "
                   "allocate_with_satisfiability | satisfiability | without_allocating")
    m.add_argument("--duration", type=int, default=0, help="seconds (overrides the jobspec)")
    for name in ("cancel", "info"):
        c = sub.add_parser(name, help=f"{name} a job")
        c.add_argument("jobid", type=int)
    d = sub.add_parser("dump", help="statistics and jobs (JSON)")
    d.add_argument("--graph", action="store_true", help="include the JGF of the whole graph")
    sub.add_parser("health", help="grpc.health.v1 status of the service")
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    return quiet_broken_pipe(lambda: _call(args))


def _call(args: argparse.Namespace) -> int:
    try:
        with FluxionClient(args.target, timeout=args.timeout) as client:
            out: Any
            if args.command == "match":
                path = args.jobspec
                try:
                    text = sys.stdin.read() if path == "-" else Path(path).read_text()
                except OSError as exc:
                    raise FluxinfraError(f"jobspec: cannot read {path!r}: {exc.strerror}; "
                                         "pass a YAML/JSON jobspec file or '-'") from None
                out = client.match(text, op=args.op, duration=args.duration).as_dict()
            elif args.command == "cancel":
                client.cancel(args.jobid)
                out = {"jobid": args.jobid, "cancelled": True}
            elif args.command == "info":
                out = client.info(args.jobid).as_dict()
            elif args.command == "dump":
                out = client.dump(include_graph=args.graph)
            else:
                out = {"status": client.health()}
    except FluxinfraError as exc:
        print(f"fluxinfra service client: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    json.dump(out, sys.stdout, indent=2, sort_keys=True)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
