"""The admission webhook: ``admission.k8s.io/v1`` AdmissionReview in, JSONPatch out, over HTTPS.

:func:`review` is a pure function of one AdmissionReview (no API calls, no side effects, so
``sideEffects: None`` is true and dry runs are safe); :func:`serve` runs it behind TLS.

What it does to objects that opted in (:mod:`fluxinfra.queue.api`):

- **batch Job, CREATE**: ``spec.suspend: true``, the pod template's ``schedulerName`` set to the
  scheduler's, the Job labelled with its queue. A Job owned by another controller (JobSet,
  MPIJob, ...; a CronJob's Jobs are ours) is left alone: its pods are gated instead.
- **Pod, CREATE**: the scheduling gate ``fluxinfra.io/queue`` appended, ``schedulerName`` set,
  the pod labelled with its queue. Not gated: pods of a Job the queue admitted (they carry
  ``fluxinfra.io/fluxjob``), DaemonSet and mirror pods, pods that name a node.
- **Refused**, with a message naming the field, the value and the fix: requests the scheduler
  cannot read (an unparsable quantity, a bad ``fluxinfra.io/duration`` or group size), another
  scheduler's name, and (UPDATE) starting a queued Job or removing the gate from a queued pod
  by anyone but the queue's own controller (``admitters``): queued work starts only when the
  queue admits it.

>>> rv = review({"request": {"uid": "1", "kind": {"group": "batch", "kind": "Job"},
...     "operation": "CREATE", "namespace": "ns", "object": {"metadata": {"name": "j"},
...     "spec": {"template": {"spec": {"containers": [{"name": "c", "image": "busybox"}]}}}}}},
...     WebhookConfig())
>>> rv["response"]["allowed"], rv["response"]["patchType"]
(True, 'JSONPatch')
"""

from __future__ import annotations

import base64
import json
import logging
import os
import ssl
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from fluxinfra.k8s.config import dns1123_label
from fluxinfra.queue.api import (
    DEFAULT_QUEUE,
    GATE,
    LABEL_FLUXJOB,
    LABEL_QUEUE_NAME,
    OPT_OUT_VALUE,
)
from fluxinfra.scheduler.pods import PodSpecError, pod_info

__all__ = ["WebhookConfig", "WebhookMetrics", "review", "serve", "tls_context"]

log = logging.getLogger(__name__)

#: Owners whose Jobs the queue suspends (its own unit); any other controller owner manages its
#: Jobs itself (JobSet suspends and resumes its children), so their pods are gated instead.
OUR_JOB_OWNERS = frozenset({"CronJob"})
_DEFAULT_SCHEDULER = "default-scheduler"


@dataclass
class WebhookConfig:
    scheduler_name: str = "fluxion"
    #: usernames allowed to start queued work (the controller's ServiceAccount); empty = anyone
    admitters: frozenset[str] = field(default_factory=frozenset)


def _escape(key: str) -> str:
    """A JSON Pointer token (RFC 6901)."""
    return key.replace("~", "~0").replace("/", "~1")


class Refused(Exception):
    """The object is refused; the message names the field, the value and the fix."""


def _queue_name(meta: dict[str, Any], where: str) -> str:
    value = (meta.get("labels") or {}).get(LABEL_QUEUE_NAME) or DEFAULT_QUEUE
    if dns1123_label()(value) is not None:
        raise Refused(f"{where}.labels[{LABEL_QUEUE_NAME}]: {value!r} is not a queue name; use "
                      "a DNS-1123 label (lower-case letters, digits, '-'), e.g. 'default'")
    return value


def _check_scheduler(spec: dict[str, Any], where: str, ours: str) -> list[dict[str, Any]]:
    name = spec.get("schedulerName") or ""
    if name == ours:
        return []
    if name not in ("", _DEFAULT_SCHEDULER):
        raise Refused(f"{where}.schedulerName: {name!r}: queued work is placed by the "
                      f"{ours!r} scheduler; remove the field or set it to {ours!r}")
    op = "replace" if "schedulerName" in spec else "add"
    return [{"op": op, "path": f"/{where.replace('.', '/')}/schedulerName", "value": ours}]


def _check_pod(pod: dict[str, Any], where: str) -> None:
    """Read the pod the way the scheduler will; refuse what it cannot read."""
    try:
        pod_info(pod)
    except PodSpecError as exc:
        raise Refused(f"{where}: {exc}") from None


def _label_ops(meta: dict[str, Any], path: str, labels: dict[str, str]) -> list[dict[str, Any]]:
    current = meta.get("labels")
    todo = {k: v for k, v in labels.items() if (current or {}).get(k) != v}
    if not todo:
        return []
    if current is None:
        return [{"op": "add", "path": f"{path}/labels", "value": todo}]
    return [{"op": "add", "path": f"{path}/labels/{_escape(k)}", "value": v}
            for k, v in todo.items()]


