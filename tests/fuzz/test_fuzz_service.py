"""The gRPC Fluxion service over real gRPC on 127.0.0.1: broken requests of every RPC.

The contract: every call is answered within its deadline with a status the proto names for it
(INVALID_ARGUMENT for a malformed request, RESOURCE_EXHAUSTED, FAILED_PRECONDITION, NOT_FOUND;
never INTERNAL, UNKNOWN or a deadline passed), a refused call changes nothing (the jobs and
the graph as before), and the service stays healthy: ``Dump``, which needs the matcher's lock,
answers after every input. Jobspec grammar and counts are fuzzed by ``test_fuzz_jobspec.py``;
here jobspecs are whole documents of the wrong shape.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from services_fuzz import EDGE_INTS, QUANTITIES, broken, fuzz, json_values

from fluxinfra.kube.graph import graph_from_k8s
from fluxinfra.matcher import Matcher
from fluxinfra.service._generated import fluxcli_pb2 as pb
from fluxinfra.service._generated import fluxcli_pb2_grpc as pb_grpc
from fluxinfra.service.jobspecs import slots_jobspec
from fluxinfra.service.server import SERVICE_NAME, serve

#: what a call may answer besides OK; everything else breaks the contract
REFUSALS = {grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.RESOURCE_EXHAUSTED,
            grpc.StatusCode.FAILED_PRECONDITION, grpc.StatusCode.NOT_FOUND}
INT64 = st.one_of(st.sampled_from([e for e in EDGE_INTS if -(2**63) <= e < 2**63]),
                  st.integers(-5, 50))
INT32 = st.one_of(st.sampled_from([0, 1, -1, 2**31 - 1, -(2**31)]), st.integers(-5, 50))
TEXT = st.one_of(st.text(max_size=30), st.sampled_from(["", "{", "[]", "null", "\x00", "é"]))


def node(name: str, cpu: Any = "4", memory: Any = "8Gi", **status: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
            "spec": {"taints": [{"key": "k", "value": "v", "effect": "PreferNoSchedule"}]},
            "status": {"allocatable": {"cpu": cpu, "memory": memory, "pods": "110"},
                       "conditions": [{"type": "Ready", "status": "True"}], **status}}


NODES = [node("n0"), node("n1")]
R = {"version": 1, "execution": {"R_lite": [{"rank": "0", "children": {"core": "0-1"}}],
                                 "nodelist": ["n0"], "starttime": 0, "expiration": 3600}}
JGF = {"graph": {"nodes": [{"id": "0", "metadata": {
    "type": "node", "basename": "n", "name": "n9", "id": 9, "uniq_id": 1000, "rank": 9,
    "size": 1, "exclusive": False, "paths": {"containment": "/cluster0/n9"}}}],
    "edges": [{"source": "0", "target": "0", "metadata": {"subsystem": "containment"}}]}}


class Service:
    def __init__(self) -> None:
        matcher = Matcher(graph_from_k8s(NODES, [], subtract_pods=False), policy="first")
        self.server, port = serve(matcher, host="127.0.0.1", port=0, workers=4, busy_wait=5)
        self.channel = grpc.insecure_channel(f"127.0.0.1:{port}")
        self.stub = pb_grpc.FluxcliServiceStub(self.channel)

    def call(self, rpc: str, request: Any) -> tuple[Any, grpc.StatusCode]:
        """One call under a deadline: (response, OK) or (None, its refusal)."""
        try:
            return getattr(self.stub, rpc)(request, timeout=10), grpc.StatusCode.OK
        except grpc.RpcError as exc:
            assert exc.code() in REFUSALS, f"{rpc}: {exc.code()} {exc.details()}"
            assert exc.details(), f"{rpc}: {exc.code()} without a message"
            return None, exc.code()

    def state(self) -> tuple[str, list[int]]:
        """The graph's size and the jobs held; the call itself proves the lock is free."""
        dump = self.stub.Dump(pb.DumpRequest(), timeout=10)
        stat = json.loads(dump.stat)
        return f"{stat['vertices']}/{stat['edges']}", sorted(j.jobID for j in dump.jobs)

    def release(self, response: Any) -> None:
        """Cancel what a call that succeeded holds, so the graph stays free for the next."""
        for job in self.state()[1]:
            self.call("Cancel", pb.CancelRequest(jobID=job))


