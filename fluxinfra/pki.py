"""A private CA and the two certificates of the Fluxion service's mutual TLS (pure, no Pulumi).

The gRPC Fluxion service answers only clients that present a certificate signed by its own CA,
and the client (the scheduler) checks the service's certificate against the same CA. One CA per
deployment, made at deploy time (``fluxinfra.k8s.certs``) and kept only in Secrets:

- the CA certificate (its key signs the two below and is then thrown away: nothing else can
  ever be issued under it, so a leaked Secret is the only way in);
- the server certificate (``serverAuth``, the service's DNS names as SANs);
- the client certificate (``clientAuth``, CN = the client's name).

Keys are ECDSA P-256, signatures deterministic (RFC 6979). With ``seed`` everything is derived
from it with HKDF-SHA256 (keys, serial numbers) and the validity starts at a fixed date, so an
offline render is byte-reproducible; without it keys come from the OS RNG and validity starts
now.

>>> tls = make_service_tls(["svc.ns.svc"], "fluxion-scheduler", seed=b"example", label="demo")
>>> tls == make_service_tls(["svc.ns.svc"], "fluxion-scheduler", seed=b"example", label="demo")
True
>>> certificate_names(tls.server_cert)
['svc.ns.svc']
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from dataclasses import dataclass

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

__all__ = ["CertificateAuthority", "KeyPair", "KeySource", "ServiceTls", "certificate_names",
           "make_service_tls"]

#: Where a seeded (reproducible) certificate's validity starts.
SEEDED_EPOCH = datetime.datetime(2025, 1, 1, tzinfo=datetime.UTC)
#: the organization of the service's CA and certificates
ORGANIZATION = ("fluxinfra",)
_P256_ORDER = int("FFFFFFFF00000000FFFFFFFFFFFFFFFFBCE6FAADA7179E84F3B9CAC2FC632551", 16)


@dataclass(frozen=True)
class ServiceTls:
    """PEM text of the CA certificate and of each side's certificate and private key."""

    ca_cert: str
    server_cert: str
    server_key: str
    client_cert: str
    client_key: str


class KeySource:
    """Key and serial material: from the OS RNG, or derived from a seed (HKDF-SHA256, one
    derivation per role, so the same seed and label give the same keys and serials)."""

    def __init__(self, seed: bytes | None = None, label: str = "") -> None:
        self.seed, self.label = seed, label

    def _bytes(self, what: str, length: int) -> bytes:
        if self.seed is None:
            return os.urandom(length)
        return HKDF(algorithm=hashes.SHA256(), length=length, salt=b"fluxinfra-service-tls",
                    info=f"{what}:{self.label}".encode()).derive(self.seed)

    def key(self, role: str) -> ec.EllipticCurvePrivateKey:
        """An ECDSA P-256 key for ``role``."""
        scalar = int.from_bytes(self._bytes(f"key:{role}", 40), "big") % (_P256_ORDER - 1) + 1
        return ec.derive_private_key(scalar, ec.SECP256R1())

    def serial(self, role: str) -> int:
        """A positive serial number of at most 151 bits for ``role``."""
        return int.from_bytes(self._bytes(f"serial:{role}", 19), "big") >> 1 or 1


def _san(names: list[str]) -> x509.SubjectAlternativeName:
    entries: list[x509.GeneralName] = []
    for name in names:
        try:
            entries.append(x509.IPAddress(ipaddress.ip_address(name)))
        except ValueError:
            entries.append(x509.DNSName(name))
    return x509.SubjectAlternativeName(entries)


def _pem_key(key: ec.EllipticCurvePrivateKey) -> str:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption()).decode()


def _key_usage(*, ca: bool) -> x509.KeyUsage:
    """ECDSA keys only sign: leaves sign TLS handshakes, a CA certificates and CRLs."""
    return x509.KeyUsage(digital_signature=not ca, key_cert_sign=ca, crl_sign=ca,
                         content_commitment=False, key_encipherment=False,
                         data_encipherment=False, key_agreement=False, encipher_only=False,
                         decipher_only=False)


def _name(common_name: str, organizations: tuple[str, ...]) -> x509.Name:
    return x509.Name([*(x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in organizations),
                      x509.NameAttribute(NameOID.COMMON_NAME, common_name[:64])])


@dataclass
class KeyPair:
    """A certificate and its private key."""

    cert: x509.Certificate
    key: ec.EllipticCurvePrivateKey

    @property
    def cert_pem(self) -> str:
        return self.cert.public_bytes(serialization.Encoding.PEM).decode()

    @property
    def key_pem(self) -> str:
        return _pem_key(self.key)


