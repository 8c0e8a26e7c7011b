"""The gRPC Fluxion service: :class:`FluxionServicer` over one :class:`~fluxinfra.matcher.Matcher`.

One lock serialises every matcher call (the matcher is single-threaded by design); gRPC's thread
pool only overlaps (de)serialisation and network I/O. Matcher errors become status codes whose
message names the field at fault:

======================  ====================  =============================================
matcher error           gRPC status           meaning
======================  ====================  =============================================
JobspecError            INVALID_ARGUMENT      malformed jobspec (message starts with a path)
GraphError              INVALID_ARGUMENT      malformed R / JGF / vertex path
Busy                    RESOURCE_EXHAUSTED    fits the graph, not its current state
Unsatisfiable           FAILED_PRECONDITION   can never fit this graph
UnknownJob              NOT_FOUND             no such job id
======================  ====================  =============================================

Every answer, errors included, carries the service's **epoch** in its trailing metadata (key
``fluxion-epoch``; also the ``Epoch`` RPC): ``<start time>/<random UUID>``, new each time a
service starts. A restarted service holds none of the jobs its clients made, so a client that
sees the epoch change knows it must replay them (the scheduler's ``RemoteBackend`` does).

Start one with :func:`serve` (also what ``fluxinfra service`` runs); it registers the standard
``grpc.health.v1`` health service, reporting SERVING for "" and ``fluxcli.FluxcliService``.
"""

from __future__ import annotations

import json
import logging
import math
import threading
import time
import uuid
from concurrent import futures
from typing import Any

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from fluxinfra.matcher import (
    Busy,
    GraphError,
    Jobspec,
    JobspecError,
    Matcher,
    MatcherError,
    UnknownJob,
    Unsatisfiable,
)
from fluxinfra.service._generated import fluxcli_pb2 as pb
from fluxinfra.service._generated import fluxcli_pb2_grpc as pb_grpc
from fluxinfra.service.allocations import register_amounts
from fluxinfra.service.client import EPOCH_KEY, MESSAGE_OPTIONS
from fluxinfra.service.jobspecs import slots_jobspec
from fluxinfra.service.tls import TlsFiles

__all__ = ["EPOCH_KEY", "OPERATIONS", "SERVICE_NAME", "FluxionServicer", "new_epoch", "serve",
           "serve_health"]

log = logging.getLogger(__name__)

SERVICE_NAME = "fluxcli.FluxcliService"
OPERATIONS = ("allocate", "allocate_orelse_reserve", "allocate_with_satisfiability",
              "satisfiability", "without_allocating")
MIB = 2**20


def new_epoch(started: float | None = None) -> str:
    """``<start time, RFC 3339>/<random UUID>``: unique per service start, readable in logs."""
    started = time.time() if started is None else started
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started))
    return f"{stamp}/{uuid.uuid4()}"


class _Abort(Exception):
    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code, self.message = code, message


def _status_of(exc: Exception) -> tuple[grpc.StatusCode, str]:
    if isinstance(exc, _Abort):
        return exc.code, exc.message
    if isinstance(exc, JobspecError | GraphError):
        return grpc.StatusCode.INVALID_ARGUMENT, str(exc)
    if isinstance(exc, Busy):
        return grpc.StatusCode.RESOURCE_EXHAUSTED, f"busy: {exc}"
    if isinstance(exc, Unsatisfiable):
        return grpc.StatusCode.FAILED_PRECONDITION, f"unsatisfiable: {exc}"
    if isinstance(exc, UnknownJob):
        return grpc.StatusCode.NOT_FOUND, str(exc)
    if isinstance(exc, MatcherError):
        return grpc.StatusCode.INVALID_ARGUMENT, str(exc)
    return grpc.StatusCode.INTERNAL, f"{type(exc).__name__}: {exc}"


def _json_field(text: str, field: str) -> Any:
    try:
        return json.loads(text)
    except ValueError as exc:
        raise _Abort(grpc.StatusCode.INVALID_ARGUMENT,
                     f"{field}: not valid JSON ({exc}); send RFC 20 R as a JSON string") from None


