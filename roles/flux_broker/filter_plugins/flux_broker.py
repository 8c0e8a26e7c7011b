"""Filters for the flux_broker role: CURVE certificates and TOML values.

The CURVE certificate is generated on the controller, in memory, in the ZeroMQ / CZMQ ``zcert``
file format that flux-core reads (``metadata`` and ``curve`` sections, Z85-encoded X25519 keys).
"""

from __future__ import annotations

import json
import os
import re

from ansible.errors import AnsibleFilterError

_Z85_ALPHABET = (
    "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#"
)
_Z85_INDEX = {c: i for i, c in enumerate(_Z85_ALPHABET)}
_CERT_LINE = re.compile(r'^\s+([\w.-]+)\s*=\s*"(.*)"\s*$')
# What flux-core's cert reader accepts (src/common/libzmqutil/cert.c): keys are alphanumerics
# plus "-."; values alphanumerics plus the punctuation below (no comma, no quote).
_VALID_KEY = re.compile(r"^[A-Za-z0-9.-]+$")
_VALID_VALUE = re.compile(r"^[A-Za-z0-9.:+=^!/*?&<>()\[\]{}@%$# \t-]*$")


def _check_metadata(key: str, value: str) -> None:
    if not _VALID_KEY.match(key):
        raise AnsibleFilterError(f"CURVE certificate metadata key {key!r}: use [A-Za-z0-9.-]")
    if not _VALID_VALUE.match(value):
        raise AnsibleFilterError(
            f"CURVE certificate metadata {key} = {value!r}: flux rejects characters such as "
            "',' and '\"' in values; use letters, digits and .-:+=^!/*?&<>()[]{}@%$#"
        )


def z85_encode(data: bytes) -> str:
    """Encode bytes (length a multiple of 4) as Z85 (ZeroMQ RFC 32)."""
    if len(data) % 4:
        raise AnsibleFilterError(f"z85: input length {len(data)} is not a multiple of 4")
    out = []
    for i in range(0, len(data), 4):
        value = int.from_bytes(data[i : i + 4], "big")
        chunk = []
        for _ in range(5):
            value, digit = divmod(value, 85)
            chunk.append(_Z85_ALPHABET[digit])
        out.extend(reversed(chunk))
    return "".join(out)


def z85_decode(text: str) -> bytes:
    """Decode Z85 text (length a multiple of 5) to bytes."""
    if len(text) % 5:
        raise AnsibleFilterError(f"z85: text length {len(text)} is not a multiple of 5")
    out = bytearray()
    for i in range(0, len(text), 5):
        value = 0
        for char in text[i : i + 5]:
            if char not in _Z85_INDEX:
                raise AnsibleFilterError(f"z85: invalid character {char!r}")
            value = value * 85 + _Z85_INDEX[char]
        out += value.to_bytes(4, "big")
    return bytes(out)


def _x25519():
    try:
        from cryptography.hazmat.primitives.asymmetric import x25519
    except ImportError as exc:  # pragma: no cover - depends on the controller
        raise AnsibleFilterError(
            "flux_broker: generating the CURVE certificate needs the Python package "
            "'cryptography' on the controller: pip install cryptography, or set "
            "flux_broker_curve_cert_content to an existing certificate"
        ) from exc
    return x25519


def _raw(key) -> bytes:
    from cryptography.hazmat.primitives import serialization

    if hasattr(key, "public_key"):
        return key.private_bytes(
            serialization.Encoding.Raw,
            serialization.PrivateFormat.Raw,
            serialization.NoEncryption(),
        )
    return key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def flux_curve_cert(name: str, metadata: dict | None = None) -> str:
    """Return a new CURVE certificate (secret + public key) as zcert text."""
    x25519 = _x25519()
    secret = x25519.X25519PrivateKey.generate()
    meta = {"name": str(name), "keygen.tool": "fluxinfra"}
    meta.update({str(k): str(v) for k, v in (metadata or {}).items()})
    for key, value in meta.items():
        _check_metadata(key, value)
    lines = ["#  ZeroMQ CURVE **Secret** Certificate", "#  DO NOT DISTRIBUTE", "", "metadata"]
    lines += [f'    {key} = "{value}"' for key, value in meta.items()]
    lines += [
        "curve",
        f'    public-key = "{z85_encode(_raw(secret.public_key()))}"',
        f'    secret-key = "{z85_encode(_raw(secret))}"',
    ]
    return "\n".join(lines) + "\n"


def flux_curve_cert_parse(text: str) -> dict:
    """Parse zcert text into ``{"metadata": {...}, "public": str, "secret": str}``.

    Raises when a section or key is missing or the public key does not match the secret key.
    """
    section, metadata, curve = None, {}, {}
    for raw in text.splitlines():
        stripped = raw.strip()
        if not stripped or stripped.startswith("#"):
            continue
        if raw[0] not in " \t":
            section = stripped
            continue
        match = _CERT_LINE.match(raw)
        if not match or section not in ("metadata", "curve"):
            raise AnsibleFilterError(f"CURVE certificate: unexpected line {stripped!r}")
        key, value = match.group(1), match.group(2)
        if section == "metadata":
            _check_metadata(key, value)
            metadata[key] = value
        else:
            curve[key] = value
    if "public-key" not in curve or "secret-key" not in curve:
        raise AnsibleFilterError("CURVE certificate: the curve section lacks public-key/secret-key")
    x25519 = _x25519()
    secret = x25519.X25519PrivateKey.from_private_bytes(z85_decode(curve["secret-key"]))
    if z85_encode(_raw(secret.public_key())) != curve["public-key"]:
        raise AnsibleFilterError("CURVE certificate: public-key does not match secret-key")
    return {"metadata": metadata, "public": curve["public-key"], "secret": curve["secret-key"]}


def flux_curve_cert_valid(text: str) -> bool:
    """True when flux can load ``text`` as a CURVE certificate (never raises, never echoes)."""
    try:
        flux_curve_cert_parse(text)
    except (AnsibleFilterError, ValueError, TypeError):
        return False
    return True


def flux_toml(value) -> str:
    """Render a Python value as a TOML value (inline tables for dicts)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list | tuple):
        return "[" + ", ".join(flux_toml(item) for item in value) + "]"
    if isinstance(value, dict):
        items = ", ".join(f"{_toml_key(k)} = {flux_toml(v)}" for k, v in value.items())
        return "{ " + items + " }" if items else "{}"
    raise AnsibleFilterError(f"flux_toml: cannot render {type(value).__name__} {value!r}")


def _toml_key(key) -> str:
    key = str(key)
    return key if re.fullmatch(r"[A-Za-z0-9_-]+", key) else json.dumps(key)


def flux_duplicates(items) -> list:
    """Return the values that occur more than once, in first-seen order."""
    seen, dups = set(), []
    for item in items:
        marker = json.dumps(item, sort_keys=True)
        if marker in seen and item not in dups:
            dups.append(item)
        seen.add(marker)
    return dups


def flux_random_hex(nbytes: int = 64) -> str:
    """Return ``nbytes`` of fresh randomness as hex text (munge key material)."""
    return os.urandom(int(nbytes)).hex()


class FilterModule:
    def filters(self):
        return {
            "flux_curve_cert": flux_curve_cert,
            "flux_curve_cert_parse": flux_curve_cert_parse,
            "flux_curve_cert_valid": flux_curve_cert_valid,
            "flux_toml": flux_toml,
            "flux_duplicates": flux_duplicates,
            "flux_random_hex": flux_random_hex,
        }
