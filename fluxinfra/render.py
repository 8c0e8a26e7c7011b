"""Offline render: run the Pulumi program under the SDK's mock runtime and write Kubernetes YAML.

``render(stack)`` reads ``stacks/Pulumi.<stack>.yaml`` into the mock runtime's config, runs
``__main__.py`` (the same program ``pulumi up`` runs; no CLI, no cluster), collects every
Kubernetes resource it declares, turns Pulumi's wire form back into plain manifests (secrets
unwrapped, integral floats back to ints), validates each with kubernetes-validate's strict schemas
for the stack's Kubernetes versions, and ``write_manifests`` writes one YAML file per resource plus
a ``kustomization.yaml``: ``kubectl apply -k <dir>`` applies what ``pulumi up`` would. Same stack
and seed, same bytes.

Resources that are not manifests (the kind cluster's ``command:local:Command``, providers, the
``ClusterKeys`` and ``ServiceCerts`` dynamic resources) appear in the printed tree with a note,
not as files. Key material: ``pulumi up`` generates it once per stack (``fluxinfra.k8s.keys``,
``fluxinfra.k8s.certs``); the render derives it from a seed (``--seed-file``, else
``$FLUXINFRA_RENDER_SEED``, else the stack name, which is public and fine only for throw-away
clusters: ``Rendered.warnings`` then says so). The Secrets that carry it are written apart, to
``<out>/secrets/`` (a directory only its owner can enter, files 0600, a ``.gitignore`` that
ignores everything in it, its own kustomization that the main one lists), so
``kubectl apply -k <out>`` still applies them while the rest of ``<out>`` can be shared.
"""

from __future__ import annotations

import contextvars
import functools
import importlib.resources
import json
import os
import re
import runpy
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from fluxinfra.console import format_table
from fluxinfra.errors import ConfigError, FluxinfraError
from fluxinfra.inputs import parse_yaml, read_text, type_name
from fluxinfra.k8s.certs import CERTS_PURPOSE, offline_outputs
from fluxinfra.k8s.config import config_key
from fluxinfra.k8s.keys import KEYS_PURPOSE, key_outputs
from fluxinfra.k8s.queue import CERTS_PURPOSE as WEBHOOK_CERTS_PURPOSE
from fluxinfra.secrets import derive_cluster_keys

__all__ = ["plain", "Rendered", "RenderError", "ManifestInvalid", "render", "write_manifests",
           "validate_manifests", "stack_config_values", "stream", "kubernetes_versions",
           "dump_yaml", "APPLY_ORDER", "check_references"]

_SECRET_SIG = "4dabf18193072939515e22adb298388d"
_NOT_RENDERED = {
    "pulumi:providers:kubernetes": "provider",
    "pulumi-python:dynamic:Resource": "not rendered: key material, held in the Pulumi state",
}
#: What a local command does, for the tree (the first phrase found in its create command).
_COMMANDS = ("kind create cluster", "kind load image-archive")


def _command_note(create: str) -> str:
    what = next((c for c in _COMMANDS if c in create), "a local command")
    return f"not rendered: pulumi up runs `{what}`"


class RenderError(FluxinfraError):
    """The stack could not be rendered (names the stack file and the reason)."""


class ManifestInvalid(FluxinfraError):
    """One or more manifests failed schema validation; ``problems`` lists them one per line."""

    def __init__(self, problems: list[str]):
        super().__init__(f"{len(problems)} manifest problem(s):\n" + "\n".join(problems))
        self.problems = problems


@dataclass
class Node:
    urn: str
    type: str
    name: str
    parent: str
    manifest: dict[str, Any] | None = None
    file: str = ""
    note: str = ""
    provider: str = ""   # provider reference (URN::id) of a custom resource
    timeouts: dict[str, str] = field(default_factory=dict)   # customTimeouts (create, update)
    inputs: dict[str, Any] = field(default_factory=dict)     # every resource's inputs, plain