def _nodelist(result: Any) -> list[pb.NodeAlloc]:
    """Slots per node, in the order the matcher placed them."""
    tasks: dict[str, int] = {}
    for slot in getattr(result, "slots", None) or []:
        for node in slot:
            tasks[node] = tasks.get(node, 0) + 1
    if not tasks:
        for node in getattr(result, "nodes", None) or []:
            tasks[node] = tasks.get(node, 0) + 1
    return [pb.NodeAlloc(nodeID=node, tasks=n) for node, n in tasks.items()]


def match_response(result: Any, pod_id: str = "") -> pb.MatchResponse:
    status = str(getattr(result, "status", ""))
    return pb.MatchResponse(
        podID=pod_id, nodelist=_nodelist(result), jobID=int(result.jobid),
        reserved=status == "RESERVED", at=int(getattr(result, "at", 0) or 0), status=status,
        overhead=float(getattr(result, "overhead", 0.0) or 0.0),
        R=json.dumps(result.R, separators=(",", ":")) if getattr(result, "R", None) else "",
        duration=int(getattr(result, "duration", 0) or 0))


def request_jobspec(request: pb.MatchRequest) -> Jobspec:
    """The jobspec of a MatchRequest: ``jobspec`` text, else Fluence's ``ps`` x ``count``."""
    if request.jobspec:
        return Jobspec.parse(request.jobspec)
    if not request.HasField("ps"):
        raise _Abort(grpc.StatusCode.INVALID_ARGUMENT,
                     "jobspec: empty and no ps (PodSpec) given; send a jobspec (YAML/JSON) "
                     "or ps with cpu >= 1")
    ps = request.ps
    if ps.cpu < 0 or ps.memory < 0 or ps.gpu < 0:
        raise _Abort(grpc.StatusCode.INVALID_ARGUMENT,
                     f"ps: cpu={ps.cpu} memory={ps.memory} gpu={ps.gpu}; amounts must be >= 0")
    count = request.count or 1
    if count < 0:
        raise _Abort(grpc.StatusCode.INVALID_ARGUMENT, f"count: {count}; must be >= 1")
    return Jobspec.parse(slots_jobspec(count, cores=max(1, ps.cpu),
                                       memory_mib=math.ceil(ps.memory / MIB), gpus=int(ps.gpu),
                                       duration=int(request.duration)))


