"""node-watch (the installer's join/leave loop): which nodes get a broker, in which rank order,
and the bootstrap config it writes. Loaded from the template file the ConfigMap ships."""

import importlib.util
import tomllib
from pathlib import Path

import pytest

import fluxinfra
from fluxinfra.secrets import derive_cluster_keys

SCRIPT = Path(fluxinfra.__file__).parent / "templates" / "node-watch.py"
SETTINGS = {"nodeSelector": {"flux": "yes"}, "tolerations": [], "brokerPort": 8050,
            "topology": "kary:2", "settleSeconds": 0, "etcDir": "/etc/fluxinfra",
            "libDir": "/var/lib/fluxinfra"}


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


def names(hosts):
    return [h["name"] for h in hosts]


def test_ranks_follow_sorted_node_names(nw):
    hosts = nw.broker_hosts([node("w3", "10.0.0.3"), node("w1", "10.0.0.1"),
                             node("w2", "10.0.0.2")], SETTINGS)
    assert names(hosts) == ["w1", "w2", "w3"]


def test_selector_taints_and_deletion_exclude_nodes(nw):
    nodes = [node("a"), node("b", labels={"flux": "no"}),
             node("c", taints=[{"key": "node-role.kubernetes.io/control-plane",
                                "effect": "NoSchedule"}]),
             node("d", deleting=True),
             node("e", taints=[{"key": "node.kubernetes.io/not-ready", "effect": "NoExecute"}]),
             node("f", taints=[{"key": "soft", "effect": "PreferNoSchedule"}])]
    assert names(nw.broker_hosts(nodes, SETTINGS)) == ["a", "e", "f"]


def test_tolerations_let_tainted_nodes_in(nw):
    taint = [{"key": "hpc", "value": "true", "effect": "NoSchedule"}]
    settings = {**SETTINGS, "tolerations": [{"key": "hpc", "operator": "Equal",
                                             "value": "true", "effect": "NoSchedule"}]}
    assert names(nw.broker_hosts([node("t", taints=taint)], settings)) == ["t"]
    exists_any = {**SETTINGS, "tolerations": [{"operator": "Exists"}]}
    assert names(nw.broker_hosts([node("t", taints=taint)], exists_any)) == ["t"]
    assert names(nw.broker_hosts([node("t", taints=taint)], SETTINGS)) == []


def test_a_joining_node_changes_the_host_list_and_a_leaving_one_too(nw):
    before = nw.broker_hosts([node("w1"), node("w2")], SETTINGS)
    joined = nw.broker_hosts([node("w1"), node("w2"), node("w0")], SETTINGS)
    left = nw.broker_hosts([node("w2")], SETTINGS)
    assert names(joined) == ["w0", "w1", "w2"] and joined != before
    assert names(left) == ["w2"]


def test_bootstrap_config_is_valid_toml_in_rank_order(nw):
    hosts = nw.broker_hosts([node("w2", "10.0.0.2"), node("w1", "fd00::1")], SETTINGS)
    config = tomllib.loads(nw.bootstrap_toml(hosts, SETTINGS))
    boot = config["bootstrap"]
    assert boot["curve_cert"] == "/etc/fluxinfra/curve.cert"
    assert [h["host"] for h in boot["hosts"]] == ["w1", "w2"]
    assert boot["hosts"][0]["connect"] == "tcp://[fd00::1]:8050"
    assert boot["hosts"][1]["connect"] == "tcp://10.0.0.2:8050"
    assert config["tbon"]["topo"] == "kary:2"
    assert boot["enable_ipv6"] is True
    v4_only = tomllib.loads(nw.bootstrap_toml(hosts[1:], SETTINGS))
    assert "enable_ipv6" not in v4_only["bootstrap"]


def test_dual_stack_node_uses_its_first_internal_ip(nw):
    dual = node("d", "10.0.0.7")
    dual["status"]["addresses"].append({"type": "InternalIP", "address": "fd00::7"})
    assert nw.broker_hosts([dual], SETTINGS)[0]["address"] == "10.0.0.7"


def test_node_without_internal_ip_gets_no_rank(nw):
    bare = node("x")
    bare["status"]["addresses"] = []
    assert nw.broker_hosts([bare, node("y")], SETTINGS)[0]["name"] == "y"


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
    assert names(members.hosts()) == ["w2"]


def test_sync_restarts_only_when_the_config_changes(nw, tmp_path):
    (tmp_path / "etc/fluxinfra/conf.d").mkdir(parents=True)
    calls = []

    def start(settings, action):
        calls.append(action)

    hosts = nw.broker_hosts([node("w1"), node("w2", "10.0.0.2")], SETTINGS)
    assert nw.sync_broker(hosts, SETTINGS, root=str(tmp_path), start=start) == "restarted"
    assert nw.sync_broker(hosts, SETTINGS, root=str(tmp_path), start=start) == "ensured"
    fewer = hosts[:1]
    assert nw.sync_broker(fewer, SETTINGS, root=str(tmp_path), start=start) == "restarted"
    assert nw.sync_broker(fewer, SETTINGS, root=str(tmp_path), start=start,
                          public_key="rotated") == "restarted"
    assert nw.sync_broker(fewer, SETTINGS, root=str(tmp_path), start=start,
                          public_key="rotated", scripts="new-digest") == "restarted"
    assert calls == ["restart", "ensure", "restart", "restart", "restart"]
    written = (tmp_path / "etc/fluxinfra/conf.d/bootstrap.toml").read_text()
    assert written == nw.bootstrap_toml(fewer, SETTINGS, "rotated", "new-digest")
    assert not list((tmp_path / "etc/fluxinfra/conf.d").glob("*.tmp"))