@dataclass
class Rendered:
    stack: str
    manifests: list[dict[str, Any]]          # sorted by file name
    files: dict[str, str]                    # file name -> YAML text
    nodes: dict[str, Node] = field(default_factory=dict)
    versions: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    outputs: dict[str, str] = field(default_factory=dict)   # stack exports as JSON; [secret]
    #: what the user must act on (printed apart from notes, in colour on a terminal)
    warnings: list[str] = field(default_factory=list)

    @property
    def secret_files(self) -> list[str]:
        """File names of the manifests that carry key material (Secrets), sorted."""
        return sorted(name for name, mf in zip(sorted(self.files), self.manifests, strict=True)
                      if is_secret(mf))

    def tree(self) -> str:
        """A ``pulumi preview``-like resource tree."""
        children: dict[str, list[Node]] = {}
        for node in self.nodes.values():
            children.setdefault(node.parent, []).append(node)
        rows: list[tuple[str, str, str]] = []

        def walk(parent: str, prefix: str) -> None:
            kids = sorted(children.get(parent, []), key=lambda n: (n.name, n.type))
            for i, node in enumerate(kids):
                last = i == len(kids) - 1
                branch = "" if not parent else ("└─ " if last else "├─ ")
                note = (f"-> {node.file}" if node.file else node.note
                        or _NOT_RENDERED.get(node.type, ""))
                rows.append((prefix + branch + node.type, node.name, note))
                walk(node.urn, prefix + ("" if not parent else ("   " if last else "│  ")))

        walk("", "")
        lines = [format_table(["Type", "Name", "Output"], rows)]
        if self.outputs:
            lines += ["", "Outputs:"]
            lines += [f"    {key}: {value}" for key, value in sorted(self.outputs.items())]
        return "\n".join(lines)


# -- config --------------------------------------------------------------------------------------

def stack_config_values(stack_path: Path) -> dict[str, str]:
    """The stack file's ``config:`` as the Pulumi runtime holds it (strings; JSON for objects).

    The file is read as :mod:`fluxinfra.inputs` reads documents: at most MAX_TEXT_BYTES of
    UTF-8, YAML holding only what JSON can (no dates, sets or binary; aliases counted where
    they are used, so one that refers to itself is refused), nested at most MAX_DEPTH deep."""
    if not stack_path.exists():
        stacks = sorted(p.name[len("Pulumi."):-len(".yaml")]
                        for p in stack_path.parent.glob("Pulumi.*.yaml"))
        raise ConfigError(f"{stack_path}: no such stack file; accepted stacks: "
                          f"{', '.join(stacks)}")
    doc = parse_yaml(read_text(stack_path, str(stack_path), ConfigError), str(stack_path),
                     ConfigError)
    if doc is None:
        doc = {}
    if not isinstance(doc, dict):
        raise ConfigError(f"{stack_path}: {type_name(doc)} is not accepted; accepted: a mapping "
                          "with a config: mapping of 'fluxinfra:<key>' values")
    config = doc.get("config") or {}
    if not isinstance(config, dict):
        raise ConfigError(f"{stack_path}: config: expected a mapping of 'fluxinfra:<key>' values")
    out: dict[str, str] = {}
    for key, value in config.items():
        if isinstance(value, dict) and set(value) == {"secure"}:
            raise ConfigError(f"{stack_path}: {config_key(key)}: encrypted values cannot be read "
                              "offline; accepted: plain values (keep secrets out of rendered "
                              "stacks)")
        if isinstance(value, str):
            out[str(key)] = value
        elif isinstance(value, bool):
            out[str(key)] = "true" if value else "false"
        elif isinstance(value, (int, float)):
            out[str(key)] = str(value)
        else:
            out[str(key)] = json.dumps(value)
    return out


_PATH_STEP = re.compile(r"(\.?)([A-Za-z_][A-Za-z0-9_-]*)|\[(\d+)\]")


def _config_path(path: str) -> list[str | int]:
    """``installer.source`` or ``miniclusters[0].schedulerName`` -> its steps; a leading
    ``fluxinfra:`` (the project namespace, as ``pulumi config set --path`` takes it) is
    optional."""
    text = path.removeprefix("fluxinfra:")
    steps: list[str | int] = []
    pos = 0
    while pos < len(text):
        found = _PATH_STEP.match(text, pos)
        # a key needs a '.' before it, except the first
        if found is None or (found.group(2) and bool(found.group(1)) != bool(steps)):
            raise ConfigError(f"--set {path}: not a config path; accepted: KEY[.KEY|[INDEX]]... "
                              "as `pulumi config set --path` takes it, e.g. installer.source or "
                              "miniclusters[0].schedulerName")
        steps.append(found.group(2) or int(found.group(3)))
        pos = found.end()
    if not steps or not isinstance(steps[0], str):
        raise ConfigError(f"--set {path}: a config path starts with a key, e.g. installer.source")
    return steps


