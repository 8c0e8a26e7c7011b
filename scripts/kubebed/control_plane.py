"""The control plane: etcd, kube-apiserver, kube-controller-manager and (optionally)
kube-scheduler, from the binaries ``layout.find_binary`` finds, on the bed's own address and
ports.

The API server listens on the bed's node address (``192.0.2.(100+s)`` on ``lo``) rather than
127.0.0.1: it refuses to publish a loopback address in the ``kubernetes`` Endpoints, and pods on
the real node reach it there. Everything else listens on 127.0.0.1.
"""

from __future__ import annotations

import contextlib
import json
import ssl
import urllib.request
from pathlib import Path

from .layout import Layout, require_binary
from .pki import CertificateAuthority, kubeconfig, service_account_keys
from .procs import CommandError, Proc, launch, wait_until
from .rest import ApiStatus, Rest

__all__ = ["ControlPlane", "make_pki"]

#: What each controller-manager client and the kubelet call themselves.
ADMIN_USER = "fluxinfra-bed-admin"


def make_pki(layout: Layout) -> dict[str, str]:
    """Certificates, keys and kubeconfigs under ``<state>/pki`` and ``<state>/kubeconfig``;
    returns the paths the components need by name."""
    pki = layout.state / "pki"
    conf = layout.state / "kubeconfig"
    conf.mkdir(parents=True, exist_ok=True)
    ca = CertificateAuthority.create(f"fluxinfra-bed-{layout.name}-ca")
    front_ca = CertificateAuthority.create(f"fluxinfra-bed-{layout.name}-front-proxy-ca")
    paths = {"ca": str(ca.write(pki, "ca")), "ca_key": str(pki / "ca.key"),
             "front_proxy_ca": str(front_ca.write(pki, "front-proxy-ca"))}
    server_names = ("kubernetes", "kubernetes.default", "kubernetes.default.svc",
                    "kubernetes.default.svc.cluster.local", "localhost")
    leaves = {
        "apiserver": ca.issue("kube-apiserver", server=True, dns=server_names,
                              ips=(layout.node_ip, "127.0.0.1", layout.service_ip)),
        "apiserver-kubelet-client": ca.issue("kube-apiserver-kubelet-client", client=True,
                                             organizations=("system:masters",)),
        "admin": ca.issue(ADMIN_USER, client=True, organizations=("system:masters",)),
        "controller-manager": ca.issue("system:kube-controller-manager", client=True),
        "scheduler": ca.issue("system:kube-scheduler", client=True),
        "kubelet": ca.issue(f"system:node:{layout.node_name}", client=True,
                            organizations=("system:nodes",)),
        "kubelet-serving": ca.issue(layout.node_name, server=True,
                                    dns=(layout.node_name, "localhost"),
                                    ips=(layout.node_ip, "127.0.0.1")),
        "front-proxy-client": front_ca.issue("front-proxy-client", client=True),
    }
    for stem, pair in leaves.items():
        paths[stem] = str(pair.write(pki, stem))
        paths[f"{stem}_key"] = str(pki / f"{stem}.key")
    paths["sa_key"], paths["sa_pub"] = map(str, service_account_keys(pki))
    for user, stem in (("admin", "admin"), ("system:kube-controller-manager", "controller-manager"),
                       ("system:kube-scheduler", "scheduler"),
                       (f"system:node:{layout.node_name}", "kubelet")):
        paths[f"{stem}_kubeconfig"] = str(kubeconfig(
            conf / f"{stem}.kubeconfig", server=layout.server, ca=ca, user=user,
            client=leaves[stem], cluster=f"bed-{layout.name}"))
    return paths


