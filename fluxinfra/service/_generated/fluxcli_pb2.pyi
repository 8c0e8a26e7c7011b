from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class PodSpec(_message.Message):
    __slots__ = ("id", "container", "cpu", "memory", "gpu", "storage", "labels")
    ID_FIELD_NUMBER: _ClassVar[int]
    CONTAINER_FIELD_NUMBER: _ClassVar[int]
    CPU_FIELD_NUMBER: _ClassVar[int]
    MEMORY_FIELD_NUMBER: _ClassVar[int]
    GPU_FIELD_NUMBER: _ClassVar[int]
    STORAGE_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    id: str
    container: str
    cpu: int
    memory: int
    gpu: int
    storage: int
    labels: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, id: _Optional[str] = ..., container: _Optional[str] = ..., cpu: _Optional[int] = ..., memory: _Optional[int] = ..., gpu: _Optional[int] = ..., storage: _Optional[int] = ..., labels: _Optional[_Iterable[str]] = ...) -> None: ...

class MatchRequest(_message.Message):
    __slots__ = ("ps", "request", "count", "reservation", "jobid", "jobspec", "duration", "now")
    PS_FIELD_NUMBER: _ClassVar[int]
    REQUEST_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    RESERVATION_FIELD_NUMBER: _ClassVar[int]
    JOBID_FIELD_NUMBER: _ClassVar[int]
    JOBSPEC_FIELD_NUMBER: _ClassVar[int]
    DURATION_FIELD_NUMBER: _ClassVar[int]
    NOW_FIELD_NUMBER: _ClassVar[int]
    ps: PodSpec
    request: str
    count: int
    reservation: bool
    jobid: int
    jobspec: str
    duration: int
    now: int
    def __init__(self, ps: _Optional[_Union[PodSpec, _Mapping]] = ..., request: _Optional[str] = ..., count: _Optional[int] = ..., reservation: _Optional[bool] = ..., jobid: _Optional[int] = ..., jobspec: _Optional[str] = ..., duration: _Optional[int] = ..., now: _Optional[int] = ...) -> None: ...

class NodeAlloc(_message.Message):
    __slots__ = ("nodeID", "tasks")
    NODEID_FIELD_NUMBER: _ClassVar[int]
    TASKS_FIELD_NUMBER: _ClassVar[int]
    nodeID: str
    tasks: int
    def __init__(self, nodeID: _Optional[str] = ..., tasks: _Optional[int] = ...) -> None: ...

class MatchResponse(_message.Message):
    __slots__ = ("podID", "nodelist", "jobID", "reserved", "at", "status", "overhead", "R", "duration")
    PODID_FIELD_NUMBER: _ClassVar[int]
    NODELIST_FIELD_NUMBER: _ClassVar[int]
    JOBID_FIELD_NUMBER: _ClassVar[int]
    RESERVED_FIELD_NUMBER: _ClassVar[int]
    AT_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    OVERHEAD_FIELD_NUMBER: _ClassVar[int]
    R_FIELD_NUMBER: _ClassVar[int]
    DURATION_FIELD_NUMBER: _ClassVar[int]
    podID: str
    nodelist: _containers.RepeatedCompositeFieldContainer[NodeAlloc]
    jobID: int
    reserved: bool
    at: int
    status: str
    overhead: float
    R: str
    duration: int
    def __init__(self, podID: _Optional[str] = ..., nodelist: _Optional[_Iterable[_Union[NodeAlloc, _Mapping]]] = ..., jobID: _Optional[int] = ..., reserved: _Optional[bool] = ..., at: _Optional[int] = ..., status: _Optional[str] = ..., overhead: _Optional[float] = ..., R: _Optional[str] = ..., duration: _Optional[int] = ...) -> None: ...

class CancelRequest(_message.Message):
    __slots__ = ("jobID",)
    JOBID_FIELD_NUMBER: _ClassVar[int]
    jobID: int
    def __init__(self, jobID: _Optional[int] = ...) -> None: ...