def apply_overrides(config: dict[str, str], sets: list[str]) -> dict[str, str]:
    """The stack's ``config`` with each ``PATH=VALUE`` of ``sets`` applied, as ``pulumi config
    set --path PATH VALUE`` would (``true``/``false`` a boolean, digits an integer, anything else a
    string); the typed stack settings then check the result as they check the file."""
    out = dict(config)
    for item in sets:
        path, sep, raw = item.partition("=")
        if not sep:
            raise ConfigError(f"--set {item}: no '='; accepted: PATH=VALUE, e.g. "
                              "--set installer.source=prefix")
        steps = _config_path(path.strip())
        value = _scalar(raw)
        key = f"fluxinfra:{steps[0]}"
        if len(steps) == 1:
            out[key] = value if isinstance(value, str) else json.dumps(value)
            continue
        try:
            top = json.loads(out[key]) if key in out else {}
        except json.JSONDecodeError:
            top = None
        if not isinstance(top, (dict, list)):
            raise ConfigError(f"--set {path}: {key} holds a plain value, not a mapping or list; "
                              f"accepted: --set {steps[0]}=VALUE")
        holder: Any = top
        for step, nxt in zip(steps[1:-1], steps[2:], strict=True):
            holder = _step_into(holder, step, [] if isinstance(nxt, int) else {}, path)
        _put(holder, steps[-1], value, path)
        out[key] = json.dumps(top)
    return out


def _scalar(raw: str) -> str | int | bool:
    """How ``pulumi config set --path`` stores a value inside an object."""
    if raw in ("true", "false"):
        return raw == "true"
    return int(raw) if re.fullmatch(r"-?[0-9]{1,18}", raw) else raw


def _step_into(holder: Any, step: str | int, empty: Any, path: str) -> Any:
    if isinstance(step, int):
        if not isinstance(holder, list):
            raise ConfigError(f"--set {path}: [{step}] indexes {type_name(holder)}; accepted: "
                              ".KEY there")
        if step >= len(holder):
            raise ConfigError(f"--set {path}: [{step}] names no member (the list has "
                              f"{len(holder)}); accepted: the index of an existing member")
        return holder[step]
    if not isinstance(holder, dict):
        raise ConfigError(f"--set {path}: .{step} steps into {type_name(holder)}; accepted: "
                          "[INDEX] there")
    return holder.setdefault(step, empty)


def _put(holder: Any, step: str | int, value: Any, path: str) -> None:
    _step_into(holder, step, None, path)  # checks the last step as any other
    holder[step] = value


def kubernetes_versions(min_version: str, max_version: str) -> list[str]:
    """Every bundled kubernetes-validate minor version from ``min_version`` to ``max_version``."""
    from kubernetes_validate.utils import all_versions

    def key(v: str) -> tuple[int, int]:
        major, minor = v.split(".")[:2]
        return int(major), int(minor)

    bundled = sorted({".".join(v.split(".")[:2]) for v in all_versions()}, key=key)
    hi = max_version or bundled[-1]
    if key(min_version) < key(bundled[0]) or key(hi) > key(bundled[-1]):
        raise ConfigError(f"kubernetesVersions: {min_version}..{hi} is not accepted; accepted: "
                          f"versions kubernetes-validate has schemas for, {bundled[0]} to "
                          f"{bundled[-1]}")
    chosen = [v for v in bundled if key(min_version) <= key(v) <= key(hi)]
    if not chosen:
        raise ConfigError(f"kubernetesVersions: {min_version}..{hi} is not accepted; accepted: "
                          f"min <= max, within {bundled[0]} to {bundled[-1]}")
    return chosen


# -- running the program under mocks -------------------------------------------------------------

