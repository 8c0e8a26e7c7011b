"""Component tests under Pulumi mocks: what each component declares, checked once every child
is registered (``Output.all(urns).apply(check)``); assertion messages name the URN."""

import base64
import tomllib

import pulumi
import yaml

from fluxinfra.k8s.cluster import Cluster, ClusterArgs
from fluxinfra.k8s.fluxion_service import FluxionService, FluxionServiceArgs
from fluxinfra.k8s.installer import FluxInstaller, FluxInstallerArgs
from fluxinfra.k8s.minicluster import MiniCluster, MiniClusterArgs
from fluxinfra.k8s.scheduler import FluxScheduler, FluxSchedulerArgs
from fluxinfra.secrets import parse_curve_cert

IMAGE = "localhost/fluxinfra:0.1.0"


def when_registered(component, check):
    """Run ``check(urns)`` (urns: child name -> URN) after all children are registered."""
    names = list(component.resources)
    return pulumi.Output.all(*[component.resources[n].urn for n in names]).apply(
        lambda urns: check(dict(zip(names, urns, strict=True))))


def manifest(recorded, name):
    return recorded[name][1]


def pod_spec(obj):
    return obj["spec"]["template"]["spec"]


@pulumi.runtime.test
def test_kind_cluster_is_a_command_with_create_and_delete(recorded):
    cluster = Cluster("kc", ClusterArgs(mode="kind", name="devkind", workers=3,
                                        load_images=[IMAGE]))

    def check(_):
        typ, cmd = recorded["kc-kind"]
        urn = "command:local:Command kc-kind"
        assert typ == "command:local:Command", urn
        assert "kind create cluster --name devkind" in cmd["create"], urn
        assert cmd["delete"] == "kind delete cluster --name devkind", urn
        config = yaml.safe_load(cmd["stdin"])
        roles = [n["role"] for n in config["nodes"]]
        assert roles == ["control-plane", "worker", "worker", "worker"], urn
        assert all("@sha256:" in n["image"] for n in config["nodes"]), f"{urn}: node image pinned"
        assert recorded["kc-provider"][0] == "pulumi:providers:kubernetes"
        load = recorded["kc-load-0"][1]["create"]
        assert "kind load image-archive" in load and "--name devkind" in load, "kc-load-0"
        assert "save -o" in load and IMAGE in load, "kc-load-0"

    return pulumi.Output.all(cluster.provider.urn, cluster.kubeconfig).apply(check)


@pulumi.runtime.test
def test_existing_cluster_is_just_a_provider(recorded):
    cluster = Cluster("ec", ClusterArgs(mode="existing", kubeconfig="/k/config", context="prod"))

    def check(_):
        typ, provider = recorded["ec-provider"]
        assert typ == "pulumi:providers:kubernetes"
        assert provider["kubeconfig"] == "/k/config" and provider["context"] == "prod", provider
        assert "ec-kind" not in recorded

    return cluster.provider.urn.apply(check)


