"""The Pulumi lifecycle, as far as the SDK's mock runtime can show it: what `pulumi up` would wait
for (await annotations, customTimeouts), that a second `pulumi up` of the same stack sends every
resource the same inputs (no diff, so no restart), and that resizing a persistent MiniCluster
changes only fields pulumi-kubernetes updates in place.

Which fields make pulumi-kubernetes *replace* an object is the provider's rule, not ours; this
file carries a double of that rule (``PROVIDER_REPLACES``, from pulumi-kubernetes'
``provider/pkg/provider/forcenew``: any change under these paths replaces, and so restarts, the
object; ConfigMap data only without ``enableConfigMapMutable``). The real provider runs only
with the pulumi CLI, which this machine cannot install.
"""

import re
from pathlib import Path

import jsonschema
import pytest
import yaml

from fluxinfra.render import render

ROOT = Path(__file__).resolve().parents[2]

#: kind -> JSON paths whose change makes pulumi-kubernetes replace the object.
PROVIDER_REPLACES = {
    "Job": ("spec.selector", "spec.template"),
    "Deployment": ("spec.selector",),
    "Secret": ("type", "stringData", "data"),
    "ConfigMap": ("data", "binaryData"),       # unless the provider's enableConfigMapMutable
    "Service": ("spec.clusterIP", "spec.type"),
    "RoleBinding": ("roleRef",), "ClusterRoleBinding": ("roleRef",),
}


def changed_paths(old, new, prefix=""):
    if isinstance(old, dict) and isinstance(new, dict):
        out = []
        for key in sorted(set(old) | set(new)):
            out += changed_paths(old.get(key), new.get(key), f"{prefix}{key}.")
        return out
    return [] if old == new else [prefix.rstrip(".")]


def replaces(kind, paths, config_maps_mutable):
    rules = PROVIDER_REPLACES.get(kind, ())
    if kind == "ConfigMap" and config_maps_mutable:
        rules = ()
    return [p for p in paths for r in rules if p == r or p.startswith(r + ".")]


def stack_with(tmp_path, stack, edit):
    """A copy of the repository's program with ``stacks/Pulumi.<stack>.yaml`` edited."""
    import shutil

    shutil.copy(ROOT / "__main__.py", tmp_path / "__main__.py")
    shutil.copy(ROOT / "Pulumi.yaml", tmp_path / "Pulumi.yaml")
    (tmp_path / "stacks").mkdir(exist_ok=True)
    doc = yaml.safe_load((ROOT / "stacks" / f"Pulumi.{stack}.yaml").read_text())
    edit(doc["config"])
    (tmp_path / "stacks" / f"Pulumi.{stack}.yaml").write_text(yaml.safe_dump(doc))
    return tmp_path


def inputs_by_name(rendered):
    return {node.name: (node.type, node.inputs, node.timeouts)
            for node in rendered.nodes.values()}


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_a_second_up_sends_every_resource_the_same_inputs(rendered, stack):
    again = render(stack, root=ROOT)
    assert inputs_by_name(again) == inputs_by_name(rendered[stack])


def test_the_provider_updates_config_maps_in_place(rendered):
    for stack in ("dev", "prod"):
        provider = next(n for n in rendered[stack].nodes.values()
                        if n.type == "pulumi:providers:kubernetes")
        assert provider.inputs["enableConfigMapMutable"] == "true", stack


def test_resizing_a_persistent_minicluster_restarts_no_broker(rendered, tmp_path):
    def grow(config):
        config["fluxinfra:miniclusters"][0]["size"] = 12

    before = {n.name: n for n in rendered["prod"].nodes.values() if n.manifest}
    after = {n.name: n for n in render("prod", root=stack_with(tmp_path, "prod", grow))
             .nodes.values() if n.manifest}
    diffs = {name: changed_paths(before[name].manifest, after[name].manifest)
             for name in before}
    diffs = {name: paths for name, paths in diffs.items() if paths}
    assert diffs == {
        "minicluster-default-lammps-job": ["spec.completions", "spec.parallelism"],
        "minicluster-default-lammps-configmap": ["data.quorum"],
        "minicluster-default-lammps-podgroup": ["spec.minMember"],
    }
    for name, paths in diffs.items():
        kind = after[name].manifest["kind"]
        assert replaces(kind, paths, config_maps_mutable=True) == [], f"{name} is replaced"
    # without the provider flag the ConfigMap would be deleted and re-created under the pods
    assert replaces("ConfigMap", ["data.quorum"], config_maps_mutable=False) == ["data.quorum"]


