"""The checked-in stubs are exactly what the proto generates (regenerate on any proto change)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from fluxinfra.service.codegen import GENERATED, STUBS, generate


def generated_with() -> str:
    text = (GENERATED / "fluxcli_pb2_grpc.py").read_text()
    return re.search(r"GRPC_GENERATED_VERSION = '([^']+)'", text).group(1)


def test_regenerating_the_stubs_changes_nothing(tmp_path: Path) -> None:
    tools = pytest.importorskip("grpc_tools", reason="grpcio-tools (dev extra) is not installed")
    from importlib.metadata import version

    if version("grpcio-tools") != generated_with():
        pytest.skip(f"stubs were generated with grpcio-tools {generated_with()}, this is "
                    f"{version('grpcio-tools')}; byte-equality only holds for the same version")
    assert tools
    generate(tmp_path)
    for name in (*STUBS, "__init__.py"):
        fresh, checked_in = (tmp_path / name).read_text(), (GENERATED / name).read_text()
        assert fresh == checked_in, (f"fluxinfra/service/_generated/{name} is stale; run "
                                     "python -m fluxinfra.service.codegen")
