"""The installer's ledger (fluxinfra/templates/flux_ledger.py) against named doubles.

``KubeDouble`` stands in for the API server and the kubelets (it holds pods in the API's shape
and admits a placeholder when the node's allocatable CPU still has room, as the kubelet's
admission does, else fails it OutOfcpu); ``FluxionDouble`` for Fluxion's ``set_status`` RPC
(it keeps the down cores by vertex path, as ``find status=down`` reports them). The journal
lines are what ``ledger-feed.py`` printed from the real flux-core 0.88 job-manager.
The real parts run in tests/e2e/test_ledger.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fluxinfra.errors import ConfigError
from fluxinfra.k8s import stack as stack_module
from fluxinfra.templates.flux_ledger import (
    Holds,
    Ledger,
    Ranks,
    admission,
    counts_against_flux,
    plan_down,
    pod_demand,
)

SETTINGS = {"namespace": "flux-installer", "ledgerImage": "localhost/fluxinfra:0.1.0",
            "ledgerPriorityClass": "flux-installer-flux-jobs"}
OWN = {"app.kubernetes.io/name": "flux-installer"}
RANK_MAP = {"hostPrefix": "fluxnode",
            "slots": {"0": {"node": "n0"}, "1": {"node": "n1"}, "2": {"node": "n2"}},
            "R": {"version": 1, "execution": {"R_lite": [{"rank": "0-3",
                                                           "children": {"core": "0-1"}}],
                                              "nodelist": ["fluxnode[0-3]"]}}}


def journal(job: int, *names: str, R: dict | None = None) -> list[dict]:
    """Lines as ledger-feed.py prints them (``alloc`` carries the job's R)."""
    return [{"id": job, "name": n, "R": R if n == "alloc" else None} for n in names]


def r_of(ranks_cores: dict[str, str]) -> dict:
    return {"version": 1, "execution": {"R_lite": [
        {"rank": rank, "children": {"core": cores}} for rank, cores in ranks_cores.items()],
        "nodelist": ["fluxnode[0-1]"], "starttime": 1795954619, "expiration": 9223372036}}


def pod(name: str, node: str, cpu: str = "1", ns: str = "default", phase: str = "Running",
        labels: dict | None = None, **spec_extra) -> dict:
    return {"metadata": {"name": name, "namespace": ns, "labels": labels or {}},
            "spec": {"nodeName": node, "containers": [{"name": "c", "resources": {
                "requests": {"cpu": cpu}}}], **spec_extra},
            "status": {"phase": phase}}


class KubeDouble:
    """Double of the API server + kubelets: pods by namespace/name; each node's kubelet admits a
    new pod when its CPU fits beside the admitted ones (else phase Failed, reason OutOfcpu)."""

    def __init__(self, allocatable_m: dict[str, int]) -> None:
        self.allocatable_m = allocatable_m
        self.pods: dict[str, dict] = {}
        self.created: list[str] = []
        self.deleted: list[str] = []

    def add(self, p: dict) -> None:
        self.pods[f"{p['metadata']['namespace']}/{p['metadata']['name']}"] = p

    def create_pod(self, body: dict) -> None:
        body = json.loads(json.dumps(body))
        node = body["spec"]["nodeName"]
        used = sum(pod_demand(p)[0] for p in self.pods.values()
                   if p["spec"].get("nodeName") == node and admission(p))
        fits = used + pod_demand(body)[0] <= self.allocatable_m[node]
        body["status"] = {"phase": "Running"} if fits else {
            "phase": "Failed", "reason": "OutOfcpu"}
        self.add(body)
        self.created.append(body["metadata"]["name"])

    def delete_pod(self, name: str) -> None:
        self.pods.pop(f"{SETTINGS['namespace']}/{name}", None)
        self.deleted.append(name)

    def remove(self, ns: str, name: str) -> None:
        self.pods.pop(f"{ns}/{name}")


class FluxionDouble:
    """Double of Fluxion's set_status RPC: the down cores as vertex paths."""

    def __init__(self) -> None:
        self.down: set[str] = set()
        self.calls: list[tuple[str, str]] = []

    def set_status(self, path: str, status: str) -> None:
        self.calls.append((path, status))
        (self.down.add if status == "down" else self.down.discard)(path)


@pytest.fixture
def books(tmp_path: Path):
    kube = KubeDouble({"n0": 2000, "n1": 2000, "n2": 2000})
    fluxion = FluxionDouble()
    ledger = Ledger(SETTINGS, kube, fluxion, str(tmp_path), OWN, clock=lambda: 0.0,
                    waiting_dir=str(tmp_path / "waiting"))
    ledger.ranks = Ranks.from_map(RANK_MAP)
    ledger.synced = True

    def step() -> None:
        ledger.pods = dict(kube.pods)
        ledger.reconcile()
        ledger.pods = dict(kube.pods)
        ledger.reconcile()
    return kube, fluxion, ledger, step


def test_pod_demand_counts_as_the_kubelet_does():
    p = pod("a", "n0", "500m", overhead={"cpu": "100m"},
            initContainers=[{"resources": {"requests": {"cpu": "2"}}}])
    p["spec"]["containers"].append({"resources": {"requests": {"cpu": "1",
                                                               "nvidia.com/gpu": "1"}}})
    assert pod_demand(p) == (2100, 1), "init containers run first: the larger of the two counts"
    assert pod_demand(pod("b", "n0", "1.5")) == (1500, 0)


@pytest.mark.parametrize("what, p, counts", [
    ("bound and running", pod("a", "n0"), True),
    ("unbound", pod("a", ""), False),
    ("finished", pod("a", "n0", phase="Succeeded"), False),
    ("rejected by the kubelet", pod("a", "n0", phase="Failed"), False),
    ("asks no CPU", pod("a", "n0", cpu="0"), False),
    ("Flux's own placeholder", pod("a", "n0", labels={"fluxinfra.io/role": "flux-job-hold"}),
     False),
    ("the installer's own pod", pod("a", "n0", labels=OWN), False),
])
def test_what_counts_against_flux(what, p, counts):
    assert counts_against_flux(p, OWN) is counts, what


def test_journal_history_gives_the_running_jobs_and_their_cores():
    holds = Holds()
    for line in (journal(1, "submit", "alloc", "start", "finish", "release", "free", "clean",
                         R=r_of({"0": "0-1"}))
                 + journal(2, "submit", "alloc", "start", R=r_of({"0-1": "1"}))
                 + journal(3, "submit", "exception", "clean")):
        holds.apply(line)
    assert list(holds.jobs) == [2], "only job 2 still holds resources"
    assert holds.held_cores(1) == {1} and holds.held_cores(3) == set()


def test_a_running_job_gets_one_admitted_placeholder_per_node_then_starts(books, tmp_path):
    kube, _, ledger, step = books
    for line in journal(7, "submit", "alloc", R=r_of({"0-1": "0-1"})):
        ledger.holds.apply(line)
    step()
    holds = {p["spec"]["nodeName"]: p for p in kube.pods.values()}
    assert sorted(holds) == ["n0", "n1"]
    for node, p in holds.items():
        assert p["metadata"]["name"] == f"flux-job-7-{node[1]}"
        assert p["spec"]["containers"][0]["resources"]["requests"] == {"cpu": "2"}
        assert p["spec"]["priorityClassName"] == "flux-installer-flux-jobs"
        assert "schedulerName" not in p["spec"], "bound by name: no scheduler involved"
    assert (tmp_path / "7").exists(), "the prolog may let the job start"
    for line in journal(7, "start", "finish", "release", "free"):
        ledger.holds.apply(line)
    step()
    assert not kube.pods and not (tmp_path / "7").exists()


def test_a_rank_no_node_holds_needs_no_placeholder(books, tmp_path):
    kube, _, ledger, step = books
    ledger.holds.apply(journal(8, "alloc", R=r_of({"3": "0"}))[0])
    step()
    assert not kube.pods and (tmp_path / "8").exists()


def test_pods_withhold_every_core_of_their_node_from_flux_until_they_go(books):
    kube, fluxion, ledger, step = books
    kube.add(pod("web", "n2", "100m"))
    step()
    assert fluxion.down == {"/cluster0/fluxnode2/core0", "/cluster0/fluxnode2/core1"}, \
        "a node-exclusive request takes a node with any core up, so all of them go down"
    calls = len(fluxion.calls)
    step()
    assert len(fluxion.calls) == calls, "nothing changed, nothing sent"
    kube.remove("default", "web")
    step()
    assert not fluxion.down


def test_a_pod_first_on_the_cores_makes_the_job_wait_never_run_beside_it(books, tmp_path):
    kube, fluxion, ledger, step = books
    kube.add(pod("first", "n1", "2"))               # bound and admitted before the job
    ledger.holds.apply(journal(9, "alloc", R=r_of({"1": "0-1"}))[0])
    ledger.pods = dict(kube.pods)
    ledger.reconcile()
    assert "flux-job-9-1" in kube.created and kube.pods["flux-installer/flux-job-9-1"][
        "status"]["reason"] == "OutOfcpu"
    why = tmp_path / "waiting" / "9"
    assert why.read_text() == "waiting for placeholder pod flux-job-9-1 to be created on node n1\n"
    step()
    assert not (tmp_path / "9").exists(), "the job waits in its prolog"
    assert "flux-job-9-1" in kube.deleted, "the rejected placeholder is taken away"
    assert {"/cluster0/fluxnode1/core0", "/cluster0/fluxnode1/core1"} <= fluxion.down
    assert why.read_text() == ("waiting for Kubernetes: node n1 refused placeholder pod "
                               "flux-job-9-1 (OutOfcpu): pods hold the cores; retrying\n"), \
        "the prolog shows the job why it waits (its memo), also while it is made again"
    kube.remove("default", "first")
    ledger.clock = lambda: 5.0
    step()
    assert (tmp_path / "9").exists(), "the pod left: the placeholder fits, the job starts"
    assert not why.exists() and not ledger.refused, "admitted: no reason left"
    assert not fluxion.down


def test_a_restarted_ledger_rebuilds_from_the_journal_and_the_cluster(books, tmp_path):
    kube, fluxion, ledger, step = books
    kube.add(pod("web", "n2"))
    history = journal(7, "submit", "alloc", "start", R=r_of({"0": "0-1"}))
    for line in history:
        ledger.holds.apply(line)
    step()
    created, calls = list(kube.created), list(fluxion.calls)
    again = Ledger(SETTINGS, kube, fluxion, str(tmp_path), OWN, clock=lambda: 0.0,
                   waiting_dir=str(tmp_path / "waiting"))
    again.ranks = Ranks.from_map(RANK_MAP)
    again.down = {2: {0, 1}}                          # what ledger-feed.py reads first
    for line in history:
        again.holds.apply(line)
    again.synced = True
    again.pods = dict(kube.pods)
    again.reconcile()
    assert kube.created == created and fluxion.calls == calls, "nothing twice"
    assert (tmp_path / "7").exists()


def test_nothing_is_done_before_the_journal_history_is_through(books):
    kube, fluxion, ledger, _ = books
    ledger.synced = False
    kube.add(pod("web", "n2"))
    ledger.pods = dict(kube.pods)
    ledger.reconcile()
    assert not fluxion.calls and not kube.created


def test_the_cores_fluxion_keeps_down_itself_stay_down(books, tmp_path):
    """Fluxion has the cores of a rank whose broker is offline down (a free rank, a node
    gone); a ledger that starts must not take them for its own and bring them up."""
    kube, fluxion, ledger, step = books
    recorded: list[dict] = []
    ledger.record = recorded.append
    ledger.restore_down({"1": [0, 1], "3": [0, 1]}, {"1": [0, 1]})
    assert ledger.down == {1: {0, 1}}, "only its own marks, and only those still down"
    step()
    assert sorted(fluxion.calls) == [("/cluster0/fluxnode1/core0", "up"),
                                     ("/cluster0/fluxnode1/core1", "up")], \
        "rank 3 (no node holds it) is never touched"
    assert recorded[-1] == {}
    ledger.restore_down({"3": [0, 1]}, {"1": [0, 1]})
    assert ledger.down == {}, "a restarted broker kept none of the ledger's marks"


def test_plan_down_changes_only_what_differs():
    ranks = Ranks.from_map(RANK_MAP)
    assert plan_down(ranks, {1}, {1: {0}}) == [("/cluster0/fluxnode1/core1", "down")]
    assert plan_down(ranks, set(), {1: {0, 1}}) == [("/cluster0/fluxnode1/core0", "up"),
                                                     ("/cluster0/fluxnode1/core1", "up")]


def test_the_lead_runs_the_ledger_prolog_only_with_the_ledger_on():
    import importlib.util
    import tomllib

    path = Path(__file__).parents[3] / "fluxinfra" / "templates" / "node-watch.py"
    spec = importlib.util.spec_from_file_location("node_watch_ledger", path)
    nw = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(nw)
    ranks = {"size": 2, "hostPrefix": "fluxnode", "brokerPort": 8050, "topology": "kary:0",
             "epoch": 1, "slots": {"0": {"node": "n0", "address": "10.0.0.1"}}}
    base = {"etcDir": "/etc/fluxinfra", "libDir": "/var/lib/fluxinfra"}
    on = tomllib.loads(nw.bootstrap_toml(ranks, 0, {**base, "ledger": True}, {}))
    assert on["job-manager"] == {"plugins": [{"load": "perilog.so"}], "prolog": {
        "command": ["/var/lib/fluxinfra/ledger-prolog.sh"], "timeout": "0"}}
    assert "job-manager" not in nw.bootstrap_toml(ranks, 0, {**base, "ledger": False}, {})


def test_a_cpu_request_on_the_installer_is_refused_while_the_ledger_is_on():
    config = {"fluxinfra:installer": {"resources": {"requests": {"cpu": "50m"}}}}
    with pytest.raises(ConfigError, match=r"fluxinfra:installer\.resources\.requests\.cpu: "
                       r"'50m' is not accepted while installer\.ledger is true"):
        stack_module.load_stack_settings("dev", config)
    config["fluxinfra:installer"]["ledger"] = False
    assert stack_module.load_stack_settings("dev", config).installer.ledger is False
