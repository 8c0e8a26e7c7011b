"""``ServiceCerts``: the Fluxion service's mutual-TLS certificates, made once per stack.

A Pulumi dynamic resource, like :class:`fluxinfra.k8s.keys.ClusterKeys`: ``create`` makes a
private CA, a server certificate for the service's DNS names and a client certificate for the
scheduler (:func:`fluxinfra.pki.make_service_tls`, fresh keys from the OS RNG, valid ten years)
and Pulumi keeps them, the keys as secrets, in the stack's encrypted state. Every later
``pulumi up`` reuses them until the resource is replaced: a change of ``label``, of the DNS
names or of the client's name replaces it, and so does ``pulumi up --replace <urn>`` (rotation:
both Secrets change together and the Deployments roll). The CA's key is never stored: nothing
else can be issued under the CA. The offline render derives the same shapes from its seed
(:func:`offline_outputs`).
"""

from __future__ import annotations

import hashlib
from typing import Any

import pulumi
from pulumi.dynamic import CreateResult, DiffResult, Resource, ResourceProvider

from fluxinfra.pki import ServiceTls, make_service_tls

__all__ = ["CERTS_PURPOSE", "ServiceCerts", "cert_outputs", "offline_outputs"]

#: Marks the resource's inputs so the render mocks recognise it.
CERTS_PURPOSE = "fluxinfra-service-tls"
_SECRET_OUTPUTS = ["server_key", "client_key"]
_OUTPUTS = ["ca_cert", "server_cert", "server_key", "client_cert", "client_key"]


def cert_outputs(tls: ServiceTls) -> dict[str, str]:
    """The resource's outputs for some certificates (used by create and by the mocks)."""
    return {key: getattr(tls, key) for key in _OUTPUTS}


def offline_outputs(state: dict[str, Any], seed: bytes, label: str) -> dict[str, str]:
    """Outputs for a render or test under mocks: derived from ``seed`` and ``label``."""
    return cert_outputs(make_service_tls(list(state["names"]), str(state["client"]),
                                         seed=seed, label=label))


class _CertsProvider(ResourceProvider):
    def create(self, props: dict[str, Any]) -> CreateResult:
        tls = make_service_tls(list(props["names"]), str(props["client"]))
        outs = {**props, **cert_outputs(tls)}
        ident = hashlib.sha256(tls.ca_cert.encode()).hexdigest()[:16]
        return CreateResult(id_=f"{props['label']}-{ident}", outs=outs)

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> DiffResult:
        changed = [k for k in ("label", "names", "client") if olds.get(k) != news.get(k)]
        return DiffResult(changes=bool(changed), replaces=changed,
                          delete_before_replace=False)


class ServiceCerts(Resource):
    """PEM outputs: ``ca_cert``, ``server_cert``, ``server_key``, ``client_cert``,
    ``client_key`` (the keys are secret outputs)."""

    ca_cert: pulumi.Output[str]
    server_cert: pulumi.Output[str]
    server_key: pulumi.Output[str]
    client_cert: pulumi.Output[str]
    client_key: pulumi.Output[str]

    def __init__(self, name: str, label: str, names: list[str], client: str,
                 opts: pulumi.ResourceOptions | None = None):
        opts = pulumi.ResourceOptions.merge(
            opts, pulumi.ResourceOptions(additional_secret_outputs=_SECRET_OUTPUTS))
        super().__init__(_CertsProvider(), name,
                         {"label": label, "purpose": CERTS_PURPOSE, "names": list(names),
                          "client": client, **{key: None for key in _OUTPUTS}}, opts)
