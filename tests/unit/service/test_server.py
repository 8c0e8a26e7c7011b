"""The gRPC Fluxion service on loopback (port 0), called through raw stubs and the client."""

from __future__ import annotations

import json

import grpc
import pytest
import yaml
from grpc_health.v1 import health_pb2, health_pb2_grpc

from fluxinfra.kube.graph import graph_from_k8s
from fluxinfra.matcher import Matcher
from fluxinfra.matcher.errors import Busy, JobspecError, UnknownJob, Unsatisfiable
from fluxinfra.service._generated import fluxcli_pb2 as pb
from fluxinfra.service._generated import fluxcli_pb2_grpc as pb_grpc
from fluxinfra.service.client import FluxionClient
from fluxinfra.service.jobspecs import slots_jobspec
from fluxinfra.service.server import SERVICE_NAME, serve

GIB = 2**30


def k8s_nodes(n: int, cpu: str = "4", memory: str = "8Gi") -> list[dict]:
    return [{"metadata": {"name": f"node{i}"},
             "status": {"allocatable": {"cpu": cpu, "memory": memory}}} for i in range(n)]


@pytest.fixture()
def server():
    matcher = Matcher(graph_from_k8s(k8s_nodes(2), [], subtract_pods=False), policy="first")
    srv, port = serve(matcher, host="127.0.0.1", port=0, workers=4)
    yield f"127.0.0.1:{port}"
    srv.stop(grace=None)


@pytest.fixture()
def stub(server: str):
    channel = grpc.insecure_channel(server)
    yield pb_grpc.FluxcliServiceStub(channel)
    channel.close()


@pytest.fixture()
def client(server: str):
    with FluxionClient(server, timeout=10) as c:
        yield c


def test_health_reports_serving(server: str) -> None:
    with grpc.insecure_channel(server) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        for name in ("", SERVICE_NAME):
            resp = health.Check(health_pb2.HealthCheckRequest(service=name), timeout=5)
            assert resp.status == health_pb2.HealthCheckResponse.SERVING


def test_fluence_shaped_match_and_cancel(stub) -> None:
    req = pb.MatchRequest(ps=pb.PodSpec(id="pod-a", cpu=2, memory=GIB), request="allocate",
                          count=3)
    resp = stub.Match(req, timeout=5)
    assert resp.podID == "pod-a" and resp.jobID >= 1 and not resp.reserved
    assert sum(n.tasks for n in resp.nodelist) == 3
    assert {n.nodeID for n in resp.nodelist} <= {"node0", "node1"}
    assert json.loads(resp.R)["execution"]["R_lite"]
    cancel = stub.Cancel(pb.CancelRequest(jobID=resp.jobID), timeout=5)
    assert (cancel.jobID, cancel.error) == (resp.jobID, 0)


def test_reservation_flag_reserves_in_the_future(stub) -> None:
    full = pb.MatchRequest(jobspec=json.dumps(slots_jobspec(2, cores=4, duration=100)))
    assert stub.Match(full, timeout=5).status == "ALLOCATED"
    later = pb.MatchRequest(ps=pb.PodSpec(id="b", cpu=4), count=1, reservation=True,
                            duration=50)
    resp = stub.Match(later, timeout=5)
    assert resp.reserved and resp.at == 100 and resp.status == "RESERVED"


def test_yaml_jobspec_is_accepted(client: FluxionClient) -> None:
    text = yaml.safe_dump(slots_jobspec(1, cores=1, memory_mib=1024, duration=60))
    result = client.match(text)
    assert result.status == "ALLOCATED" and result.nodes


@pytest.mark.parametrize(("jobspec", "field"), [
    ({"version": 1, "resources": [{"type": "core", "count": {"min": 0}}]}, "resources[0].count"),
    ("version: [", "jobspec"),
    ({"version": 1, "resources": [{"type": "core", "count": "many"}]}, "resources[0].count"),
])
def test_malformed_jobspec_is_invalid_argument_naming_the_field(stub, jobspec, field) -> None:
    text = jobspec if isinstance(jobspec, str) else json.dumps(jobspec)
    with pytest.raises(grpc.RpcError) as info:
        stub.Match(pb.MatchRequest(jobspec=text), timeout=5)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert field in info.value.details()


