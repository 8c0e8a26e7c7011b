"""``fluxinfra queue`` / ``kubectl flux-queue``: the table people read."""

from __future__ import annotations

from fluxinfra.queue.cli import rows_of, table


def fluxjob(name: str, state: str, queued: str, priority: int = 0, **status):
    return {"metadata": {"name": name, "namespace": "ns"},
            "spec": {"queueName": "default", "podSets": [{"name": "main", "count": 2}],
                     "priority": priority, "queuedAt": queued},
            "status": {"state": state, **status}}


def test_waiting_work_first_in_serve_order_with_positions():
    items = [fluxjob("running", "Running", "2026-01-01T00:00:00Z", nodes=["n1", "n2"],
                     admittedAt="2026-01-01T00:00:30Z"),
             fluxjob("late", "Queued", "2026-01-01T00:00:05Z", reason="QuotaExceeded"),
             fluxjob("urgent", "Queued", "2026-01-01T00:00:09Z", priority=10),
             fluxjob("reserved", "Reserved", "2026-01-01T00:00:01Z",
                     estimatedStart="2026-01-01T01:00:00Z"),
             fluxjob("done", "Finished", "2025-12-31T00:00:00Z")]
    rows = rows_of(items, now=1767225660.0)  # 2026-01-01T00:01:00Z
    assert [r["name"] for r in rows] == ["urgent", "reserved", "late", "running", "done"]
    assert [r["position"] for r in rows] == [1, 2, 3, None, None]
    assert rows[3]["waited"] == 30.0  # queued to admitted, not to now
    text = table(items, now=1767225660.0)
    lines = text.splitlines()
    assert lines[0].split()[:5] == ["POS", "NAMESPACE", "NAME", "QUEUE", "STATE"]
    assert "in 59m0s" in lines[2] and "n1,n2" in lines[4]
    assert "QuotaExceeded" in lines[3]