def plain(value: Any) -> Any:
    """Pulumi wire values -> plain data: unwrap secrets, integral floats -> int."""
    if isinstance(value, dict):
        if value.get(_SECRET_SIG) is not None and "value" in value:
            return plain(value["value"])
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain(v) for v in value]
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def _run_program(root: Path, stack: str, config: dict[str, str], seed: bytes,
                 outputs: dict[str, str] | None = None) -> dict[str, Node]:
    """Run the program under mocks; returns its resources by URN and fills ``outputs`` with the
    stack's exports (secret ones as ``[secret]``)."""
    import pulumi
    from pulumi.runtime import mocks as pmocks
    from pulumi.runtime.settings import get_root_resource
    from pulumi.runtime.stack import run_pulumi_func
    from pulumi.runtime.sync_await import _sync_await

    nodes: dict[str, Node] = {}
    outputs = {} if outputs is None else outputs

    class Monitor(pmocks.MockMonitor):
        def RegisterResource(self, request):  # noqa: N802 (gRPC method name)
            urn = self.make_urn(request.parent, request.type, request.name)
            timeouts = {k: getattr(request.customTimeouts, k)
                        for k in ("create", "update", "delete")
                        if getattr(request.customTimeouts, k, "")}
            nodes[urn] = Node(urn, request.type, request.name, request.parent,
                              provider=request.provider, timeouts=timeouts)
            response = super().RegisterResource(request)
            if urn in self.resources:   # component resources have no state of their own
                nodes[urn].inputs = plain(self.resources[urn].state)
            if request.type.startswith("kubernetes:"):
                nodes[urn].manifest = plain(self.resources[urn].state)
            elif request.type == "command:local:Command":
                nodes[urn].note = _command_note(self.resources[urn].state.get("create", ""))
            return response

    class Mocks(pulumi.runtime.Mocks):
        def new_resource(self, args: pulumi.runtime.MockResourceArgs):
            state = {k: v for k, v in args.inputs.items() if k != "__provider"}
            if state.get("purpose") == KEYS_PURPOSE:
                state.update(key_outputs(derive_cluster_keys(seed, f"{stack}/{state['label']}",
                                                             state["label"])))
            elif state.get("purpose") == CERTS_PURPOSE:
                state.update(offline_outputs(state, seed, f"{stack}/{state['label']}"))
            elif state.get("purpose") == WEBHOOK_CERTS_PURPOSE:
                from fluxinfra.k8s.queue import cert_outputs

                state.update(cert_outputs(list(state["names"]), seed=seed,
                                          label=f"{stack}/{state['label']}"))
            elif args.typ == "command:local:Command":
                state["stdout"] = "# kubeconfig: written by `kind` when pulumi up creates it\n"
            return f"{args.name}-id", state

        def call(self, args: pulumi.runtime.MockCallArgs):
            raise RenderError(f"the program calls {args.token}, which has no offline answer")

    def run() -> None:
        mocks = Mocks()
        pulumi.runtime.set_mocks(mocks, project="fluxinfra", stack=stack, preview=False,
                                 monitor=Monitor(mocks))
        pulumi.runtime.set_all_config(dict(config))
        _sync_await(run_pulumi_func(
            lambda: runpy.run_path(str(root / "__main__.py"), run_name="__main__")))
        # The mock runtime registers the stack before the program runs, so its exports are read
        # from the root resource here rather than from the monitor.
        for key, value in get_root_resource().outputs.items():
            out = pulumi.Output.from_input(value)
            secret = _sync_await(out.is_secret())
            outputs[key] = "[secret]" if secret else json.dumps(plain(_sync_await(out.future())))

    try:
        # A fresh context: the SDK keeps its settings in ContextVars, so renders don't mix.
        contextvars.Context().run(run)
    except Exception as exc:  # the program's own error, carried through the Pulumi runtime
        cause = exc
        while cause is not None and not isinstance(cause, FluxinfraError):
            cause = cause.__cause__
        if cause is not None:
            raise cause from None
        raise RenderError(f"{root / '__main__.py'}: {type(exc).__name__}: {exc}") from exc
    return nodes


# -- validation ----------------------------------------------------------------------------------

@functools.cache
def _schema_dir(version: str) -> Any:
    return importlib.resources.files("kubernetes_validate").joinpath(
        f"kubernetes-json-schema/v{version}.0-local-strict")


@functools.cache
def _definitions(version: str) -> Any:
    """The version's shared ``_definitions.json`` as a registry (large: load once)."""
    from referencing import Registry, Resource

    text = _schema_dir(version).joinpath("_definitions.json").read_text()
    return Resource.from_contents(json.loads(text)) @ Registry()


@functools.cache
def _validator(version: str, api_version: str, kind: str) -> Any:
    import jsonschema
    from referencing import Resource

    group = re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", api_version)
    path = _schema_dir(version).joinpath(f"{kind.lower()}-{group}.json")
    if not path.is_file():
        return None
    schema = json.loads(path.read_text())
    registry = Resource.from_contents(schema) @ _definitions(version)
    return jsonschema.Draft202012Validator(schema, registry=registry)


