"""What the matcher and ``fluxinfra query`` do with bad input (docs/matcher.md, "Bad input"):
each case the fuzz tests found or the issue named, with the error it must give."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from fluxinfra.cli.query_session import QuerySession
from fluxinfra.inputs import INT64_MAX, MAX_VERTICES
from fluxinfra.matcher import Matcher, load_graph
from fluxinfra.matcher.errors import GraphError, JobspecError, MatcherError

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
ONE_CORE = {"version": 1, "resources": [{"type": "core", "count": 1}]}


def matcher() -> Matcher:
    return Matcher(load_graph(str(EXAMPLES / "graph.json")))


def graph_state(m: Matcher) -> tuple:
    g = m.graph
    return (list(g.type), list(g.name), list(g.uniq_id), dict(g._by_uniq),
            {s: [list(k) for k in kids] for s, kids in g.children.items()},
            {s: list(p) for s, p in g.parent.items()}, dict(g.roots), g.multi_parent,
            dict(g.given_paths))


def test_a_power_count_with_a_huge_operand_is_refused_at_uint_max():
    spec = {"version": 1, "resources": [{"type": "core", "count": {
        "min": 2, "max": 10**6, "operator": "^", "operand": 10**12}}]}
    with pytest.raises(JobspecError, match=r"count.operand: must be <= 4294967295"):
        matcher().match(spec)


def test_a_power_count_at_uint_max_is_computed_at_once():
    spec = {"version": 1, "resources": [{"type": "core", "count": {
        "min": 2, "max": 2**32 - 1, "operator": "^", "operand": 2**32 - 1}}]}
    assert matcher().match(spec).status == "ALLOCATED"


@pytest.mark.parametrize("duration", [float("nan"), float("inf"), -1, "1h", True])
def test_a_duration_that_is_no_finite_number_is_refused(duration):
    spec = {**ONE_CORE, "attributes": {"system": {"duration": duration}}}
    with pytest.raises(JobspecError, match="attributes.system.duration: must be a finite"):
        matcher().match(spec)


def test_a_fraction_of_a_second_is_one_second():
    spec = {**ONE_CORE, "attributes": {"system": {"duration": 0.1}}}
    assert matcher().match(spec).duration == 1


def test_a_hostlist_of_a_hundred_million_names_is_refused():
    with pytest.raises(MatcherError, match="names more than 1,000,000 hosts"):
        matcher().find("names=node[0-99999999]")


def test_an_r_nodelist_is_expanded_only_as_far_as_its_ranks():
    r = {"version": 1, "execution": {"R_lite": [{"rank": "0", "children": {"core": "0"}}],
                                     "nodelist": ["n[0-99999999]"]}}
    assert [load_graph(r, "rv1exec").name[v] for v in range(3)] == ["cluster0", "n0", "core0"]


def test_an_r_of_more_ranks_than_a_graph_holds_is_refused():
    r = {"version": 1, "execution": {"R_lite": [{"rank": "0-99999999", "children": {}}],
                                     "nodelist": ["n[0-99999999]"]}}
    with pytest.raises(GraphError, match=f"names more than {MAX_VERTICES:,} ids"):
        load_graph(r, "rv1exec")


def test_a_grug_multi_scale_past_any_graph_is_refused(tmp_path):
    recipe = (Path(__file__).resolve().parents[4] / "shared" / "fluxion-testdata" / "data" /
              "resource" / "grugs" / "tiny.graphml")
    if not recipe.is_file():
        pytest.skip("no Fluxion test data beside the checkout")
    text = recipe.read_text().replace('<data key="multi_scale">18</data>',
                                      '<data key="multi_scale">999999999999</data>')
    with pytest.raises(GraphError, match="past the 16,777,216 a graph may have"):
        load_graph(text, "grug")


def test_an_attach_refused_for_two_roots_leaves_the_graph_as_it_was():
    m = matcher()
    before = graph_state(m)
    with pytest.raises(GraphError, match="exactly one root.*the graph is unchanged"):
        m.add_subgraph({"graph": {"nodes": [
            {"id": "a", "metadata": {"type": "node", "uniq_id": 1000}},
            {"id": "b", "metadata": {"type": "core", "uniq_id": 1001}}],
            "edges": [{"source": "a", "target": "b"}]}})
    assert graph_state(m) == before


def test_an_attach_closing_a_cycle_through_a_second_parent_is_refused():
    m = matcher()
    before = graph_state(m)
    with pytest.raises(GraphError, match="form a cycle"):
        m.add_subgraph({"graph": {"nodes": [
            {"id": "r", "metadata": {"type": "rack", "uniq_id": 1,
                                     "paths": {"containment": "/demo0/rack0"}}},
            {"id": "x", "metadata": {"type": "node", "uniq_id": 1000,
                                     "paths": {"containment": "/demo0/rack0/x"}}}],
            "edges": [{"source": "r", "target": "x"}, {"source": "x", "target": "r"}]}})
    assert graph_state(m) == before
    assert m.find("status=up")  # (a cycle would loop here)


def test_an_attach_that_fits_is_taken():
    m = matcher()
    added = m.add_subgraph({"graph": {"nodes": [
        {"id": "1", "metadata": {"type": "rack", "paths": {"containment": "/demo0/rack0"}}},
        {"id": "900", "metadata": {"type": "node", "name": "extra0",
                                   "paths": {"containment": "/demo0/rack0/extra0"}}}],
        "edges": [{"source": "1", "target": "900"}]}})
    assert [m.graph.path(v) for v in added] == ["/demo0/rack0/extra0"]


def test_no_job_id_is_given_past_int64():
    m = matcher()
    m.match(ONE_CORE, jobid=INT64_MAX)
    jobs = dict(m.jobs)
    with pytest.raises(MatcherError, match="no job id left to give"):
        m.match(ONE_CORE)
    assert m.jobs == jobs  # nothing allocated under a job nobody knows


@pytest.mark.parametrize("jobid", [INT64_MAX + 1, -(2**63) - 1, 1.5, "1", True, [1]])
def test_a_job_id_outside_int64_is_refused(jobid):
    with pytest.raises(MatcherError, match="job id"):
        matcher().match(ONE_CORE, jobid=jobid)


def test_update_and_partial_cancel_refuse_the_wrong_json_types():
    m = matcher()
    r = m.match({"version": 1, "resources": [{"type": "slot", "count": 2, "label": "pod",
                                              "with": [{"type": "core", "count": 1}]}]})
    with pytest.raises(GraphError, match=r"graph.nodes\[0\]: a vertex is an object"):
        m.update_allocate(2, {"graph": {"nodes": [{"id": "0", "metadata": []}]}})
    with pytest.raises(GraphError, match="execution.starttime"):
        m.update_allocate(2, {"execution": {"starttime": "x", "expiration": 5}})
    with pytest.raises(MatcherError, match="partial cancel"):
        m.partial_cancel(r.jobid, ["node0", 5])
    slot = m.slot_R(r.jobid, 0)
    assert m.partial_cancel(r.jobid, {**slot, "attributes": []}) is False  # (one pod left)


def session(*lines: str, folder: Path) -> tuple[str, str]:
    out, err, stdout = io.StringIO(), io.StringIO(), io.StringIO()
    import os
    here = os.getcwd()
    os.chdir(folder)
    try:
        QuerySession(matcher(), out, "simple", err, stdout).run(list(lines) + ["stat"])
    finally:
        os.chdir(here)
    assert "Num. of Jobs Matched" in stdout.getvalue()  # the session went on to the end
    return out.getvalue(), err.getvalue()


def test_query_prints_one_line_for_a_jobspec_that_is_not_utf8_and_goes_on(tmp_path):
    (tmp_path / "bad.yaml").write_bytes(bytes(range(128, 256)))
    (tmp_path / "job.yaml").write_bytes((EXAMPLES / "job.yaml").read_bytes())
    out, err = session("match allocate bad.yaml", "match allocate job.yaml", folder=tmp_path)
    assert err == ("match_allocate: ERROR: Jobspec error for 1: jobspec bad.yaml: not UTF-8 "
                   "text (byte 0x80 at offset 0); save the file as UTF-8\n")
    assert "INFO: JOBID=1\nINFO: RESOURCES=ALLOCATED" in out


def test_query_refuses_a_device_a_directory_and_a_nul_byte(tmp_path):
    (tmp_path / "dir").mkdir()
    _, err = session("match allocate /dev/zero", "match allocate dir", "cat /dev/zero",
                     "match allocate a\0b", "attach missing.json", folder=tmp_path)
    assert err.splitlines() == [
        "ERROR: can't open /dev/zero: '/dev/zero' is a device, not a file; give a regular "
        "file or a pipe",
        "ERROR: can't open dir: 'dir' is a directory; give a file",
        "ERROR: can't open /dev/zero: '/dev/zero' is a device, not a file; give a regular "
        "file or a pipe",
        "ERROR: can't open a\0b",
        "ERROR: can't open missing.json"]


def test_query_gives_no_job_id_past_int64_after_an_update(tmp_path):
    (tmp_path / "job.yaml").write_bytes((EXAMPLES / "job.yaml").read_bytes())
    r = json.dumps(json.loads((EXAMPLES / "running.R.json").read_text()))
    (tmp_path / "r.json").write_text(r)
    out, err = session("update allocate jgf r.json 99999999999999999999 0 100",
                       "match allocate job.yaml", folder=tmp_path)
    assert f"INFO: JOBID={INT64_MAX}\n" in out
    assert err == (f"ERROR: no job id left to give: job {INT64_MAX}, the largest Fluxion "
                   "holds, was given; start a new session\n")
