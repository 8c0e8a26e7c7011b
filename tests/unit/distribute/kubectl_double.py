#!/usr/bin/env python3
"""TEST DOUBLE for ``kubectl`` (get pods, exec). It is NOT kubectl and talks to no cluster.

No cluster with the fluxinfra installer and a Flux build can run here, so ``fluxinfra distribute
--kubernetes`` is tested against this stand-in. It answers the two calls the distribution makes,
in kubectl's shapes:

- ``kubectl [--context C] -n NS get pods -l SELECTOR -o json``: a v1 ``List`` of the pods in
  ``$KUBECTL_DOUBLE_STATE`` (``{"pods": [{"name", "namespace", "node", "phase", "labels",
  "rank"}]}``) whose namespace and labels match, or kubectl's error for an unknown context;
- ``kubectl [--context C] -n NS get configmap NAME -o json``: a v1 ``ConfigMap`` from the state's
  ``configmaps`` (``{NS/NAME: data}``), or kubectl's NotFound error (the installer's rank map:
  which node holds which rank, as the real installer keeps it; the instance's hostnames are
  rank names, ``fluxnodeN``, as on a real installer's instance);
- ``kubectl [--context C] -n NS exec -i POD -- nsenter -t 1 -m -u -i -n -p -- [setpriv ...
  env FLUX_URI=...] CMD...``: kubectl's NotFound error for a pod that is not there; otherwise it
  checks the nsenter (and setpriv) prefix the installer's pods need, drops it, and runs CMD here
  "on the pod's node": ``FLUX_URI`` becomes that node's rank of the flux double instance (whose
  directory is the Flux prefix the tests give, so ``PREFIX/bin/flux`` is the flux double).

Every call is appended to ``$KUBECTL_DOUBLE_LOG`` (JSON lines: pod, node, argv, as_owner).
"""

from __future__ import annotations

import json
import os
import sys

NSENTER = ["nsenter", "-t", "1", "-m", "-u", "-i", "-n", "-p", "--"]


def die(message: str, code: int = 1) -> None:
    sys.stderr.write(message + "\n")
    sys.exit(code)


def main(argv: list[str]) -> int:
    with open(os.environ["KUBECTL_DOUBLE_STATE"]) as handle:
        state = json.load(handle)
    namespace, context = "default", None
    rest = []
    i = 0
    while i < len(argv):
        if argv[i] in ("-n", "--namespace"):
            namespace = argv[i + 1]
            i += 2
        elif argv[i] == "--context":
            context = argv[i + 1]
            i += 2
        elif argv[i] == "--":
            rest.extend(argv[i:])
            break
        else:
            rest.append(argv[i])
            i += 1
    if context is not None and context not in state.get("contexts", []):
        die(f'error: context "{context}" does not exist')
    pods = [p for p in state["pods"] if p["namespace"] == namespace]
    if rest[:2] == ["get", "pods"]:
        selector = dict(kv.split("=", 1) for kv in rest[rest.index("-l") + 1].split(","))
        items = [{"apiVersion": "v1", "kind": "Pod",
                  "metadata": {"name": p["name"], "namespace": namespace, "labels": p["labels"]},
                  "spec": {"nodeName": p["node"]}, "status": {"phase": p["phase"]}}
                 for p in pods if all(p["labels"].get(k) == v for k, v in selector.items())]
        print(json.dumps({"apiVersion": "v1", "kind": "List", "items": items,
                          "metadata": {"resourceVersion": ""}}))
        return 0
    if rest[:2] == ["get", "configmap"]:
        name = rest[2]
        data = state.get("configmaps", {}).get(f"{namespace}/{name}")
        if data is None:
            die(f'Error from server (NotFound): configmaps "{name}" not found')
        print(json.dumps({"apiVersion": "v1", "kind": "ConfigMap",
                          "metadata": {"name": name, "namespace": namespace}, "data": data}))
        return 0
    if rest[:1] != ["exec"]:
        die(f"kubectl-double: {' '.join(argv)}: not implemented", 97)
    rest = rest[1:]
    if rest[:1] == ["-i"]:
        rest = rest[1:]
    name, rest = rest[0], rest[1:]
    pod = next((p for p in pods if p["name"] == name), None)
    if pod is None:
        die(f'Error from server (NotFound): pods "{name}" not found')
    if rest[:1] != ["--"] or rest[1:1 + len(NSENTER)] != NSENTER:
        die(f"kubectl-double: exec into {name} without the node's nsenter prefix: {rest}", 98)
    command = rest[1 + len(NSENTER):]
    as_owner = command[:1] == ["setpriv"]
    env = dict(os.environ)
    if as_owner:
        # setpriv --reuid=U --regid=U --init-groups env FLUX_URI=... CMD...
        if command[4:5] != ["env"] or not command[5].startswith("FLUX_URI="):
            die(f"kubectl-double: unexpected owner prefix {command[:6]}", 98)
        command = command[6:]
    env["FLUX_URI"] = f"local://{os.environ['FLUX_DOUBLE_DIR']}/rank{pod['rank']}/local"
    with open(os.environ["KUBECTL_DOUBLE_LOG"], "a") as log:
        log.write(json.dumps({"pod": name, "node": pod["node"], "argv": command[:8],
                              "as_owner": as_owner}) + "\n")
    os.execvpe(command[0], command, env)
    return 127


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
