"""node-watch (the installer's per-node loop): which nodes get a broker, the rank map that keeps
ranks stable across joins and leaves, the broker config and R it writes, when it restarts a
broker, and its list/watch/compare-and-swap loop against an HTTPS stand-in for the API server.
Loaded from the template file the ConfigMap ships."""

import importlib.util
import json
import tomllib
from pathlib import Path

import pytest
from flux_config_schema import host_count, problems

import fluxinfra
from fluxinfra.k8s.fluxconf import rv1_slots
from fluxinfra.secrets import derive_cluster_keys

SCRIPT = Path(fluxinfra.__file__).parent / "templates" / "node-watch.py"
SETTINGS = {"nodeSelector": {"flux": "yes"}, "tolerations": [], "brokerPort": 8050,
            "topology": "kary:2", "settleSeconds": 0, "resyncSeconds": 5,
            "etcDir": "/etc/fluxinfra", "libDir": "/var/lib/fluxinfra", "prefix": "/opt/flux",
            "maxNodes": 8, "hostPrefix": "fluxnode", "spareCores": 0, "spareGpus": 0,
            "generation": 0, "hostTarget": "1", "installMemoryBytes": 2**32,
            "installTimeoutSeconds": 600, "rankMap": "fi-ranks", "daemonSet": "fi",
            "brokerDigest": "b1", "templateGeneration": 1}
CORES8 = {"cores": "0-7", "gpus": ""}