class FluxionServicer(pb_grpc.FluxcliServiceServicer):
    """Implements every RPC of ``fluxcli.FluxcliService`` over one matcher."""

    def __init__(self, matcher: Matcher, policy: str = "first", epoch: str | None = None) -> None:
        self.matcher = matcher
        self.policy = policy
        self.lock = threading.Lock()
        self.started = time.time()
        self.epoch = epoch or new_epoch(self.started)

    def _run(self, context: grpc.ServicerContext, fn: Any) -> Any:
        context.set_trailing_metadata(((EPOCH_KEY, self.epoch),))
        try:
            with self.lock:
                return fn()
        except Exception as exc:  # noqa: BLE001 - every failure becomes a status, never a crash
            code, message = _status_of(exc)
            if code == grpc.StatusCode.INTERNAL:
                log.exception("internal error in the Fluxion service")
            context.abort(code, message)

    # -- RPCs -----------------------------------------------------------------------------------
    def Match(self, request: pb.MatchRequest, context: grpc.ServicerContext) -> pb.MatchResponse:  # noqa: N802
        def run() -> pb.MatchResponse:
            op = request.request or ("allocate_orelse_reserve" if request.reservation
                                     else "allocate")
            if op not in OPERATIONS:
                raise _Abort(grpc.StatusCode.INVALID_ARGUMENT,
                             f"request: {op!r} is not a match operation; use one of "
                             f"{', '.join(OPERATIONS)}")
            js = request_jobspec(request)
            if request.duration and request.jobspec:
                js.duration = int(request.duration)
            now = None
            if request.HasField("now"):
                now = self.matcher.now = int(request.now)
            result = self.matcher.match(js, op=op, jobid=request.jobid or None, now=now)
            return match_response(result, request.ps.id if request.HasField("ps") else "")
        return self._run(context, run)

    def Cancel(self, request: pb.CancelRequest, context: grpc.ServicerContext) -> pb.CancelResponse:  # noqa: N802
        def run() -> pb.CancelResponse:
            self.matcher.cancel(int(request.jobID))
            return pb.CancelResponse(jobID=request.jobID, error=0)
        return self._run(context, run)

    def PartialCancel(self, request: pb.PartialCancelRequest,  # noqa: N802
                      context: grpc.ServicerContext) -> pb.PartialCancelResponse:
        def run() -> pb.PartialCancelResponse:
            jobid = int(request.jobID)
            if request.slots:
                done = False
                for index in request.slots:
                    done = self.matcher.partial_cancel(jobid, self.matcher.slot_R(jobid, index))
                return pb.PartialCancelResponse(jobID=request.jobID, fully_released=bool(done))
            if request.R:
                what: Any = _json_field(request.R, "R")
            elif request.nodes:
                what = list(request.nodes)
            else:
                raise _Abort(grpc.StatusCode.INVALID_ARGUMENT,
                             "nodes/slots/R: all empty; name the nodes or slots to release, "
                             "or send an R")
            done = self.matcher.partial_cancel(jobid, what)
            return pb.PartialCancelResponse(jobID=request.jobID, fully_released=bool(done))
        return self._run(context, run)

    def Info(self, request: pb.InfoRequest, context: grpc.ServicerContext) -> pb.MatchResponse:  # noqa: N802
        return self._run(context, lambda: match_response(self.matcher.info(int(request.jobID))))

    def UpdateAllocate(self, request: pb.UpdateAllocateRequest,  # noqa: N802
                       context: grpc.ServicerContext) -> pb.MatchResponse:
        def run() -> pb.MatchResponse:
            if not request.R:
                raise _Abort(grpc.StatusCode.INVALID_ARGUMENT,
                             "R: empty; send the R (JSON) of the allocation to re-learn")
            rset = _json_field(request.R, "R")
            result = self.matcher.update_allocate(int(request.jobID), rset, at=int(request.at),
                                                  duration=int(request.duration))
            return match_response(result)
        return self._run(context, run)

    def Register(self, request: pb.RegisterRequest,  # noqa: N802
                 context: grpc.ServicerContext) -> pb.MatchResponse:
        def run() -> pb.MatchResponse:
            if not request.node:
                raise _Abort(grpc.StatusCode.INVALID_ARGUMENT,
                             "node: empty; name the node the amounts are in use on")
            if request.cores < 0 or request.memory_mib < 0 or request.gpus < 0:
                raise _Abort(grpc.StatusCode.INVALID_ARGUMENT,
                             f"cores/memory_mib/gpus: {request.cores}/{request.memory_mib}/"
                             f"{request.gpus}; amounts must be >= 0")
            if not any(self.matcher.graph.type[v] == "node"
                       for v in self.matcher.graph.by_name(request.node)):
                raise _Abort(grpc.StatusCode.INVALID_ARGUMENT,
                             f"node: {request.node!r} is not in the graph")
            result = register_amounts(self.matcher, int(request.jobID), request.node,
                                      cores=request.cores, memory_mib=request.memory_mib,
                                      gpus=request.gpus, at=int(request.at),
                                      duration=int(request.duration) or None)
            return match_response(result)
        return self._run(context, run)

    def UpdateGraph(self, request: pb.GraphUpdateRequest,  # noqa: N802
                    context: grpc.ServicerContext) -> pb.GraphUpdateResponse:
        def run() -> pb.GraphUpdateResponse:
            change = request.WhichOneof("change")
            if change == "set_status":
                if request.set_status.status not in ("up", "down"):
                    raise _Abort(grpc.StatusCode.INVALID_ARGUMENT,
                                 f"set_status.status: {request.set_status.status!r}; "
                                 "use 'up' or 'down'")
                self.matcher.set_status(request.set_status.target, request.set_status.status)
            elif change == "load_nodes":
                nodes = _json_field(request.load_nodes.nodes_json, "load_nodes.nodes_json")
                if not isinstance(nodes, list) and not (isinstance(nodes, dict)
                                                        and nodes.get("model") == "pools"):
                    raise _Abort(grpc.StatusCode.INVALID_ARGUMENT,
                                 "load_nodes.nodes_json: not a JSON list of Node objects (or "
                                 "{\"model\": \"pools\", \"nodes\": [...]})")
                self.matcher = matcher_from_nodes(nodes, self.policy)
            elif change == "add_subgraph":
                jgf = _json_field(request.add_subgraph.jgf, "add_subgraph.jgf")
                check_subgraph_parent(self.matcher.graph, jgf, request.add_subgraph.parent)
                self.matcher.add_subgraph(jgf)
            elif change == "remove_subgraph":
                if not request.remove_subgraph.path:
                    raise _Abort(grpc.StatusCode.INVALID_ARGUMENT,
                                 "remove_subgraph.path: empty; give a vertex's containment "
                                 "path (/cluster0/node3) or unique name")
                self.matcher.remove_subgraph(request.remove_subgraph.path)
            else:
                raise _Abort(grpc.StatusCode.INVALID_ARGUMENT,
                             "change: empty; set one of set_status, add_subgraph, "
                             "remove_subgraph, load_nodes")
            return pb.GraphUpdateResponse(stat=json.dumps(self.matcher.stat(), default=str))
        return self._run(context, run)

    def Dump(self, request: pb.DumpRequest, context: grpc.ServicerContext) -> pb.DumpResponse:  # noqa: N802
        def run() -> pb.DumpResponse:
            jobs = []
            for jobid in sorted(self.matcher.jobs):
                info = self.matcher.info(jobid)
                jobs.append(pb.JobState(jobID=int(jobid), status=str(info.status),
                                        at=int(info.at or 0),
                                        duration=int(getattr(info, "duration", 0) or 0),
                                        nodes=list(info.nodes or [])))
            jgf = ""
            if request.include_graph:
                jgf = json.dumps(graph_jgf(self.matcher.graph), separators=(",", ":"))
            return pb.DumpResponse(stat=json.dumps(self.matcher.stat(), default=str),
                                   jobs=jobs, jgf=jgf, now=int(self.matcher.now))
        return self._run(context, run)

    def Epoch(self, request: pb.EpochRequest, context: grpc.ServicerContext) -> pb.EpochResponse:  # noqa: N802
        return self._run(context, lambda: pb.EpochResponse(
            epoch=self.epoch, started=int(self.started), jobs=len(self.matcher.jobs)))


