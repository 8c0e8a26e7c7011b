"""scripts/setup: what a first `make render` shows, and what it asks of apt.

The packaging check runs the real setuptools backend on the real pyproject.toml. The script
checks run scripts/setup from a scratch copy with doubles of apt-get, dpkg-query and python3 on
PATH (a real apt-get would install packages, a real pip takes minutes and the network): each
double records how it was called and prints as much as the real tool does.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def test_pyproject_builds_without_setuptools_warnings(tmp_path):
    code = ("import sys; from setuptools import build_meta; "
            "build_meta.prepare_metadata_for_build_wheel(sys.argv[1])")
    proc = subprocess.run([sys.executable, "-W", "always", "-c", code, str(tmp_path)], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "deprecated" not in proc.stderr.lower(), proc.stderr[-3000:]
    meta = next(tmp_path.glob("*.dist-info")) / "METADATA"
    assert "License-Expression: Apache-2.0" in meta.read_text()


def _double(path: Path, body: str) -> None:
    path.write_text("#!/bin/sh\n" + textwrap.dedent(body))
    path.chmod(0o755)


@pytest.fixture
def scratch(tmp_path):
    """A copy of the files scripts/setup reads, and a bin/ of doubles first on PATH."""
    root = tmp_path / "repo"
    (root / "scripts").mkdir(parents=True)
    for name in ("scripts/setup", "scripts/apt-packages.txt", "pyproject.toml"):
        shutil.copy(REPO / name, root / name)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "calls"
    # dpkg-query double: every package is installed except munge
    _double(bin_dir / "dpkg-query", """\
        for last; do :; done
        [ "$last" = munge ] && exit 1
        printf 'install ok installed'
        """)
    # apt-get double: records its arguments, talks as much as apt does
    _double(bin_dir / "apt-get", f"""\
        echo "apt-get $*" >> {calls}
        i=0; while [ $i -lt 40 ]; do echo "Get:$i http://deb.debian.org bookworm/main"; \