@pulumi.runtime.test
def test_installer_rbac_privileges_and_secret_handling(recorded):
    args = FluxInstallerArgs(node_selector={"hpc": "yes"},
                             tolerations=[{"key": "hpc", "operator": "Exists"}])
    inst = FluxInstaller("fi", args)

    def check(urns):
        role = manifest(recorded, "fi-clusterrole")
        assert role["rules"] == [{"apiGroups": [""], "resources": ["nodes"],
                                  "verbs": ["get", "list", "watch"]},
                                 {"apiGroups": [""], "resources": ["pods"],
                                  "verbs": ["list", "watch"]}], urns["fi-clusterrole"]
        ns = manifest(recorded, "fi-namespace")["metadata"]["labels"]
        assert ns["pod-security.kubernetes.io/enforce"] == "privileged", urns["fi-namespace"]
        spec = pod_spec(manifest(recorded, "fi-daemonset"))
        urn = urns["fi-daemonset"]
        assert spec["hostPID"] is True, urn
        assert spec["containers"][0]["securityContext"]["privileged"] is True, urn
        assert spec["nodeSelector"] == {"hpc": "yes"}, urn
        assert spec["tolerations"] == [{"key": "hpc", "operator": "Exists"}], urn
        keys_volume = next(v for v in spec["volumes"] if "secret" in v)
        assert keys_volume["secret"]["defaultMode"] == 0o400, urn
        assert "hostNetwork" not in spec, f"{urn}: the broker needs the host network, the pod not"
        stop = spec["containers"][0]["lifecycle"]["preStop"]["exec"]["command"]
        assert stop[:3] == ["python3", "/opt/fluxinfra/scripts/node-watch.py", "--pre-stop"], \
            f"{urn}: preStop asks node-watch whether the node leaves"
        rank_map = manifest(recorded, "fi-role")
        assert rank_map["metadata"]["namespace"] == "flux-installer", urns["fi-role"]
        granted = {(g, r, v, tuple(rule.get("resourceNames", ()))) for rule in rank_map["rules"]
                   for g in rule["apiGroups"] for r in rule["resources"] for v in rule["verbs"]}
        assert granted == {("", "configmaps", "get", ("fi-ranks",)),
                           ("", "configmaps", "update", ("fi-ranks",)),
                           ("", "configmaps", "create", ()),
                           ("apps", "daemonsets", "get", ("fi",)),
                           ("", "pods", "create", ()), ("", "pods", "delete", ())}, \
            urns["fi-role"]
        hold = manifest(recorded, "fi-priorityclass")
        assert hold["value"] == 1_000_000_000 and hold["preemptionPolicy"] == "Never", \
            f"{urns['fi-priorityclass']}: placeholders are never preempted and never evict"
        ledger = spec["containers"][1]
        assert ledger["name"] == "ledger" and "cpu" not in ledger["resources"]["requests"], urn
        assert "cpu" not in spec["containers"][0]["resources"]["requests"], \
            f"{urn}: a CPU request would keep a whole-node placeholder out"
        binding = manifest(recorded, "fi-rolebinding")
        assert binding["subjects"][0]["name"] == "fi", urns["fi-rolebinding"]
        secret = manifest(recorded, "fi-secret")
        cert = secret["data"]["curve.cert"]
        pair = parse_curve_cert(base64.b64decode(cert).decode())
        scripts = manifest(recorded, "fi-configmap")["data"]
        blob = "\n".join(scripts.values())
        assert pair.secret not in blob and cert not in blob, f"{urns['fi-configmap']}: secret"
        assert secret["data"]["munge.key"] not in blob, urns["fi-configmap"]
        assert len(base64.b64decode(secret["data"]["munge.key"])) == 1024, urns["fi-secret"]
        assert '"flux-core=0.85.0" "flux-sched=0.54.0"' in scripts["flux-install.sh"]
        assert "node-watch.py" in scripts["entrypoint.sh"]
        assert "def rv1(" in scripts["fluxconf.py"], "node-watch's module ships beside it"
        notes = manifest(recorded, "fi-daemonset")["spec"]["template"]["metadata"]["annotations"]
        assert notes["fluxinfra.io/curve-public-key"] == pair.public, f"{urn}: rolls on new keys"
        assert len(notes["fluxinfra.io/scripts-sha256"]) == 16, urn

    return when_registered(inst, check)


@pulumi.runtime.test
def test_fluxion_service_is_restricted_read_only_and_grpc_probed(recorded):
    svc = FluxionService("fs", FluxionServiceArgs(port=5000, health_port=5001, policy="lonode",
                                                  namespace="sys", image=IMAGE))

    def check(urns):
        role = manifest(recorded, "fs-clusterrole")
        verbs = {v for rule in role["rules"] for v in rule["verbs"]}
        assert verbs == {"get", "list", "watch"}, urns["fs-clusterrole"]
        assert {r for rule in role["rules"] for r in rule["resources"]} == {"nodes", "pods"}
        dep = manifest(recorded, "fs-deployment")
        container = pod_spec(dep)["containers"][0]
        urn = urns["fs-deployment"]
        assert container["args"] == ["service", "--port", "5000", "--policy", "lonode",
                                     "--tls-dir", "/etc/fluxinfra/tls",
                                     "--health-port", "5001"], urn
        for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
            assert container[probe]["grpc"] == {"port": 5001}, f"{urn}: {probe} (plain health)"
        assert container["securityContext"]["runAsNonRoot"] is True, urn
        assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}, urn
        service = manifest(recorded, "fs-service")
        assert service["spec"]["ports"][0]["port"] == 5000, urns["fs-service"]
        assert [p["port"] for p in service["spec"]["ports"]] == [5000], "health stays in-pod"

    return when_registered(svc, check)