@pytest.fixture(scope="module")
def nw():
    spec = importlib.util.spec_from_file_location("node_watch", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def node(name, ip="10.0.0.1", labels=None, taints=None, deleting=False):
    meta = {"name": name, "labels": {"flux": "yes", **(labels or {})}}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {"metadata": meta, "spec": {"taints": taints or []},
            "status": {"addresses": [{"type": "InternalIP", "address": ip},
                                     {"type": "Hostname", "address": name}]}}


def live(*names):
    """Eligible nodes ``wN`` at 10.0.0.N."""
    return {n: f"10.0.0.{n[1:]}" for n in names}


def held(ranks):
    """rank -> node name."""
    return {int(r): slot["node"] for r, slot in ranks["slots"].items()}


# -- eligibility -----------------------------------------------------------------------------------

def test_selector_taints_and_deletion_exclude_nodes(nw):
    nodes = [node("a"), node("b", labels={"flux": "no"}),
             node("c", taints=[{"key": "node-role.kubernetes.io/control-plane",
                                "effect": "NoSchedule"}]),
             node("d", deleting=True),
             node("e", taints=[{"key": "node.kubernetes.io/not-ready", "effect": "NoExecute"}]),
             node("f", taints=[{"key": "soft", "effect": "PreferNoSchedule"}])]
    assert list(nw.eligible_nodes(nodes, SETTINGS)) == ["a", "e", "f"]


def test_tolerations_let_tainted_nodes_in(nw):
    taint = [{"key": "hpc", "value": "true", "effect": "NoSchedule"}]
    settings = {**SETTINGS, "tolerations": [{"key": "hpc", "operator": "Equal",
                                             "value": "true", "effect": "NoSchedule"}]}
    assert list(nw.eligible_nodes([node("t", taints=taint)], settings)) == ["t"]
    exists_any = {**SETTINGS, "tolerations": [{"operator": "Exists"}]}
    assert list(nw.eligible_nodes([node("t", taints=taint)], exists_any)) == ["t"]
    assert nw.eligible_nodes([node("t", taints=taint)], SETTINGS) == {}


def test_dual_stack_node_uses_its_first_internal_ip_and_no_ip_means_no_rank(nw):
    dual = node("d", "10.0.0.7")
    dual["status"]["addresses"].append({"type": "InternalIP", "address": "fd00::7"})
    bare = node("x")
    bare["status"]["addresses"] = []
    assert nw.eligible_nodes([dual, bare], SETTINGS) == {"d": "10.0.0.7"}


def event(kind, obj):
    return {"type": kind, "object": obj}


def test_membership_reacts_to_joins_leaves_and_eligibility_not_to_readiness(nw):
    members = nw.Membership(SETTINGS)
    members.relist([node("w1", "10.0.0.1"), node("w2", "10.0.0.2")])
    assert members.apply(event("ADDED", node("w3", "10.0.0.3")))           # join
    not_ready = node("w3", "10.0.0.3")
    not_ready["status"]["conditions"] = [{"type": "Ready", "status": "False"}]
    assert not members.apply(event("MODIFIED", not_ready))                 # readiness: no change
    assert members.apply(event("MODIFIED", node("w3", "10.0.0.3", labels={"flux": "no"})))
    assert not members.apply(event("DELETED", node("w3", "10.0.0.3")))    # already excluded
    assert members.apply(event("MODIFIED", node("w2", "10.0.0.9")))        # new address
    assert members.apply(event("DELETED", node("w1")))                     # leave
    assert members.eligible() == {"w2": "10.0.0.9"}


# -- the rank map ----------------------------------------------------------------------------------

def grow(nw, names, settings=SETTINGS, ranks=None):
    """Each of ``names`` takes its pass in turn, all of them live."""
    everyone = live(*names)
    for name in names:
        ranks = nw.plan(ranks, everyone, name, CORES8, settings)
    return ranks


def test_first_node_leads_the_others_take_the_lowest_free_ranks(nw):
    notes = []
    ranks = nw.plan(None, live("w2", "w1"), "w2", None, SETTINGS, notes)
    assert held(ranks) == {0: "w2"} and ranks["epoch"] == 1 and ranks["leadSince"] == 1
    assert notes == ["rank 0 is now w2", "epoch 1: first lead"]
    ranks = nw.plan(ranks, live("w2", "w1"), "w1", None, SETTINGS)
    assert held(ranks) == {0: "w2", 1: "w1"} and ranks["epoch"] == 1
    assert ranks["size"] == 8 and ranks["hostPrefix"] == "fluxnode" and ranks["R"] is None


def test_the_first_host_leads_a_new_instance_whoever_claims_first(nw):
    """Pods start together: a node that is not the first host (names compared with numbers as
    numbers, kind's order) takes a rank from 1 and waits; the first host takes rank 0 and the
    epoch begins with the ranks in node order."""
    everyone = live("w2", "w10", "w")
    assert nw.first_host(everyone) == "w"
    ranks = nw.plan(None, everyone, "w2", None, SETTINGS, may_lead=False)
    assert held(ranks) == {1: "w2"} and ranks["epoch"] == 0
    ranks = nw.plan(ranks, everyone, "w10", None, SETTINGS, may_lead=False)
    assert held(ranks) == {1: "w2", 2: "w10"}
    notes = []
    ranks = nw.plan(ranks, everyone, "w", None, SETTINGS, notes, may_lead=True)
    assert held(ranks) == {0: "w", 1: "w2", 2: "w10"} and ranks["epoch"] == 1, notes
    assert nw.plan(ranks, everyone, "w2", None, SETTINGS, may_lead=False) == ranks


def test_a_pass_that_changes_nothing_returns_an_equal_map(nw):
    ranks = grow(nw, ["w1", "w2"])
    assert nw.plan(ranks, live("w1", "w2"), "w2", CORES8, SETTINGS) == ranks


def test_a_leave_keeps_the_rank_held_and_down_until_a_new_node_reuses_it(nw):
    ranks = grow(nw, ["w1", "w2", "w3"])
    after_leave = nw.plan(ranks, live("w1", "w3"), "w1", CORES8, SETTINGS)
    assert held(after_leave) == {0: "w1", 1: "w2", 2: "w3"}, "w2's rank stays, down"
    assert after_leave["epoch"] == 1, "no epoch: nobody restarts"
    everyone = {**live("w1", "w3"), "w9": "10.0.0.9"}
    notes = []
    joined = nw.plan(after_leave, everyone, "w9", CORES8, SETTINGS, notes)
    assert held(joined) == {0: "w1", 1: "w9", 2: "w3"} and joined["epoch"] == 1
    assert notes == ["w9 takes rank 1 (was w2's)"]


def test_the_lead_never_moves_while_it_lives_and_moves_once_when_it_goes(nw):
    ranks = grow(nw, ["w1", "w2", "w3"])
    assert held(nw.plan(ranks, live("w1", "w2", "w3"), "w3", CORES8, SETTINGS))[0] == "w1"
    notes = []
    moved = nw.plan(ranks, live("w2", "w3"), "w3", CORES8, SETTINGS, notes)
    assert held(moved) == {0: "w2", 1: "w3"}, \
        "the live node with the lowest rank leads; every broker restarts, so ranks close up"
    assert moved["epoch"] == 2 and moved["leadSince"] == 2 and moved["R"] is None
    assert notes == ["epoch 2: lead w1 is gone", "w2: rank 1 -> 0", "w3: rank 2 -> 1"]
    again = nw.plan(moved, live("w2", "w3"), "w2", CORES8, SETTINGS)
    assert again["epoch"] == 2, "every node computes the same move: one epoch, not one each"


def test_no_free_rank_leaves_a_node_without_one(nw):
    small = {**SETTINGS, "maxNodes": 2}
    ranks = grow(nw, ["w1", "w2", "w3"], small)
    assert held(ranks) == {0: "w1", 1: "w2"} and nw.rank_of(ranks, "w3") is None


def test_new_settings_start_one_epoch_and_only_a_newer_template_sets_them(nw):
    ranks = grow(nw, ["w1", "w2", "w3"])
    newer = {**SETTINGS, "maxNodes": 2, "templateGeneration": 2}
    notes = []
    resized = nw.plan(ranks, live("w1", "w2", "w3"), "w3", CORES8, newer, notes)
    assert resized["size"] == 2 and resized["epoch"] == 2 and held(resized) == {0: "w1", 1: "w2"}
    assert notes[-1] == "w3 loses rank 2: maxNodes is 2"
    # an old pod of the rolling update follows the map instead of turning it back
    old = nw.plan(resized, live("w1", "w2", "w3"), "w1", CORES8, SETTINGS)
    assert old == resized
    # topology and port are the instance's too
    faster = {**newer, "topology": "binomial", "brokerPort": 9000, "templateGeneration": 3}
    again = nw.plan(resized, live("w1", "w2"), "w1", CORES8, faster)
    assert (again["topology"], again["brokerPort"], again["epoch"]) == ("binomial", 9000, 3)
    bumped = nw.plan(again, live("w1", "w2"), "w1", CORES8,
                     {**faster, "generation": 1, "templateGeneration": 4})
    assert bumped["epoch"] == 4 and held(bumped) == held(again), "generation: restart only"


def test_a_node_records_its_new_address_and_shape(nw):
    ranks = grow(nw, ["w1", "w2"])
    moved = nw.plan(ranks, {"w1": "10.0.0.1", "w2": "10.9.9.9"}, "w2",
                    {"cores": "0-3", "gpus": "0"}, SETTINGS)
    assert moved["slots"]["1"] == {"node": "w2", "address": "10.9.9.9",
                                   "shape": {"cores": "0-3", "gpus": "0"}}
    assert moved["epoch"] == 1


@pytest.mark.parametrize("topology, expected", [
    ("kary:2", {1: 0, 2: 0, 3: 1, 4: 1, 5: 2, 6: 2, 7: 3}),
    ("kary:1", {1: 0, 2: 1, 3: 2}),
    ("kary:16", {1: 0, 16: 0, 17: 1, 33: 2}),
    ("kary:0", {1: 0, 2: 0, 7: 0, 100: 0}),
    ("binomial", {1: 0, 2: 0, 3: 2, 4: 0, 5: 4, 6: 4, 7: 6}),
])
def test_parent_rank_follows_flux_cores_topology_plugins(nw, topology, expected):
    assert {r: nw.parent_rank(r, topology) for r in expected} == expected
    assert nw.parent_rank(0, topology) is None


def test_lead_r_has_every_rank_real_shapes_for_held_and_spares_for_free(nw):
    ranks = grow(nw, ["w1", "w2"])
    ranks["slots"]["1"]["shape"] = {"cores": "0-3", "gpus": "0-1"}
    slots = rv1_slots(nw.lead_r(ranks, SETTINGS))
    assert [s[1] for s in slots] == [f"fluxnode{i}" for i in range(8)]
    assert slots[0][2:] == ("0-7", "") and slots[1][2:] == ("0-3", "0-1")
    assert all(s[2:] == ("0-7", "") for s in slots[2:]), "spares default to the lead's shape"
    spare = rv1_slots(nw.lead_r(ranks, {**SETTINGS, "spareCores": 2, "spareGpus": 1}))
    assert spare[5][2:] == ("0-1", "0")


def test_shapes_known_waits_only_for_live_nodes(nw):
    ranks = nw.plan(None, live("w1", "w2"), "w1", CORES8, SETTINGS)
    ranks = nw.plan(ranks, live("w1", "w2"), "w2", None, SETTINGS)
    assert not nw.shapes_known(ranks, live("w1", "w2"))
    assert nw.shapes_known(ranks, live("w1")), "a node that went away is not waited for"


# -- broker config and restarts ------------------------------------------------------------------

def with_r(nw, ranks):
    ranks = dict(ranks)
    ranks["R"] = nw.lead_r(ranks, SETTINGS)
    return ranks


def test_bootstrap_config_is_flux_toml_with_every_rank(nw):
    ranks = with_r(nw, grow(nw, ["w1", "w2", "w3"]))
    ident = nw.broker_identity(ranks, 2, SETTINGS, "pk")
    config = tomllib.loads(nw.bootstrap_toml(ranks, 2, SETTINGS, ident))
    assert problems(config) == [] and host_count(config) == 8
    hosts = config["bootstrap"]["hosts"]
    assert [h["host"] for h in hosts[:3]] == ["fluxnode0", "fluxnode1", "fluxnode2"]
    assert hosts[1]["connect"] == "tcp://10.0.0.2:8050" and hosts[1]["bind"] == "tcp://*:8050"
    assert hosts[5]["connect"] == f"tcp://{nw.UNHELD_ADDRESS}:8050", "free ranks go nowhere"
    assert config["tbon"]["topo"] == "kary:2"
    assert "path" not in config["resource"], "only the lead is configured with R"
    assert config["resource"]["verify"]["hostname"] == "ignore"
    assert "noverify" not in config["resource"]
    lead = tomllib.loads(nw.bootstrap_toml(ranks, 0, SETTINGS, ident))
    assert lead["resource"]["path"] == "/etc/fluxinfra/R.json"


def test_ipv6_addresses_turn_on_ipv6(nw):
    ranks = nw.plan(None, {"w1": "fd00::1"}, "w1", CORES8, SETTINGS)
    config = tomllib.loads(nw.bootstrap_toml(with_r(nw, ranks), 0, SETTINGS, {}))
    assert config["bootstrap"]["enable_ipv6"] is True
    assert config["bootstrap"]["hosts"][0]["connect"] == "tcp://[fd00::1]:8050"


def test_identity_changes_on_epoch_rank_and_parent_not_on_other_joins(nw):
    ranks = with_r(nw, grow(nw, ["w1", "w2", "w3", "w4"]))       # kary:2: 3's parent is 1
    before = nw.broker_identity(ranks, 3, SETTINGS, "pk")
    joined = nw.plan(ranks, live("w1", "w2", "w3", "w4", "w5"), "w5", CORES8, SETTINGS)
    assert nw.broker_identity(joined, 3, SETTINGS, "pk") == before, "a join restarts no one"
    moved_parent = nw.plan(ranks, {**live("w1", "w2", "w3", "w4"), "w2": "10.1.1.1"}, "w2",
                           CORES8, SETTINGS)
    assert nw.broker_identity(moved_parent, 3, SETTINGS, "pk") != before
    assert nw.broker_identity(ranks, 3, SETTINGS, "rotated") != before
    assert nw.broker_identity(ranks, 3, {**SETTINGS, "brokerDigest": "b2"}, "pk") != before


@pytest.fixture
def node_root(tmp_path):
    (tmp_path / "etc/fluxinfra/conf.d").mkdir(parents=True)
    return tmp_path


def test_sync_restarts_only_when_the_identity_changes(nw, node_root):
    calls = []

    def start(settings, action):
        calls.append(action)

    ranks = with_r(nw, grow(nw, ["w1", "w2"]))
    sync = lambda r, me="w2": nw.sync_broker(r, me, SETTINGS, root=str(node_root),  # noqa: E731
                                             start=start, public_key="pk")
    assert sync(ranks) == "restarted"
    assert sync(ranks) == "ensured"
    assert sync(nw.plan(ranks, live("w1", "w2", "w3"), "w3", CORES8, SETTINGS)) == "ensured"
    lead_gone = nw.plan(ranks, live("w2"), "w2", CORES8, SETTINGS)
    assert sync(lead_gone) == "waiting", "the new lead waits for the epoch's R"
    assert sync(with_r(nw, lead_gone)) == "restarted"
    assert calls == ["restart", "ensure", "ensure", "restart"]
    etc = node_root / "etc/fluxinfra"
    assert (etc / "broker.env").read_text() == "BROKER_HOSTNAME=fluxnode0\nLEAD_EPOCH=2\n"
    assert json.loads((etc / "R.json").read_text())["version"] == 1
    assert not list((etc / "conf.d").glob("*.tmp"))


def test_the_lead_waits_for_r_and_a_node_without_rank_waits(nw, node_root):
    ranks = nw.plan(None, live("w1"), "w1", CORES8, SETTINGS)
    assert nw.sync_broker(ranks, "w1", SETTINGS, root=str(node_root),
                          start=lambda s, a: None) == "waiting"
    assert nw.sync_broker(ranks, "w9", SETTINGS, root=str(node_root),
                          start=lambda s, a: None) == "no-rank"


class Store:
    """A double of the rank map ConfigMap's API semantics (read returns the object and its
    resourceVersion; a write over a stale version is a 409): the loop against the HTTPS
    stand-in below, and the real API server in tests/e2e, exercise the real client."""

    def __init__(self, nw):
        self.nw, self.obj, self.version, self.writes = nw, None, 0, 0
        self.race = None   # called once before a write, to let another writer in first

    def read(self):
        return (json.loads(json.dumps(self.obj)) if self.obj else None,
                None if self.obj is None else str(self.version))

    def write(self, ranks, version):
        if self.race:
            race, self.race = self.race, None
            race()
        if (version is None) != (self.obj is None) or (version and int(version) != self.version):
            raise self.nw.Conflict("stale")
        self.obj, self.version, self.writes = ranks, self.version + 1, self.writes + 1


def test_reconcile_retries_a_lost_compare_and_swap_and_keeps_both_claims(nw):
    store = Store(nw)
    nw.reconcile(store, live("w1", "w2", "w3"), "w1", CORES8, SETTINGS)
    store.race = lambda: nw.reconcile(store, live("w1", "w2", "w3"), "w2", CORES8, SETTINGS)
    ranks = nw.reconcile(store, live("w1", "w2", "w3"), "w3", CORES8, SETTINGS)
    assert held(ranks) == {0: "w1", 1: "w2", 2: "w3"} and store.writes == 3


def test_reconcile_writes_the_leads_r_when_asked(nw):
    store = Store(nw)
    ranks = nw.reconcile(store, live("w1"), "w1", CORES8, SETTINGS, lambda r: False)
    assert ranks["R"] is None
    ranks = nw.reconcile(store, live("w1"), "w1", CORES8, SETTINGS, lambda r: True)
    assert rv1_slots(ranks["R"])[0] == (0, "fluxnode0", "0-7", "")
    assert nw.reconcile(store, live("w1"), "w1", CORES8, SETTINGS, lambda r: True) == ranks


def test_host_target_is_a_pid_or_a_process_of_a_name_preferring_this_nodes(nw, tmp_path):
    for pid, comm, args in ((12, "kubelet", "--hostname-override=bed2-node"),
                            (7, "kubelet", "--hostname-override=bed1-node"), (3, "sshd", "-D")):
        (tmp_path / str(pid)).mkdir()
        (tmp_path / str(pid) / "comm").write_text(comm + "\n")
        (tmp_path / str(pid) / "cmdline").write_bytes(f"/bin/{comm}\0{args}\0".encode())
    assert nw.host_target({"hostTarget": "1"}, str(tmp_path)) == "1"
    assert nw.host_target({"hostTarget": "kubelet"}, str(tmp_path), node="x") == "7", "oldest"
    assert nw.host_target({"hostTarget": "kubelet"}, str(tmp_path), node="bed2-node") == "12"
    with pytest.raises(RuntimeError, match="'containerd': no such process"):
        nw.host_target({"hostTarget": "containerd"}, str(tmp_path))


def test_a_failed_install_says_why_in_the_termination_log_and_exits(nw, tmp_path, monkeypatch):
    monkeypatch.setattr(nw, "HEARTBEAT", str(tmp_path / "alive"))
    monkeypatch.setattr(nw, "TERMINATION_LOG", str(tmp_path / "termination-log"))

    def install(settings):
        raise nw.InstallFailed("flux-install.sh exited 1: flux-install: conda solve failed")

    with pytest.raises(SystemExit):
        nw.prepare(SETTINGS, install_fn=install, shape_fn=lambda s: CORES8)
    assert "conda solve failed" in (tmp_path / "termination-log").read_text()
    assert nw.prepare(SETTINGS, install_fn=lambda s: None, shape_fn=lambda s: CORES8) == CORES8


class FakeApi:
    """Answers pre_stop's two reads like the API server would."""

    def __init__(self, node_obj, ds_deleting=False, ds_missing=False):
        self.node_obj, self.ds_deleting, self.ds_missing = node_obj, ds_deleting, ds_missing

    def json(self, method, path, body=None):
        import urllib.error
        if "/nodes/" in path:
            return self.node_obj
        if self.ds_missing:
            raise urllib.error.HTTPError(path, 404, "not found", None, None)
        meta = {"deletionTimestamp": "2026-01-01T00:00:00Z"} if self.ds_deleting else {}
        return {"metadata": meta}


@pytest.mark.parametrize("api, expected", [
    (FakeApi(node("w1")), "kept"),                                 # rolling update / restart
    (FakeApi(node("w1", labels={"flux": "no"})), "stopped"),       # the node leaves
    (FakeApi(node("w1"), ds_deleting=True), "stopped"),            # pulumi destroy
    (FakeApi(node("w1"), ds_missing=True), "stopped"),
], ids=["update", "leaves", "uninstall", "gone"])
def test_pre_stop_stops_the_broker_only_when_the_node_leaves_the_instance(nw, api, expected):
    actions = []
    got = nw.pre_stop(SETTINGS, api, "w1", "ns", start=lambda s, a: actions.append(a))
    assert got == expected and actions == (["stop"] if expected == "stopped" else [])


# -- the loop against an HTTPS stand-in for the API server ----------------------------------------

class Stop(Exception):
    """Raised by the fake flux-start to end node-watch's endless loop."""


def self_signed(tmp_path):
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kubernetes")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(1)
            .not_valid_before(now - datetime.timedelta(minutes=1))
            .not_valid_after(now + datetime.timedelta(hours=1))
            .add_extension(x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    (tmp_path / "ca.crt").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (tmp_path / "key.pem").write_bytes(key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption()))
    (tmp_path / "token").write_text("t0ken\n")
    return tmp_path


@pytest.fixture
def api_server(tmp_path):
    """A stand-in API server (named as such: the real one is in tests/e2e): GET /api/v1/nodes
    (a list) and watch streams, one per entry of ``watches`` (later watches see no events),
    and the rank map ConfigMap with real resourceVersion semantics (POST creates, 409 if it
    exists; PUT replaces, 409 on a stale version). Records the requests."""
    import ssl
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    (tmp_path / "sa").mkdir()
    sa = self_signed(tmp_path / "sa")
    seen = []
    state = {"cm": None, "version": 100}
    watches = [[
        {"type": "ADDED", "object": {**node("w3", "10.0.0.3"),
                                     "metadata": {**node("w3")["metadata"],
                                                  "resourceVersion": "11"}}},
        {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "12"}}},
    ]]
    cm_path = "/api/v1/namespaces/ns/configmaps"

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def reply(self, code, obj):
            body = json.dumps(obj).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self):  # noqa: N802 (http.server's name)
            seen.append(("GET", self.path, self.headers.get("Authorization")))
            if self.path == f"{cm_path}/fi-ranks":
                if state["cm"] is None:
                    return self.reply(404, {"kind": "Status", "code": 404})
                return self.reply(200, state["cm"])
            if "watch=1" in self.path:
                events = watches.pop(0) if watches else []
                body = b"".join(json.dumps(e).encode() + b"\n" for e in events)
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
                return None
            items = [{**node(n, ip), "metadata": {**node(n)["metadata"], "resourceVersion": "5"}}
                     for n, ip in (("w2", "10.0.0.2"), ("w1", "10.0.0.1"))]
            return self.reply(200, {"items": items, "metadata": {"resourceVersion": "10"}})

        def write(self, method):
            obj = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            seen.append((method, self.path, obj))
            version = obj["metadata"].get("resourceVersion")
            if (method == "POST") != (state["cm"] is None) or (
                    method == "PUT" and version != state["cm"]["metadata"]["resourceVersion"]):
                return self.reply(409, {"kind": "Status", "code": 409, "reason": "Conflict"})
            state["version"] += 1
            obj["metadata"]["resourceVersion"] = str(state["version"])
            state["cm"] = obj
            return self.reply(201 if method == "POST" else 200, obj)

        def do_POST(self):  # noqa: N802
            self.write("POST")

        def do_PUT(self):  # noqa: N802
            self.write("PUT")

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(sa / "ca.crt", sa / "key.pem")
    server.socket = ctx.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1], sa, seen, watches, state
    server.shutdown()


