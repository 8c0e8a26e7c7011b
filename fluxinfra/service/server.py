"""The gRPC Fluxion service: :class:`FluxionServicer` over one :class:`~fluxinfra.matcher.Matcher`.

One lock serialises every matcher call (the matcher is single-threaded by design); gRPC's thread
pool only overlaps (de)serialisation, the checks of each request and network I/O. Every request
is checked field by field before the lock is taken (:mod:`fluxinfra.service.checks`); a call
waits for the lock at most ``busy_wait`` seconds (or to its deadline), and ``Epoch`` and the
health service need no lock at all, so one long call never stalls the others. Errors become
status codes whose message names the field at fault:

=========================  ===================  =============================================
error                      gRPC status          meaning
=========================  ===================  =============================================
InvalidRequest             INVALID_ARGUMENT     a field out of range or of the wrong shape, a
                                                body that is not the RPC's message
JobspecError, GraphError   INVALID_ARGUMENT     malformed jobspec, R, JGF or vertex path
Busy                       RESOURCE_EXHAUSTED   fits the graph, not its current state
Unsatisfiable              FAILED_PRECONDITION  can never fit this graph
UnknownJob                 NOT_FOUND            no such job id
(lock held too long)       UNAVAILABLE          another call held the matcher ``busy_wait`` s
anything else              INTERNAL             a bug: logged with its traceback
=========================  ===================  =============================================

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
from collections.abc import Callable
from concurrent import futures
from typing import Any

import grpc
from google.protobuf.message import DecodeError
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from fluxinfra.errors import FluxinfraError
from fluxinfra.kube.shapes import shown
from fluxinfra.matcher import Busy, Jobspec, Matcher, UnknownJob, Unsatisfiable
from fluxinfra.service._generated import fluxcli_pb2 as pb
from fluxinfra.service._generated import fluxcli_pb2_grpc as pb_grpc
from fluxinfra.service.allocations import register_amounts
from fluxinfra.service.checks import (
    MAX_GRAPH_VERTICES,
    InvalidRequest,
    check_jgf,
    check_jobid,
    check_jobspec_text,
    check_nodes,
    check_r,
    check_time,
    json_field,
)
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
    if isinstance(exc, Busy):
        return grpc.StatusCode.RESOURCE_EXHAUSTED, f"busy: {exc}"
    if isinstance(exc, Unsatisfiable):
        return grpc.StatusCode.FAILED_PRECONDITION, f"unsatisfiable: {exc}"
    if isinstance(exc, UnknownJob):
        return grpc.StatusCode.NOT_FOUND, str(exc)
    if isinstance(exc, FluxinfraError):  # InvalidRequest, JobspecError, GraphError, ...
        return grpc.StatusCode.INVALID_ARGUMENT, str(exc)
    return grpc.StatusCode.INTERNAL, f"{type(exc).__name__}: {exc}"


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
    """The jobspec of a MatchRequest: ``jobspec`` text, else Fluence's ``ps`` x ``count``.
    Pure (no matcher state): the server calls it before taking the matcher's lock."""
    if request.jobspec:
        try:
            js = Jobspec.parse(check_jobspec_text(request.jobspec))
        except RecursionError:
            raise InvalidRequest("jobspec: nested too deep to read; send a canonical jobspec "
                                 "(RFC 14)") from None
        if request.duration:
            js.duration = int(request.duration)
        return js
    if not request.HasField("ps"):
        raise InvalidRequest("jobspec: empty and no ps (PodSpec) given; send a jobspec "
                             "(YAML/JSON) or ps with cpu >= 1")
    ps = request.ps
    if ps.cpu < 0 or ps.memory < 0 or ps.gpu < 0:
        raise InvalidRequest(f"ps: cpu={ps.cpu} memory={ps.memory} gpu={ps.gpu}; amounts "
                             "must be >= 0")
    count = request.count or 1
    if count < 0:
        raise InvalidRequest(f"count: {count}; must be >= 1")
    return Jobspec.parse(slots_jobspec(count, cores=max(1, ps.cpu),
                                       memory_mib=math.ceil(ps.memory / MIB), gpus=int(ps.gpu),
                                       duration=int(request.duration)))


