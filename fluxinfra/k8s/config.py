"""Stack-config options: how an ``XArgs`` field is exposed in ``stacks/Pulumi.<stack>.yaml``.

A component's Args dataclass is the one place its defaults live. Fields users may set from a stack
file are declared with :func:`option`, which records the config-level type, the accepted values and
a one-line description; :func:`load_args` turns one stack-config object into an Args instance, and
every mistake becomes a one-line :class:`fluxinfra.errors.ConfigError` naming the stack file, the
key, the value and what is accepted. No Pulumi import here: config is checked before anything is
declared.

>>> from dataclasses import dataclass
>>> @dataclass
... class DemoArgs:
...     size: int = option(2, "brokers", check=at_least(1))
>>> load_args(DemoArgs, {"size": "3"}, where="stacks/Pulumi.demo.yaml: fluxinfra:demo").size
3
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from fluxinfra.errors import ConfigError
from fluxinfra.inputs import check_plain, parse_json
from fluxinfra.kube.names import (
    DNS1123_SUBDOMAIN_RULE,
    LABEL_MAX,
    dns1123_label_rule,
    is_dns1123_label,
    is_dns1123_subdomain,
)

__all__ = [
    "KNOWN_POLICIES",
    "CUSTOM_POLICY_KEYS",
    "Option",
    "option",
    "options_of",
    "default_of",
    "load_args",
    "at_least",
    "one_of",
    "dns1123_label",
    "dns1123_subdomain",
    "match_policy",
    "pinned_image",
    "image_digest",
    "kube_version",
    "string_map",
    "toleration_list",
    "resource_requirements",
    "container_list",
    "name_list",
    "quantity",
    "quantity_bytes",
    "volume_list",
    "VOLUME_SOURCES",
]

#: Match policies the Fluxion matcher knows by name (the matcher's NAMED_POLICIES; a test keeps
#: the two equal). A custom policy is ``"policy=high|low key=true|false ..."`` with keys from
#: CUSTOM_POLICY_KEYS; ``fluxinfra.matcher.policies.parse_policy`` has the final word.
KNOWN_POLICIES = ("first", "low", "high", "lonode", "hinode", "lonodex", "hinodex", "firstnodex",
                  "locality", "variation")
#: Keys a custom policy string may set besides ``policy`` (booleans, ``true``/``false``).
CUSTOM_POLICY_KEYS = ("node_centric", "node_exclusive", "stop_on_1_matches")

Check = Callable[[Any], str | None]  # returns None when fine, else "accepted: ..." text


@dataclass(frozen=True)
class Option:
    """How one Args field appears in the stack file."""

    key: str          # camelCase stack key
    type: type        # str | int | bool | list | dict
    doc: str
    check: Check | None = None


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


def option(default: Any, doc: str, *, check: Check | None = None, kind: type | None = None) -> Any:
    """A dataclass field settable from the stack file (the default is copied per instance)."""
    meta = {"fluxinfra.option": (kind or type(default), doc, check)}
    if isinstance(default, (list, dict)):
        return dataclasses.field(default_factory=lambda: copy.deepcopy(default), metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


def options_of(cls: type) -> dict[str, tuple[dataclasses.Field, Option]]:
    """Stack key -> (field, Option) for every stack-settable field of an Args class."""
    out = {}
    for f in dataclasses.fields(cls):
        if "fluxinfra.option" in f.metadata:
            typ, doc, check = f.metadata["fluxinfra.option"]
            out[_camel(f.name)] = (f, Option(_camel(f.name), typ, doc, check))
    return out


def default_of(f: dataclasses.Field) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    return f.default_factory()  # type: ignore[misc]


_TYPE_WORDS = {str: "a string", int: "an integer", bool: "true or false", list: "a list",
               dict: "a mapping"}


def _coerce(value: Any, typ: type) -> Any:
    """Pulumi hands scalars over as strings ("3", "true"); accept those, refuse other mixes."""
    if typ is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "false"):
            return value.lower() == "true"
    elif typ is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        if isinstance(value, str) and re.fullmatch(r"[+-]?[0-9]{1,100}", value.strip()):
            return int(value)
    elif typ is str:
        if isinstance(value, str):
            return value
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return str(value)  # a YAML version like 1.29 read as a number
    elif typ in (list, dict):
        if isinstance(value, str):
            with contextlib.suppress(ConfigError):
                value = config_json(value)
        if isinstance(value, typ):
            return value
    raise TypeError


def _show(value: Any) -> str:
    """``value`` as a message shows it (JSON; at most about 200 characters)."""
    try:
        text = json.dumps(value, sort_keys=True) if not isinstance(value, str) else repr(value)
    except (TypeError, ValueError, RecursionError):
        text = repr(value)
    return text if len(text) <= 200 else text[:197] + "..."


def config_key(key: Any) -> str:
    """A mapping key as a message shows it: as it is when it is a plain word, else quoted."""
    text = str(key)
    return text if text.isprintable() and text.strip() == text and text else repr(text)


def config_json(text: str, where: str = "config") -> Any:
    """Stack config text that holds JSON (Pulumi passes objects so), read as
    :func:`fluxinfra.inputs.parse_json` reads it and checked as plain data (ConfigError)."""
    doc = parse_json(text, where, ConfigError)
    check_plain(doc, where, ConfigError)
    return doc


def load_args(cls: type, raw: Any, *, where: str, extra: dict[str, Any] | None = None) -> Any:
    """Build ``cls`` from one stack-config object ``raw`` (a mapping, or its JSON text).

    ``where`` prefixes every message (``"stacks/Pulumi.dev.yaml: fluxinfra:scheduler"``);
    ``extra`` passes fields that do not come from the stack file (namespace, image, ...).
    """
    if isinstance(raw, str):
        try:
            raw = config_json(raw, where) if raw.strip() else {}
        except ConfigError:
            raise ConfigError(f"{where}: {_show(raw)} is not accepted; accepted: a mapping of "
                              f"{', '.join(options_of(cls))}") from None
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: {_show(raw)} is not accepted; accepted: a mapping of "
                          f"{', '.join(options_of(cls))}")
    opts = options_of(cls)
    kwargs: dict[str, Any] = dict(extra or {})
    for key, value in raw.items():
        if key not in opts:
            raise ConfigError(f"{where}.{config_key(key)}: unknown key (value {_show(value)}); "
                              f"accepted keys: {', '.join(opts)}")
        f, opt = opts[key]
        try:
            value = _coerce(value, opt.type)
        except TypeError:
            raise ConfigError(f"{where}.{key}: {_show(value)} is not accepted; accepted: "
                              f"{_TYPE_WORDS[opt.type]} ({opt.doc})") from None
        if opt.check is not None and (problem := opt.check(value)) is not None:
            raise ConfigError(f"{where}.{key}: {_show(value)} is not accepted; accepted: {problem}")
        kwargs[f.name] = value
    return cls(**kwargs)


# -- checks: each returns None when the value is fine, else the description of what is accepted --

def at_least(low: int, high: int | None = None) -> Check:
    def check(value: int) -> str | None:
        if value < low or (high is not None and value > high):
            if high is None:
                return f"an integer >= {low}"
            return f"an integer from {low} to {high}"
        return None
    return check


def one_of(*choices: str) -> Check:
    def check(value: str) -> str | None:
        return None if value in choices else "one of " + ", ".join(choices)
    return check


def dns1123_label(max_len: int = LABEL_MAX) -> Check:
    """A Kubernetes name of at most ``max_len`` characters (:mod:`fluxinfra.kube.names`)."""
    def check(value: str) -> str | None:
        return None if is_dns1123_label(value, max_len) else \
            dns1123_label_rule(max_len)
    return check


def dns1123_subdomain(value: str) -> str | None:
    """An object name (:mod:`fluxinfra.kube.names`)."""
    return None if is_dns1123_subdomain(value) else DNS1123_SUBDOMAIN_RULE


def match_policy(value: str) -> str | None:
    """A known policy name, or ``policy=high|low key=true|false ...``, as the matcher parses it."""
    from fluxinfra.matcher.errors import MatcherError
    from fluxinfra.matcher.policies import parse_policy

    try:
        parse_policy(value)
    except MatcherError:
        return (f"one of {', '.join(KNOWN_POLICIES)}, or a custom string 'policy=high|low "
                f"{'|'.join(CUSTOM_POLICY_KEYS)}=true|false ...'")
    return None


_IMAGE = re.compile(r"^(?P<repo>[a-z0-9][a-z0-9._/:-]*?)(?::(?P<tag>[\w][\w.-]{0,127}))?"
                    r"(?:@(?P<digest>sha256:[0-9a-f]{64}))?$")


def pinned_image(value: str) -> str | None:
    """An image reference with a tag other than ``latest``, or a sha256 digest."""
    m = _IMAGE.match(value)
    if m and (m.group("digest") or (m.group("tag") and m.group("tag") != "latest")):
        return None
    return "a pinned image reference: repo:tag (not 'latest') and/or repo@sha256:<64 hex>"


def image_digest(value: str) -> str | None:
    if value == "" or re.fullmatch(r"sha256:[0-9a-f]{64}", value):
        return None
    return "'' or sha256:<64 lower-case hex digits>"


def string_map(value: dict) -> str | None:
    if all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        return None
    return "a mapping of strings to strings"


def kube_version(value: str) -> str | None:
    return None if re.fullmatch(r"1\.\d+", value) else "a Kubernetes minor version like '1.29'"


_TOLERATION_KEYS = {"key", "operator", "value", "effect", "tolerationSeconds"}


def toleration_list(value: list) -> str | None:
    """Kubernetes tolerations: mappings of key/operator/value/effect/tolerationSeconds."""
    accepted = ("a list of tolerations, each a mapping of " + ", ".join(sorted(_TOLERATION_KEYS))
                + " (operator Exists or Equal; effect NoSchedule, PreferNoSchedule, NoExecute)")
    for item in value:
        if not isinstance(item, dict) or not set(item) <= _TOLERATION_KEYS:
            return accepted
        if item.get("operator", "Equal") not in ("Exists", "Equal"):
            return accepted
        if item.get("effect", "NoSchedule") not in ("NoSchedule", "PreferNoSchedule",
                                                    "NoExecute"):
            return accepted
    return None


def resource_requirements(value: dict) -> str | None:
    """Container resources: requests/limits mappings of resource name -> quantity string."""
    accepted = ("a mapping with 'requests' and/or 'limits', each a mapping of resource name to "
                "a quantity string like '500m' or '1Gi'")
    if not set(value) <= {"requests", "limits"}:
        return accepted
    for part in value.values():
        if not isinstance(part, dict) or not all(
                isinstance(k, str) and isinstance(v, (str, int)) for k, v in part.items()):
            return accepted
    return None


def container_list(value: list) -> str | None:
    """Extra containers: Kubernetes container mappings with a DNS-1123 name and a pinned image."""
    accepted = ("a list of Kubernetes container mappings, each with a DNS-1123 'name' other than "
                "'flux' and a pinned 'image'")
    names = set()
    for item in value:
        if not isinstance(item, dict) or not isinstance(item.get("name"), str) or not isinstance(
                item.get("image"), str):
            return accepted
        if (dns1123_label()(item["name"]) is not None or item["name"] == "flux"
                or item["name"] in names or pinned_image(item["image"]) is not None):
            return accepted
        names.add(item["name"])
    return None


def name_list(value: list) -> str | None:
    """Names of objects in the namespace (Secrets, ...): DNS-1123 subdomains, no repeats."""
    if all(isinstance(v, str) and dns1123_subdomain(v) is None for v in value) and \
            len(set(value)) == len(value):
        return None
    return "a list of distinct object names (DNS-1123 subdomains)"


_QUANTITY = re.compile(r"(\d+(\.\d+)?|\.\d+)([EPTGMK]i|[numkMGTPE])?")


def quantity(value: str) -> str | None:
    """A Kubernetes resource quantity such as ``512Mi``, ``2Gi`` or ``1``."""
    return None if _QUANTITY.fullmatch(value) else "a Kubernetes quantity like '64Mi' or '2Gi'"


#: The volume sources a MiniCluster accepts (Kubernetes VolumeSource keys).
VOLUME_SOURCES = ("persistentVolumeClaim", "hostPath", "configMap", "secret", "emptyDir")


_UNITS = {"": 1, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18,
          "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}


def quantity_bytes(value: str) -> int:
    """``"4Gi"`` -> 4294967296 (whole bytes; a quantity :func:`quantity` accepted)."""
    m = _QUANTITY.fullmatch(value)
    if m is None or m.group(3) in ("n", "u", "m"):
        raise ValueError(f"not a byte quantity: {value!r}")
    return int(float(m.group(1)) * _UNITS[m.group(3) or ""])


def volume_list(reserved: tuple[str, ...]) -> Check:
    """Volumes to mount: ``{name, mountPath, readOnly?, subPath?}`` and exactly one source."""
    accepted = ("a list of volumes, each a mapping of a DNS-1123 'name' (not one of "
                f"{', '.join(reserved)}), an absolute 'mountPath', optional 'readOnly' and "
                f"'subPath', and exactly one of {', '.join(VOLUME_SOURCES)} (a Kubernetes "
                "volume source mapping)")

    def check(value: list) -> str | None:
        names = set()
        for item in value:
            if not isinstance(item, dict):
                return accepted
            name, path = item.get("name"), item.get("mountPath")
            if not isinstance(name, str) or dns1123_label()(name) is not None or \
                    name in reserved or name in names:
                return accepted
            if not isinstance(path, str) or not path.startswith("/"):
                return accepted
            sources = [k for k in item if k in VOLUME_SOURCES]
            extra = set(item) - {"name", "mountPath", "readOnly", "subPath", *VOLUME_SOURCES}
            if len(sources) != 1 or extra or not isinstance(item[sources[0]], dict):
                return accepted
            if "readOnly" in item and not isinstance(item["readOnly"], bool):
                return accepted
            names.add(name)
        return None
    return check