@pulumi.runtime.test
def test_fluxion_service_speaks_only_mutual_tls_to_the_scheduler(recorded):
    """The certificates come from the stack (a dynamic resource), live only in Secrets, and
    only the scheduler's pods may connect (mTLS + NetworkPolicy)."""
    from cryptography import x509

    from fluxinfra.pki import certificate_names

    svc = FluxionService("ft", FluxionServiceArgs(port=5000, namespace="sys", image=IMAGE))

    def check(urns):
        server = manifest(recorded, "ft-secret-ft-server-tls")
        client = manifest(recorded, "ft-secret-ft-client-tls")
        urn = urns["ft-secret-ft-server-tls"]
        assert server["type"] == client["type"] == "kubernetes.io/tls", urn
        pems = {k: base64.b64decode(v).decode() for k, v in server["data"].items()}
        cpems = {k: base64.b64decode(v).decode() for k, v in client["data"].items()}
        assert set(pems) == set(cpems) == {"ca.crt", "tls.crt", "tls.key"}, urn
        assert pems["ca.crt"] == cpems["ca.crt"], f"{urn}: one CA for both sides"
        assert "ft.sys.svc.cluster.local" in certificate_names(pems["tls.crt"]), urn
        ca = x509.load_pem_x509_certificate(pems["ca.crt"].encode())
        for pem in (pems["tls.crt"], cpems["tls.crt"]):
            x509.load_pem_x509_certificate(pem.encode()).verify_directly_issued_by(ca)
        subject = x509.load_pem_x509_certificate(cpems["tls.crt"].encode()).subject
        assert subject.rfc4514_string() == "CN=fluxion-scheduler,O=fluxinfra", urn
        pod = pod_spec(manifest(recorded, "ft-deployment"))
        mounts = {v["name"]: v for v in pod["volumes"]}
        assert mounts["tls"]["secret"] == {"secretName": "ft-server-tls", "defaultMode": 0o400}
        assert {"name": "tls", "mountPath": "/etc/fluxinfra/tls", "readOnly": True} in \
            pod["containers"][0]["volumeMounts"], urns["ft-deployment"]
        notes = manifest(recorded, "ft-deployment")["spec"]["template"]["metadata"]
        assert len(notes["annotations"]["fluxinfra.io/tls-ca-sha256"]) == 16, "rolls on rotation"
        policy = manifest(recorded, "ft-networkpolicy")["spec"]
        urn = urns["ft-networkpolicy"]
        assert policy["podSelector"]["matchLabels"] == \
            manifest(recorded, "ft-deployment")["spec"]["selector"]["matchLabels"], urn
        grpc_rule, health_rule = policy["ingress"]
        assert grpc_rule == {"from": [{"podSelector": {"matchLabels": {
            "app.kubernetes.io/name": "fluxion-scheduler"}}}],
            "ports": [{"protocol": "TCP", "port": 5000}]}, urn
        assert health_rule == {"ports": [{"protocol": "TCP", "port": 4243}]}, urn
        role = manifest(recorded, "ft-clusterrole")
        assert all("secrets" not in rule["resources"] for rule in role["rules"]), urn
        assert recorded["ft-tls"][0] == "pulumi-python:dynamic:Resource"

    return when_registered(svc, check)


@pulumi.runtime.test
def test_scheduler_mounts_the_fluxion_client_certificate(recorded):
    sched = FluxScheduler("st", FluxSchedulerArgs(
        fluxion_service="fs.sys.svc.cluster.local:4242", fluxion_tls_secret="fs-client-tls",
        namespace="sys"))

    def check(urns):
        pod = pod_spec(manifest(recorded, "st-deployment"))
        urn = urns["st-deployment"]
        args = pod["containers"][0]["args"]
        assert args[args.index("--fluxion-service") + 1] == "fs.sys.svc.cluster.local:4242"
        assert args[args.index("--fluxion-tls-dir") + 1] == "/etc/fluxinfra/fluxion-tls", urn
        volume = next(v for v in pod["volumes"] if v["name"] == "fluxion-tls")
        assert volume["secret"] == {"secretName": "fs-client-tls", "defaultMode": 0o400}, urn
        labels = pod_spec(manifest(recorded, "st-deployment"))
        assert labels, urn
        template = manifest(recorded, "st-deployment")["spec"]["template"]["metadata"]
        assert template["labels"]["app.kubernetes.io/name"] == "fluxion-scheduler", \
            f"{urn}: the label the service's NetworkPolicy admits"

    return when_registered(sched, check)


