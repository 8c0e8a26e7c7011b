"""fluxinfra render: every stack renders to manifests that pass kubernetes-validate (strict) for
the stack's Kubernetes versions, byte-for-byte reproducibly, and obey our security rules."""

import base64
import io
import shutil
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest
import yaml

from fluxinfra.cli import main as cli_main
from fluxinfra.errors import ConfigError
from fluxinfra.k8s.config import pinned_image
from fluxinfra.render import _run_program, render, validate_manifests, write_manifests
from fluxinfra.secrets import parse_curve_cert

ROOT = Path(__file__).resolve().parents[2]
STACKS = sorted(p.name[len("Pulumi."):-len(".yaml")]
                for p in (ROOT / "stacks").glob("Pulumi.*.yaml"))

# ``rendered`` (stack -> Rendered, once per session) comes from conftest.py.


def containers(mf):
    spec = mf.get("spec", {})
    pod = spec.get("template", {}).get("spec", {})
    return [*pod.get("initContainers", []), *pod.get("containers", [])]


def test_there_is_a_dev_and_a_prod_stack():
    assert {"dev", "prod"} <= set(STACKS)


@pytest.mark.parametrize("stack", STACKS)
def test_stack_renders_valid_manifests(rendered, stack):
    result = rendered[stack]
    kinds = {m["kind"] for m in result.manifests}
    assert {"Namespace", "DaemonSet", "Deployment", "Job", "Secret", "ConfigMap",
            "ClusterRole", "CustomResourceDefinition"} <= kinds, kinds
    assert result.versions[-1] == "1.37" and result.versions[0] in ("1.29", "1.30")
    # validate once more from the written YAML, as kubectl would read it
    files = {name: yaml.safe_load(text) for name, text in result.files.items()}
    assert validate_manifests(files, result.versions) == []


def test_dev_stack_is_a_kind_cluster_of_one_control_plane_and_three_workers(rendered):
    nodes = rendered["dev"].nodes.values()
    kind = next(n for n in nodes if n.type == "command:local:Command" and "kind" in n.name)
    tree = rendered["dev"].tree()
    assert kind.name == "cluster-kind"
    assert "cluster-kind" in tree and "not rendered: pulumi up runs `kind create cluster`" in tree
    assert "not rendered: pulumi up runs `kind load image-archive`" in tree


def test_render_is_byte_deterministic(rendered, tmp_path):
    again = render("dev", root=ROOT)
    assert again.files == rendered["dev"].files
    write_manifests(rendered["dev"], tmp_path / "a")
    write_manifests(again, tmp_path / "b")
    for path in sorted(p for p in (tmp_path / "a").rglob("*") if p.is_file()):
        other = tmp_path / "b" / path.relative_to(tmp_path / "a")
        assert path.read_bytes() == other.read_bytes(), path.name


def test_seed_changes_only_the_secrets_and_the_key_fingerprints(rendered):
    other = render("dev", root=ROOT, seed=b"another seed of at least 32 bytes!")
    changed = {f for f in other.files if other.files[f] != rendered["dev"].files[f]}
    secrets = {f for f in changed if f.startswith("secret-")}
    fingerprinted = {"daemonset-flux-installer-flux-installer.yaml":
                     "fluxinfra.io/curve-public-key",
                     "deployment-fluxinfra-system-fluxion-service.yaml":
                     "fluxinfra.io/tls-ca-sha256"}
    hook = "mutatingwebhookconfiguration-fluxion-queue.yaml"
    assert len(secrets) == 5 and changed - secrets == {*fingerprinted, hook}, changed
    hook_diff = [(a, b) for a, b in zip(other.files[hook].splitlines(),
                                        rendered["dev"].files[hook].splitlines(), strict=True)
                 if a != b]
    assert len(hook_diff) == 2 and all("caBundle:" in a for a, _ in hook_diff), hook_diff
    for name, annotation in fingerprinted.items():
        diff = [(a, b) for a, b in zip(other.files[name].splitlines(),
                                       rendered["dev"].files[name].splitlines(), strict=True)
                if a != b]
        assert len(diff) == 1 and annotation in diff[0][0], (name, diff)


