"""Jobspec parsing errors name the path of the offending key."""

from __future__ import annotations

import pytest

from fluxinfra.matcher import Jobspec, JobspecError


def spec(**over):
    base = {"version": 1, "resources": [{"type": "slot", "count": 1, "label": "a",
                                         "with": [{"type": "core", "count": 1}]}]}
    base.update(over)
    return base


@pytest.mark.parametrize("doc, message", [
    ({"version": 1, "resources": [{"type": "node", "count": 1, "with": [
        {"type": "socket", "count": 1}, {"type": "core", "count": {"min": 0}}]}]},
     "resources[0].with[1].count.min: must be >= 1, got 0"),
    ({"version": 1, "resources": [{"type": "slot", "count": 1,
                                   "with": [{"type": "core", "count": 1}]}]},
     "resources[0].label: missing"),
    ({"version": 1, "resources": [{"type": "core", "count": -2}]},
     "resources[0].count: must be >= 1, got -2"),
    ({"version": 1, "resources": [{"type": "core", "count": 1, "colour": "red"}]},
     "resources[0].colour: unknown key"),
    ({"version": 0, "resources": []}, "version: must be an integer 1..9999"),
])
def test_errors_name_the_path(doc, message):
    with pytest.raises(JobspecError) as err:
        Jobspec.parse(doc)
    assert str(err.value).startswith(message)


def test_malformed_yaml_is_a_jobspec_error():
    with pytest.raises(JobspecError, match="malformed YAML"):
        Jobspec.parse("resources: [\n")


def test_count_range_calc():
    js = Jobspec.parse(spec(resources=[{"type": "core", "count": {
        "min": 2, "max": 10, "operator": "+", "operand": 3}}]))
    r = js.resources[0]
    assert (r.calc_count(1), r.calc_count(7), r.calc_count(100)) == (0, 5, 8)