def _builtin_group(api_version: str) -> bool:
    group = api_version.rpartition("/")[0]
    return group == "" or "." not in group or group.endswith(".k8s.io")


def validate_manifests(files: dict[str, dict[str, Any]], versions: list[str]) -> list[str]:
    """Strict-schema problems as ``file: field: reason (Kubernetes X.Y)`` lines, for every
    version. Instances of custom kinds have no schema here and are skipped (``render`` notes
    them); CRDs themselves validate as apiextensions.k8s.io/v1."""
    problems = []
    for fname, manifest in sorted(files.items()):
        if not _builtin_group(manifest["apiVersion"]):
            continue
        for version in versions:
            validator = _validator(version, manifest["apiVersion"], manifest["kind"])
            if validator is None:
                problems.append(f"{fname}: apiVersion: {manifest['apiVersion']} {manifest['kind']} "
                                f"does not exist in Kubernetes {version}")
                continue
            for err in sorted(validator.iter_errors(manifest), key=lambda e: list(e.path)):
                where = ".".join(str(p) for p in err.absolute_path) or "(top level)"
                problems.append(f"{fname}: {where}: {err.message} (Kubernetes {version})")
    return problems


# -- cross-references ----------------------------------------------------------------------------

def _pod_spec(manifest: dict[str, Any]) -> dict[str, Any] | None:
    template = manifest.get("spec", {}).get("template")
    return template.get("spec") if isinstance(template, dict) else None


def check_references(files: dict[str, dict[str, Any]]) -> list[str]:
    """Wiring the schemas cannot see, as ``file: field: reason`` lines: every ServiceAccount,
    ConfigMap and Secret a pod uses, every Role a binding names, and every namespace an object
    lives in (other than ``default``) is rendered too; every Service and PodDisruptionBudget
    selects some pod template; a pod's headless-Service ``subdomain`` exists."""
    have = {(mf["kind"], mf["metadata"].get("namespace"), mf["metadata"]["name"])
            for mf in files.values()}
    templates = [(mf["metadata"].get("namespace"),
                  mf["spec"]["template"].get("metadata", {}).get("labels", {}))
                 for mf in files.values() if _pod_spec(mf) is not None]
    problems = []

    def need(fname: str, field_path: str, kind: str, ns: str | None, name: str) -> None:
        if (kind, ns, name) not in have:
            where = f" in namespace {ns}" if ns else ""
            problems.append(f"{fname}: {field_path}: {kind} {name!r}{where} is not rendered")

    for fname, mf in sorted(files.items()):
        ns = mf["metadata"].get("namespace")
        if ns not in (None, "default"):
            need(fname, "metadata.namespace", "Namespace", None, ns)
        pod = _pod_spec(mf)
        if pod is not None:
            base = "spec.template.spec"
            if "serviceAccountName" in pod:
                need(fname, f"{base}.serviceAccountName", "ServiceAccount", ns,
                     pod["serviceAccountName"])
            if "subdomain" in pod:
                need(fname, f"{base}.subdomain", "Service", ns, pod["subdomain"])
            for i, vol in enumerate(pod.get("volumes", [])):
                if "configMap" in vol:
                    need(fname, f"{base}.volumes.{i}.configMap.name", "ConfigMap", ns,
                         vol["configMap"]["name"])
                if "secret" in vol:
                    need(fname, f"{base}.volumes.{i}.secret.secretName", "Secret", ns,
                         vol["secret"]["secretName"])
        if mf["kind"] in ("RoleBinding", "ClusterRoleBinding"):
            ref = mf["roleRef"]
            need(fname, "roleRef.name", ref["kind"], ns if ref["kind"] == "Role" else None,
                 ref["name"])
            for i, subject in enumerate(mf.get("subjects", [])):
                if subject.get("kind") == "ServiceAccount":
                    need(fname, f"subjects.{i}.name", "ServiceAccount", subject["namespace"],
                         subject["name"])
        selector = None
        if mf["kind"] == "Service":
            selector = mf["spec"].get("selector")
        elif mf["kind"] == "PodDisruptionBudget":
            selector = mf["spec"]["selector"].get("matchLabels")
        if selector and not any(t_ns == ns and labels and selector.items() <= labels.items()
                                for t_ns, labels in templates):
            problems.append(f"{fname}: spec.selector: {selector} selects no rendered pod template "
                            f"in namespace {ns}")
    return problems


