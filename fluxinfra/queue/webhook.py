"""The admission webhook: ``admission.k8s.io/v1`` AdmissionReview in, JSONPatch out, over HTTPS.

:func:`review` is a pure function of one AdmissionReview (no API calls, no side effects, so
``sideEffects: None`` is true and dry runs are safe); :func:`serve` runs it behind TLS.

What it does to objects that opted in (:mod:`fluxinfra.kube.fluxjob`):

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
- **Bad input** never raises out of :func:`review`: a field of the wrong type (a label that is
  a number, a quantity past Python's integer-digit limit, an ownerReference that is not an
  object) is refused (422) naming it; a body that is not an AdmissionReview is refused with
  code 400 (the HTTP handler answers it ``400 Bad Request``, as it does a body it cannot read:
  bad JSON, a bad or missing Content-Length, more than 8 MiB); kinds and operations the webhook
  does not act on, and the admitters' own updates, are allowed without being read.

>>> rv = review({"request": {"uid": "1", "kind": {"group": "batch", "kind": "Job"},
...     "operation": "CREATE", "namespace": "ns", "object": {"metadata": {"name": "j"},
...     "spec": {"template": {"spec": {"containers": [{"name": "c", "image": "busybox"}]}}}}}},
...     WebhookConfig())
>>> rv["response"]["allowed"], rv["response"]["patchType"]
(True, 'JSONPatch')
"""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import os
import socket
import ssl
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest

from fluxinfra.kube import shapes
from fluxinfra.kube.fluxjob import (
    DEFAULT_QUEUE,
    GATE,
    LABEL_FLUXJOB,
    LABEL_QUEUE_NAME,
    OPT_OUT_VALUE,
)
from fluxinfra.kube.names import is_dns1123_label
from fluxinfra.scheduler.metrics import CONTENT_TYPE, Counter, Histogram
from fluxinfra.scheduler.pods import PodSpecError, check_pod, pod_info

__all__ = ["NotAdmissionReview", "WebhookConfig", "WebhookMetrics", "read_request", "review",
           "serve", "tls_context"]

log = logging.getLogger(__name__)

#: Owners whose Jobs the queue suspends (its own unit); any other controller owner manages its
#: Jobs itself (JobSet suspends and resumes its children), so their pods are gated instead.
OUR_JOB_OWNERS = frozenset({"CronJob"})
_DEFAULT_SCHEDULER = "default-scheduler"
#: the largest request body read: an AdmissionReview holds the object and the old object, each
#: at most the API server's 3 MiB request limit, plus the envelope
MAX_BODY = 8 * 2**20
#: seconds a connection may stay silent (mid-request or idle between requests)
IDLE_SECONDS = 60.0


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
    if not is_dns1123_label(value):
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


def _checked(read: Callable[[], Any]) -> Any:
    """``read()``, a field of the wrong type refused with its name."""
    try:
        return read()
    except (shapes.ShapeError, PodSpecError) as exc:
        raise Refused(str(exc)) from None


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


def _job_metadata(meta: Any, where: str) -> dict[str, Any]:
    """A Job's metadata with the types of every field the webhook reads checked."""
    meta = shapes.mapping(meta, where)
    for key in ("name", "generateName", "namespace"):
        shapes.string(meta.get(key), f"{where}.{key}")
    shapes.string_map(meta.get("labels"), f"{where}.labels")
    shapes.string_map(meta.get("annotations"), f"{where}.annotations")
    for i, owner in enumerate(shapes.mappings(meta.get("ownerReferences"),
                                              f"{where}.ownerReferences")):
        shapes.string(owner.get("kind"), f"{where}.ownerReferences[{i}].kind")
        shapes.boolean(owner.get("controller"), f"{where}.ownerReferences[{i}].controller")
    return dict(meta)


def _job_create(job: dict[str, Any], config: WebhookConfig) -> list[dict[str, Any]]:
    meta = _checked(lambda: _job_metadata(job.get("metadata"), "metadata"))
    owner = _controller_owner(meta)
    if _opted_out(meta):
        return []
    if owner is not None and owner.get("kind") not in OUR_JOB_OWNERS:
        return []  # JobSet & co. run their Jobs; the pods are gated one by one instead
    spec = _checked(lambda: shapes.mapping(job.get("spec"), "spec"))
    template = _checked(lambda: shapes.mapping(spec.get("template"), "spec.template"))
    if not isinstance(template.get("spec"), dict):
        raise Refused("spec.template.spec: missing; a Job needs a pod template")
    tmeta = _checked(lambda: _job_metadata(template.get("metadata"),
                                           "spec.template.metadata"))
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
    _check_pod_shape(pod, "pod")  # every field's type, before anything is read
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