def check_subgraph_parent(graph: Any, jgf: Any, parent: str) -> None:
    """``add_subgraph.parent``, when given, must name an existing vertex, and every vertex of
    the JGF must lie at or under it (by containment path): a subgraph lands where the caller
    said or not at all."""
    from fluxinfra.matcher.graph import CONTAINMENT, read_jgf_parts

    if not parent:
        return
    top = graph.resolve(parent)  # GraphError (INVALID_ARGUMENT) when there is no such vertex
    prefix = graph.path(top)
    for vid, kwargs in read_jgf_parts(jgf)[0]:
        path = (kwargs.get("paths") or {}).get(CONTAINMENT) or ""
        if path != prefix and not path.startswith(prefix + "/"):
            raise _Abort(grpc.StatusCode.INVALID_ARGUMENT,
                         f"add_subgraph.jgf: vertex {vid!r} has containment path {path!r}, "
                         f"not under add_subgraph.parent {parent!r} ({prefix}); give every "
                         "vertex a paths.containment below the parent")


def matcher_from_nodes(nodes: list[dict[str, Any]] | dict[str, Any], policy: str) -> Matcher:
    """A fresh matcher over the graph of Kubernetes Node objects (full allocatable capacity).

    A list of Node objects builds the whole-core graph (``graph_from_k8s``, what Fluence-style
    ``ps`` requests match); ``{"model": "pools", "nodes": [...], "topology": [[level, label],
    ...], "ranks": {node: rank}}`` builds the scheduler's exact pool graph
    (``fluxinfra.matcher.k8s.pool_graph``, matched with ``exact_pools``) with the ranks and
    topology levels the scheduler uses, so its constraints mean the same nodes here."""
    from fluxinfra.matcher.k8s import K8sInputError, graph_from_k8s, parse_topology, pool_graph

    try:
        if isinstance(nodes, dict):
            graph, _ = pool_graph(nodes.get("nodes") or [],
                                  parse_topology(nodes.get("topology") or ""),
                                  ranks=nodes.get("ranks") or {})
            return Matcher(graph, policy=policy, exact_pools=True,
                           prune_filters=nodes.get("prune_filters"))
        graph = graph_from_k8s(nodes, [], subtract_pods=False)
    except (TypeError, KeyError, AttributeError, K8sInputError) as exc:
        raise _Abort(grpc.StatusCode.INVALID_ARGUMENT,
                     f"load_nodes.nodes_json: not a list of Node objects ({exc})") from None
    return Matcher(graph, policy=policy)