def _controller_owner(meta: dict[str, Any]) -> dict[str, Any] | None:
    return next((o for o in meta.get("ownerReferences") or [] if o.get("controller")), None)


def _opted_out(meta: dict[str, Any]) -> bool:
    return (meta.get("labels") or {}).get(LABEL_QUEUE_NAME) == OPT_OUT_VALUE


def _job_create(job: dict[str, Any], config: WebhookConfig) -> list[dict[str, Any]]:
    meta = job.get("metadata") or {}
    owner = _controller_owner(meta)
    if _opted_out(meta):
        return []
    if owner is not None and owner.get("kind") not in OUR_JOB_OWNERS:
        return []  # JobSet & co. run their Jobs; the pods are gated one by one instead
    spec = job.get("spec") or {}
    template = spec.get("template") or {}
    if not isinstance(template.get("spec"), dict):
        raise Refused("spec.template.spec: missing; a Job needs a pod template")
    tmeta = template.get("metadata") or {}
    pod = {"metadata": {"name": meta.get("name") or meta.get("generateName") or "job",
                        "namespace": meta.get("namespace", ""),
                        "labels": tmeta.get("labels") or {},
                        "annotations": tmeta.get("annotations") or {}},
           "spec": template.get("spec") or {}}
    _check_pod(pod, "spec.template")
    queue = _queue_name(meta, "metadata")
    ops: list[dict[str, Any]] = [{"op": "add", "path": "/spec/suspend", "value": True}]
    ops += _check_scheduler(template["spec"], "spec.template.spec", config.scheduler_name)
    ops += _label_ops(meta, "/metadata", {LABEL_QUEUE_NAME: queue})
    return ops


def _skip_pod(pod: dict[str, Any]) -> bool:
    meta = pod.get("metadata") or {}
    owner = _controller_owner(meta) or {}
    return bool((pod.get("spec") or {}).get("nodeName") or _opted_out(meta)
                or owner.get("kind") == "DaemonSet"
                or "kubernetes.io/config.mirror" in (meta.get("annotations") or {})
                or (meta.get("labels") or {}).get(LABEL_FLUXJOB))


def _pod_create(pod: dict[str, Any], config: WebhookConfig) -> list[dict[str, Any]]:
    if _skip_pod(pod):
        return []
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    _check_pod(pod, "pod")
    queue = _queue_name(meta, "metadata")
    gates = spec.get("schedulingGates")
    ops: list[dict[str, Any]] = []
    if gates is None:
        ops.append({"op": "add", "path": "/spec/schedulingGates", "value": [{"name": GATE}]})
    elif not any(g.get("name") == GATE for g in gates):
        ops.append({"op": "add", "path": "/spec/schedulingGates/-", "value": {"name": GATE}})
    ops += _check_scheduler(spec, "spec", config.scheduler_name)
    ops += _label_ops(meta, "/metadata", {LABEL_QUEUE_NAME: queue})
    return ops


def _starting(kind: str, old: dict[str, Any], new: dict[str, Any]) -> str:
    """What an UPDATE does to start queued work ("" when nothing)."""
    if kind == "Job":
        owner = _controller_owner(old.get("metadata") or {})
        if owner is not None and owner.get("kind") not in OUR_JOB_OWNERS:
            return ""
        if (old.get("spec") or {}).get("suspend") and not (new.get("spec") or {}).get("suspend"):
            return "spec.suspend: true -> false"
        return ""
    had = any(g.get("name") == GATE for g in (old.get("spec") or {}).get("schedulingGates") or [])
    has = any(g.get("name") == GATE for g in (new.get("spec") or {}).get("schedulingGates") or [])
    return f"spec.schedulingGates: removing {GATE!r}" if had and not has else ""


def _allowed(uid: str, patch: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    response: dict[str, Any] = {"uid": uid, "allowed": True}
    if patch:
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(json.dumps(patch).encode()).decode()
    return response


def _refused(uid: str, message: str, code: int = 422) -> dict[str, Any]:
    return {"uid": uid, "allowed": False,
            "status": {"code": code, "message": message,
                       "reason": "Invalid" if code == 422 else "Forbidden"}}


def review(body: dict[str, Any], config: WebhookConfig) -> dict[str, Any]:
    """Answer one AdmissionReview (the request as JSON) with an AdmissionReview."""
    request = body.get("request") or {}
    uid = str(request.get("uid", ""))
    kind = (request.get("kind") or {}).get("kind", "")
    operation = request.get("operation", "")
    obj = request.get("object") or {}
    try:
        if operation == "CREATE" and kind == "Job":
            response = _allowed(uid, _job_create(obj, config))
        elif operation == "CREATE" and kind == "Pod":
            response = _allowed(uid, _pod_create(obj, config))
        elif operation == "UPDATE" and kind in ("Job", "Pod"):
            change = _starting(kind, request.get("oldObject") or {}, obj)
            user = (request.get("userInfo") or {}).get("username", "")
            if change and config.admitters and user not in config.admitters:
                name = (obj.get("metadata") or {}).get("name", "")
                response = _refused(uid, (
                    f"{change}: {kind.lower()} {request.get('namespace', '')}/{name} is queued; "
                    f"it starts when the fluxion queue admits it (kubectl get fluxjobs); "
                    f"{user or 'this user'} may not start it"), code=403)
            else:
                response = _allowed(uid)
        else:
            response = _allowed(uid)
    except Refused as exc:
        response = _refused(uid, str(exc))
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}


