"""The bed's certificates and kubeconfigs, made with ``cryptography`` (no openssl, no cfssl).

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
import ipaddress
from dataclasses import dataclass
from pathlib import Path

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

__all__ = ["CertificateAuthority", "KeyPair", "kubeconfig", "service_account_keys"]

#: A bed lives for minutes; a month leaves room for a long debugging session.
VALIDITY = datetime.timedelta(days=30)
#: Certificates are valid from a little before now, so a clock a few seconds behind is harmless.
BACKDATE = datetime.timedelta(hours=1)


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _key_usage(*, ca: bool) -> x509.KeyUsage:
    """ECDSA keys only sign: leaves sign TLS handshakes, CAs also certificates and CRLs."""
    return x509.KeyUsage(digital_signature=True, key_cert_sign=ca, crl_sign=ca,
                         content_commitment=False, key_encipherment=False,
                         data_encipherment=False, key_agreement=False, encipher_only=False,
                         decipher_only=False)


@dataclass
class KeyPair:
    """A certificate and its private key."""

    cert: x509.Certificate
    key: ec.EllipticCurvePrivateKey

    @property
    def cert_pem(self) -> bytes:
        return self.cert.public_bytes(serialization.Encoding.PEM)

    @property
    def key_pem(self) -> bytes:
        return _pem_key(self.key)

    def write(self, directory: Path, stem: str) -> Path:
        """Write ``<stem>.crt`` and ``<stem>.key`` (0600); return the certificate's path."""
        directory.mkdir(parents=True, exist_ok=True)
        crt = directory / f"{stem}.crt"
        crt.write_bytes(self.cert_pem)
        key = directory / f"{stem}.key"
        key.touch(mode=0o600)
        key.write_bytes(self.key_pem)
        return crt


@dataclass
class CertificateAuthority(KeyPair):
    """A self-signed CA that issues leaf certificates."""

    @classmethod
    def create(cls, common_name: str) -> CertificateAuthority:
        key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
        now = datetime.datetime.now(datetime.UTC)
        cert = (
            x509.CertificateBuilder()
            .subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - BACKDATE).not_valid_after(now + VALIDITY)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(_key_usage(ca=True), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()),
                           critical=False)
            .sign(key, hashes.SHA256())
        )
        return cls(cert, key)

    @classmethod
    def load(cls, cert: Path, key: Path) -> CertificateAuthority:
        """The CA a bed wrote with :meth:`KeyPair.write` (to issue a node added later)."""
        return cls(x509.load_pem_x509_certificate(cert.read_bytes()),
                   serialization.load_pem_private_key(key.read_bytes(), password=None))

    def issue(self, common_name: str, *, organizations: tuple[str, ...] = (),
              client: bool = False, server: bool = False, dns: tuple[str, ...] = (),
              ips: tuple[str, ...] = ()) -> KeyPair:
        """A leaf certificate for a client (``CN`` = user, ``O`` = groups) and/or a server."""
        if not (client or server):
            raise ValueError(f"{common_name}: a certificate is for a client, a server or both")
        key = ec.generate_private_key(ec.SECP256R1())
        attrs = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in organizations]
        attrs.append(x509.NameAttribute(NameOID.COMMON_NAME, common_name))
        usages = ([ExtendedKeyUsageOID.CLIENT_AUTH] if client else []) + \
                 ([ExtendedKeyUsageOID.SERVER_AUTH] if server else [])
        now = datetime.datetime.now(datetime.UTC)
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name(attrs)).issuer_name(self.cert.subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - BACKDATE).not_valid_after(now + VALIDITY)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(_key_usage(ca=False), critical=True)
            .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(
                self.key.public_key()), critical=False)
        )
        names: list[x509.GeneralName] = [x509.DNSName(d) for d in dns]
        names += [x509.IPAddress(ipaddress.ip_address(i)) for i in ips]
        if names:
            builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
        return KeyPair(builder.sign(self.key, hashes.SHA256()), key)


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
            "server": server, "certificate-authority-data": b64(ca.cert_pem)}}],
        "users": [{"name": user, "user": {
            "client-certificate-data": b64(client.cert_pem),
            "client-key-data": b64(client.key_pem)}}],
        "contexts": [{"name": cluster, "context": {"cluster": cluster, "user": user}}],
        "current-context": cluster,
    }
    path.touch(mode=0o600)
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path