def _check_times(request: Any, *fields: str) -> None:
    for name in fields:
        check_time(int(getattr(request, name)), name)


class FluxionServicer(pb_grpc.FluxcliServiceServicer):
    """Implements every RPC of ``fluxcli.FluxcliService`` over one matcher.

    Each RPC reads its request in two steps: ``read`` checks and parses every field without
    the matcher (:mod:`fluxinfra.service.checks`; parsing a jobspec or a Node list is done
    here too), then ``apply`` runs under the lock. A call waits for the lock at most
    ``busy_wait`` seconds (or until its deadline) and is then answered ``UNAVAILABLE``: one
    long call never queues every other behind it, and ``Epoch`` answers without the lock.
    """

    def __init__(self, matcher: Matcher, policy: str = "first", epoch: str | None = None,
                 busy_wait: float = 60.0,
                 on_matcher: Callable[[Matcher], Any] | None = None) -> None:
        self.matcher = matcher
        #: called with each matcher a ``load_nodes`` call builds, before it is swapped in
        #: (``fluxinfra service`` settles the collector there: a library user's process is
        #: left alone)
        self.on_matcher = on_matcher
        self.policy = policy
        self.lock = threading.Lock()
        self.started = time.time()
        self.epoch = epoch or new_epoch(self.started)
        self.busy_wait = busy_wait

    def _run(self, context: grpc.ServicerContext, read: Callable[[], Any],
             apply: Callable[[Any], Any] | None = None) -> Any:
        context.set_trailing_metadata(((EPOCH_KEY, self.epoch),))
        try:
            value = read()
            if apply is None:
                return value
            self._acquire(context)
            try:
                return apply(value)
            finally:
                self.lock.release()
        except Exception as exc:  # noqa: BLE001 - every failure becomes a status, never a crash
            code, message = _status_of(exc)
            if code == grpc.StatusCode.INTERNAL:
                log.exception("internal error in the Fluxion service")
            context.abort(code, message)

    def _acquire(self, context: grpc.ServicerContext) -> None:
        """Take the matcher's lock, waiting at most ``busy_wait`` or to the call's deadline."""
        remaining = context.time_remaining()
        wait = self.busy_wait if remaining is None else min(self.busy_wait, remaining)
        if self.lock.acquire(timeout=max(0.0, wait)):
            return
        if remaining is not None and remaining <= self.busy_wait:
            raise _Abort(grpc.StatusCode.DEADLINE_EXCEEDED,
                         f"the matcher stayed busy with another request for the call's "
                         f"{remaining:.1f} s deadline")
        raise _Abort(grpc.StatusCode.UNAVAILABLE,
                     f"the matcher has been busy with another request for {self.busy_wait:.0f} "
                     "s; retry later")

    # -- RPCs -----------------------------------------------------------------------------------
    def Match(self, request: pb.MatchRequest, context: grpc.ServicerContext) -> pb.MatchResponse:  # noqa: N802
        def read() -> tuple[str, Jobspec]:
            op = request.request or ("allocate_orelse_reserve" if request.reservation
                                     else "allocate")
            if op not in OPERATIONS:
                raise InvalidRequest(f"request: {op!r} is not a match operation; use one of "
                                     f"{', '.join(OPERATIONS)}")
            if request.jobid:
                check_jobid(request.jobid, "jobid")
            _check_times(request, "duration", "now")
            return op, request_jobspec(request)

        def apply(parsed: tuple[str, Jobspec]) -> pb.MatchResponse:
            op, js = parsed
            now = None
            if request.HasField("now"):
                now = self.matcher.now = int(request.now)
            result = self.matcher.match(js, op=op, jobid=request.jobid or None, now=now)
            try:
                return match_response(result, request.ps.id if request.HasField("ps") else "")
            except Exception:
                # never leave resources held by a job the caller was not told about
                if int(result.jobid) in self.matcher.jobs:
                    self.matcher.cancel(int(result.jobid))
                raise
        return self._run(context, read, apply)

    def Cancel(self, request: pb.CancelRequest, context: grpc.ServicerContext) -> pb.CancelResponse:  # noqa: N802
        def apply(jobid: int) -> pb.CancelResponse:
            self.matcher.cancel(jobid)
            return pb.CancelResponse(jobID=jobid, error=0)
        return self._run(context, lambda: check_jobid(request.jobID, "jobID"), apply)

    def PartialCancel(self, request: pb.PartialCancelRequest,  # noqa: N802
                      context: grpc.ServicerContext) -> pb.PartialCancelResponse:
        def read() -> Any:
            check_jobid(request.jobID, "jobID")
            if request.slots:
                slots = list(request.slots)
                if min(slots) < 0 or len(set(slots)) != len(slots):
                    raise InvalidRequest(f"slots: {shown(slots)}; give each slot index "
                                         "(>= 0) once")
                return slots
            if request.R:
                return check_r(json_field(request.R, "R", "RFC 20 R"), "R",
                               len(self.matcher.graph))
            if request.nodes:
                if not all(request.nodes):
                    raise InvalidRequest("nodes: an empty node name; name each node")
                return list(request.nodes)
            raise InvalidRequest("nodes/slots/R: all empty; name the nodes or slots to "
                                 "release, or send an R")

        def apply(what: Any) -> pb.PartialCancelResponse:
            jobid = request.jobID
            if request.slots:
                # every slot's R first: an unknown index releases nothing
                rsets = [self.matcher.slot_R(jobid, index) for index in what]
                done = False
                for rset in rsets:
                    done = self.matcher.partial_cancel(jobid, rset)
                return pb.PartialCancelResponse(jobID=jobid, fully_released=bool(done))
            done = self.matcher.partial_cancel(jobid, what)
            return pb.PartialCancelResponse(jobID=jobid, fully_released=bool(done))
        return self._run(context, read, apply)

    def Info(self, request: pb.InfoRequest, context: grpc.ServicerContext) -> pb.MatchResponse:  # noqa: N802
        return self._run(context, lambda: check_jobid(request.jobID, "jobID"),
                         lambda jobid: match_response(self.matcher.info(jobid)))

    def UpdateAllocate(self, request: pb.UpdateAllocateRequest,  # noqa: N802
                       context: grpc.ServicerContext) -> pb.MatchResponse:
        def read() -> Any:
            check_jobid(request.jobID, "jobID")
            _check_times(request, "at", "duration")
            if not request.R:
                raise InvalidRequest("R: empty; send the R (JSON) of the allocation to "
                                     "re-learn")
            return check_r(json_field(request.R, "R", "RFC 20 R"), "R",
                           len(self.matcher.graph))

        def apply(rset: Any) -> pb.MatchResponse:
            return match_response(self.matcher.update_allocate(
                request.jobID, rset, at=int(request.at), duration=int(request.duration)))
        return self._run(context, read, apply)

    def Register(self, request: pb.RegisterRequest,  # noqa: N802
                 context: grpc.ServicerContext) -> pb.MatchResponse:
        def read() -> None:
            check_jobid(request.jobID, "jobID")
            _check_times(request, "at", "duration")
            if not request.node:
                raise InvalidRequest("node: empty; name the node the amounts are in use on")
            if request.cores < 0 or request.memory_mib < 0 or request.gpus < 0:
                raise InvalidRequest(f"cores/memory_mib/gpus: {request.cores}/"
                                     f"{request.memory_mib}/{request.gpus}; amounts must be "
                                     ">= 0")

        def apply(_: None) -> pb.MatchResponse:
            if not any(self.matcher.graph.type[v] == "node"
                       for v in self.matcher.graph.by_name(request.node)):
                raise InvalidRequest(f"node: {request.node!r} is not in the graph")
            result = register_amounts(self.matcher, request.jobID, request.node,
                                      cores=request.cores, memory_mib=request.memory_mib,
                                      gpus=request.gpus, at=int(request.at),
                                      duration=int(request.duration) or None)
            return match_response(result)
        return self._run(context, read, apply)

    def UpdateGraph(self, request: pb.GraphUpdateRequest,  # noqa: N802
                    context: grpc.ServicerContext) -> pb.GraphUpdateResponse:
        change = request.WhichOneof("change")

        def read() -> Any:
            if change == "set_status":
                if not request.set_status.target:
                    raise InvalidRequest("set_status.target: empty; give a vertex's "
                                         "containment path (/cluster0/node3) or unique name")
                if request.set_status.status not in ("up", "down"):
                    raise InvalidRequest(f"set_status.status: {request.set_status.status!r}; "
                                         "use 'up' or 'down'")
                return None
            if change == "load_nodes":
                # the new matcher is built here, outside the lock; the swap is under it
                doc = json_field(request.load_nodes.nodes_json, "load_nodes.nodes_json",
                                 "a list of Node objects")
                check_nodes(doc)
                matcher = matcher_from_nodes(doc, self.policy)
                if self.on_matcher is not None:
                    self.on_matcher(matcher)
                return matcher
            if change == "add_subgraph":
                return check_jgf(json_field(request.add_subgraph.jgf, "add_subgraph.jgf",
                                            "JGF"), "add_subgraph.jgf", MAX_GRAPH_VERTICES)
            if change == "remove_subgraph":
                if not request.remove_subgraph.path:
                    raise InvalidRequest("remove_subgraph.path: empty; give a vertex's "
                                         "containment path (/cluster0/node3) or unique name")
                return None
            raise InvalidRequest("change: empty; set one of set_status, add_subgraph, "
                                 "remove_subgraph, load_nodes")

        def apply(value: Any) -> pb.GraphUpdateResponse:
            if change == "set_status":
                self.matcher.set_status(request.set_status.target, request.set_status.status)
            elif change == "load_nodes":
                self.matcher = value
            elif change == "add_subgraph":
                check_subgraph_parent(self.matcher.graph, value, request.add_subgraph.parent)
                self.matcher.add_subgraph(value)
            else:
                self.matcher.remove_subgraph(request.remove_subgraph.path)
            return pb.GraphUpdateResponse(stat=json.dumps(self.matcher.stat(), default=str))
        return self._run(context, read, apply)

    def Dump(self, request: pb.DumpRequest, context: grpc.ServicerContext) -> pb.DumpResponse:  # noqa: N802
        def apply(_: None) -> pb.DumpResponse:
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
        return self._run(context, lambda: None, apply)

    def Epoch(self, request: pb.EpochRequest, context: grpc.ServicerContext) -> pb.EpochResponse:  # noqa: N802
        # No lock: it names the instance, and must answer while a long call holds the matcher.
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
            raise InvalidRequest(f"add_subgraph.jgf: vertex {vid!r} has containment path "
                                 f"{path!r}, not under add_subgraph.parent {parent!r} "
                                 f"({prefix}); give every vertex a paths.containment below "
                                 "the parent")