# -- output --------------------------------------------------------------------------------------

class _Dumper(yaml.SafeDumper):
    def ignore_aliases(self, data: Any) -> bool:
        return True


def _str_representer(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str_representer)
_FIRST = ("apiVersion", "kind", "metadata")


def _ordered(value: Any, top: bool = False) -> Any:
    if isinstance(value, dict):
        keys = sorted(value, key=lambda k: (top and k in _FIRST and _FIRST.index(k) - 3, k))
        return {k: _ordered(value[k]) for k in keys}
    if isinstance(value, list):
        return [_ordered(v) for v in value]
    return value


def dump_yaml(manifest: dict[str, Any]) -> str:
    return yaml.dump(_ordered(manifest, top=True), Dumper=_Dumper, sort_keys=False,
                     default_flow_style=False, width=100, allow_unicode=True)


def _file_name(manifest: dict[str, Any]) -> str:
    meta = manifest["metadata"]
    parts = [manifest["kind"].lower(), meta.get("namespace", ""), meta["name"]]
    return "-".join(p for p in parts if p).replace(".", "-") + ".yaml"


#: a Pulumi stack name (and so no path: stacks/Pulumi.<stack>.yaml stays in stacks/)
_STACK_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,99}")


def render(stack: str, *, root: Path | None = None, seed: bytes | None = None,
           sets: list[str] | None = None) -> Rendered:
    """Render ``stack`` (validated), with ``sets`` (``PATH=VALUE``, :func:`apply_overrides`)
    applied over its file; raises ConfigError, RenderError or ManifestInvalid."""
    from fluxinfra.k8s.stack import load_stack_settings

    root = Path(root or Path.cwd()).resolve()
    if not isinstance(stack, str) or not _STACK_NAME.fullmatch(stack):
        raise ConfigError(f"--stack {stack!r} is not accepted; accepted: a stack name of "
                          "letters, digits, '-', '_' and '.' (stacks/Pulumi.<stack>.yaml)")
    config = stack_config_values(root / "stacks" / f"Pulumi.{stack}.yaml")
    config = apply_overrides(config, sets or [])
    settings = load_stack_settings(stack, config)  # fail fast, before the Pulumi runtime starts
    versions = kubernetes_versions(settings.kubernetes_versions.min,
                                   settings.kubernetes_versions.max)
    notes: list[str] = []
    warnings: list[str] = []
    if seed is None:
        seed = f"fluxinfra-render:{stack}".encode()
        warnings.append(f"the CURVE certificate, the munge key and the TLS keys (the Fluxion "
                        f"service's, the queue webhook's) are derived from the stack name "
                        f"{stack!r}, which is public: anyone can recompute them. Fine for a "
                        "throw-away cluster; otherwise pass --seed-file FILE (e.g. head -c 64 "
                        "/dev/urandom > FILE, kept secret) or set FLUXINFRA_RENDER_SEED")
    outputs: dict[str, Any] = {}
    nodes = _run_program(root, stack, config, seed, outputs)

    files: dict[str, dict[str, Any]] = {}
    for node in nodes.values():
        if not node.type.startswith("kubernetes:"):
            continue
        state = node.manifest or {}
        fname = _file_name(state)
        if fname in files:
            raise RenderError(f"two resources render to {fname}: rename one of them")
        node.file = manifest_path(fname, state)
        files[fname] = state
    for fname, mf in sorted(files.items()):
        if not _builtin_group(mf["apiVersion"]):
            notes.append(f"{fname}: {mf['apiVersion']} {mf['kind']} is a custom kind: not "
                         "schema-validated")
    problems = validate_manifests(files, versions) + check_references(files)
    if problems:
        raise ManifestInvalid(problems)
    texts = {fname: dump_yaml(mf) for fname, mf in sorted(files.items())}
    return Rendered(stack=stack, manifests=[files[f] for f in sorted(files)], files=texts,
                    nodes=nodes, versions=versions, notes=notes, outputs=outputs,
                    warnings=warnings)


#: where Secrets (key material) are written, below the output directory
SECRETS_DIR = "secrets"
_SECRETS_IGNORE = ("# Key material rendered by `fluxinfra render`: never commit it. Everything "
                   "here is ignored.\n*\n")


def is_secret(manifest: dict[str, Any]) -> bool:
    return manifest.get("kind") == "Secret"