def _check_pod_shape(pod: Any, where: str) -> None:
    try:
        check_pod(pod)
    except PodSpecError as exc:
        raise Refused(f"{where}: {exc}") from None


def _starting(kind: str, old: Any, new: Any) -> str:
    """What an UPDATE does to start queued work ("" when nothing)."""
    old = _checked(lambda: shapes.mapping(old, "oldObject"))
    new = _checked(lambda: shapes.mapping(new, "object"))
    if kind == "Job":
        old_meta = _checked(lambda: _job_metadata(old.get("metadata"), "oldObject.metadata"))
        owner = _controller_owner(old_meta)
        if owner is not None and owner.get("kind") not in OUR_JOB_OWNERS:
            return ""
        was, now = (_checked(lambda o=o, w=w: shapes.boolean(
            shapes.mapping(o.get("spec"), f"{w}.spec").get("suspend"), f"{w}.spec.suspend"))
            for o, w in ((old, "oldObject"), (new, "object")))
        return "spec.suspend: true -> false" if was and not now else ""
    had, has = (GATE in _gates(o, w) for o, w in ((old, "oldObject"), (new, "object")))
    return f"spec.schedulingGates: removing {GATE!r}" if had and not has else ""


def _gates(pod: dict[str, Any], where: str) -> list[str]:
    spec = _checked(lambda: shapes.mapping(pod.get("spec"), f"{where}.spec"))
    gates = _checked(lambda: shapes.mappings(spec.get("schedulingGates"),
                                             f"{where}.spec.schedulingGates"))
    return [g.get("name") for g in gates]


