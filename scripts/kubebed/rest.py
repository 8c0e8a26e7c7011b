"""A small JSON-over-HTTPS client for the bed's own calls to the API server.

The bed waits for readiness, makes hollow nodes and renews their Leases many times a second, and
``scripts/kube`` must work without the ``kubernetes`` package; one persistent TLS connection with
client-certificate authentication is all that takes. Tests use the official client instead.
"""

from __future__ import annotations

import http.client
import json
import ssl
import threading
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

__all__ = ["ApiStatus", "Rest"]


class ApiStatus(Exception):
    """The API server answered with an error status; ``reason`` is the Status object's."""

    def __init__(self, code: int, reason: str, message: str) -> None:
        super().__init__(f"{code} {reason}: {message}")
        self.code = code
        self.reason = reason
        self.message = message


class Rest:
    """``Rest(server, ca, cert, key)`` with ``get/post/put/patch/delete(path, body)``.

    One connection per thread, reopened when the server closed it; not for watches.
    """

    def __init__(self, server: str, ca: str, cert: str, key: str, *,
                 timeout: float = 30.0) -> None:
        url = urlsplit(server)
        self.host = url.hostname or "127.0.0.1"
        self.port = url.port or 443
        self.timeout = timeout
        self.context = ssl.create_default_context(cafile=ca)
        self.context.load_cert_chain(cert, key)
        self._local = threading.local()

    def _conn(self) -> http.client.HTTPSConnection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = http.client.HTTPSConnection(self.host, self.port, context=self.context,
                                               timeout=self.timeout)
            self._local.conn = conn
        return conn

    def close(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None

    def request(self, method: str, path: str, body: Any = None,
                content_type: str = "application/json") -> Any:
        data = None if body is None else json.dumps(body).encode()
        headers = {"Accept": "application/json"}
        if data is not None:
            headers["Content-Type"] = content_type
        for attempt in (0, 1):
            conn = self._conn()
            try:
                conn.request(method, path, body=data, headers=headers)
                resp = conn.getresponse()
                raw = resp.read()
                break
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError,
                    http.client.CannotSendRequest):
                # A kept-alive connection the server closed: reconnect once.
                self.close()
                if attempt:
                    raise
        status = resp.status
        try:
            doc = json.loads(raw) if raw else None
        except ValueError:
            doc = {"message": raw.decode(errors="replace")}
        if status >= 400:
            doc = doc if isinstance(doc, dict) else {}
            raise ApiStatus(status, doc.get("reason", resp.reason), doc.get("message", ""))
        return doc

    def get(self, path: str) -> Any:
        return self.request("GET", path)

    def post(self, path: str, body: Any) -> Any:
        return self.request("POST", path, body)

    def put(self, path: str, body: Any) -> Any:
        return self.request("PUT", path, body)

    def patch(self, path: str, body: Any, kind: str = "merge") -> Any:
        return self.request("PATCH", path, body, f"application/{kind}-patch+json")

    def delete(self, path: str, body: Any = None) -> Any:
        return self.request("DELETE", path, body)

    def watch(self, path: str, timeout: float) -> Iterator[dict[str, Any]]:
        """The events of one watch request (``path`` carries ``watch=1`` and its
        ``timeoutSeconds``), on a connection of its own, one JSON object per line."""
        conn = http.client.HTTPSConnection(self.host, self.port, context=self.context,
                                           timeout=timeout + 30)
        try:
            conn.request("GET", path, headers={"Accept": "application/json"})
            resp = conn.getresponse()
            if resp.status >= 400:
                doc = json.loads(resp.read() or b"{}")
                raise ApiStatus(resp.status, doc.get("reason", resp.reason),
                                doc.get("message", ""))
            for line in resp:
                if line.strip():
                    yield json.loads(line)
        finally:
            conn.close()

    def get_text(self, path: str) -> str:
        """A plain-text endpoint such as ``/readyz``."""
        conn = self._conn()
        try:
            conn.request("GET", path)
            resp = conn.getresponse()
            text = resp.read().decode(errors="replace")
        except (http.client.HTTPException, OSError):
            self.close()
            raise
        if resp.status >= 400:
            raise ApiStatus(resp.status, resp.reason, text.strip()[-500:])
        return text
