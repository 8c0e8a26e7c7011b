"""The stack's configured FluxJobQueues, kept by the queue controller (no CRD race at deploy).

A stack names its queues (``fluxinfra:queue.queues``: namespace, name, limits). Rendered as
FluxJobQueue objects beside their CRD, one ``kubectl apply -k`` on an empty cluster refused them
("ensure CRDs are installed first": the CRD was not yet served when kubectl mapped the kind).
So the stack hands them to the controller instead (``fluxinfra scheduler --queue
--queue-config JSON``) and the controller makes them: for each, read it; absent -> create it;
present with other limits -> merge-patch the limits the stack sets (the stack owns those; other
fields, labels and status are left alone). Namespace admins still create further queues
themselves (the aggregated edit role).

Runs once at start and again on failure (the API server may still be coming up, the CRD not yet
established), with backoff, in a daemon thread: the scheduler does not wait for it.
"""

from __future__ import annotations

import json
import logging
import threading
from typing import Any

from fluxinfra.errors import ConfigError
from fluxinfra.kube.fluxjob import API_VERSION, GROUP, QUEUE_KIND, QUEUE_PLURAL, VERSION

__all__ = ["LIMITS", "ensure_queues", "parse_queue_config", "start_keeping"]

log = logging.getLogger(__name__)

#: the spec fields a stack sets on a queue
LIMITS = ("maxRunning", "maxCores", "maxMemory", "maxGPUs")
#: what marks a queue the stack made (a label; the controller never deletes queues)
MANAGED_LABEL = "fluxinfra.io/configured-by"


def parse_queue_config(text: str, flag: str = "--queue-config") -> list[dict[str, Any]]:
    """The queues of ``--queue-config`` (a JSON list of {namespace, name, limits...})."""
    try:
        items = json.loads(text)
    except ValueError as exc:
        raise ConfigError(f"{flag} {text[:80]!r}: not JSON ({exc}); pass a JSON list of "
                          "{\"namespace\": ..., \"name\": ..., \"maxRunning\": ...}") from None
    if not isinstance(items, list):
        raise ConfigError(f"{flag}: {type(items).__name__}, not a list; pass a JSON list of "
                          "queues")
    for i, item in enumerate(items):
        if not isinstance(item, dict) or not item.get("namespace") or not item.get("name"):
            raise ConfigError(f"{flag}[{i}]: {item!r} lacks namespace and name; each queue is "
                              "{\"namespace\": NS, \"name\": NAME, ...limits}")
        unknown = set(item) - {"namespace", "name", *LIMITS}
        if unknown:
            raise ConfigError(f"{flag}[{i}]: unknown keys {sorted(unknown)}; accepted: "
                              f"namespace, name, {', '.join(LIMITS)}")
    return items


def queue_object(item: dict[str, Any], manager: str) -> dict[str, Any]:
    return {"apiVersion": API_VERSION, "kind": QUEUE_KIND,
            "metadata": {"name": item["name"], "namespace": item["namespace"],
                         "labels": {MANAGED_LABEL: manager}},
            "spec": {k: item[k] for k in LIMITS if k in item}}


def ensure_queues(custom: Any, queues: list[dict[str, Any]], manager: str) -> list[str]:
    """Make every configured queue exist with the stack's limits, through ``custom`` (a
    ``kubernetes.client.CustomObjectsApi``). Returns what it did, one line per queue; raises
    the first API failure (the caller retries)."""
    from kubernetes.client.exceptions import ApiException

    done = []
    for item in queues:
        ns, name = item["namespace"], item["name"]
        want = {k: item[k] for k in LIMITS if k in item}
        try:
            have = custom.get_namespaced_custom_object(GROUP, VERSION, ns, QUEUE_PLURAL, name)
        except ApiException as exc:
            if exc.status != 404:
                raise
            try:
                custom.create_namespaced_custom_object(GROUP, VERSION, ns, QUEUE_PLURAL,
                                                       queue_object(item, manager))
                done.append(f"{ns}/{name}: created")
            except ApiException as race:
                if race.status != 409:  # another replica made it first: fine
                    raise
                done.append(f"{ns}/{name}: made by another replica")
            continue
        spec = have.get("spec") or {}
        changed = {k: v for k, v in want.items() if spec.get(k) != v}
        if changed:
            custom.patch_namespaced_custom_object(GROUP, VERSION, ns, QUEUE_PLURAL, name,
                                                  {"spec": changed})
            done.append(f"{ns}/{name}: limits set to the stack's {changed}")
        else:
            done.append(f"{ns}/{name}: as configured")
    return done


def start_keeping(custom: Any, queues: list[dict[str, Any]], manager: str,
                  stop: threading.Event | None = None, first_wait: float = 1.0,
                  max_wait: float = 60.0) -> threading.Thread:
    """:func:`ensure_queues` in a daemon thread, retried with backoff until it succeeds."""
    stop = stop or threading.Event()

    def keep() -> None:
        wait = first_wait
        while not stop.is_set():
            try:
                for line in ensure_queues(custom, queues, manager):
                    log.info("configured queue %s", line)
                return
            except Exception as exc:  # noqa: BLE001 - logged and retried: the API may be coming up
                log.warning("configured queues not made yet (%s); again in %.0fs", exc, wait)
            stop.wait(wait)
            wait = min(max_wait, wait * 2)

    thread = threading.Thread(target=keep, name="configured-queues", daemon=True)
    thread.start()
    return thread