def test_kustomization_lists_every_manifest(rendered, tmp_path):
    write_manifests(rendered["dev"], tmp_path)
    kust = yaml.safe_load((tmp_path / "kustomization.yaml").read_text())
    private = yaml.safe_load((tmp_path / "secrets" / "kustomization.yaml").read_text())
    on_disk = sorted(p.name for p in tmp_path.iterdir() if p.name != "kustomization.yaml")
    assert sorted(kust["resources"]) == on_disk
    assert private["resources"] == rendered["dev"].secret_files
    assert sorted(kust["resources"] + private["resources"]) == sorted(
        [*rendered["dev"].files, "secrets"])


def test_rewriting_drops_files_of_the_previous_render(rendered, tmp_path):
    stale = tmp_path / "configmap-old-thing.yaml"
    write_manifests(rendered["dev"], tmp_path)
    kust = tmp_path / "kustomization.yaml"
    kust.write_text(kust.read_text().replace("resources:\n", "resources:\n- configmap-old-thing"
                                             ".yaml\n"))
    stale.write_text("stale")
    keep = tmp_path / "notes.txt"
    keep.write_text("mine")
    write_manifests(rendered["dev"], tmp_path)
    assert not stale.exists() and keep.exists()


@pytest.mark.parametrize("stack", STACKS)
def test_no_secret_material_outside_secrets(rendered, stack):
    result = rendered[stack]
    secrets = [m for m in result.manifests if m["kind"] == "Secret"]
    material = []
    for s in secrets:
        for value in s["data"].values():
            material.append(value)
            raw = base64.b64decode(value)
            if b"secret-key" in raw:
                material.append(parse_curve_cert(raw.decode()).secret)
    assert material
    for name, text in result.files.items():
        if name.startswith("secret-"):
            continue
        leaked = [s for s in material if s in text]
        assert not leaked, f"{name} ({stack}) carries secret material"


@pytest.mark.parametrize("stack", STACKS)
def test_secrets_are_mounted_0400(rendered, stack):
    for mf in rendered[stack].manifests:
        pod = mf.get("spec", {}).get("template", {}).get("spec", {})
        for vol in pod.get("volumes", []):
            if "secret" in vol:
                where = f"{mf['kind']}/{mf['metadata']['name']}"
                assert vol["secret"]["defaultMode"] == 0o400, where


@pytest.mark.parametrize("stack", STACKS)
def test_only_the_installer_is_privileged(rendered, stack):
    for mf in rendered[stack].manifests:
        pod = mf.get("spec", {}).get("template", {}).get("spec", {})
        privileged = any(c.get("securityContext", {}).get("privileged") for c in containers(mf))
        host = any(pod.get(k) for k in ("hostPID", "hostNetwork", "hostIPC"))
        where = f"{mf['kind']}/{mf['metadata']['name']}"
        if mf["kind"] == "DaemonSet" and mf["metadata"]["name"] == "flux-installer":
            assert privileged and pod["hostPID"] and not pod.get("hostNetwork"), where
        else:
            assert not privileged and not host, where


@pytest.mark.parametrize("stack", STACKS)
def test_namespaces_carry_pod_security_labels(rendered, stack):
    for mf in rendered[stack].manifests:
        if mf["kind"] == "Namespace":
            labels = mf["metadata"]["labels"]
            level = labels["pod-security.kubernetes.io/enforce"]
            assert level in ("restricted", "privileged"), mf["metadata"]["name"]
            assert (level == "privileged") == (mf["metadata"]["name"] == "flux-installer")


@pytest.mark.parametrize("stack", STACKS)
def test_long_running_containers_are_probed_and_images_pinned(rendered, stack):
    for mf in rendered[stack].manifests:
        for c in containers(mf):
            where = f"{mf['kind']}/{mf['metadata']['name']}/{c['name']}"
            assert pinned_image(c["image"]) is None, where
            if mf["kind"] in ("Deployment", "DaemonSet"):
                assert "livenessProbe" in c, where
                assert "readinessProbe" in c or mf["kind"] == "DaemonSet", where


def test_validation_names_file_field_and_reason():
    bad = {"apiVersion": "apps/v1", "kind": "Deployment",
           "metadata": {"name": "x"},
           "spec": {"selector": {}, "template": {"spec": {"containers": [
               {"name": "c", "image": "i:1", "imagePullPolicyy": "Always"}]}}}}
    problems = validate_manifests({"deployment-x.yaml": bad}, ["1.29"])
    assert problems and problems[0].startswith("deployment-x.yaml: spec.template.spec.containers"
                                               ".0: "), problems
    assert "imagePullPolicyy" in problems[0] and "(Kubernetes 1.29)" in problems[0]