def graph_jgf(graph: Any) -> dict[str, Any]:
    """The whole graph as JGF (every vertex at its full size)."""
    from fluxinfra.matcher.writers import write_jgf

    emitted = [(0, v, graph.size[v], bool(graph.exclusive[v]), False)
               for v in range(len(graph)) if not graph.removed[v]]
    return write_jgf(graph, emitted)


def serve(matcher: Matcher, *, host: str = "[::]", port: int = 4242, workers: int = 8,
          policy: str = "first", tls: TlsFiles | None = None,
          epoch: str | None = None) -> tuple[grpc.Server, int]:
    """Start the service (non-blocking); returns the server and the bound port (``port=0`` picks
    a free one). With ``tls`` the port speaks only mutual TLS: clients must present a
    certificate signed by ``tls.ca``."""
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=workers),
                         options=MESSAGE_OPTIONS)
    pb_grpc.add_FluxcliServiceServicer_to_server(FluxionServicer(matcher, policy, epoch), server)
    return server, _start(server, host, port, tls)


def serve_health(host: str = "[::]", port: int = 4243) -> tuple[grpc.Server, int]:
    """Only ``grpc.health.v1``, in plain text, on a port of its own: the kubelet's gRPC probes
    cannot present a client certificate, and nothing else is answered here."""
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=1))
    return server, _start(server, host, port, None)


def _start(server: grpc.Server, host: str, port: int, tls: TlsFiles | None) -> int:
    """Add the health service, listen, start, report SERVING; returns the bound port."""
    health_servicer = health.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    bound = _listen(server, host, port, tls)
    server.start()
    for name in ("", SERVICE_NAME):
        health_servicer.set(name, health_pb2.HealthCheckResponse.SERVING)
    return bound


def _listen(server: grpc.Server, host: str, port: int, tls: TlsFiles | None) -> int:
    def add(address: str) -> int:
        try:
            if tls is None:
                return server.add_insecure_port(address)
            return server.add_secure_port(address, tls.server_credentials())
        except RuntimeError:  # newer grpcio raises where older ones returned 0
            return 0

    bound = add(f"{host}:{port}")
    if bound == 0 and host == "[::]":
        # No IPv6 in this network namespace (common in containers): IPv4 only.
        bound = add(f"0.0.0.0:{port}")
    if bound == 0:
        raise OSError(f"--port {port}: cannot listen on {host}:{port} (in use or not allowed)")
    return bound
