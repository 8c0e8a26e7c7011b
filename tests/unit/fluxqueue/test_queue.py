"""The queue hosted in the scheduler, against the API double and the Job controller's emulation."""

from __future__ import annotations

from fluxinfra.queue.api import ANNOT_ADMITTED_NODES, LABEL_FLUXJOB

from .harness import QueueHarness, check_books, check_empty, job, nodes
from .queue_double import QueueApiDouble


def test_job_is_admitted_whole_and_bound_to_the_nodes_fluxion_chose():
    api = QueueApiDouble()
    nodes(api, 2)
    h = QueueHarness(api).start()
    api.create_job(job("train", pods=4, cpu="2"))
    h.step()
    fj = h.fluxjob("job-train")
    assert fj["status"]["state"] == "Admitted", fj["status"]
    chosen = fj["status"]["nodes"]
    assert sorted(chosen) == ["n0", "n0", "n1", "n1"]
    stored = api.get("jobs", "team-a/train")
    assert stored["spec"]["suspend"] is False
    assert stored["metadata"]["annotations"][ANNOT_ADMITTED_NODES] == ",".join(chosen)
    template = stored["spec"]["template"]
    assert template["metadata"]["labels"][LABEL_FLUXJOB] == "job-train"
    terms = template["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms == [{"matchFields": [{"key": "metadata.name", "operator": "In",
                                       "values": ["n0", "n1"]}]}]
    pods = h.pods_of("train")
    assert sorted(p["spec"]["nodeName"] for p in pods) == sorted(chosen)
    check_books(h)
    h.run("train")
    h.step()
    assert h.state("job-train") == "Running"
    h.finish("train")
    h.step()
    assert h.state("job-train") == "Finished"
    check_empty(h)
