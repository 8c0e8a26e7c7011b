"""What a new user meets first: --version, help texts, a missing extra, a closed pipe."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from fluxinfra import __version__
from fluxinfra.cli import EXTRA_MODULES, main
from fluxinfra.console import SIGPIPE_STATUS, colour

REPO = Path(__file__).resolve().parents[3]


def test_version(capsys):
    assert main(["--version"]) == 0
    assert capsys.readouterr().out == f"fluxinfra {__version__}\n"
    assert main(["-V"]) == 0


def _help(argv: list[str], capsys) -> str:
    with pytest.raises(SystemExit) as exit_:
        main([*argv, "--help"])
    assert exit_.value.code == 0
    return " ".join(capsys.readouterr().out.split())


def test_render_help_shows_its_defaults(capsys):
    text = _help(["render"], capsys)
    assert "(default: dev)" in text and "(default: build/manifests)" in text
    assert "$FLUXINFRA_RENDER_SEED, else the stack name, which is public" in text


@pytest.mark.parametrize(("option", "words"), [
    ("-f", "format of the -L file (default: grug)"),
    ("-F", "how matched resources are written"),
    ("-T", "flexible: sibling slots are alternatives"),
    ("-g", "format of the -o file"),
    ("-r", "accepted for compatibility"),
])
def test_query_options_say_what_they_do(option, words, capsys):
    assert words in _help(["query"], capsys), option


# -- a command whose extra is not installed ------------------------------------------------------
#: every module an extra brings, made unimportable: what `pip install fluxinfra` leaves out
BLOCK = "import sys\nfor m in {mods!r}: sys.modules[m] = None\n"


def _without_extras(*argv: str) -> subprocess.CompletedProcess:
    mods = [m for group in EXTRA_MODULES.values() for m in group]
    code = BLOCK.format(mods=mods) + "from fluxinfra.cli import main\nsys.exit(main(sys.argv[1:]))"
    return subprocess.run([sys.executable, "-c", code, *argv], cwd=REPO, text=True,
                          capture_output=True, timeout=120)


@pytest.mark.parametrize(("argv", "extra"), [
    (["render"], "pulumi"),
    (["service", "--recipe", "{nodes_per_rack: 2}"], "scheduler"),
    (["scheduler", "--kubeconfig", "/nonexistent"], "scheduler"),
])
def test_a_missing_extra_is_named_not_a_traceback(argv, extra):
    proc = _without_extras(*argv)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1, proc.stderr
    assert f"needs the '{extra}' extra" in proc.stderr
    assert f"pip install 'fluxinfra[{extra}]'" in proc.stderr


def test_the_matcher_commands_need_no_extra():
    proc = _without_extras("match", "examples/graph.json", "examples/job.yaml")
    assert proc.returncode == 0, proc.stderr
    proc = _without_extras("simulate", "examples/workloads/gpu-training.yaml", "--no-baseline")
    assert proc.returncode == 0, proc.stderr


def test_the_extras_table_covers_every_package_of_each_extra():
    """EXTRA_MODULES against pyproject.toml, through the installed packages' own metadata."""
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]
    dist_modules: dict[str, set[str]] = {}
    for module, dists in packages_distributions().items():
        for dist in dists:
            dist_modules.setdefault(dist.lower().replace("_", "-"), set()).add(module)
    for extra, modules in EXTRA_MODULES.items():
        for req in map(Requirement, extras[extra]):
            provided = dist_modules.get(req.name.lower().replace("_", "-"), set())
            assert provided & set(modules), f"[{extra}] {req.name}: provides {provided}"


# -- a reader that stops early -------------------------------------------------------------------
@pytest.fixture(scope="module")
def big_service():
    from fluxinfra.matcher import Matcher
    from fluxinfra.matcher.recipe import graph_from_recipe
    from fluxinfra.service.server import serve

    graph = graph_from_recipe({"nodes_per_rack": 64, "sockets": 2, "cores_per_socket": 16})
    server, port = serve(Matcher(graph), host="127.0.0.1", port=0)
    yield f"127.0.0.1:{port}"
    server.stop(grace=None)


def _piped(command: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    return subprocess.run(["bash", "-c", command + '; echo "status ${PIPESTATUS[0]}" >&2'],
                          cwd=REPO, env=env, text=True, capture_output=True, timeout=120)


def test_client_output_into_head_ends_quietly(big_service):
    proc = _piped(f"python -m fluxinfra.service.client --target {big_service} dump --graph "
                  "| head -n 2")
    assert proc.stdout.count("\n") == 2
    assert proc.stderr == f"status {SIGPIPE_STATUS}\n", proc.stderr


def test_fluxinfra_output_into_head_ends_quietly(tmp_path):
    cmds = tmp_path / "cmds.in"
    cmds.write_text("find status=up\n" * 200 + "quit\n")
    proc = _piped(f"fluxinfra query -L examples/graph.json -f jgf --commands {cmds} | head -n 1")
    assert proc.stdout.count("\n") == 1
    assert proc.stderr == f"status {SIGPIPE_STATUS}\n", proc.stderr


def test_a_query_skips_teardown_only_after_every_line_is_out(tmp_path):
    """`fluxinfra query` ends without the interpreter's teardown, after flushing: through a
    pipe (block-buffered stdout) whose reader takes everything, and into its -t file, every
    line arrives, as the in-process entry point (which returns normally) writes them."""
    cmds = tmp_path / "cmds.in"
    cmds.write_text("find status=up\nmatch allocate examples/job.yaml\n" * 60 + "quit\n")
    query = f"query -L examples/graph.json -f jgf --commands {cmds}"
    # stdout block-buffered, as for a user (whatever this test's own environment says)
    quick_exit = "env -u PYTHONUNBUFFERED fluxinfra"
    in_process = ("env -u PYTHONUNBUFFERED python -c "
                  "'import sys; from fluxinfra.cli import main; sys.exit(main())'")
    piped = _piped(f"{quick_exit} {query} | head -n 1000000")
    returned = _piped(f"{in_process} {query}")
    assert piped.stderr == returned.stderr == "status 0\n"
    lines = piped.stdout.splitlines()
    assert len(piped.stdout) > 2 * 65536  # past any pipe buffer
    assert lines == returned.stdout.splitlines()
    assert lines[-1] == "INFO: ============================="  # the last find's banner
    quick = _piped(f"{quick_exit} {query} -t {tmp_path / 'quick.out'}")
    slow = _piped(f"{in_process} {query} -t {tmp_path / 'slow.out'}")
    assert quick.stderr == slow.stderr == "status 0\n"
    out = (tmp_path / "quick.out").read_text()
    assert len(out) > 2 * 65536 and out.endswith("INFO: =============================\n")
    assert out == (tmp_path / "slow.out").read_text()


def test_colour_only_on_a_terminal(monkeypatch):
    class Tty:
        def isatty(self):
            return True

    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setenv("TERM", "xterm")
    assert colour("w", "1;33", Tty()) == "\033[1;33mw\033[0m"
    monkeypatch.setenv("NO_COLOR", "1")
    assert colour("w", "1;33", Tty()) == "w"
    monkeypatch.delenv("NO_COLOR")

    class Pipe:
        def isatty(self):
            return False

    assert colour("w", "1;33", Pipe()) == "w"