class CancelResponse(_message.Message):
    __slots__ = ("jobID", "error")
    JOBID_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    jobID: int
    error: int
    def __init__(self, jobID: _Optional[int] = ..., error: _Optional[int] = ...) -> None: ...

class PartialCancelRequest(_message.Message):
    __slots__ = ("jobID", "nodes", "R", "slots")
    JOBID_FIELD_NUMBER: _ClassVar[int]
    NODES_FIELD_NUMBER: _ClassVar[int]
    R_FIELD_NUMBER: _ClassVar[int]
    SLOTS_FIELD_NUMBER: _ClassVar[int]
    jobID: int
    nodes: _containers.RepeatedScalarFieldContainer[str]
    R: str
    slots: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, jobID: _Optional[int] = ..., nodes: _Optional[_Iterable[str]] = ..., R: _Optional[str] = ..., slots: _Optional[_Iterable[int]] = ...) -> None: ...

class PartialCancelResponse(_message.Message):
    __slots__ = ("jobID", "fully_released")
    JOBID_FIELD_NUMBER: _ClassVar[int]
    FULLY_RELEASED_FIELD_NUMBER: _ClassVar[int]
    jobID: int
    fully_released: bool
    def __init__(self, jobID: _Optional[int] = ..., fully_released: _Optional[bool] = ...) -> None: ...

class InfoRequest(_message.Message):
    __slots__ = ("jobID",)
    JOBID_FIELD_NUMBER: _ClassVar[int]
    jobID: int
    def __init__(self, jobID: _Optional[int] = ...) -> None: ...

class UpdateAllocateRequest(_message.Message):
    __slots__ = ("jobID", "R", "at", "duration")
    JOBID_FIELD_NUMBER: _ClassVar[int]
    R_FIELD_NUMBER: _ClassVar[int]
    AT_FIELD_NUMBER: _ClassVar[int]
    DURATION_FIELD_NUMBER: _ClassVar[int]
    jobID: int
    R: str
    at: int
    duration: int
    def __init__(self, jobID: _Optional[int] = ..., R: _Optional[str] = ..., at: _Optional[int] = ..., duration: _Optional[int] = ...) -> None: ...

class RegisterRequest(_message.Message):
    __slots__ = ("jobID", "node", "cores", "memory_mib", "gpus", "at", "duration")
    JOBID_FIELD_NUMBER: _ClassVar[int]
    NODE_FIELD_NUMBER: _ClassVar[int]
    CORES_FIELD_NUMBER: _ClassVar[int]
    MEMORY_MIB_FIELD_NUMBER: _ClassVar[int]
    GPUS_FIELD_NUMBER: _ClassVar[int]
    AT_FIELD_NUMBER: _ClassVar[int]
    DURATION_FIELD_NUMBER: _ClassVar[int]
    jobID: int
    node: str
    cores: int
    memory_mib: int
    gpus: int
    at: int
    duration: int
    def __init__(self, jobID: _Optional[int] = ..., node: _Optional[str] = ..., cores: _Optional[int] = ..., memory_mib: _Optional[int] = ..., gpus: _Optional[int] = ..., at: _Optional[int] = ..., duration: _Optional[int] = ...) -> None: ...