class ControlPlane:
    """Starts the control-plane processes one after another, each waited for."""

    def __init__(self, layout: Layout, pki: dict[str, str], *,
                 node_monitor_grace: int = 40) -> None:
        self.layout = layout
        self.pki = pki
        self.logs = layout.state / "logs"
        self.node_monitor_grace = node_monitor_grace

    def admin(self) -> Rest:
        return Rest(self.layout.server, self.pki["ca"], self.pki["admin"],
                    self.pki["admin_key"], timeout=10)

    def start_etcd(self) -> Proc:
        lay = self.layout
        Path(lay.etcd_dir).mkdir(parents=True, mode=0o700, exist_ok=True)
        client = f"http://127.0.0.1:{lay.ports['etcd']}"
        peer = f"http://127.0.0.1:{lay.ports['etcd_peer']}"
        proc = launch("etcd", [
            require_binary("etcd"), "--name", "bed", "--data-dir", lay.etcd_dir,
            "--listen-client-urls", client, "--advertise-client-urls", client,
            "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
            "--initial-cluster", f"bed={peer}", "--initial-cluster-state", "new",
            "--listen-metrics-urls", "", "--logger", "zap", "--log-outputs", "stderr",
        ], self.logs)
        self._wait(proc, lambda: _http_ok(f"{client}/health"), 30)
        return proc

    def audit_policy(self) -> Path:
        """Log every request a workload's ServiceAccount makes (not the controllers' own, in
        kube-system): what the e2e suite checks each component's RBAC against."""
        path = self.layout.state / "audit-policy.yaml"
        path.write_text(json.dumps({
            "apiVersion": "audit.k8s.io/v1", "kind": "Policy",
            "omitStages": ["RequestReceived"],
            "rules": [{"level": "None", "userGroups": ["system:serviceaccounts:kube-system"]},
                      {"level": "Metadata", "userGroups": ["system:serviceaccounts"]},
                      {"level": "None"}],
        }, indent=1))
        return path

    def start_apiserver(self) -> Proc:
        lay, p = self.layout, self.pki
        proc = launch("kube-apiserver", [
            require_binary("kube-apiserver"),
            f"--etcd-servers=http://127.0.0.1:{lay.ports['etcd']}",
            f"--bind-address={lay.node_ip}", f"--advertise-address={lay.node_ip}",
            f"--secure-port={lay.ports['apiserver']}",
            f"--service-cluster-ip-range={lay.service_cidr}",
            "--authorization-mode=Node,RBAC", "--enable-admission-plugins=NodeRestriction",
            "--allow-privileged=true",
            f"--client-ca-file={p['ca']}",
            f"--tls-cert-file={p['apiserver']}", f"--tls-private-key-file={p['apiserver_key']}",
            f"--kubelet-client-certificate={p['apiserver-kubelet-client']}",
            f"--kubelet-client-key={p['apiserver-kubelet-client_key']}",
            f"--kubelet-certificate-authority={p['ca']}",
            "--kubelet-preferred-address-types=InternalIP,Hostname",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-account-key-file={p['sa_pub']}",
            f"--service-account-signing-key-file={p['sa_key']}",
            f"--requestheader-client-ca-file={p['front_proxy_ca']}",
            "--requestheader-allowed-names=front-proxy-client",
            "--requestheader-username-headers=X-Remote-User",
            "--requestheader-group-headers=X-Remote-Group",
            "--requestheader-extra-headers-prefix=X-Remote-Extra-",
            f"--proxy-client-cert-file={p['front-proxy-client']}",
            f"--proxy-client-key-file={p['front-proxy-client_key']}",
            f"--cert-dir={lay.state / 'apiserver-certs'}", "--profiling=false",
            # Webhooks and aggregated APIs are called at their endpoints' pod addresses, which
            # this machine routes to the bed's bridge (a ClusterIP it does not route).
            "--enable-aggregator-routing=true",
            f"--audit-policy-file={self.audit_policy()}",
            f"--audit-log-path={self.logs / 'audit.log'}",
        ], self.logs)
        rest = self.admin()
        self._wait(proc, lambda: _ready(rest), 120)
        return proc

    def _controller(self, binary: str, stem: str, port: str, extra: list[str]) -> Proc:
        """kube-controller-manager or kube-scheduler: a kubeconfig client of the API server
        with a health endpoint on 127.0.0.1."""
        conf = self.pki[f"{stem}_kubeconfig"]
        proc = launch(binary, [
            require_binary(binary),
            f"--kubeconfig={conf}", f"--authentication-kubeconfig={conf}",
            f"--authorization-kubeconfig={conf}",
            "--bind-address=127.0.0.1", f"--secure-port={self.layout.ports[port]}",
            f"--cert-dir={self.layout.state / f'{stem}-certs'}",
            "--leader-elect=false", "--profiling=false", *extra,
        ], self.logs)
        url = f"https://127.0.0.1:{self.layout.ports[port]}/healthz"
        self._wait(proc, lambda: _http_ok(url, insecure=True), 60)
        return proc

    def start_controller_manager(self) -> Proc:
        lay, p = self.layout, self.pki
        return self._controller("kube-controller-manager", "controller-manager",
                                "controller_manager", [
            f"--service-account-private-key-file={p['sa_key']}", f"--root-ca-file={p['ca']}",
            f"--cluster-signing-cert-file={p['ca']}", f"--cluster-signing-key-file={p['ca_key']}",
            "--use-service-account-credentials=true",
            "--controllers=*,bootstrapsigner,tokencleaner",
            f"--service-cluster-ip-range={lay.service_cidr}",
            f"--node-monitor-grace-period={self.node_monitor_grace}s",
        ])

    def start_scheduler(self) -> Proc:
        return self._controller("kube-scheduler", "scheduler", "scheduler", [])

    def wait_for_default_service_account(self, timeout: float = 60) -> None:
        """Pods cannot be created until the service-account controller made ``default``."""
        rest = self.admin()

        def exists() -> bool:
            try:
                rest.get("/api/v1/namespaces/default/serviceaccounts/default")
                return True
            except ApiStatus:
                return False
        if not wait_until(exists, timeout):
            raise CommandError(f"the default ServiceAccount did not appear in {timeout:.0f}s")

    @staticmethod
    def _wait(proc: Proc, predicate, timeout: float) -> None:
        """Wait until ``predicate()`` holds for the just launched ``proc``. A process that is
        not ready in time, or whose wait is cut short (a signal ending the caller, Ctrl-C), is
        stopped before the error goes on: the bed records a process only once it is ready,
        so its teardown would not know this one."""
        def ready_or_dead() -> bool:
            if not proc.alive():
                raise CommandError(f"{proc.name} exited; last log lines:\n{proc.log_tail()}")
            return bool(predicate())
        try:
            if not wait_until(ready_or_dead, timeout):
                raise CommandError(f"{proc.name} not ready after {timeout:.0f}s; last log "
                                   f"lines:\n{proc.log_tail()}")
        except BaseException:
            with contextlib.suppress(Exception):
                proc.stop(timeout=5)
            raise


def _http_ok(url: str, insecure: bool = False) -> bool:
    context = None
    if insecure:
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    try:
        with urllib.request.urlopen(url, timeout=2, context=context) as resp:
            return resp.status == 200
    except OSError:
        return False


def _ready(rest: Rest) -> bool:
    try:
        return rest.get_text("/readyz").strip() == "ok"
    except (ApiStatus, OSError):
        rest.close()
        return False
