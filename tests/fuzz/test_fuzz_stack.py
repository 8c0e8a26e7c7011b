"""Stack files (``stacks/Pulumi.<stack>.yaml``) through ``stack_config_values`` and
``load_stack_settings``, as ``fluxinfra render`` and the Pulumi program read them: settings, or
a ConfigError with a one-line message."""

from __future__ import annotations

import tempfile
from pathlib import Path

import yaml
from fuzzlib import clean, fuzz, json_values, mutated, mutations
from hypothesis import example
from hypothesis import strategies as st

from fluxinfra.errors import ConfigError
from fluxinfra.k8s.stack import load_stack_settings
from fluxinfra.render import stack_config_values

STACKS = Path(__file__).resolve().parents[2] / "stacks"
SEEDS = [p.read_text() for p in sorted(STACKS.glob("Pulumi.*.yaml"))]
DOCS = [yaml.safe_load(text) for text in SEEDS]
SNIPPETS = ["&a ", "*a", "<<: *a\n", "!!set {a, b}", "!!binary aGk=", "2024-01-01", ".nan", "[",
            "{", "- ", ": ", "\n  ", "~", "yes", "'", '"', "1e400", "9" * 5000, "!!python/none",
            "---\n", "? ", "|\n", "\x00", "\t", "fluxinfra:nope: 1\n", "{\"a\": " * 200]


def settings(data: bytes):
    """What render does with a stack file's bytes: its config, then the settings."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder, "Pulumi.fuzz.yaml")
        path.write_bytes(data)
        config = stack_config_values(path)
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in config.items())
    return load_stack_settings("fuzz", config)


def checked(data: bytes):
    result = clean(settings, data)
    if isinstance(result, Exception):
        assert isinstance(result, ConfigError), type(result)
        assert "\n" not in str(result), "a ConfigError on more than one line"
    return result


@fuzz(mutated(SEEDS, SNIPPETS).map(lambda t: t.encode("utf-8", "surrogatepass"))
       | st.binary(max_size=200))
@example(bytes(range(200)))
@example(b"- just\n- a list\n")
@example(b"config:\n  fluxinfra:namespace: 2024-01-01\n")
@example(b"config:\n  fluxinfra:cluster: !!set {a, b}\n")
@example(b"config: &a\n  fluxinfra:cluster: *a\n")
@example(b"a: &a [*a]\n")
@example(b"config:\n  fluxinfra:cluster: '" + b"[" * 5000 + b"'\n")
@example(b"config:\n  fluxinfra:cluster: {workers: " + b"9" * 5000 + b"}\n")
def test_stack_files(data):
    checked(data)


@fuzz(st.sampled_from(DOCS).flatmap(mutations) | json_values(8))
@example({"config": {"fluxinfra:cluster": {"workers": float("nan")}}})
@example({"config": {"fluxinfra:scheduler": {"enabled": [], "policy": {"a": 1}}}})
@example({"config": {"fluxinfra:miniclusters": [{"size": 10**30}]}})
@example({"config": {"fluxinfra:cluster": {"mode": "kind", "\n": None}}})
@example({"config": {"fluxinfra:\nnope": 1, "x": {"\n": {"secure": "a"}}}})
def test_stack_documents(doc):
    checked(yaml.safe_dump(doc, allow_unicode=True).encode())