def test_custom_kind_instances_are_skipped_not_failed():
    podgroup = {"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
                "metadata": {"name": "g"}, "spec": {"minMember": 2}}
    assert validate_manifests({"podgroup-g.yaml": podgroup}, ["1.29"]) == []


def test_an_api_that_does_not_exist_yet_is_reported():
    flow = {"apiVersion": "batch/v9", "kind": "Job", "metadata": {"name": "j"}, "spec": {}}
    assert "does not exist in Kubernetes 1.29" in validate_manifests({"j.yaml": flow}, ["1.29"])[0]


def bad_root(tmp_path, stack_text):
    shutil.copy(ROOT / "__main__.py", tmp_path / "__main__.py")
    shutil.copy(ROOT / "Pulumi.yaml", tmp_path / "Pulumi.yaml")
    (tmp_path / "stacks").mkdir()
    (tmp_path / "stacks" / "Pulumi.bad.yaml").write_text(stack_text)
    return tmp_path


def test_cli_bad_config_is_one_line_and_exit_2(tmp_path):
    root = bad_root(tmp_path, "config:\n  fluxinfra:scheduler:\n    policy: fastest\n")
    err, out = io.StringIO(), io.StringIO()
    with redirect_stderr(err), redirect_stdout(out):
        code = cli_main(["render", "--stack", "bad", "--root", str(root), "--out",
                         str(tmp_path / "out")])
    assert code == 2
    lines = err.getvalue().splitlines()
    assert len(lines) == 1, lines
    assert "stacks/Pulumi.bad.yaml: fluxinfra:scheduler.policy: 'fastest'" in lines[0]
    assert "one of first, low" in lines[0]
    assert not (tmp_path / "out").exists()


def test_encrypted_values_are_refused_offline(tmp_path):
    root = bad_root(tmp_path, "config:\n  fluxinfra:namespace:\n    secure: v1:abc\n")
    with pytest.raises(ConfigError, match="fluxinfra:namespace: encrypted values cannot be read"):
        render("bad", root=root)


def test_cli_unknown_stack_names_the_stacks(tmp_path):
    err = io.StringIO()
    with redirect_stderr(err), redirect_stdout(io.StringIO()):
        code = cli_main(["render", "--stack", "nope", "--root", str(ROOT), "--out",
                         str(tmp_path)])
    assert code == 2 and "accepted stacks: dev, prod" in err.getvalue()


def test_program_itself_stops_on_bad_config_before_declaring(tmp_path):
    """The same check runs inside the Pulumi program (what pulumi up sees)."""
    with pytest.raises(ConfigError, match="fluxinfra:miniclusters\\[0\\].size: 0"):
        _run_program(ROOT, "bad", {"fluxinfra:miniclusters": '[{"name": "a", "size": 0}]'},
                     b"s" * 32)


def test_cli_writes_tree_and_files(tmp_path):
    out = io.StringIO()
    with redirect_stdout(out):
        code = cli_main(["render", "--stack", "dev", "--root", str(ROOT), "--out",
                         str(tmp_path)])
    assert code == 0
    text = out.getvalue()
    assert "fluxinfra:k8s:FluxInstaller" in text and "-> daemonset-flux-installer" in text
    assert (tmp_path / "kustomization.yaml").is_file()


CLUSTER_SCOPED = {"Namespace", "ClusterRole", "ClusterRoleBinding", "CustomResourceDefinition",
                  "MutatingWebhookConfiguration", "PriorityClass"}


@pytest.mark.parametrize("stack", STACKS)
def test_namespaced_objects_name_their_namespace(rendered, stack):
    """kubectl apply -k would otherwise drop them into whatever namespace is current."""
    for mf in rendered[stack].manifests:
        where = f"{mf['kind']}/{mf['metadata']['name']}"
        assert ("namespace" in mf["metadata"]) == (mf["kind"] not in CLUSTER_SCOPED), where


