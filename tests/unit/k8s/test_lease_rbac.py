"""The scheduler's leases Role grants exactly what its leader election does to the Lease.

Two links are checked against the real code: which KubeApi lease calls ``LeaderElector`` makes
over a whole life (create, renew, take over an expired lease, release), and which Kubernetes
client operation each of those calls is in ``fluxinfra/scheduler/client.py`` (read -> get,
create -> create, replace -> update). A new call (say a patch) fails here until the Role has it.
"""

import inspect
import re

from fluxinfra.k8s.scheduler import FluxSchedulerArgs, lease_name, lease_rules, scheduler_manifests
from fluxinfra.scheduler import client as kube_client
from fluxinfra.scheduler.leader import LeaderElector

#: Kubernetes Python client method prefix -> RBAC verb
CLIENT_VERBS = {"read": "get", "create": "create", "replace": "update", "patch": "patch",
                "list": "list", "delete": "delete"}


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


class LeaseStore:
    """An API server holding Leases, recording which KubeApi lease methods were called."""

    def __init__(self):
        self.leases: dict[tuple[str, str], dict] = {}
        self.calls: list[tuple[str, str]] = []   # (method, lease name)
        self.version = 0

    def get_lease(self, namespace, name):
        self.calls.append(("get_lease", name))
        return self.leases.get((namespace, name))

    def create_lease(self, namespace, lease):
        self.calls.append(("create_lease", lease["metadata"]["name"]))
        self._store(namespace, lease)

    def replace_lease(self, namespace, name, lease):
        self.calls.append(("replace_lease", name))
        current = self.leases[(namespace, name)]
        assert lease["metadata"]["resourceVersion"] == current["metadata"]["resourceVersion"]
        self._store(namespace, lease)

    def create_event(self, namespace, event):
        """Leadership changes are Events on the Lease (events.k8s.io/v1)."""
        self.calls.append(("create_event", event["regarding"]["name"]))
        assert event["apiVersion"] == "events.k8s.io/v1"

    def _store(self, namespace, lease):
        self.version += 1
        lease["metadata"]["resourceVersion"] = str(self.version)
        self.leases[(namespace, lease["metadata"]["name"])] = lease


def election_calls(namespace, name):
    """Every lease call of a full election life: create, renew, failover, release."""
    api, clock = LeaseStore(), Clock()
    a = LeaderElector(api, namespace, name, "pod-a", clock=clock)
    b = LeaderElector(api, namespace, name, "pod-b", clock=clock)
    assert a.try_acquire()                      # no lease yet: create
    clock.now += 2
    assert a.try_acquire() and not b.try_acquire()   # renew; b stands by
    clock.now += 60                             # a vanished; its lease expired
    assert b.try_acquire()                      # take over
    b.release()                                 # clean shutdown hands it back
    assert a.try_acquire()
    return api.calls


def granted(rules):
    return {(verb, name) for rule in rules for verb in rule["verbs"]
            for name in rule.get("resourceNames", [None])}


def test_election_uses_get_create_update_on_its_one_lease():
    args = FluxSchedulerArgs(scheduler_name="fluxion-a", namespace="sys")
    calls = election_calls("sys", lease_name(args))
    assert {method for method, _ in calls} == {"get_lease", "create_lease", "replace_lease",
                                              "create_event"}
    assert {name for _, name in calls} == {"fluxion-a-scheduler"}
    # The Events on the Lease are covered by the ClusterRole's events.k8s.io create.
    cluster_role = next(o for o in scheduler_manifests("s", args) if o["kind"] == "ClusterRole")
    assert any(rule["apiGroups"] == ["events.k8s.io"] and "events" in rule["resources"]
               and "create" in rule["verbs"] for rule in cluster_role["rules"])


def test_client_lease_calls_map_to_the_granted_verbs():
    source = inspect.getsource(kube_client)
    ops = set(re.findall(r"self\._coordination\.(\w+)_namespaced_lease", source))
    verbs = {CLIENT_VERBS[op] for op in ops}
    assert verbs == {"get", "create", "update"}, ops
    # The Role: create unrestricted (RBAC cannot name an object that does not exist yet), get
    # and update only on the one Lease, nothing else.
    lease = lease_name(FluxSchedulerArgs())
    assert granted(lease_rules(lease)) == {("create", None), ("get", lease), ("update", lease)}


def test_the_deployed_role_is_lease_rules_for_the_lease_the_args_name():
    args = FluxSchedulerArgs(scheduler_name="gpu", namespace="hpc")
    out = scheduler_manifests("gpu-sched", args)
    role = next(o for o in out if o["kind"] == "Role")
    assert role["metadata"]["namespace"] == "hpc"
    assert role["rules"] == lease_rules("gpu-scheduler")
    assert all(rule["apiGroups"] == ["coordination.k8s.io"] and rule["resources"] == ["leases"]
               for rule in role["rules"])