@pulumi.runtime.test
def test_scheduler_rbac_is_exactly_what_a_binder_needs(recorded):
    sched = FluxScheduler("sc", FluxSchedulerArgs(scheduler_name="fluxion-a", policy="hinodex",
                                                  namespace="sys"))

    def check(urns):
        rules = manifest(recorded, "sc-clusterrole")["rules"]
        granted = {(g, r, v) for rule in rules for g in rule["apiGroups"]
                   for r in rule["resources"] for v in rule["verbs"]}
        expected = {("", "pods", v) for v in ("get", "list", "watch", "patch", "delete")}
        expected |= {("", "namespaces", v) for v in ("list", "watch")}
        expected |= {("policy", "poddisruptionbudgets", v) for v in ("list", "watch")}
        expected |= {("", "pods/binding", "create"), ("", "pods/status", "patch")}
        expected |= {("", "nodes", v) for v in ("get", "list", "watch")}
        expected |= {("", "events", "create"), ("events.k8s.io", "events", "create"),
                     ("events.k8s.io", "events", "patch")}
        expected |= {("scheduling.x-k8s.io", "podgroups", v)
                     for v in ("get", "list", "watch", "update", "patch")}
        expected |= {("scheduling.x-k8s.io", "podgroups/status", v)
                     for v in ("get", "update", "patch")}
        assert granted == expected, f"{urns['sc-clusterrole']}: {granted ^ expected}"
        lease = manifest(recorded, "sc-role")
        assert lease["metadata"]["namespace"] == "sys", urns["sc-role"]
        granted = {(g, r, v, tuple(rule.get("resourceNames", ()))) for rule in lease["rules"]
                   for g in rule["apiGroups"] for r in rule["resources"] for v in rule["verbs"]}
        one = ("fluxion-a-scheduler",)
        assert granted == {("coordination.k8s.io", "leases", "create", ()),
                           ("coordination.k8s.io", "leases", "get", one),
                           ("coordination.k8s.io", "leases", "update", one)}, urns["sc-role"]
        container = pod_spec(manifest(recorded, "sc-deployment"))["containers"][0]
        urn = urns["sc-deployment"]
        strategy = manifest(recorded, "sc-deployment")["spec"]["strategy"]
        assert strategy == {"type": "RollingUpdate", "rollingUpdate": {
            "maxSurge": 1, "maxUnavailable": 0}}, f"{urn}: a surge pod stands by, none goes first"
        args = container["args"]
        assert args[args.index("--lease-name") + 1] == "fluxion-a-scheduler", urn
        assert args[args.index("--lease-namespace") + 1] == "sys", urn
        assert "--leader-elect" in args, urn
        env = {e["name"]: e["valueFrom"]["fieldRef"]["fieldPath"] for e in container["env"]}
        assert env == {"POD_NAME": "metadata.name", "POD_NAMESPACE": "metadata.namespace"}, urn
        assert "--fluxion-service" not in container["args"], urn
        assert container["args"][:5] == ["scheduler", "--scheduler-name", "fluxion-a",
                                         "--policy", "hinodex"], urn
        for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
            assert container[probe]["httpGet"]["path"] == "/healthz", f"{urn}: {probe}"
        crd = manifest(recorded, "sc-customresourcedefinition")
        props = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]
        assert set(props["spec"]["properties"]) == {"minMember", "minResources",
                                                    "scheduleTimeoutSeconds"}
        assert {"phase", "scheduled", "running", "succeeded", "failed"} <= set(
            props["status"]["properties"]), urns["sc-customresourcedefinition"]

    return when_registered(sched, check)


@pulumi.runtime.test
def test_scheduler_can_leave_the_crd_to_scheduler_plugins(recorded):
    sched = FluxScheduler("sn", FluxSchedulerArgs(install_pod_group_crd=False))

    def check(urns):
        assert not any("customresourcedefinition" in n for n in urns), urns

    return when_registered(sched, check)