# -- the watch loop against a local HTTPS stand-in for the API server ----------------------------

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
    """Serves GET /api/v1/nodes (a list) and watch streams, one per entry of ``watches`` (the
    test may replace it; later watches see no events); records the requests."""
    import json
    import ssl
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    (tmp_path / "sa").mkdir()
    sa = self_signed(tmp_path / "sa")
    seen = []
    watches = [[
        {"type": "ADDED", "object": {**node("w3", "10.0.0.3"),
                                     "metadata": {**node("w3")["metadata"],
                                                  "resourceVersion": "11"}}},
        {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "12"}}},
    ]]

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_GET(self):  # noqa: N802 (http.server's name)
            seen.append((self.path, self.headers.get("Authorization")))
            if "watch=1" in self.path:
                events = watches.pop(0) if watches else []
                body = b"".join(json.dumps(e).encode() + b"\n" for e in events)
            else:
                items = [{**node(n, ip), "metadata": {**node(n)["metadata"],
                                                      "resourceVersion": "5"}}
                         for n, ip in (("w2", "10.0.0.2"), ("w1", "10.0.0.1"))]
                body = json.dumps({"items": items, "metadata": {"resourceVersion": "10"}}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(sa / "ca.crt", sa / "key.pem")
    server.socket = ctx.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1], sa, seen, watches
    server.shutdown()


def test_watch_loop_restarts_the_broker_when_a_node_joins(nw, api_server, tmp_path,
                                                         monkeypatch):
    port, sa, seen, _ = api_server
    monkeypatch.setattr(nw, "HEARTBEAT", str(tmp_path / "alive"))
    (tmp_path / "etc/fluxinfra/conf.d").mkdir(parents=True)
    actions = []

    def start(settings, action):
        actions.append(action)
        if len(actions) == 2:
            raise Stop

    keys = derive_cluster_keys(b"k" * 32, "t")
    (tmp_path / "curve.cert").write_text(keys.curve_cert)
    settings = {**SETTINGS, "keysDir": str(tmp_path)}
    api = nw.Api(host="127.0.0.1", port=str(port), sa_dir=str(sa))
    with pytest.raises(Stop):
        nw.run(settings, api=api, me="w1", root=str(tmp_path), start=start)
    assert actions == ["restart", "restart"]
    config = tomllib.loads((tmp_path / "etc/fluxinfra/conf.d/bootstrap.toml").read_text())
    assert [h["host"] for h in config["bootstrap"]["hosts"]] == ["w1", "w2", "w3"]
    text = (tmp_path / "etc/fluxinfra/conf.d/bootstrap.toml").read_text()
    assert f"# CURVE public key: {keys.curve.public}" in text and keys.curve.secret not in text
    assert seen[0] == ("/api/v1/nodes", "Bearer t0ken")
    assert "watch=1" in seen[1][0] and "resourceVersion=10" in seen[1][0]
    assert (tmp_path / "alive").exists()


def test_brokers_bind_every_interface_as_zeromq_spells_it(nw):
    config = tomllib.loads(nw.bootstrap_toml(nw.broker_hosts([node("w1")], SETTINGS), SETTINGS))
    assert config["bootstrap"]["hosts"][0]["bind"] == "tcp://*:8050"


def test_watch_loop_relists_when_the_resource_version_is_gone(nw, api_server, tmp_path,
                                                             monkeypatch):
    port, sa, seen, watches = api_server
    monkeypatch.setattr(nw, "HEARTBEAT", str(tmp_path / "alive"))
    gone = {"type": "ERROR", "object": {"kind": "Status", "code": 410, "message": "too old"}}
    watches.insert(0, [gone])
    (tmp_path / "etc/fluxinfra/conf.d").mkdir(parents=True)
    (tmp_path / "curve.cert").write_text(derive_cluster_keys(b"k" * 32, "t").curve_cert)
    actions = []

    def start(settings, action):
        actions.append(action)
        if len(actions) == 3:
            raise Stop

    api = nw.Api(host="127.0.0.1", port=str(port), sa_dir=str(sa))
    with pytest.raises(Stop):
        nw.run({**SETTINGS, "keysDir": str(tmp_path)}, api=api, me="w1", root=str(tmp_path),
               start=start)
    # first config, then after the 410 a relist (config unchanged: only ensure), then w3 joins
    assert actions == ["restart", "ensure", "restart"]
    lists = [path for path, _ in seen if "watch=1" not in path]
    assert len(lists) == 2, seen