def manifest_path(fname: str, manifest: dict[str, Any]) -> str:
    """Where ``write_manifests`` puts a manifest, relative to the output directory."""
    return f"{SECRETS_DIR}/{fname}" if is_secret(manifest) else fname


def _kustomization(stack: str, resources: list[str], what: str) -> str:
    head = (f"# Rendered by `fluxinfra render --stack {stack}`: do not edit; re-render.\n"
            f"# {what}\n")
    body = {"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
            "resources": resources}
    return head + yaml.dump(body, Dumper=_Dumper, sort_keys=False)


def kustomization(rendered: Rendered) -> str:
    """The output directory's kustomization: every manifest, and the secrets directory."""
    secrets = set(rendered.secret_files)
    resources = [f for f in sorted(rendered.files) if f not in secrets]
    return _kustomization(rendered.stack, resources + ([SECRETS_DIR] if secrets else []),
                          "Apply with `kubectl apply -k <this directory>`.")


def secrets_kustomization(rendered: Rendered) -> str:
    return _kustomization(rendered.stack, rendered.secret_files,
                          "Key material: listed by ../kustomization.yaml; keep it private.")


#: ``kubectl apply -f -`` applies in stream order: what others live in or refer to goes first
#: (kustomize does the same ordering for ``apply -k``).
APPLY_ORDER = ("Namespace", "CustomResourceDefinition", "ServiceAccount", "ClusterRole",
               "ClusterRoleBinding", "Role", "RoleBinding", "ConfigMap", "Secret", "Service",
               "NetworkPolicy", "PodDisruptionBudget", "DaemonSet", "Deployment", "StatefulSet",
               "Job",
               # custom resources rank here (after their CRDs), then the webhook configuration:
               # the API server calls the webhook as soon as that exists
               "MutatingWebhookConfiguration")


def stream(rendered: Rendered) -> str:
    """Every manifest as one multi-document YAML stream, in apply order."""
    def rank(item: tuple[str, dict[str, Any]]) -> tuple[int, str]:
        kind = item[1]["kind"]
        last = APPLY_ORDER.index("MutatingWebhookConfiguration")
        return (APPLY_ORDER.index(kind) if kind in APPLY_ORDER else last - 0.5, item[0])

    by_file = dict(zip(sorted(rendered.files), rendered.manifests, strict=True))
    return "".join(f"---\n{rendered.files[name]}"
                   for name, _ in sorted(by_file.items(), key=rank))


def _previous_resources(kust: Path) -> list[str]:
    if not kust.is_file():
        return []
    try:
        doc = parse_yaml(read_text(kust, str(kust)), str(kust))
    except FluxinfraError:
        return []  # (not one this wrote: nothing of it is removed)
    old = doc.get("resources") if isinstance(doc, dict) else None
    return [n for n in old if isinstance(n, str) and "/" not in n] \
        if isinstance(old, list) else []


def _write_private(path: Path, text: str) -> None:
    """Write ``text`` to ``path``, readable by its owner only (also when it existed before)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        os.fchmod(fh.fileno(), 0o600)
        fh.write(text)


def write_manifests(rendered: Rendered, out: Path) -> list[Path]:
    """Write the files and kustomization.yaml; Secrets go to ``out/secrets/`` (0700 directory,
    0600 files, git-ignored, its own kustomization listed by the main one). Files a previous
    render listed and this one does not are removed."""
    out.mkdir(parents=True, exist_ok=True)
    secret_names = set(rendered.secret_files)
    private = out / SECRETS_DIR
    for folder, keep in ((out, set(rendered.files) - secret_names | {SECRETS_DIR}),
                         (private, secret_names)):
        for name in _previous_resources(folder / "kustomization.yaml"):
            if name not in keep:
                (folder / name).unlink(missing_ok=True)
    written = []
    for name, text in rendered.files.items():
        if name in secret_names:
            continue
        (out / name).write_text(text)
        written.append(out / name)
    if secret_names:
        private.mkdir(mode=0o700, exist_ok=True)
        private.chmod(0o700)
        (private / ".gitignore").write_text(_SECRETS_IGNORE)
        for name in sorted(secret_names):
            _write_private(private / name, rendered.files[name])
            written.append(private / name)
        (private / "kustomization.yaml").write_text(secrets_kustomization(rendered))
        written.append(private / "kustomization.yaml")
    (out / "kustomization.yaml").write_text(kustomization(rendered))
    return [*written, out / "kustomization.yaml"]