def test_unknown_operation_names_the_field(stub) -> None:
    with pytest.raises(grpc.RpcError) as info:
        stub.Match(pb.MatchRequest(request="grab", ps=pb.PodSpec(cpu=1)), timeout=5)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert info.value.details().startswith("request:")


def test_status_codes_map_back_to_matcher_errors(client: FluxionClient) -> None:
    with pytest.raises(Unsatisfiable):
        client.match(slots_jobspec(1, cores=64), op="allocate_with_satisfiability")
    client.match(slots_jobspec(8, cores=1))
    with pytest.raises(Busy):
        client.match(slots_jobspec(1, cores=1))
    with pytest.raises(UnknownJob):
        client.cancel(999)
    with pytest.raises(JobspecError):
        client.match({"version": 1, "resources": "nope"})


def test_partial_cancel_info_and_update_allocate_round_trip(client: FluxionClient) -> None:
    first = client.match(slots_jobspec(8, cores=1, duration=600))
    assert sorted(first.tasks.items()) == [("node0", 4), ("node1", 4)]
    info = client.info(first.jobid)
    assert info.status == "ALLOCATED"
    assert client.partial_cancel(first.jobid, ["node0"]) is False
    assert client.info(first.jobid).nodes == ["node1"]
    rset = client.info(first.jobid).R
    client.cancel(first.jobid)
    again = client.update_allocate(77, rset, at=0, duration=600)
    assert again.jobid == 77 and again.nodes == ["node1"]
    with pytest.raises(Busy):  # node1 is full again, node0 free: 5 cores do not fit
        client.match(slots_jobspec(5, cores=1))


def test_update_allocate_of_held_vertices_is_resource_exhausted(stub) -> None:
    """UpdateAllocate never books a vertex twice: the same R under a second job id is
    RESOURCE_EXHAUSTED (Busy) and holds nothing; under its own id it is idempotent; an R
    naming a vertex the graph lacks is INVALID_ARGUMENT (GraphError) naming that vertex."""
    first = stub.Match(pb.MatchRequest(request="allocate", ps=pb.PodSpec(cpu=1)), timeout=5)
    rset = json.loads(first.R)
    again = stub.UpdateAllocate(pb.UpdateAllocateRequest(jobID=first.jobID, R=first.R),
                                timeout=5)
    assert again.jobID == first.jobID
    with pytest.raises(grpc.RpcError) as info:
        stub.UpdateAllocate(pb.UpdateAllocateRequest(jobID=first.jobID + 1, R=first.R),
                            timeout=5)
    assert info.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert info.value.details().startswith("busy: update_allocate: vertex ")
    with pytest.raises(grpc.RpcError) as info:  # job first.jobID + 1 holds nothing
        stub.Info(pb.InfoRequest(jobID=first.jobID + 1), timeout=5)
    assert info.value.code() == grpc.StatusCode.NOT_FOUND
    for n in rset["scheduling"]["graph"]["nodes"]:
        n["id"] = str(int(n["id"]) + 10_000)
        n["metadata"].pop("uniq_id", None)
        n["metadata"]["paths"] = {"containment": "/nowhere" + n["metadata"]["paths"][
            "containment"]}
    with pytest.raises(grpc.RpcError) as info:
        stub.UpdateAllocate(pb.UpdateAllocateRequest(jobID=50, R=json.dumps(rset)), timeout=5)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "is not in the graph" in info.value.details()


def test_register_load_nodes_and_dump(client: FluxionClient) -> None:
    client.load_nodes(k8s_nodes(3, cpu="2"))
    client.register(5, "node2", cores=2, at=0, duration=100)
    dump = client.dump(include_graph=True)
    assert [j["jobid"] for j in dump["jobs"]] == [5]
    assert dump["jobs"][0]["nodes"] == ["node2"]
    # Fluxion's compact JGF omits a name equal to basename + id, and a basename equal to type.
    names = {md.get("name") or f"{md.get('basename', md['type'])}{md.get('id', '')}"
             for md in (n["metadata"] for n in dump["jgf"]["graph"]["nodes"])}
    assert {"node0", "node1", "node2"} <= names
    result = client.match(slots_jobspec(2, cores=2), op="allocate", now=10)
    assert sorted(result.nodes) == ["node0", "node1"]


