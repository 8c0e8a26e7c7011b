"""Pulumi mocks for the component tests, installed before any component module is imported."""

import pulumi
import pytest

from fluxinfra.k8s.keys import KEYS_PURPOSE, key_outputs
from fluxinfra.k8s.queue import CERTS_PURPOSE, cert_outputs
from fluxinfra.render import plain
from fluxinfra.secrets import derive_cluster_keys


class Recorder(pulumi.runtime.Mocks):
    """Answers like a provider that echoes its inputs, and remembers every registration."""

    def __init__(self):
        self.resources: dict[str, tuple[str, dict]] = {}

    def new_resource(self, args):
        outs = {k: v for k, v in args.inputs.items() if k != "__provider"}
        if outs.get("purpose") == KEYS_PURPOSE:
            outs.update(key_outputs(derive_cluster_keys(b"unit-test-seed" * 3, outs["label"])))
        if outs.get("purpose") == CERTS_PURPOSE:
            outs.update(cert_outputs(list(outs["names"]), seed=b"unit-test-seed" * 3,
                                     label=outs["label"]))
        if args.typ == "command:local:Command":
            outs["stdout"] = "apiVersion: v1\nkind: Config\n"
        self.resources[args.name] = (args.typ, plain(outs))
        return f"{args.name}-id", outs

    def call(self, args):
        return {}


MOCKS = Recorder()
pulumi.runtime.set_mocks(MOCKS, project="fluxinfra", stack="unit", preview=False)


@pytest.fixture
def recorded():
    """name -> (type token, inputs) of every resource registered so far."""
    return MOCKS.resources
