"""The Flux side of the installer's ledger: run on the lead node with Flux's own Python
(``flux python ledger-feed.py``, as the instance owner), talking JSON lines with
``flux_ledger.py`` in the installer pod.

Out (stdout), one JSON object a line:

* ``{"down": {"<rank>": [core, ...]}}`` first: the cores Fluxion has marked down now
  (``sched-fluxion-resource.find status=down``), so a restarted ledger starts from what the
  instance holds, not from memory;
* ``{"id": <jobid>, "name": "<event>", "R": {...}|null}`` for every event of the job-manager's
  journal (``job-manager.events-journal``): first the history of every job the job-manager still
  knows, then live events; ``alloc`` carries the job's R;
* ``{"synced": true}`` once the history is through;
* ``{"error": "..."}`` when a command failed.

In (stdin), one JSON object a line: ``{"path": "/cluster0/fluxnode1/core1", "status":
"down"|"up"}``, done with ``sched-fluxion-resource.set_status`` (as ``flux ion-resource
set-status`` does). Flux's own Python and the standard library only.
"""

import json
import sys
import threading

import flux
from flux.job import JournalConsumer

_out = threading.Lock()


def emit(obj):
    with _out:
        sys.stdout.write(json.dumps(obj, separators=(",", ":")) + "\n")
        sys.stdout.flush()


def down_cores(handle):
    """Rank -> the cores Fluxion has marked down (RFC 20 R of ``find status=down``)."""
    try:
        resp = handle.rpc("sched-fluxion-resource.find", {"criteria": "status=down"}).get()
    except OSError as exc:
        emit({"error": f"find status=down: {exc}"})
        raise
    R = resp.get("R") if isinstance(resp, dict) else None
    out = {}
    if not R:
        return out
    for entry in (R.get("execution") or {}).get("R_lite", []):
        for rank in idset(entry["rank"]):
            out.setdefault(str(rank), []).extend(idset(entry["children"].get("core", "")))
    return out


def idset(text):
    ids = []
    for part in filter(None, str(text).split(",")):
        lo, _, hi = part.partition("-")
        ids.extend(range(int(lo), int(hi or lo) + 1))
    return ids


def commands():
    handle = flux.Flux()
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            cmd = json.loads(line)
            handle.rpc("sched-fluxion-resource.set_status",
                       {"resource_path": cmd["path"], "status": cmd["status"]}).get()
        except (OSError, ValueError, KeyError) as exc:
            emit({"error": f"set-status {line.strip()}: {exc}"})
    # stdin closed: the ledger is gone, and so is this helper
    emit({"bye": True})
    raise SystemExit(0)


def main():
    handle = flux.Flux()
    emit({"down": down_cores(handle)})
    threading.Thread(target=commands, daemon=True).start()
    journal = JournalConsumer(handle, full=True, include_sentinel=True).start()
    while True:
        event = journal.poll()
        if event is None:
            emit({"error": "the job-manager ended the journal"})
            raise SystemExit(1)
        if event.is_empty():
            emit({"synced": True})
            continue
        emit({"id": int(event.jobid), "name": event.name, "R": event.R})


if __name__ == "__main__":
    main()