def run_loop(nw, api_server, tmp_path, monkeypatch, me, stop_after, shape=CORES8):
    port, sa, seen, watches, state = api_server
    monkeypatch.setattr(nw, "HEARTBEAT", str(tmp_path / "alive"))
    (tmp_path / "etc/fluxinfra/conf.d").mkdir(parents=True, exist_ok=True)
    (tmp_path / "curve.cert").write_text(derive_cluster_keys(b"k" * 32, "t").curve_cert)
    actions = []

    def start(settings, action):
        actions.append(action)
        if len(actions) == stop_after:
            raise Stop

    api = nw.Api(host="127.0.0.1", port=str(port), sa_dir=str(sa))
    with pytest.raises(Stop):
        nw.run({**SETTINGS, "keysDir": str(tmp_path)}, api=api, me=me, root=str(tmp_path),
               start=start, namespace="ns", prepare_fn=lambda s: shape)
    return actions


def test_the_loop_claims_leads_fixes_r_and_starts_the_broker(nw, api_server, tmp_path,
                                                            monkeypatch):
    _, _, seen, _, state = api_server
    actions = run_loop(nw, api_server, tmp_path, monkeypatch, "w1", stop_after=2)
    assert actions == ["restart", "ensure"], "w3's join (a watch event) restarts nothing"
    ranks = json.loads(state["cm"]["data"]["ranks.json"])
    assert held(ranks) == {0: "w1"} and ranks["R"] is not None
    methods = [m for m, *_ in seen if m != "GET"]
    assert methods[0] == "POST" and set(methods[1:]) == {"PUT"}
    config = tomllib.loads((tmp_path / "etc/fluxinfra/conf.d/bootstrap.toml").read_text())
    assert config["resource"]["path"] == "/etc/fluxinfra/R.json"
    assert (tmp_path / "alive").exists()


