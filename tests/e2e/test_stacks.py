"""Every stack, rendered by ``fluxinfra render`` and applied to a real API server: a server-side
dry run, then for real, then again with nothing left to change; then run on the real node from
the project's image (the Fluxion service answers a gRPC Match from the test)."""

from __future__ import annotations

import base64
import contextlib
import json
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from e2e_cluster import REPO, Cluster, wait_for
from e2e_rbac import Permission, Request, granted, now, requests, unused, user_of

STACKS = ("dev", "prod")
FIELD_MANAGER = "fluxinfra-e2e"


@dataclass
class AppliedStack:
    name: str
    manifests: Path
    docs: list[dict[str, Any]]
    #: the dry run before anything exists, the first real apply (as the README tells users)
    #: and the dry run once the stack's Namespaces and CRDs exist
    dry_run_cold: subprocess.CompletedProcess[str]
    first_apply: subprocess.CompletedProcess[str]
    dry_run: subprocess.CompletedProcess[str]
    images: set[str] = field(default_factory=set)
    #: when the stack was applied (audit-log time): requests before are an earlier run's
    applied_at: str = ""

    def of_kind(self, kind: str) -> list[dict[str, Any]]:
        return [d for d in self.docs if d["kind"] == kind]

    @property
    def namespaces(self) -> set[str]:
        return {d["metadata"]["name"] for d in self.of_kind("Namespace")}


