"""RBAC as the API server sees it: what a ServiceAccount is granted (a SelfSubjectRulesReview made
while impersonating it) and what it used (the bed's audit log, which records every request a
ServiceAccount outside kube-system makes).

A permission is ``(apiGroup, resource[/subresource], verb, resourceName or "*")``.
"""

from __future__ import annotations

import datetime
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from e2e_cluster import Cluster

__all__ = ["Permission", "Request", "granted", "now", "requests", "unused", "user_of"]


def now() -> str:
    """The current time as the audit log writes it."""
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass(frozen=True, order=True)
class Permission:
    group: str
    resource: str
    verb: str
    name: str = "*"

    def __str__(self) -> str:
        group = self.group or "core"
        named = "" if self.name == "*" else f" {self.name}"
        return f"{self.verb} {group}/{self.resource}{named}"


@dataclass(frozen=True)
class Request:
    """One audited request: who, what, and the response code."""

    user: str
    permission: Permission
    code: int
    #: when the server answered (RFC 3339, UTC, microseconds: compares as text)
    at: str = ""
    #: the authorizer's decision ("allow", "forbid"; "" when none was recorded). A 403 the
    #: authorizer allowed is admission's (e.g. a namespace being terminated), not RBAC's.
    decision: str = ""

    @property
    def refused_by_rbac(self) -> bool:
        return self.decision == "forbid" or (self.code == 403 and self.decision != "allow")

    def __str__(self) -> str:
        return f"{self.user}: {self.permission} -> {self.code}"


def user_of(namespace: str, account: str) -> str:
    return f"system:serviceaccount:{namespace}:{account}"


def _review(cluster: Cluster, user: str, namespace: str) -> set[Permission]:
    body = {"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectRulesReview",
            "spec": {"namespace": namespace}}
    out = cluster.kubectl("create", "--validate=false", "-o", "json", f"--as={user}", "-f", "-",
                          input_text=json.dumps(body)).stdout
    status = json.loads(out)["status"]
    assert not status.get("incomplete"), f"rules review for {user} incomplete: {status}"
    perms = set()
    for rule in status.get("resourceRules", []):
        for group in rule.get("apiGroups", [""]):
            for resource in rule["resources"]:
                for verb in rule["verbs"]:
                    for name in rule.get("resourceNames") or ["*"]:
                        perms.add(Permission(group, resource, verb, name))
    return perms


def granted(cluster: Cluster, namespace: str, account: str) -> set[Permission]:
    """What ``namespace/account`` may do (in its namespace and cluster-wide) beyond what every
    ServiceAccount may (discovery, self reviews): the rules its own bindings give it."""
    everyone = _review(cluster, user_of(namespace, "e2e-account-with-no-bindings"), namespace)
    return _review(cluster, user_of(namespace, account), namespace) - everyone


def requests(audit_log: Path) -> list[Request]:
    """Every audited resource request (each once, at its last stage)."""
    seen: dict[str, Request] = {}
    with open(audit_log, errors="replace") as handle:
        for line in handle:
            event: dict[str, Any] = json.loads(line)
            ref = event.get("objectRef")
            if not ref:
                continue
            resource = ref["resource"] + (f"/{ref['subresource']}"
                                          if ref.get("subresource") else "")
            perm = Permission(ref.get("apiGroup", ""), resource, event["verb"],
                              ref.get("name", "*"))
            code = event.get("responseStatus", {}).get("code", 0)
            decision = (event.get("annotations") or {}).get("authorization.k8s.io/decision", "")
            seen[event["auditID"]] = Request(event["user"]["username"], perm, code,
                                             event.get("stageTimestamp", ""), decision)
    return list(seen.values())


def unused(grants: set[Permission], used: list[Request]) -> list[Permission]:
    """Grants no request used: a named grant needs a request for that name, a grant for any
    name is used by a request for any."""
    def covers(grant: Permission, req: Request) -> bool:
        p = req.permission
        return (p.group, p.resource, p.verb) == (grant.group, grant.resource, grant.verb) \
            and grant.name in ("*", p.name)
    return sorted(g for g in grants if not any(covers(g, r) for r in used))
