"""Mutual TLS for the Fluxion service's gRPC port: credentials from a directory of PEM files.

A directory holds what one side needs, named as in a Kubernetes TLS Secret (so a mounted Secret
is such a directory as is): ``tls.crt`` and ``tls.key`` (this side's certificate and key) and
``ca.crt`` (the CA that signed the other side). The server requires a client certificate
signed by ``ca.crt``; a client without one, or with one from another CA, is refused during the
handshake, before any RPC. ``fluxinfra.pki`` makes such a set; ``fluxinfra.k8s.certs`` makes
one per deployment into Secrets.

>>> names = TLS_FILES
>>> names
('ca.crt', 'tls.crt', 'tls.key')
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from fluxinfra.errors import ConfigError

__all__ = ["TLS_FILES", "TlsFiles", "read_tls_dir"]

TLS_FILES = ("ca.crt", "tls.crt", "tls.key")


@dataclass(frozen=True)
class TlsFiles:
    """PEM bytes: the peer's CA, this side's certificate chain and private key."""

    ca: bytes
    cert: bytes
    key: bytes

    def server_credentials(self):  # -> grpc.ServerCredentials
        import grpc

        return grpc.ssl_server_credentials([(self.key, self.cert)], root_certificates=self.ca,
                                           require_client_auth=True)

    def channel_credentials(self):  # -> grpc.ChannelCredentials
        import grpc

        return grpc.ssl_channel_credentials(root_certificates=self.ca, private_key=self.key,
                                            certificate_chain=self.cert)


def read_tls_dir(path: str, flag: str) -> TlsFiles:
    """Read ``ca.crt``, ``tls.crt`` and ``tls.key`` from ``path``; a missing or unreadable file
    is a :class:`ConfigError` naming ``flag``, the file and the fix."""
    data: list[bytes] = []
    for name in TLS_FILES:
        file = Path(path) / name
        try:
            text = file.read_bytes()
        except OSError as exc:
            raise ConfigError(f"{flag} {path}: cannot read {name} ({exc.strerror}); the "
                              f"directory needs {', '.join(TLS_FILES)} (PEM), as a mounted "
                              "kubernetes.io/tls Secret with ca.crt provides") from None
        if b"-----BEGIN " not in text:
            raise ConfigError(f"{flag} {path}: {name} is not PEM (no '-----BEGIN' line); "
                              "give PEM certificates and a PEM private key")
        data.append(text)
    return TlsFiles(ca=data[0], cert=data[1], key=data[2])
