"""``fluxinfra.inputs``: files read bounded, text decoded, documents parsed as plain data."""

from __future__ import annotations

import os

import pytest

from fluxinfra.errors import ConfigError, FluxinfraError
from fluxinfra.inputs import (
    check_plain,
    decode,
    parse_json,
    parse_yaml,
    read_bytes,
    read_stream,
    shown,
)


def test_a_regular_file_is_read_up_to_its_limit(tmp_path):
    (tmp_path / "f").write_bytes(b"12345")
    assert read_bytes(tmp_path / "f", "f", limit=5) == b"12345"
    with pytest.raises(FluxinfraError, match="has 5 bytes, more than the 4 read"):
        read_bytes(tmp_path / "f", "f", limit=4)


@pytest.mark.parametrize(("path", "message"), [
    ("/dev/zero", "is a device, not a file"),
    ("/", "is a directory"),
    ("a\0b", "contains a NUL byte"),
    ("/no/such", "No such file or directory"),
    (3.5, "is not a file name"),
])
def test_what_is_no_file_is_refused(path, message):
    with pytest.raises(ConfigError, match=message):
        read_bytes(path, "stack", ConfigError)


def test_a_named_pipe_nobody_writes_to_reads_as_empty(tmp_path):
    os.mkfifo(tmp_path / "p")
    assert read_bytes(tmp_path / "p", "p") == b""


def test_a_stream_past_its_limit_is_refused():
    import io
    with pytest.raises(FluxinfraError, match="goes on past 10 bytes"):
        read_stream(io.BytesIO(b"x" * 11), "stdin", limit=10)


def test_text_that_is_not_utf8_names_the_byte():
    assert decode(b"\xef\xbb\xbfok", "f") == "ok"
    with pytest.raises(FluxinfraError, match=r"f: not UTF-8 text \(byte 0xff at offset 3\)"):
        decode(b"abc\xff", "f")


@pytest.mark.parametrize(("text", "message"), [
    ("d: 2024-01-01", "d: 2024-01-01 is a YAML date; quote it"),
    ("s: !!set {a, b}", "s: a YAML set"),
    ("b: !!binary aGk=", "b: YAML binary data"),
    ("a: &a [*a]", r"nested more than 100 levels deep \(or a YAML alias refers to itself\)"),
    ("1: one", "key 1 is an integer, not a string; quote it"),
    ("x: " + "[" * 200 + "]" * 200, "nested more than 100 levels deep"),
    ("x: " + "9" * 5000, "malformed YAML"),
    ("x: [", "malformed YAML at line 1"),
])
def test_yaml_holding_more_than_json_can_is_refused(text, message):
    with pytest.raises(ConfigError, match=message):
        parse_yaml(text, "stack", ConfigError)


def test_aliases_count_each_time_they_are_used():
    doc = "a: &a [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]\n" + "".join(
        f"l{i}: &l{i} [{', '.join([f'*{p}' for p in [('a' if i == 0 else f'l{i - 1}')] * 10])}]\n"
        for i in range(6))
    with pytest.raises(FluxinfraError, match="more than 1,000,000 values"):
        parse_yaml(doc, "doc")


def test_brackets_inside_quotes_and_comments_do_not_count_as_nesting():
    text = "a: '" + "[" * 300 + "'  # " + "{" * 300 + '\nb: "' + "[" * 300 + '"\n'
    assert parse_yaml(text, "doc") == {"a": "[" * 300, "b": "[" * 300}


@pytest.mark.parametrize("text", ["NaN", "[Infinity]", "[" * 100000 + "]" * 100000])
def test_json_without_json_numbers_or_past_the_recursion_limit_is_refused(text):
    with pytest.raises(FluxinfraError, match="JSON"):
        parse_json(text, "doc")


def test_check_plain_walks_any_depth_without_recursion():
    deep: list = []
    for _ in range(100000):
        deep = [deep]
    with pytest.raises(FluxinfraError, match="nested more than 100 levels"):
        check_plain(deep, "doc")
    check_plain({"a": [1, 2.5, None, True, {"b": "c"}]}, "doc")


def test_shown_is_short_and_safe_for_any_value():
    loop: list = []
    loop.append(loop)
    assert shown(loop) == "[[[[...]]]]"
    assert len(shown("x" * 10000)) < 70
    assert shown(10**5000) == "<an integer>"
