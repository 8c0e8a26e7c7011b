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
    python -m fluxinfra.service.client --target localhost:4242 epoch
    python -m fluxinfra.service.client --target svc:4242 --tls-dir /etc/fluxion-tls dump

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
from fluxinfra.service.tls import TlsFiles, read_tls_dir

#: Reconnect within seconds of a restarted service coming back (gRPC's default backoff grows
#: to two minutes), on a channel of our own (not one shared with other clients in the process).
#: Messages up to MAX_MESSAGE both ways (gRPC's default limit, 4 MiB, is a few hundred Node
#: objects in a LoadNodes, or the JGF of a mid-sized graph in a Dump).
MAX_MESSAGE = 256 * 2**20
MESSAGE_OPTIONS = [("grpc.max_receive_message_length", MAX_MESSAGE),
                   ("grpc.max_send_message_length", MAX_MESSAGE)]
CHANNEL_OPTIONS = [("grpc.initial_reconnect_backoff_ms", 500),
                   ("grpc.max_reconnect_backoff_ms", 5000),
                   ("grpc.use_local_subchannel_pool", 1), *MESSAGE_OPTIONS]

#: Trailing-metadata key of the service instance's epoch (on every answer, errors included).
EPOCH_KEY = "fluxion-epoch"

__all__ = ["EPOCH_KEY", "FluxionClient", "RemoteResult", "ServiceError", "main"]


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
    """Calls one Fluxion service; ``timeout`` seconds per call; with ``tls`` over mutual TLS
    (this side's certificate from ``tls``, the service's checked against ``tls.ca``)."""

    def __init__(self, target: str, *, timeout: float = 30.0,
                 channel: grpc.Channel | None = None, tls: TlsFiles | None = None) -> None:
        self.target = target
        self.timeout = timeout
        if channel is None:
            channel = grpc.secure_channel(target, tls.channel_credentials(),
                                          options=CHANNEL_OPTIONS) if tls is not None \
                else grpc.insecure_channel(target, options=CHANNEL_OPTIONS)
        self.channel = channel
        self.stub = pb_grpc.FluxcliServiceStub(self.channel)
        #: the service epoch of the last answer ("" before the first): changes when the
        #: service restarted (and so forgot every job)
        self.epoch = ""

    def close(self) -> None:
        self.channel.close()

    def __enter__(self) -> FluxionClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _note_epoch(self, call: Any) -> None:
        for key, value in call.trailing_metadata() or ():
            if key == EPOCH_KEY:
                self.epoch = value if isinstance(value, str) else value.decode()

    def _call(self, method: str, request: Any) -> Any:
        try:
            response, call = getattr(self.stub, method).with_call(request, timeout=self.timeout)
            self._note_epoch(call)
            return response
        except grpc.RpcError as exc:
            if isinstance(exc, grpc.Call):
                self._note_epoch(exc)
            code, details = exc.code(), exc.details() or ""
            if code == grpc.StatusCode.RESOURCE_EXHAUSTED and not details.startswith("busy:"):
                # gRPC's own limits (a message too large), not the matcher saying Busy
                raise ServiceError(f"{self.target}: {method} failed with {code.name}: "
                                   f"{details}") from None
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
            nodes_json=json.dumps(nodes, separators=(",", ":"))))
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

    def add_subgraph(self, jgf: dict[str, Any] | str, parent: str = "") -> dict[str, Any]:
        """Attach a JGF subgraph (vertices whose containment path exists are reused); with
        ``parent``, every vertex must lie under that vertex. Returns the graph's statistics."""
        text = jgf if isinstance(jgf, str) else json.dumps(jgf)
        req = pb.GraphUpdateRequest(add_subgraph=pb.GraphUpdateRequest.AddSubgraph(
            jgf=text, parent=parent))
        return json.loads(self._call("UpdateGraph", req).stat or "{}")

    def remove_subgraph(self, path: str) -> dict[str, Any]:
        """Remove a vertex (containment path or unique name) and everything below it; jobs
        lose those resources. Returns the graph's statistics."""
        req = pb.GraphUpdateRequest(remove_subgraph=pb.GraphUpdateRequest.RemoveSubgraph(
            path=path))
        return json.loads(self._call("UpdateGraph", req).stat or "{}")

    def dump(self, include_graph: bool = False) -> dict[str, Any]:
        resp = self._call("Dump", pb.DumpRequest(include_graph=include_graph))
        return {"now": resp.now, "stat": json.loads(resp.stat or "{}"),
                "jobs": [{"jobid": j.jobID, "status": j.status, "at": j.at,
                          "duration": j.duration, "nodes": list(j.nodes)} for j in resp.jobs],
                **({"jgf": json.loads(resp.jgf)} if resp.jgf else {})}

    def service_epoch(self) -> dict[str, Any]:
        """The service instance: ``epoch`` (new at every start), ``started``, ``jobs`` held."""
        resp = self._call("Epoch", pb.EpochRequest())
        return {"epoch": resp.epoch, "started": int(resp.started), "jobs": int(resp.jobs)}

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
    p.add_argument("--tls-dir", help="mutual TLS: a directory with ca.crt (the service's CA), "
                   "tls.crt and tls.key (this client's certificate and key)")
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
    sub.add_parser("epoch", help="which service instance answers (new at every start)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    return quiet_broken_pipe(lambda: _call(args))


def _call(args: argparse.Namespace) -> int:
    try:
        tls = read_tls_dir(args.tls_dir, "--tls-dir") if args.tls_dir else None
        with FluxionClient(args.target, timeout=args.timeout, tls=tls) as client:
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
            elif args.command == "epoch":
                out = client.service_epoch()
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
