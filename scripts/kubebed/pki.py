"""The bed's certificates and kubeconfigs, made by fluxinfra's one CA builder
(:mod:`fluxinfra.pki`, ``cryptography``: no openssl, no cfssl).

One CA signs every serving and client certificate; a second CA signs the front-proxy client (the
API server's request-header authentication, which the controller-manager and scheduler read).
Keys are ECDSA P-256: Kubernetes accepts them everywhere (serving, client, service-account token
signing) and they take microseconds to make, so a bed makes fresh ones on every start.

>>> import tempfile, pathlib
>>> d = pathlib.Path(tempfile.mkdtemp())
>>> ca = CertificateAuthority.create("test-ca")
>>> leaf = ca.issue("system:kube-scheduler", client=True)
>>> leaf.write(d, "scheduler").name
'scheduler.crt'
"""

from __future__ import annotations

import base64
import datetime
from dataclasses import dataclass
from pathlib import Path

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from fluxinfra import pki

__all__ = ["CertificateAuthority", "KeyPair", "kubeconfig", "service_account_keys"]

#: A bed lives for minutes; a month leaves room for a long debugging session.
VALIDITY = datetime.timedelta(days=30)
#: Certificates are valid from a little before now, so a clock a few seconds behind is harmless.
BACKDATE = datetime.timedelta(hours=1)


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


@dataclass
class KeyPair(pki.KeyPair):
    """A certificate and its private key, written to files the bed's processes read."""

    def write(self, directory: Path, stem: str) -> Path:
        """Write ``<stem>.crt`` and ``<stem>.key`` (0600); return the certificate's path."""
        directory.mkdir(parents=True, exist_ok=True)
        crt = directory / f"{stem}.crt"
        crt.write_text(self.cert_pem)
        key = directory / f"{stem}.key"
        key.touch(mode=0o600)
        key.write_text(self.key_pem)
        return crt


@dataclass
class CertificateAuthority(pki.CertificateAuthority, KeyPair):
    """fluxinfra's CA (:class:`fluxinfra.pki.CertificateAuthority`) with the bed's validity,
    loaded back from the files it wrote, its leaves written to files."""

    @classmethod
    def create(cls, common_name: str, **kwargs) -> CertificateAuthority:  # type: ignore[override]
        kwargs.setdefault("start", datetime.datetime.now(datetime.UTC) - BACKDATE)
        kwargs.setdefault("validity", VALIDITY + BACKDATE)
        return super().create(common_name, **kwargs)  # type: ignore[return-value]

    @classmethod
    def load(cls, cert: Path, key: Path) -> CertificateAuthority:
        """The CA a bed wrote with :meth:`KeyPair.write` (to issue a node added later)."""
        start = datetime.datetime.now(datetime.UTC) - BACKDATE
        return cls(x509.load_pem_x509_certificate(cert.read_bytes()),
                   serialization.load_pem_private_key(key.read_bytes(), password=None),
                   pki.KeySource(), start, start + VALIDITY + BACKDATE)

    def issue(self, common_name: str, *, organizations: tuple[str, ...] = (),  # type: ignore[override]
              client: bool = False, server: bool = False, dns: tuple[str, ...] = (),
              ips: tuple[str, ...] = ()) -> KeyPair:
        """A leaf certificate for a client (``CN`` = user, ``O`` = groups) and/or a server."""
        pair = super().issue(common_name, organizations=organizations, client=client,
                             server=server, names=[*dns, *ips])
        return KeyPair(pair.cert, pair.key)


def service_account_keys(directory: Path) -> tuple[Path, Path]:
    """The key pair the API server signs service-account tokens with: ``(private, public)``."""
    key = ec.generate_private_key(ec.SECP256R1())
    private = directory / "sa.key"
    private.touch(mode=0o600)
    private.write_bytes(_pem_key(key))
    public = directory / "sa.pub"
    public.write_bytes(key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
    return private, public


def kubeconfig(path: Path, *, server: str, ca: KeyPair, user: str, client: KeyPair,
               cluster: str = "bed") -> Path:
    """A kubeconfig with everything embedded, so it stays valid wherever it is copied."""
    def b64(data: bytes) -> str:
        return base64.b64encode(data).decode()

    doc = {
        "apiVersion": "v1", "kind": "Config", "preferences": {},
        "clusters": [{"name": cluster, "cluster": {
            "server": server, "certificate-authority-data": b64(ca.cert_pem.encode())}}],
        "users": [{"name": user, "user": {
            "client-certificate-data": b64(client.cert_pem.encode()),
            "client-key-data": b64(client.key_pem.encode())}}],
        "contexts": [{"name": cluster, "context": {"cluster": cluster, "user": user}}],
        "current-context": cluster,
    }
    path.touch(mode=0o600)
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path