@pytest.fixture(scope="module")
def service() -> Iterator[Service]:
    svc = Service()
    yield svc
    svc.channel.close()
    svc.server.stop(grace=None)


def refused_changes_nothing(svc: Service, rpc: str, request: Any) -> None:
    before = svc.state()
    response, code = svc.call(rpc, request)
    if code == grpc.StatusCode.OK:
        svc.release(response)
    else:
        assert svc.state() == before, f"{rpc} was refused ({code}) but changed the service"


def jobspec_texts() -> st.SearchStrategy:
    valid = [slots_jobspec(2, cores=1, duration=60), slots_jobspec(1, cores=4, memory_mib=1024)]
    return st.one_of(TEXT, json_values().map(json.dumps),
                     broken(valid).filter(lambda js: "operator" not in json.dumps(js))
                     .map(json.dumps))


@st.composite
def match_requests(draw) -> pb.MatchRequest:
    request = pb.MatchRequest(
        request=draw(st.sampled_from(["", "allocate", "allocate_orelse_reserve",
                                      "satisfiability", "without_allocating", "grab"])),
        count=draw(INT32), reservation=draw(st.booleans()), jobid=draw(INT64),
        duration=draw(INT64))
    if draw(st.booleans()):
        request.jobspec = draw(jobspec_texts())
    else:
        request.ps.CopyFrom(pb.PodSpec(id=draw(TEXT), cpu=draw(INT32), memory=draw(INT64),
                                       gpu=draw(INT64)))
    if draw(st.booleans()):
        request.now = draw(INT64)
    return request


@fuzz
@given(match_requests())
@example(pb.MatchRequest(ps=pb.PodSpec(cpu=1), jobid=2**63 - 1))
@example(pb.MatchRequest(ps=pb.PodSpec(cpu=1), jobid=-5))
@example(pb.MatchRequest(jobspec="[" * 100_000 + "]" * 100_000))
@example(pb.MatchRequest(ps=pb.PodSpec(cpu=1), now=2**63 - 1))
def test_match(service: Service, request: pb.MatchRequest) -> None:
    refused_changes_nothing(service, "Match", request)


def r_documents() -> st.SearchStrategy:
    hostlists = st.sampled_from(["n0", "n[0-1]", "node[0-99999999999]", "a[0-3]b[0-9999999]",
                                 "n[", "n]", "", "n[1-0]", "n[" + "9" * 30 + "]"])
    idsets = st.sampled_from(["0", "0-1", "0-99999999999", "1-0", "x", "", "-", "9" * 30, 0, -1])
    rlite = st.fixed_dictionaries({"rank": idsets, "children": st.dictionaries(
        st.sampled_from(["core", "gpu", "memory", ""]), idsets, max_size=3)})
    built = st.fixed_dictionaries({"version": st.just(1), "execution": st.fixed_dictionaries({
        "R_lite": st.lists(rlite, max_size=3), "nodelist": st.lists(hostlists, max_size=3),
        "starttime": st.sampled_from([0, -1, 1e308, float("nan"), "x"]),
        "expiration": st.sampled_from([3600, 2**63, float("inf")])})})
    return st.one_of(broken([R, JGF]), built, json_values())


@fuzz
@given(st.sampled_from(["UpdateAllocate", "PartialCancel"]), INT64,
       st.one_of(r_documents().map(json.dumps), TEXT), INT64, INT64)
@example("UpdateAllocate", 100, json.dumps({"version": 1, "execution": {
    "R_lite": [{"rank": "0", "children": {"core": "0"}}],
    "nodelist": ["node[0-99999999999]"]}}), 0, 0)
@example("UpdateAllocate", 100, json.dumps({"version": 1, "execution": {"R_lite": [1]}}), 0, 0)
@example("PartialCancel", 1, "[" * 100_000 + "]" * 100_000, 0, 0)
def test_r_documents(service: Service, rpc: str, jobid: int, r: str, at: int,
                     duration: int) -> None:
    if rpc == "UpdateAllocate":
        request: Any = pb.UpdateAllocateRequest(jobID=jobid, R=r, at=at, duration=duration)
    else:
        request = pb.PartialCancelRequest(jobID=jobid, R=r)
    refused_changes_nothing(service, rpc, request)