class GraphUpdateRequest(_message.Message):
    __slots__ = ("set_status", "add_subgraph", "remove_subgraph", "load_nodes")
    class SetStatus(_message.Message):
        __slots__ = ("target", "status")
        TARGET_FIELD_NUMBER: _ClassVar[int]
        STATUS_FIELD_NUMBER: _ClassVar[int]
        target: str
        status: str
        def __init__(self, target: _Optional[str] = ..., status: _Optional[str] = ...) -> None: ...
    class AddSubgraph(_message.Message):
        __slots__ = ("jgf", "parent")
        JGF_FIELD_NUMBER: _ClassVar[int]
        PARENT_FIELD_NUMBER: _ClassVar[int]
        jgf: str
        parent: str
        def __init__(self, jgf: _Optional[str] = ..., parent: _Optional[str] = ...) -> None: ...
    class RemoveSubgraph(_message.Message):
        __slots__ = ("path",)
        PATH_FIELD_NUMBER: _ClassVar[int]
        path: str
        def __init__(self, path: _Optional[str] = ...) -> None: ...
    class LoadNodes(_message.Message):
        __slots__ = ("nodes_json",)
        NODES_JSON_FIELD_NUMBER: _ClassVar[int]
        nodes_json: str
        def __init__(self, nodes_json: _Optional[str] = ...) -> None: ...
    SET_STATUS_FIELD_NUMBER: _ClassVar[int]
    ADD_SUBGRAPH_FIELD_NUMBER: _ClassVar[int]
    REMOVE_SUBGRAPH_FIELD_NUMBER: _ClassVar[int]
    LOAD_NODES_FIELD_NUMBER: _ClassVar[int]
    set_status: GraphUpdateRequest.SetStatus
    add_subgraph: GraphUpdateRequest.AddSubgraph
    remove_subgraph: GraphUpdateRequest.RemoveSubgraph
    load_nodes: GraphUpdateRequest.LoadNodes
    def __init__(self, set_status: _Optional[_Union[GraphUpdateRequest.SetStatus, _Mapping]] = ..., add_subgraph: _Optional[_Union[GraphUpdateRequest.AddSubgraph, _Mapping]] = ..., remove_subgraph: _Optional[_Union[GraphUpdateRequest.RemoveSubgraph, _Mapping]] = ..., load_nodes: _Optional[_Union[GraphUpdateRequest.LoadNodes, _Mapping]] = ...) -> None: ...

class GraphUpdateResponse(_message.Message):
    __slots__ = ("stat",)
    STAT_FIELD_NUMBER: _ClassVar[int]
    stat: str
    def __init__(self, stat: _Optional[str] = ...) -> None: ...

class DumpRequest(_message.Message):
    __slots__ = ("include_graph",)
    INCLUDE_GRAPH_FIELD_NUMBER: _ClassVar[int]
    include_graph: bool
    def __init__(self, include_graph: _Optional[bool] = ...) -> None: ...

class JobState(_message.Message):
    __slots__ = ("jobID", "status", "at", "duration", "nodes")
    JOBID_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    AT_FIELD_NUMBER: _ClassVar[int]
    DURATION_FIELD_NUMBER: _ClassVar[int]
    NODES_FIELD_NUMBER: _ClassVar[int]
    jobID: int
    status: str
    at: int
    duration: int
    nodes: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, jobID: _Optional[int] = ..., status: _Optional[str] = ..., at: _Optional[int] = ..., duration: _Optional[int] = ..., nodes: _Optional[_Iterable[str]] = ...) -> None: ...

class DumpResponse(_message.Message):
    __slots__ = ("stat", "jobs", "jgf", "now")
    STAT_FIELD_NUMBER: _ClassVar[int]
    JOBS_FIELD_NUMBER: _ClassVar[int]
    JGF_FIELD_NUMBER: _ClassVar[int]
    NOW_FIELD_NUMBER: _ClassVar[int]
    stat: str
    jobs: _containers.RepeatedCompositeFieldContainer[JobState]
    jgf: str
    now: int
    def __init__(self, stat: _Optional[str] = ..., jobs: _Optional[_Iterable[_Union[JobState, _Mapping]]] = ..., jgf: _Optional[str] = ..., now: _Optional[int] = ...) -> None: ...

class EpochRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class EpochResponse(_message.Message):
    __slots__ = ("epoch", "started", "jobs")
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    STARTED_FIELD_NUMBER: _ClassVar[int]
    JOBS_FIELD_NUMBER: _ClassVar[int]
    epoch: str
    started: int
    jobs: int
    def __init__(self, epoch: _Optional[str] = ..., started: _Optional[int] = ..., jobs: _Optional[int] = ...) -> None: ...
