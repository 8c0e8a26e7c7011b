"""A throw-away CA and server certificate for loopback TLS tests (the project's own pki)."""

from __future__ import annotations

from pathlib import Path

from fluxinfra.pki import make_service_tls


def make_certs(directory: Path, names: list[str]) -> tuple[Path, Path, Path]:
    """(ca.crt, tls.crt, tls.key) under ``directory`` for ``names`` (DNS names or IPs)."""
    tls = make_service_tls(names, "unused-client")
    paths = directory / "ca.crt", directory / "tls.crt", directory / "tls.key"
    for path, text in zip(paths, (tls.ca_cert, tls.server_cert, tls.server_key), strict=True):
        path.write_text(text)
    return paths