def matcher_from_nodes(nodes: list[dict[str, Any]] | dict[str, Any], policy: str) -> Matcher:
    """A fresh matcher over the graph of Kubernetes Node objects (full allocatable capacity).

    A list of Node objects builds the whole-core graph (``graph_from_k8s``, what Fluence-style
    ``ps`` requests match); ``{"model": "pools", "nodes": [...], "topology": [[level, label],
    ...], "ranks": {node: rank}}`` builds the scheduler's exact pool graph
    (``fluxinfra.kube.pools.pool_graph``, matched with ``exact_pools``) with the ranks and
    topology levels the scheduler uses, so its constraints mean the same nodes here."""
    from fluxinfra.kube.graph import graph_from_k8s
    from fluxinfra.kube.pools import parse_topology, pool_graph
    from fluxinfra.kube.resources import K8sInputError

    try:
        if isinstance(nodes, dict):
            graph, _ = pool_graph(nodes.get("nodes") or [],
                                  parse_topology(nodes.get("topology") or ""),
                                  ranks=nodes.get("ranks") or {})
            return Matcher(graph, policy=policy, exact_pools=True,
                           prune_filters=nodes.get("prune_filters"))
        graph = graph_from_k8s(nodes, [], subtract_pods=False)
    except (TypeError, KeyError, AttributeError, K8sInputError) as exc:
        raise InvalidRequest(f"load_nodes.nodes_json: not a list of Node objects ({exc})"
                             ) from None
    return Matcher(graph, policy=policy)