def test_the_loop_relists_when_the_resource_version_is_gone(nw, api_server, tmp_path,
                                                           monkeypatch):
    _, _, seen, watches, _ = api_server
    gone = {"type": "ERROR", "object": {"kind": "Status", "code": 410, "message": "too old"}}
    watches.insert(0, [gone])
    actions = run_loop(nw, api_server, tmp_path, monkeypatch, "w1", stop_after=2)
    assert actions == ["restart", "ensure"]
    lists = [path for method, path, _ in seen if method == "GET" and path == "/api/v1/nodes"]
    assert len(lists) == 2, seen


def test_a_node_that_is_not_first_leads_only_after_the_first_host_stays_away(nw):
    everyone = live("w1", "w2")
    first, second = nw.LeadRule("w1", 10), nw.LeadRule("w2", 10)
    assert first(everyone, now=0.0), "the first host leads at once"
    assert not second(everyone, now=100.0) and not second(everyone, now=129.0)
    assert second(everyone, now=130.0), "3 x settleSeconds later another node may lead"
    assert nw.LeadRule("w2", 10)(live("w2", "w3"), now=0.0), "w1 not eligible: w2 is first"


def test_a_second_node_takes_rank_one_and_connects_to_the_lead(nw, api_server, tmp_path,
                                                              monkeypatch):
    _, _, _, _, state = api_server
    run_loop(nw, api_server, tmp_path / "w1", monkeypatch, "w1", stop_after=1)
    run_loop(nw, api_server, tmp_path / "w2", monkeypatch, "w2", stop_after=1)
    ranks = json.loads(state["cm"]["data"]["ranks.json"])
    assert held(ranks) == {0: "w1", 1: "w2"}
    config = tomllib.loads((tmp_path / "w2/etc/fluxinfra/conf.d/bootstrap.toml").read_text())
    assert config["bootstrap"]["hosts"][0]["connect"] == "tcp://10.0.0.1:8050"
    env = (tmp_path / "w2/etc/fluxinfra/broker.env").read_text()
    assert env == "BROKER_HOSTNAME=fluxnode1\nLEAD_EPOCH=\n"