i=$((i+1)); done
        """)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    return root, bin_dir, calls, env


def _run(root: Path, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(root / "scripts" / "setup")], env=env, text=True,
                          capture_output=True, timeout=120)


def _mark_venv_current(root: Path) -> None:
    digest = hashlib.sha256((root / "pyproject.toml").read_bytes()).hexdigest()[:16]
    (root / ".venv").mkdir(exist_ok=True)
    (root / ".venv" / ".fluxinfra-setup").write_text(digest + "\n")


@pytest.mark.skipif(os.geteuid() != 0, reason="scripts/setup installs Debian packages only as root")
def test_missing_debian_packages_are_installed_without_upgrading_others(scratch):
    root, _, calls, env = scratch
    _mark_venv_current(root)
    _fluxinfra_double(root, "compiled", compile_rc=0)
    proc = _run(root, env)
    assert proc.returncode == 0, proc.stderr
    installs = [c for c in calls.read_text().splitlines() if " install " in c]
    assert len(installs) == 1 and "--no-upgrade" in installs[0].split()
    assert installs[0].split()[-1] == "munge", installs
    assert proc.stdout.splitlines() == [
        "setup: installing Debian packages: munge (log: .venv/setup-apt.log)"]
    assert "Get:39" in (root / ".venv" / "setup-apt.log").read_text()


def _python_double(bin_dir: Path, pip_rc: int) -> None:
    """python3 whose `-m venv DIR` makes DIR/bin/python, a pip that prints 90 lines of noise."""
    _double(bin_dir / "python3", f"""\
        [ "$1 $2" = "-m venv" ] || exit 3
        mkdir -p "$3/bin"
        cat > "$3/bin/python" <<'EOF'
        #!/bin/sh
        case "$*" in --version) echo "Python 3.11.0 (double)"; exit 0;; esac
        i=0; while [ $i -lt 90 ]; do echo "WARNING: Location 'x' is ignored ($i)"; i=$((i+1)); done
        echo "pip: the last line" >&2
        exit {pip_rc}
        EOF
        chmod +x "$3/bin/python"
        """)


def test_a_fresh_venv_prints_two_lines_not_pips_output(scratch):
    root, bin_dir, _, env = scratch
    _python_double(bin_dir, pip_rc=0)
    _fluxinfra_double(root, "compiled", compile_rc=0)
    proc = _run(root, env)
    assert proc.returncode == 0, proc.stderr
    lines = [line for line in proc.stdout.splitlines() if "Debian packages" not in line]
    assert lines == ["setup: installing fluxinfra and its test tools into .venv "
                     "(pip install -e '.[dev]'; log: .venv/setup-pip.log)",
                     "setup: .venv ready (Python 3.11.0 (double))"]
    assert "ignored (89)" in (root / ".venv" / "setup-pip.log").read_text()
    assert _run(root, env).stdout.count("pip install") == 0, "a second run must skip pip"


def test_a_failed_pip_install_shows_the_end_of_its_log(scratch):
    root, bin_dir, _, env = scratch
    _python_double(bin_dir, pip_rc=1)
    proc = _run(root, env)
    assert proc.returncode == 1
    assert "setup: pip install failed; the last lines of .venv/setup-pip.log:" in proc.stderr
    assert proc.stderr.rstrip().endswith("pip: the last line")
    assert not (root / ".venv" / ".fluxinfra-setup").exists()


def _fluxinfra_double(root: Path, state: str, compile_rc: int, *, status: str = "") -> None:
    """.venv/bin/fluxinfra whose `compile --status` reports ``state`` for two modules and whose
    `compile` prints a compiler's worth of noise and exits ``compile_rc``. ``status``, when
    given, is the whole shell body of `compile --status` instead."""
    (root / ".venv" / "bin").mkdir(parents=True, exist_ok=True)
    status = status or f"""\
          echo "compiled  fluxinfra.matcher.planner"
          echo "{state:9} fluxinfra.matcher.traverser"
          echo "(built in place by fluxinfra compile: somewhere)"; exit 0"""
    _double(root / ".venv" / "bin" / "fluxinfra", f"""\
        [ "$1" = compile ] || exit 3
        if [ "$2" = --status ]; then
{status}
        fi
        i=0; while [ $i -lt 50 ]; do echo "traverser.c:$i: warning: noise"; i=$((i+1)); done
        echo "gcc: the last line"
        exit {compile_rc}
        """)


@pytest.mark.parametrize("state", ["missing", "stale"])
def test_modules_not_compiled_from_their_current_source_are_compiled(scratch, state):
    root, _, _, env = scratch
    _mark_venv_current(root)
    _fluxinfra_double(root, state, compile_rc=0)
    proc = _run(root, env)
    assert proc.returncode == 0, proc.stderr
    assert [line for line in proc.stdout.splitlines() if "Debian" not in line] == [
        "setup: compiling the matcher's hot modules with Cython (fluxinfra compile; "
        "log: .venv/setup-compile.log)"]
    assert "noise" in (root / ".venv" / "setup-compile.log").read_text()


def test_compiled_modules_up_to_date_compile_nothing(scratch):
    root, _, _, env = scratch
    _mark_venv_current(root)
    _fluxinfra_double(root, "compiled", compile_rc=0)
    proc = _run(root, env)
    assert proc.returncode == 0 and "compiling" not in proc.stdout, proc.stdout


def test_a_failed_compile_leaves_plain_python_and_says_so(scratch):
    root, _, _, env = scratch
    _mark_venv_current(root)
    _fluxinfra_double(root, "missing", compile_rc=1)
    proc = _run(root, env)
    assert proc.returncode == 0, proc.stderr  # optional: the tests run on plain Python
    assert "setup: fluxinfra compile failed; the matcher runs as plain Python" in proc.stderr
    assert proc.stderr.rstrip().endswith("gcc: the last line")


def test_a_status_written_in_pieces_is_read_whole_before_it_is_searched(scratch):
    """The first module missing, the rest written a moment later: a search that stops at the
    first match must not end the writer early (a pipe under pipefail would then fail the
    check and skip the compile, unseen)."""
    root, _, _, env = scratch
    _mark_venv_current(root)
    _fluxinfra_double(root, "missing", compile_rc=0, status="""\
          echo "missing   fluxinfra.matcher.planner"
          sleep 0.3
          echo "compiled  fluxinfra.matcher.traverser" || exit 141
          exit 0""")
    proc = _run(root, env)
    assert proc.returncode == 0, proc.stderr
    assert "setup: compiling the matcher's hot modules" in proc.stdout, proc.stdout + proc.stderr


def test_a_failed_status_compiles_anyway_and_says_so(scratch):
    root, _, _, env = scratch
    _mark_venv_current(root)
    _fluxinfra_double(root, "compiled", compile_rc=0, status="""\
          echo "Traceback: the status broke" >&2; exit 1""")
    proc = _run(root, env)
    assert proc.returncode == 0, proc.stderr
    assert "setup: fluxinfra compile --status failed (above); compiling anyway" in proc.stderr
    assert "the status broke" in proc.stderr
    assert "setup: compiling the matcher's hot modules" in proc.stdout
