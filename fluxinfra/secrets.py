"""Flux's shared secrets: the ZeroMQ CURVE certificate and the munge key (pure, no Pulumi).

Every broker of one Flux instance presents the same CURVE keypair (flux-core's overlay uses it for
both ends), so the keypair is generated once per cluster and distributed as a file in the ZeroMQ
certificate format (ZPL: a ``metadata`` and a ``curve`` section with Z85-encoded ``public-key`` and
``secret-key``), which is what ``flux keygen`` writes and what the broker reads from
``curve_cert``. The munge key is 1024 random bytes, as ``mungekey`` makes.

Keys come either from the OS RNG (:func:`generate_cluster_keys`) or, for reproducible offline
renders, from a seed via HKDF-SHA256 (:func:`derive_cluster_keys`): same seed and label, same keys.

>>> keys = derive_cluster_keys(b"example seed", "demo")
>>> pair = parse_curve_cert(keys.curve_cert)
>>> pair.public == keys.curve.public and len(pair.secret) == 40
True
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from fluxinfra.errors import FluxinfraError

__all__ = [
    "Z85_ALPHABET",
    "MUNGE_KEY_BYTES",
    "CurveKeypair",
    "ClusterKeys",
    "CertFormatError",
    "z85_encode",
    "z85_decode",
    "curve_keypair",
    "public_from_secret",
    "format_curve_cert",
    "parse_curve_cert",
    "generate_cluster_keys",
    "derive_cluster_keys",
]

#: ZeroMQ RFC 32 (Z85) alphabet: 85 printable characters, no quote or backslash.
Z85_ALPHABET = (
    "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#"
)
_Z85_INDEX = {ch: i for i, ch in enumerate(Z85_ALPHABET)}
#: Size of a munge key as `mungekey` creates it by default.
MUNGE_KEY_BYTES = 1024


class CertFormatError(FluxinfraError):
    """A CURVE certificate file does not parse (names the line and what was expected)."""


@dataclass(frozen=True)
class CurveKeypair:
    """An X25519 keypair, both halves Z85-encoded (40 characters each)."""

    public: str
    secret: str


@dataclass(frozen=True)
class ClusterKeys:
    """Everything secret one Flux cluster shares: the CURVE keypair (+ its file) and munge key."""

    curve: CurveKeypair
    curve_cert: str
    munge_key: bytes


def z85_encode(data: bytes) -> str:
    """Encode ``data`` (length a multiple of 4) as Z85."""
    if len(data) % 4:
        raise ValueError(f"z85_encode: length {len(data)} is not a multiple of 4")
    out = []
    for i in range(0, len(data), 4):
        value = int.from_bytes(data[i:i + 4], "big")
        chunk = []
        for _ in range(5):
            value, digit = divmod(value, 85)
            chunk.append(Z85_ALPHABET[digit])
        out.extend(reversed(chunk))
    return "".join(out)


def z85_decode(text: str) -> bytes:
    """Decode Z85 ``text`` (length a multiple of 5); raises ValueError on a foreign character."""
    if len(text) % 5:
        raise ValueError(f"z85_decode: length {len(text)} is not a multiple of 5")
    out = bytearray()
    for i in range(0, len(text), 5):
        value = 0
        for ch in text[i:i + 5]:
            if ch not in _Z85_INDEX:
                raise ValueError(f"z85_decode: {ch!r} is not a Z85 character")
            value = value * 85 + _Z85_INDEX[ch]
        if value > 0xFFFFFFFF:
            raise ValueError(f"z85_decode: chunk {text[i:i + 5]!r} overflows 32 bits")
        out += value.to_bytes(4, "big")
    return bytes(out)


def curve_keypair(secret: bytes | None = None) -> CurveKeypair:
    """An X25519 keypair from 32 secret bytes (or fresh from the OS RNG)."""
    private = (X25519PrivateKey.from_private_bytes(secret) if secret is not None
               else X25519PrivateKey.generate())
    return CurveKeypair(public=z85_encode(private.public_key().public_bytes_raw()),
                        secret=z85_encode(private.private_bytes_raw()))


def public_from_secret(secret_z85: str) -> str:
    """The Z85 public key that belongs to a Z85 secret key."""
    return curve_keypair(z85_decode(secret_z85)).public


def format_curve_cert(pair: CurveKeypair, name: str = "fluxinfra") -> str:
    """The certificate file Flux reads (``flux keygen`` layout; no timestamp, so reproducible)."""
    return (
        "#   ZeroMQ CURVE **Secret** Certificate\n"
        "#   DO NOT PROVIDE THIS FILE TO OTHER USERS nor change its permissions.\n"
        "#   Written by fluxinfra.\n"
        "\n"
        "metadata\n"
        f'    name = "{name}"\n'
        '    keygen.generator = "fluxinfra"\n'
        "curve\n"
        f'    public-key = "{pair.public}"\n'
        f'    secret-key = "{pair.secret}"\n'
    )


_SECTION = re.compile(r"^(\S+)\s*$")
_ENTRY = re.compile(r'^\s+([\w.-]+)\s*=\s*"([^"]*)"\s*(#.*)?$')


def parse_curve_cert(text: str) -> CurveKeypair:
    """Read the ``curve`` section of a ZPL certificate; checks both keys are 40-char Z85."""
    section = ""
    values: dict[str, str] = {}
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        if m := _SECTION.match(line):
            section = m.group(1)
        elif m := _ENTRY.match(line):
            values[f"{section}.{m.group(1)}"] = m.group(2)
        else:
            raise CertFormatError(f"line {lineno}: expected a section name or 'key = \"value\"', "
                                  f"got {line!r}")
    pair = []
    for key in ("curve.public-key", "curve.secret-key"):
        value = values.get(key)
        if value is None:
            raise CertFormatError(f"{key}: missing (a Flux CURVE cert needs both keys)")
        if len(value) != 40 or any(ch not in _Z85_INDEX for ch in value):
            raise CertFormatError(f"{key}: {value!r} is not a 40-character Z85 key")
        pair.append(value)
    return CurveKeypair(public=pair[0], secret=pair[1])


def _cluster_keys(curve_secret: bytes, munge_key: bytes, name: str) -> ClusterKeys:
    pair = curve_keypair(curve_secret)
    return ClusterKeys(curve=pair, curve_cert=format_curve_cert(pair, name), munge_key=munge_key)


def generate_cluster_keys(name: str = "fluxinfra") -> ClusterKeys:
    """Fresh keys from the OS RNG (what a deploy does once per cluster)."""
    return _cluster_keys(os.urandom(32), os.urandom(MUNGE_KEY_BYTES), name)


def derive_cluster_keys(seed: bytes, label: str, name: str = "fluxinfra") -> ClusterKeys:
    """Keys derived from ``seed`` and ``label`` with HKDF-SHA256: reproducible, as secret as the
    seed. Different labels give independent keys (one label per cluster)."""
    def hkdf(info: str, length: int) -> bytes:
        return HKDF(algorithm=hashes.SHA256(), length=length, salt=b"fluxinfra-cluster-keys",
                    info=f"{info}:{label}".encode()).derive(seed)
    return _cluster_keys(hkdf("curve", 32), hkdf("munge", MUNGE_KEY_BYTES), name)
