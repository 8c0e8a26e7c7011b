"""How the queue controller is put together: the binder given to the core when it is built
(and one controller per binder), the core held by name (no attribute forwarding), and each
piece a module of its own that says which Kueue piece it mirrors."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from fluxinfra.queue.binding import QueueBinder
from fluxinfra.queue.controller import QueueConfig, QueueCore
from fluxinfra.scheduler.binder import KubeBinder
from fluxinfra.scheduler.core import SchedulerConfig, SchedulerCore
from fluxinfra.scheduler.fluxion import FluxionAllocator
from fluxinfra.scheduler.pods import pod_info

from .harness import QueueHarness, gated_pod, job, nodes
from .queue_double import QueueApiDouble

QUEUE = Path(__file__).resolve().parents[3] / "fluxinfra" / "queue"
#: the controller's pieces (the webhook, API, CLI and policy are the queue's other parts)
PIECES = ("workload", "context", "jobs", "gated", "admission", "states", "status", "writes",
          "binding", "controller")


def _core(api: QueueApiDouble, binder: QueueBinder) -> SchedulerCore:
    return SchedulerCore(FluxionAllocator("first"), binder, SchedulerConfig(async_binds=False))


def test_the_core_is_built_with_the_queue_binder_and_the_controller_attaches_to_it():
    api = QueueApiDouble()
    nodes(api, 1)
    binder = QueueBinder(KubeBinder(api))
    core = _core(api, binder)
    queue = QueueCore(core, api, QueueConfig(workers=1), binder=binder)
    assert binder.routes is queue
    assert core.binder is binder  # the core's own, as it was given: nothing rewired
    with pytest.raises(ValueError, match="already serves a queue controller; give each "
                                         "SchedulerCore a QueueBinder of its own"):
        QueueCore(_core(api, binder), api, QueueConfig(workers=1), binder=binder)


def test_a_queue_binder_no_controller_attached_to_says_how_to_attach_one():
    api = QueueApiDouble()
    binder = QueueBinder(KubeBinder(api))
    pod = gated_pod("p")
    pod["metadata"]["uid"] = "uid-p"
    with pytest.raises(RuntimeError, match="build the QueueCore with binder=<this binder>"):
        binder.bind([(pod_info(pod), "n0")])


def test_a_slot_pod_is_placed_without_a_bind_and_a_plain_pod_goes_to_the_scheduler():
    """Through the queue's binder: a Job's slots are recorded (no API bind, the Job admitted
    whole), a pod nobody queued is bound by the scheduler's binder."""
    api = QueueApiDouble()
    nodes(api, 2)
    h = QueueHarness(api).start()
    api.create_job(job("whole", pods=2, cpu="2"))
    plain = gated_pod("plain")
    plain["spec"].pop("schedulingGates")
    plain["metadata"]["labels"] = {}
    api.create("pods", plain)
    h.step()
    assert h.state("job-whole") in ("Admitted", "Running")
    bound = {b["metadata"]["name"]: b["target"]["name"] for b in api.bindings}
    job_pods = {p["metadata"]["name"] for p in h.pods_of("whole")}
    assert len(job_pods) == 2
    assert set(bound) == job_pods | {"plain"}  # real pods only: no slot pod was bound
    assert api.get("pods", "team-a/plain")["spec"]["nodeName"] == bound["plain"]


def test_the_controller_holds_the_core_by_name():
    for path in QUEUE.glob("*.py"):
        tree = ast.parse(path.read_text())
        defined = {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}
        assert "__getattr__" not in defined, f"{path.name} forwards attributes"


@pytest.mark.parametrize("name", PIECES)
def test_each_piece_is_one_module_under_800_lines_naming_its_kueue_piece(name: str):
    path = QUEUE / f"{name}.py"
    text = path.read_text()
    assert len(text.splitlines()) <= 800, f"{path.name}: {len(text.splitlines())} lines"
    doc = ast.get_docstring(ast.parse(text)) or ""
    assert "Kueue" in doc, f"{path.name}: the docstring does not say which Kueue piece"