def graph_jgf(graph: Any) -> dict[str, Any]:
    """The whole graph as JGF (every vertex at its full size)."""
    from fluxinfra.matcher.writers import write_jgf

    emitted = [(0, v, graph.size[v], bool(graph.exclusive[v]), False)
               for v in range(len(graph)) if not graph.removed[v]]
    return write_jgf(graph, emitted)


def serve(matcher: Matcher, *, host: str = "[::]", port: int = 4242, workers: int = 8,
          policy: str = "first", tls: TlsFiles | None = None,
          epoch: str | None = None, busy_wait: float = 60.0,
          on_matcher: Callable[[Matcher], Any] | None = None) -> tuple[grpc.Server, int]:
    """Start the service (non-blocking); returns the server and the bound port (``port=0`` picks
    a free one). With ``tls`` the port speaks only mutual TLS: clients must present a
    certificate signed by ``tls.ca``. ``busy_wait``: how long a call waits for the matcher
    while another holds it (then ``UNAVAILABLE``). ``on_matcher``: called with each matcher
    a ``load_nodes`` call builds (:attr:`FluxionServicer.on_matcher`)."""
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=workers),
                         options=MESSAGE_OPTIONS)
    add_servicer(FluxionServicer(matcher, policy, epoch, busy_wait, on_matcher), server)
    return server, _start(server, host, port, tls)