def test_changing_what_the_brokers_run_replaces_the_job(rendered, tmp_path):
    def new_fanout(config):
        config["fluxinfra:miniclusters"][0]["fanout"] = 4

    before = next(n for n in rendered["prod"].nodes.values() if n.name.endswith("lammps-job"))
    after = next(n for n in render("prod", root=stack_with(tmp_path, "prod", new_fanout))
                 .nodes.values() if n.name.endswith("lammps-job"))
    paths = changed_paths(before.manifest, after.manifest)
    assert paths == ["spec.template.metadata.annotations.fluxinfra.io/config-sha256"]
    assert replaces("Job", paths, True), "a new broker config is a new instance"


def test_pulumi_waits_for_an_ephemeral_job_and_not_for_a_persistent_one(rendered):
    dev = {n.name: n for n in rendered["dev"].nodes.values()}
    hello = dev["minicluster-default-hello-job"]
    assert "pulumi.com/skipAwait" not in hello.manifest["metadata"].get("annotations", {})
    assert hello.timeouts == {"create": "1800s", "update": "1800s"}
    prod = {n.name: n for n in rendered["prod"].nodes.values()}
    lammps = prod["minicluster-default-lammps-job"]
    assert lammps.manifest["metadata"]["annotations"]["pulumi.com/skipAwait"] == "true"
    assert prod["flux-installer-daemonset"].timeouts["create"] == "4200s", \
        "the first install on a node may take an hour"


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_images_are_named_as_make_image_and_podman_name_them(rendered, stack):
    result = rendered[stack]
    ours = [c["image"] for mf in result.manifests
            for c in mf.get("spec", {}).get("template", {}).get("spec", {}).get("containers", [])
            if "fluxinfra" in c["image"]]
    assert ours
    if stack == "dev":
        makefile = (ROOT / "Makefile").read_text()
        # `make image` tags $(IMAGE_TAG), by default localhost/fluxinfra:<version>
        tag = re.search(r"^IMAGE_TAG \?= (localhost/fluxinfra):", makefile, re.M).group(1)
        assert all(image == f"{tag}:0.1.0" for image in ours), ours
        loads = yaml.safe_load((ROOT / "stacks/Pulumi.dev.yaml").read_text())["config"][
            "fluxinfra:cluster"]["loadImages"]
        assert set(ours) <= set(loads), "kind gets the very image the pods ask for"


def test_custom_resources_validate_against_the_crd_the_stack_installs(rendered):
    crds = {(c["spec"]["group"], c["spec"]["names"]["kind"]): c
            for c in rendered["prod"].manifests if c["kind"] == "CustomResourceDefinition"}
    custom = [m for m in rendered["prod"].manifests if "." in m["apiVersion"].split("/")[0]
              and not m["apiVersion"].split("/")[0].endswith(".k8s.io")]
    assert "PodGroup" in {m["kind"] for m in custom}
    for mf in custom:
        group, version = mf["apiVersion"].split("/")
        crd = crds.get((group, mf["kind"]))
        assert crd, f"{mf['kind']}: the stack installs no CRD for it"
        schema = next(v["schema"]["openAPIV3Schema"] for v in crd["spec"]["versions"]
                      if v["name"] == version)
        jsonschema.validate(mf, schema)
    group = next(m for m in custom if m["kind"] == "PodGroup")
    crd = crds[("scheduling.x-k8s.io", "PodGroup")]
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**group, "spec": {"minMember": "eight"}}, schema)