def test_stream_puts_namespaces_and_crds_first(rendered):
    import re

    from fluxinfra.render import stream

    # a document starts at a line that is exactly ---; scripts in ConfigMaps contain ----
    docs = [yaml.safe_load(d) for d in re.split(r"^---\n", stream(rendered["dev"]), flags=re.M)
            if d]
    kinds = [d["kind"] for d in docs]
    assert len(docs) == len(rendered["dev"].files)
    assert kinds[:3] == ["Namespace", "Namespace", "CustomResourceDefinition"], kinds
    assert kinds.index("Secret") < kinds.index("DaemonSet") < kinds.index("Job"), kinds
    # the API server calls a webhook as soon as its configuration exists: it goes last
    assert kinds[-1] == "MutatingWebhookConfiguration", kinds


def test_stack_outputs_are_shown_with_secrets_hidden(rendered):
    outputs = rendered["dev"].outputs
    assert outputs["kubeconfig"] == "[secret]"
    assert outputs["schedulerName"] == '"fluxion"'
    assert outputs["minicluster-hello-lead"] == '"hello-0.hello.default.svc.cluster.local"'
    assert "Outputs:" in rendered["dev"].tree()


@pytest.mark.parametrize("versions, complaint", [
    ('{min: "1.20"}', "1.20..1.37 is not accepted"),
    ('{min: "1.31", max: "1.30"}', "min <= max"),
])
def test_versions_outside_the_bundled_schemas_are_refused(tmp_path, versions, complaint):
    root = bad_root(tmp_path, f"config:\n  fluxinfra:kubernetesVersions: {versions}\n")
    with pytest.raises(ConfigError, match=complaint):
        render("bad", root=root)


@pytest.mark.parametrize("seed, code, message", [
    (b"short", 2, "at least 32"),
    (b"s" * 40, 0, ""),
])
def test_seed_file(tmp_path, seed, code, message):
    (tmp_path / "seed").write_bytes(seed)
    err, out = io.StringIO(), io.StringIO()
    with redirect_stderr(err), redirect_stdout(out):
        got = cli_main(["render", "--stack", "dev", "--root", str(ROOT), "--out",
                        str(tmp_path / "out"), "--seed-file", str(tmp_path / "seed")])
    assert got == code and message in err.getvalue()
    if code == 0:
        assert f"{len(render('dev', root=ROOT).files)} manifests" in out.getvalue()
        assert "derived from the stack name" not in out.getvalue()


@pytest.mark.parametrize("stack", STACKS)
def test_every_reference_resolves(rendered, stack):
    from fluxinfra.render import check_references

    files = {name: yaml.safe_load(text) for name, text in rendered[stack].files.items()}
    assert check_references(files) == []


def test_broken_wiring_is_reported_with_file_and_field(rendered):
    import copy

    from fluxinfra.render import check_references

    files = copy.deepcopy({name: yaml.safe_load(text)
                           for name, text in rendered["dev"].files.items()})
    del files["serviceaccount-fluxinfra-system-fluxion-scheduler.yaml"]
    files["service-default-hello.yaml"]["spec"]["selector"] = {"app": "nothing"}
    files["clusterrolebinding-flux-installer-nodes.yaml"]["roleRef"]["name"] = "gone"
    problems = check_references(files)
    assert ("deployment-fluxinfra-system-fluxion-scheduler.yaml: "
            "spec.template.spec.serviceAccountName: ServiceAccount 'fluxion-scheduler' in "
            "namespace fluxinfra-system is not rendered") in problems
    assert any(p.startswith("service-default-hello.yaml: spec.selector:") for p in problems)
    assert any(p.startswith("clusterrolebinding-flux-installer-nodes.yaml: roleRef.name: "
                            "ClusterRole 'gone'") for p in problems)
    assert any("rolebinding-fluxinfra-system-fluxion-scheduler-leader-election.yaml: "
               "subjects.0.name" in p for p in problems)


@pytest.mark.parametrize("stack", STACKS)
def test_every_kubernetes_resource_uses_the_cluster_provider(rendered, stack):
    """Never the default provider, which would deploy to whatever kubeconfig is ambient."""
    for node in rendered[stack].nodes.values():
        if node.type.startswith("kubernetes:"):
            assert "pulumi:providers:kubernetes::cluster-provider::" in node.provider, node.urn
