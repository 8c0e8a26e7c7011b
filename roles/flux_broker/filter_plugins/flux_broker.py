"""Filters for the flux_broker role: CURVE certificates and TOML values.

The CURVE certificate is generated on the controller, in memory, by ``fluxinfra.secrets`` (the same
code the Kubernetes side uses): X25519 keys, Z85-encoded, in the ZeroMQ zcert file format that
flux-core reads. When the role runs from a checkout whose ``fluxinfra`` package is not installed
in Ansible's Python, the checkout root is put on ``sys.path``.
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

from ansible.errors import AnsibleFilterError

# What flux-core's certificate reader accepts (src/common/libzmqutil/cert.c): keys are
# alphanumerics plus "-."; values alphanumerics plus the punctuation below (no comma, no quote).
_ENTRY = re.compile(r'^\s+([^=\s]+)\s*=\s*"(.*)"\s*$')
_VALID_KEY = re.compile(r"^[A-Za-z0-9.-]+$")
_VALID_VALUE = re.compile(r"^[A-Za-z0-9.:+=^!/*?&<>()\[\]{}@%$# \t-]*$")


def _secrets():
    try:
        from fluxinfra import secrets
    except ImportError:
        sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
        try:
            from fluxinfra import secrets
        except ImportError as exc:
            raise AnsibleFilterError(
                "flux_broker: generating or checking the CURVE certificate needs fluxinfra and "
                "the 'cryptography' package on the controller (pip install -e . from the "
                "fluxinfra checkout), or set flux_broker_curve_cert_content"
            ) from exc
    return secrets


def _check_entries(text: str) -> None:
    """Raise unless every ``key = "value"`` line is one flux-core's reader accepts."""
    for line in text.splitlines():
        match = _ENTRY.match(line)
        if not match:
            continue
        key, value = match.groups()
        if not _VALID_KEY.match(key):
            raise AnsibleFilterError(f"CURVE certificate key {key!r}: use [A-Za-z0-9.-]")
        if not _VALID_VALUE.match(value):
            raise AnsibleFilterError(
                f"CURVE certificate {key} = {value!r}: flux rejects characters such as ',' "
                "and '\"' in values; use letters, digits and .-:+=^!/*?&<>()[]{}@%$#"
            )


def flux_curve_cert(name: str) -> str:
    """Return a new CURVE certificate (secret + public key) as zcert text."""
    secrets = _secrets()
    text = secrets.format_curve_cert(secrets.curve_keypair(), name=str(name))
    _check_entries(text)
    return text


def flux_curve_cert_parse(text: str) -> dict:
    """Parse zcert text into ``{"public": str, "secret": str}``; raise unless flux could load it
    (entries flux accepts, both keys present, public key belonging to the secret key)."""
    secrets = _secrets()
    _check_entries(text)
    try:
        pair = secrets.parse_curve_cert(text)
        public = secrets.public_from_secret(pair.secret)
    except (secrets.CertFormatError, ValueError) as exc:
        raise AnsibleFilterError(f"CURVE certificate: {exc}") from exc
    if public != pair.public:
        raise AnsibleFilterError("CURVE certificate: public-key does not match secret-key")
    return {"public": pair.public, "secret": pair.secret}


def flux_curve_cert_valid(text: str) -> bool:
    """True when flux can load ``text`` as a CURVE certificate (never raises, never echoes)."""
    try:
        flux_curve_cert_parse(text)
    except AnsibleFilterError:
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
