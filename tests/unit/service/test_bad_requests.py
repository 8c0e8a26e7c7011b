"""Bad requests to the gRPC Fluxion service on loopback: each is INVALID_ARGUMENT naming the
field, and the service keeps answering (its state unchanged). tests/fuzz/test_fuzz_service.py
throws generated requests at the same contract; the cases here are the ones worth naming."""

from __future__ import annotations

import json
import threading
import time

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from fluxinfra.kube.graph import graph_from_k8s
from fluxinfra.matcher import Matcher
from fluxinfra.service._generated import fluxcli_pb2 as pb
from fluxinfra.service._generated import fluxcli_pb2_grpc as pb_grpc
from fluxinfra.service.checks import MAX_JOBID, MAX_NODE_VERTICES
from fluxinfra.service.jobspecs import slots_jobspec
from fluxinfra.service.server import SERVICE_NAME, serve


def k8s_nodes(n: int, cpu: str = "4", memory: str = "8Gi") -> list[dict]:
    return [{"metadata": {"name": f"node{i}"},
             "status": {"allocatable": {"cpu": cpu, "memory": memory}}} for i in range(n)]


@pytest.fixture()
def service():
    matcher = Matcher(graph_from_k8s(k8s_nodes(2), [], subtract_pods=False), policy="first")
    srv, port = serve(matcher, host="127.0.0.1", port=0, workers=4, busy_wait=1.0)
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    yield matcher, channel, pb_grpc.FluxcliServiceStub(channel)
    channel.close()
    srv.stop(grace=None)


def refused(call, request, field: str) -> str:
    with pytest.raises(grpc.RpcError) as info:
        call(request, timeout=10)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT, info.value.details()
    assert info.value.details().startswith(field), info.value.details()
    return info.value.details()


def one_core() -> pb.MatchRequest:
    return pb.MatchRequest(jobspec=json.dumps(slots_jobspec(1, cores=1, duration=60)))


def test_an_explicit_jobid_past_the_limit_is_refused_and_ids_stay_in_int64(service) -> None:
    _, _, stub = service
    refused(stub.Match, pb.MatchRequest(ps=pb.PodSpec(cpu=1), jobid=2**63 - 1), "jobid:")
    refused(stub.Match, pb.MatchRequest(ps=pb.PodSpec(cpu=1), jobid=-5), "jobid:")
    top = stub.Match(pb.MatchRequest(ps=pb.PodSpec(cpu=1), jobid=MAX_JOBID), timeout=10)
    after = stub.Match(one_core(), timeout=10)  # the service's own id continues from there
    assert top.jobID == MAX_JOBID and after.jobID == MAX_JOBID + 1


@pytest.mark.parametrize(("rpc", "request_", "field"), [
    ("Cancel", pb.CancelRequest(jobID=0), "jobID:"),
    ("Info", pb.InfoRequest(jobID=-1), "jobID:"),
    ("Match", pb.MatchRequest(ps=pb.PodSpec(cpu=1), now=-5), "now:"),
    ("Match", pb.MatchRequest(ps=pb.PodSpec(cpu=1), duration=2**63 - 1), "duration:"),
    ("UpdateAllocate", pb.UpdateAllocateRequest(jobID=7, R="{}", at=2**63 - 1), "at:"),
    ("Register", pb.RegisterRequest(jobID=6, node="node0", cores=1, duration=-1), "duration:"),
    ("PartialCancel", pb.PartialCancelRequest(jobID=1, slots=[0, 0]), "slots:"),
    ("UpdateGraph", pb.GraphUpdateRequest(set_status=pb.GraphUpdateRequest.SetStatus(
        target="", status="up")), "set_status.target:"),
])
def test_out_of_range_fields_are_named(service, rpc: str, request_, field: str) -> None:
    _, _, stub = service
    refused(getattr(stub, rpc), request_, field)


@pytest.mark.parametrize(("r", "field"), [
    ({"version": 1, "execution": {"R_lite": [1]}}, "R.execution.R_lite[0]:"),
    ({"version": 1, "execution": {"R_lite": [{"rank": "0", "children": {"core": "0"}}],
                                  "nodelist": 5}}, "R.execution.nodelist:"),
    ({"version": 1, "execution": {"R_lite": [{"rank": "0", "children": {"core": "0"}}],
                                  "nodelist": ["node[0-99999999999]"]}},
     "R.execution.nodelist: names 100000000000"),
    ({"version": 1, "execution": {"R_lite": [{"rank": "0-99999999999999",
                                              "children": {"core": "0"}}]}},
     "R.execution.R_lite[0].rank:"),
    ({"graph": {"nodes": [{"id": "0", "metadata": {"type": "node", "size": 2**64}}],
                "edges": []}}, "R.graph.nodes[0].metadata.size:"),
])
def test_malformed_or_unbounded_r_is_invalid_argument(service, r, field: str) -> None:
    _, _, stub = service
    refused(stub.UpdateAllocate, pb.UpdateAllocateRequest(jobID=100, R=json.dumps(r)), field)


def test_json_nested_past_the_limit_is_refused_before_parsing(service) -> None:
    _, _, stub = service
    deep = "[" * 100_000 + "]" * 100_000
    refused(stub.UpdateAllocate, pb.UpdateAllocateRequest(jobID=1, R=deep), "R: nested")
    refused(stub.Match, pb.MatchRequest(jobspec=deep), "jobspec: nested")


