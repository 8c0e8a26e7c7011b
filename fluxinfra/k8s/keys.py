"""``ClusterKeys``: the CURVE certificate and munge key of one Flux cluster, made once per stack.

A Pulumi dynamic resource: ``create`` draws fresh keys from the OS RNG (``fluxinfra.secrets``)
and Pulumi keeps them, encrypted, in the stack's state, so every later ``pulumi up`` reuses the
same keys until the resource is replaced (change ``label``, or ``pulumi up --replace <urn>`` to
rotate). Nothing secret lives in the repository, the stack file or a ConfigMap. The offline
render runs under mocks, where ``fluxinfra.render`` derives the keys from a render seed instead
(see docs/kubernetes.md).
"""

from __future__ import annotations

import base64
import hashlib
from typing import Any

import pulumi
from pulumi.dynamic import CreateResult, DiffResult, Resource, ResourceProvider

from fluxinfra.secrets import ClusterKeys as KeyMaterial
from fluxinfra.secrets import generate_cluster_keys

__all__ = ["KEYS_PURPOSE", "ClusterKeys", "key_outputs"]

#: Marks the resource's inputs so the render mocks recognise it.
KEYS_PURPOSE = "fluxinfra-cluster-keys"
_SECRET_OUTPUTS = ["curve_cert", "munge_key"]


def key_outputs(keys: KeyMaterial) -> dict[str, str]:
    """The resource's outputs for some key material (used by create and by the render mocks)."""
    return {"curve_cert": keys.curve_cert, "curve_public": keys.curve.public,
            "munge_key": base64.b64encode(keys.munge_key).decode()}


class _KeysProvider(ResourceProvider):
    def create(self, props: dict[str, Any]) -> CreateResult:
        outs = {**props, **key_outputs(generate_cluster_keys(props["label"]))}
        ident = hashlib.sha256(outs["curve_public"].encode()).hexdigest()[:16]
        return CreateResult(id_=f"{props['label']}-{ident}", outs=outs)

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> DiffResult:
        replace = olds.get("label") != news.get("label")
        return DiffResult(changes=replace, replaces=["label"] if replace else [],
                          delete_before_replace=False)


class ClusterKeys(Resource):
    """CURVE certificate (``curve_cert``, ZPL text), its public key and a base64 munge key."""

    curve_cert: pulumi.Output[str]
    curve_public: pulumi.Output[str]
    munge_key: pulumi.Output[str]

    def __init__(self, name: str, label: str, opts: pulumi.ResourceOptions | None = None):
        opts = pulumi.ResourceOptions.merge(
            opts, pulumi.ResourceOptions(additional_secret_outputs=_SECRET_OUTPUTS))
        super().__init__(_KeysProvider(), name,
                         {"label": label, "purpose": KEYS_PURPOSE, "curve_cert": None,
                          "curve_public": None, "munge_key": None}, opts)
