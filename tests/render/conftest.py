"""The stacks, rendered once per session (rendering both takes a few seconds) and shared by the
render tests and the manifest/program consistency tests."""

from pathlib import Path

import pytest

from fluxinfra.render import render

ROOT = Path(__file__).resolve().parents[2]
STACK_NAMES = sorted(p.name[len("Pulumi."):-len(".yaml")]
                     for p in (ROOT / "stacks").glob("Pulumi.*.yaml"))


@pytest.fixture(scope="session")
def rendered():
    """stack name -> ``fluxinfra.render.Rendered`` for every ``stacks/Pulumi.<stack>.yaml``."""
    return {stack: render(stack, root=ROOT) for stack in STACK_NAMES}


@pytest.fixture(params=STACK_NAMES)
def stack_manifests(request, rendered):
    """(stack name, its rendered manifests), once per stack."""
    return request.param, rendered[request.param].manifests