@pytest.mark.parametrize(("nodes", "field"), [
    ([5], "load_nodes.nodes_json[0]:"),
    ([{"metadata": 5}], "load_nodes.nodes_json[0]: metadata:"),
    ([{"metadata": {"name": "a", "labels": {"x": 1}}}],
     "load_nodes.nodes_json[0] (node a): metadata.labels[x]:"),
    ([{"metadata": {"name": "a"}, "status": {"allocatable": {"cpu": "1e5000"}}}],
     "load_nodes.nodes_json[0] (node a): status.allocatable.cpu:"),
    ([{"metadata": {"name": "a"}, "status": {"allocatable": {"cpu": "9" * 5000}}}],
     "load_nodes.nodes_json[0] (node a): status.allocatable.cpu:"),
    ({"model": "pools", "nodes": [{"metadata": {"name": "a"},
                                   "status": {"allocatable": {"cpu": "1e60"}}}]},
     "load_nodes.nodes_json.nodes[0] (node a): status.allocatable.cpu:"),
    ({"model": "pools", "nodes": [], "ranks": {"a": "x"}}, "load_nodes.nodes_json.ranks:"),
])
def test_bad_node_lists_are_invalid_argument(service, nodes, field: str) -> None:
    matcher, _, stub = service
    before = len(matcher.graph)
    refused(stub.UpdateGraph, pb.GraphUpdateRequest(load_nodes=pb.GraphUpdateRequest.LoadNodes(
        nodes_json=json.dumps(nodes))), field)
    assert stub.Dump(pb.DumpRequest(), timeout=10)  # still answering, same graph
    assert len(matcher.graph) == before


def test_a_node_whose_cpu_is_a_memory_amount_is_refused_before_the_graph_is_built(
        service) -> None:
    _, _, stub = service
    t0 = time.monotonic()
    message = refused(stub.UpdateGraph, pb.GraphUpdateRequest(
        load_nodes=pb.GraphUpdateRequest.LoadNodes(
            nodes_json=json.dumps(k8s_nodes(1, cpu="16Gi")))), "load_nodes.nodes_json[0]")
    assert f"more than {MAX_NODE_VERTICES} for one node" in message
    assert "cpu '16Gi' is a memory amount" in message
    assert time.monotonic() - t0 < 5  # 17e9 core vertices were never built


@pytest.mark.parametrize("body", [b"\xff\xff\xff", b"\x32\x03\xff\xfe\xfd", b"\x0a\x05abc"])
def test_a_body_that_is_not_the_message_is_invalid_argument_with_the_epoch(service,
                                                                           body: bytes) -> None:
    _, channel, stub = service
    call = channel.unary_unary(f"/{SERVICE_NAME}/Match")
    with pytest.raises(grpc.RpcError) as info:
        call(body, timeout=10)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert info.value.details().startswith("request:")
    assert dict(info.value.trailing_metadata())["fluxion-epoch"] == \
        stub.Epoch(pb.EpochRequest(), timeout=10).epoch


def test_slots_are_all_checked_before_any_is_released(service) -> None:
    _, _, stub = service
    job = stub.Match(pb.MatchRequest(jobspec=json.dumps(slots_jobspec(2, cores=1))), timeout=10)
    with pytest.raises(grpc.RpcError):
        stub.PartialCancel(pb.PartialCancelRequest(jobID=job.jobID, slots=[0, 7]), timeout=10)
    held = stub.Info(pb.InfoRequest(jobID=job.jobID), timeout=10)
    assert sum(n.tasks for n in held.nodelist) == 2  # slot 0 was not released


def test_a_long_call_leaves_epoch_and_health_answering_and_others_get_unavailable(
        service, monkeypatch) -> None:
    """A matcher that holds its lock (a test double standing in for a pathological match):
    the service's other calls still answer within their deadlines."""
    matcher, channel, stub = service
    release, entered = threading.Event(), threading.Event()
    real_match = matcher.match

    def stuck_match(*args, **kwargs):
        entered.set()
        release.wait(30)
        return real_match(*args, **kwargs)

    monkeypatch.setattr(matcher, "match", stuck_match)
    first = stub.Match.future(one_core(), timeout=30)
    assert entered.wait(10)
    t0 = time.monotonic()
    assert stub.Epoch(pb.EpochRequest(), timeout=2).epoch
    health = health_pb2_grpc.HealthStub(channel)
    assert health.Check(health_pb2.HealthCheckRequest(service=SERVICE_NAME), timeout=2).status \
        == health_pb2.HealthCheckResponse.SERVING
    with pytest.raises(grpc.RpcError) as info:
        stub.Dump(pb.DumpRequest(), timeout=10)
    assert info.value.code() == grpc.StatusCode.UNAVAILABLE  # busy_wait is 1 s here
    with pytest.raises(grpc.RpcError) as info:
        stub.Cancel(pb.CancelRequest(jobID=1), timeout=0.5)
    assert info.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    assert time.monotonic() - t0 < 8
    release.set()
    assert first.result().status == "ALLOCATED"
    monkeypatch.undo()
    assert stub.Match(one_core(), timeout=10).status == "ALLOCATED"