def node_lists() -> st.SearchStrategy:
    quantities = st.sampled_from(QUANTITIES)
    odd = st.builds(node, st.sampled_from(["n0", "n2", "", "a b"]), quantities, quantities)
    nodes = st.lists(st.one_of(broken(NODES), odd), max_size=4)
    pools = st.fixed_dictionaries({"model": st.just("pools"), "nodes": nodes}, optional={
        "topology": st.one_of(json_values(), st.just("zone=topology.kubernetes.io/zone")),
        "ranks": json_values(), "prune_filters": json_values()})
    return st.one_of(nodes, pools, json_values())


@st.composite
def graph_updates(draw) -> pb.GraphUpdateRequest:
    change = draw(st.sampled_from(["load_nodes", "add_subgraph", "remove_subgraph",
                                   "set_status", "none"]))
    text = st.one_of(TEXT, st.sampled_from(["/cluster0/n0", "n0", "/cluster0", "core0"]))
    if change == "load_nodes":
        docs = st.one_of(node_lists().map(json.dumps), TEXT)
        return pb.GraphUpdateRequest(load_nodes=pb.GraphUpdateRequest.LoadNodes(
            nodes_json=draw(docs)))
    if change == "add_subgraph":
        docs = st.one_of(broken([JGF]).map(json.dumps), json_values().map(json.dumps), TEXT)
        return pb.GraphUpdateRequest(add_subgraph=pb.GraphUpdateRequest.AddSubgraph(
            jgf=draw(docs), parent=draw(text)))
    if change == "remove_subgraph":
        return pb.GraphUpdateRequest(remove_subgraph=pb.GraphUpdateRequest.RemoveSubgraph(
            path=draw(text)))
    if change == "set_status":
        return pb.GraphUpdateRequest(set_status=pb.GraphUpdateRequest.SetStatus(
            target=draw(text), status=draw(st.sampled_from(["up", "down", "", "UP"]))))
    return pb.GraphUpdateRequest()


@fuzz
@given(graph_updates())
@example(pb.GraphUpdateRequest(load_nodes=pb.GraphUpdateRequest.LoadNodes(
    nodes_json=json.dumps([node("big", cpu="16Gi")]))))
@example(pb.GraphUpdateRequest(load_nodes=pb.GraphUpdateRequest.LoadNodes(
    nodes_json=json.dumps([node("big", cpu="9" * 5000)]))))
@example(pb.GraphUpdateRequest(load_nodes=pb.GraphUpdateRequest.LoadNodes(
    nodes_json=json.dumps({"model": "pools", "nodes": [node("big", cpu="1e60")]}))))
@example(pb.GraphUpdateRequest(load_nodes=pb.GraphUpdateRequest.LoadNodes(
    nodes_json=json.dumps([node("big", cpu=1e308)]))))  # found: INTERNAL (OverflowError)
def test_graph_updates(service: Service, request: pb.GraphUpdateRequest) -> None:
    before = service.state()
    _, code = service.call("UpdateGraph", request)
    if code != grpc.StatusCode.OK:
        assert service.state() == before, f"refused ({code}) but the graph changed"
    elif request.WhichOneof("change") in ("load_nodes", "add_subgraph", "remove_subgraph"):
        # put the fuzz graph back for the next input
        service.call("UpdateGraph", pb.GraphUpdateRequest(
            load_nodes=pb.GraphUpdateRequest.LoadNodes(nodes_json=json.dumps(NODES))))


RPCS = [m.name for m in pb.DESCRIPTOR.services_by_name["FluxcliService"].methods]


@fuzz
@given(st.sampled_from(RPCS), st.binary(max_size=200))
@example("Match", b"\xff\xff\xff")
@example("UpdateGraph", b"\x22\x03\xff\xfe\xfd")
def test_raw_bodies(service: Service, rpc: str, body: bytes) -> None:
    """Bytes that may or may not decode as the RPC's message: a status, never INTERNAL."""
    call = service.channel.unary_unary(f"/{SERVICE_NAME}/{rpc}")
    before = service.state()
    try:
        call(body, timeout=10)
    except grpc.RpcError as exc:
        assert exc.code() in REFUSALS, f"{rpc}: {exc.code()} {exc.details()}"
        assert service.state() == before
        return
    service.release(None)
    if rpc == "UpdateGraph":
        service.call("UpdateGraph", pb.GraphUpdateRequest(
            load_nodes=pb.GraphUpdateRequest.LoadNodes(nodes_json=json.dumps(NODES))))
