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

__all__ = ["ServiceTls", "make_service_tls", "certificate_names"]

#: Where a seeded (reproducible) certificate's validity starts.
SEEDED_EPOCH = datetime.datetime(2025, 1, 1, tzinfo=datetime.UTC)
_P256_ORDER = int("FFFFFFFF00000000FFFFFFFFFFFFFFFFBCE6FAADA7179E84F3B9CAC2FC632551", 16)


@dataclass(frozen=True)
class ServiceTls:
    """PEM text of the CA certificate and of each side's certificate and private key."""

    ca_cert: str
    server_cert: str
    server_key: str
    client_cert: str
    client_key: str


class _Source:
    """Key and serial material: from the OS RNG, or derived from a seed."""

    def __init__(self, seed: bytes | None, label: str) -> None:
        self.seed, self.label = seed, label

    def _bytes(self, what: str, length: int) -> bytes:
        if self.seed is None:
            return os.urandom(length)
        return HKDF(algorithm=hashes.SHA256(), length=length, salt=b"fluxinfra-service-tls",
                    info=f"{what}:{self.label}".encode()).derive(self.seed)

    def key(self, role: str) -> ec.EllipticCurvePrivateKey:
        scalar = int.from_bytes(self._bytes(f"key:{role}", 40), "big") % (_P256_ORDER - 1) + 1
        return ec.derive_private_key(scalar, ec.SECP256R1())

    def serial(self, role: str) -> int:
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


def _pem_cert(cert: x509.Certificate) -> str:
    return cert.public_bytes(serialization.Encoding.PEM).decode()


def make_service_tls(server_names: list[str], client_name: str, *, seed: bytes | None = None,
                     label: str = "", days: int = 3650,
                     now: datetime.datetime | None = None) -> ServiceTls:
    """A fresh CA, a server certificate for ``server_names`` (DNS names or IP addresses) and a
    client certificate for ``client_name``, valid ``days`` days."""
    if not server_names:
        raise ValueError("server_names: empty; name the DNS names clients use")
    src = _Source(seed, label)
    start = SEEDED_EPOCH if seed is not None else (
        now or datetime.datetime.now(datetime.UTC)) - datetime.timedelta(minutes=5)
    end = start + datetime.timedelta(days=days)
    ca_key = src.key("ca")
    ca_name = x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "fluxinfra"),
                         x509.NameAttribute(NameOID.COMMON_NAME, "fluxinfra Fluxion service CA")])
    ca_ski = x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key())

    def issue(role: str, subject: x509.Name, key: ec.EllipticCurvePrivateKey,
              extensions: list[tuple[x509.ExtensionType, bool]]) -> x509.Certificate:
        builder = (x509.CertificateBuilder().subject_name(subject).issuer_name(ca_name)
                   .public_key(key.public_key()).serial_number(src.serial(role))
                   .not_valid_before(start).not_valid_after(end))
        for ext, critical in extensions:
            builder = builder.add_extension(ext, critical=critical)
        return builder.sign(ca_key, hashes.SHA256(), ecdsa_deterministic=True)

    leaf_usage = x509.KeyUsage(digital_signature=True, key_encipherment=False,
                               content_commitment=False, data_encipherment=False,
                               key_agreement=False, key_cert_sign=False, crl_sign=False,
                               encipher_only=False, decipher_only=False)
    aki = x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_ski)
    ca_cert = issue("ca", ca_name, ca_key, [
        (x509.BasicConstraints(ca=True, path_length=0), True),
        (x509.KeyUsage(digital_signature=False, key_encipherment=False,
                       content_commitment=False, data_encipherment=False, key_agreement=False,
                       key_cert_sign=True, crl_sign=True, encipher_only=False,
                       decipher_only=False), True),
        (ca_ski, False)])
    server_key, client_key = src.key("server"), src.key("client")
    server_cert = issue("server", x509.Name([
        x509.NameAttribute(NameOID.ORGANIZATION_NAME, "fluxinfra"),
        x509.NameAttribute(NameOID.COMMON_NAME, server_names[0][:64])]), server_key, [
        (x509.BasicConstraints(ca=False, path_length=None), True), (leaf_usage, True),
        (x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), False),
        (_san(server_names), False), (aki, False)])
    client_cert = issue("client", x509.Name([
        x509.NameAttribute(NameOID.ORGANIZATION_NAME, "fluxinfra"),
        x509.NameAttribute(NameOID.COMMON_NAME, client_name[:64])]), client_key, [
        (x509.BasicConstraints(ca=False, path_length=None), True), (leaf_usage, True),
        (x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), False), (aki, False)])
    return ServiceTls(ca_cert=_pem_cert(ca_cert), server_cert=_pem_cert(server_cert),
                      server_key=_pem_key(server_key), client_cert=_pem_cert(client_cert),
                      client_key=_pem_key(client_key))


def certificate_names(pem: str) -> list[str]:
    """The DNS names and IP addresses a PEM certificate is valid for (its SANs)."""
    cert = x509.load_pem_x509_certificate(pem.encode())
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return []
    return [str(v) for v in san.get_values_for_type(x509.DNSName)] + [
        str(v) for v in san.get_values_for_type(x509.IPAddress)]