# -- the HTTPS server ----------------------------------------------------------------------------

class WebhookMetrics:
    """Requests by verdict and their handling time (Prometheus text, no dependencies)."""

    def __init__(self) -> None:
        from fluxinfra.scheduler.metrics import Counter, Histogram

        p = "fluxinfra_queue_webhook_"
        self.requests = Counter(p + "requests_total", "AdmissionReviews answered, by kind, "
                                "operation and verdict.")
        self.latency = Histogram(p + "duration_seconds", "Time to read, answer and write one "
                                 "AdmissionReview.", buckets=(0.0001, 0.00025, 0.0005, 0.001,
                                                              0.0025, 0.005, 0.01, 0.025, 0.1))

    def render(self) -> str:
        return "\n".join(self.requests.render() + self.latency.render()) + "\n"


def tls_context(cert_file: str, key_file: str) -> ssl.SSLContext:
    """A server context (TLS 1.2+) holding the webhook's certificate and key."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(cert_file, key_file)
    return context


def _handler(config: WebhookConfig, metrics: WebhookMetrics) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive: the API server reuses its connections
        # Headers and body go out as separate writes; with Nagle's algorithm on, the second
        # waits for the client's delayed ACK (~40 ms on Linux): off, as every server does.
        disable_nagle_algorithm = True

        def do_POST(self) -> None:  # noqa: N802 - http.server's naming
            t0 = time.perf_counter()
            if not self.path.startswith("/mutate"):
                self._reply(404, b"not found\n", "text/plain")
                return
            try:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length))
            except (ValueError, OSError) as exc:
                self._reply(400, f"not an AdmissionReview: {exc}\n".encode(), "text/plain")
                return
            answer = review(body, config)
            data = json.dumps(answer, separators=(",", ":")).encode()
            self._reply(200, data, "application/json")
            request = body.get("request") or {}
            metrics.requests.inc(kind=(request.get("kind") or {}).get("kind", ""),
                                 operation=request.get("operation", ""),
                                 allowed=str(answer["response"]["allowed"]).lower())
            metrics.latency.observe(time.perf_counter() - t0)

        def do_GET(self) -> None:  # noqa: N802
            if self.path.startswith("/metrics"):
                self._reply(200, metrics.render().encode(), "text/plain; version=0.0.4")
            elif self.path.startswith(("/healthz", "/readyz", "/livez")):
                self._reply(200, b"ok\n", "text/plain")
            else:
                self._reply(404, b"not found\n", "text/plain")

        def _reply(self, code: int, body: bytes, ctype: str) -> None:
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002
            pass

    return Handler


def serve(config: WebhookConfig, cert_file: str, key_file: str, host: str = "0.0.0.0",
          port: int = 9443, metrics: WebhookMetrics | None = None,
          reload_seconds: float = 60.0) -> ThreadingHTTPServer:
    """Serve ``/mutate`` (and ``/healthz``, ``/metrics``) over TLS in daemon threads.

    The certificate is read again when its file changes (a rotated Secret reaches a mounted
    volume within a minute), so new connections get the new certificate without a restart.
    """
    metrics = metrics or WebhookMetrics()
    context = tls_context(cert_file, key_file)
    server = ThreadingHTTPServer((host, port), _handler(config, metrics))
    server.daemon_threads = True
    server.socket = context.wrap_socket(server.socket, server_side=True)
    server.metrics = metrics  # type: ignore[attr-defined]
    threading.Thread(target=server.serve_forever, name="webhook", daemon=True).start()
    _watch_certificate(context, cert_file, key_file, reload_seconds, server)
    return server


def _watch_certificate(context: ssl.SSLContext, cert_file: str, key_file: str,
                       every: float, server: ThreadingHTTPServer) -> None:
    def stamp() -> tuple[float, float]:
        return (os.stat(cert_file).st_mtime, os.stat(key_file).st_mtime)

    seen = stamp()

    def loop(sleep: Callable[[float], Any] = time.sleep) -> None:
        nonlocal seen
        while getattr(server, "socket", None) is not None and server.socket.fileno() >= 0:
            sleep(every)
            try:
                now = stamp()
                if now != seen:
                    context.load_cert_chain(cert_file, key_file)
                    seen = now
                    log.info("webhook certificate reloaded from %s", cert_file)
            except (OSError, ssl.SSLError) as exc:
                log.warning("reloading the webhook certificate failed: %s", exc)

    threading.Thread(target=loop, name="webhook-cert", daemon=True).start()
