"""Kubernetes quantity parsing: exact values and Kubernetes' round-up rules."""

from fractions import Fraction

import pytest

from fluxinfra.errors import FluxinfraError
from fluxinfra.kube.quantity import (
    QuantityError,
    cpu_millicores,
    integer_quantity,
    memory_bytes,
    parse_quantity,
)


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("2", Fraction(2)),
        ("1500m", Fraction(3, 2)),
        ("0.5", Fraction(1, 2)),
        (".5", Fraction(1, 2)),
        ("5.", Fraction(5)),
        ("+3", Fraction(3)),
        ("100n", Fraction(1, 10**7)),
        ("100u", Fraction(1, 10**4)),
        ("16Gi", Fraction(16 * 2**30)),
        ("1Ki", Fraction(1024)),
        ("1Ei", Fraction(2**60)),
        ("1000M", Fraction(10**9)),
        ("1k", Fraction(1000)),
        ("1e3", Fraction(1000)),
        ("1E-3", Fraction(1, 1000)),
        ("12e+2", Fraction(1200)),
        (" 4 ", Fraction(4)),
        (7, Fraction(7)),
        (0.25, Fraction(1, 4)),
    ],
)
def test_parse_quantity_is_exact(text, value):
    assert parse_quantity(text) == value


@pytest.mark.parametrize(
    ("text", "millicores"),
    [("2", 2000), ("1500m", 1500), ("0.1", 100), ("1m", 1), ("0.0001", 1), ("100u", 1), ("0", 0)],
)
def test_cpu_millicores_rounds_up_like_milli_value(text, millicores):
    assert cpu_millicores(text) == millicores


@pytest.mark.parametrize(
    ("text", "nbytes"),
    [("16Gi", 17179869184), ("1000M", 10**9), ("128974848", 128974848), ("1.5", 2), ("1m", 1)],
)
def test_memory_bytes_rounds_up_like_value(text, nbytes):
    assert memory_bytes(text) == nbytes


@pytest.mark.parametrize("bad", ["", "abc", "1.2.3", "5Kb", "1 Gi", "--1", "1e", "Gi", "1e999"])
def test_malformed_quantity_names_field_and_value(bad):
    with pytest.raises(QuantityError) as info:
        parse_quantity(bad, "status.allocatable.memory")
    message = str(info.value)
    assert "status.allocatable.memory" in message
    assert repr(bad) in message


@pytest.mark.parametrize("bad", [None, True, [1], {"a": 1}, float("nan")])
def test_non_string_quantity_is_a_typed_error(bad):
    with pytest.raises(FluxinfraError, match="cpu"):
        cpu_millicores(bad)


def test_negative_quantity_is_rejected():
    with pytest.raises(QuantityError, match="negative"):
        integer_quantity("-1", "nvidia.com/gpu")
