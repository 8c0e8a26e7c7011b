"""What flux-core 0.88.0 (and flux-sched 0.54.0) accept in the broker config tables fluxinfra
writes, read from their man5 pages and the parsers behind them. Tables the parser unpacks
strictly (jansson's ``!``: an unknown key is a start-up error) are marked strict here too.

Sources (flux-core v0.88.0): doc/man5/flux-config-{bootstrap,tbon,resource,access}.rst;
src/common/libfluxutil/conf_bootstrap.c (``[bootstrap]`` and each hosts entry, strict);
src/modules/resource/resource.c (``[resource]``, strict); src/common/librlist/verify_config.c
(``[resource.verify]`` keys and modes); src/modules/overlay/ovconf.c (``[tbon]``);
src/modules/connector-local/local.c (``[access]``). flux-sched v0.54.0:
``[sched-fluxion-qmanager] queue-policy``.
"""

from __future__ import annotations

from typing import Any

from fluxinfra.k8s.fluxconf import hostlist_decode

STR, INT, BOOL, LIST, TABLE = str, int, bool, list, dict

#: table -> (strict?, key -> type)
TABLES: dict[str, tuple[bool, dict[str, type]]] = {
    "bootstrap": (True, {"hosts": LIST, "curve_cert": STR, "default_port": INT,
                         "default_bind": STR, "default_connect": STR, "enable_ipv6": BOOL}),
    "resource": (True, {"path": STR, "scheduling": STR, "config": LIST, "verify": TABLE,
                        "exclude": STR, "norestrict": BOOL, "noverify": BOOL,
                        "no-update-watch": BOOL, "rediscover": BOOL, "journal-max": INT,
                        "history": STR}),
    "tbon": (False, {"topo": STR, "torpid_min": STR, "torpid_max": STR,
                     "tcp_user_timeout": STR, "connect_timeout": STR, "zmqdebug": INT,
                     "zmq_io_threads": INT, "child_rcvhwm": INT, "interface-hint": STR}),
    "access": (False, {"allow-guest-user": BOOL, "allow-root-owner": BOOL,
                       "private-mode": BOOL, "roles": TABLE}),
    "sched-fluxion-qmanager": (False, {"queue-policy": STR, "queue-params": STR,
                                       "policy-params": STR}),
}
HOST_ENTRY = {"host": STR, "bind": STR, "connect": STR, "parent": STR}   # strict; host required
VERIFY_KEYS = ("default", "hostname", "core", "gpu")
VERIFY_MODES = ("strict", "allow-extra", "allow-missing", "ignore")
QUEUE_POLICIES = ("fcfs", "easy", "hybrid", "conservative")


def problems(config: dict[str, Any]) -> list[str]:
    """Every way ``config`` (a parsed TOML document) breaks the rules above."""
    out: list[str] = []
    for table, body in config.items():
        if table not in TABLES:
            out.append(f"[{table}]: a table fluxinfra should not write")
            continue
        strict, keys = TABLES[table]
        if not isinstance(body, dict):
            out.append(f"[{table}]: not a table")
            continue
        for key, value in body.items():
            if key not in keys:
                if strict:
                    out.append(f"[{table}] {key}: unknown key (the parser is strict)")
                continue
            if not isinstance(value, keys[key]) or (keys[key] is INT and isinstance(value, bool)):
                out.append(f"[{table}] {key}: {value!r} is not a {keys[key].__name__}")
    boot = config.get("bootstrap", {})
    for i, entry in enumerate(boot.get("hosts", [])):
        if not isinstance(entry, dict) or not isinstance(entry.get("host"), str):
            out.append(f"[bootstrap] hosts[{i}]: needs a host string")
            continue
        for key, value in entry.items():
            if key not in HOST_ENTRY or not isinstance(value, str):
                out.append(f"[bootstrap] hosts[{i}].{key}: not accepted")
        try:
            hostlist_decode(entry["host"])
        except ValueError:
            out.append(f"[bootstrap] hosts[{i}].host: {entry['host']!r} is not a hostlist")
        for key in ("bind", "connect"):
            uri = entry.get(key, boot.get(f"default_{key}", ""))
            if uri and not uri.startswith("tcp://"):
                out.append(f"[bootstrap] hosts[{i}].{key}: {uri!r} is not a tcp:// URI")
            if "%p" in uri and "default_port" not in boot:
                out.append(f"[bootstrap] hosts[{i}].{key}: %p without default_port")
    if "default_port" in boot and not 0 < boot["default_port"] < 65536:
        out.append(f"[bootstrap] default_port: {boot['default_port']} is not a port")
    topo = config.get("tbon", {}).get("topo")
    if topo is not None and not (topo in ("binomial", "custom") or topo.startswith("mincrit")
                                 or (topo.startswith("kary:") and topo[5:].isdigit())):
        out.append(f"[tbon] topo: {topo!r} is not a topology flux-core knows")
    verify = config.get("resource", {}).get("verify")
    if isinstance(verify, dict):
        for key, mode in verify.items():
            if key not in VERIFY_KEYS or mode not in VERIFY_MODES:
                out.append(f"[resource.verify] {key} = {mode!r}: not accepted")
    policy = config.get("sched-fluxion-qmanager", {}).get("queue-policy")
    if policy is not None and policy not in QUEUE_POLICIES:
        out.append(f"[sched-fluxion-qmanager] queue-policy: {policy!r} is not accepted")
    return out


def host_count(config: dict[str, Any]) -> int:
    """The instance size the hosts array gives (compact hostlists expanded)."""
    return sum(len(hostlist_decode(e["host"])) for e in config["bootstrap"]["hosts"])