def render(stack: str, out: Path) -> list[dict[str, Any]]:
    fluxinfra = Path(sys.executable).with_name("fluxinfra")
    proc = subprocess.run([str(fluxinfra), "render", "--stack", stack, "--out", str(out)],
                          capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, f"render --stack {stack}:\n{proc.stderr[-3000:]}"
    docs = []
    for path in sorted(out.rglob("*.yaml")):  # secrets/ is a kustomization of its own
        if path.name != "kustomization.yaml":
            docs.extend(d for d in yaml.safe_load_all(path.read_text()) if d)
    return docs


def pod_templates(docs: list[dict[str, Any]]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(workload, pod spec) for every Deployment, DaemonSet, StatefulSet and Job."""
    return [(d, d["spec"]["template"]["spec"]) for d in docs
            if d["kind"] in ("Deployment", "DaemonSet", "StatefulSet", "Job")]


def dry_run(cluster: Cluster, manifests: Path) -> subprocess.CompletedProcess[str]:
    return cluster.kubectl("apply", "--server-side", "--dry-run=server",
                           f"--field-manager={FIELD_MANAGER}", "-k", str(manifests), check=False)


@pytest.fixture(scope="module", params=STACKS)
def stack(request: pytest.FixtureRequest, cluster: Cluster,
          tmp_path_factory: pytest.TempPathFactory) -> AppliedStack:
    name = request.param
    out = tmp_path_factory.mktemp(f"stack-{name}")
    docs = render(name, out)
    images = {c["image"] for _, spec in pod_templates(docs) for c in spec["containers"]}
    if cluster.real_node is not None:
        # The project's image before anything can try (and back off) to pull it.
        ours = request.getfixturevalue("fluxinfra_image")
        cluster.bed.tag_image(ours, *[i for i in images if i.endswith(ours)])
    applied_at = now()
    newcomer = cluster.with_cache(tmp_path_factory.mktemp(f"kubectl-cache-{name}"))
    cold = dry_run(newcomer, out)
    # the README's way: `make deploy` (scripts/deploy: the CRDs, then `kubectl apply -k`)
    first = subprocess.run(["bash", str(REPO / "scripts" / "deploy"), str(out)],
                           env={**newcomer.env, "KUBECTL": newcomer.kubectl_path,
                                "FIELD_MANAGER": FIELD_MANAGER},
                           capture_output=True, text=True, timeout=300, check=False)
    for crd in (d for d in docs if d["kind"] == "CustomResourceDefinition"):
        cluster.kubectl("wait", "--for=condition=Established", f"crd/{crd['metadata']['name']}",
                        "--timeout=60s")
    applied = AppliedStack(name, out, docs, cold, first, dry_run(cluster, out), images,
                           applied_at)
    cluster.apply(out)
    yield applied
    cluster.kubectl("delete", "-k", str(out), "--ignore-not-found", "--wait=true",
                    "--timeout=180s", check=False, timeout=240)


def test_server_dry_run_accepts_every_object(stack: AppliedStack) -> None:
    assert stack.dry_run.returncode == 0, stack.dry_run.stderr
    applied = re.findall(r"serverside-applied \(server dry run\)", stack.dry_run.stdout)
    assert len(applied) == len(stack.docs), stack.dry_run.stdout


def test_cold_dry_run_refuses_only_what_the_stack_itself_would_create_first(
        stack: AppliedStack) -> None:
    """A dry run makes no Namespace and no CRD, so on an empty cluster the objects inside the
    stack's own new Namespaces, and those of its own new kinds, are refused; nothing else is."""
    kinds = {d["spec"]["names"]["kind"] for d in stack.of_kind("CustomResourceDefinition")}
    for line in (x for x in stack.dry_run_cold.stderr.splitlines() if x.strip()):
        namespace = re.search(r'namespaces "([^"]+)" not found', line)
        kind = re.search(r'no matches for kind "([^"]+)"', line)
        assert (namespace and namespace.group(1) in stack.namespaces) or \
            (kind and kind.group(1) in kinds) or "ensure CRDs are installed first" in line, line


def test_one_deploy_on_an_empty_cluster_creates_everything(stack: AppliedStack) -> None:
    """``make deploy`` once (scripts/deploy: the stack's CRDs until served, then ``kubectl
    apply -k``), as the README tells users, on a cluster without the stack. The configured
    FluxJobQueues are not objects of the render (the queue controller makes them, see
    test_the_configured_queues_are_made_by_the_queue_controller); a MiniCluster's PodGroup is,
    and needs its CRD served first."""
    assert stack.first_apply.returncode == 0, stack.first_apply.stderr[-3000:]


def test_every_object_exists_after_apply(stack: AppliedStack, cluster: Cluster) -> None:
    for doc in stack.docs:
        meta = doc["metadata"]
        args = ["get", f"{doc['kind']}.{doc['apiVersion'].split('/')[0]}"
                if "/" in doc["apiVersion"] else doc["kind"], meta["name"], "-o", "name"]
        if meta.get("namespace"):
            args += ["-n", meta["namespace"]]
        assert cluster.kubectl(*args).stdout.strip(), f"{doc['kind']} {meta['name']} missing"


def _applied_state(cluster: Cluster, stack: AppliedStack) -> dict[str, tuple[Any, ...]]:
    """Per object: its generation and this field manager's managedFields entry (time and
    fields). A server-side apply that changes nothing leaves both alone; status updates by
    controllers (which move resourceVersion) do not touch them."""
    listing = cluster.kubectl("get", "-k", str(stack.manifests), "-o", "json",
                              "--show-managed-fields").stdout
    state = {}
    for obj in yaml.safe_load(listing)["items"]:
        meta = obj["metadata"]
        mine = [(m.get("time"), m.get("fieldsV1")) for m in meta.get("managedFields", [])
                if m["manager"] == FIELD_MANAGER and m["operation"] == "Apply"]
        state[f"{obj['kind']}/{meta.get('namespace', '')}/{meta['name']}"] = (
            meta.get("generation"), mine)
    return state


def test_second_server_side_apply_changes_nothing(stack: AppliedStack, cluster: Cluster) -> None:
    before = _applied_state(cluster, stack)
    assert len(before) == len(stack.docs)
    assert all(mine for _, mine in before.values()), "an object is not managed by our apply"
    cluster.apply(stack.manifests)
    after = _applied_state(cluster, stack)
    changed = sorted(k for k in before if before[k] != after[k])
    assert not changed, f"the second apply changed {changed}"
    diff = cluster.kubectl("diff", "--server-side", f"--field-manager={FIELD_MANAGER}", "-k",
                           str(stack.manifests), check=False)
    assert diff.returncode == 0, f"kubectl diff found changes:\n{diff.stdout[-3000:]}"


def cpu_millis(quantity: str) -> int:
    return int(quantity[:-1]) if quantity.endswith("m") else int(float(quantity) * 1000)


@pytest.fixture(scope="module")
def running(stack: AppliedStack, cluster: Cluster, real_node: str) -> AppliedStack:
    """The stack's Deployments rolled out on the real node. A stack sized for a production
    cluster may ask for more CPU than this one node has (prod: 2.1 cores of 2); then every
    Deployment's CPU requests are scaled down alike until they fit (limits untouched), after
    the apply tests have seen the manifests as rendered."""
    node = cluster.get("node", real_node)
    room = int(cpu_millis(node["status"]["allocatable"]["cpu"]) * 0.8)
    wanted = sum(cpu_millis(c.get("resources", {}).get("requests", {}).get("cpu", "0"))
                 * d["spec"].get("replicas", 1)
                 for d in stack.of_kind("Deployment")
                 for c in d["spec"]["template"]["spec"]["containers"])
    if wanted > room:
        for d in stack.of_kind("Deployment"):
            where = (f"deployment/{d['metadata']['name']}", "-n", d["metadata"]["namespace"])
            # Down to no pods first: a rolling update would need room for old and new at once.
            cluster.kubectl("scale", *where, "--replicas=0")
            for c in d["spec"]["template"]["spec"]["containers"]:
                cpu = c.get("resources", {}).get("requests", {}).get("cpu")
                if cpu:
                    scaled = max(10, cpu_millis(cpu) * room // wanted)
                    cluster.kubectl("set", "resources", *where, "-c", c["name"],
                                    f"--requests=cpu={scaled}m")
            cluster.kubectl("scale", *where, f"--replicas={d['spec'].get('replicas', 1)}")
        print(f"\n{stack.name}: Deployments ask {wanted}m CPU, the node has room for {room}m: "
              "requests scaled to fit")
    for deployment in stack.of_kind("Deployment"):
        meta = deployment["metadata"]
        cluster.kubectl("rollout", "status", f"deployment/{meta['name']}", "-n",
                        meta["namespace"], "--timeout=240s", timeout=260)
    return stack


def test_stack_deployments_become_available_on_the_real_node(
        running: AppliedStack, cluster: Cluster, real_node: str) -> None:
    for deployment in running.of_kind("Deployment"):
        meta = deployment["metadata"]
        pods = cluster.get("pods", "-n", meta["namespace"], "-l", ",".join(
            f"{k}={v}" for k, v in deployment["spec"]["selector"]["matchLabels"].items()))
        running_on = {p["spec"]["nodeName"] for p in pods["items"]
                      if p["status"].get("phase") == "Running"}
        assert running_on and running_on <= set(cluster.real_nodes), running_on


def test_the_configured_queues_are_made_by_the_queue_controller(
        running: AppliedStack, cluster: Cluster) -> None:
    """The stack's ``queue.queues`` reach the scheduler as ``--queue-config``; its queue
    controller creates each FluxJobQueue with the stack's limits."""
    scheduler = next(d for d in running.of_kind("Deployment")
                     if "scheduler" in d["metadata"]["name"])
    args = scheduler["spec"]["template"]["spec"]["containers"][0]["args"]
    if "--queue-config" not in args:
        pytest.skip(f"stack {running.name} configures no queues")
    for item in json.loads(args[args.index("--queue-config") + 1]):
        def made(item: dict[str, Any] = item) -> dict[str, Any] | None:
            found = cluster.kubectl("get", "fluxjobqueue", item["name"], "-n",
                                    item["namespace"], "-o", "json", check=False)
            return json.loads(found.stdout) if found.returncode == 0 else None
        queue = wait_for(made, 120, f"FluxJobQueue {item['namespace']}/{item['name']}")
        assert queue["spec"] == {k: v for k, v in item.items()
                                 if k not in ("namespace", "name")}, queue


def test_fluxion_service_from_the_stack_answers_a_grpc_match(
        running: AppliedStack, cluster: Cluster, real_node: str) -> None:
    """The service pod (the project's image, on the real node) answers over mutual TLS from a
    graph of this cluster's nodes, and a request no node can hold is Unsatisfiable.

    Where the stack's scheduler uses the service (``--fluxion-service``: prod), the service
    holds the scheduler's exact pool graph and is asked in the scheduler's jobspec form (one
    pod of one CPU). Where it stands alone (dev), it built Fluence's whole-core graph of the
    nodes minus their running pods when it started (the real node's 2 CPUs are taken by the
    stack's own pods in that model): its graph holds the real node, and once the test loads
    the cluster's Node objects (``LoadNodes``, full capacity) one core is placed. The test's
    allocation is cancelled again."""
    import grpc

    from fluxinfra.k8s.fluxion_service import client_tls_secret_name
    from fluxinfra.kube.pools import pool_jobspec
    from fluxinfra.matcher.errors import Unsatisfiable
    from fluxinfra.service.client import CHANNEL_OPTIONS, FluxionClient
    from fluxinfra.service.jobspecs import slots_jobspec
    from fluxinfra.service.tls import TlsFiles

    service = next(d for d in running.of_kind("Deployment")
                   if "service" in d["metadata"]["name"])
    scheduler = next(d for d in running.of_kind("Deployment")
                     if "scheduler" in d["metadata"]["name"])
    pools = "--fluxion-service" in scheduler["spec"]["template"]["spec"]["containers"][0]["args"]
    meta = service["metadata"]
    pods = cluster.get("pods", "-n", meta["namespace"], "-l", ",".join(
        f"{k}={v}" for k, v in service["spec"]["selector"]["matchLabels"].items()))
    pod_ip = next(p["status"]["podIP"] for p in pods["items"] if p["status"].get("podIP"))
    port = service["spec"]["template"]["spec"]["containers"][0]["ports"][0]["containerPort"]
    address = f"{pod_ip}:{port}"
    node_objects = cluster.get("nodes")["items"]
    nodes = {n["metadata"]["name"] for n in node_objects}
    # the service takes only clients holding the certificate of the stack's client Secret; it
    # is reached by pod IP, so the name checked is the Service's own
    name = meta["name"]
    secret = next(d for d in running.docs if d["kind"] == "Secret"
                  and d["metadata"]["name"] == client_tls_secret_name(name))
    files = {k: base64.b64decode(v) for k, v in secret["data"].items()}
    tls = TlsFiles(ca=files["ca.crt"], cert=files["tls.crt"], key=files["tls.key"])
    channel = grpc.secure_channel(
        address, tls.channel_credentials(),
        options=[*CHANNEL_OPTIONS, ("grpc.ssl_target_name_override",
                                    f"{name}.{meta['namespace']}.svc")])
    fits, never = ((pool_jobspec(1, {"cpu": 1000, "pods": 1}, duration=60),
                    pool_jobspec(1, {"cpu": 100_000_000, "pods": 1}, duration=60))
                   if pools else (slots_jobspec(1, cores=1, duration=60),
                                  slots_jobspec(1, cores=100_000, duration=60)))
    with FluxionClient(address, timeout=10, channel=channel) as client:
        wait_for(lambda: client.health() == "SERVING", 60, "the service to be SERVING")

        def types() -> set[str]:
            return {v["metadata"]["type"]
                    for v in client.dump(include_graph=True)["jgf"]["graph"]["nodes"]}
        if pools:  # the service starts on its own graph until the scheduler loads its pools
            wait_for(lambda: "pods" in types(), 120, "the scheduler's pool graph loaded")
        else:
            graph = client.dump(include_graph=True)["jgf"]["graph"]["nodes"]
            held = {v["metadata"]["name"] for v in graph if v["metadata"]["type"] == "node"}
            assert real_node in held and held <= nodes, (held, nodes)
            client.load_nodes(node_objects)
        result = client.match(fits, op="allocate_orelse_reserve")
        try:
            assert result.status in ("ALLOCATED", "RESERVED"), result
            assert set(result.nodes) <= nodes and result.nodes, (result.nodes, nodes)
        finally:
            client.cancel(result.jobid)
        with pytest.raises(Unsatisfiable):
            client.match(never, op="allocate_with_satisfiability")


# -- RBAC: exactly what each component uses ---------------------------------------------------

@dataclass
class Exercise:
    """After every component of a stack did its work: each ServiceAccount's grants and the
    requests the API server audited for it."""

    grants: dict[str, set[Permission]]
    audit_log: Path
    since: str

    def used(self, user: str) -> list[Request]:
        return [r for r in requests(self.audit_log) if r.user == user and r.at >= self.since]


def service_accounts(stack: AppliedStack) -> dict[str, str]:
    """``{user: "Kind/name"}`` for every workload's ServiceAccount."""
    out = {}
    for workload, spec in pod_templates(stack.docs):
        namespace = workload["metadata"].get("namespace", "default")
        user = user_of(namespace, spec.get("serviceAccountName", "default"))
        out[user] = f"{workload['kind']}/{workload['metadata']['name']}"
    return out


def run_node_watch(stack: AppliedStack, cluster: Cluster, workdir: Path,
                   seconds: float = 8, generation: int = 1, pre_stop: bool = False) -> str:
    """The installer's node-watch (the script from the stack's ConfigMap) against this cluster
    with a token of the installer's ServiceAccount, as a pod would run it but on a node it does
    not select, so it lists and watches Nodes, reads and keeps the rank map (a pod of a newer
    DaemonSet ``generation`` records it there), and starts nothing; or, with ``pre_stop``, the
    pod's preStop hook (it reads its node and the DaemonSet and decides whether the broker
    stops). Returns its log."""
    daemonset = stack.of_kind("DaemonSet")[0]
    namespace = daemonset["metadata"]["namespace"]
    account = daemonset["spec"]["template"]["spec"]["serviceAccountName"]
    scripts = next(d for d in stack.of_kind("ConfigMap") if "node-watch.py" in d["data"])
    keys = next(d for d in stack.of_kind("Secret") if "curve.cert" in d.get("data", {}))
    sa_dir, keys_dir = workdir / "serviceaccount", workdir / "keys"
    sa_dir.mkdir(parents=True, exist_ok=True)
    keys_dir.mkdir(exist_ok=True)
    token = cluster.kubectl("create", "token", account, "-n", namespace,
                            "--duration=10m").stdout.strip()
    (sa_dir / "token").write_text(token)
    (sa_dir / "ca.crt").write_text(Path(cluster.bed.pki["ca"]).read_text())
    (keys_dir / "curve.cert").write_bytes(base64.b64decode(keys["data"]["curve.cert"]))
    (workdir / "node-watch.py").write_text(scripts["data"]["node-watch.py"])
    settings = json.loads(scripts["data"]["node-watch.json"])
    settings["keysDir"] = str(keys_dir)
    # main() takes it from the pod's TEMPLATE_GENERATION; run() is called here directly
    settings["templateGeneration"] = generation
    (workdir / "settings.json").write_text(json.dumps(settings))
    layout = cluster.bed.layout
    driver = "\n".join([
        "import importlib.util, json, sys",
        f"spec = importlib.util.spec_from_file_location('node_watch', {str(workdir)!r} + "
        "'/node-watch.py')",
        "nw = importlib.util.module_from_spec(spec); spec.loader.exec_module(nw)",
        f"nw.HEARTBEAT = {str(workdir / 'alive')!r}",
        f"api = nw.Api({layout.node_ip!r}, {str(layout.ports['apiserver'])!r}, "
        f"sa_dir={str(sa_dir)!r})",
        # Its namespace as a pod reads it from the token's directory; nothing installed (a
        # node it does not select has no shape to report).
        f"settings = json.load(open({str(workdir / 'settings.json')!r}))",
        (f"print(nw.pre_stop(settings, api, {cluster.bed.node_name!r}, {namespace!r}, "
         "start=lambda *a, **k: print('broker', *a[1:])))") if pre_stop else
        (f"nw.run(settings, api=api, me='e2e-no-such-node', root={str(workdir)!r}, "
         f"start=lambda *a, **k: None, namespace={namespace!r}, "
         "prepare_fn=lambda settings: {})"),
    ])
    proc = subprocess.Popen([sys.executable, "-c", driver], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        out, _ = proc.communicate(timeout=seconds)
    except subprocess.TimeoutExpired:
        proc.terminate()
        out, _ = proc.communicate(timeout=10)
    return out


QUEUED_JOB = """
apiVersion: batch/v1
kind: Job
metadata: {{name: queued, namespace: {namespace}}}
spec:
  completions: 2
  parallelism: 2
  template:
    metadata:
      annotations: {{fluxinfra.io/hollow-run-seconds: "2", fluxinfra.io/duration: 1m}}
    spec:
      schedulerName: {scheduler}
      restartPolicy: Never
      terminationGracePeriodSeconds: 0
      nodeSelector: {{fluxinfra.io/bed-node: hollow}}
      containers:
      - name: main
        image: {image}
        imagePullPolicy: Never
        resources: {{requests: {{cpu: "1", memory: 64Mi}}}}
"""


def run_queued_job(cluster: Cluster, namespace: str, scheduler: str, image: str) -> None:
    """The stack's queue at work: a Job in a queue-enabled namespace is suspended by the
    webhook, admitted by the queue (a FluxJob) and completed. Its pods are held to the hollow
    nodes, whose keeper ends them: on a real node the pause container would run on."""
    cluster.kubectl("label", "namespace", namespace, "fluxinfra.io/queue=enabled")
    cluster.apply(QUEUED_JOB.format(namespace=namespace, scheduler=scheduler, image=image))
    cluster.kubectl("wait", "-n", namespace, "--for=condition=Complete", "job/queued",
                    "--timeout=180s", timeout=200)
    fluxjobs = cluster.get("fluxjobs", "-n", namespace)["items"]
    assert fluxjobs, "the queue made no FluxJob for the Job"


def repeat_an_event(cluster: Cluster, namespace: str, pod: str, node: str) -> None:
    """A repeated Event becomes a series: cordoning ``node`` changes what the waiting ``pod``
    is told; uncordoning it brings back the first note, which the scheduler counts into the
    first Event's ``series`` (a patch) instead of creating another Event."""
    def note() -> str:
        conds = cluster.get("pod", pod, "-n", namespace)["status"].get("conditions", [])
        return next((c.get("message", "") for c in conds if c["type"] == "PodScheduled"), "")

    def series() -> int:
        events = cluster.get("events.events.k8s.io", "-n", namespace)["items"]
        return max((e.get("series", {}).get("count", 1) for e in events
                    if e["regarding"].get("name") == pod and e.get("note") == first), default=0)
    first = note()
    cluster.kubectl("cordon", node)
    try:
        wait_for(lambda: note() != first, 120, f"pod {pod} to be told of the cordoned node")
    finally:
        cluster.kubectl("uncordon", node)
    wait_for(lambda: series() >= 2, 120, f"pod {pod}'s first Event to count a repeat")


SCHEDULED_POD = """
apiVersion: v1
kind: Pod
metadata:
  name: {name}
  namespace: {namespace}
  labels: {labels}
  annotations: {annotations}
spec:
  schedulerName: {scheduler}
  nodeSelector: {selector}
  terminationGracePeriodSeconds: 0
  containers:
  - name: main
    image: {image}
    imagePullPolicy: Never
    resources: {{requests: {{cpu: "{cpu}", memory: 64Mi}}}}
"""


@pytest.fixture(scope="module")
def exercised(running: AppliedStack, cluster: Cluster, real_node: str,
              tmp_path_factory: pytest.TempPathFactory) -> Exercise:
    """Each component does what it exists for: the scheduler binds a pod and a gang and marks a
    pod that can never fit; the service builds its graph; the installer's node-watch lists and
    watches nodes."""
    from kubebed.images import PAUSE_IMAGE

    stack = running
    # The stack's MiniCluster Job would take the nodes added below (kube-scheduler places it
    # at once): suspend it, so the exercise has them to itself.
    for job in stack.of_kind("Job"):
        meta = job["metadata"]
        cluster.kubectl("patch", "job", meta["name"], "-n", meta["namespace"], "--type=merge",
                        "-p", '{"spec": {"suspend": true}}')
        wait_for(lambda meta=meta: not cluster.get(
            "pods", "-n", meta["namespace"], "-l", f"job-name={meta['name']}")["items"], 120,
            f"the pods of Job {meta['name']} to go")
    scheduler = next(d for d in stack.of_kind("Deployment") if "scheduler" in d["metadata"]["name"])
    args = scheduler["spec"]["template"]["spec"]["containers"][0]["args"]
    name = args[args.index("--scheduler-name") + 1]
    # Whole-node policies (lonodex, hinodex) give each pod a node: the pod, the gang and the
    # queued Job take five.
    hollow = cluster.add_hollow_nodes([f"rbac-{stack.name}-{i}" for i in range(6)], cpu="8",
                                      memory="16Gi")
    namespace = f"e2e-rbac-{stack.name}"
    cluster.kubectl("create", "namespace", namespace)
    try:
        cluster.apply(f"""
apiVersion: scheduling.x-k8s.io/v1alpha1
kind: PodGroup
metadata: {{name: gang, namespace: {namespace}}}
spec: {{minMember: 2}}
""")
        # the gang runs on hollow nodes, whose keeper ends its pods (Succeeded) after 2 s
        gang = ("{scheduling.x-k8s.io/pod-group: gang}",
                "{fluxinfra.io/hollow-run-seconds: '2'}", "{fluxinfra.io/bed-node: hollow}")
        pods = [("fits", ("{}", "{}", "{}"), "1"), ("never", ("{}", "{}", "{}"), "1000"),
                ("gang-0", gang, "1"), ("gang-1", gang, "1")]
        cluster.apply("---".join(SCHEDULED_POD.format(
            name=pod, namespace=namespace, labels=labels, annotations=annotations,
            selector=selector, scheduler=name, image=PAUSE_IMAGE, cpu=cpu)
            for pod, (labels, annotations, selector), cpu in pods))

        def node_of(pod: str) -> str:
            return cluster.get("pod", pod, "-n", namespace)["spec"].get("nodeName", "")

        for pod in ("fits", "gang-0", "gang-1"):
            wait_for(lambda pod=pod: node_of(pod), 120, f"the {name} scheduler to bind {pod}")

        def never_marked() -> bool:
            conds = cluster.get("pod", "never", "-n", namespace)["status"].get("conditions", [])
            return any(c["type"] == "PodScheduled" and c["status"] == "False" for c in conds)
        wait_for(never_marked, 120, "pod never to be marked unschedulable")
        repeat_an_event(cluster, namespace, "never", hollow[0])
        # the scheduler keeps the PodGroup's lifecycle from its pods' phases
        wait_for(lambda: cluster.get("podgroup", "gang", "-n", namespace).get(
            "status", {}).get("phase") == "Finished", 120, "PodGroup gang to be Finished")
        status = cluster.get("podgroup", "gang", "-n", namespace)["status"]
        assert (status["scheduled"], status["succeeded"], status.get("running", 0),
                status.get("failed", 0)) == (2, 2, 0, 0), status
        if stack.of_kind("MutatingWebhookConfiguration"):
            run_queued_job(cluster, namespace, name, PAUSE_IMAGE)
        workdir = tmp_path_factory.mktemp("node-watch")
        log = run_node_watch(stack, cluster, workdir)
        assert "does not get a broker" in log, log
        # a rolled-out DaemonSet's pod records its generation in the rank map (an update) ...
        ranks = f"{stack.of_kind('DaemonSet')[0]['metadata']['name']}-ranks"
        ns = stack.of_kind("DaemonSet")[0]["metadata"]["namespace"]
        run_node_watch(stack, cluster, workdir, generation=2)
        kept = json.loads(cluster.get("configmap", ranks, "-n", ns)["data"]["ranks.json"])
        assert kept.get("templateGeneration") == 2, kept
        # ... and a stopping pod on a node the installer does not select stops its broker
        log = run_node_watch(stack, cluster, workdir, pre_stop=True)
        assert "no longer gets a broker" in log and log.split()[-1] == "stopped", log
    finally:
        cluster.kubectl("delete", "namespace", namespace, "--wait=false", check=False)
        cluster.bed.remove_hollow_nodes(hollow)
    grants = {user: granted(cluster, *user.split(":")[2:]) for user in service_accounts(stack)}
    return Exercise(grants, cluster.bed.audit_log, stack.applied_at)


def test_no_component_is_refused_anything(stack: AppliedStack, exercised: Exercise) -> None:
    refused = [str(r) for user in service_accounts(stack) for r in exercised.used(user)
               if r.refused_by_rbac]
    assert not refused, "requests refused by RBAC:\n" + "\n".join(refused)


KNOWN_UNUSED = Path(__file__).with_name("known_unused_rbac.tsv")


def known_unused(stack: str) -> dict[tuple[str, str], str]:
    """``{(workload, permission): why}`` listed for ``stack`` in known_unused_rbac.tsv."""
    known = {}
    for line in KNOWN_UNUSED.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, workload, permission, why = line.split("\t")
            if name == stack:
                known[(workload, permission)] = why
    return known


def test_no_component_holds_rbac_it_does_not_use(stack: AppliedStack, exercised: Exercise
                                                 ) -> None:
    """Every permission a component's ServiceAccount holds was used while it did its work
    (periodic ones, such as a leader's Lease renewal, within a minute), except those listed,
    with their reason, in known_unused_rbac.tsv; a listed one that is now used (or no longer
    granted) must leave the list."""
    accounts = service_accounts(stack)
    known = known_unused(stack.name)

    def idle() -> set[tuple[str, str]]:
        return {(accounts[u], str(p)) for u, g in exercised.grants.items()
                for p in unused(g, exercised.used(u))}
    left: set[tuple[str, str]] = set()

    def settled() -> bool:
        left.clear()
        left.update(idle())
        return left <= set(known)
    with contextlib.suppress(AssertionError):
        wait_for(settled, 60, "periodic requests", interval=2)
    new = sorted(left - set(known))
    stale = sorted(set(known) - left)
    for workload, permission in sorted(left & set(known)):
        print(f"known unused RBAC: {stack.name} {workload}: {permission}")
    assert not new, "granted but never used (use it, drop it, or list it with a reason):\n" + \
        "\n".join(f"{w}: {p}" for w, p in new)
    assert not stale, "used now or no longer granted; drop from known_unused_rbac.tsv:\n" + \
        "\n".join(f"{w}: {p}" for w, p in stale)
