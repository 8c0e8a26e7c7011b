"""Kubernetes naming rules: DNS-1123 labels and subdomains, as the API server checks them.

The one copy of these rules (Kubernetes' ``validation.IsDNS1123Label`` and
``IsDNS1123Subdomain``): the stack's option checks (:mod:`fluxinfra.k8s.config`), the queue's
admission webhook and the test bed's bed names all ask here.

>>> is_dns1123_label("fluxion-0"), is_dns1123_label("Fluxion"), is_dns1123_label("a" * 64)
(True, False, False)
>>> is_dns1123_label("flux-system", max_len=8)
False
>>> is_dns1123_subdomain("flux.example.com"), is_dns1123_subdomain("-flux.com")
(True, False)
>>> dns1123_label_rule(40)
"a DNS-1123 label: lower-case letters, digits and '-', starting and ending with a letter or \
digit, at most 40 characters"
"""

from __future__ import annotations

import re

__all__ = ["DNS1123_SUBDOMAIN_RULE", "LABEL_MAX", "SUBDOMAIN_MAX", "dns1123_label_rule",
           "is_dns1123_label", "is_dns1123_subdomain"]

_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
#: Kubernetes' limits: a label (a namespace, a Service, a container) and a subdomain (most
#: object names) may be at most this long.
LABEL_MAX = 63
SUBDOMAIN_MAX = 253

DNS1123_SUBDOMAIN_RULE = ("a DNS-1123 subdomain: dot-separated labels of [a-z0-9-], at most "
                          f"{SUBDOMAIN_MAX} characters")


def is_dns1123_label(value: object, max_len: int = LABEL_MAX) -> bool:
    """Lower-case letters, digits and ``-``, starting and ending with a letter or digit, at most
    ``max_len`` characters (Kubernetes allows 63; a name that gets a suffix needs fewer)."""
    return isinstance(value, str) and len(value) <= max_len and bool(_LABEL.fullmatch(value))


def is_dns1123_subdomain(value: object) -> bool:
    """DNS-1123 labels joined by dots, at most 253 characters."""
    return isinstance(value, str) and len(value) <= SUBDOMAIN_MAX and \
        all(_LABEL.fullmatch(part) for part in value.split("."))


def dns1123_label_rule(max_len: int = LABEL_MAX) -> str:
    """What :func:`is_dns1123_label` accepts, in words, for error messages."""
    return (f"a DNS-1123 label: lower-case letters, digits and '-', starting and ending with "
            f"a letter or digit, at most {max_len} characters")