def add_servicer(servicer: FluxionServicer, server: grpc.Server) -> None:
    """Register ``servicer`` as the generated ``add_FluxcliServiceServicer_to_server`` does,
    except that each request is decoded here: a body that is not the RPC's message is answered
    ``INVALID_ARGUMENT`` naming the RPC (gRPC's own decoding would answer ``INTERNAL``)."""
    handlers = {}
    for method in pb.DESCRIPTOR.services_by_name["FluxcliService"].methods:
        request_type = getattr(pb, method.input_type.name)
        response_type = getattr(pb, method.output_type.name)
        handlers[method.name] = grpc.unary_unary_rpc_method_handler(
            _decoding(servicer, getattr(servicer, method.name), request_type),
            response_serializer=response_type.SerializeToString)
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler(SERVICE_NAME, handlers),))


def _decoding(servicer: FluxionServicer, behaviour: Callable[[Any, grpc.ServicerContext], Any],
              request_type: Any) -> Callable[[bytes, grpc.ServicerContext], Any]:
    def handle(raw: bytes, context: grpc.ServicerContext) -> Any:
        try:
            request = request_type.FromString(raw)
        except (DecodeError, ValueError, RuntimeError) as exc:
            context.set_trailing_metadata(((EPOCH_KEY, servicer.epoch),))
            context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                          f"request: {len(raw)} bytes that are not a {request_type.__name__} "
                          f"message ({exc}); send the message of fluxcli.proto")
        return behaviour(request, context)

    return handle


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