@pulumi.runtime.test
def test_minicluster_lists_max_size_fqdns_and_runs_size_pods(recorded):
    args = MiniClusterArgs(name="mc", namespace="hpc", size=2, max_size=4, command="hostname")
    mc = MiniCluster("mc", args)

    def check(urns):
        job = manifest(recorded, "mc-job")
        urn = urns["mc-job"]
        assert job["spec"]["completionMode"] == "Indexed", urn
        assert job["spec"]["completions"] == job["spec"]["parallelism"] == 2, urn
        assert "ttlSecondsAfterFinished" not in job["spec"], f"{urn}: Pulumi owns its lifetime"
        rules = job["spec"]["podFailurePolicy"]["rules"]
        assert rules[-1] == {"action": "FailJob", "onExitCodes": {
            "containerName": "flux", "operator": "NotIn", "values": [0]}}, urn
        assert "pulumi.com/skipAwait" not in job["metadata"].get("annotations", {}), \
            f"{urn}: pulumi up waits for an ephemeral MiniCluster's command"
        spec = pod_spec(job)
        assert spec["subdomain"] == "mc" and spec["restartPolicy"] == "Never", urn
        anti = spec["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        assert anti[0]["topologyKey"] == "kubernetes.io/hostname", f"{urn}: one broker per node"
        curve = next(v for v in spec["volumes"] if "secret" in v)
        assert curve["secret"]["defaultMode"] == 0o400, urn
        svc = manifest(recorded, "mc-service")
        assert svc["spec"]["clusterIP"] == "None", urns["mc-service"]
        config = manifest(recorded, "mc-configmap")["data"]
        broker = tomllib.loads(config["broker.toml"])
        assert broker["bootstrap"]["hosts"] == [{"host": "mc-[0-3]"}], urns["mc-configmap"]
        assert broker["bootstrap"]["default_connect"] == \
            "tcp://%h.mc.hpc.svc.cluster.local:%p", urns["mc-configmap"]
        assert "noverify" not in config["broker.toml"], urns["mc-configmap"]
        assert config["quorum"] == "2\n"
        assert "flux R encode '--hosts=mc-[0-3]' --local" in config["start.sh"]
        assert "flux run -N 2 -- hostname" in config["run.sh"]
        assert "BEGIN" not in config["broker.toml"] and "secret-key" not in config["broker.toml"]

    return when_registered(mc, check)


@pulumi.runtime.test
def test_persistent_minicluster_keeps_rank0_up(recorded):
    mc = MiniCluster("pm", MiniClusterArgs(name="pm", mode="persistent", size=3))

    def check(urns):
        data = manifest(recorded, "pm-configmap")["data"]
        assert "-Sbroker.rc2_none" in data["start.sh"], urns["pm-configmap"]
        assert "run.sh" not in data, urns["pm-configmap"]
        job = manifest(recorded, "pm-job")
        assert job["metadata"]["annotations"]["pulumi.com/skipAwait"] == "true", urns["pm-job"]
        assert pod_spec(job)["restartPolicy"] == "OnFailure", urns["pm-job"]
        assert "podFailurePolicy" not in job["spec"], urns["pm-job"]

    return when_registered(mc, check)


@pulumi.runtime.test
def test_minicluster_gang_view_sidecars_and_pod_options(recorded):
    args = MiniClusterArgs(
        name="gv", size=3, max_size=6, command="./app", nodes=2, tasks=8, cores_per_task=2,
        gpus_per_task=1, flux_flags=["--exclusive"], image="ghcr.io/x/app:1",
        flux_view_image="localhost/flux-view:0.88.0", scheduler_name="fluxion", pod_group=True,
        services=[{"name": "db", "image": "redis:7.2"}],
        volumes=[{"name": "data", "mountPath": "/data", "persistentVolumeClaim": {
            "claimName": "d"}}], shm_size="1Gi", node_selector={"hpc": "yes"},
        tolerations=[{"key": "hpc", "operator": "Exists"}], service_account_name="runner",
        image_pull_secrets=["regcred"], runtime_class_name="gvisor", host_network=True,
        priority_class_name="batch", pod_labels={"team": "a"}, image_pull_policy="Never",
        dns_policy="None", dns_config={"nameservers": ["10.0.0.10"]})
    mc = MiniCluster("gv", args)

    def check(urns):
        urn = urns["gv-job"]
        job = manifest(recorded, "gv-job")
        spec = pod_spec(job)
        assert spec["schedulerName"] == "fluxion", urn
        labels = job["spec"]["template"]["metadata"]["labels"]
        assert labels["scheduling.x-k8s.io/pod-group"] == "gv" and labels["team"] == "a", urn
        group = manifest(recorded, "gv-podgroup")
        assert recorded["gv-podgroup"][0] == "kubernetes:scheduling.x-k8s.io/v1alpha1:PodGroup"
        assert group["spec"] == {"minMember": 3}, urns["gv-podgroup"]
        view, sidecar = spec["initContainers"]
        assert view["image"] == "localhost/flux-view:0.88.0" and "restartPolicy" not in view, urn
        assert sidecar["name"] == "db" and sidecar["restartPolicy"] == "Always", \
            f"{urn}: services are native sidecars"
        runner = spec["containers"][0]
        mounts = {v["name"]: v["mountPath"] for v in runner["volumeMounts"]}
        assert mounts["flux-view"] == "/opt/flux" and mounts["shm"] == "/dev/shm", urn
        assert mounts["data"] == "/data", urn
        vols = {v["name"]: v for v in spec["volumes"]}
        assert vols["shm"]["emptyDir"] == {"medium": "Memory", "sizeLimit": "1Gi"}, urn
        assert vols["data"]["persistentVolumeClaim"] == {"claimName": "d"}, urn
        assert spec["hostNetwork"] is True and spec["dnsPolicy"] == "None", \
            f"{urn}: the stack's dnsPolicy wins over hostNetwork's ClusterFirstWithHostNet"
        assert spec["dnsConfig"] == {"nameservers": ["10.0.0.10"]}, urn
        assert {c["imagePullPolicy"] for c in (*spec["containers"], view)} == {"Never"}, urn
        assert spec["imagePullSecrets"] == [{"name": "regcred"}], urn
        assert spec["runtimeClassName"] == "gvisor" and spec["priorityClassName"] == "batch"
        assert spec["serviceAccountName"] == "runner", urn
        assert spec["automountServiceAccountToken"] is True, urn
        assert spec["nodeSelector"] == {"hpc": "yes"} and spec["tolerations"], urn
        data = manifest(recorded, "gv-configmap")["data"]
        assert "flux run -N 2 -n 8 -c 2 -g 1 --exclusive -- ./app" in data["run.sh"]
        assert 'view=/opt/flux' in data["start.sh"], urns["gv-configmap"]
        broker = tomllib.loads(data["broker.toml"])
        assert broker["resource"]["verify"]["hostname"] == "ignore", \
            f"{urns['gv-configmap']}: with hostNetwork the kernel hostname is the node's"

    return when_registered(mc, check)


@pulumi.runtime.test
def test_replicated_deployments_spread_and_keep_one_through_drains(recorded):
    svc = FluxionService("hs", FluxionServiceArgs(replicas=3))

    def check(urns):
        pdb = manifest(recorded, "hs-poddisruptionbudget")
        assert pdb["spec"]["minAvailable"] == 1, urns["hs-poddisruptionbudget"]
        spread = pod_spec(manifest(recorded, "hs-deployment"))["topologySpreadConstraints"]
        assert spread[0]["topologyKey"] == "kubernetes.io/hostname", urns["hs-deployment"]

    return when_registered(svc, check)


@pulumi.runtime.test
def test_ha_scheduler_spreads_keeps_one_through_drains_and_surges(recorded):
    sched = FluxScheduler("ha", FluxSchedulerArgs(replicas=2, namespace="sys"))

    def check(urns):
        dep = manifest(recorded, "ha-deployment")
        urn = urns["ha-deployment"]
        assert dep["spec"]["replicas"] == 2, urn
        assert dep["spec"]["strategy"]["rollingUpdate"] == {"maxSurge": 1, "maxUnavailable": 0}
        spread = pod_spec(dep)["topologySpreadConstraints"]
        assert spread[0]["topologyKey"] == "kubernetes.io/hostname", urn
        assert spread[0]["labelSelector"]["matchLabels"] == dep["spec"]["selector"]["matchLabels"]
        pdb = manifest(recorded, "ha-poddisruptionbudget")
        assert pdb["spec"]["minAvailable"] == 1, urns["ha-poddisruptionbudget"]
        assert pdb["spec"]["selector"] == dep["spec"]["selector"], urns["ha-poddisruptionbudget"]

    return when_registered(sched, check)


@pulumi.runtime.test
def test_single_replica_has_no_disruption_budget(recorded):
    sched = FluxScheduler("s1", FluxSchedulerArgs(replicas=1))

    def check(urns):
        assert not any("poddisruptionbudget" in n for n in urns), urns
        assert "topologySpreadConstraints" not in pod_spec(manifest(recorded, "s1-deployment"))

    return when_registered(sched, check)