def test_register_on_an_unknown_node_is_invalid_argument(stub) -> None:
    with pytest.raises(grpc.RpcError) as info:
        stub.Register(pb.RegisterRequest(jobID=3, node="ghost", cores=1), timeout=5)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "node" in info.value.details()


def test_partial_cancel_by_slot_frees_exactly_one_pod(client: FluxionClient) -> None:
    group = client.match(slots_jobspec(4, cores=1, memory_mib=1024, duration=60))
    assert client.partial_cancel(group.jobid, slots=[2]) is False
    assert sum(client.info(group.jobid).tasks.values()) == 3
    assert client.partial_cancel(group.jobid, slots=[0, 1, 3]) is True
    with pytest.raises(UnknownJob):
        client.info(group.jobid)


def test_partial_cancel_needs_something_to_release(stub) -> None:
    with pytest.raises(grpc.RpcError) as info:
        stub.PartialCancel(pb.PartialCancelRequest(jobID=1), timeout=5)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert info.value.details().startswith("nodes/slots/R")


def test_concurrent_matches_never_oversubscribe(server: str) -> None:
    """Eight clients race for 8 cores (2 nodes x 4): exactly 8 one-core matches succeed."""
    from concurrent.futures import ThreadPoolExecutor

    def grab(_: int) -> int:
        won = 0
        with FluxionClient(server, timeout=10) as c:
            for _ in range(4):
                try:
                    c.match(slots_jobspec(1, cores=1, duration=60))
                    won += 1
                except Busy:
                    pass
        return won

    with ThreadPoolExecutor(8) as pool:
        assert sum(pool.map(grab, range(8))) == 8
    with FluxionClient(server, timeout=10) as c:
        assert len(c.dump()["jobs"]) == 8


def _node_jgf(server_nodes: int, name: str) -> dict:
    """The JGF of one more node for the service's whole-core graph (what a client of
    ``UpdateGraph add_subgraph`` sends): the existing parent, by its path, and the new vertices
    under it, from :func:`fluxinfra.kube.graph.node_insertion`'s plan."""
    from fluxinfra.kube.graph import k8s_inventory, node_insertion

    graph = graph_from_k8s(k8s_nodes(server_nodes), [], subtract_pods=False)
    node = {"metadata": {"name": name}, "status": {"allocatable": {"cpu": "4",
                                                                   "memory": "8Gi"}}}
    plan = node_insertion(graph, k8s_inventory([node], [], subtract_pods=False).nodes[0])
    parent = graph.resolve(plan["parent"])
    nodes = [{"id": "parent", "metadata": {"type": graph.type[parent],
                                           "uniq_id": graph.uniq_id[parent],
                                           "paths": {"containment": plan["parent"]}}}]
    parent_of = {child: pos for pos, child in plan["edges"]}
    paths: dict[int, str] = {}
    edges = []
    for i, v in enumerate(plan["vertices"]):
        paths[i] = f"{paths[parent_of[i]] if i in parent_of else plan['parent']}/{v['name']}"
        md = {k: v[k] for k in ("type", "basename", "name", "id", "rank", "size", "unit")}
        md.update(uniq_id=max(graph.uniq_id) + 1 + i, status=0,
                  paths={"containment": paths[i]})
        nodes.append({"id": f"new{i}", "metadata": md})
        edges.append({"source": f"new{parent_of[i]}" if i in parent_of else "parent",
                      "target": f"new{i}", "metadata": {"subsystem": "containment"}})
    return {"graph": {"nodes": nodes, "edges": edges}}


def test_add_subgraph_attaches_a_node_and_remove_subgraph_takes_it_away(
        client: FluxionClient) -> None:
    """UpdateGraph add_subgraph used to answer INTERNAL (a TypeError in the service)."""
    three = slots_jobspec(3, cores=4, duration=60)
    with pytest.raises(Unsatisfiable):
        client.match(three, op="allocate_with_satisfiability")
    stat = client.add_subgraph(_node_jgf(2, "node9"), parent="/cluster0")
    assert stat["vertices"] > 0
    placed = client.match(three, op="allocate")
    assert sorted(placed.nodes) == ["node0", "node1", "node9"]
    client.cancel(placed.jobid)
    client.remove_subgraph("node9")
    with pytest.raises(Unsatisfiable):
        client.match(three, op="allocate_with_satisfiability")