@dataclass
class CertificateAuthority(KeyPair):
    """A self-signed CA (ECDSA P-256, path length 0) that issues leaf certificates valid from
    ``start`` to ``end``; keys and serials come from its :class:`KeySource`.

    >>> ca = CertificateAuthority.create("demo CA", source=KeySource(b"seed", "demo"))
    >>> leaf = ca.issue("svc", server=True, names=["svc.ns.svc", "10.0.0.1"])
    >>> certificate_names(leaf.cert_pem)
    ['svc.ns.svc', '10.0.0.1']
    """

    source: KeySource
    start: datetime.datetime
    end: datetime.datetime

    @classmethod
    def create(cls, common_name: str, *, organizations: tuple[str, ...] = (),
               source: KeySource | None = None, start: datetime.datetime | None = None,
               validity: datetime.timedelta = datetime.timedelta(days=3650),
               ) -> CertificateAuthority:
        """A new CA named ``O=organizations, CN=common_name``. Without ``start``, validity
        starts at :data:`SEEDED_EPOCH` for a seeded source, else five minutes ago."""
        source = source or KeySource()
        if start is None:
            start = SEEDED_EPOCH if source.seed is not None else (
                datetime.datetime.now(datetime.UTC) - datetime.timedelta(minutes=5))
        key = source.key("ca")
        name = _name(common_name, organizations)
        ca = cls(None, key, source, start, start + validity)  # type: ignore[arg-type]
        ca.cert = ca._sign("ca", name, key, [
            (x509.BasicConstraints(ca=True, path_length=0), True), (_key_usage(ca=True), True),
            (x509.SubjectKeyIdentifier.from_public_key(key.public_key()), False)], issuer=name)
        return ca

    def _sign(self, role: str, subject: x509.Name, key: ec.EllipticCurvePrivateKey,
              extensions: list[tuple[x509.ExtensionType, bool]],
              issuer: x509.Name | None = None) -> x509.Certificate:
        builder = (x509.CertificateBuilder().subject_name(subject)
                   .issuer_name(issuer or self.cert.subject).public_key(key.public_key())
                   .serial_number(self.source.serial(role))
                   .not_valid_before(self.start).not_valid_after(self.end))
        for ext, critical in extensions:
            builder = builder.add_extension(ext, critical=critical)
        return builder.sign(self.key, hashes.SHA256(), ecdsa_deterministic=True)

    def issue(self, common_name: str, *, organizations: tuple[str, ...] = (),
              client: bool = False, server: bool = False, names: list[str] | None = None,
              role: str | None = None) -> KeyPair:
        """A leaf certificate for a client (``CN`` = user, ``O`` = groups) and/or a server
        (``names``: DNS names or IP addresses); ``role`` names its key and serial in the
        source (default: the common name)."""
        if not (client or server):
            raise ValueError(f"{common_name}: a certificate is for a client, a server or both")
        role = role or common_name
        key = self.source.key(role)
        usages = ([ExtendedKeyUsageOID.SERVER_AUTH] if server else []) + \
                 ([ExtendedKeyUsageOID.CLIENT_AUTH] if client else [])
        extensions: list[tuple[x509.ExtensionType, bool]] = [
            (x509.BasicConstraints(ca=False, path_length=None), True),
            (_key_usage(ca=False), True), (x509.ExtendedKeyUsage(usages), False)]
        if names:
            extensions.append((_san(names), False))
        ski = self.cert.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
        extensions.append(
            (x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ski), False))
        return KeyPair(self._sign(role, _name(common_name, organizations), key, extensions),
                       key)


def make_service_tls(server_names: list[str], client_name: str, *, seed: bytes | None = None,
                     label: str = "", days: int = 3650,
                     now: datetime.datetime | None = None) -> ServiceTls:
    """A fresh CA, a server certificate for ``server_names`` (DNS names or IP addresses) and a
    client certificate for ``client_name``, valid ``days`` days."""
    if not server_names:
        raise ValueError("server_names: empty; name the DNS names clients use")
    source = KeySource(seed, label)
    start = None if seed is not None or now is None else now - datetime.timedelta(minutes=5)
    ca = CertificateAuthority.create("fluxinfra Fluxion service CA", organizations=ORGANIZATION,
                                     source=source, start=start,
                                     validity=datetime.timedelta(days=days))
    server = ca.issue(server_names[0], organizations=ORGANIZATION, server=True,
                      names=server_names, role="server")
    client = ca.issue(client_name, organizations=ORGANIZATION, client=True, role="client")
    return ServiceTls(ca_cert=ca.cert_pem, server_cert=server.cert_pem,
                      server_key=server.key_pem, client_cert=client.cert_pem,
                      client_key=client.key_pem)


def certificate_names(pem: str) -> list[str]:
    """The DNS names and IP addresses a PEM certificate is valid for (its SANs)."""
    cert = x509.load_pem_x509_certificate(pem.encode())
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return []
    return [str(v) for v in san.get_values_for_type(x509.DNSName)] + [
        str(v) for v in san.get_values_for_type(x509.IPAddress)]