def _allowed(uid: str, patch: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    response: dict[str, Any] = {"uid": uid, "allowed": True}
    if patch:
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(json.dumps(patch).encode()).decode()
    return response


_REASONS = {400: "BadRequest", 403: "Forbidden", 422: "Invalid", 500: "InternalError"}


def _refused(uid: str, message: str, code: int = 422) -> dict[str, Any]:
    return {"uid": uid, "allowed": False,
            "status": {"code": code, "message": message, "reason": _REASONS[code]}}


def _answer(response: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}


@dataclass(frozen=True)
class _Request:
    """The parts of an AdmissionReview's ``request`` the webhook reads, type-checked."""

    uid: str
    kind: str
    operation: str
    namespace: str
    user: str
    raw: dict[str, Any]


def read_request(body: Any) -> _Request:
    """The request of an AdmissionReview; raises :class:`NotAdmissionReview` when ``body``
    is not one (the HTTP handler answers 400)."""
    if not isinstance(body, dict):
        raise NotAdmissionReview(f"the body is {shapes.shown(body)}, not an AdmissionReview "
                                 "object")
    request = body.get("request")
    if not isinstance(request, dict):
        raise NotAdmissionReview(f"request: {shapes.shown(request)}; an AdmissionReview "
                                 "carries its request as an object")
    try:
        uid = shapes.string(request.get("uid"), "request.uid", required=True)
        kind = shapes.string(shapes.mapping(request.get("kind"), "request.kind").get("kind"),
                             "request.kind.kind")
        operation = shapes.string(request.get("operation"), "request.operation")
        namespace = shapes.string(request.get("namespace"), "request.namespace")
        user = shapes.string(shapes.mapping(request.get("userInfo"),
                                            "request.userInfo").get("username"),
                             "request.userInfo.username")
    except shapes.ShapeError as exc:
        raise NotAdmissionReview(str(exc)) from None
    return _Request(uid, kind, operation, namespace, user, request)


class NotAdmissionReview(ValueError):
    """A body that is not an ``admission.k8s.io/v1`` AdmissionReview (names what is wrong)."""


def review(body: dict[str, Any], config: WebhookConfig) -> dict[str, Any]:
    """Answer one AdmissionReview (the request as JSON) with an AdmissionReview.

    Never raises: a body that is not an AdmissionReview is refused (code 400, ``uid`` empty
    when it has none), an object with a field of the wrong type is refused naming the field
    (422), and anything the webhook does not act on is allowed unread."""
    try:
        request = read_request(body)
    except NotAdmissionReview as exc:
        uid = ""
        if isinstance(body, dict) and isinstance(body.get("request"), dict) and \
                isinstance(body["request"].get("uid"), str):
            uid = body["request"]["uid"]
        return _answer(_refused(uid, f"not an AdmissionReview: {exc}", code=400))
    try:
        return _answer(_review(request, config))
    except Exception as exc:  # noqa: BLE001 - the API server must get an answer, never a reset
        log.exception("reviewing %s %s %s failed", request.operation, request.kind,
                      request.uid)
        return _answer(_refused(request.uid, f"the webhook failed reading this request "
                                f"({type(exc).__name__}: {exc}); report it as a bug",
                                code=500))


def _review(request: _Request, config: WebhookConfig) -> dict[str, Any]:
    uid, kind, operation = request.uid, request.kind, request.operation
    if kind not in ("Job", "Pod") or operation not in ("CREATE", "UPDATE"):
        return _allowed(uid)
    try:
        if operation == "CREATE":
            obj = _checked(lambda: shapes.mapping(request.raw.get("object"), "object"))
            return _allowed(uid, _job_create(obj, config) if kind == "Job"
                            else _pod_create(obj, config))
        if not config.admitters or request.user in config.admitters:
            return _allowed(uid)  # the queue's own updates (or no one to tell apart)
        obj = _checked(lambda: shapes.mapping(request.raw.get("object"), "object"))
        change = _starting(kind, request.raw.get("oldObject"), obj)
        if not change:
            return _allowed(uid)
        meta = obj.get("metadata") if isinstance(obj.get("metadata"), dict) else {}
        name = meta.get("name") if isinstance(meta.get("name"), str) else ""
        return _refused(uid, (
            f"{change}: {kind.lower()} {request.namespace}/{name} is queued; "
            f"it starts when the fluxion queue admits it (kubectl get fluxjobs); "
            f"{request.user or 'this user'} may not start it"), code=403)
    except Refused as exc:
        return _refused(uid, str(exc))


# -- the HTTPS server ----------------------------------------------------------------------------

class WebhookMetrics:
    """Requests by verdict and their handling time (``prometheus_client``, in the webhook's
    own registry)."""

    def __init__(self) -> None:
        p = "fluxinfra_queue_webhook_"
        self.registry = r = CollectorRegistry()
        self.requests = Counter(p + "requests_total", "AdmissionReviews answered, by kind, "
                                "operation and verdict.", r, ["allowed", "kind", "operation"])
        self.latency = Histogram(p + "duration_seconds", "Time to read, answer and write one "
                                 "AdmissionReview.", r, buckets=(0.0001, 0.00025, 0.0005, 0.001,
                                                                 0.0025, 0.005, 0.01, 0.025,
                                                                 0.1))

    def render(self) -> str:
        return generate_latest(self.registry).decode()


def tls_context(cert_file: str, key_file: str) -> ssl.SSLContext:
    """A server context (TLS 1.2+) holding the webhook's certificate and key."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(cert_file, key_file)
    return context


def _handler(config: WebhookConfig, metrics: WebhookMetrics) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive: the API server reuses its connections
        # A client that stops mid-request (or idles on a kept-alive connection) for this long
        # is let go: its thread ends instead of waiting forever.
        timeout = IDLE_SECONDS
        # Headers and body go out as separate writes; with Nagle's algorithm on, the second
        # waits for the client's delayed ACK (~40 ms on Linux): off, as every server does.
        disable_nagle_algorithm = True

        def do_POST(self) -> None:  # noqa: N802 - http.server's naming
            t0 = time.perf_counter()
            if not self.path.startswith("/mutate"):
                self._reply(404, b"not found\n", "text/plain")
                return
            try:
                body = json.loads(self._body())
                request = read_request(body)
            except (ValueError, RecursionError, OSError) as exc:
                # NotAdmissionReview is a ValueError, as are bad lengths and bad JSON; the
                # rest of the body may be unread: the connection is closed, and says so
                self.close_connection = True
                self._reply(400, f"not an AdmissionReview: {exc}\n".encode(), "text/plain")
                return
            answer = review(body, config)
            data = json.dumps(answer, separators=(",", ":")).encode()
            self._reply(200, data, "application/json")
            metrics.requests.inc(kind=request.kind, operation=request.operation,
                                 allowed=str(answer["response"]["allowed"]).lower())
            metrics.latency.observe(time.perf_counter() - t0)

        def _body(self) -> bytes:
            """The request body: a Content-Length of at most MAX_BODY bytes, read whole."""
            if self.headers.get("Transfer-Encoding"):
                raise ValueError("send the body with a Content-Length, not chunked")
            raw = self.headers.get("Content-Length")
            length = int(raw) if raw is not None and raw.strip().isdigit() else -1
            if not 0 <= length <= MAX_BODY:
                raise ValueError(f"Content-Length {shapes.shown(raw)}; give the body's length "
                                 f"in bytes (at most {MAX_BODY})")
            data = self.rfile.read(length)
            if len(data) != length:
                raise ValueError(f"the body ended after {len(data)} of {length} bytes")
            return data

        def do_GET(self) -> None:  # noqa: N802
            if self.path.startswith("/metrics"):
                self._reply(200, metrics.render().encode(), CONTENT_TYPE)
            elif self.path.startswith(("/healthz", "/readyz", "/livez")):
                self._reply(200, b"ok\n", "text/plain")
            else:
                self._reply(404, b"not found\n", "text/plain")

        def _reply(self, code: int, body: bytes, ctype: str) -> None:
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            if self.close_connection:
                self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002
            pass

    return Handler


class _TLSServer(ThreadingHTTPServer):
    """One thread per connection, the TLS handshake made in that thread.

    Wrapping the listening socket instead would make every handshake in the one thread that
    accepts: when the API server opens several connections at once (a burst of creates), each
    would wait for the handshakes before it.
    """

    daemon_threads = True
    handshake_timeout = 10.0

    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler],
                 context: ssl.SSLContext) -> None:
        super().__init__(address, handler)
        self.context = context

    def finish_request(self, request: Any, client_address: Any) -> None:
        request.settimeout(self.handshake_timeout)
        try:
            tls = self.context.wrap_socket(request, server_side=True)
        except (OSError, ssl.SSLError) as exc:  # an untrusting or stray client: its problem
            log.debug("TLS handshake with %s failed: %s", client_address, exc)
            return
        tls.settimeout(None)
        try:
            self.RequestHandlerClass(tls, client_address, self)
        finally:
            with contextlib.suppress(OSError):
                tls.shutdown(socket.SHUT_RDWR)
            tls.close()


def serve(config: WebhookConfig, cert_file: str, key_file: str, host: str = "0.0.0.0",
          port: int = 9443, metrics: WebhookMetrics | None = None,
          reload_seconds: float = 60.0) -> ThreadingHTTPServer:
    """Serve ``/mutate`` (and ``/healthz``, ``/metrics``) over TLS in daemon threads.

    The certificate is read again when its file changes (a rotated Secret reaches a mounted
    volume within a minute), so new connections get the new certificate without a restart.
    """
    metrics = metrics or WebhookMetrics()
    context = tls_context(cert_file, key_file)
    server = _TLSServer((host, port), _handler(config, metrics), context)
    server.metrics = metrics  # type: ignore[attr-defined]
    threading.Thread(target=server.serve_forever, name="webhook", daemon=True).start()
    _watch_certificate(context, cert_file, key_file, reload_seconds, server)
    return server


def _watch_certificate(context: ssl.SSLContext, cert_file: str, key_file: str,
                       every: float, server: ThreadingHTTPServer) -> None:
    def stamp() -> tuple[float, float]:
        return (os.stat(cert_file).st_mtime, os.stat(key_file).st_mtime)

    seen = stamp()

    def serving() -> bool:
        return getattr(server, "socket", None) is not None and server.socket.fileno() >= 0

    def loop(sleep: Callable[[float], Any] = time.sleep) -> None:
        nonlocal seen
        while serving():
            sleep(every)
            if not serving():  # closed while we slept: its files may be gone too
                return
            try:
                now = stamp()
                if now != seen:
                    context.load_cert_chain(cert_file, key_file)
                    seen = now
                    log.info("webhook certificate reloaded from %s", cert_file)
            except (OSError, ssl.SSLError) as exc:
                log.warning("reloading the webhook certificate failed: %s", exc)

    threading.Thread(target=loop, name="webhook-cert", daemon=True).start()