@pytest.mark.parametrize(("parent", "needle"), [
    ("/cluster0/node0", "not under add_subgraph.parent '/cluster0/node0'"),
    ("/nowhere", "no vertex at path '/nowhere'"),
])
def test_add_subgraph_outside_its_parent_is_invalid_argument(stub, parent: str,
                                                             needle: str) -> None:
    req = pb.GraphUpdateRequest(add_subgraph=pb.GraphUpdateRequest.AddSubgraph(
        jgf=json.dumps(_node_jgf(2, "node9")), parent=parent))
    with pytest.raises(grpc.RpcError) as info:
        stub.UpdateGraph(req, timeout=5)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert needle in info.value.details()


@pytest.mark.parametrize(("change", "needle"), [
    (pb.GraphUpdateRequest(add_subgraph=pb.GraphUpdateRequest.AddSubgraph(jgf="{")),
     "add_subgraph.jgf: not valid JSON"),
    (pb.GraphUpdateRequest(add_subgraph=pb.GraphUpdateRequest.AddSubgraph(jgf="{}")),
     "add_subgraph.jgf: top-level key 'graph'"),
    (pb.GraphUpdateRequest(remove_subgraph=pb.GraphUpdateRequest.RemoveSubgraph()),
     "remove_subgraph.path: empty"),
    (pb.GraphUpdateRequest(remove_subgraph=pb.GraphUpdateRequest.RemoveSubgraph(path="ghost")),
     "no vertex named 'ghost'"),
])
def test_bad_graph_updates_are_invalid_argument(stub, change, needle: str) -> None:
    with pytest.raises(grpc.RpcError) as info:
        stub.UpdateGraph(change, timeout=5)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert needle in info.value.details()


def test_load_nodes_larger_than_grpcs_default_4_mib_is_accepted(client: FluxionClient) -> None:
    """Real Node objects are kilobytes each (image lists, managedFields): a few hundred used to
    exceed gRPC's default 4 MiB message limit, answered RESOURCE_EXHAUSTED (read as Busy)."""
    images = [{"names": [f"registry.example.org/img{j}@sha256:{j:064x}"], "sizeBytes": j}
              for j in range(60)]
    nodes = [{**n, "status": {**n["status"], "images": images}} for n in k8s_nodes(600)]
    assert len(json.dumps(nodes)) > 4 * 2**20
    client.load_nodes(nodes)
    assert client.dump()["stat"]["vertices"] > 600


def test_each_matcher_load_nodes_builds_goes_to_on_matcher_before_it_serves() -> None:
    """``serve(on_matcher=...)``: what ``fluxinfra service`` settles the collector with; the
    matcher it is handed is the one the next calls use."""
    built: list[Matcher] = []
    matcher = Matcher(graph_from_k8s(k8s_nodes(1), [], subtract_pods=False), policy="first")
    srv, port = serve(matcher, host="127.0.0.1", port=0, workers=2, on_matcher=built.append)
    try:
        with FluxionClient(f"127.0.0.1:{port}", timeout=10) as c:
            c.load_nodes(k8s_nodes(3, cpu="2"))
            assert len(built) == 1 and built[0] is not matcher
            assert sorted(n for n in built[0].graph.name if n.startswith("node")) == \
                ["node0", "node1", "node2"]
            assert c.dump()["stat"]["vertices"] == len(built[0].graph)
    finally:
        srv.stop(grace=None)


def test_grpc_limits_are_not_mistaken_for_busy(server: str) -> None:
    from fluxinfra.service.client import ServiceError

    tiny = grpc.insecure_channel(server, options=[("grpc.max_send_message_length", 1000)])
    with FluxionClient(server, timeout=5, channel=tiny) as c, \
            pytest.raises(ServiceError, match="RESOURCE_EXHAUSTED"):
        c.load_nodes(k8s_nodes(50))
