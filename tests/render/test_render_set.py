"""``fluxinfra render --set PATH=VALUE``: one stack value overridden for one render, as
``pulumi config set --path`` would set it, checked by the typed stack settings like the file."""

import io
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest
import yaml

from fluxinfra.cli import main as cli_main
from fluxinfra.errors import ConfigError
from fluxinfra.render import apply_overrides, render

ROOT = Path(__file__).resolve().parents[2]
CONFIG = {"fluxinfra:installer": '{"maxNodes": 8}',
          "fluxinfra:miniclusters": '[{"name": "hello", "size": 2}]',
          "fluxinfra:namespace": "fluxinfra-system"}


def test_paths_set_values_as_pulumi_config_set_path_does():
    out = apply_overrides(CONFIG, ["installer.source=prefix", "miniclusters[0].size=4",
                                   "fluxinfra:miniclusters[0].podGroup=true",
                                   "image.tag=0.2", "namespace=other"])
    assert yaml.safe_load(out["fluxinfra:installer"]) == {"maxNodes": 8, "source": "prefix"}
    assert yaml.safe_load(out["fluxinfra:miniclusters"]) == [
        {"name": "hello", "size": 4, "podGroup": True}]
    assert yaml.safe_load(out["fluxinfra:image"]) == {"tag": "0.2"}  # not a float
    assert out["fluxinfra:namespace"] == "other"
    assert CONFIG["fluxinfra:installer"] == '{"maxNodes": 8}', "the input is left alone"


@pytest.mark.parametrize("item, complaint", [
    ("installer.source", "no '='; accepted: PATH=VALUE"),
    ("a..b=1", "not a config path"),
    (".a=1", "not a config path"),
    ("a[x]=1", "not a config path"),
    ("[0]=1", "a config path starts with a key"),
    ("miniclusters[3].size=1", r"\[3\] names no member \(the list has 1\)"),
    ("miniclusters.size=1", r"\.size steps into a list; accepted: \[INDEX\]"),
    ("installer[0]=1", r"\[0\] indexes an object; accepted: \.KEY"),
    ("namespace.x=1", "fluxinfra:namespace holds a plain value"),
])
def test_a_bad_path_is_named_with_the_fix(item, complaint):
    with pytest.raises(ConfigError, match=complaint):
        apply_overrides(CONFIG, [item])


def test_the_render_uses_the_values_and_checks_them_as_the_file(tmp_path):
    rendered = render("dev", root=ROOT, sets=["installer.source=prefix",
                                              "installer.prefix=/opt/flux-0.88",
                                              "miniclusters[0].size=3"])
    job = next(m for m in rendered.manifests if m["kind"] == "Job")
    assert job["spec"]["completions"] == 3
    with pytest.raises(ConfigError, match="fluxinfra:miniclusters\\[0\\].size: 0"):
        render("dev", root=ROOT, sets=["miniclusters[0].size=0"])


def test_the_command_line_takes_set_and_answers_a_bad_one_in_one_line(tmp_path):
    err = io.StringIO()
    with redirect_stderr(err), redirect_stdout(io.StringIO()):
        code = cli_main(["render", "--stack", "dev", "--root", str(ROOT), "--out",
                         str(tmp_path / "out"), "--quiet", "--set", "installer[0]=x"])
    assert code == 2 and len(err.getvalue().splitlines()) == 1, err.getvalue()
    assert not (tmp_path / "out").exists()
    with redirect_stderr(io.StringIO()), redirect_stdout(io.StringIO()):
        code = cli_main(["render", "--stack", "dev", "--root", str(ROOT), "--out",
                         str(tmp_path / "ok"), "--quiet", "--set", "scheduler.policy=first"])
    assert code == 0
    scheduler = yaml.safe_load((tmp_path / "ok" / "deployment-fluxinfra-system-fluxion-"
                                "scheduler.yaml").read_text())
    assert "first" in " ".join(scheduler["spec"]["template"]["spec"]["containers"][0]["args"])
